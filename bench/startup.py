"""Start-up cost: how long a fresh process takes to import tumbler, or to run a command locked.

    python bench/startup.py                        # 30 fresh processes per row
    python bench/startup.py --runs 100 --json startup.json
    python bench/startup.py --url redis://127.0.0.1:6379/0   # `tumbler run` on another backend

Every row starts a fresh process ``--runs`` times and times it from before the spawn to after
the wait (wall clock, ``time.perf_counter``): the interpreter's own start, the imports, the
work, the exit. The rows run interleaved (one process of each row in turn, in a shuffled order
each round), so that a burst of load elsewhere on the machine lands on every row alike, after
one untimed round that warms the page cache and writes the bytecode cache: the processes run
with a bytecode cache of the bench's own (``PYTHONPYCACHEPREFIX`` in its temp dir), as an
installed tumbler runs from the bytecode compiled when it was installed, even where the
environment sets ``PYTHONDONTWRITEBYTECODE`` (``--as-is`` keeps the environment's settings).
Printed per row: median and p90 (nearest rank)
in milliseconds, and the median's ratio to ``python -c pass``'s, beside ``flock(1)`` running
``true`` (what a lock around a command costs without Python).

Rows: ``python -c pass``; ``flock FILE true``; ``python -c "import tumbler"``;
``python -c "import tumbler.aio"``; ``tumbler run NAME -- true`` on a new SQLite file each run
(the first ``tumbler run`` on a machine creates it) and on one file that already exists. With
``--url``, the ``tumbler run`` row runs on that URL instead of the two SQLite rows.

A process that exits with a status other than 0 makes its row an error row, and the exit
status of the bench 1 (else 0). The load average before and after is printed: on a shared
machine figures taken under load are longer and spread wider. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: how long one process of a row may take before the bench gives up on it
PROCESS_LIMIT = 60.0


@dataclass
class Row:
    """One thing to start: ``argv`` made afresh for each run (run number -> command line)."""

    label: str
    argv: Callable[[int], list[str]]
    times_ms: list[float] = field(default_factory=list)
    error: str | None = None

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.times_ms)
        figures: dict[str, float | None] = dict.fromkeys(
            ("median_ms", "p90_ms", "min_ms", "max_ms")
        )
        if ordered:  # none for a row that failed before its first timed run
            figures = {
                "median_ms": percentile(ordered, 0.5),
                "p90_ms": percentile(ordered, 0.9),
                "min_ms": ordered[0],
                "max_ms": ordered[-1],
            }
        return {"label": self.label, "runs": len(ordered), **figures, "error": self.error}


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of sorted values (at least one)."""
    return float(ordered[max(1, math.ceil(fraction * len(ordered))) - 1])


def tumbler_command() -> list[str]:
    """The ``tumbler`` console script installed beside this interpreter, else ``-m``."""
    script = Path(sys.executable).with_name("tumbler")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "tumbler.cli"]


def make_rows(workdir: Path, url: str | None) -> list[Row]:
    python = sys.executable
    flock = shutil.which("flock")
    tumbler = tumbler_command()
    lockfile = str(workdir / "flock.lock")
    shared_db = workdir / "shared.db"
    rows = [
        Row("python -c pass", lambda _: [python, "-c", "pass"]),
        Row(
            "flock FILE true",
            lambda _: [flock or "flock", lockfile, "true"],
            error=None if flock else "flock(1) is not installed (util-linux)",
        ),
        Row('python -c "import tumbler"', lambda _: [python, "-c", "import tumbler"]),
        Row('python -c "import tumbler.aio"', lambda _: [python, "-c", "import tumbler.aio"]),
    ]

    def run_row(label: str, url_for: Callable[[int], str]) -> Row:
        return Row(label, lambda n: [*tumbler, "run", "--url", url_for(n), "bench", "--", "true"])

    if url is not None:
        rows.append(run_row("tumbler run NAME -- true", lambda _: url))
    else:
        rows += [
            run_row(
                "tumbler run NAME -- true (new SQLite file)",
                lambda n: f"sqlite://{(workdir / f'new-{n}.db').as_posix()}",
            ),
            run_row(
                "tumbler run NAME -- true (existing file)",
                lambda _: f"sqlite://{shared_db.as_posix()}",
            ),
        ]
    return rows


def time_once(argv: list[str], environment: dict[str, str]) -> tuple[float, str | None]:
    """Wall milliseconds from spawn to exit, and why the process failed (None if it did not)."""
    started = time.perf_counter()
    try:
        result = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=environment,
            timeout=PROCESS_LIMIT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return math.nan, f"{argv[0]}: {error}"
    elapsed = (time.perf_counter() - started) * 1000
    if result.returncode != 0:
        last = result.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return elapsed, f"exit status {result.returncode}: {last[0]}"
    return elapsed, None


def measure(rows: list[Row], runs: int, environment: dict[str, str]) -> None:
    live = [row for row in rows if row.error is None]
    for round_number in range(-1, runs):  # round -1: the untimed warm-up
        order = live[:]
        random.shuffle(order)
        for row in order:
            if row.error is not None:
                continue
            elapsed, error = time_once(row.argv(round_number), environment)
            if error is not None:
                row.error = error
            elif round_number >= 0:
                row.times_ms.append(elapsed)


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count() or 1,
        "python": sys.version.split()[0],
        "executable": sys.executable,
    }


def load() -> list[float]:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:  # not every platform keeps one
        return []


def print_table(summaries: list[dict[str, Any]]) -> None:
    width = max(len(summary["label"]) for summary in summaries)
    print(f"{'':{width}}  {'median ms':>9}  {'p90 ms':>7}  {'x pass':>6}")
    for summary in summaries:
        if summary["error"] is not None:
            print(f"{summary['label']:{width}}  ERROR: {summary['error']}")
            continue
        ratio = summary["ratio_to_python"]
        print(
            f"{summary['label']:{width}}  {summary['median_ms']:9.1f}  {summary['p90_ms']:7.1f}"
            f"  {'-' if ratio is None else format(ratio, '.2f'):>6}"
        )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Wall-clock start-up of python, flock(1), import tumbler and tumbler run."
    )
    parser.add_argument("--runs", type=int, default=30, help="fresh processes per row (default 30)")
    parser.add_argument(
        "--url",
        default=None,
        help="run `tumbler run` on this URL instead of new and existing SQLite files",
    )
    parser.add_argument(
        "--as-is",
        action="store_true",
        help="keep this environment's bytecode settings (PYTHONDONTWRITEBYTECODE with an "
        "editable install: tumbler's modules compiled at every start) instead of cached bytecode",
    )
    parser.add_argument("--json", metavar="FILE", help="write every figure to FILE")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # the URL comes from --url or the temp dir, never from the caller's environment
    environment = {key: value for key, value in os.environ.items() if key != "TUMBLER_URL"}
    workdir = Path(tempfile.mkdtemp(prefix="tumbler-startup-"))
    if not args.as_is:
        # An installed tumbler starts from bytecode compiled at install time; an editable one
        # run with PYTHONDONTWRITEBYTECODE would compile its sources at every start. A cache
        # of the bench's own, written by the warm-up round, measures the former without
        # writing into the source tree.
        environment.pop("PYTHONDONTWRITEBYTECODE", None)
        environment["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    try:
        rows = make_rows(workdir, args.url)
        load_before = load()
        measure(rows, args.runs, environment)
        load_after = load()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    summaries = [row.summary() for row in rows]
    baseline_ms = summaries[0]["median_ms"]  # python -c pass
    for summary in summaries:
        summary["ratio_to_python"] = (
            summary["median_ms"] / baseline_ms
            if baseline_ms and summary["median_ms"] is not None and summary["error"] is None
            else None
        )
    info = machine()
    bytecode = "bytecode as the environment has it" if args.as_is else "cached bytecode"
    print(
        f"{info['cpus']} CPUs, Python {info['python']}, {args.runs} fresh processes per row "
        f"(interleaved), {bytecode}; "
        f"load average {' '.join(map(str, load_before))} before, "
        f"{' '.join(map(str, load_after))} after"
    )
    print_table(summaries)
    if args.json:
        document = {
            "machine": info,
            "runs": args.runs,
            "bytecode": "as-is" if args.as_is else "cached",
            "load_before": load_before,
            "load_after": load_after,
            "rows": summaries,
        }
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return 1 if any(summary["error"] is not None for summary in summaries) else 0


if __name__ == "__main__":
    sys.exit(main())
