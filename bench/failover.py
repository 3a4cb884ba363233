"""Leader failover: how long after its leader dies an election has a new one.

    python bench/failover.py                          # a fresh SQLite file in a temp dir
    python bench/failover.py --start zookeeper --start etcd --ttl 2 --runs 10
    python bench/failover.py --url redis://127.0.0.1:6379/0 --json failover.json

Per backend: a leader process campaigns (``locks.election(NAME, ttl=TTL)``) and says when it
leads; a candidate in this process campaigns behind it; the leader is killed with SIGKILL,
and the bench times the kill to the candidate's leadership (the candidate's campaign
returning), ``--runs`` times. A dead leader is found only when its grant ends: its lease
(``ttl``) runs out, counted from its last renewal (every third of the lease). On a backend
whose grants live with the client's session or lease (``capabilities.max_ttl``), the URL is
given one of ``ttl`` (the store bench's ``lease_url``), as a user who wants fast failover
would. So the floor is the lease, less what of it had passed since the last renewal; the
printed ratio is the median over ``ttl``. Beside tumbler, the other libraries' elections on
the same store (``StoreBench.election_peers``; on ZooKeeper, kazoo's ``Election``, its
session of ``ttl``). etcd's own ``Election`` (Go, ``clientv3/concurrency``) has no Python
client in common use; its leader is replaced when its session's lease expires, 60 s by
default: the same floor.

Nothing here asserts a speed; the load average before and after is printed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import tumbler
from targets import default_target, started
from tumbler.testing.bench import store_bench


def _lead_with_tumbler(url: str, name: str, ttl: float, led: Any) -> None:
    with tumbler.connect(url) as locks:
        leadership = locks.election(name, ttl=ttl).campaign("doomed")
        led.set()
        leadership.wait_lost()


def _kill(process: multiprocessing.process.BaseProcess) -> float:
    """SIGKILL ``process``; when it was sent."""
    assert process.pid is not None
    sent = time.monotonic()
    os.kill(process.pid, signal.SIGKILL)
    process.join()
    return sent


def time_tumbler(url: str, ttl: float, runs: int) -> list[float]:
    """Seconds from the leader's kill to the next leader, ``runs`` times."""
    context = multiprocessing.get_context("spawn")
    times = []
    with tumbler.connect(url) as locks:
        for run in range(runs):
            name = f"bench-failover-{os.getpid()}-{run}"
            led = context.Event()
            leader = context.Process(target=_lead_with_tumbler, args=(url, name, ttl, led))
            leader.start()
            if not led.wait(60):
                leader.kill()
                raise RuntimeError(f"the leader process did not lead on {url}")
            election = locks.election(name, ttl=ttl)
            # the candidate's campaign starts in line behind the leader, before the kill
            waiting: list[Any] = []
            sent = 0.0

            def kill_when_queued(name: str = name, leader: Any = leader) -> None:
                nonlocal sent
                while locks.status(name).waiters == 0:
                    time.sleep(0.005)
                sent = _kill(leader)

            killer = _in_thread(kill_when_queued)
            waiting.append(election.campaign("next", timeout=60 + 3 * ttl))
            elected = time.monotonic()
            killer.join()
            waiting[0].resign()
            times.append(elected - sent)
    return times


def _in_thread(function: Callable[[], None]) -> Any:
    import threading

    thread = threading.Thread(target=function, daemon=True)
    thread.start()
    return thread


def summary(label: str, ttl: float, times: Sequence[float]) -> dict[str, Any]:
    median = statistics.median(times)
    return {
        "backend": label,
        "ttl": ttl,
        "runs": len(times),
        "median_s": round(median, 3),
        "max_s": round(max(times), 3),
        "median_over_ttl": round(median / ttl, 2),
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'backend':<28} {'ttl s':>6} {'runs':>5} {'median s':>9} {'max s':>7} {'/ ttl':>6}")
    for row in rows:
        print(
            f"{row['backend']:<28} {row['ttl']:>6g} {row['runs']:>5} {row['median_s']:>9.3f} "
            f"{row['max_s']:>7.3f} {row['median_over_ttl']:>6.2f}"
        )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", action="append", default=[], help="a backend to measure")
    parser.add_argument("--start", action="append", default=[], help="a test target to start")
    parser.add_argument("--ttl", type=float, default=2.0, help="the leadership's lease, s")
    parser.add_argument("--runs", type=int, default=5, help="failovers per backend")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    rows = []
    with tempfile.TemporaryDirectory() as scratch, ExitStack() as stack:
        measured = [(url, url) for url in args.url]
        names = args.start or ([] if args.url else [default_target()])
        for name in names:
            url = stack.enter_context(started(name, f"{scratch}/{name}"))
            measured.append((f"{name} (temp)", url))
        for label, url in measured:
            bench = store_bench(url)
            if bench is not None:
                # a store whose holds live with a session or a client lease: that as long as
                # the lease, so that a dead leader's grant ends when its lease would
                url = bench.lease_url(url, args.ttl)
            rows.append(summary(label, args.ttl, time_tumbler(url, args.ttl, args.runs)))
            for peer in () if bench is None else bench.election_peers(url):
                failovers = peer.failovers(args.ttl, args.runs)
                rows.append(summary(f"{peer.name}, same server", args.ttl, failovers))
    print_table(rows)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
