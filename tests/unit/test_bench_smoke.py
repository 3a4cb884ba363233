"""bench/bench.py runs end to end: a tiny run on a real SQLite file with real spawned processes.

Only that it runs, that its figures parse, and that its counter check holds (and can fail) are
checked here: how fast anything is belongs in the bench's output, never in an assertion.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench.py"
TINY = ("--pairs", "20", "--procs", "2", "--repeat", "1")


def run_bench(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    figures = tmp_path / "figures.json"
    result = subprocess.run(
        [sys.executable, str(BENCH), *TINY, *args, "--json", str(figures)],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert figures.exists(), result.stderr
    return result, json.loads(figures.read_text(encoding="utf-8"))


def test_tiny_run_measures_every_row_and_the_counter_check_passes(tmp_path: Path) -> None:
    sqlite_url = f"sqlite:///{tmp_path / 'locks.db'}"
    memory_url = "memory://bench-smoke"

    result, figures = run_bench(
        tmp_path, "--url", sqlite_url, "--url", memory_url, "--seconds", "0.3"
    )

    assert result.returncode == 0, result.stderr
    assert "Uncontended" in result.stdout
    assert "Contended" in result.stdout
    assert figures["machine"]["cpus"] >= 1
    assert figures["machine"]["sqlite"]
    expected = {
        (contender, url)
        for contender in ("tumbler-sync", "tumbler-async")
        for url in (sqlite_url, memory_url)
    }
    assert {(row["contender"], row["url"]) for row in figures["uncontended"]} == expected
    for row in figures["uncontended"]:
        (run,) = row["repeats"]
        assert run["n"] == 20
        assert run["pair_median_us"] > 0
        assert run["pair_p99_us"] >= run["pair_median_us"]
        assert run["pairs_per_s"] > 0
        assert row["contender"] in result.stdout

    assert {(row["contender"], row["url"]) for row in figures["contended"]} == expected
    for row in figures["contended"]:
        (run,) = row["repeats"]
        assert row["counter_ok"] == "OK 1/1", run["errors"]
        assert run["errors"] == []
        assert row["mode"] == ("threads" if row["url"] == memory_url else "processes")
        assert run["workers"] == 2
        assert len(run["counts"]) == 2
        # every worker makes at least one round, however late it starts
        assert min(run["counts"]) >= 1
        assert run["counter"] == run["acquisitions"] == sum(run["counts"])
        assert run["overlaps"] == 0
        assert 0.5 <= run["jain"] <= 1.0
        assert run["wait_max_ms"] >= run["wait_mean_ms"] >= 0
        assert run["client_cpu_ms_per_acq"] > 0


def test_counter_check_catches_a_lock_that_excludes_nothing(tmp_path: Path) -> None:
    result, figures = run_bench(
        tmp_path,
        "--url",
        f"sqlite:///{tmp_path / 'locks.db'}",
        "--contender",
        "nolock",
        "--seconds",
        "1",
    )

    assert result.returncode == 1, result.stderr
    (row,) = figures["contended"]
    assert row["contender"] == "nolock"
    assert row["counter_ok"] == "FAIL 0/1"
    (run,) = row["repeats"]
    assert run["overlaps"] > 0
    assert "FAIL" in result.stdout
