"""A torture worker: one OS process that loops acquire -> read-modify-write -> release.

Run as ``python -m tumbler.torture.worker --lock NAME --resource SOCKET --history FILE
--client ID [--ttl S] [--think S] [--acquire-timeout S] [--idle S] [--seed N] [--long-hold
FRACTION] [--long-max M] < URL``: the backend URL comes on standard input (one line), never
on the command line or in the environment, where anyone on the machine could read its
password (``ps``, ``/proc/PID/cmdline``). A ``FRACTION`` of the holds think for 0.3 to ``M``
(default 1.2) TTL instead of ``--think`` (their lease is renewed meanwhile).

It uses only the public API (``tumbler.connect``, ``Lock.acquire``, ``Hold``) and records
every step in its history file (see :mod:`tumbler.torture.history`). Its critical section
(read, think, write) is what a correct user of the library writes: it stops working the moment
the hold's ``on_lost`` callback runs (the thinking is a wait on the event the callback sets),
and records when it stopped (``work_end``), so the checker can tell whether a holder was still
working after another client had been granted the lock. It then still sends its pending write
once, marked as a probe: the point is to send the stale write and watch the resource refuse
it. It does not look at ``hold.held`` before the write; it records what ``hold.held`` said at
each request instead, so the checker can tell whether the library ever claimed a hold it no
longer had.

SIGTERM asks it to stop: while waiting for the lock it stops at once (the library withdraws
the waiter); while holding it finishes the round and releases first. Errors the library
reports (``TumblerError``) are recorded and the loop goes on; anything else is a bug, recorded
as an ``error`` event, and the worker exits with status 70.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType
from typing import IO

import tumbler
from tumbler.errors import BackendUnavailable, LockLost, NotHeld, TumblerError

from .history import HistoryWriter
from .resource import ResourceClient, ResourceError

__all__ = ["main", "run_worker"]

EX_USAGE = 64
EX_SOFTWARE = 70


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


def _connect(
    url: str, writer: HistoryWriter, stop: _StopSignal, rng: random.Random
) -> tumbler.Locks | None:
    """Connect, retrying while the backend is unavailable (a fault may be under way)."""
    while not stop.requested:
        try:
            return tumbler.connect(url)
        except BackendUnavailable as error:
            writer.write("connect_error", why=str(error))
            time.sleep(0.05 + rng.random() * 0.2)
    return None


def run_worker(
    *,
    url: str,
    lock_name: str,
    resource_path: str,
    history_path: str,
    client: str,
    ttl: float,
    think: float,
    acquire_timeout: float,
    idle: float,
    seed: int,
    long_hold: float = 0.0,
    long_max: float = 1.2,
) -> int:
    """The worker's loop; returns its exit status."""
    rng = random.Random(seed)
    stop = _StopSignal()
    signal.signal(signal.SIGTERM, stop.handle)
    writer = HistoryWriter(history_path)
    try:
        locks = _connect(url, writer, stop, rng)
        if locks is None:
            writer.write("stop")
            return 0
        with locks:
            resource = ResourceClient(resource_path, client=client)
            try:
                writer.write("start", client=client, pid=os.getpid())
                _loop(
                    locks,
                    resource,
                    writer,
                    stop,
                    rng,
                    lock_name,
                    client,
                    ttl,
                    think,
                    acquire_timeout,
                    idle,
                    long_hold,
                    long_max,
                )
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


def _loop(
    locks: tumbler.Locks,
    resource: ResourceClient,
    writer: HistoryWriter,
    stop: _StopSignal,
    rng: random.Random,
    lock_name: str,
    client: str,
    ttl: float,
    think: float,
    acquire_timeout: float,
    idle: float,
    long_hold: float,
    long_max: float,
) -> None:
    lock = locks.lock(lock_name, ttl=ttl)
    attempt = 0
    while not stop.requested:
        attempt += 1
        acq = f"{client}.{attempt}"
        writer.write("acquire", acq=acq)
        stop.waiting = True
        try:
            got = lock.acquire(timeout=acquire_timeout)
        except _Stop:
            writer.write("no_grant", acq=acq, why="stopped")
            return
        except TumblerError as error:
            stop.waiting = False
            writer.write("no_grant", acq=acq, why=f"{type(error).__name__}: {error}")
            time.sleep(0.02 + rng.random() * 0.1)  # the backend is failing: do not spin
            continue
        finally:
            stop.waiting = False
        if not got:
            writer.write("no_grant", acq=acq, why="timeout")
            continue
        hold = lock.hold
        assert hold is not None
        now = time.monotonic_ns()
        writer.write_record(
            {
                "ev": "grant",
                "t": now,
                "acq": acq,
                "token": hold.token,
                "ttl": hold.ttl,
                "deadline": now + int(hold.expires_in * 1e9),
            }
        )
        lost = threading.Event()
        hold.on_lost(_record_loss(writer, acq, lost))
        _critical_section(
            resource, writer, hold, lost, lock_name, acq, think, (long_hold, long_max), ttl, rng
        )
        t0 = time.monotonic_ns()
        try:
            hold.release()
            outcome = "ok"
        except LockLost:
            outcome = "lost"
        except NotHeld:
            outcome = "not_held"
        except TumblerError as error:
            outcome = "error"
            writer.write("release_error", acq=acq, why=f"{type(error).__name__}: {error}")
        writer.write("release", acq=acq, t0=t0, outcome=outcome)
        if idle > 0:
            time.sleep(rng.random() * idle)


def _record_loss(
    writer: HistoryWriter, acq: str, lost: threading.Event
) -> Callable[[tumbler.Hold], object]:
    """An ``on_lost`` callback that records the loss of grant ``acq`` and sets ``lost``."""

    def record(hold: tumbler.Hold) -> None:
        # recorded before the event is set: the loss is on file before the work stops
        writer.write("lost", acq=acq, reason=hold.lost_reason)
        lost.set()

    return record


def _critical_section(
    resource: ResourceClient,
    writer: HistoryWriter,
    hold: tumbler.Hold,
    lost: threading.Event,
    lock_name: str,
    acq: str,
    think: float,
    long: tuple[float, float],
    ttl: float,
    rng: random.Random,
) -> None:
    """Read the counter, think, write it back plus one: every request fenced with the token.

    The work stops as soon as ``lost`` is set (by ``on_lost``): no step begins after it, and
    the thinking is a wait on it. When the work ends, for whatever reason, ``work_end`` is
    recorded, before the release or the probe.
    """

    def record(kind: str, t0: int, held: bool, outcome: str, **fields: object) -> None:
        writer.write(
            "op", acq=acq, token=hold.token, kind=kind, t0=t0, held=held, outcome=outcome, **fields
        )

    def end(why: str) -> None:
        writer.write("work_end", acq=acq, why=why)

    if lost.is_set():  # lost as it was granted: nothing to do
        end("lost")
        return
    # t0 before sampling held: a claim "held at t0" is then never earlier than the sample
    t0 = time.monotonic_ns()
    held = hold.held
    try:
        accepted, value = resource.read(lock_name, hold.token, acq)
    except ResourceError as error:
        record("read", t0, held, "error", why=str(error))
        end("error")
        return
    # A few holds last most of a lease (renewed meanwhile): the window in which a server or
    # network fault finds a holder, and its lease must survive or be lost, visibly.
    fraction, longest = long
    pause = rng.uniform(0.3, longest) * ttl if rng.random() < fraction else think
    record("read", t0, held, "ok" if accepted else "refused", value=value, think=pause)
    if not accepted:
        end("refused")  # the resource has seen a newer token: the hold is gone
        return
    # The window a pause or a kill aims at: between the read and the write. A wait on the
    # event rather than a sleep: on_lost ends it at once, as it would a real holder's work.
    if lost.wait(pause):
        end("lost")
        _probe(resource, writer, hold, lock_name, acq, value)
        return
    t0 = time.monotonic_ns()
    held = hold.held
    try:
        accepted = resource.write(lock_name, hold.token, acq, value, value + 1)
    except ResourceError as error:
        record("write", t0, held, "error", why=str(error))
        end("error")
        return
    record("write", t0, held, "ok" if accepted else "refused", value=value + 1)
    end("done" if accepted else "refused")


def _probe(
    resource: ResourceClient,
    writer: HistoryWriter,
    hold: tumbler.Hold,
    lock_name: str,
    acq: str,
    value: int,
) -> None:
    """Send the write the lost hold did not make, as a paused process would have (it is not
    work: the holder has stopped and knows it): the resource must refuse it if anyone else
    has been granted the lock since."""
    t0 = time.monotonic_ns()
    held = hold.held
    fields: dict[str, object]
    try:
        accepted = resource.write(lock_name, hold.token, acq, value, value + 1)
    except ResourceError as error:
        outcome, fields = "error", {"why": str(error)}
    else:
        outcome, fields = ("ok" if accepted else "refused"), {"value": value + 1}
    writer.write(
        "op",
        acq=acq,
        token=hold.token,
        kind="write",
        t0=t0,
        held=held,
        outcome=outcome,
        probe=True,
        **fields,
    )


def _read_url(stream: IO[str]) -> str | None:
    """The backend URL: the first line of ``stream`` (the harness's pipe), or None."""
    url = stream.readline().rstrip("\r\n")
    return url or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tumbler.torture.worker",
        description="A torture worker; reads the backend URL from standard input.",
    )
    parser.add_argument("--lock", required=True)
    parser.add_argument("--resource", required=True)
    parser.add_argument("--history", required=True)
    parser.add_argument("--client", required=True)
    parser.add_argument("--ttl", type=float, default=1.0)
    parser.add_argument("--think", type=float, default=0.02)
    parser.add_argument("--acquire-timeout", type=float, default=5.0)
    parser.add_argument("--idle", type=float, default=0.005)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--long-hold", type=float, default=0.0)
    parser.add_argument("--long-max", type=float, default=1.2)
    args = parser.parse_args(argv)
    url = _read_url(sys.stdin)
    if url is None:
        print("torture worker: no backend URL on standard input", file=sys.stderr)
        return EX_USAGE
    return run_worker(
        url=url,
        lock_name=args.lock,
        resource_path=args.resource,
        history_path=args.history,
        client=args.client,
        ttl=args.ttl,
        think=args.think,
        acquire_timeout=args.acquire_timeout,
        idle=args.idle,
        seed=args.seed,
        long_hold=args.long_hold,
        long_max=args.long_max,
    )


if __name__ == "__main__":
    sys.exit(main())
