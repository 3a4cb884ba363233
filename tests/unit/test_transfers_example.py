"""examples/transfers.py runs as written: every transfer made, the money all there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_transfers_in_opposite_directions_are_all_made_and_lose_no_money(
    tmp_path: Path, backend: str
) -> None:
    url = "memory://transfers" if backend == "memory" else f"sqlite://{tmp_path}/locks.db"
    finished = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "transfers.py"), str(tmp_path), "--url", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.splitlines() == [
        "40 of 40 transfers made, 0 gave up waiting",
        "money in the books: 4000 of 4000",
    ]
