"""bench/observer_cost.py runs end to end, every row on both built-in backends and in both
flavours, and its figures parse. How fast anything is belongs in its output, never here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "observer_cost.py"


def test_a_tiny_run_measures_every_row(tmp_path: Path) -> None:
    figures = tmp_path / "observers.json"
    result = subprocess.run(
        [sys.executable, str(BENCH), "--pairs", "20", "--rounds", "2", "--json", str(figures)],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(figures.read_text(encoding="utf-8"))["rows"]
    assert {(row["url"].partition(":")[0], row["flavour"], row["observers"]) for row in rows} == {
        (scheme, flavour, observers)
        for scheme in ("memory", "sqlite")
        for flavour in ("blocking", "asyncio")
        for observers in ("none", "no-op", "otel-metrics", "otel")
    }
    for row in rows:
        assert len(row["pairs_per_s"]) == 2
        assert row["pairs_per_s_median"] > 0
        if row["observers"] == "none":
            assert row["x_none_median"] == 1.0
    assert "x none" in result.stdout
