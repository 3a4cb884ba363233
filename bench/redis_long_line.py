"""A long line on one Redis lock: what N waiters cost the server and everyone else on it.

    python bench/redis_long_line.py [--waiters 1000,2000] [--seconds 10] [--url redis://...]
                                    [--grant-cost 10,1000,10000]

One client holds the lock ``crowded``; a separate process keeps N waiters in its line, each
trying again once a second as a waiter does (``recheck_interval``), through the backend's own
grant call (``try_grant``, the script a waiter runs: the entry stays, and its lease is
refreshed). Meanwhile this process, on connections of its own, measures for ``--seconds``:

- PING round trips (every 5 ms);
- acquire + release of other, uncontended locks by another client (one after the other);
- single grant attempts on the crowded lock by a newcomer that does not queue;
- the server's CPU (``INFO cpu``, as a share of one core) and the mean server time of a
  script call (``INFO commandstats``: EVALSHA, nearly all of them the waiters' tries).

First (``--grant-cost``), without that load: the server time and round trip of single grant
attempts on a lock whose line of N waiters was written with the grant script itself.

Printed as median / 99th percentile / max in milliseconds. Nothing is asserted (see
bench/README.md). Without ``--url``, a throwaway redis-server on a free loopback port. Each
N runs for about ``--seconds`` plus the time to queue the waiters, so the script is bounded.
To compare two versions of tumbler, run it with ``PYTHONPATH`` naming the other's ``src``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis

import tumbler
import tumbler.aio
from tumbler.backends.contract import GrantRequest

NAME = "crowded"


def request(owner: str, queue: bool = True) -> GrantRequest:
    return GrantRequest(NAME, owner, False, 1, False, 30.0, "bench", queue)


async def keep_line(url: str, waiters: int, seconds: float) -> None:
    """The line: ``waiters`` owners, each trying once a second, for ``seconds``."""
    async with await tumbler.aio.connect(f"{url}&max_connections=64") as locks:
        backend = locks._backend  # the waiters' own script call, as a waiting lock makes it
        stop = time.monotonic() + seconds
        tries = failures = 0

        async def waiter() -> None:
            nonlocal tries, failures
            owner = secrets.token_hex(16)
            await asyncio.sleep(random.random())  # spread the tries over the second
            while time.monotonic() < stop:
                started = time.monotonic()
                try:
                    await backend.try_grant(request(owner))
                    tries += 1
                except tumbler.TumblerError:  # a saturated server: what a waiter would see
                    failures += 1
                await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))

        began = time.monotonic()
        await asyncio.gather(*(waiter() for _ in range(waiters)))
        elapsed = time.monotonic() - began
        print(json.dumps({"tries": tries / elapsed, "failures": failures}), flush=True)


def sample(call: Callable[[], object], pause: float, stop: float, into: list[float]) -> None:
    while time.monotonic() < stop:
        started = time.perf_counter()
        call()
        into.append((time.perf_counter() - started) * 1000)
        if pause:
            time.sleep(pause)


def figures(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{statistics.median(ordered):7.2f} / {p99:7.2f} / {ordered[-1]:7.2f}"


def server_figures(admin: redis.Redis) -> tuple[float, int, int]:
    cpu = admin.info("cpu")
    stats = admin.info("commandstats").get("cmdstat_evalsha", {})
    return (
        float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
        int(stats.get("calls", 0)),
        int(stats.get("usec", 0)),
    )


def run(url: str, admin: redis.Redis, waiters: int, seconds: float) -> None:
    with tumbler.connect(url) as holder, tumbler.connect(url) as other:
        assert holder.lock(NAME, ttl=30).acquire(timeout=5)
        ramp = 3.0  # every waiter has queued within its first second
        line = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--url",
                url,
                "--keep-line",
                str(waiters),
                "--seconds",
                str(ramp + seconds),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(ramp)
        queued = holder.status(NAME).waiters
        newcomer = other._backend
        pings: list[float] = []
        others: list[float] = []
        attempts: list[float] = []
        ping_client = redis.Redis.from_url(url.split("?")[0])

        def acquire_release() -> None:
            lock = other.lock(f"other-{random.randrange(1000)}", ttl=30)
            assert lock.acquire(timeout=10)
            lock.release()

        def attempt() -> None:
            assert newcomer.try_grant(request(secrets.token_hex(16), queue=False)) is None

        cpu0, calls0, usec0 = server_figures(admin)
        began = time.monotonic()
        stop = began + seconds
        threads = [
            threading.Thread(target=sample, args=(ping_client.ping, 0.005, stop, pings)),
            threading.Thread(target=sample, args=(acquire_release, 0.0, stop, others)),
            threading.Thread(target=sample, args=(attempt, 0.02, stop, attempts)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - began
        cpu1, calls1, usec1 = server_figures(admin)
        out, _ = line.communicate(timeout=ramp + seconds + 60)
        line_figures = json.loads(out.strip().splitlines()[-1])
        ping_client.close()
    per_call = (usec1 - usec0) / max(1, calls1 - calls0)
    print(
        f"waiters {waiters:6d} (queued {queued}): tries {line_figures['tries']:7.0f}/s "
        f"({line_figures['failures']} failed), "
        f"server CPU {100 * (cpu1 - cpu0) / elapsed:5.1f}% of a core, "
        f"script call {per_call:7.1f} us (server time, mean)"
    )
    print(f"  PING                      ms median / p99 / max  {figures(pings)}")
    print(f"  other lock acquire+release ms median / p99 / max  {figures(others)}")
    print(f"  crowded lock, one try     ms median / p99 / max  {figures(attempts)}")


def grant_cost(admin: redis.Redis, sizes: list[int], attempts: int = 500) -> None:
    """Server time of one grant attempt on a lock with N waiters, the line written by the
    grant script itself (waiters with a long lease, so that none runs out meanwhile)."""
    from tumbler.backends.redis import lua

    keys = lua.Keys(f"tumbler:bench-{secrets.token_hex(4)}")
    grant = admin.register_script(lua.GRANT)

    def args(owner: str, queue: bool) -> list[object]:
        # owner, shared, limit, fair, ttl_ms, holder, queue, waiter_ttl_ms, sequence_ttl_ms,
        # client, max_waiters (an older script ignores the last)
        return [
            owner,
            0,
            1,
            0,
            60_000,
            "bench",
            int(queue),
            600_000,
            lua.SEQUENCE_TTL_MS,
            "",
            10**6,
        ]

    for size in sizes:
        name = f"cost-{size}"
        # the keys a script of this version takes (before the line's indexes: two)
        lock_keys = getattr(keys, "lock_keys", lambda n: [keys.entries(n), keys.sequence(n)])(name)
        assert grant(lock_keys, args("holder", True))[0] == 1
        for start in range(0, size, 1000):
            pipe = admin.pipeline(transaction=False)
            for index in range(start, min(size, start + 1000)):
                grant(lock_keys, args(f"waiter-{index}", True), client=pipe)
            pipe.execute()
        _cpu, calls0, usec0 = server_figures(admin)
        started = time.perf_counter()
        for index in range(attempts):
            grant(lock_keys, args(f"newcomer-{index}", False))
        elapsed = time.perf_counter() - started
        _cpu, calls1, usec1 = server_figures(admin)
        print(
            f"grant attempt with {size:6d} waiters: {(usec1 - usec0) / (calls1 - calls0):8.1f} us "
            f"server time, {1000 * elapsed / attempts:6.2f} ms round trip (mean of {attempts})"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="a redis:// URL (default: a throwaway server)")
    parser.add_argument("--waiters", default="1000,2000", help="comma-separated line lengths")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--grant-cost",
        default="10,1000,10000",
        help="comma-separated line lengths at which to time single grant attempts ('' skips)",
    )
    parser.add_argument("--keep-line", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.keep_line is not None:
        asyncio.run(keep_line(args.url, args.keep_line, args.seconds))
        return 0
    print(f"tumbler from {Path(tumbler.__file__).parent}")
    with tempfile.TemporaryDirectory(prefix="tumbler-bench-") as workdir:
        server = None
        url = args.url
        if url is None:
            from tumbler.testing.backends.redis.server import RedisServer

            server = RedisServer(Path(workdir) / "redis").start()
            url = server.url
        # a prefix of its own: nothing else on the server is touched
        url = f"{url}{'&' if '?' in url else '?'}prefix=tumbler:bench-{secrets.token_hex(4)}"
        admin = redis.Redis.from_url(url.split("?")[0])
        try:
            if args.grant_cost:
                grant_cost(admin, [int(part) for part in args.grant_cost.split(",")])
            for waiters in (int(part) for part in args.waiters.split(",") if part):
                run(url, admin, waiters, args.seconds)
        finally:
            admin.close()
            if server is not None:
                server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
