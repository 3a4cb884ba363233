"""tumbler's benchmark: uncontended pair latency, contended hand-off and fairness.

    python bench/bench.py                              # a fresh SQLite file in a temp dir
    python bench/bench.py --url "sqlite://$(mktemp -d)/l.db" --url memory://
    python bench/bench.py --quick                      # a few seconds, to see that it runs
    python bench/bench.py --start redis                # + a throwaway redis-server: the peers
    python bench/bench.py --repeat 3 --json out.json   # as peer-bench.md measured the peers

Every backend URL gets the same measurements, and all of them land in one table per
measurement, one row per contender and backend (see bench/README.md for the columns). The
figures follow the definitions of the project's peer benchmark (peer-bench.md), so that
tumbler's rows compare with the peers' there. Speed goals live in this output, never in tests.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import json
import math
import os
import platform
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import measure
import tumbler
from contenders import contenders_for, known_names, peer_schemes, server_version
from targets import default_target, peer_targets, started
from tumbler._url import parse_url
from tumbler.testing.bench import Contender, Options, store_bench

DEFAULT_PAIRS = 2000
DEFAULT_PROCS = (4, 16)
DEFAULT_SECONDS = 5.0
DEFAULT_REPEAT = 3
QUICK_PAIRS, QUICK_PROCS, QUICK_SECONDS = 200, (2,), 1.0


@dataclass
class Row:
    """One table row: a contender on a backend (and a worker count), over the repeats."""

    contender: Contender
    backend: str
    workers: int | None = None
    repeats: list[dict[str, Any]] = field(default_factory=list)
    #: uncontended rows: pair median / the reference peer's, and / the floor of the same
    #: flavour, on the same backend (see ``ratios``); None where there is no such row
    peer_ratio: float | None = None
    floor_ratio: float | None = None

    def figure(self, key: str) -> tuple[float, float, float] | None:
        """Median, min and max of ``key`` over the repeats; None if no repeat has it."""
        values = [
            float(run[key])
            for run in self.repeats
            if isinstance(run.get(key), (int, float)) and not math.isnan(run[key])
        ]
        if not values:
            return None
        return statistics.median(values), min(values), max(values)

    def as_json(self) -> dict[str, Any]:
        keys = sorted(
            {
                key
                for run in self.repeats
                for key, value in run.items()
                if isinstance(value, (int, float)) and not isinstance(value, bool)
            }
        )
        summary = {}
        for key in keys:
            figure = self.figure(key)
            summary[key] = (
                None
                if figure is None
                else {"median": figure[0], "min": figure[1], "max": figure[2]}
            )
        result: dict[str, Any] = {
            "contender": self.contender.label,
            "backend": self.backend,
            "url": parse_url(self.contender.url).redacted,
            "flavour": "asyncio" if self.contender.is_async else "blocking",
        }
        if self.workers is not None:
            result["workers"] = self.workers
            result["mode"] = "processes" if self.contender.cross_process else "threads"
            result["counter_ok"] = self.counter_ok
        if self.workers is None:
            summary["pair_median_per_peer"] = self.peer_ratio
            summary["pair_median_per_floor"] = self.floor_ratio
        result["summary"] = summary
        result["repeats"] = [_finite(run) for run in self.repeats]
        return result

    @property
    def counter_ok(self) -> str:
        good = sum(1 for run in self.repeats if run.get("counter_ok"))
        return f"{'OK' if good == len(self.repeats) else 'FAIL'} {good}/{len(self.repeats)}"

    @property
    def errors(self) -> list[str]:
        return [error for run in self.repeats for error in run.get("errors", ())]


def _finite(value: Any) -> Any:
    """NaN becomes null: JSON has no NaN."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "(not installed)"


# -- the run ------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    try:
        load = os.getloadavg()
    except OSError:
        load = (math.nan, math.nan, math.nan)
    return {
        "cpus": os.cpu_count(),
        "cpus_usable": usable,
        "platform": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "tumbler": tumbler.__version__,
        "loadavg_1m": round(load[0], 2),
    }


@dataclass
class Plan:
    urls: list[tuple[str, str]]  # (url, label)
    pairs: int
    procs: tuple[int, ...]
    seconds: float
    repeat: int
    options: Options
    names: list[str] | None
    workdir: str


def run(plan: Plan, progress: Callable[[str], None]) -> tuple[list[Row], list[Row]]:
    """Every measurement, each repeated ``plan.repeat`` times in a row (as peer-bench did)."""
    tag = secrets.token_hex(4)
    flat: list[Row] = []
    crowded: list[Row] = []
    for url, label in plan.urls:
        found = contenders_for(url, plan.options, plan.names)
        if not found:
            progress(f"no contender runs on {label}")
        # contender index -> why it never locked: its contended runs would only repeat that
        unable: dict[int, str] = {}
        rows = [Row(contender, label) for contender in found]
        for attempt in range(1, plan.repeat + 1):
            # the contenders of one backend take turns (measure.ROUNDS slices each), so that
            # their ratios compare figures taken under the same conditions
            progress(f"{len(found)} contenders on {label}: uncontended, repeat {attempt}")
            figures = measure.uncontended_rounds(found, f"bench-{tag}-pairs", plan.pairs)
            for row, run in zip(rows, figures, strict=True):
                row.repeats.append(run)
        for index, row in enumerate(rows):
            flat.append(row)
            if all(run.get("errors") for run in row.repeats):
                unable[index] = row.repeats[-1]["errors"][0]
        for index, contender in enumerate(found):
            if contender.floor:  # it excludes nothing: only its uncontended pair means anything
                continue
            for workers in plan.procs:
                row = Row(contender, label, workers)
                if index in unable:
                    progress(f"{contender.label} on {label}: {workers} workers skipped")
                    reason = f"not run: no uncontended repeat could lock ({unable[index]})"
                    row.repeats.append({"workers": workers, "errors": [reason], "skipped": True})
                    crowded.append(row)
                    continue
                kind = "processes" if contender.cross_process else "threads"
                for attempt in range(1, plan.repeat + 1):
                    progress(
                        f"{contender.label} on {label}: {workers} {kind}, "
                        f"{plan.seconds:g} s, repeat {attempt}"
                    )
                    row.repeats.append(
                        measure.contended(
                            contender, workers, plan.seconds, f"bench-{tag}-crowd", plan.workdir
                        )
                    )
                crowded.append(row)
    return flat, crowded


def ratios(flat: list[Row]) -> None:
    """Set each uncontended row's pair median as a multiple of its store's reference peer's
    (``StoreBench.reference``: for a floor's row too) and, but for a floor's, of the floor of
    its own flavour through the backend's own client (``Contender.floor``,
    ``Contender.same_client``), both measured on the same backend in this run."""

    def median(row: Row) -> float | None:
        figure = row.figure("pair_median_us")
        return None if figure is None else figure[0]

    for row in flat:
        mine = median(row)
        if mine is None:
            continue
        bench = store_bench(row.contender.url)
        for other in flat:
            if other.backend != row.backend or other is row:
                continue
            theirs = median(other)
            if not theirs:
                continue
            if bench is not None and other.contender.name == bench.reference:
                row.peer_ratio = mine / theirs
            if (
                not row.contender.floor
                and other.contender.floor
                and other.contender.same_client
                and other.contender.is_async == row.contender.is_async
            ):
                row.floor_ratio = mine / theirs


# -- the tables ---------------------------------------------------------------------------------


def _number(value: float, digits: int) -> str:
    return f"{value:,.{digits}f}" if digits else f"{round(value):,}"


def _cell(row: Row, key: str, digits: int, spread: bool = False) -> str:
    figure = row.figure(key)
    if figure is None:
        return "-"
    middle, low, high = figure
    text = _number(middle, digits)
    if spread and len(row.repeats) > 1:
        text += f" ({_number(low, digits)}-{_number(high, digits)})"
    return text


Column = tuple[str, Callable[[Row], str]]

UNCONTENDED: list[Column] = [
    ("contender", lambda row: row.contender.label),
    ("backend", lambda row: row.backend),
    ("n", lambda row: _cell(row, "n", 0)),
    ("pair median µs", lambda row: _cell(row, "pair_median_us", 0, spread=True)),
    ("pair p99 µs", lambda row: _cell(row, "pair_p99_us", 0, spread=True)),
    ("pairs/s", lambda row: _cell(row, "pairs_per_s", 0, spread=True)),
    ("acquire median µs", lambda row: _cell(row, "acquire_median_us", 0)),
    ("release median µs", lambda row: _cell(row, "release_median_us", 0)),
    ("server req/pair", lambda row: _cell(row, "server_requests_per_pair", 1)),
    ("x peer", lambda row: _ratio(row.peer_ratio)),
    ("x floor", lambda row: _ratio(row.floor_ratio)),
]


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _workers(row: Row) -> str:
    return f"{row.workers}" if row.contender.cross_process else f"{row.workers} threads"


def _check(row: Row) -> str:
    return "ERROR" if row.errors else row.counter_ok


CONTENDED: list[Column] = [
    ("contender", lambda row: row.contender.label),
    ("backend", lambda row: row.backend),
    ("P", _workers),
    ("acq/s", lambda row: _cell(row, "acq_per_s", 0, spread=True)),
    ("mean wait ms", lambda row: _cell(row, "wait_mean_ms", 2)),
    ("p99 wait ms", lambda row: _cell(row, "wait_p99_ms", 1)),
    ("max wait ms", lambda row: _cell(row, "wait_max_ms", 0)),
    ("handoff median ms", lambda row: _cell(row, "handoff_median_ms", 2, spread=True)),
    ("handoff p99 ms", lambda row: _cell(row, "handoff_p99_ms", 1)),
    ("self-reacquire %", lambda row: _cell(row, "self_reacquire_pct", 0)),
    ("Jain", lambda row: _cell(row, "jain", 2, spread=True)),
    ("counter check", _check),
    ("server ops/acq", lambda row: _cell(row, "server_ops_per_acq", 1)),
    ("server pushes/acq", lambda row: _cell(row, "server_pushes_per_acq", 2)),
    ("leases left", lambda row: _cell(row, "leases_left", 0, spread=True)),
    ("client CPU ms/acq", lambda row: _cell(row, "client_cpu_ms_per_acq", 2)),
]
#: columns a table leaves out when none of its rows has the figure (few stores count these)
SPARSE = {"server pushes/acq", "leases left"}


def render(
    plan: Plan,
    about: dict[str, Any],
    flat: list[Row],
    crowded: list[Row],
    markdown: bool,
) -> None:
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=400)  # a file or pipe: never wrap the tables
    style = box.MARKDOWN if markdown else box.SIMPLE_HEAD
    host = about["machine"]
    console.print(f"[bold]tumbler bench[/bold] {about['date']}")
    libraries = "".join(f", {name} {version}" for name, version in about["libraries"].items())
    console.print(
        f"machine: {host['cpus']} CPUs ({host['cpus_usable']} usable), {host['platform']}, "
        f"load {host['loadavg_1m']} -> {about['loadavg_1m_end']}; {host['python']}, "
        f"tumbler {host['tumbler']}{libraries}"
    )
    console.print(
        f"pairs {plan.pairs}, workers {','.join(map(str, plan.procs))} x {plan.seconds:g} s, "
        f"repeats {plan.repeat}, ttl {plan.options.ttl:g} s, timeout {plan.options.timeout:g} s, "
        f"fair={plan.options.fair}"
    )
    for url, label in plan.urls:
        notes = []
        if server := about["servers"].get(url):
            notes.append(server)
        shown = parse_url(url).redacted
        if label != shown or notes:
            named = f" = {shown}" if label != shown else ""
            console.print(f"{label}{named}" + (f" ({', '.join(notes)})" if notes else ""))
    if plan.repeat > 1:
        console.print("cells: median over the repeats, (min-max) after the headline figures")

    def table(title: str, columns: list[Column], rows: list[Row]) -> None:
        if not rows:
            return
        columns = [
            column
            for column in columns
            if column[0] not in SPARSE or any(column[1](row) != "-" for row in rows)
        ]
        grid = Table(
            title=None if markdown else title,
            box=style,
            title_justify="left",
            show_edge=markdown,  # Markdown needs its outer bars
        )
        for number, (heading, _) in enumerate(columns):
            grid.add_column(heading, justify="left" if number < 2 else "right")
        for row in rows:
            grid.add_row(*(render_cell(row) for _, render_cell in columns))
        console.print()
        if markdown:
            console.print(f"### {title}")
        console.print(grid)

    # one table per store when several are measured: each compares a store's rows only
    stores = [label for _, label in plan.urls] if len(plan.urls) > 1 else [None]
    for store in stores:
        on = "" if store is None else f" ({store})"
        table(
            f"Uncontended{on}: one client, acquire+release of one free lock",
            UNCONTENDED,
            [row for row in flat if store in (None, row.backend)],
        )
    for store in stores:
        on = "" if store is None else f" ({store})"
        table(
            f"Contended{on}: P workers looping on one lock for {plan.seconds:g} s",
            CONTENDED,
            [row for row in crowded if store in (None, row.backend)],
        )
    errors = [
        (row, error, times)
        for row in [*flat, *crowded]
        for error, times in collections.Counter(row.errors).items()
    ]
    if errors:
        console.print()
        for row, error, times in errors:
            where = f"{row.contender.label} on {row.backend}"
            if row.workers is not None:
                where += f", P={row.workers}"
            again = f" (x{times})" if times > 1 else ""
            console.print(f"[red]error[/red] {escape(where)}: {escape(error)}{again}")
    legend = {row.contender.label: row.contender.mechanism for row in [*flat, *crowded]}
    if legend:
        console.print()
        for name, mechanism in legend.items():
            console.print(f"{name}: {mechanism}")
    references = sorted(
        {
            bench.reference
            for row in flat
            if (bench := store_bench(row.contender.url)) is not None and bench.reference
        }
    )
    if any(row.peer_ratio is not None or row.floor_ratio is not None for row in flat):
        console.print(
            "x peer: pair median / that of the store's reference peer "
            f"({', '.join(references) or '-'}) on the same backend; x floor: pair median / that "
            "of the floor row of the same flavour (blocking or asyncio) through the backend's "
            "own client, on the same backend"
        )
    console.print(f"\ntook {about['duration_s']:.0f} s")


# -- the command line ---------------------------------------------------------------------------


def _counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of counts: {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("worker counts must be whole numbers >= 1")
    return counts


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError("must be greater than 0")
        return value

    return convert


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench.py",
        description="tumbler's benchmark: uncontended pairs, contended processes, fairness.",
    )
    parser.add_argument(
        "--url",
        action="append",
        help="backend URL (repeatable); default: a fresh file of the default backend (--start "
        "of its first test target) when no --start is given either",
    )
    parser.add_argument(
        "--start",
        action="append",
        metavar="NAME",
        help="start a built-in backend's test target by name (repeatable; an unknown name "
        "lists them: free 127.0.0.1 ports, for the run only) and measure its URL too: "
        "tumbler's rows beside the store's peers'",
    )
    parser.add_argument(
        "--peers",
        action="store_true",
        help="start every built-in store that has peers or floors to compare with (as "
        "--start of each), and print one table per store",
    )
    parser.add_argument(
        "--pairs", type=_positive(int), help=f"uncontended pairs (default {DEFAULT_PAIRS})"
    )
    parser.add_argument(
        "--procs",
        type=_counts,
        help="contended worker processes, comma-separated (default "
        f"{','.join(map(str, DEFAULT_PROCS))})",
    )
    parser.add_argument(
        "--seconds",
        type=_positive(float),
        help=f"length of each contended run (default {DEFAULT_SECONDS:g})",
    )
    parser.add_argument(
        "--repeat",
        type=_positive(int),
        help=f"repeats of every measurement; cells show the median (default {DEFAULT_REPEAT})",
    )
    parser.add_argument("--json", metavar="FILE", help="also write every figure to FILE")
    parser.add_argument("--fair", action="store_true", help="locks with fair=True")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a tiny run: {QUICK_PAIRS} pairs, {QUICK_PROCS[0]} workers for {QUICK_SECONDS:g} s, "
        "once (options given override it)",
    )
    parser.add_argument(
        "--contender",
        action="append",
        choices=known_names(),
        help="run only these contenders (repeatable); 'nolock' is a negative control "
        "that must fail the counter check",
    )
    parser.add_argument(
        "--markdown", action="store_true", help="print the tables as Markdown (for READMEs)"
    )
    args = parser.parse_args(argv)
    for url in args.url or ():
        try:
            scheme = parse_url(url).scheme
        except tumbler.InvalidURL as error:
            parser.error(str(error))
        if not contenders_for(url, Options(), None):
            parser.error(
                f"no contender runs on {scheme}:// URLs; tumbler's backends: "
                f"{', '.join(tumbler.known_schemes())}; the peers': {', '.join(peer_schemes())}"
            )
    preset: dict[str, Any] = {
        "pairs": QUICK_PAIRS if args.quick else DEFAULT_PAIRS,
        "procs": QUICK_PROCS if args.quick else DEFAULT_PROCS,
        "seconds": QUICK_SECONDS if args.quick else DEFAULT_SECONDS,
        "repeat": 1 if args.quick else DEFAULT_REPEAT,
    }
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.monotonic()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    about: dict[str, Any] = {"date": date, "machine": machine()}
    workdir = tempfile.mkdtemp(prefix="tumbler-bench-")
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, workdir, ignore_errors=True)
        urls = [(url, parse_url(url).redacted) for url in args.url or ()]
        starts = list(args.start or ())
        if args.peers:
            starts += [name for name in peer_targets() if name not in starts]
        if not urls and not starts:
            starts = [default_target()]
        for name in starts:
            try:
                url = cleanup.enter_context(started(name, os.path.join(workdir, "servers", name)))
            except Exception as error:
                print(f"bench.py: --start {name}: {type(error).__name__}: {error}", file=sys.stderr)
                return 2
            urls.append((url, f"{name} (temp)"))
        # while the servers run: which server each URL reached
        about["servers"] = {}
        for url, _ in urls:
            if version := server_version(url):
                about["servers"][url] = version
        plan = Plan(
            urls=urls,
            pairs=args.pairs,
            procs=tuple(args.procs),
            seconds=args.seconds,
            repeat=args.repeat,
            options=Options(fair=args.fair),
            names=args.contender,
            workdir=workdir,
        )

        def progress(text: str) -> None:
            print(f"... {text}", file=sys.stderr, flush=True)

        flat, crowded = run(plan, progress)
        ratios(flat)
    about["duration_s"] = time.monotonic() - began
    about["loadavg_1m_end"] = machine()["loadavg_1m"]
    about["libraries"] = {
        shown: _version(distribution)
        for row in [*flat, *crowded]
        for shown, distribution in row.contender.libraries
    }
    render(plan, about, flat, crowded, args.markdown)
    if args.json:
        document = {
            **about,
            "parameters": {
                "pairs": plan.pairs,
                "warmup_pairs": measure.WARMUP,
                "procs": list(plan.procs),
                "seconds": plan.seconds,
                "repeat": plan.repeat,
                "ttl": plan.options.ttl,
                "timeout": plan.options.timeout,
                "fair": plan.options.fair,
                "urls": [{"backend": label, "url": parse_url(url).redacted} for url, label in urls],
            },
            "uncontended": [row.as_json() for row in flat],
            "contended": [row.as_json() for row in crowded],
            "contenders": {
                row.contender.label: row.contender.mechanism for row in [*flat, *crowded]
            },
        }
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump(_finite(document), file, indent=2, ensure_ascii=False)
            file.write("\n")
    failed = any(row.errors for row in flat) or any(
        row.errors or not row.counter_ok.startswith("OK") for row in crowded
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
