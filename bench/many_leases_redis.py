"""Many leases on one Redis client: are they all kept, on schedule, in little memory?

    python bench/many_leases_redis.py [--leases 10000] [--ttl 3] [--seconds 30]
                                      [--flavour sync|asyncio] [--url redis://...]

Takes ``--leases`` locks on one client (through its backend: no lock-layer holds, and with a
long first lease, so that taking them all does not outlast it), then renews them the way the
client's renewal worker does: every ttl/3, every due lease in one ``renew_all`` call, bounded
by the least time left on those leases. It prints, per flavour:
how long each ``renew_all`` took, how late each round started, how many leases were lost
(refused by a renewal, or found gone on the server at the end), the script calls the server
ran per round, and the process's resident memory (RSS) before the leases, once they are all
held, and at its highest during the run. Without ``--url`` it starts a throwaway
redis-server (``tumbler.testing.servers``). Bounded: it runs ``--seconds`` plus the time to
take the leases.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

import tumbler
import tumbler.aio
from tumbler.backends.contract import GrantRequest, Renewal


def rss_mb() -> float:
    """This process's resident memory, in MB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Run:
    """What one run measured."""

    def __init__(self) -> None:
        self.took: list[float] = []
        self.late: list[float] = []
        self.lost = 0
        self.failures = 0
        self.rss_held = 0.0
        self.rss_peak = 0.0

    def round(self, began: float, due: float, results: list[float | None] | None) -> None:
        self.took.append(time.monotonic() - began)
        self.late.append(max(0.0, began - due))
        if results is None:
            self.failures += 1
        else:
            self.lost += sum(1 for result in results if result is None)
        self.rss_peak = max(self.rss_peak, rss_mb())


def script_calls(admin: redis.Redis) -> int:
    stats = admin.info("commandstats")
    return sum(
        int(stats.get(command, {}).get("calls", 0))
        for command in ("cmdstat_evalsha", "cmdstat_eval")
    )


def still_held(admin: redis.Redis, prefix: str, leases: int) -> int:
    """Leases whose entry the server still has, live."""
    from tumbler.backends._redis_lua import Keys

    keys = Keys(prefix)
    pipe = admin.pipeline(transaction=False)
    for index in range(leases):
        pipe.hlen(keys.entries(f"lease-{index}"))
        pipe.pttl(keys.entries(f"lease-{index}"))
    replies = pipe.execute()
    return sum(1 for n, ttl in zip(replies[::2], replies[1::2], strict=True) if n and ttl > 0)


def schedule(ttl: float, seconds: float) -> list[float]:
    """The renewal worker's rounds: every ttl/3 from now, for ``seconds``."""
    start = time.monotonic()
    return [start + ttl / 3 * (n + 1) for n in range(int(seconds / (ttl / 3)))]


#: the lease the locks are taken with: taking 20,000 one after the other takes longer than a
#: ttl of 3 s, and the first would run out before the first round; the rounds set --ttl
GRANT_TTL = 120.0


def grant_requests(leases: int) -> list[GrantRequest]:
    """One exclusive lock per lease, each of its own owner, taken without waiting."""
    return [
        GrantRequest(
            name=f"lease-{index}",
            owner=secrets.token_urlsafe(18),
            shared=False,
            limit=1,
            fair=False,
            ttl=GRANT_TTL,
            holder="bench",
            queue=False,
        )
        for index in range(leases)
    ]


def run_sync(url: str, leases: int, ttl: float, seconds: float, run: Run) -> Callable[[], Any]:
    # The backend itself, not the lock layer: its renewal worker (being rewritten) would renew
    # or give back the leases on its own schedule; this drives renew_all as it will.
    locks = tumbler.connect(url)
    backend = locks._backend
    requests = grant_requests(leases)
    for request in requests:
        if backend.try_grant(request) is None:
            raise SystemExit(f"{request.name} is taken: use an empty prefix")
    run.rss_held = rss_mb()
    renewals = [Renewal(request.name, request.owner, ttl) for request in requests]
    # the first round sets every lease to ttl; each later one must come before they run out
    last_ok = time.monotonic() + GRANT_TTL - ttl
    for due in schedule(ttl, seconds):
        time.sleep(max(0.0, due - time.monotonic()))
        began = time.monotonic()
        try:
            results = backend.renew_all(renewals, max(0.01, last_ok + ttl - began))
            last_ok = began
        except tumbler.BackendUnavailable:
            results = None
        run.round(began, due, results)
    return locks.close


async def run_async(url: str, leases: int, ttl: float, seconds: float, run: Run) -> None:
    locks = await tumbler.aio.connect(url)
    backend = locks._backend
    requests = grant_requests(leases)
    for start in range(0, leases, 100):  # 100 grants in flight at a time
        batch = requests[start : start + 100]
        if None in await asyncio.gather(*(backend.try_grant(request) for request in batch)):
            raise SystemExit("a lease is taken: use an empty prefix")
    run.rss_held = rss_mb()
    renewals = [Renewal(request.name, request.owner, ttl) for request in requests]
    last_ok = time.monotonic() + GRANT_TTL - ttl
    for due in schedule(ttl, seconds):
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        began = time.monotonic()
        try:
            results = await backend.renew_all(renewals, max(0.01, last_ok + ttl - began))
            last_ok = began
        except tumbler.BackendUnavailable:
            results = None
        run.round(began, due, results)
    await locks.close()


def report(flavour: str, run: Run, rss_base: float, calls: int, held: int, leases: int) -> None:
    took = sorted(run.took)
    rounds = len(took)
    print(f"{flavour}: {leases} leases, {rounds} rounds of renew_all")
    print(
        f"  renew_all took: median {statistics.median(took) * 1000:.0f} ms, "
        f"max {took[-1] * 1000:.0f} ms ({leases / statistics.median(took):,.0f} renewals/s)"
    )
    print(f"  rounds started late: max {max(run.late) * 1000:.0f} ms")
    print(f"  script calls per round: {calls / rounds:.1f}")
    print(
        f"  lost: {run.lost} refused by a renewal, {run.failures} rounds failed, "
        f"{leases - held} gone on the server at the end"
    )
    print(
        f"  RSS: {rss_base:.0f} MB connected, {run.rss_held:.0f} MB with the leases held "
        f"(+{run.rss_held - rss_base:.0f}), peak {run.rss_peak:.0f} MB "
        f"(+{run.rss_peak - rss_base:.0f})"
    )


def measure(url: str, admin: redis.Redis, args: argparse.Namespace) -> None:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    url = f"{url}{'&' if '?' in url else '?'}prefix={prefix}"
    run = Run()
    if args.flavour == "sync":
        # the baseline: interpreter, redis-py and tumbler loaded, the client connected
        with tumbler.connect(url) as probe:
            probe.status("warm-up")
            rss_base = rss_mb()
        calls_before = script_calls(admin)
        close = run_sync(url, args.leases, args.ttl, args.seconds, run)
        calls = script_calls(admin) - calls_before - args.leases
        held = still_held(admin, prefix, args.leases)
        close()
    else:

        async def main() -> tuple[float, int, int]:
            async with await tumbler.aio.connect(url) as probe:
                await probe.status("warm-up")
                base = rss_mb()
            calls_before = script_calls(admin)
            await run_async(url, args.leases, args.ttl, args.seconds, run)
            calls = script_calls(admin) - calls_before - args.leases
            return base, calls, still_held(admin, prefix, args.leases)

        rss_base, calls, held = asyncio.run(main())
    report(args.flavour, run, rss_base, calls, held, args.leases)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leases", type=int, default=10_000)
    parser.add_argument("--ttl", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--flavour", choices=["sync", "asyncio"], default="sync")
    parser.add_argument("--url", help="a Redis to use (default: a throwaway redis-server)")
    args = parser.parse_args()
    if args.url:
        with redis.Redis.from_url(args.url) as admin:
            measure(args.url, admin, args)
        return 0
    from tumbler.testing.servers.redis import RedisServer

    with (
        tempfile.TemporaryDirectory() as workdir,
        RedisServer(Path(workdir)) as server,
        server.client() as admin,
    ):
        measure(server.url, admin, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
