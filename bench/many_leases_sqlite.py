"""Many leases on SQLite, renewed the way the renewal worker will: all due ones in one call.

    python bench/many_leases_sqlite.py [--url sqlite:///path] [--leases 10000] [--ttl 3]
                                       [--seconds 30] [--flavour sync|async]

Grants ``--leases`` locks (one each, ``--ttl`` lease) on one backend, then for ``--seconds``
calls ``renew_all`` with every lease each ``ttl/3`` (the renewal worker's schedule, with
``timeout`` = the least time left on them), on the blocking backend or through the asyncio
adapter. Reports: leases lost (a renewal that returned None, or a lease not live at the end as
another connection sees it), how late each call began against its schedule and how long it
took (median, p99, max), and the process's resident memory beyond what it used before the
first grant (now, and at its peak). Bounded: grants, then ``--seconds``, then the check.
Without ``--url``, a fresh SQLite file in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tumbler._url import parse_url
from tumbler.backends import sqlite as sqlite_backend
from tumbler.backends.contract import GrantRequest, Renewal


def memory_kib() -> tuple[int, int]:
    """Resident set size now and at its peak (VmRSS, VmHWM), in KiB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def run(args: argparse.Namespace, url: str) -> int:
    parsed = parse_url(url)
    backend: Any
    if args.flavour == "async":
        backend = await sqlite_backend.open_async(parsed)
    else:
        backend = sqlite_backend.open_sync(parsed)

    async def call(method: str, *call_args: Any) -> Any:
        result = getattr(backend, method)(*call_args)
        return await result if args.flavour == "async" else result

    rss_before, _ = memory_kib()
    renewals = [Renewal(f"lease-{i}", f"owner-{i}", args.ttl) for i in range(args.leases)]
    began = time.monotonic()
    for renewal in renewals:
        request = GrantRequest(
            renewal.name, renewal.owner, False, 1, False, args.ttl, "bench", True
        )
        if await call("try_grant", request) is None:
            raise SystemExit(f"{renewal.name} was not granted")
    granted_at = time.monotonic()
    print(f"granted {args.leases} leases in {granted_at - began:.2f} s", file=sys.stderr)
    interval = args.ttl / 3
    renewed_at = granted_at  # every lease was renewed (granted) by then at the latest
    lags: list[float] = []
    durations: list[float] = []
    lost = 0
    failures = 0
    tick = 1
    stop = granted_at + args.seconds
    while True:
        due = renewed_at + interval
        if due > stop:
            break
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        started = time.monotonic()
        lags.append(started - due)
        try:
            results = await call("renew_all", renewals, renewed_at + args.ttl - started)
        except Exception as error:  # reported, and the next tick tries again
            failures += 1
            print(f"tick {tick}: {error}", file=sys.stderr)
            continue
        finally:
            durations.append(time.monotonic() - started)
            tick += 1
        lost += sum(1 for result in results if result is None)
        renewed_at = started
    rss_after, rss_peak = memory_kib()
    path, _ = sqlite_backend.resolve_path(parsed)
    with contextlib.closing(sqlite3.connect(path)) as db:
        live = db.execute(
            "SELECT count(*) FROM tumbler_entries WHERE token IS NOT NULL AND expires_at > ? "
            "AND name LIKE 'lease-%'",  # others may use the same file
            (sqlite_backend._now_ns(),),
        ).fetchone()[0]
    await call("close")
    ms = 1000
    print(f"flavour {args.flavour}, {args.leases} leases, ttl {args.ttl} s, {args.seconds} s")
    print(f"renew_all calls: {len(durations)} ({failures} failed)")
    print(
        f"call took ms: median {ms * statistics.median(durations):.1f}, "
        f"p99 {ms * percentile(durations, 0.99):.1f}, max {ms * max(durations):.1f}"
    )
    print(
        f"call began late ms: median {ms * statistics.median(lags):.1f}, "
        f"p99 {ms * percentile(lags, 0.99):.1f}, max {ms * max(lags):.1f}"
    )
    print(f"renewals refused (lost): {lost}; live at the end: {live} of {args.leases}")
    print(
        f"RSS beyond the start: now {(rss_after - rss_before) / 1024:.1f} MiB, "
        f"peak {(rss_peak - rss_before) / 1024:.1f} MiB (start {rss_before / 1024:.1f} MiB)"
    )
    return 0 if lost == 0 and failures == 0 and live == args.leases else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="sqlite:///path (default: a new file)")
    parser.add_argument("--leases", type=int, default=10_000)
    parser.add_argument("--ttl", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--flavour", choices=("sync", "async"), default="sync")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        url = args.url or f"sqlite:///{Path(directory) / 'locks.db'}"
        return asyncio.run(run(args, url))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
