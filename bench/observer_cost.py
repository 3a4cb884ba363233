"""What observing costs: uncontended acquire+release pairs per second with no observer, with an
observer that does nothing, and with tumbler.otel's observer on OpenTelemetry's SDK.

    python bench/observer_cost.py                       # memory:// and a fresh SQLite file
    python bench/observer_cost.py --pairs 5000 --rounds 15 --json observers.json
    python bench/observer_cost.py --url redis://127.0.0.1:6379/0   # another backend

Rows, for each URL and each flavour (blocking, asyncio):

- ``none``: ``connect(url)``, no observer: the client has no dispatch at all;
- ``no-op``: an observer that overrides every event with ``pass``: each event made and
  handed to it, nothing done with it;
- ``otel-metrics``: ``tumbler.otel.OpenTelemetryObserver`` on an SDK ``MeterProvider`` read by an
  ``InMemoryMetricReader`` (nothing exported meanwhile), spans off (the API's no-op tracer);
- ``otel``: the same with an SDK ``TracerProvider`` whose ``SimpleSpanProcessor`` hands every
  span to an ``InMemorySpanExporter`` (cleared after each slice): two spans a pair.

Each row has its own client, opened (and warmed up with 100 pairs) before any is timed. A
round times ``--pairs`` pairs of every row of a URL and flavour, in a shuffled order, so that
load from elsewhere on the machine falls on all of them alike; the figures are the medians over
``--rounds`` rounds, and each ratio (``x none``) the median of the rounds' ratios to the
``none`` row of the same round. ``--clock cpu`` times by the CPU time the process used (all its
threads) rather than the wall clock: on a machine shared with other work, it moves less. Nothing
here asserts a speed.

Needs ``opentelemetry-sdk`` (the dev extra has it) for the two ``otel`` rows; without it they
are left out, and said so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tumbler
import tumbler.aio
from tumbler.observe import (
    AcquireFailed,
    AcquireGranted,
    AcquireStarted,
    AcquireTimedOut,
    AcquireWaiting,
    HoldLost,
    Observer,
    Released,
    ReleaseStarted,
    RenewalFailed,
    Renewed,
)

WARM_UP = 100
#: what ``--clock`` times the slices with
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


class NoOp(Observer):
    """Hears every event and does nothing with it."""

    def acquire_started(self, event: AcquireStarted) -> None:
        pass

    def acquire_waiting(self, event: AcquireWaiting) -> None:
        pass

    def acquire_granted(self, event: AcquireGranted) -> None:
        pass

    def acquire_timed_out(self, event: AcquireTimedOut) -> None:
        pass

    def acquire_failed(self, event: AcquireFailed) -> None:
        pass

    def release_started(self, event: ReleaseStarted) -> None:
        pass

    def released(self, event: Released) -> None:
        pass

    def lost(self, event: HoldLost) -> None:
        pass

    def renewed(self, event: Renewed) -> None:
        pass

    def renewal_failed(self, event: RenewalFailed) -> None:
        pass


@dataclass
class Setup:
    """One row's observers, and what to do after each timed slice (empty the span store)."""

    label: str
    observers: list[Observer]
    after_slice: Callable[[], None] = lambda: None


def setups() -> tuple[list[Setup], str | None]:
    """The rows' setups; and why the OpenTelemetry rows are missing, if they are."""
    made = [Setup("none", []), Setup("no-op", [NoOp()])]
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )
        from opentelemetry.trace import NoOpTracerProvider

        from tumbler.otel import OpenTelemetryObserver
    except ImportError as error:
        return made, f"no otel rows: {error}"
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    made.append(
        Setup(
            "otel-metrics",
            [OpenTelemetryObserver(meter_provider=meters, tracer_provider=NoOpTracerProvider())],
        )
    )
    exporter = InMemorySpanExporter()
    tracers = TracerProvider()
    tracers.add_span_processor(SimpleSpanProcessor(exporter))
    observer = OpenTelemetryObserver(
        meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
        tracer_provider=tracers,
    )
    made.append(Setup("otel", [observer], exporter.clear))
    return made, None


@dataclass
class Row:
    url: str
    flavour: str
    setup: Setup
    per_second: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "flavour": self.flavour,
            "observers": self.setup.label,
            "pairs_per_s_median": statistics.median(self.per_second),
            "pairs_per_s_min": min(self.per_second),
            "pairs_per_s_max": max(self.per_second),
            "us_per_pair_median": 1e6 / statistics.median(self.per_second),
            "x_none_median": statistics.median(self.ratios),
            "pairs_per_s": self.per_second,
        }


def blocking_rounds(
    url: str, rows: list[Row], pairs: int, rounds: int, tag: str, clock: Callable[[], float]
) -> None:
    clients = [tumbler.connect(url, observers=row.setup.observers) for row in rows]
    try:
        locks = [client.lock(f"{tag}-{index}") for index, client in enumerate(clients)]

        def pair_run(lock: tumbler.Lock, count: int) -> float:
            start = clock()
            for _ in range(count):
                lock.acquire()
                lock.release()
            return clock() - start

        for lock in locks:
            pair_run(lock, WARM_UP)
        for _ in range(rounds):
            took = {}
            for index in random.sample(range(len(rows)), len(rows)):
                took[index] = pair_run(locks[index], pairs)
                rows[index].setup.after_slice()
            record(rows, took, pairs)
    finally:
        for client in clients:
            client.close()


def asyncio_rounds(
    url: str, rows: list[Row], pairs: int, rounds: int, tag: str, clock: Callable[[], float]
) -> None:
    async def run() -> None:
        clients = [await tumbler.aio.connect(url, observers=row.setup.observers) for row in rows]
        try:
            locks = [client.lock(f"{tag}-{index}") for index, client in enumerate(clients)]

            async def pair_run(lock: tumbler.aio.AsyncLock, count: int) -> float:
                start = clock()
                for _ in range(count):
                    await lock.acquire()
                    await lock.release()
                return clock() - start

            for lock in locks:
                await pair_run(lock, WARM_UP)
            for _ in range(rounds):
                took = {}
                for index in random.sample(range(len(rows)), len(rows)):
                    took[index] = await pair_run(locks[index], pairs)
                    rows[index].setup.after_slice()
                record(rows, took, pairs)
        finally:
            for client in clients:
                await client.close()

    asyncio.run(run())


def record(rows: list[Row], took: dict[int, float], pairs: int) -> None:
    """One round's figures: pairs per second, and the ratio to the row without observers."""
    rates = {index: pairs / seconds for index, seconds in took.items()}
    base = rates[0]
    for index, rate in rates.items():
        rows[index].per_second.append(rate)
        rows[index].ratios.append(rate / base)


def print_table(summaries: list[dict[str, Any]]) -> None:
    print(f"{'backend':<10} {'flavour':<9} {'observers':<13} {'pairs/s (min-max)':>26} "
          f"{'us/pair':>8} {'x none':>7}")  # fmt: skip
    for row in summaries:
        spread = f"({row['pairs_per_s_min']:.0f}-{row['pairs_per_s_max']:.0f})"
        print(
            f"{row['url'].partition(':')[0]:<10} {row['flavour']:<9} {row['observers']:<13} "
            f"{row['pairs_per_s_median']:>10.0f} {spread:>15} {row['us_per_pair_median']:>8.1f} "
            f"{row['x_none_median']:>7.3f}"
        )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", action="append", help="backend URL (repeatable)")
    parser.add_argument("--pairs", type=int, default=2000, help="pairs per slice (default 2000)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds (default 9)")
    parser.add_argument(
        "--flavour", choices=("blocking", "asyncio", "both"), default="both", help="default both"
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="time the slices by the wall clock (default), or by the CPU time the process "
        "used (every thread's: less moved by other work on a loaded machine)",
    )
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    made, missing = setups()
    if missing:
        print(missing, file=sys.stderr)
    flavours = ["blocking", "asyncio"] if options.flavour == "both" else [options.flavour]
    before = os.getloadavg()
    summaries = []
    with tempfile.TemporaryDirectory(prefix="tumbler-observers-") as workdir:
        urls = options.url or ["memory://observer-cost", f"sqlite:///{workdir}/locks.db"]
        for url in urls:
            for flavour in flavours:
                print(f"{url.partition(':')[0]} {flavour} ...", file=sys.stderr)
                rows = [Row(url, flavour, setup) for setup in made]
                rounds = blocking_rounds if flavour == "blocking" else asyncio_rounds
                tag = f"bench-observers-{flavour}"
                rounds(url, rows, options.pairs, options.rounds, tag, CLOCKS[options.clock])
                summaries += [row.summary() for row in rows]
    after = os.getloadavg()
    print_table(summaries)
    print(
        f"{options.pairs} pairs x {options.rounds} rounds per row, {options.clock} clock; load "
        f"average {before[0]:.2f} before, {after[0]:.2f} after"
    )
    if options.json:
        figures = {
            "pairs": options.pairs,
            "rounds": options.rounds,
            "clock": options.clock,
            "python": sys.version.split()[0],
            "loadavg_1m": [round(before[0], 2), round(after[0], 2)],
            "rows": summaries,
        }
        options.json.write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
