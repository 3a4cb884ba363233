"""examples/election.py runs as written: each candidate leads in turn, the next after the
last one's crash, each term greater than the last and worked in by its leader alone."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_each_candidate_leads_in_turn_after_the_last_one_crashed() -> None:
    finished = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "election.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    lines = finished.stdout.splitlines()
    reigns = [
        re.fullmatch(r"(scheduler-\d) leads, term (\d+)(, [\d.]+ s after the kill)?", line)
        for line in lines
        if "leads," in line
    ]
    assert all(reigns), lines
    values = [reign.group(1) for reign in reigns if reign]
    terms = [int(reign.group(2)) for reign in reigns if reign]
    assert sorted(values) == ["scheduler-0", "scheduler-1", "scheduler-2"]
    assert terms == sorted(set(terms))
    assert lines[-1] == "3 terms worked in, in order: True"
