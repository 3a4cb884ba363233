"""The processes of a round: the fenced resource and the pool of workers.

The harness follows each worker through its history file (complete lines only), so it knows,
without asking the backend, who holds the lock and who is between its read and its write: the
moment the ``kill`` and ``pause`` faults aim at. A killed worker is replaced by a new process
(a new client id), so the load stays at ``count`` workers.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.context
import multiprocessing.process
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing import forkserver
from pathlib import Path
from typing import Protocol

from ..backends import URL_VARIABLE
from .backends import with_netloc
from .faults import ProxyControl
from .history import HistoryFile, HistoryTail, read_history
from .resource import ResourceClient, ResourceError

__all__ = [
    "ForkedProcess",
    "PoolError",
    "ResourceProcess",
    "WorkerPool",
    "WorkerProcess",
    "WorkerSlot",
]

#: how often the harness looks at the workers' histories while it waits for something
_POLL = 0.002


class PoolError(Exception):
    """A process of the round could not be started."""


def _child_environment() -> dict[str, str]:
    """The harness's environment without ``$TUMBLER_URL``: the children get the URL they need
    through the fork server, and a password in it must not be copied into every process's
    environment."""
    return {name: value for name, value in os.environ.items() if name != URL_VARIABLE}


# -- starting processes ------------------------------------------------------------------
#
# A round's processes are forked by multiprocessing's fork server, which has imported the
# worker, the resource and every built-in backend with its driver once: a fresh interpreter
# spent 0.2 to 0.45 s of CPU importing them for each worker (a round starts one more for each
# worker it kills), which is what the harness's own measurements then compete with. The
# fork server is a process of its own, without threads, started from an environment without
# ``$TUMBLER_URL``; each child is given its URL and environment through it (never on a
# command line), and starts a session of its own with its standard error in a file.

_forks_lock = threading.Lock()


def _forks() -> multiprocessing.context.ForkServerContext:
    """multiprocessing's fork server, started if it is not running (the preload is read
    when it starts, and the environment it starts from is its children's)."""
    from ..backends import builtin_descriptors

    context = multiprocessing.get_context("forkserver")
    with _forks_lock:
        context.set_forkserver_preload(
            [
                "__main__",
                "tumbler.torture.worker",
                "tumbler.torture.resource",
                *(descriptor.opener for descriptor in builtin_descriptors()),
            ]
        )
        saved = os.environ.pop(URL_VARIABLE, None)
        try:
            forkserver.ensure_running()
        finally:
            if saved is not None:
                os.environ[URL_VARIABLE] = saved
    return context


def _child(
    program: Callable[[list[str], str | None], int],
    argv: list[str],
    url: str | None,
    environment: dict[str, str],
    stderr: str | None,
) -> None:
    """What a forked child runs: ``program(argv, url)`` in a session of its own."""
    os.setsid()  # a Ctrl-C at the terminal reaches the harness only, which stops it in order
    if stderr is not None:
        descriptor = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(descriptor, 2)
        os.close(descriptor)
    os.environ.clear()
    os.environ.update(environment)
    sys.exit(program(argv, url))


class WorkerProcess(Protocol):
    """What the pool uses of a worker's process: ``subprocess.Popen``'s, and a
    :class:`ForkedProcess`'s."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...


class ForkedProcess:
    """A process the fork server made, with the part of ``subprocess.Popen``'s interface
    the pool uses (``returncode`` is ``-N`` for a process ended by signal N)."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self._process = process
        assert process.pid is not None
        self.pid: int = process.pid

    @classmethod
    def start(
        cls,
        program: Callable[[list[str], str | None], int],
        argv: list[str],
        *,
        url: str | None = None,
        stderr: Path | None = None,
    ) -> ForkedProcess:
        process = _forks().Process(
            target=_child,
            args=(
                program,
                argv,
                url,
                _child_environment(),
                None if stderr is None else str(stderr),
            ),
            daemon=True,
        )
        process.start()
        return cls(process)

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(f"process {self.pid}", timeout or 0.0)
        return code

    def terminate(self) -> None:
        _signal(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        _signal(self.pid, signal.SIGKILL)


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it is already gone
        os.kill(pid, signum)


class ResourceProcess:
    """The fenced resource in its own process (see :mod:`tumbler.torture.resource`)."""

    def __init__(self, directory: Path, fencing: str) -> None:
        # a Unix socket path is limited to 107 bytes: in the round's directory if it fits
        self.socket_path = directory / "resource.sock"
        if len(os.fsencode(self.socket_path)) > 100:
            self.socket_path = Path(tempfile.mkdtemp(prefix="torture-")) / "resource.sock"
        self.log_path = directory / "resource.jsonl"
        self.fencing = fencing
        self.process: ForkedProcess | None = None

    def start(self, timeout: float = 20.0) -> ResourceProcess:
        self.process = ForkedProcess.start(
            _resource_main,
            [str(self.socket_path), str(self.log_path), "--fencing", self.fencing],
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise PoolError(f"the resource exited with status {self.process.returncode}")
            try:
                client = ResourceClient(self.socket_path, client="harness", timeout=5)
            except ResourceError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise PoolError(f"the resource did not start within {timeout:g} s") from None
                time.sleep(0.01)  # nothing to wait on but its socket appearing
                continue
            try:
                client.ping()
            finally:
                client.close()
            return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop it (SIGTERM): it writes its ``final`` line and exits."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.socket_path.parent != self.log_path.parent:
            shutil.rmtree(self.socket_path.parent, ignore_errors=True)

    def history(self) -> HistoryFile:
        return read_history(self.log_path)


def _resource_main(argv: list[str], url: str | None) -> int:
    from .resource import main

    return main(argv)


def _worker_main(argv: list[str], url: str | None) -> int:
    from .worker import main

    return main(argv, url=url)


@dataclass
class WorkerSlot:
    """One place in the pool, held by one worker process at a time."""

    index: int
    incarnation: int
    client: str
    process: WorkerProcess
    history: Path
    tail: HistoryTail
    #: starting, idle, waiting, holding, critical (read done, write pending), stopped, failed
    state: str = "starting"
    acq: str | None = None
    token: int | None = None
    #: the last grant whose work the worker recorded as ended (it releases next)
    ended: str | None = None
    paused: bool = False
    #: the current hold thinks long (a good target for server and network faults)
    long: bool = False
    #: when the worker's read was answered, and until when it thinks before writing (ns)
    read_at: int = 0
    writes_at: int = 0
    #: the proxy of its own it reaches the server through, if the pool gives it one
    proxy: ProxyControl | None = None
    #: when its current acquire began (ns), while it waits
    waiting_since: int = 0


@dataclass
class WorkerPool:
    """``count`` worker processes on one lock and one resource."""

    url: str
    lock: str
    resource: Path
    directory: Path
    count: int
    ttl: float
    think: float
    acquire_timeout: float
    idle: float
    seed: int
    #: the fraction of holds that think for most of a lease
    long_hold: float = 0.0
    #: how many leases those think at most
    long_max: float = 1.2
    slots: list[WorkerSlot] = field(default_factory=list)
    #: slots whose worker was killed and replaced (their histories are part of the round)
    retired: list[WorkerSlot] = field(default_factory=list)
    #: clients the harness killed
    killed: set[str] = field(default_factory=set)
    #: ``time.monotonic_ns()`` of every grant seen, in order
    grant_times: list[int] = field(default_factory=list)
    #: clients that exited other than on request, and how
    bad_exits: dict[str, int] = field(default_factory=dict)
    #: the address ``url`` names (host, port): each worker then reaches it through a proxy of
    #: its own, so that a network fault can hit one worker alone
    own_proxies: tuple[str, int] | None = None
    #: the primitive the workers take (see :mod:`tumbler.torture.worker`) and its permits
    primitive: str = "lock"
    permits: int = 3
    #: the locks' lock-delay (0: none)
    lock_delay: float = 0.0
    #: the flavours the slots take in turn (slot 0 the first, slot 1 the second, ...): every
    #: round exercises each, without doubling the rounds
    flavours: tuple[str, ...] = ("sync", "asyncio")

    def flavour_of(self, index: int) -> str:
        """The flavour of the worker in slot ``index`` (its replacements keep it)."""
        return self.flavours[index % len(self.flavours)]

    def _spawn(self, index: int, incarnation: int) -> WorkerSlot:
        client = f"w{index}" if incarnation == 0 else f"w{index}r{incarnation}"
        history = self.directory / f"{client}.jsonl"
        argv = [
            "--lock", self.lock,
            "--resource", str(self.resource),
            "--history", str(history),
            "--client", client,
            "--ttl", repr(self.ttl),
            "--think", repr(self.think),
            "--acquire-timeout", repr(self.acquire_timeout),
            "--idle", repr(self.idle),
            "--seed", str(self.seed * 1000 + index * 100 + incarnation),
            "--long-hold", repr(self.long_hold),
            "--long-max", repr(self.long_max),
            "--primitive", self.primitive,
            "--permits", str(self.permits),
            "--lock-delay", repr(self.lock_delay),
            "--flavour", self.flavour_of(index),
        ]  # fmt: skip
        url, proxy = self.url, None
        if self.own_proxies is not None:
            try:
                proxy = ProxyControl.start(*self.own_proxies)
            except OSError as error:
                raise PoolError(f"no proxy for worker {client}: {error}") from error
            url = with_netloc(self.url, "127.0.0.1", proxy.port)
        process = ForkedProcess.start(
            _worker_main, argv, url=url, stderr=self.directory / f"{client}.stderr"
        )
        return WorkerSlot(
            index, incarnation, client, process, history, HistoryTail(history), proxy=proxy
        )

    def start(self, timeout: float = 60.0) -> None:
        """Start the workers and wait until each has connected."""
        self.slots = [self._spawn(index, 0) for index in range(self.count)]
        self.wait_started(timeout)

    def wait_started(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while any(slot.state in ("starting", "failed") for slot in self.slots):
            self.poll()
            for slot in self.slots:
                if slot.state == "failed":
                    raise PoolError(f"worker {slot.client} failed: {self._last_error(slot)}")
                if slot.state == "starting" and slot.process.poll() is not None:
                    raise PoolError(
                        f"worker {slot.client} exited with status {slot.process.returncode} "
                        f"before it started: {self._stderr_tail(slot)}"
                    )
            if time.monotonic() > deadline:
                waiting = "; ".join(
                    self._why_not_started(slot) for slot in self.slots if slot.state == "starting"
                )
                raise PoolError(f"the workers did not connect within {timeout:g} s: {waiting}")
            time.sleep(0.01)

    def _why_not_started(self, slot: WorkerSlot) -> str:
        """What a worker that has not connected has recorded: it is the only account there is
        of a start that failed on a busy machine."""
        errors = [
            str(event.get("why", "?")).strip().splitlines()[-1:]
            for event in read_history(slot.history).events
            if event.get("ev") == "connect_error"
        ]
        alive = "running" if slot.process.poll() is None else f"exited {slot.process.returncode}"
        last = errors[-1][0] if errors and errors[-1] else "none"
        stderr = self._stderr_tail(slot) or "empty"
        return (
            f"{slot.client} (pid {slot.process.pid}, {alive}): {len(errors)} connect errors, "
            f"the last: {last}; stderr: {stderr}"
        )

    @staticmethod
    def _last_error(slot: WorkerSlot) -> str:
        for event in reversed(read_history(slot.history).events):
            if event.get("ev") == "error":
                lines = str(event.get("what", "")).strip().splitlines()
                return lines[-1] if lines else "?"
        return "?"

    def _stderr_tail(self, slot: WorkerSlot) -> str:
        try:
            text = (self.directory / f"{slot.client}.stderr").read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-3:])

    # -- following the histories ----------------------------------------------------------

    def poll(self) -> None:
        """Read what the workers recorded since the last poll and update their states."""
        for slot in self.slots:
            self._follow(slot)

    def _follow(self, slot: WorkerSlot) -> None:
        for event in slot.tail.new_events():
            ev = event.get("ev")
            if ev == "start":
                slot.state = "idle"
            elif ev == "acquire":
                slot.state, slot.acq, slot.token = "waiting", event.get("acq"), None
                slot.waiting_since = int(event["t"])
            elif ev == "grant":
                slot.state, slot.token = "holding", event.get("token")
                self.grant_times.append(int(event["t"]))
            elif ev == "no_grant":
                slot.state = "idle"
            elif ev == "op":
                # the first request of a hold (the one that records its think) opens the
                # window the faults aim at; a shared holder's second request is a read too
                read_ok = (
                    event.get("kind") == "read"
                    and event.get("outcome") == "ok"
                    and "think" in event
                )
                slot.state = "critical" if read_ok else "holding"
                think = float(event.get("think", 0)) if read_ok else 0.0
                slot.long = think > self.ttl / 4
                slot.read_at = int(event["t"])
                slot.writes_at = slot.read_at + int(think * 1e9)
            elif ev == "work_end":
                slot.ended = event.get("acq")
            elif ev == "release":
                slot.state, slot.acq, slot.token = "idle", None, None
            elif ev == "stop":
                slot.state = "stopped"
            elif ev == "error":
                slot.state = "failed"

    def find_holder(
        self,
        timeout: float,
        *,
        long: bool = False,
        accept: Callable[[WorkerSlot], bool] = lambda slot: True,
    ) -> WorkerSlot | None:
        """The first worker seen between its read and its write (in a long hold, if
        ``long``; one that ``accept`` takes), within ``timeout``.

        Only a worker in the first half of its think time counts: seen later, its write may
        be on its way before the signal lands (the harness sees its history a few
        milliseconds late on a busy machine), and the fault would miss the window it aims at.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            now = time.monotonic_ns()
            for slot in self.slots:
                if (
                    slot.state == "critical"
                    and not slot.paused
                    and (slot.long or not long)
                    and now < (slot.read_at + slot.writes_at) // 2
                    and accept(slot)
                ):
                    return slot
            time.sleep(_POLL)
        return None

    def find_waiter(self, timeout: float, queued_for: float) -> WorkerSlot | None:
        """A worker that has waited in its acquire for at least ``queued_for`` seconds (so
        its request is in the line), while another holds the lock, within ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            now = time.monotonic_ns()
            held = any(slot.state in ("holding", "critical") for slot in self.slots)
            for slot in self.slots:
                if (
                    held
                    and slot.state == "waiting"
                    and not slot.paused
                    and now - slot.waiting_since >= queued_for * 1e9
                ):
                    return slot
            time.sleep(_POLL)
        return None

    def holding(self, slot: WorkerSlot, acq: str) -> bool:
        """Whether the worker in ``slot`` is still in the work of grant ``acq``, as far as its
        history shows now. A worker records the end of its work before it releases, so True
        means that its release, if any, began after this call did: what a fault that has begun
        needs to know to have hit the hold."""
        self._follow(slot)
        return slot.acq == acq and slot.state in ("holding", "critical") and slot.ended != acq

    def grant_after(self, t_ns: int, timeout: float) -> int | None:
        """Wait until some worker is granted the lock after ``t_ns``; its grant time or None."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            if self.grant_times and self.grant_times[-1] > t_ns:
                for t in self.grant_times:
                    if t > t_ns:
                        return t
            if time.monotonic() > deadline:
                return None
            time.sleep(0.005)

    # -- faults on workers ---------------------------------------------------------------

    def kill(self, slot: WorkerSlot) -> str | None:
        """SIGKILL the worker; returns the grant it held when it died (None if it held none)."""
        acq = slot.acq if slot.state in ("holding", "critical") else None
        _signal(slot.process.pid, signal.SIGKILL)
        slot.process.wait()
        self.killed.add(slot.client)
        self._follow(slot)  # what it managed to record before it died
        if slot.acq != acq or slot.state not in ("holding", "critical"):
            acq = None  # it had released that grant before the signal landed
        slot.state = "failed"
        return acq

    def replace(self, slot: WorkerSlot) -> None:
        """Put a new worker process in the slot of a dead one."""
        self.retired.append(slot)
        slot.tail.close()
        if slot.proxy is not None:
            slot.proxy.close()
        fresh = self._spawn(slot.index, slot.incarnation + 1)
        self.slots[slot.index] = fresh

    def pause(self, slot: WorkerSlot) -> str | None:
        """SIGSTOP the worker; returns the grant it holds (None if it had just released)."""
        acq = slot.acq
        _signal(slot.process.pid, signal.SIGSTOP)
        slot.paused = True
        # a stopped process writes nothing more: what is on file is where it stopped
        self._wait_stopped(slot)
        self._follow(slot)
        if slot.acq != acq or slot.state not in ("holding", "critical"):
            return None
        return acq

    @staticmethod
    def _wait_stopped(slot: WorkerSlot, timeout: float = 1.0) -> None:
        """Until /proc says the process is stopped (the signal is delivered asynchronously)."""
        deadline = time.monotonic() + timeout
        status = Path(f"/proc/{slot.process.pid}/stat")
        while time.monotonic() < deadline:
            try:
                fields = status.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                return
            if fields and fields[0] in ("T", "t", "Z", "X"):
                return
            time.sleep(0.001)

    def resume(self, slot: WorkerSlot) -> None:
        _signal(slot.process.pid, signal.SIGCONT)
        slot.paused = False

    # -- the end --------------------------------------------------------------------------

    def stop(self, timeout: float) -> None:
        """Ask every worker to stop (SIGTERM) and wait; SIGKILL those still running after
        ``timeout`` (recorded as bad exits: a worker must be able to stop). A worker that
        SIGTERM ended before it wrote its ``start`` had done nothing: its interpreter had not
        yet put in the handler that makes it stop cleanly (a replacement started as the round
        ends, on a loaded machine), which is no bad exit."""
        for slot in self.slots:
            if slot.paused:
                self.resume(slot)
            if slot.process.poll() is None:
                _signal(slot.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for slot in self.slots:
            try:
                code = slot.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal(slot.process.pid, signal.SIGKILL)
                slot.process.wait()
                self.bad_exits[slot.client] = -signal.SIGKILL
                continue
            self._follow(slot)
            if code == -signal.SIGTERM and slot.state == "starting":
                continue
            if code != 0 and slot.client not in self.killed:
                self.bad_exits[slot.client] = code
        for slot in self.retired:
            exited = slot.process.returncode
            if exited is not None and exited != 0 and slot.client not in self.killed:
                self.bad_exits[slot.client] = exited
        self.poll()

    def kill_all(self) -> None:
        """SIGKILL whatever still runs (cleanup after an error)."""
        for slot in [*self.slots, *self.retired]:
            if slot.process.poll() is None:
                _signal(slot.process.pid, signal.SIGKILL)
                slot.process.wait()
            slot.tail.close()
            if slot.proxy is not None:
                slot.proxy.close()

    def histories(self) -> dict[str, HistoryFile]:
        """Every worker's history, retired ones included, by client id."""
        return {slot.client: read_history(slot.history) for slot in [*self.retired, *self.slots]}
