"""bench/plots.py draws bench.py's JSON: one PNG of pair latency and one of hand-off, a panel
per store, tumbler's rows beside the store's peers and floors. How fast anything is stays in
the bench's output: only what is drawn, and what is refused, is checked here."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tumbler.testing.conformance.plugin import server_unavailable

# the docs extra's: scripts/test --docs runs these, the full run leaves them to it
pytestmark = pytest.mark.docs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def plots() -> ModuleType:
    """bench/plots.py (bench/ is no package), which needs matplotlib (the docs extra)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        server_unavailable("the docs extra is not installed (matplotlib draws the plots)")
    sys.path.insert(0, str(ROOT / "bench"))
    return importlib.import_module("plots")


PNG = b"\x89PNG\r\n\x1a\n"


def row(contender: str, backend: str, **figures: float) -> dict[str, Any]:
    return {
        "contender": contender,
        "backend": backend,
        "summary": {k: {"median": v, "min": v * 0.9, "max": v * 1.1} for k, v in figures.items()},
    }


def document() -> dict[str, Any]:
    """A bench.py --json document, cut to what the plots read, of two stores."""
    return {
        "date": "2026-11-28 21:00 UTC",
        "machine": {"cpus": 2, "loadavg_1m": 1.5},
        "loadavg_1m_end": 2.0,
        "uncontended": [
            row("tumbler-sync", "redis (temp)", pair_median_us=250),
            row("redis-py-0.1", "redis (temp)", pair_median_us=184),
            row("redis-floor-sync", "redis (temp)", pair_median_us=126),
            row("tumbler-sync", "sqlite (temp)", pair_median_us=90),
            row("sqlite-floor", "sqlite (temp)", pair_median_us=20),
        ],
        "contended": [
            {**row("tumbler-sync", "redis (temp)", handoff_median_ms=0.2), "workers": 2},
            {**row("tumbler-sync", "redis (temp)", handoff_median_ms=0.3), "workers": 4},
            {**row("redis-py-0.1", "redis (temp)", handoff_median_ms=0.5), "workers": 2},
            {**row("tumbler-sync", "sqlite (temp)", handoff_median_ms=0.4), "workers": 2},
        ],
        "contenders": {
            "tumbler-sync": "tumbler.connect(url).lock(...)",
            "redis-py-0.1": "redis-py Redis.lock(...)",
            "redis-floor-sync": "floor: EVALSHA of 'return 1'",
            "sqlite-floor": "the floor, no library: BEGIN IMMEDIATE; ...",
        },
    }


def test_the_rows_of_each_store_are_read_with_their_kind(plots: ModuleType) -> None:
    stores = plots.stores(document())
    assert [store.backend for store in stores] == ["redis (temp)", "sqlite (temp)"]
    redis = stores[0]
    assert [(bar.contender, bar.kind) for bar in redis.pairs] == [
        ("tumbler-sync", "tumbler"),
        ("redis-py-0.1", "peer"),
        ("redis-floor-sync", "floor"),
    ]
    assert redis.pairs[0].median == 250
    assert (redis.pairs[0].low, redis.pairs[0].high) == (225, 275)
    assert [(bar.contender, bar.kind) for bar in stores[1].pairs] == [
        ("tumbler-sync", "tumbler"),
        ("sqlite-floor", "floor"),
    ]
    assert sorted(redis.handoffs) == [2, 4]
    assert [bar.contender for bar in redis.handoffs[2]] == ["tumbler-sync", "redis-py-0.1"]


@pytest.mark.usefixtures("plots")
def test_it_draws_one_png_of_pairs_and_one_of_hand_offs(tmp_path: Path) -> None:
    source = tmp_path / "bench.json"
    source.write_text(json.dumps(document()))
    out = tmp_path / "plots"
    drawn = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "plots.py"), str(source), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert drawn.returncode == 0, drawn.stderr
    assert sorted(p.name for p in out.iterdir()) == ["handoff.png", "pairs.png"]
    for png in out.iterdir():
        assert png.read_bytes().startswith(PNG)
    assert drawn.stdout.split() == [str(out / "pairs.png"), str(out / "handoff.png")]


@pytest.mark.usefixtures("plots")
def test_a_document_without_rows_is_refused_with_its_name(tmp_path: Path) -> None:
    source = tmp_path / "empty.json"
    source.write_text(json.dumps({"uncontended": [], "contended": []}))
    drawn = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "plots.py"), str(source), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert drawn.returncode == 2
    assert f"{source}: no uncontended rows" in drawn.stderr
    assert not (tmp_path / "pairs.png").exists()
