"""A torture worker: one OS process that loops acquire -> work at the resource -> release.

Run as ``python -m tumbler.torture.worker --lock NAME --resource SOCKET --history FILE
--client ID [--primitive lock|fair|semaphore|rwlock|election|multi] [--permits N]
[--read-share F] [--flavour sync|asyncio] [--ttl S] [--think S] [--acquire-timeout S]
[--idle S] [--seed N] [--long-hold FRACTION] [--long-max M] < URL``: the backend URL comes
on standard input (one line), or through the fork server to a worker the harness forks;
never on the command line or in the environment, where anyone on the machine could read its
password (``ps``, ``/proc/PID/cmdline``). A ``FRACTION`` of the holds think for 0.3 to ``M``
(default 1.2) TTL instead of ``--think`` (their lease is renewed meanwhile).

The primitive: ``lock`` (a mutex), ``fair`` (a mutex with ``fair=True``), ``semaphore`` (of
``--permits``), ``rwlock`` (each acquire takes the read side with probability
``--read-share``, default 3/4, else the write side), ``election`` (each acquire a campaign,
the worker's id its value, the leadership its hold: a leader is a holder), ``multi`` (each
acquire a ``locks.multi()`` of 2 to ``MULTI_MOST`` names drawn from the round's
``MULTI_POOL`` names (:func:`multi_names`), given in a random order: the sets of the workers
overlap in every order, and a multi-lock that did not take its names in one shared order
would deadlock). An exclusive holder (a mutex's, a write side's, a leader) reads the
counter, thinks and writes it plus one; a shared holder (a read side's, a semaphore permit's)
reads it, thinks and reads it again: it never writes. A multi-lock's holder is an exclusive
holder of each of its names, and each name has a counter of its own at the resource, fenced
with that name's token: it reads every one, thinks once, then writes every one.

It uses only the public API (``tumbler.connect`` or ``tumbler.aio.connect``, the lock objects'
``acquire``, their ``hold``) and records every step in its history file (see
:mod:`tumbler.torture.history`). Its critical section is what a correct user of the library
writes: it stops working the moment the hold's ``on_lost`` callback runs (the thinking is a
wait on the event the callback sets), and records when it stopped (``work_end``), so the
checker can tell whether a holder was still working after another client had been granted
the lock. It then still sends its pending request once (a multi-lock's holder, one per
name), marked as a probe: the point is to send the stale request and watch the resource
refuse it. It does not look at ``hold.held``
before a request; it records what ``hold.held`` said at each request instead (and sends it
along to the resource), so the checker can tell whether the library ever claimed a hold it
no longer had.

The loop is written once (:func:`_loop`, a generator of the steps that do I/O); a driver per
flavour carries the steps out: blocking calls in the ``sync`` flavour, awaited ones on an
event loop in the ``asyncio`` flavour (whose ``on_lost`` callbacks run as tasks there).

SIGTERM asks it to stop: while waiting for the lock it stops at once (the library withdraws
the waiter); while holding it finishes the round and releases first. Errors the library
reports (``TumblerError``) are recorded and the loop goes on; anything else is a bug, recorded
as an ``error`` event, and the worker exits with status 70.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sys
import threading
import time
import traceback
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import IO, Any, Literal, Protocol

import tumbler
import tumbler.aio
from tumbler.errors import AcquireTimeout, BackendUnavailable, LockLost, NotHeld, TumblerError
from tumbler.observe import AcquireWaiting, Observer

from .history import Event, HistoryWriter
from .resource import ResourceClient, ResourceError

__all__ = ["FLAVOURS", "PRIMITIVES", "WorkerSpec", "main", "multi_names", "run_worker"]

EX_USAGE = 64
EX_SOFTWARE = 70

#: the primitives a worker can take (``fair``: a mutex made with ``fair=True``; ``election``:
#: a campaign in a leader election, which is a fair mutex with the leader as holder;
#: ``multi``: several mutexes taken as one, ``locks.multi()``)
PRIMITIVES = ("lock", "fair", "semaphore", "rwlock", "election", "multi")
#: how many names a ``multi`` round's workers draw their sets from, and the most a set has:
#: few enough that most pairs of sets overlap, on one name or on two
MULTI_POOL = 4
MULTI_MOST = 3
#: the flavours of the API a worker can use
FLAVOURS = ("sync", "asyncio")

Flavour = Literal["sync", "asyncio"]


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker does: which lock, which primitive, how long it thinks."""

    lock_name: str
    client: str
    primitive: str = "lock"
    permits: int = 3
    read_share: float = 0.75
    ttl: float = 1.0
    think: float = 0.02
    acquire_timeout: float = 5.0
    idle: float = 0.005
    long_hold: float = 0.0
    long_max: float = 1.2
    #: the locks' ``lock_delay`` (0: none)
    lock_delay: float = 0.0

    def pick_names(self, rng: random.Random) -> tuple[str, ...]:
        """The names of the next acquire of a ``multi`` worker, in the order it gives them
        (the library takes them in its own); () for the other primitives."""
        if self.primitive != "multi":
            return ()
        pool = multi_names(self.lock_name)
        return tuple(rng.sample(pool, rng.randint(2, min(MULTI_MOST, len(pool)))))

    def pick_side(self, rng: random.Random) -> str:
        """The side of the next acquire: ``read`` or ``write`` (rwlock), else ``lock``."""
        if self.primitive == "rwlock":
            return "read" if rng.random() < self.read_share else "write"
        return "lock"

    def shared(self, side: str) -> bool:
        """Whether a grant of ``side`` may be held beside others (it then never writes)."""
        return self.primitive == "semaphore" or side == "read"


def multi_names(lock: str) -> tuple[str, ...]:
    """The names the ``multi`` workers of the round on ``lock`` take their sets from: each
    one a lock of its own at the backend and a counter of its own at the resource."""
    return tuple(f"{lock}.{index}" for index in range(MULTI_POOL))


class _Stop(BaseException):
    """SIGTERM while waiting for the lock: unwinds the wait (the waiter is withdrawn)."""


class _StopSignal:
    def __init__(self) -> None:
        self.requested = False
        self.waiting = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        if self.waiting:
            self.waiting = False
            raise _Stop()


class _HoldLike(Protocol):
    """What the loop reads of a hold: the same in both flavours."""

    @property
    def token(self) -> int: ...
    @property
    def ttl(self) -> float: ...
    @property
    def held(self) -> bool: ...
    @property
    def expires_in(self) -> float: ...
    @property
    def lost_reason(self) -> str | None: ...


class _MultiHoldLike(Protocol):
    """What the loop reads of a multi-lock's hold: the same in both flavours."""

    @property
    def tokens(self) -> Mapping[str, int]: ...
    @property
    def holds(self) -> Sequence[_HoldLike]: ...
    @property
    def held(self) -> bool: ...
    @property
    def expires_in(self) -> float: ...


# -- the steps the loop asks its driver to carry out -------------------------------------


@dataclass(frozen=True)
class _Acquire:
    """Acquire ``side`` (``names``, in this order: a multi-lock of them): the driver sends
    back the hold, None (timed out) or ``STOPPED``."""

    side: str
    timeout: float
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Release:
    """Release the hold: the driver sends back None, or throws what the release raised."""

    hold: Any


@dataclass(frozen=True)
class _OnLost:
    """Register an ``on_lost`` callback that records the loss of ``acq`` and sets a flag; the
    driver sends back the flag (``_LostFlag``)."""

    hold: Any
    acq: str


@dataclass(frozen=True)
class _Think:
    """Wait ``seconds`` or until ``lost`` is set; the driver sends back whether it was set."""

    lost: Any
    seconds: float


@dataclass(frozen=True)
class _Request:
    """One request to the resource about the counter of ``lock``: ``read`` (sends back
    (accepted, value)) or ``write`` of ``base + 1`` (sends back accepted); a
    ``ResourceError`` is thrown in."""

    kind: str
    lock: str
    token: int
    acq: str
    base: int
    context: dict[str, object]


@dataclass(frozen=True)
class _Sleep:
    seconds: float


STOPPED = object()

_Step = _Acquire | _Release | _OnLost | _Think | _Request | _Sleep


def _loop(
    spec: WorkerSpec, writer: HistoryWriter, stop: _StopSignal, rng: random.Random
) -> Generator[_Step, Any, None]:
    """The worker's loop, as the steps its driver carries out."""
    attempt = 0
    while not stop.requested:
        attempt += 1
        acq = f"{spec.client}.{attempt}"
        side = spec.pick_side(rng)
        names = spec.pick_names(rng)
        if names:
            writer.write("acquire", acq=acq, side=side, names=list(names))
        else:
            writer.write("acquire", acq=acq, side=side)
        try:
            got = yield _Acquire(side, spec.acquire_timeout, names)
        except TumblerError as error:
            writer.write("no_grant", acq=acq, why=f"{type(error).__name__}: {error}")
            yield _Sleep(0.02 + rng.random() * 0.1)  # the backend is failing: do not spin
            continue
        if got is STOPPED:
            writer.write("no_grant", acq=acq, why="stopped")
            return
        if got is None:
            writer.write("no_grant", acq=acq, why="timeout")
            continue
        hold: _HoldLike | _MultiHoldLike = got
        now = time.monotonic_ns()
        record: Event = {"ev": "grant", "t": now, "acq": acq, "side": side}
        if names:
            multi: _MultiHoldLike = got
            # each name's token, where the grant of one lock has its ``token``
            fences = list(multi.tokens.items())
            record["tokens"] = dict(fences)
            record["ttl"] = min(part.ttl for part in multi.holds)
        else:
            single: _HoldLike = got
            fences = [(spec.lock_name, single.token)]
            record["token"] = single.token
            record["ttl"] = single.ttl
        record["deadline"] = now + int(hold.expires_in * 1e9)
        writer.write_record(record)
        lost = yield _OnLost(hold, acq)
        yield from _critical_section(spec, writer, hold, fences, lost, acq, spec.shared(side), rng)
        t0 = time.monotonic_ns()
        try:
            yield _Release(hold)
            outcome = "ok"
        except LockLost:
            outcome = "lost"
        except NotHeld:
            outcome = "not_held"
        except TumblerError as error:
            outcome = "error"
            writer.write("release_error", acq=acq, why=f"{type(error).__name__}: {error}")
        writer.write("release", acq=acq, t0=t0, outcome=outcome)
        if spec.idle > 0:
            yield _Sleep(rng.random() * spec.idle)


def _critical_section(
    spec: WorkerSpec,
    writer: HistoryWriter,
    hold: _HoldLike | _MultiHoldLike,
    fences: Sequence[tuple[str, int]],
    lost: Any,
    acq: str,
    shared: bool,
    rng: random.Random,
) -> Generator[_Step, Any, None]:
    """Read the counter of each of ``fences`` (lock name, token), think, then write each
    back plus one (exclusive) or read it again (shared): every request fenced with its
    name's token.

    The work stops as soon as ``lost`` is set (by ``on_lost``), or a request fails or is
    refused: no step begins after it, and the thinking is a wait on it. When the work ends,
    for whatever reason, ``work_end`` is recorded, before the release or the probe.
    """
    second = "read" if shared else "write"
    # a multi-lock's requests name their lock; the others' are all the round's lock
    named = spec.primitive == "multi"

    def record(
        lock: str, token: int, kind: str, t0: int, held: bool, outcome: str, **fields: object
    ) -> None:
        if named:
            fields["lock"] = lock
        writer.write(
            "op", acq=acq, token=token, kind=kind, t0=t0, held=held, outcome=outcome, **fields
        )

    def end(why: str) -> None:
        writer.write("work_end", acq=acq, why=why)

    def request(
        kind: str, lock: str, token: int, held: bool, base: int = 0, probe: bool = False
    ) -> _Request:
        context: dict[str, object] = {"shared": shared, "held": held}
        if probe:
            context["probe"] = True
        return _Request(kind, lock, token, acq, base, context)

    if lost.is_set():  # lost as it was granted: nothing to do
        end("lost")
        return
    values: list[int] = []
    pause = spec.think
    for lock, token in fences:
        # t0 before sampling held: a claim "held at t0" is then never earlier than the sample
        t0 = time.monotonic_ns()
        held = hold.held
        try:
            accepted, value = yield request("read", lock, token, held)
        except ResourceError as error:
            record(lock, token, "read", t0, held, "error", why=str(error))
            end("error")
            return
        fields: dict[str, object] = {"value": value}
        if len(values) == len(fences) - 1:
            # A few holds last most of a lease (renewed meanwhile): the window in which a
            # server or network fault finds a holder, and its lease must survive or be lost,
            # visibly. The last read says how long: the harness aims its faults from it.
            pause = (
                rng.uniform(0.3, spec.long_max) * spec.ttl
                if rng.random() < spec.long_hold
                else spec.think
            )
            fields["think"] = pause
        record(lock, token, "read", t0, held, "ok" if accepted else "refused", **fields)
        if not accepted:
            end("refused")  # the resource has seen a newer token: the hold is gone
            return
        values.append(value)
    # The window a pause or a kill aims at: between the reads and the second requests. A wait
    # on the event rather than a sleep: on_lost ends it at once, as it would a real holder's.
    if (yield _Think(lost, pause)):
        end("lost")
        # the requests the lost hold did not make, as a paused process would have sent them
        # (they are not work: the holder has stopped and knows it): the resource must refuse
        # each one if anyone else has been granted its lock since
        for (lock, token), value in zip(fences, values, strict=True):
            t0 = time.monotonic_ns()
            held = hold.held
            try:
                answer = yield request(second, lock, token, held, value, probe=True)
            except ResourceError as error:
                outcome, fields = "error", {"why": str(error)}
            else:
                accepted = answer[0] if shared else answer
                outcome = "ok" if accepted else "refused"
                fields = {"value": answer[1] if shared else value + 1}
            record(lock, token, second, t0, held, outcome, probe=True, **fields)
        return
    for (lock, token), value in zip(fences, values, strict=True):
        t0 = time.monotonic_ns()
        held = hold.held
        try:
            answer = yield request(second, lock, token, held, value)
        except ResourceError as error:
            record(lock, token, second, t0, held, "error", why=str(error))
            end("error")
            return
        accepted = answer[0] if shared else answer
        outcome = "ok" if accepted else "refused"
        record(lock, token, second, t0, held, outcome, value=answer[1] if shared else value + 1)
        if not accepted:
            end("refused")
            return
    end("done")


# -- the drivers ----------------------------------------------------------------------------


class _Candidate:
    """A candidate of an election, taken as the drivers take a lock: ``acquire(timeout)``
    campaigns (with the worker's id as its value), then ``hold`` is the leadership."""

    def __init__(self, election: tumbler.Election, value: str) -> None:
        self._election = election
        self._value = value
        self.hold: tumbler.Leadership | None = None

    def acquire(self, timeout: float | None) -> bool:
        try:
            self.hold = self._election.campaign(self._value, timeout=timeout)
        except AcquireTimeout:
            self.hold = None
        return self.hold is not None


class _AsyncCandidate:
    """:class:`_Candidate` for ``tumbler.aio``."""

    def __init__(self, election: tumbler.aio.AsyncElection, value: str) -> None:
        self._election = election
        self._value = value
        self.hold: tumbler.aio.AsyncLeadership | None = None

    async def acquire(self, timeout: float | None) -> bool:
        try:
            self.hold = await self._election.campaign(self._value, timeout=timeout)
        except AcquireTimeout:
            self.hold = None
        return self.hold is not None


def _primitives(locks: Any, spec: WorkerSpec) -> dict[str, Any]:
    """The lock objects of each side, from either flavour's client (same names in both)."""
    name, ttl, delay = spec.lock_name, spec.ttl, spec.lock_delay
    if spec.primitive == "election":
        election = locks.election(name, ttl=ttl, lock_delay=delay)
        if isinstance(locks, tumbler.aio.AsyncLocks):
            return {"lock": _AsyncCandidate(election, spec.client)}
        return {"lock": _Candidate(election, spec.client)}
    if spec.primitive == "semaphore":
        return {"lock": locks.semaphore(name, spec.permits, ttl=ttl, lock_delay=delay)}
    if spec.primitive == "rwlock":
        both = locks.rwlock(name, ttl=ttl, lock_delay=delay)
        return {"read": both.read(), "write": both.write()}
    if spec.primitive == "multi":
        return {}  # a multi-lock of the names each acquire draws (:func:`_lock_of`)
    return {"lock": locks.lock(name, ttl=ttl, fair=spec.primitive == "fair", lock_delay=delay)}


def _lock_of(locks: Any, spec: WorkerSpec, objects: Mapping[str, Any], step: _Acquire) -> Any:
    """The lock object ``step`` acquires: a multi-lock made for it of its names, in their
    order, as a caller would write ``with locks.multi([...])``; else the side's."""
    if step.names:
        return locks.multi(step.names, ttl=spec.ttl, lock_delay=spec.lock_delay)
    return objects[step.side]


def _lost_callback(writer: HistoryWriter, acq: str, lost: Any) -> Any:
    """An ``on_lost`` callback that records the loss of grant ``acq`` and sets ``lost``."""

    def record(hold: Any) -> None:
        # recorded before the flag is set: the loss is on file before the work stops
        writer.write("lost", acq=acq, reason=hold.lost_reason)
        lost.set()

    return record


def _call_resource(resource: ResourceClient, step: _Request) -> object:
    if step.kind == "read":
        return resource.read(step.lock, step.token, step.acq, **step.context)
    return resource.write(step.lock, step.token, step.acq, step.base, step.base + 1, **step.context)


def _drive_sync(
    url: str,
    spec: WorkerSpec,
    resource: ResourceClient,
    writer: HistoryWriter,
    stop: _StopSignal,
    rng: random.Random,
) -> None:
    """The loop with the blocking API; SIGTERM interrupts a wait for the lock (``_Stop``)."""
    locks = _connect_sync(url, writer, stop, rng)
    if locks is None:
        return
    with locks:
        objects = _primitives(locks, spec)
        writer.write("start", client=spec.client, pid=os.getpid(), **_about(spec, "sync"))

        def carry_out(step: _Step) -> object:
            if isinstance(step, _Acquire):
                lock = _lock_of(locks, spec, objects, step)
                stop.waiting = True
                try:
                    return lock.hold if lock.acquire(timeout=step.timeout) else None
                except _Stop:
                    return STOPPED
                finally:
                    stop.waiting = False
            if isinstance(step, _Release):
                return step.hold.release()
            if isinstance(step, _OnLost):
                flag = threading.Event()
                step.hold.on_lost(_lost_callback(writer, step.acq, flag))
                return flag
            if isinstance(step, _Think):
                return step.lost.wait(step.seconds)
            if isinstance(step, _Request):
                return _call_resource(resource, step)
            time.sleep(step.seconds)
            return None

        steps = _Steps(_loop(spec, writer, stop, rng))
        while (step := steps.next()) is not None:
            try:
                steps.answer(carry_out(step))
            except (TumblerError, ResourceError) as raised:
                steps.fail(raised)


async def _drive_asyncio(
    url: str,
    spec: WorkerSpec,
    resource: ResourceClient,
    writer: HistoryWriter,
    stop: _StopSignal,
    rng: random.Random,
) -> None:
    """The loop with ``tumbler.aio``; SIGTERM cancels a wait for the lock. Requests to the
    resource (a blocking socket) go through a thread, so the loop's renewals never wait."""
    loop = asyncio.get_running_loop()
    #: the acquire under way (a task of its own, so that SIGTERM cancels the wait only)
    waiting: list[asyncio.Task[Any]] = []

    def on_sigterm() -> None:
        stop.requested = True
        for task in waiting:
            task.cancel()

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    locks = None
    while not stop.requested:
        try:
            locks = await tumbler.aio.connect(url, observers=[_Queued(writer)])
            break
        except BackendUnavailable as error:
            writer.write("connect_error", why=str(error))
            await asyncio.sleep(0.05 + rng.random() * 0.2)
    if locks is None:
        return
    async with locks:
        objects = _primitives(locks, spec)
        writer.write("start", client=spec.client, pid=os.getpid(), **_about(spec, "asyncio"))

        async def carry_out(step: _Step) -> object:
            if isinstance(step, _Acquire):
                if stop.requested:
                    return STOPPED
                lock = _lock_of(locks, spec, objects, step)

                async def take() -> object:
                    # the hold is the acquiring task's: fetched in that task, released from
                    # this one (a hold may be released by another task)
                    return lock.hold if await lock.acquire(timeout=step.timeout) else None

                task = asyncio.ensure_future(take())
                waiting.append(task)
                try:
                    return await task
                except asyncio.CancelledError:
                    if not task.cancelled() or not stop.requested:
                        raise
                    return STOPPED
                finally:
                    waiting.remove(task)
            if isinstance(step, _Release):
                return await step.hold.release()
            if isinstance(step, _OnLost):
                flag = _LoopFlag(loop)
                step.hold.on_lost(_lost_callback(writer, step.acq, flag))
                return flag
            if isinstance(step, _Think):
                return await step.lost.wait(step.seconds)
            if isinstance(step, _Request):
                return await asyncio.to_thread(_call_resource, resource, step)
            await asyncio.sleep(step.seconds)
            return None

        steps = _Steps(_loop(spec, writer, stop, rng))
        while (step := steps.next()) is not None:
            try:
                steps.answer(await carry_out(step))
            except (TumblerError, ResourceError) as raised:
                steps.fail(raised)


class _Steps:
    """Runs the loop's generator for a driver: each step's answer (or the error the library
    or the resource raised for it) goes back into the loop, which asks for the next step."""

    def __init__(self, steps: Generator[_Step, Any, None]) -> None:
        self._steps = steps
        self._answer: object = None
        self._failure: BaseException | None = None

    def next(self) -> _Step | None:
        """The next step, or None when the loop has ended."""
        answer, failure = self._answer, self._failure
        self._answer, self._failure = None, None
        try:
            return self._steps.send(answer) if failure is None else self._steps.throw(failure)
        except StopIteration:
            return None

    def answer(self, value: object) -> None:
        self._answer = value

    def fail(self, error: BaseException) -> None:
        self._failure = error


class _LoopFlag:
    """The asyncio twin of ``threading.Event`` for the ``on_lost`` flag: set from the loop
    (where asyncio runs the callbacks) or, to be safe, from any other thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()

    def set(self) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._event.set()
        else:
            self._loop.call_soon_threadsafe(self._event.set)

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self, seconds: float) -> bool:
        """Wait until set or ``seconds`` pass; True if set."""
        try:
            await asyncio.wait_for(self._event.wait(), seconds)
        except asyncio.TimeoutError:  # not yet the builtin TimeoutError on Python 3.10
            return self._event.is_set()
        return True


class _Queued(Observer):
    """Records when the acquire under way took its place in line (``queued``): the backend
    refused it a grant and kept its entry. The fairness check orders waiters by it."""

    def __init__(self, writer: HistoryWriter) -> None:
        self._writer = writer

    def acquire_waiting(self, event: AcquireWaiting) -> None:
        self._writer.write("queued")


def _connect_sync(
    url: str, writer: HistoryWriter, stop: _StopSignal, rng: random.Random
) -> tumbler.Locks | None:
    """Connect, retrying while the backend is unavailable (a fault may be under way)."""
    while not stop.requested:
        try:
            return tumbler.connect(url, observers=[_Queued(writer)])
        except BackendUnavailable as error:
            writer.write("connect_error", why=str(error))
            time.sleep(0.05 + rng.random() * 0.2)
    return None


def _about(spec: WorkerSpec, flavour: str) -> dict[str, object]:
    return {"flavour": flavour, "primitive": spec.primitive, "permits": spec.permits}


def run_worker(
    *,
    url: str,
    spec: WorkerSpec,
    resource_path: str,
    history_path: str,
    flavour: str = "sync",
    seed: int = 0,
) -> int:
    """The worker's loop in ``flavour``; returns its exit status."""
    rng = random.Random(seed)
    stop = _StopSignal()
    signal.signal(signal.SIGTERM, stop.handle)
    writer = HistoryWriter(history_path)
    try:
        resource = ResourceClient(resource_path, client=spec.client)
        try:
            if flavour == "asyncio":
                asyncio.run(_drive_asyncio(url, spec, resource, writer, stop, rng))
            else:
                _drive_sync(url, spec, resource, writer, stop, rng)
        finally:
            resource.close()
        writer.write("stop")
        return 0
    except _Stop:
        writer.write("stop")
        return 0
    except BaseException:
        writer.write("error", what=traceback.format_exc())
        return EX_SOFTWARE
    finally:
        writer.close()


def _read_url(stream: IO[str]) -> str | None:
    """The backend URL: the first line of ``stream`` (the harness's pipe), or None."""
    url = stream.readline().rstrip("\r\n")
    return url or None


def main(argv: list[str] | None = None, url: str | None = None) -> int:
    """The worker's program: ``argv`` as on its command line; ``url`` if not on standard
    input (a worker forked by the harness gets it through the fork server)."""
    parser = argparse.ArgumentParser(
        prog="python -m tumbler.torture.worker",
        description="A torture worker; reads the backend URL from standard input.",
    )
    parser.add_argument("--lock", required=True)
    parser.add_argument("--resource", required=True)
    parser.add_argument("--history", required=True)
    parser.add_argument("--client", required=True)
    parser.add_argument("--primitive", choices=PRIMITIVES, default="lock")
    parser.add_argument("--permits", type=int, default=3)
    parser.add_argument("--read-share", type=float, default=0.75)
    parser.add_argument("--flavour", choices=FLAVOURS, default="sync")
    parser.add_argument("--ttl", type=float, default=1.0)
    parser.add_argument("--think", type=float, default=0.02)
    parser.add_argument("--acquire-timeout", type=float, default=5.0)
    parser.add_argument("--idle", type=float, default=0.005)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--long-hold", type=float, default=0.0)
    parser.add_argument("--long-max", type=float, default=1.2)
    parser.add_argument("--lock-delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    if url is None:
        url = _read_url(sys.stdin)
    if url is None:
        print("torture worker: no backend URL on standard input", file=sys.stderr)
        return EX_USAGE
    spec = WorkerSpec(
        lock_name=args.lock,
        client=args.client,
        primitive=args.primitive,
        permits=args.permits,
        read_share=args.read_share,
        ttl=args.ttl,
        think=args.think,
        acquire_timeout=args.acquire_timeout,
        idle=args.idle,
        long_hold=args.long_hold,
        long_max=args.long_max,
        lock_delay=args.lock_delay,
    )
    return run_worker(
        url=url,
        spec=spec,
        resource_path=args.resource,
        history_path=args.history,
        flavour=args.flavour,
        seed=args.seed,
    )


if __name__ == "__main__":
    sys.exit(main())
