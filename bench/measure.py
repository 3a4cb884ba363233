"""The measurements, with the definitions of peer-bench.md so that figures compare.

Uncontended: one client acquires and releases one lock ``pairs`` times, after a warm-up; the
contenders on one backend take turns, in slices, so that their figures share the conditions.

Contended: ``procs`` spawned processes (threads of this process for a contender whose locks
live in one process) loop ``acquire -> critical section -> release`` for ``seconds``, with no
think time. The critical section is a read-modify-write of a counter in a small shared file
that is not atomic by itself (read; yield; write counter + 1), plus a holder slot that catches
overlaps. The same file carries who released last and when (taken just before ``release()``),
which the next holder reads to time the hand-off. Timestamps are ``time.monotonic_ns()``
(CLOCK_MONOTONIC), one clock for every process on the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import multiprocessing
import os
import queue
import struct
import threading
import time
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

try:
    import resource
except ImportError:  # Windows has no resource module
    resource = None  # type: ignore[assignment]

from tumbler.testing.bench import (
    AsyncContender,
    AsyncSession,
    Contender,
    SyncContender,
    SyncSession,
)

#: acquire+release pairs before the timed ones (connections, caches, worker threads)
WARMUP = 100
#: how long a contended run may take to get its workers started, and to finish after its
#: seconds are up (a waiter may still be inside a 30 s acquire timeout then)
START_LIMIT = 180.0
FINISH_LIMIT = 120.0

# The shared file: counter, holder (worker number, 0 = none), last releaser, its release time.
_STATE = struct.Struct("<qqqq")
_INT = struct.Struct("<q")
_AFTER = struct.Struct("<qqq")  # holder, last releaser, release time: written at offset 8


# -- statistics ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of sorted ``values``; NaN for none."""
    if not values:
        return math.nan
    rank = max(1, math.ceil(fraction * len(values)))
    return float(values[rank - 1])


def jain(counts: Sequence[int]) -> float:
    """Jain's fairness index: 1.0 when every worker got the lock equally often, 1/n when one
    got it every time."""
    squares = sum(count * count for count in counts)
    if not squares:
        return math.nan
    return sum(counts) ** 2 / (len(counts) * squares)


def _cpu_seconds() -> float:
    """CPU time of this process, every thread included (the client library's too)."""
    if resource is not None:  # microseconds, where os.times() counts 10 ms clock ticks
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    times = os.times()
    return times.user + times.system


# -- uncontended --------------------------------------------------------------------------------


#: how many slices the uncontended pairs of the contenders on one backend are cut into: the
#: contenders take turns, slice by slice, so that a change in the machine's state during the
#: run (another process's load, where the scheduler puts the client and the server) falls on
#: all of them alike, and the ratios of one run compare like with like
ROUNDS = 10


@dataclass
class _Turns:
    """One contender's session and figures in an interleaved uncontended run."""

    contender: Contender
    session: Any = None
    acquires: array[int] = field(default_factory=lambda: array("q"))
    releases: array[int] = field(default_factory=lambda: array("q"))
    total_ns: int = 0
    cpu: float = 0.0
    error: str | None = None
    #: growth of the server's request counter over the timed slices, less the readings'
    #: own cost; None once a reading failed (or the store has no counter)
    server_requests: float | None = 0.0


def uncontended_rounds(
    contenders: Sequence[Contender], lock_name: str, pairs: int, rounds: int = ROUNDS
) -> list[dict[str, Any]]:
    """Time ``pairs`` acquire+release pairs of each contender (one client each, on a free lock
    of its own), the contenders taking turns in ``rounds`` slices; figures as
    :func:`uncontended`'s, in the contenders' order (``errors`` for one that failed)."""
    rounds = max(1, min(rounds, pairs))
    slices = [pairs // rounds + (1 if index < pairs % rounds else 0) for index in range(rounds)]
    loop = asyncio.new_event_loop()
    turns = [_Turns(contender) for contender in contenders]
    try:
        for index, turn in enumerate(turns):
            _run_turn(
                loop, turn, lambda turn=turn, index=index: _open(loop, turn, f"{lock_name}-{index}")
            )
        cost = _reading_cost(turns[0].contender) if turns else None
        if cost is None:
            for turn in turns:
                turn.server_requests = None
        for count in slices:
            for turn in turns:
                # read outside the turn: neither timed nor counted as the client's CPU
                before = turn.contender.server_ops() if cost is not None else None
                _run_turn(loop, turn, lambda turn=turn, count=count: _slice(loop, turn, count))
                after = turn.contender.server_ops() if before is not None else None
                if turn.server_requests is not None:
                    if before is None or after is None or cost is None:
                        turn.server_requests = None
                    else:
                        turn.server_requests += after - before - cost
    finally:
        for turn in turns:
            if turn.session is not None:
                session, turn.session = turn.session, None
                with contextlib.suppress(Exception):
                    if turn.contender.is_async:
                        loop.run_until_complete(session.close())
                    else:
                        session.close()
        loop.close()
    return [_figures(turn, pairs) for turn in turns]


#: readings in a row that ``_reading_cost`` compares
_CALIBRATION_READINGS = 4


def _reading_cost(contender: Contender) -> float | None:
    """What one reading of the server's request counter adds to the next (the reading is a
    request too); None if the store has no counter. The least growth between readings in a
    row: another client's request (a heartbeat) may fall between two of them."""
    readings = []
    for _ in range(_CALIBRATION_READINGS):
        reading = contender.server_ops()
        if reading is None:
            return None
        readings.append(reading)
    return float(min(after - before for before, after in itertools.pairwise(readings)))


def _run_turn(loop: asyncio.AbstractEventLoop, turn: _Turns, step: Any) -> None:
    """Run one step of a contender's turns, its CPU counted; a failure ends its turns."""
    if turn.error is not None:
        return
    cpu_before = _cpu_seconds()
    try:
        step()
    except Exception as error:  # one broken row must not lose the others
        turn.error = f"{type(error).__name__}: {error}"
    finally:
        turn.cpu += _cpu_seconds() - cpu_before


def _open(loop: asyncio.AbstractEventLoop, turn: _Turns, lock_name: str) -> None:
    contender = turn.contender
    if isinstance(contender, AsyncContender):
        turn.session = loop.run_until_complete(contender.open(lock_name))
    elif isinstance(contender, SyncContender):
        turn.session = contender.open(lock_name)
    else:
        raise TypeError(f"{contender!r} is neither a SyncContender nor an AsyncContender")
    _slice(loop, turn, WARMUP, timed=False)


def _slice(loop: asyncio.AbstractEventLoop, turn: _Turns, count: int, timed: bool = True) -> None:
    if turn.contender.is_async:
        acquires, releases, total = loop.run_until_complete(_time_async(turn.session, count))
    else:
        acquires, releases, total = _time_sync(turn.session, count)
    if timed:
        turn.acquires.extend(acquires)
        turn.releases.extend(releases)
        turn.total_ns += total


def _figures(turn: _Turns, pairs: int) -> dict[str, Any]:
    if turn.error is not None:
        return {"errors": [turn.error]}
    pair = sorted(a + r for a, r in zip(turn.acquires, turn.releases, strict=True))
    return {
        "n": pairs,
        "pair_median_us": percentile(pair, 0.5) / 1e3,
        "pair_p99_us": percentile(pair, 0.99) / 1e3,
        "pairs_per_s": pairs / (turn.total_ns / 1e9),
        "acquire_median_us": percentile(sorted(turn.acquires), 0.5) / 1e3,
        "release_median_us": percentile(sorted(turn.releases), 0.5) / 1e3,
        # connect, warm-up and close included: an upper bound
        "client_cpu_us_per_pair": turn.cpu / pairs * 1e6,
        # the server's requests (as its store counts them) over the timed pairs, per pair
        "server_requests_per_pair": (
            None if turn.server_requests is None else turn.server_requests / pairs
        ),
    }


def _time_sync(session: SyncSession, pairs: int) -> tuple[array[int], array[int], int]:
    clock = time.perf_counter_ns
    acquires, releases = array("q"), array("q")
    began = clock()
    for _ in range(pairs):
        asked = clock()
        session.acquire()
        granted = clock()
        session.release()
        released = clock()
        acquires.append(granted - asked)
        releases.append(released - granted)
    return acquires, releases, clock() - began


async def _time_async(session: AsyncSession, pairs: int) -> tuple[array[int], array[int], int]:
    clock = time.perf_counter_ns
    acquires, releases = array("q"), array("q")
    began = clock()
    for _ in range(pairs):
        asked = clock()
        await session.acquire()
        granted = clock()
        await session.release()
        released = clock()
        acquires.append(granted - asked)
        releases.append(released - granted)
    return acquires, releases, clock() - began


# -- contended: the worker side -----------------------------------------------------------------


class _Value(Protocol):
    value: int


class _Event(Protocol):
    def wait(self, timeout: float | None = None) -> bool: ...

    def set(self) -> None: ...


class _Queue(Protocol):
    def put(self, item: Any) -> None: ...

    def get(self, block: bool = True, timeout: float | None = None) -> Any: ...


@dataclass(frozen=True)
class _Plan:
    """What one worker is told; picklable, for spawned processes."""

    contender: Contender
    #: the worker's number, from 1 (0 in the file means "nobody")
    me: int
    lock_name: str
    counter_path: str
    seconds: float
    #: whether the worker measures its own CPU time (a process) or the parent does (threads)
    own_cpu: bool


@dataclass
class _Tally:
    count: int = 0
    waits: array[int] = field(default_factory=lambda: array("q"))
    handoffs: array[int] = field(default_factory=lambda: array("q"))
    self_reacquires: int = 0
    #: acquisitions that followed some earlier release (the first one of a run does not)
    follows: int = 0
    overlaps: int = 0

    def enter(self, fd: int, me: int, granted_ns: int) -> int:
        """The start of the critical section: returns the counter as read."""
        counter, holder, last, released_ns = _STATE.unpack(os.pread(fd, _STATE.size, 0))
        if holder:
            self.overlaps += 1
        os.pwrite(fd, _INT.pack(me), 8)
        if last:
            self.follows += 1
            if last == me:
                self.self_reacquires += 1
            else:
                self.handoffs.append(granted_ns - released_ns)
        return int(counter)

    def leave(self, fd: int, me: int, counter: int) -> None:
        """The end of the critical section, just before ``release()``."""
        os.pwrite(fd, _INT.pack(counter + 1), 0)
        (holder,) = _INT.unpack(os.pread(fd, _INT.size, 8))
        if holder != me:
            self.overlaps += 1
        os.pwrite(fd, _AFTER.pack(0, me, time.monotonic_ns()), 8)


def _report(tally: _Tally, cpu: float | None, end_ns: int) -> dict[str, Any]:
    return {
        "count": tally.count,
        "waits": tally.waits.tobytes(),
        "handoffs": tally.handoffs.tobytes(),
        "self_reacquires": tally.self_reacquires,
        "follows": tally.follows,
        "overlaps": tally.overlaps,
        "cpu_s": cpu,
        "end_ns": end_ns,
    }


def _await_start(start: _Event, start_ns: _Value) -> int:
    if not start.wait(START_LIMIT):
        raise TimeoutError("the bench never gave the start signal")
    return start_ns.value


def _contend_sync(plan: _Plan, messages: _Queue, start: _Event, start_ns: _Value) -> dict[str, Any]:
    assert isinstance(plan.contender, SyncContender)
    with contextlib.ExitStack() as stack:
        fd = os.open(plan.counter_path, os.O_RDWR)
        stack.callback(os.close, fd)
        session: SyncSession = plan.contender.open(plan.lock_name)
        stack.callback(session.close)
        # One untimed pair, so that connections and client threads exist before the clock runs.
        session.acquire()
        session.release()
        messages.put(("ready", plan.me, None))
        deadline = _await_start(start, start_ns) + round(plan.seconds * 1e9)
        tally, me, clock = _Tally(), plan.me, time.monotonic_ns
        cpu_before = _cpu_seconds()
        while True:  # at least once: a worker that starts late still takes part
            asked = clock()
            session.acquire()
            granted = clock()
            tally.waits.append(granted - asked)
            counter = tally.enter(fd, me, granted)
            time.sleep(0)  # yield inside the read-modify-write: a broken lock shows up
            tally.leave(fd, me, counter)
            session.release()
            tally.count += 1
            if clock() >= deadline:
                break
        end_ns = clock()
        cpu = _cpu_seconds() - cpu_before
    return _report(tally, cpu if plan.own_cpu else None, end_ns)


async def _contend_async(
    plan: _Plan, messages: _Queue, start: _Event, start_ns: _Value
) -> dict[str, Any]:
    assert isinstance(plan.contender, AsyncContender)
    async with contextlib.AsyncExitStack() as stack:
        fd = os.open(plan.counter_path, os.O_RDWR)
        stack.callback(os.close, fd)
        session: AsyncSession = await plan.contender.open(plan.lock_name)
        stack.push_async_callback(session.close)
        await session.acquire()
        await session.release()
        messages.put(("ready", plan.me, None))
        # Blocking the loop here is harmless: this task is the only work it has.
        deadline = _await_start(start, start_ns) + round(plan.seconds * 1e9)
        tally, me, clock = _Tally(), plan.me, time.monotonic_ns
        cpu_before = _cpu_seconds()
        while True:  # at least once: a worker that starts late still takes part
            asked = clock()
            await session.acquire()
            granted = clock()
            tally.waits.append(granted - asked)
            counter = tally.enter(fd, me, granted)
            await asyncio.sleep(0)  # the asyncio way to yield inside the read-modify-write
            tally.leave(fd, me, counter)
            await session.release()
            tally.count += 1
            if clock() >= deadline:
                break
        end_ns = clock()
        cpu = _cpu_seconds() - cpu_before
    return _report(tally, cpu if plan.own_cpu else None, end_ns)


def _worker(plan: _Plan, messages: _Queue, start: _Event, start_ns: _Value) -> None:
    """A contended worker's whole life; every outcome ends in one message to the parent."""
    try:
        if isinstance(plan.contender, AsyncContender):
            report = asyncio.run(_contend_async(plan, messages, start, start_ns))
        else:
            report = _contend_sync(plan, messages, start, start_ns)
    except BaseException as error:
        messages.put(("error", plan.me, f"{type(error).__name__}: {error}"))
        if not isinstance(error, Exception):
            raise
        return
    messages.put(("done", plan.me, report))


# -- contended: the parent side -----------------------------------------------------------------


class _Cell:
    """The start time for threads: what ``multiprocessing.RawValue`` is for processes."""

    value: int = 0


@dataclass
class _Crew:
    """The workers of one run, as processes or as threads, and how to reach them."""

    messages: _Queue
    start: _Event
    start_ns: _Value
    processes: list[multiprocessing.process.BaseProcess] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def join(self, timeout: float) -> list[str]:
        """Wait for the workers to exit; stop the processes that do not. Returns complaints."""
        complaints = []
        end = time.monotonic() + timeout
        for process in self.processes:
            process.join(max(0.0, end - time.monotonic()))
            if process.is_alive():
                process.terminate()
                process.join(5)
                complaints.append(f"worker pid {process.pid} did not exit and was terminated")
        for thread in self.threads:
            thread.join(max(0.0, end - time.monotonic()))
            if thread.is_alive():
                complaints.append(f"worker thread {thread.name} did not exit")
        return complaints


@contextlib.contextmanager
def _crew(plans: list[_Plan], threads: bool) -> Iterator[_Crew]:
    if threads:
        crew = _Crew(queue.Queue(), threading.Event(), _Cell())
        for plan in plans:
            thread = threading.Thread(
                target=_worker,
                args=(plan, crew.messages, crew.start, crew.start_ns),
                name=f"bench-worker-{plan.me}",
                daemon=True,
            )
            crew.threads.append(thread)
    else:
        context = multiprocessing.get_context("spawn")
        crew = _Crew(context.Queue(), context.Event(), context.RawValue("q", 0))
        for plan in plans:
            process = context.Process(
                target=_worker,
                args=(plan, crew.messages, crew.start, crew.start_ns),
                name=f"bench-worker-{plan.me}",
                daemon=True,
            )
            crew.processes.append(process)
    try:
        for member in crew.processes:
            member.start()
        for thread in crew.threads:
            thread.start()
        yield crew
    finally:
        # However the run ended, let waiting workers go: with a start time long past, each
        # makes one round and exits.
        if not crew.start.wait(0):
            crew.start_ns.value = -(2**62)
            crew.start.set()


def _collect(
    crew: _Crew, kind: str, expected: set[int], limit: float
) -> tuple[dict[int, Any], dict[int, str]]:
    """Gather one message of ``kind`` (or an error) from each ``expected`` worker."""
    found: dict[int, Any] = {}
    failed: dict[int, str] = {}
    end = time.monotonic() + limit
    while len(found) + len(failed) < len(expected):
        try:
            what, me, payload = crew.messages.get(timeout=max(0.01, end - time.monotonic()))
        except queue.Empty:
            for me in expected - found.keys() - failed.keys():
                failed[me] = f"no {kind!r} message within {limit:.0f} s"
            break
        if what == "error":
            failed[me] = payload
        elif what == kind and me in expected:
            found[me] = payload
    return found, failed


def contended(
    contender: Contender, workers: int, seconds: float, lock_name: str, workdir: str
) -> dict[str, Any]:
    """One contended run of ``workers`` processes (or threads) for ``seconds``."""
    threads = not contender.cross_process
    counter_path = os.path.join(workdir, f"counter-{os.getpid()}-{time.monotonic_ns()}")
    with open(counter_path, "wb") as file:
        file.write(bytes(_STATE.size))
    plans = [
        _Plan(contender, me, lock_name, counter_path, seconds, own_cpu=not threads)
        for me in range(1, workers + 1)
    ]
    # before any worker connects: a lease a worker's client takes and leaves is the run's
    leases_before = contender.server_leases()
    with _crew(plans, threads) as crew:
        ready, failed = _collect(crew, "ready", {plan.me for plan in plans}, START_LIMIT)
        # Read once the workers are connected and warmed up: their connection handshakes and
        # untimed first pair are not the run's requests.
        ops_before = contender.server_ops()
        pushes_before = contender.server_pushes()
        cpu_before = _cpu_seconds()
        start_ns = time.monotonic_ns()
        # After a failed start, a start time long past lets the others finish after one round.
        crew.start_ns.value = start_ns if not failed else -(2**62)
        crew.start.set()
        reports, failed_later = _collect(crew, "done", set(ready), seconds + FINISH_LIMIT)
        cpu_parent = _cpu_seconds() - cpu_before
        errors = [f"worker {me}: {text}" for me, text in sorted({**failed, **failed_later}.items())]
        errors += crew.join(FINISH_LIMIT)
    ops_after = contender.server_ops()
    pushes_after = contender.server_pushes()
    leases_after = contender.server_leases() if leases_before is not None else None
    with open(counter_path, "rb") as file:
        counter = _STATE.unpack(file.read(_STATE.size))[0]
    os.unlink(counter_path)
    return _summarise(
        workers,
        threads,
        start_ns,
        reports,
        errors,
        counter,
        cpu_parent,
        (ops_before, ops_after),
        (pushes_before, pushes_after),
        None if leases_after is None else len(leases_after - (leases_before or frozenset())),
    )


def _summarise(
    workers: int,
    threads: bool,
    start_ns: int,
    reports: dict[int, Any],
    errors: list[str],
    counter: int,
    cpu_parent: float,
    server_ops: tuple[int | None, int | None],
    server_pushes: tuple[int | None, int | None],
    leases_left: int | None,
) -> dict[str, Any]:
    counts = [reports[me]["count"] if me in reports else 0 for me in range(1, workers + 1)]
    total = sum(counts)
    waits: array[int] = array("q")
    handoffs: array[int] = array("q")
    for report in reports.values():
        waits.frombytes(report["waits"])
        handoffs.frombytes(report["handoffs"])
    ordered_waits = sorted(waits)
    ordered_handoffs = sorted(handoffs)
    follows = sum(report["follows"] for report in reports.values())
    overlaps = sum(report["overlaps"] for report in reports.values())
    end_ns = max((report["end_ns"] for report in reports.values()), default=start_ns)
    elapsed = (end_ns - start_ns) / 1e9
    # threads: the parent's process CPU is the workers'
    cpu = cpu_parent if threads else sum(report["cpu_s"] for report in reports.values())
    return {
        "workers": workers,
        "mode": "threads" if threads else "processes",
        "elapsed_s": elapsed,
        "acquisitions": total,
        "acq_per_s": total / elapsed if elapsed > 0 else math.nan,
        "wait_mean_ms": sum(waits) / len(waits) / 1e6 if waits else math.nan,
        "wait_p99_ms": percentile(ordered_waits, 0.99) / 1e6,
        "wait_max_ms": ordered_waits[-1] / 1e6 if ordered_waits else math.nan,
        "handoffs": len(handoffs),
        "handoff_median_ms": percentile(ordered_handoffs, 0.5) / 1e6,
        "handoff_p99_ms": percentile(ordered_handoffs, 0.99) / 1e6,
        "self_reacquire_pct": (
            100 * sum(report["self_reacquires"] for report in reports.values()) / follows
            if follows
            else math.nan
        ),
        "jain": jain(counts),
        "counts": counts,
        "counter": counter,
        "overlaps": overlaps,
        "counter_ok": counter == total and overlaps == 0 and not errors,
        "server_ops_per_acq": _per(server_ops, total),
        # what the server pushed to waiting clients (watch events, say), per acquisition
        "server_pushes_per_acq": _per(server_pushes, total),
        # leases the server held after the workers had exited that it did not hold before
        "leases_left": leases_left,
        "client_cpu_ms_per_acq": cpu / total * 1e3 if total else math.nan,
        "errors": errors,
    }


def _per(readings: tuple[int | None, int | None], total: int) -> float | None:
    """The growth between two readings of a counter, per acquisition; None without both."""
    before, after = readings
    return (after - before) / total if before is not None and after is not None and total else None
