"""Many waiting asyncio tasks on one client: grant throughput, release latency, idle holders.

    python bench/many_waiters.py [--url URL] [--tasks 10,100,300] [--seconds 10]

For each task count N, N tasks of one asyncio client loop ``acquire -> release`` of one lock
(no think time, ``--timeout`` per acquire) for ``--seconds``; meanwhile an idle holder of
another lock (``--holder-ttl``, renewed by the client's renewal worker) just holds. Reported
per N: grants per second, acquires that timed out, how long ``release()`` took (median and
max: the time a release waits behind the other tasks' polls), and whether the idle holder
lost its lease. Every run ends after ``--seconds`` plus at most one acquire timeout, so the
script is bounded. Without ``--url``, a fresh SQLite file in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time

import tumbler.aio
from targets import default_target, started


async def run(url: str, tasks: int, seconds: float, timeout: float, holder_ttl: float) -> dict:
    async with await tumbler.aio.connect(url) as locks:
        idle = locks.lock(f"idle-{tasks}", ttl=holder_ttl)
        assert await idle.acquire(timeout=10)
        hold = idle.hold
        lock_name = f"busy-{tasks}"
        grants = 0
        timeouts = 0
        release_times: list[float] = []
        stop = time.monotonic() + seconds

        async def worker() -> None:
            nonlocal grants, timeouts
            lock = locks.lock(lock_name, ttl=30)
            while time.monotonic() < stop:
                if not await lock.acquire(timeout=timeout):
                    timeouts += 1
                    continue
                grants += 1
                started = time.perf_counter()
                await lock.release()
                release_times.append(time.perf_counter() - started)

        began = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(tasks)))
        elapsed = time.monotonic() - began
        lost = hold.lost
        if not lost:
            await idle.release()
    release_times.sort()
    return {
        "tasks": tasks,
        "seconds": elapsed,
        "grants_per_s": grants / elapsed,
        "timeouts": timeouts,
        "release_median_ms": 1000 * statistics.median(release_times) if release_times else None,
        "release_max_ms": 1000 * release_times[-1] if release_times else None,
        "idle_holder_lost": lost,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="backend URL (default: a fresh file of the default backend)")
    parser.add_argument("--tasks", default="10,100,300", help="task counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each run")
    parser.add_argument("--timeout", type=float, default=30.0, help="acquire timeout")
    parser.add_argument("--holder-ttl", type=float, default=1.0, help="idle holder's lease")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        url = args.url
        if url is None:
            directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="many-waiters-"))
            name = default_target()
            url = stack.enter_context(started(name, os.path.join(directory, name)))
        print(f"url: {url}", file=sys.stderr)
        print("tasks  grants/s  timeouts  release median ms  release max ms  idle holder lost")
        for count in (int(n) for n in args.tasks.split(",")):
            row = asyncio.run(run(url, count, args.seconds, args.timeout, args.holder_ttl))
            median = row["release_median_ms"]
            maximum = row["release_max_ms"]
            print(
                f"{row['tasks']:5d}  {row['grants_per_s']:8.1f}  {row['timeouts']:8d}  "
                f"{median if median is None else format(median, '17.2f'):>17}  "
                f"{maximum if maximum is None else format(maximum, '14.2f'):>14}  "
                f"{row['idle_holder_lost']}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
