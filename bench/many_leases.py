"""Many leases on one client: does the client keep N holds renewed, and at what cost?

    python bench/many_leases.py --start zookeeper                 # a throwaway ZooKeeper
    python bench/many_leases.py --start redis --locks 10000 --ttl 3   # a throwaway redis-server
    python bench/many_leases.py "sqlite://$(mktemp -d)/leases.db" --hold 30
    python bench/many_leases.py --start redis --asyncio           # the asyncio client

One client acquires ``--locks`` distinct locks with lease ``--ttl`` through the public API and
keeps them for ``--hold`` seconds after the last grant; its own renewal worker renews them
(every hold due at a third of its lease, every due hold in one ``renew_all`` call), and its
deadline watch reports any hold whose lease ran out. Then it releases them.

Printed: the time to acquire them all; holds lost (``on_lost`` calls, during the acquisition
and during the hold); RSS (``VmRSS``) after connecting (interpreter, driver, connection) and
the growth to the peak (``VmHWM``) from there; the process's CPU during the hold as a share of
one core. Nothing is asserted (bench/README.md says why); the exit status is 1 if any hold
was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator

import tumbler
import tumbler.aio
from targets import default_target, started
from tumbler.testing.bench import store_bench


def _status_kib(field_name: str) -> int:
    """A ``kB`` field of /proc/self/status (Linux), 0 where there is none."""
    with contextlib.suppress(OSError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


class Tally:
    """What the run saw; ``on_lost`` callbacks come from the client's background workers."""

    def __init__(self) -> None:
        self.guard = threading.Lock()
        self.lost = 0
        self.phase = "acquire"
        self.lost_by_phase: dict[str, int] = {}

    def on_lost(self, _hold: object) -> None:
        with self.guard:
            self.lost += 1
            self.lost_by_phase[self.phase] = self.lost_by_phase.get(self.phase, 0) + 1


def report(args: argparse.Namespace, tally: Tally, figures: dict[str, float]) -> int:
    print(f"backend      {args.url}  ({'asyncio' if args.asyncio else 'blocking'} client)")
    print(f"locks        {args.locks} at ttl={args.ttl:g} s, held {args.hold:g} s")
    print(f"acquire      {figures['acquire']:.1f} s ({args.locks / figures['acquire']:.0f}/s)")
    print(f"lost         {tally.lost}  {tally.lost_by_phase or ''}")
    print(
        f"RSS          {figures['rss_base'] / 1024:.1f} MiB connected, "
        f"+{(figures['rss_peak'] - figures['rss_base']) / 1024:.1f} MiB at the peak"
    )
    print(f"CPU (hold)   {100 * figures['cpu'] / args.hold:.1f}% of one core")
    return 1 if tally.lost else 0


def run_blocking(args: argparse.Namespace) -> int:
    tally = Tally()
    figures: dict[str, float] = {}
    with tumbler.connect(args.url) as locks:
        figures["rss_base"] = _status_kib("VmRSS")
        started = time.monotonic()
        holds = []
        for index in range(args.locks):
            lock = locks.lock(f"lease-{index}", ttl=args.ttl)
            assert lock.acquire(timeout=args.ttl), f"lease-{index} was not granted"
            hold = lock.hold
            assert hold is not None
            hold.on_lost(tally.on_lost)
            holds.append(hold)
        figures["acquire"] = time.monotonic() - started
        tally.phase = "hold"
        cpu = time.process_time()
        threading.Event().wait(args.hold)
        figures["cpu"] = time.process_time() - cpu
        figures["rss_peak"] = _status_kib("VmHWM")
        tally.phase = "release"
        for hold in holds:
            with contextlib.suppress(tumbler.LockLost):
                hold.release()
    return report(args, tally, figures)


async def run_async(args: argparse.Namespace) -> int:
    tally = Tally()
    figures: dict[str, float] = {}
    async with await tumbler.aio.connect(args.url) as locks:
        figures["rss_base"] = _status_kib("VmRSS")
        started = time.monotonic()
        holds = []
        for index in range(args.locks):
            lock = locks.lock(f"lease-{index}", ttl=args.ttl)
            assert await lock.acquire(timeout=args.ttl), f"lease-{index} was not granted"
            hold = lock.hold
            assert hold is not None
            hold.on_lost(tally.on_lost)
            holds.append(hold)
        figures["acquire"] = time.monotonic() - started
        tally.phase = "hold"
        cpu = time.process_time()
        await asyncio.sleep(args.hold)
        figures["cpu"] = time.process_time() - cpu
        figures["rss_peak"] = _status_kib("VmHWM")
        tally.phase = "release"
        for hold in holds:
            with contextlib.suppress(tumbler.LockLost):
                await hold.release()
    return report(args, tally, figures)


@contextlib.contextmanager
def server(args: argparse.Namespace) -> Iterator[None]:
    """Start the throwaway server asked for, and point ``args.url`` at it."""
    with contextlib.ExitStack() as stack:
        if args.start:
            directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="many-leases-"))
            url = stack.enter_context(started(args.start, os.path.join(directory, args.start)))
            bench = store_bench(url)
            args.url = url if bench is None else bench.lease_url(url, args.ttl)
        if args.url is None:
            directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="many-leases-"))
            name = default_target()
            args.url = stack.enter_context(started(name, os.path.join(directory, name)))
        yield


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "url", nargs="?", help="backend URL (default: a fresh file of the default backend)"
    )
    parser.add_argument(
        "--start",
        metavar="NAME",
        help="start a built-in backend's test target by name (an unknown name lists them) "
        "and use it",
    )
    parser.add_argument("--locks", type=int, default=10_000)
    parser.add_argument("--ttl", type=float, default=3.0)
    parser.add_argument("--hold", type=float, default=30.0)
    parser.add_argument("--asyncio", action="store_true", help="the asyncio client")
    args = parser.parse_args()
    with server(args):
        if args.asyncio:
            return asyncio.run(run_async(args))
        return run_blocking(args)


if __name__ == "__main__":
    sys.exit(main())
