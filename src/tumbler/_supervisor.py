"""The process supervisor behind ``tumbler run``: a command run while a lock is held.

:func:`run_locked` takes the lock (waiting as asked), runs the command in a session of its own
and keeps the lease renewed while it runs; on Linux it adopts and reaps every process the
command leaves running, and holds the lock until they have exited too. SIGINT, SIGTERM and
SIGHUP end the wait, or are passed on to the command's family once the lock is held. If the
hold cannot be kept, the family gets SIGTERM, then SIGKILL, timed so that the SIGKILL comes
before the backend's lease could run out (a family that is stopped only once the hold is
found lost would still be working when another client is granted the lock). The lock is
released last, and the exit status returned: the command's, or one that says what went wrong
instead.

It knows nothing of the command line: the CLI parses the options, says how to connect and how
a message reaches the user (``complain``, which makes it safe for a terminal), and imports this
module only for ``tumbler run``. It needs neither click nor rich.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import subprocess
import sys
import threading
import time
import unicodedata
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

import tumbler
from tumbler import LockState
from tumbler import _core as core
from tumbler._url import parse_url
from tumbler.backends import URL_VARIABLE
from tumbler.errors import (
    EX_CANNOT_EXECUTE,
    EX_LOCK_LOST,
    EX_NOT_FOUND,
    EX_SIGNAL_BASE,
    EX_TEMPFAIL,
    AcquireTimeout,
    BackendUnavailable,
    InvalidTimeout,
    InvalidURL,
    LockLost,
    TumblerError,
)

__all__ = ["Complain", "Connect", "default_kill_after", "holder_for", "run_locked"]

#: says one line to the user (the CLI prefixes it and escapes what a terminal would act on)
Complain = Callable[[str], None]
#: opens the client ``run_locked`` takes the lock with (and closes)
Connect = Callable[[], tumbler.Locks]


class _Signalled(BaseException):
    """SIGINT or SIGTERM arrived while waiting: unwinds the wait, which withdraws the waiter."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _SignalRelay:
    """SIGINT, SIGTERM and SIGHUP for ``run``, by phase.

    Waiting: raise in the main thread, so the library withdraws the waiter entry and we exit.
    Starting the command: remember them, so the child is not started, or gets them once it is.
    Holding: pass them on to the command's family; its exit status becomes ours.
    Finishing: ignore them, so that releasing the lock is never cut short.
    """

    WAITING, STARTING, HOLDING, FINISHING = range(4)

    def __init__(self) -> None:
        self.phase = self.WAITING
        self.pending: list[int] = []
        self.family: _Family | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _SignalRelay:
        # SIGHUP too: a closed terminal must not leave the command running unguarded (it is
        # in a session of its own, so the hangup does not reach it).
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.phase == self.WAITING:
            self.phase = self.FINISHING  # a second signal must not interrupt the withdrawal
            raise _Signalled(signum)
        if self.phase == self.STARTING:
            self.pending.append(signum)
        elif self.phase == self.HOLDING and self.family is not None:
            self.family.signal(signum)

    def holding(self, family: _Family) -> None:
        self.family = family
        self.phase = self.HOLDING
        for signum in self.pending:
            family.signal(signum)


def _child_status(returncode: int) -> int:
    return EX_SIGNAL_BASE - returncode if returncode < 0 else returncode


#: prctl(2) option (<linux/prctl.h>): orphaned descendants are re-parented to this process
_PR_SET_CHILD_SUBREAPER = 36


def _set_child_subreaper(enabled: bool) -> None:
    """Become (or stop being) the reaper of our orphaned descendants; OSError if impossible.

    A process whose parent exits is re-parented to its nearest ancestor that is a subreaper
    instead of to init, so ``run`` sees (and must reap) everything the command leaves behind.
    Not inherited by children. One prctl(2) call through ctypes: the packages that wrap prctl
    (python-prctl, pyprctl) are unmaintained, and this is the one call needed.
    """
    if not sys.platform.startswith("linux"):
        raise OSError(errno.ENOSYS, "child subreapers exist on Linux only")
    import ctypes  # not at the top: status and release need no prctl

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, int(enabled), 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _descendants() -> list[tuple[int, int]]:
    """``(pid, process group)`` of every live process descended from this one.

    Read from /proc (none where there is no /proc). A process found here may exit before it
    is signalled; its pid can be reused only once it is reaped, by its parent, so the window
    for signalling a stranger is the time between this read and the kill.
    """
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat_file:
                stat = stat_file.read()
        except OSError:
            continue  # it exited meanwhile
        # the command name (in parentheses) may hold spaces and parentheses: split after it
        state, ppid, pgrp = stat.rpartition(b")")[2].split()[:3]
        if state not in (b"Z", b"X"):  # exited: nothing to signal, and it has no children
            children.setdefault(int(ppid), []).append((int(entry), int(pgrp)))
    found: list[tuple[int, int]] = []
    parents = [os.getpid()]
    while parents:
        for process in children.get(parents.pop(), ()):
            found.append(process)
            parents.append(process[0])
    return found


class _Family:
    """The command (our direct child) and the processes it starts.

    With ``wait_descendants`` this process is their subreaper: every descendant that is
    orphaned becomes our child, so once ``waitpid`` finds no child left, none of them is
    alive. Without it, only the command is waited for, and it is left a zombie until
    ``finish()``: its pid, which is its process group's id, cannot be taken by another
    process (and group) before the last signal to the group has gone out.
    """

    def __init__(self, child: subprocess.Popen[bytes], *, wait_descendants: bool) -> None:
        self.child = child
        self.wait_descendants = wait_descendants
        #: the command's exit status as Popen.returncode has it, once it has exited
        self.returncode: int | None = None
        #: nothing left to wait for: the command has exited (and, with wait_descendants,
        #: every process it started)
        self.done = False
        self._reaped = False

    def collect(self) -> None:
        """Reap whatever has exited, without blocking; update ``returncode`` and ``done``."""
        if self.wait_descendants:
            while True:
                try:
                    pid, wait_status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    self.done = True
                    return
                if pid == 0:
                    return
                if pid == self.child.pid:
                    self._reaped = True
                    self._exited(os.waitstatus_to_exitcode(wait_status))
        elif self.returncode is None:
            if not hasattr(os, "waitid"):  # macOS: reap at once; the group id is at risk
                pid, wait_status = os.waitpid(self.child.pid, os.WNOHANG)
                if pid:
                    self._reaped = True
                    self._exited(os.waitstatus_to_exitcode(wait_status))
                return
            info = os.waitid(os.P_PID, self.child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if info is not None:
                exited = info.si_code == os.CLD_EXITED
                self._exited(info.si_status if exited else -info.si_status)

    def _exited(self, returncode: int) -> None:
        self.returncode = returncode
        if not self.wait_descendants:
            self.done = True

    def finish(self) -> None:
        """Reap the command if it is left a zombie; ``returncode`` becomes Popen's."""
        if self.returncode is not None and not self._reaped:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.child.pid, 0)
            self._reaped = True
        self.child.returncode = self.returncode

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the command's process group and to every descendant outside it
        (one that made a group or session of its own)."""
        group = self.child.pid  # the command leads a session of its own: group id = its pid
        descendants = _descendants()
        # A group's id cannot be reused while the group has members or its leader's pid is
        # taken (not reaped); past that it may name a stranger's group.
        if not self._reaped or any(pgrp == group for _, pgrp in descendants):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signum)
        for pid, pgrp in descendants:
            if pgrp != group:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signum)


def _ignore_signal(signum: int, frame: FrameType | None) -> None:
    """A handler that does nothing: installed so that the signal reaches the wakeup fd."""


class _Wakeups:
    """What wakes ``run``'s main thread: a signal, a child's exit (SIGCHLD), a lost hold.

    Python runs signal handlers in the main thread only, but the kernel may hand a signal to
    any thread (the renewal worker's): a main thread blocked on a lock would then not run
    the handler (nor pass the signal on) until something else woke it. So it waits in
    select() on a pipe that every signal writes to (``signal.set_wakeup_fd``), and that
    ``notify()`` writes to from other threads.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._closed = False
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._previous_fd = -1
        self._previous_chld: Any = None

    def __enter__(self) -> _Wakeups:
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        # SIG_IGN would have the kernel reap children itself; a handler keeps them ours
        self._previous_chld = signal.signal(signal.SIGCHLD, _ignore_signal)
        return self

    def __exit__(self, *exc_info: object) -> None:
        signal.signal(signal.SIGCHLD, self._previous_chld)
        signal.set_wakeup_fd(self._previous_fd)
        with self._guard:  # a late notify() must not write to a reused descriptor
            self._closed = True
            os.close(self._read)
            os.close(self._write)

    def notify(self) -> None:
        """Wake the main thread (from any thread)."""
        with self._guard:
            if not self._closed:
                with contextlib.suppress(BlockingIOError):  # full: a wake-up is pending
                    os.write(self._write, b"\0")

    def wait(self, timeout: float | None = None) -> None:
        """Return once woken (or after ``timeout`` seconds); signal handlers have run."""
        select.select([self._read], [], [], timeout)
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read, 4096):
                pass


#: the most of a lease ``kill_after`` may take: the rest is for the renewals, which are due
#: every third of it, to get through before the command must be stopped
_KILL_AFTER_SHARE = 1 / 3


def default_kill_after(ttl: float) -> float:
    """Seconds between SIGTERM and SIGKILL unless told: 5, or a quarter of the lease if less."""
    return min(5.0, ttl / 4)


def _validate_kill_after(kill_after: float | None, ttl: float) -> float:
    if kill_after is None:
        return default_kill_after(ttl)
    seconds = core.validate_timeout(kill_after)
    if seconds is None:  # what waits for ever as a timeout
        raise InvalidTimeout(
            f"the time between SIGTERM and SIGKILL must be finite, not {kill_after}"
        )
    kill_after = seconds
    if kill_after > ttl * _KILL_AFTER_SHARE:
        raise InvalidTimeout(
            f"the time between SIGTERM and SIGKILL must be at most a third of the lease "
            f"({ttl * _KILL_AFTER_SHARE:.3g} s with a lease of {ttl:g} s), not {kill_after:g} s: "
            "the command must be stopped, SIGKILL included, before the lease can run out and "
            "another client be granted the lock; give a longer lease"
        )
    return kill_after


def _stop_lead(ttl: float, kill_after: float) -> float:
    """How long before the client would give the hold up its command gets SIGTERM: time for
    ``kill_after``, then for the SIGKILL to land on a loaded machine (a tenth of the lease, at
    most a second)."""
    return kill_after + min(1.0, ttl / 10)


#: how often run re-sends SIGKILL while processes remain (one forked as a round went out
#: was not in it)
_KILL_ROUND = 0.05

#: how long ``run`` waits for the lock in silence, then how often it says it still waits
_FIRST_WAIT_REPORT = 1.0
_WAIT_REPORT_EVERY = 10.0


def run_locked(
    connect: Connect,
    name: str,
    command: Sequence[str],
    *,
    ttl: float = 30.0,
    wait: float | None = None,
    kill_after: float | None = None,
    wait_descendants: bool = True,
    complain: Complain,
    report_wait: bool = True,
    leader: str | None = None,
) -> int:
    """Hold the lock ``name`` while ``command`` runs; return the exit status. With ``leader``,
    lead the election ``name`` instead, campaigning with that value (candidates lead in the
    order they came), and run the command while leading.

    ``connect()`` opens the client, once the signal handlers are in place (a signal while
    connecting ends the wait as one while waiting does). With ``wait_descendants``, the lock is
    held until every process the command started has exited. The command's family is stopped
    (SIGTERM, then SIGKILL ``kill_after`` seconds later: by default
    :func:`default_kill_after`, at most a third of the lease) once the hold is lost, or once
    no renewal got through for so long that the SIGKILL must go now to come before the lease
    could run out. A bad name, TTL, wait or ``kill_after`` raises before anything is
    connected; tumbler's errors from connecting or acquiring are raised, for the caller to
    report; everything about the command is said through ``complain``. With ``report_wait``,
    a wait of over a second is said too (whom it waits for, and how long it has), and again
    every ten seconds.
    """
    core.validate_name(name)
    ttl = core.validate_ttl(ttl)
    core.validate_timeout(wait)
    if leader is not None:
        core.validate_holder(leader)
    kill_after = _validate_kill_after(kill_after, ttl)
    with _SignalRelay() as relay:
        try:
            with connect() as locks:
                # a single try (--no-wait) has nothing to report
                say = complain if report_wait and wait != 0 else None
                with _WaitReport(locks, name, say):
                    hold = _take(locks, name, ttl, wait, leader)
                relay.phase = relay.STARTING
                if hold is None:
                    relay.phase = relay.FINISHING
                    complain(_busy_message(locks, name, wait))
                    return EX_TEMPFAIL
                if kill_after > hold.ttl * _KILL_AFTER_SHARE:
                    kill_after = hold.ttl * _KILL_AFTER_SHARE
                    complain(
                        f"the backend granted a lease of {hold.ttl:g} s: SIGKILL comes at most "
                        f"{kill_after:.3g} s after SIGTERM if the lock cannot be kept"
                    )
                return _supervise(
                    hold, list(command), kill_after, wait_descendants, relay, complain
                )
        except _Signalled as signalled:
            what = signal.Signals(signalled.signum).name
            complain(f"{what} while waiting for lock {name!r}: not run")
            return EX_SIGNAL_BASE + signalled.signum


def _take(
    locks: tumbler.Locks, name: str, ttl: float, wait: float | None, leader: str | None
) -> tumbler.Hold | None:
    """The lock ``name``, or with ``leader`` the leadership of the election ``name``; None
    if ``wait`` ran out first."""
    if leader is None:
        lock = locks.lock(name, ttl=ttl)
        return lock.hold if lock.acquire(timeout=wait) else None
    try:
        return locks.election(name, ttl=ttl).campaign(leader, timeout=wait)
    except AcquireTimeout:
        return None


class _WaitReport:
    """Says, through ``say``, whom a wait for the lock is for, once it has lasted
    ``_FIRST_WAIT_REPORT`` seconds and then every ``_WAIT_REPORT_EVERY``: an operator who
    runs ``tumbler run`` on a busy lock sees why nothing happens. Asks the backend from a
    thread of its own, so the wait itself is never held up; says nothing once it ended."""

    def __init__(self, locks: tumbler.Locks, name: str, say: Complain | None) -> None:
        self._locks = locks
        self._name = name
        self._say = say
        self._ended = threading.Event()
        self._said = threading.Lock()
        self._thread = threading.Thread(target=self._report, name="tumbler-wait", daemon=True)

    def __enter__(self) -> _WaitReport:
        if self._say is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._said:  # a line being said is said whole, before anything that follows
            self._ended.set()

    def _report(self) -> None:
        began = time.monotonic()
        pause = _FIRST_WAIT_REPORT
        while not self._ended.wait(pause):
            waited = time.monotonic() - began
            try:
                state = self._locks.status(self._name)
            except TumblerError:
                state = None
            message = _waiting_message(self._name, waited, state)
            with self._said:
                if self._ended.is_set():
                    return
                assert self._say is not None
                self._say(message)
            pause = _WAIT_REPORT_EVERY


def _waiting_message(name: str, waited: float, state: LockState | None) -> str:
    """What a wait of ``waited`` seconds for lock ``name`` is for, as ``state`` tells."""
    text = f"waiting for lock {name!r} ({waited:.0f} s so far)"
    if state is None:
        return text + ": its holders could not be read"
    if state.holders:
        # the description is the holding client's to write: complain() escapes what is in it
        holders = ", ".join(
            f"{holder.holder} (token {holder.token}, "
            + (
                "with its session"
                if holder.session
                else f"lease {max(0.0, holder.expires_in):.1f} s left"
            )
            + ")"
            for holder in state.holders
        )
        text += f": held by {holders}"
    if state.waiters > 1:
        text += f"; {state.waiters - 1} other waiter(s) in line"
    return text


def holder_for(command: Sequence[str]) -> str:
    """How ``tumbler run``'s client describes itself to operators (``tumbler status``): its
    host and pid, and the program it runs. Only the program's name: its arguments may carry
    secrets, and whoever may read the backend is not only who may read this host's process
    list."""
    program = os.path.basename(command[0]) if command else ""
    program = "".join("?" if unicodedata.category(char) == "Cc" else char for char in program)
    text = f"{os.uname().nodename} pid={os.getpid()} run: {program}"
    return text if len(text) <= core.MAX_HOLDER else text[: core.MAX_HOLDER - 1] + "…"


def _busy_message(locks: tumbler.Locks, name: str, wait: float | None) -> str:
    when = "is held by another owner" if not wait else f"could not be acquired within {wait:g} s"
    try:
        holders = locks.status(name).holders
    except TumblerError:
        holders = ()
    if holders:
        holder = holders[0]
        # the description is the holding client's to write: complain() escapes what is in it
        return f"lock {name!r} {when} (holder: {holder.holder}, token {holder.token})"
    return f"lock {name!r} {when}"


#: what the command learns of its grant: the lock's name, and the fencing token to hand the
#: resource it writes to
LOCK_VARIABLE = "TUMBLER_LOCK"
TOKEN_VARIABLE = "TUMBLER_TOKEN"
#: a segmented grant's segment: ``run`` takes a plain lock, so a value inherited from an outer
#: command would be wrong here
SEGMENT_VARIABLE = "TUMBLER_SEGMENT"


def _command_environment(hold: tumbler.Hold) -> dict[str, str]:
    """The command's environment: ours, with the grant (``$TUMBLER_LOCK``,
    ``$TUMBLER_TOKEN``) and with ``$TUMBLER_URL`` stripped of its credentials.

    The command does not need the credentials (tumbler holds the lock for it), and every
    process it starts would inherit a password. The URL stays without them rather than
    going, so that a tumbler inside the command names the same backend and is refused there
    (a clear permission error) instead of falling back to the default SQLite file, whose
    locks would exclude nobody else. A URL that does not parse is dropped: where its secret
    is cannot be told.
    """
    environment = dict(os.environ)
    environment.pop(SEGMENT_VARIABLE, None)
    environment[LOCK_VARIABLE] = hold.name
    environment[TOKEN_VARIABLE] = str(hold.token)
    url = environment.pop(URL_VARIABLE, None)
    if url is not None:
        try:
            parsed = parse_url(url)
        except InvalidURL:
            return environment
        if parsed.username is not None or parsed.password is not None:
            # in the text itself: urlunsplit() would turn "redis+unix://@/path" (no host)
            # into "redis+unix:/path"
            netloc = urlsplit(url).netloc
            url = url.partition("#")[0].replace(netloc, netloc.rpartition("@")[2], 1)
        environment[URL_VARIABLE] = url
    return environment


def _supervise(
    hold: tumbler.Hold,
    command: list[str],
    kill_after: float,
    wait_descendants: bool,
    relay: _SignalRelay,
    complain: Complain,
) -> int:
    """Run ``command`` under ``hold``; stop it if the hold is lost. Returns the exit status."""
    if relay.pending:
        relay.phase = relay.FINISHING
        _release_quietly(hold)
        signum = relay.pending[0]
        complain(f"{signal.Signals(signum).name} before the command started: not run")
        return EX_SIGNAL_BASE + signum
    if wait_descendants:
        try:
            _set_child_subreaper(True)
        except OSError as error:
            wait_descendants = False
            complain(
                f"cannot adopt what the command leaves running ({error.strerror or error}): "
                "the lock is released when the command exits"
            )
    try:
        with _Wakeups() as wakeups:
            return _supervise_family(
                hold, command, kill_after, wait_descendants, relay, wakeups, complain
            )
    finally:
        if wait_descendants:
            with contextlib.suppress(OSError):
                _set_child_subreaper(False)


def _supervise_family(
    hold: tumbler.Hold,
    command: list[str],
    kill_after: float,
    wait_descendants: bool,
    relay: _SignalRelay,
    wakeups: _Wakeups,
    complain: Complain,
) -> int:
    try:
        # A session of its own: the terminal's Ctrl-C reaches us only (we pass it on), and the
        # whole process group can be stopped if the lock is lost.
        child = subprocess.Popen(command, start_new_session=True, env=_command_environment(hold))
    except FileNotFoundError:
        relay.phase = relay.FINISHING
        _release_quietly(hold)
        complain(f"{command[0]}: command not found")
        return EX_NOT_FOUND
    except OSError as error:
        relay.phase = relay.FINISHING
        _release_quietly(hold)
        complain(f"{command[0]}: cannot execute: {error.strerror or error}")
        return EX_CANNOT_EXECUTE

    family = _Family(child, wait_descendants=wait_descendants)
    lost = threading.Event()

    def on_lost(_hold: tumbler.Hold) -> None:
        lost.set()
        wakeups.notify()

    relay.holding(family)
    hold.on_lost(on_lost)
    lead = _stop_lead(hold.ttl, kill_after)
    family.collect()
    while not (lost.is_set() or family.done):
        left = hold.gives_up_in - lead
        if left <= 0:
            break
        wakeups.wait(left)  # signal handlers (passing signals on) run here
        family.collect()

    if not family.done or lost.is_set():
        if hold.lost:
            reason = hold.lost_reason or "the lease ran out"
            what = f"lock {hold.name!r} was lost while the command ran ({reason})"
        else:
            what = (
                f"lock {hold.name!r} could not be renewed, and its lease could run out before "
                f"the command, given {kill_after:g} s to exit, had stopped"
            )
        outcome = "it was stopped"
        if family.returncode is not None:
            outcome = f"it had exited with status {_child_status(family.returncode)}"
            if not family.done:
                outcome += "; what it left running was stopped"
        _stop(family, wakeups, kill_after)
        relay.phase = relay.FINISHING
        family.finish()
        _release_quietly(hold)
        complain(f"{what}; {outcome}")
        return EX_LOCK_LOST

    relay.phase = relay.FINISHING
    family.finish()
    assert family.returncode is not None
    status = _child_status(family.returncode)
    try:
        hold.release()
    except LockLost as error:
        complain(f"{error}; the command had exited with status {status}")
        return EX_LOCK_LOST
    except BackendUnavailable as error:
        # The command is done; the grant frees itself when its lease runs out.
        complain(f"could not release lock {hold.name!r} (its lease will run out): {error}")
    return status


def _stop(family: _Family, wakeups: _Wakeups, kill_after: float) -> None:
    """SIGTERM to the command's family; SIGKILL to whatever is left ``kill_after`` s later."""
    family.signal(signal.SIGTERM)
    deadline = time.monotonic() + kill_after
    family.collect()
    while not family.done:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        wakeups.wait(left)
        family.collect()
    # Without wait_descendants the command may be done while what it left in its group runs
    # on: that ran without the lock as well, so the group gets SIGKILL in any case.
    while True:
        family.signal(signal.SIGKILL)
        family.collect()
        if family.done:
            return
        wakeups.wait(_KILL_ROUND)


def _release_quietly(hold: tumbler.Hold) -> None:
    with contextlib.suppress(TumblerError):
        hold.release()
