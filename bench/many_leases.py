"""Many leases on one client: can the backend keep N holds renewed, and at what cost?

    python bench/many_leases.py --zookeeper                     # a throwaway ZooKeeper (fsync on)
    python bench/many_leases.py --redis --locks 2000 --ttl 3    # a throwaway redis-server
    python bench/many_leases.py URL --locks 10000 --ttl 3 --hold 30

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
during the hold phase, as a share of one core. Nothing is asserted: the figures are for
reading (bench/README.md says why). The exit status is 1 if any hold was lost.
"""

from __future__ import annotations

import argparse
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
from tumbler._core import local_deadline, renew_delay, retry_delay
from tumbler.backends.contract import Backend, GrantRequest, Renewal
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
class Renewer:
    """The renewal schedule the client's worker follows, over ``backend.renew_all``."""

    backend: Backend
    held: list[_Held] = field(default_factory=list)
    heap: list[tuple[float, int]] = field(default_factory=list)
    condition: threading.Condition = field(default_factory=threading.Condition)
    stopping: bool = False
    #: (started, holds, seconds, lateness) per renew_all call
    calls: list[tuple[float, int, float, float]] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def add(self, renewal: Renewal, sent_at: float, granted: float) -> None:
        with self.condition:
            index = len(self.held)
            self.held.append(_Held(renewal, local_deadline(sent_at, granted)))
            due = sent_at + renew_delay(granted)
            heapq.heappush(self.heap, (due, index))
            if self.heap[0][1] == index:
                self.condition.notify()

    def stop(self) -> None:
        with self.condition:
            self.stopping = True
            self.condition.notify()

    def cpu_mark(self) -> None:
        """Ask the thread to record its CPU time (thread_time is per thread)."""
        with self.condition:
            self.cpu.append(-1.0)
            self.condition.notify()

    def run(self) -> None:
        while True:
            with self.condition:
                if self.cpu and self.cpu[-1] < 0:
                    self.cpu[-1] = time.thread_time()
                if self.stopping:
                    self.cpu.append(time.thread_time())
                    return
                now = time.monotonic()
                if not self.heap or self.heap[0][0] > now:
                    wait = None if not self.heap else self.heap[0][0] - now
                    self.condition.wait(wait)
                    continue
                batch = []
                while self.heap and self.heap[0][0] <= now:
                    due, index = heapq.heappop(self.heap)
                    batch.append((due, index))
            self._renew(batch, now)

    def _renew(self, batch: list[tuple[float, int]], now: float) -> None:
        live = []
        for due, index in batch:
            hold = self.held[index]
            if now >= hold.deadline:
                hold.lost = "the lease ran out before a renewal was sent"
            else:
                live.append((due, index))
        if not live:
            return
        timeout = min(self.held[index].deadline for _, index in live) - now
        renewals = [self.held[index].renewal for _, index in live]
        started = time.monotonic()
        try:
            results = self.backend.renew_all(renewals, timeout)
        except BackendUnavailable as error:
            self.unavailable.append(str(error))
            later = time.monotonic()
            with self.condition:
                for _, index in live:
                    left = self.held[index].deadline - later
                    heapq.heappush(self.heap, (later + retry_delay(left), index))
            return
        after = time.monotonic()
        self.calls.append((started, len(live), after - started, started - live[0][0]))
        with self.condition:
            for (_, index), granted in zip(live, results, strict=True):
                hold = self.held[index]
                if granted is None:
                    hold.lost = "a renewal was refused"
                elif after >= hold.deadline:
                    hold.lost = "a renewal came back after the lease ran out"
                else:
                    hold.deadline = local_deadline(now, granted)
                    heapq.heappush(self.heap, (now + renew_delay(granted), index))


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def run(url: str, locks_wanted: int, ttl: float, hold_for: float) -> int:
    locks = tumbler.connect(url)
    backend = locks._backend
    rss_connected = _status_kib("VmRSS")
    renewer = Renewer(backend)
    thread = threading.Thread(target=renewer.run, name="renewer", daemon=True)
    thread.start()
    holder = f"many_leases pid={os.getpid()}"
    run_id = secrets.token_hex(4)
    print(f"{url}: {locks_wanted} locks, ttl {ttl} s, held {hold_for} s after the last grant")
    began = time.monotonic()
    refused = 0
    for number in range(locks_wanted):
        request = GrantRequest(
            name=f"many-{run_id}-{number}",
            owner=secrets.token_urlsafe(18),
            shared=False,
            limit=1,
            fair=False,
            ttl=ttl,
            holder=holder,
            queue=False,
        )
        sent_at = time.monotonic()
        grant = backend.try_grant(request)
        if grant is None:
            refused += 1
            continue
        renewer.add(Renewal(request.name, request.owner, ttl), sent_at, grant.granted_ttl)
    acquired = time.monotonic() - began
    rss_acquired = _status_kib("VmRSS")
    print(
        f"acquired {locks_wanted - refused} in {acquired:.1f} s "
        f"({acquired / locks_wanted * 1000:.2f} ms a grant; {refused} refused)"
    )
    lost_while_acquiring = sum(1 for hold in renewer.held if hold.lost)
    calls_before = len(renewer.calls)
    renewer.cpu_mark()
    cpu_began = time.process_time()
    hold_began = time.monotonic()
    time.sleep(hold_for)
    renewer.stop()
    thread.join()
    held_for = time.monotonic() - hold_began
    cpu = time.process_time() - cpu_began
    thread_cpu = renewer.cpu[-1] - renewer.cpu[0]
    rss_peak = _status_kib("VmHWM")
    calls = renewer.calls[calls_before:]
    lost = [hold.lost for hold in renewer.held if hold.lost]
    print(
        f"hold phase: {len(calls)} renew_all calls in {held_for:.1f} s, "
        f"{sum(c[1] for c in calls)} renewals"
    )
    if calls:
        sizes = [c[1] for c in calls]
        times = [c[2] * 1000 for c in calls]
        late = [c[3] * 1000 for c in calls]
        print(
            f"  holds per call: mean {statistics.mean(sizes):.0f}, max {max(sizes)}; "
            f"call ms: median {statistics.median(times):.1f}, p99 {_percentile(times, 0.99):.1f}"
            f", max {max(times):.1f}; started after due ms: median "
            f"{statistics.median(late):.1f}, max {max(late):.1f}"
        )
    print(f"  renew_all calls that raised BackendUnavailable: {len(renewer.unavailable)}")
    for message in sorted(set(renewer.unavailable))[:3]:
        print(f"    {message}")
    print(f"lost: {len(lost)} of {len(renewer.held)} ({lost_while_acquiring} while acquiring)")
    for reason in sorted(set(lost)):
        print(f"  {lost.count(reason)}: {reason}")
    print(
        f"RSS: {_mib(rss_connected)} connected, +{_mib(rss_acquired - rss_connected)} after the "
        f"grants, peak +{_mib(rss_peak - rss_connected)}"
    )
    print(
        f"CPU during the hold phase: process {cpu / held_for:.1%} of a core, "
        f"renewal thread {thread_cpu / held_for:.1%}"
    )
    began = time.monotonic()
    for hold in renewer.held:
        with contextlib.suppress(BackendUnavailable):
            backend.release(hold.renewal.name, hold.renewal.owner)
    print(f"released in {time.monotonic() - began:.1f} s")
    locks.close()
    return 1 if lost else 0


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
    args = parser.parse_args()
    if sum(map(bool, (args.url, args.zookeeper, args.redis))) != 1:
        parser.error("give one of URL, --zookeeper, --redis")
    if args.url:
        return run(args.url, args.locks, args.ttl, args.hold)
    with _server("zookeeper" if args.zookeeper else "redis") as url:
        return run(url, args.locks, args.ttl, args.hold)


if __name__ == "__main__":
    sys.exit(main())
