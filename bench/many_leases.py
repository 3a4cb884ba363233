"""Many leases on one client: can the backend keep N holds renewed, and at what cost?

    python bench/many_leases.py --zookeeper                     # a throwaway ZooKeeper (fsync on)
    python bench/many_leases.py --redis --locks 2000 --ttl 3    # a throwaway redis-server
    python bench/many_leases.py URL --locks 10000 --ttl 3 --hold 30
    python bench/many_leases.py --zookeeper --asyncio             # the asyncio client

One client acquires ``--locks`` distinct locks with lease ``--ttl`` and keeps them for
``--hold`` seconds after the last grant, then releases them. The leases are renewed the way
the client's renewal worker will renew them: one thread, each hold due a third of its lease
after its last renewal was *sent*, every hold that is due renewed in one
``backend.renew_all(due, timeout)`` call whose timeout is the least time left on those
leases. A hold counts as lost, as the lock layer would count it, when a renewal is refused
(``None``), or when its local deadline (``tumbler._core.local_deadline``: the lease from when
the renewal was sent, less the drift margin) passes before a renewal confirmed it. The
renewals run from the first grant on, so the acquisition phase is measured under them.

The script drives the backend's ``renew_all`` directly rather than through tumbler's lock
objects, whose renewal worker (which is being rewritten to call ``renew_all``) renews one hold
at a time; grants are ``backend.try_grant`` with a single try (nothing waits: every name is
distinct and free).

Printed: the time to acquire them all; renewal calls during the hold (holds per call, call
time, how late a call started after the earliest hold in it was due); lost holds by cause;
RSS (``VmRSS``) after connecting (interpreter, driver, connection), after the grants, and
the peak (``VmHWM``) against that baseline; CPU time of the process and of the renewal thread
during the hold phase, as a share of one core (with ``--asyncio`` the renewals run as a task on
the loop: only the process's CPU). Nothing is asserted: the figures are for
reading (bench/README.md says why). The exit status is 1 if any hold was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import math
import os
import secrets
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import tumbler
import tumbler.aio
from tumbler._core import local_deadline, renew_delay, retry_delay
from tumbler.backends.contract import AsyncBackend, Backend, GrantRequest, Renewal
from tumbler.errors import BackendUnavailable


def _status_kib(field_name: str) -> int:
    """A ``kB`` field of /proc/self/status (Linux), 0 where there is none."""
    with contextlib.suppress(OSError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


def _mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


@dataclass
class _Held:
    renewal: Renewal
    #: when the client stops believing in the lease (local_deadline of the last renewal)
    deadline: float
    lost: str | None = None


@dataclass
class Schedule:
    """The renewal schedule the client's worker follows: each hold due a third of its lease
    after its last renewal was sent; every hold due renewed in one ``renew_all`` call."""

    held: list[_Held] = field(default_factory=list)
    heap: list[tuple[float, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: (holds, seconds, lateness) per renew_all call
    calls: list[tuple[int, float, float]] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)

    def add(self, renewal: Renewal, sent_at: float, granted: float) -> bool:
        """Schedule a new hold; True if it is now the first due (the worker must wake)."""
        with self.lock:
            index = len(self.held)
            self.held.append(_Held(renewal, local_deadline(sent_at, granted)))
            heapq.heappush(self.heap, (sent_at + renew_delay(granted), index))
            return self.heap[0][1] == index

    def due(self, now: float) -> tuple[list[tuple[float, int]], float | None]:
        """Every hold due by ``now`` that can still be renewed, and the next due time."""
        batch = []
        with self.lock:
            while self.heap and self.heap[0][0] <= now:
                due, index = heapq.heappop(self.heap)
                if now >= self.held[index].deadline:
                    self.held[index].lost = "the lease ran out before a renewal was sent"
                else:
                    batch.append((due, index))
            return batch, (self.heap[0][0] if self.heap else None)

    def request(self, batch: list[tuple[float, int]], now: float) -> tuple[list[Renewal], float]:
        """The renewals of ``batch`` and the call's timeout: the least time left on them."""
        with self.lock:
            holds = [self.held[index] for _, index in batch]
        return [hold.renewal for hold in holds], min(hold.deadline for hold in holds) - now

    def renewed(
        self,
        batch: list[tuple[float, int]],
        results: list[float | None],
        now: float,
        started: float,
        after: float,
    ) -> None:
        with self.lock:
            self.calls.append((len(batch), after - started, started - batch[0][0]))
            for (_, index), granted in zip(batch, results, strict=True):
                hold = self.held[index]
                if granted is None:
                    hold.lost = "a renewal was refused"
                elif after >= hold.deadline:
                    hold.lost = "a renewal came back after the lease ran out"
                else:
                    hold.deadline = local_deadline(now, granted)
                    heapq.heappush(self.heap, (now + renew_delay(granted), index))

    def failed(self, batch: list[tuple[float, int]], error: BackendUnavailable) -> None:
        later = time.monotonic()
        with self.lock:
            self.unavailable.append(str(error))
            for _, index in batch:
                left = self.held[index].deadline - later
                heapq.heappush(self.heap, (later + retry_delay(left), index))


class ThreadRenewer:
    """The blocking client's worker: a thread."""

    def __init__(self, backend: Backend, schedule: Schedule) -> None:
        self.backend = backend
        self.schedule = schedule
        self.wakeup = threading.Event()
        self.stopping = False
        self.cpu: list[float] = []
        self.cpu_wanted = threading.Event()
        self.thread = threading.Thread(target=self.run, name="renewer", daemon=True)
        self.thread.start()

    def add(self, renewal: Renewal, sent_at: float, granted: float) -> None:
        if self.schedule.add(renewal, sent_at, granted):
            self.wakeup.set()

    def mark_cpu(self) -> None:
        """Have the thread record its CPU time (thread_time is per thread)."""
        self.cpu_wanted.set()
        self.wakeup.set()

    def stop(self) -> float:
        """Stop; the thread's CPU seconds since ``mark_cpu``."""
        self.stopping = True
        self.wakeup.set()
        self.thread.join()
        return self.cpu[-1] - self.cpu[0]

    def run(self) -> None:
        while True:
            self.wakeup.clear()
            if self.cpu_wanted.is_set():
                self.cpu_wanted.clear()
                self.cpu.append(time.thread_time())
            if self.stopping:
                self.cpu.append(time.thread_time())
                return
            now = time.monotonic()
            batch, next_due = self.schedule.due(now)
            if not batch:
                self.wakeup.wait(None if next_due is None else next_due - now)
                continue
            renewals, timeout = self.schedule.request(batch, now)
            started = time.monotonic()
            try:
                results = self.backend.renew_all(renewals, timeout)
            except BackendUnavailable as error:
                self.schedule.failed(batch, error)
                continue
            self.schedule.renewed(batch, results, now, started, time.monotonic())


class TaskRenewer:
    """The asyncio client's worker: a task on the loop that also acquires."""

    def __init__(self, backend: AsyncBackend, schedule: Schedule) -> None:
        self.backend = backend
        self.schedule = schedule
        self.wakeup = asyncio.Event()
        self.stopping = False
        self.task = asyncio.create_task(self.run())

    def add(self, renewal: Renewal, sent_at: float, granted: float) -> None:
        if self.schedule.add(renewal, sent_at, granted):
            self.wakeup.set()

    async def stop(self) -> None:
        self.stopping = True
        self.wakeup.set()
        await self.task

    async def run(self) -> None:
        while not self.stopping:
            self.wakeup.clear()
            now = time.monotonic()
            batch, next_due = self.schedule.due(now)
            if not batch:
                wait = None if next_due is None else next_due - now
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wakeup.wait(), wait)
                continue
            renewals, timeout = self.schedule.request(batch, now)
            started = time.monotonic()
            try:
                results = await self.backend.renew_all(renewals, timeout)
            except BackendUnavailable as error:
                self.schedule.failed(batch, error)
                continue
            self.schedule.renewed(batch, results, now, started, time.monotonic())


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def _grant_request(run_id: str, number: int, ttl: float) -> GrantRequest:
    return GrantRequest(
        name=f"many-{run_id}-{number}",
        owner=secrets.token_urlsafe(18),
        shared=False,
        limit=1,
        fair=False,
        ttl=ttl,
        holder=f"many_leases pid={os.getpid()}",
        queue=False,
    )


@dataclass
class Figures:
    """What one run measured, for the report."""

    locks: int
    refused: int = 0
    acquired: float = 0.0
    rss_connected: int = 0
    rss_acquired: int = 0
    rss_peak: int = 0
    held_for: float = 0.0
    cpu: float = 0.0
    thread_cpu: float | None = None
    calls_before: int = 0
    lost_while_acquiring: int = 0
    released: float = 0.0


def report(figures: Figures, schedule: Schedule) -> int:
    print(
        f"acquired {figures.locks - figures.refused} in {figures.acquired:.1f} s "
        f"({figures.acquired / figures.locks * 1000:.2f} ms a grant; {figures.refused} refused)"
    )
    calls = schedule.calls[figures.calls_before :]
    lost = [hold.lost for hold in schedule.held if hold.lost]
    print(
        f"hold phase: {len(calls)} renew_all calls in {figures.held_for:.1f} s, "
        f"{sum(c[0] for c in calls)} renewals"
    )
    if calls:
        sizes = [c[0] for c in calls]
        times = [c[1] * 1000 for c in calls]
        late = [c[2] * 1000 for c in calls]
        print(
            f"  holds per call: mean {statistics.mean(sizes):.0f}, max {max(sizes)}; "
            f"call ms: median {statistics.median(times):.1f}, p99 {_percentile(times, 0.99):.1f}"
            f", max {max(times):.1f}; started after due ms: median "
            f"{statistics.median(late):.1f}, max {max(late):.1f}"
        )
    print(f"  renew_all calls that raised BackendUnavailable: {len(schedule.unavailable)}")
    for message in sorted(set(schedule.unavailable))[:3]:
        print(f"    {message}")
    print(
        f"lost: {len(lost)} of {len(schedule.held)} ({figures.lost_while_acquiring} while "
        "acquiring)"
    )
    for reason in sorted(set(lost)):
        print(f"  {lost.count(reason)}: {reason}")
    print(
        f"RSS: {_mib(figures.rss_connected)} connected, "
        f"+{_mib(figures.rss_acquired - figures.rss_connected)} after the grants, "
        f"peak +{_mib(figures.rss_peak - figures.rss_connected)}"
    )
    thread = (
        ""
        if figures.thread_cpu is None
        else f", renewal thread {figures.thread_cpu / figures.held_for:.1%}"
    )
    print(
        f"CPU during the hold phase: process {figures.cpu / figures.held_for:.1%} of a core{thread}"
    )
    print(f"released in {figures.released:.1f} s")
    return 1 if lost else 0


def run(url: str, locks_wanted: int, ttl: float, hold_for: float) -> int:
    locks = tumbler.connect(url)
    backend = locks._backend
    figures = Figures(locks_wanted, rss_connected=_status_kib("VmRSS"))
    schedule = Schedule()
    renewer = ThreadRenewer(backend, schedule)
    run_id = secrets.token_hex(4)
    print(f"{url}: {locks_wanted} locks, ttl {ttl} s, held {hold_for} s after the last grant")
    began = time.monotonic()
    for number in range(locks_wanted):
        request = _grant_request(run_id, number, ttl)
        sent_at = time.monotonic()
        grant = backend.try_grant(request)
        if grant is None:
            figures.refused += 1
            continue
        renewer.add(Renewal(request.name, request.owner, ttl), sent_at, grant.granted_ttl)
    figures.acquired = time.monotonic() - began
    figures.rss_acquired = _status_kib("VmRSS")
    figures.lost_while_acquiring = sum(1 for hold in schedule.held if hold.lost)
    figures.calls_before = len(schedule.calls)
    renewer.mark_cpu()
    cpu_began, hold_began = time.process_time(), time.monotonic()
    time.sleep(hold_for)
    figures.thread_cpu = renewer.stop()
    figures.held_for = time.monotonic() - hold_began
    figures.cpu = time.process_time() - cpu_began
    figures.rss_peak = _status_kib("VmHWM")
    began = time.monotonic()
    for hold in schedule.held:
        with contextlib.suppress(BackendUnavailable):
            backend.release(hold.renewal.name, hold.renewal.owner)
    figures.released = time.monotonic() - began
    locks.close()
    return report(figures, schedule)


async def arun(url: str, locks_wanted: int, ttl: float, hold_for: float) -> int:
    locks = await tumbler.aio.connect(url)
    backend = locks._backend
    figures = Figures(locks_wanted, rss_connected=_status_kib("VmRSS"))
    schedule = Schedule()
    renewer = TaskRenewer(backend, schedule)
    run_id = secrets.token_hex(4)
    print(
        f"{url} (asyncio): {locks_wanted} locks, ttl {ttl} s, held {hold_for} s after the "
        "last grant"
    )
    began = time.monotonic()
    for number in range(locks_wanted):
        request = _grant_request(run_id, number, ttl)
        sent_at = time.monotonic()
        grant = await backend.try_grant(request)
        if grant is None:
            figures.refused += 1
            continue
        renewer.add(Renewal(request.name, request.owner, ttl), sent_at, grant.granted_ttl)
    figures.acquired = time.monotonic() - began
    figures.rss_acquired = _status_kib("VmRSS")
    figures.lost_while_acquiring = sum(1 for hold in schedule.held if hold.lost)
    figures.calls_before = len(schedule.calls)
    cpu_began, hold_began = time.process_time(), time.monotonic()
    await asyncio.sleep(hold_for)
    await renewer.stop()
    figures.held_for = time.monotonic() - hold_began
    figures.cpu = time.process_time() - cpu_began
    figures.rss_peak = _status_kib("VmHWM")
    began = time.monotonic()
    for hold in schedule.held:
        with contextlib.suppress(BackendUnavailable):
            await backend.release(hold.renewal.name, hold.renewal.owner)
    figures.released = time.monotonic() - began
    await locks.close()
    return report(figures, schedule)


@contextlib.contextmanager
def _server(kind: str) -> Iterator[str]:
    from tumbler.testing import servers

    if kind == "zookeeper":
        with servers.ZooKeeperServer(force_sync=True, max_heap="256m") as zookeeper:
            yield zookeeper.url_for("/many-leases")
    else:
        with servers.RedisServer() as redis_server:
            yield redis_server.url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", help="the backend (or --zookeeper / --redis)")
    parser.add_argument("--zookeeper", action="store_true", help="start a throwaway ZooKeeper")
    parser.add_argument("--redis", action="store_true", help="start a throwaway redis-server")
    parser.add_argument("--locks", type=int, default=10_000, help="holds (default 10000)")
    parser.add_argument("--ttl", type=float, default=3.0, help="lease in seconds (default 3)")
    parser.add_argument("--hold", type=float, default=30.0, help="seconds held (default 30)")
    parser.add_argument("--asyncio", action="store_true", help="the asyncio client instead")
    args = parser.parse_args()
    if sum(map(bool, (args.url, args.zookeeper, args.redis))) != 1:
        parser.error("give one of URL, --zookeeper, --redis")
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(_server("zookeeper" if args.zookeeper else "redis"))
        if args.asyncio:
            return asyncio.run(arun(url, args.locks, args.ttl, args.hold))
        return run(url, args.locks, args.ttl, args.hold)


if __name__ == "__main__":
    sys.exit(main())
