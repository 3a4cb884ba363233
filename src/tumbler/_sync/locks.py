# Generated from src/tumbler/_async/locks.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""The lock logic shared by every backend: clients, lock objects, holds.

Ownership lives on a ``Hold``: each acquisition gets a fresh unguessable owner id that only its
hold knows, never a thread-local, so two tasks sharing a lock object cannot release each other's
grant. Lock objects keep, per thread (blocking flavour) or per task (asyncio), the holds that
thread or task acquired: ``release()`` releases the caller's own, and re-entrancy counts the
caller's own.

How a hold can be lost (and how the holder learns it):

1. The lease runs out before a renewal succeeds: the backend was unreachable for longer than
   the lease, or the holder's process was paused (SIGSTOP, a long GC or C call, a blocked event
   loop) past it. Noticed at the client's local deadline by its deadline watch, whatever
   a renewal call is doing, or by ``held``/``check()``.
2. A renewal is refused: the backend no longer has the grant (it expired there, or an operator
   force-released it). Noticed at that renewal.
3. The client is closed, or the process forked (the child's copies are not held).
4. The backend's session expired (ZooKeeper's LOST). Noticed when the backend reports it.

Between "held" and "lost" a hold can be *in doubt*: a renewal could not reach the backend, or
a session-based backend reported its connection dropped (ZooKeeper's SUSPENDED). Then
``hold.held`` is False and ``check()`` raises ``HoldInDoubt`` until a renewal confirms the hold
(it may come back) or its lease runs out (it is lost).

Then ``hold.lost`` is True, the ``on_lost`` callbacks run (in a background worker of the
client: a thread, or a task on its event loop), and ``release()`` or leaving the ``with`` block
raises ``LockLost``.
The client's view is conservative: it gives a hold up (``local_deadline``) a little before the
backend could grant it to anyone else, timed from when the grant or renewal was *sent*.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import functools
import getpass
import logging
import os
import random
import secrets
import socket
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import replace
from types import TracebackType
from typing import Final, NoReturn, ParamSpec, TypeVar

from .. import _core as core
from .._acompat import (
    Event,
    ExitGuard,
    check_cancelled,
    check_loop,
    check_synchronizable,
    current_context,
    current_loop,
    shield,
)
from ..backends.contract import (
    Backend,
    Capabilities,
    Grant,
    GrantRequest,
    LockState,
    Renewal,
    SessionEvents,
    Watch,
)
from ..errors import (
    AcquireTimeout,
    AlreadyHeld,
    BackendUnavailable,
    ClientClosed,
    ForkedClient,
    HoldInDoubt,
    InvalidTimeout,
    InvalidTTL,
    LockLost,
    NotHeld,
    TumblerError,
)
from .renewal import Renewer

_log = logging.getLogger("tumbler")

P = ParamSpec("P")
R = TypeVar("R")


class _Unset:
    def __repr__(self) -> str:
        return "<the lock's timeout>"


_UNSET: Final = _Unset()

_HELD = "held"
_RELEASING = "releasing"
_RELEASED = "released"


def _eviction_note(forcer: str, reason: str | None) -> str:
    """What a forced release leaves for the holders it evicts: who forced it, when, and why
    (``forcer``: the client's host and pid)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (a container's uid)
        user = f"uid {os.getuid()}"
    moment = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    note = f"{user} on {forcer} at {moment}"
    return note if reason is None else f"{note}: {reason}"


class _Step(enum.Enum):
    RENEW = "renew"
    GIVE_BACK = "give back"


_RENEW: Final = _Step.RENEW
_GIVE_BACK: Final = _Step.GIVE_BACK


class Hold:
    """One grant of a lock: its fencing token, its lease, and whether it is still held.

    A hold is what ``with lock as hold`` gives; ``lock.hold`` gives the calling thread's or
    task's latest one. It can be passed to another thread or task, which may then release it.
    """

    def __init__(
        self,
        locks: Locks,
        request: GrantRequest,
        grant: Grant,
        sent_at: float,
        auto_renew: bool,
    ) -> None:
        #: the lock name (canonical form)
        self.name: str = grant.name
        #: the fencing token: greater than that of every earlier grant of this name
        self.token: int = grant.token
        #: the lease the backend granted, in seconds
        self.ttl: float = grant.granted_ttl
        self._locks = locks
        self._request = request
        self._auto_renew = auto_renew
        self._deadline = core.local_deadline(sent_at, grant.granted_ttl)
        self._state = _HELD
        self._lost_reason: str | None = None
        #: set on the backend's thread; acted on by the renewal worker
        self._in_doubt = False
        self._pending_loss: str | None = None
        self._given_back = False
        self._loss_reported = False
        #: set once the hold ended (released, or lost and the on_lost callbacks run): what
        #: wait_lost() waits for
        self._settled = False
        self._lost_wakers: set[Event] = set()
        self._callbacks: list[Callable[[Hold], object]] = []
        self._finish_callbacks: list[Callable[[Hold], None]] = []
        self._guard = threading.Lock()

    # -- what a holder asks ------------------------------------------------------------------

    @property
    def held(self) -> bool:
        """True while this hold is known valid: not released, not lost, not in doubt, and its
        lease has not run out."""
        return self._state == _HELD and not self.lost and not self._in_doubt

    @property
    def in_doubt(self) -> bool:
        """True while the client cannot confirm the hold (see the module docstring): the last
        renewal could not reach the backend, or the backend's connection dropped. It may be
        confirmed again; if not, it is lost when its lease runs out."""
        return self._in_doubt and self._state == _HELD and not self.lost

    @property
    def lost(self) -> bool:
        """True once the hold ended without being released (see the module docstring)."""
        if self._lost_reason is not None:
            return True
        if os.getpid() != self._locks._pid:
            return True
        return self._state == _HELD and self._locks._clock.now() >= self._deadline

    @property
    def lost_reason(self) -> str | None:
        """Why the hold was lost, or None."""
        if self._lost_reason is None and self.lost:
            if os.getpid() != self._locks._pid:
                return "the hold belongs to the parent process (inherited across fork)"
            return "the lease ran out before a renewal succeeded"
        return self._lost_reason

    @property
    def expires_in(self) -> float:
        """Seconds until the client gives this hold up unless it is renewed (0 if not held)."""
        if not self.held:
            return 0.0
        return max(0.0, self._deadline - self._locks._clock.now())

    def check(self) -> None:
        """Raise ``LockLost`` if the hold was lost, ``HoldInDoubt`` if it is in doubt,
        ``NotHeld`` if it was released."""
        if self.lost:
            raise LockLost(f"lock {self.name!r} was lost: {self.lost_reason}", lock_name=self.name)
        if self._state != _HELD:
            raise NotHeld(f"lock {self.name!r} was released", lock_name=self.name)
        if self._in_doubt:
            raise HoldInDoubt(
                f"lock {self.name!r} is in doubt: the backend cannot be reached to confirm it",
                lock_name=self.name,
            )

    def on_lost(self, callback: Callable[[Hold], object]) -> None:
        """Call ``callback(hold)`` once when the hold is found lost (at once if it already is).

        It runs in one of the client's background workers (threads in the blocking flavour,
        tasks on the event loop in asyncio): at the hold's local deadline at the latest, even
        while a renewal call is stuck on a silent network; or in the thread or task whose
        ``wait_lost()`` found the lease run out first. It must not block, and exceptions it
        raises are logged.
        """
        with self._guard:
            already = self._lost_reason is not None
            if not already:
                self._callbacks.append(callback)
        if already:
            self._run_callback(callback)

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Wait until the hold is found lost or ``timeout`` passes; True if it was lost.

        Returns at the client's deadline at the latest, even while a renewal is still waiting
        for an unreachable backend (the renewal worker reports the loss when that call ends).
        When it returns True, the ``on_lost`` callbacks have run (unless ``timeout`` ran out
        while another thread was still running them). Returns False once the hold is released
        without having been lost.
        """
        seconds = core.validate_timeout(timeout)
        clock = self._locks._clock
        end = None if seconds is None else clock.now() + seconds
        # a wake-up of this call's own: the clock moved by hand, or the loss was settled
        wake = Event()
        with self._guard:
            self._lost_wakers.add(wake)
        clock.add_listener(wake.set_threadsafe)
        try:
            while True:
                wake.clear()
                if self._settled:
                    break
                if self._lost_reason is None and self.lost:
                    # found at the deadline, even if the renewal worker is still waiting for
                    # the backend; the worker gives the grant back when it gets to it
                    self._mark_lost(self.lost_reason or "the hold was lost")
                    continue  # or another thread marked it first: wait for its callbacks
                now = clock.now()
                # the deadline may move (renewals), so wake there and look again
                held = self._state == _HELD and self._lost_reason is None
                left = self._deadline - now if held else None
                if end is not None:
                    if end - now <= 0:
                        break
                    left = end - now if left is None else min(left, end - now)
                wake.wait(None if left is None else clock.real_timeout(left))
        finally:
            clock.remove_listener(wake.set_threadsafe)
            with self._guard:
                self._lost_wakers.discard(wake)
        return self.lost

    def extend(self, ttl: float | None = None) -> None:
        """Set the lease to ``ttl`` seconds from now (default: the TTL asked for at acquire).

        For holds acquired with ``renew=False``; renewed holds are extended automatically.
        Raises ``LockLost`` if the backend no longer has the grant.
        """
        seconds = self._request.ttl if ttl is None else self._locks._lease(core.validate_ttl(ttl))
        with self._locks._operation(self.name):
            self.check()
            sent_at = self._locks._clock.now()
            granted = self._locks._backend.renew(self.name, self._request.owner, seconds)
        if granted is None:
            self._mark_lost(
                self._locks._eviction_of(self.name, self._request.owner)
                or "the backend no longer has this grant"
            )
            self.check()
            return
        self._deadline = core.local_deadline(sent_at, granted)
        self.ttl = granted

    def release(self) -> None:
        """Give the grant back. Raises ``LockLost`` (after releasing) if it had been lost.

        Runs to its end even if the calling task is cancelled. If the backend cannot be reached
        the error is raised, and the grant frees itself when its lease runs out (it is no
        longer renewed); but if the hold was lost already (its lease ran out while the holder
        was paused, say), ``LockLost`` is what the caller learns either way.
        """
        with self._locks._operation(self.name):
            self._release()

    def _release(self) -> None:
        if self.lost and self._lost_reason is None:
            # the lease ran out before anyone noticed (the process was paused): tell the
            # on_lost callbacks now, before the backend is asked anything
            self._mark_lost(self.lost_reason or "the lease ran out before a renewal succeeded")
        with self._guard:
            if self._state != _HELD:
                raise NotHeld(f"lock {self.name!r} was already released", lock_name=self.name)
            self._state = _RELEASING
        try:
            shield(self._release_grant())
        except TumblerError:
            self._raise_if_lost()  # lost anyway: that is what the holder must hear
            raise
        self._raise_if_lost()

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "a hold cannot leave its process: its lease is renewed by the client that was "
            "granted it, and its owner id must stay secret; pass the name and the fencing "
            "token instead"
        )

    def __copy__(self) -> NoReturn:
        raise TypeError(
            "a hold cannot be copied: a copy would share the grant's owner without being "
            "renewed or released with it; pass the hold itself"
        )

    def __deepcopy__(self, memo: object) -> NoReturn:
        self.__copy__()

    def __repr__(self) -> str:
        state = "held" if self.held else ("lost" if self.lost else self._state)
        return (
            f"<{type(self).__name__} {self.name!r} token={self.token} {state} "
            f"expires_in={self.expires_in:.3f}>"
        )

    # -- internals -----------------------------------------------------------------------------

    def _raise_if_lost(self) -> None:
        """Raise LockLost once per hold: a caller told of the loss is not told again."""
        if self._lost_reason is not None and not self._loss_reported:
            self._loss_reported = True
            raise LockLost(f"lock {self.name!r} was lost: {self._lost_reason}", lock_name=self.name)

    def _release_grant(self) -> bool:
        """Release at the backend and end the hold; False if the backend no longer had it."""
        # shielded: a caller cancelled meanwhile still has its hold ended, and told if lost
        try:
            try:
                was_live = self._locks._release_entry(self.name, self._request.owner)
            finally:
                # Renewal stops whatever the backend answered: if the release did not get
                # through, the grant frees itself when its lease runs out.
                self._finish()
            if not was_live:
                self._mark_lost(
                    self._locks._eviction_of(self.name, self._request.owner)
                    or "the backend no longer had this grant at release: its lease ran out "
                    "or it was force-released"
                )
            return was_live
        finally:
            self._settle()

    def _finish(self) -> None:
        with self._guard:
            self._state = _RELEASED
            callbacks, self._finish_callbacks = self._finish_callbacks, []
        for callback in callbacks:
            callback(self)

    def _mark_lost(self, reason: str) -> None:
        with self._guard:
            if self._lost_reason is not None:
                return
            self._lost_reason = reason
            callbacks, self._callbacks = self._callbacks, []
        _log.warning("lock %r lost: %s", self.name, reason)
        for callback in callbacks:
            self._run_callback(callback)
        self._settle()  # after the callbacks: a wait_lost() that returns finds them done

    def _settle(self) -> None:
        with self._guard:
            self._settled = True
            wakers = list(self._lost_wakers)
        for wake in wakers:
            wake.set_threadsafe()

    def _run_callback(self, callback: Callable[[Hold], object]) -> None:
        try:
            callback(self)
        except Exception:
            _log.exception("on_lost callback for lock %r failed", self.name)

    def _triage(self, now: float) -> float | _Step | None:
        """What the renewal worker must do for this hold, decided without I/O: ``RENEW``,
        ``GIVE_BACK`` (it was found lost: release the grant), a later due time, or None (the
        hold ended)."""
        if self._state != _HELD:
            return None
        if self._pending_loss is not None:
            self._mark_lost(self._pending_loss)
        elif now >= self._deadline:
            self._mark_lost("the lease ran out before a renewal succeeded")
        if self._lost_reason is not None:
            return None if self._given_back else _GIVE_BACK
        if not self._auto_renew and not self._in_doubt:
            return self._deadline
        return _RENEW

    def _renewal(self) -> Renewal:
        return Renewal(self.name, self._request.owner, self._request.ttl)

    def _renewed(self, granted: float | None, sent_at: float) -> float | None:
        """Take a renewal's answer; the next due time, or None."""
        if self._state != _HELD:
            return None
        now = self._locks._clock.now()
        if granted is not None and self._lost_reason is None and now >= self._deadline:
            # confirmed too late: the holder may already have been told the hold is lost, and
            # a hold reported lost never comes back
            self._mark_lost("the lease ran out before a renewal succeeded")
        if self._lost_reason is not None:
            return now  # found lost meanwhile (the deadline watch): give the grant back
        if granted is None:
            self._mark_lost(
                self._pending_loss
                or "a renewal was refused: the backend no longer has this grant "
                "(its lease ran out there, or it was force-released)"
            )
            return None
        self._in_doubt = False
        if not self._auto_renew:
            return self._deadline  # confirmed after a doubt, not extended
        self._deadline = core.local_deadline(sent_at, granted)
        self.ttl = granted
        return sent_at + core.renew_delay(granted)

    def _unreachable(self) -> float:
        """A renewal could not reach the backend: in doubt, and tried again soon."""
        self._in_doubt = True
        later = self._locks._clock.now()
        return min(self._deadline, later + core.retry_delay(self._deadline - later))

    def _expire(self, now: float) -> float | None:
        """The deadline watch: report the hold lost once its deadline passed; else the
        deadline to wake at (None: nothing to watch)."""
        if self._state != _HELD or self._lost_reason is not None:
            return None
        if now < self._deadline:
            return self._deadline
        self._mark_lost("the lease ran out before a renewal succeeded")
        return None

    def _give_back(self) -> None:
        """Release a grant the client gave up: a session-based backend would keep it for as
        long as the session lives, and others are spared the wait for their own expiry."""
        if self._given_back:
            return
        self._given_back = True
        self._locks._forget(id(self))
        try:
            self._locks._release_entry(self.name, self._request.owner)
        except TumblerError as error:
            _log.debug("could not give back lost lock %r: %s", self.name, error)


class _Primitive:
    """What every lock object shares: acquire/release per thread or task, ``with``, ``locked``."""

    _shared: bool = False
    #: the same thread/task may acquire again: counted (rlock) ...
    _reentrant: bool = False
    #: ... or as separate grants (semaphore permits); otherwise a second acquire is an error
    _multiple: bool = False

    def __init__(
        self,
        locks: Locks,
        name: str,
        *,
        limit: int,
        ttl: float | None,
        timeout: float | None,
        fair: bool,
        renew: bool,
    ) -> None:
        #: the lock name (canonical NFC form)
        self.name: str = core.validate_name(name)
        #: the lease asked for, in seconds
        self.ttl: float = (
            locks._default_ttl if ttl is None else locks._lease(core.validate_ttl(ttl))
        )
        #: how long ``with`` (and ``acquire()`` without a timeout) waits; None: for ever
        self.timeout: float | None = core.validate_timeout(timeout)
        #: grants in arrival order
        self.fair: bool = core.validate_flag(fair, "fair")
        #: renew the lease automatically while held
        self.renew: bool = core.validate_flag(renew, "renew")
        self._locks = locks
        self._limit = limit
        self._guard = threading.Lock()
        self._holds: dict[Hashable, list[Hold]] = {}
        self._depth: dict[Hashable, int] = {}
        self._entered: dict[Hashable, list[Hold]] = {}

    @property
    def hold(self) -> Hold | None:
        """The calling thread's/task's latest hold of this lock, or None."""
        with self._guard:
            holds = self._holds.get(current_context())
            return holds[-1] if holds else None

    def acquire(self, blocking: bool = True, timeout: float | _Unset | None = _UNSET) -> bool:
        """Acquire the lock; True if acquired, False if the timeout ran out first.

        ``blocking=False`` tries once. ``timeout`` (seconds) defaults to the lock's own
        ``timeout``; None or -1 waits for ever, 0 tries once.
        """
        if not blocking:
            if timeout is not _UNSET and timeout is not None and timeout != -1:
                raise InvalidTimeout("a non-blocking acquire cannot have a timeout")
            seconds: float | None = 0.0
        else:
            seconds = (
                self.timeout if isinstance(timeout, _Unset) else core.validate_timeout(timeout)
            )
        context = current_context()
        current = self._current(context)
        if current is not None and not self._multiple:
            if not self._reentrant:
                raise AlreadyHeld(
                    f"lock {self.name!r} is already held by this thread/task and is not "
                    "re-entrant (use rlock())",
                    lock_name=self.name,
                )
            current.check()
            with self._guard:
                self._depth[context] += 1
            return True
        request = self._locks._request(self.name, self._shared, self._limit, self.fair, self.ttl)
        hold = self._locks._acquire(request, seconds, self.renew)
        if hold is None:
            return False
        with self._guard:
            self._holds.setdefault(context, []).append(hold)
            self._depth[context] = 1
        hold._finish_callbacks.append(functools.partial(self._forget, context))
        return True

    def release(self) -> None:
        """Release the calling thread's/task's hold (its latest, for semaphores).

        Raises ``NotHeld`` if it holds none, and ``LockLost`` (after releasing) if the hold had
        been lost. A re-entrant lock is released when released as often as acquired.
        """
        context = current_context()
        hold = self._current(context)
        if hold is None:
            raise NotHeld(
                f"lock {self.name!r} is not held by this thread/task", lock_name=self.name
            )
        if self._reentrant:
            with self._guard:
                if self._depth[context] > 1:
                    self._depth[context] -= 1
                    return
        hold.release()

    def locked(self) -> bool:
        """Whether an acquire (non-fair) would have to wait now: asks the backend."""
        with self._locks._operation(self.name):
            state = self._locks._backend.inspect(self.name)
        return core.would_block([h.shared for h in state.holders], self._shared, self._limit)

    def __enter__(self) -> Hold:
        if not self.acquire():
            raise AcquireTimeout(
                f"lock {self.name!r} could not be acquired within {self.timeout} s",
                lock_name=self.name,
                backend=self._locks.url,
            )
        hold = self.hold
        assert hold is not None
        with self._guard:
            self._entered.setdefault(current_context(), []).append(hold)
        return hold

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        context = current_context()
        with self._guard:
            entered = self._entered.get(context)
            hold = entered.pop() if entered else None
            if entered is not None and not entered:
                del self._entered[context]
            if hold is not None and self._reentrant and self._depth.get(context, 0) > 1:
                self._depth[context] -= 1
                return
        if hold is None:
            return
        if hold._state != _HELD:
            # released inside the block, by hand or by close(): report a loss not yet reported
            if exc_type is None:
                hold._raise_if_lost()
            return
        try:
            hold.release()
        except (LockLost, BackendUnavailable):
            if exc_type is None:
                raise
            # never hide the exception already on its way out
            _log.warning("lock %r: hold lost or not released while leaving on an error", self.name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} ttl={self.ttl} fair={self.fair}>"

    def _current(self, context: Hashable) -> Hold | None:
        with self._guard:
            holds = self._holds.get(context)
            return holds[-1] if holds else None

    def _forget(self, context: Hashable, hold: Hold) -> None:
        with self._guard:
            holds = self._holds.get(context)
            if holds is not None and hold in holds:
                holds.remove(hold)
                if not holds:
                    del self._holds[context]
                    self._depth.pop(context, None)


class Lock(_Primitive):
    """A mutex: one holder at a time. Not re-entrant: a second acquire by the holder raises
    ``AlreadyHeld`` instead of waiting for itself."""

    def __init__(
        self,
        locks: Locks,
        name: str,
        *,
        ttl: float | None = None,
        timeout: float | None = None,
        fair: bool = False,
        renew: bool = True,
    ) -> None:
        super().__init__(locks, name, limit=1, ttl=ttl, timeout=timeout, fair=fair, renew=renew)


class RLock(Lock):
    """A re-entrant mutex: the holding thread/task may acquire again; one grant, counted."""

    _reentrant = True


class Semaphore(_Primitive):
    """Up to ``permits`` holders at a time; each acquire takes one permit with its own lease.

    Every client must use the same number of permits for a name (``PermitsMismatch``
    otherwise). A thread/task may hold several permits; ``release()`` returns its latest.
    """

    _shared = True
    _multiple = True

    def __init__(
        self,
        locks: Locks,
        name: str,
        permits: int,
        *,
        ttl: float | None = None,
        timeout: float | None = None,
        fair: bool = False,
        renew: bool = True,
    ) -> None:
        #: how many holders the semaphore admits at once
        self.permits: int = core.validate_permits(permits)
        super().__init__(
            locks, name, limit=self.permits, ttl=ttl, timeout=timeout, fair=fair, renew=renew
        )


class ReadLock(_Primitive):
    """The shared side of a read/write lock: any number of readers, no writer."""

    _shared = True

    def __init__(
        self,
        locks: Locks,
        name: str,
        *,
        ttl: float | None = None,
        timeout: float | None = None,
        fair: bool = False,
        renew: bool = True,
    ) -> None:
        super().__init__(locks, name, limit=0, ttl=ttl, timeout=timeout, fair=fair, renew=renew)


class RWLock:
    """A read/write lock: ``read()`` is shared among readers, ``write()`` is exclusive.

    The write side is the same as ``lock(name)``: a mutex of that name excludes readers too.
    Fair (arrival order) unless made with ``fair=False``, which lets a stream of readers keep a
    writer waiting.
    """

    def __init__(
        self,
        locks: Locks,
        name: str,
        *,
        ttl: float | None = None,
        timeout: float | None = None,
        fair: bool = True,
        renew: bool = True,
    ) -> None:
        self._read = ReadLock(locks, name, ttl=ttl, timeout=timeout, fair=fair, renew=renew)
        self._write = Lock(locks, name, ttl=ttl, timeout=timeout, fair=fair, renew=renew)
        self.name: str = self._read.name

    def read(self) -> ReadLock:
        return self._read

    def write(self) -> Lock:
        return self._write

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class Locks:
    """A client of one lock backend: makes lock objects and renews their leases.

    Made by ``connect()``. Use one client per process (per event loop in asyncio) and share it:
    it holds the backend connection(s) and the one renewal worker that serves every hold. A
    grant stays held, and renewed, until it is released, found lost, or the client closed: the
    client keeps it, not the caller's reference to the lock object or the hold.

    ``close()`` (or leaving ``with``) releases what is still held; so does the end of the
    program (interpreter exit; in asyncio, the end of ``asyncio.run()``) for a client left
    open, within a couple of seconds, so that an unreachable backend cannot hang the exit. A
    client is not usable in a process forked from the one that made it (``ForkedClient``), nor,
    in asyncio, from another event loop (``WrongEventLoop``): connect anew there.
    """

    def __init__(self, backend: Backend, *, default_ttl: float = core.DEFAULT_TTL) -> None:
        self._backend = backend
        self._clock = backend.clock
        self._min_ttl = backend.capabilities.min_ttl
        self._default_ttl = self._lease(core.validate_ttl(default_ttl))
        self._renewer: Renewer[Hold] = Renewer(backend.clock, self._serve_due, self._expire_overdue)
        self._pid = os.getpid()
        self._loop = current_loop()
        self._closed = False
        self._rng = random.Random()
        self._holder = f"{socket.gethostname()} pid={self._pid}"
        # The client keeps every hold it granted until it is released, lost or the client
        # closed: a hold must not run out because the caller dropped its lock object.
        self._live: dict[int, Hold] = {}
        self._live_guard = threading.Lock()
        # a client's waiters on one lock queue here, and only the first of them at the backend
        self._lines: dict[tuple[str, bool, int, bool], collections.deque[Event]] = {}
        # backend calls in flight, per thread/task, and the waits close() must end
        self._calls: collections.Counter[Hashable] = collections.Counter()
        self._calls_done = Event()
        self._watches: set[Watch] = set()
        if backend.session_events is not None:
            backend.session_events.subscribe(self._on_session_event)
        self._exit_guard = ExitGuard(self.close)

    @property
    def url(self) -> str:
        """The backend's URL, without credentials."""
        return self._backend.url

    @property
    def capabilities(self) -> Capabilities:
        return self._backend.capabilities

    # -- lock objects ------------------------------------------------------------------------

    def lock(
        self,
        name: str,
        *,
        ttl: float | None = None,
        timeout: float | None = None,
        fair: bool = False,
        renew: bool = True,
    ) -> Lock:
        """A mutex named ``name``.

        ``ttl``: the lease in seconds (default 30): if the holder dies, others can have the lock
        this long after its last renewal. While the holder lives its lease is renewed every
        ``ttl/3`` unless ``renew=False``. ``timeout``: how long ``with`` waits (None: for ever).
        ``fair=True``: waiters are granted in arrival order.
        """
        return Lock(self, name, ttl=ttl, timeout=timeout, fair=fair, renew=renew)

    def rlock(
        self,
        name: str,
        *,
        ttl: float | None = None,
        timeout: float | None = None,
        fair: bool = False,
        renew: bool = True,
    ) -> RLock:
        """A re-entrant mutex: like ``lock()``, but the holder may acquire it again."""
        return RLock(self, name, ttl=ttl, timeout=timeout, fair=fair, renew=renew)

    def semaphore(
        self,
        name: str,
        permits: int,
        *,
        ttl: float | None = None,
        timeout: float | None = None,
        fair: bool = False,
        renew: bool = True,
    ) -> Semaphore:
        """A semaphore admitting ``permits`` holders at once; each permit is its own lease."""
        return Semaphore(self, name, permits, ttl=ttl, timeout=timeout, fair=fair, renew=renew)

    def rwlock(
        self,
        name: str,
        *,
        ttl: float | None = None,
        timeout: float | None = None,
        fair: bool = True,
        renew: bool = True,
    ) -> RWLock:
        """A read/write lock: ``.read()`` shared, ``.write()`` exclusive.

        Fair by default: requests are granted in arrival order, so a reader that comes after a
        waiting writer waits behind it and a stream of readers cannot starve a writer (as
        Curator's and kazoo's read/write locks behave). ``fair=False`` lets readers overtake a
        waiting writer, for more read throughput at the risk of starving writers.
        """
        return RWLock(self, name, ttl=ttl, timeout=timeout, fair=fair, renew=renew)

    def synchronized(
        self,
        name: str,
        *,
        ttl: float | None = None,
        timeout: float | None = None,
        fair: bool = False,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Decorate a function so that every call runs holding the re-entrant mutex ``name``.

        A call that cannot have the lock within ``timeout`` raises ``AcquireTimeout``; a call
        whose hold is lost while it runs raises ``LockLost`` when it returns. Generator
        functions are refused (``TypeError``): the lock would be released when the generator is
        made, before its body runs; so are coroutine functions in the blocking client and plain
        ones in the asyncio client, which would give no exclusion either.
        """
        lock = self.rlock(name, ttl=ttl, timeout=timeout, fair=fair)

        def decorate(function: Callable[P, R]) -> Callable[P, R]:
            check_synchronizable(function)

            @functools.wraps(function)
            def locked_call(*args: P.args, **kwargs: P.kwargs) -> R:
                with lock:
                    return function(*args, **kwargs)

            return locked_call

        return decorate

    # -- operators ---------------------------------------------------------------------------

    def status(self, name: str) -> LockState:
        """Holders (with fencing token and lease left) and waiters of one lock."""
        canonical = core.validate_name(name)
        with self._operation(canonical):
            return self._backend.inspect(canonical)

    def status_all(self) -> list[LockState]:
        """Every lock that has holders or waiters."""
        with self._operation(None):
            return self._backend.inspect_all()

    def force_release(self, name: str, *, reason: str | None = None) -> int:
        """Remove every grant of ``name`` (for operators); returns how many were removed.

        Their holders find out at their next renewal (``LockLost``); a fencing-checking resource
        refuses their writes once the next holder (with a greater token) has written. Who forced
        it (user, host, pid), when, and ``reason`` are left on the backend for each evicted
        holder, whose ``lost_reason`` then says "force-released by ...", and logged here at
        WARNING; the holder's client logs the loss at WARNING too.
        """
        canonical = core.validate_name(name)
        note = _eviction_note(self._holder, core.validate_reason(reason))
        with self._operation(canonical):
            removed = self._backend.force_release(canonical, note)
        if removed:
            _log.warning("force-released lock %r (%d grant(s)): %s", canonical, removed, note)
        return removed

    def settle(self) -> None:
        """Wait until the renewals and expiry checks due on the clock have run.

        For tests on a ``ManualClock``: ``clock.advance(10); await locks.settle()``.
        """
        self._renewer.settle()

    def close(self) -> None:
        """Release every hold still held, stop renewing, and close the backend.

        Threads or tasks waiting for a lock of this client raise ``ClientClosed`` (they leave
        the line first); calls that start afterwards raise it too. Calls already talking to
        the backend are let finish before its connections close, so close() may take as long
        as the slowest of them (each is bounded by the backend's timeouts).
        """
        with self._live_guard:
            if self._closed:
                return
            if os.getpid() == self._pid:
                check_loop(self._loop)
            self._closed = True
            watches = list(self._watches)
            waiting = [wake for line in self._lines.values() for wake in line]
        self._exit_guard.disarm()
        if os.getpid() != self._pid:
            return  # the parent's connections and grants are the parent's to close
        for watch in watches:
            watch.wake()
        for wake in waiting:
            wake.set_threadsafe()
        with self._live_guard:
            holds = list(self._live.values())
        for hold in holds:
            if hold._state == _HELD:
                hold._mark_lost("the client was closed")
                try:
                    hold._release_grant()
                except TumblerError as error:
                    _log.warning("could not release lock %r on close: %s", hold.name, error)
        self._renewer.close()
        if self._backend.session_events is not None:
            self._backend.session_events.unsubscribe(self._on_session_event)
        self._calls_finished()
        self._backend.close()

    def __enter__(self) -> Locks:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"

    # -- internals ---------------------------------------------------------------------------

    def _operation(self, name: str | None) -> contextlib.AbstractContextManager[None]:
        """A call on the backend: refused once close() began, which waits for it to end."""
        return self._counted(name, refuse_if_closed=True)

    def _call(self) -> contextlib.AbstractContextManager[None]:
        """A backend call that must run even after close() began (a release): close() waits."""
        return self._counted(None, refuse_if_closed=False)

    @contextlib.contextmanager
    def _counted(self, name: str | None, *, refuse_if_closed: bool) -> Iterator[None]:
        # close() must not close the connections under a call: a driver would reconnect and
        # leave the new connection open, and an acquire could be granted a lock nobody renews
        context = current_context()
        with self._live_guard:
            if refuse_if_closed:
                self._check_usable(name)
            else:
                check_loop(self._loop)
            self._calls[context] += 1
        try:
            yield
        finally:
            with self._live_guard:
                self._calls[context] -= 1
                if not self._calls[context]:
                    del self._calls[context]
                closing = self._closed
            if closing:
                self._calls_done.set_threadsafe()

    def _calls_finished(self) -> None:
        """Wait until no backend call is in flight but the closing thread's/task's own (an
        ``on_lost`` callback may call close() from inside a release)."""
        me = current_context()
        while True:
            with self._live_guard:
                if all(context == me for context in self._calls):
                    return
                self._calls_done.clear()
            self._calls_done.wait(None)

    def _release_entry(self, name: str, owner: str) -> bool:
        """``backend.release``, counted in flight: it may run on after its caller was
        cancelled (``ashield``), and close() must wait for it."""
        with self._call():
            return self._backend.release(name, owner)

    def _check_usable(self, name: str | None) -> None:
        if os.getpid() != self._pid:
            raise ForkedClient(
                "this client was made in a parent process; call connect() again in the child",
                lock_name=name,
                backend=self.url,
            )
        check_loop(self._loop)
        if self._closed:
            raise ClientClosed("the client is closed", lock_name=name, backend=self.url)

    def _on_session_event(self, event: str) -> None:
        """The backend's session is in trouble (called on the backend's thread: no waiting).

        Holds are marked at once, so ``held`` turns False the moment the connection drops; the
        renewal worker then does the rest on its own thread or loop, where ``on_lost``
        callbacks are documented to run.
        """
        with self._live_guard:
            holds = list(self._live.values())
        for hold in holds:
            if event == SessionEvents.EXPIRED:
                hold._in_doubt = True
                hold._pending_loss = "the backend's session expired"
            elif event == SessionEvents.SUSPENDED:
                hold._in_doubt = True
        self._renewer.expedite()

    def _request(self, name: str, shared: bool, limit: int, fair: bool, ttl: float) -> GrantRequest:
        return GrantRequest(
            name=name,
            owner=secrets.token_urlsafe(18),
            shared=shared,
            limit=limit,
            fair=fair,
            ttl=ttl,
            holder=self._holder,
        )

    def _acquire(self, request: GrantRequest, timeout: float | None, renew: bool) -> Hold | None:
        """Try; if refused, wait for a change and try again, until granted or the timeout runs
        out.

        The watch is made before the first try (without I/O), so no change after that try goes
        unnoticed, and entered (subscribed, which may take a round trip) only if the first try
        failed: most acquisitions find the lock free. If entering may have missed a change,
        the watch says so and the lock is tried again before waiting. Every exit other than a
        grant withdraws the request (the waiter entry, or a grant whose reply an error or a
        cancellation cut off), so a timed-out or cancelled waiter leaves nothing behind.
        """
        with self._operation(request.name):
            if timeout == 0:
                return self._acquire_or_wait(request, timeout, renew)
            # One waiter per lock and client talks to the backend; the client's others queue
            # behind it here, in arrival order, at no cost to the backend or the connection pool.
            key = (request.name, request.shared, request.limit, request.fair)
            deadline = None if timeout is None else self._clock.now() + timeout
            turn = Event()
            with self._live_guard:
                line = self._lines.setdefault(key, collections.deque())
                line.append(turn)
            try:
                if not self._wait_turn(request.name, line, turn, deadline):
                    return None
                left = None if deadline is None else max(0.0, deadline - self._clock.now())
                return self._acquire_or_wait(request, left, renew)
            finally:
                with self._live_guard:
                    first = line[0] is turn
                    line.remove(turn)
                    if not line:
                        if self._lines.get(key) is line:
                            del self._lines[key]
                    elif first:
                        line[0].set_threadsafe()

    def _wait_turn(
        self,
        name: str,
        line: collections.deque[Event],
        turn: Event,
        deadline: float | None,
    ) -> bool:
        """Wait until ``turn`` is first in its line; False if the deadline passed first."""
        clock = self._clock
        clock.add_listener(turn.set_threadsafe)
        try:
            while True:
                turn.clear()
                with self._live_guard:
                    self._check_usable(name)  # close() sets every turn
                    if line[0] is turn:
                        return True
                now = clock.now()
                if deadline is not None and now >= deadline:
                    return False
                turn.wait(None if deadline is None else clock.real_timeout(deadline - now))
                check_cancelled()
        finally:
            clock.remove_listener(turn.set_threadsafe)

    def _acquire_or_wait(
        self, request: GrantRequest, timeout: float | None, renew: bool
    ) -> Hold | None:
        backend = self._backend
        caps = backend.capabilities
        clock = self._clock
        deadline = None if timeout is None else clock.now() + timeout
        # A single try leaves no waiter entry; every other try does: a release finds the
        # waiters to wake by their entries, and fair requests keep their place by them.
        queue = timeout != 0
        watch = backend.watch(request.name, request.owner)
        with self._live_guard:
            self._check_usable(request.name)  # close() wakes the waits it knows of
            self._watches.add(watch)
        try:
            hold = self._try(replace(request, queue=queue), renew)
            if hold is not None or not queue:
                return hold
            backoff = core.Backoff(caps.poll_base, caps.poll_cap, self._rng)
            with watch:
                retry = watch.retry_needed
                while True:
                    if retry:
                        hold = self._try(request, renew)
                        if hold is not None:
                            return hold
                    retry = True
                    now = clock.now()
                    if deadline is not None and now >= deadline:
                        break
                    pause = caps.recheck_interval if caps.push_wakeups else backoff.next()
                    pause = min(pause, caps.waiter_ttl / 3)
                    if deadline is not None:
                        pause = min(pause, deadline - now)
                    watch.wait(pause)
                    check_cancelled()
                    self._check_usable(request.name)
        except BaseException:
            shield(self._withdraw(request))
            raise
        finally:
            with self._live_guard:
                self._watches.discard(watch)
            watch.close()
        shield(self._withdraw(request))
        return None

    def _try(self, request: GrantRequest, renew: bool) -> Hold | None:
        sent_at = self._clock.now()
        grant = self._backend.try_grant(request)
        check_cancelled()
        if grant is None:
            return None
        if core.local_deadline(sent_at, grant.granted_ttl) > self._clock.now():
            hold = self._new_hold(request, grant, sent_at, renew)
            if hold is not None:
                return hold
        # The reply came too late to use the lease (the caller tries again), or close() began
        # meanwhile and nobody would renew it: give it back.
        shield(self._release_entry(request.name, request.owner))
        self._check_usable(request.name)
        return None

    def _withdraw(self, request: GrantRequest) -> bool:
        """Remove the request's entry, if any; False if the backend could not be reached."""
        try:
            self._release_entry(request.name, request.owner)
        except TumblerError as error:
            _log.warning(
                "could not withdraw from lock %r (its entry expires by itself): %s",
                request.name,
                error,
            )
            return False
        return True

    def _new_hold(
        self, request: GrantRequest, grant: Grant, sent_at: float, renew: bool
    ) -> Hold | None:
        """The hold for a grant, or None if close() began (it would never be renewed)."""
        hold = Hold(self, request, grant, sent_at, renew)
        key = id(hold)
        with self._live_guard:
            if self._closed:
                return None
            self._live[key] = hold
        hold._finish_callbacks.append(lambda _: self._forget(key))
        due = sent_at + core.renew_delay(grant.granted_ttl) if renew else hold._deadline
        self._renewer.schedule(hold, due)
        self._renewer.deadline_set(hold._deadline)
        return hold

    def _forget(self, key: int) -> None:
        with self._live_guard:
            self._live.pop(key, None)

    def _serve_due(self, holds: list[Hold]) -> list[float | None]:
        """The renewal worker's batch: every hold due now, renewed with one backend call."""
        clock = self._clock
        now = clock.now()
        after: list[float | None] = [None] * len(holds)
        renewing: list[int] = []
        for index, hold in enumerate(holds):
            step = hold._triage(now)
            if step is _RENEW:
                renewing.append(index)
            elif step is _GIVE_BACK:
                hold._give_back()
            else:
                after[index] = step
        if not renewing:
            return after
        batch = [holds[index] for index in renewing]
        sent_at = clock.now()
        # A renewal that outlived the leases it renews would only keep the worker from the
        # others: bounded by the least time left (the deadline watch reports losses meanwhile).
        bound = max(min(hold._deadline for hold in batch) - sent_at, core.MIN_CALL_BOUND)
        try:
            granted = self._backend.renew_all([hold._renewal() for hold in batch], bound)
        except BackendUnavailable as error:
            _log.warning("renewal of %d lock(s) failed, will retry: %s", len(batch), error)
            for index, hold in zip(renewing, batch, strict=True):
                after[index] = hold._unreachable()
            return after
        except TumblerError as error:
            for hold in batch:
                hold._mark_lost(f"renewal failed: {error}")
            return after
        for index, hold, ttl in zip(renewing, batch, granted, strict=True):
            if ttl is None and hold._pending_loss is None:
                hold._pending_loss = self._eviction_of(hold.name, hold._request.owner)
            after[index] = hold._renewed(ttl, sent_at)
        return after

    def _eviction_of(self, name: str, owner: str) -> str | None:
        """Why the backend no longer has ``owner``'s grant, if an operator forced it out."""
        try:
            note = self._backend.evicted(name, owner)
        except TumblerError as error:
            _log.debug("could not ask whether lock %r was force-released: %s", name, error)
            return None
        return None if note is None else f"force-released by {note}"

    def _expire_overdue(self) -> float | None:
        """The deadline watch: report every hold whose deadline passed as lost (the renewal
        worker gives their grants back); the next deadline to watch for."""
        with self._live_guard:
            holds = list(self._live.values())
        now = self._clock.now()
        earliest: float | None = None
        for hold in holds:
            deadline = hold._expire(now)
            if deadline is None:
                if hold._lost_reason is not None and not hold._given_back:
                    self._renewer.schedule(hold, now)
            elif earliest is None or deadline < earliest:
                earliest = deadline
        return earliest

    def _lease(self, ttl: float) -> float:
        """``ttl``, refused if shorter than the backend can keep renewed."""
        if ttl < self._min_ttl:
            raise InvalidTTL(
                f"ttl {ttl:g} s is shorter than the {self._min_ttl:g} s lease this backend "
                "can keep renewed",
                backend=self.url,
            )
        return ttl
