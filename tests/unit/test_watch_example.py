"""examples/watch.py runs as written: its watcher is told of each change of the lock, in
order, while two workers take it in turn."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_watcher_is_told_of_each_change_in_order() -> None:
    finished = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "watch.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    told = [
        line.removeprefix("watcher: ")
        for line in finished.stdout.splitlines()
        if line.startswith("watcher: ")
    ]
    # between the release and the grant, the store may show the lock free with one waiter
    assert [state for state in told if state != "held by nobody; 1 waiting"] == [
        "held by nobody; 0 waiting",
        "held by token 1; 0 waiting",
        "held by token 1; 1 waiting",
        "held by token 2; 0 waiting",
        "held by nobody; 0 waiting",
    ]
