"""examples/lock_delay.py runs as written: with its lock-delay, the dead worker's write held
up in the network lands before the next holder's, which is the one the resource keeps."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_late_write_lands_before_the_next_holder_starts() -> None:
    finished = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "lock_delay.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    landed = re.findall(r"the resource receives 'page 1 from the (\w+) worker'", finished.stdout)
    assert landed == ["first", "second"]
    # the grant came the lock-delay (3 s) after the lease (0.5 s) ran out, not before
    granted = re.search(r"([\d.]+) s: second worker has the lock", finished.stdout)
    assert granted is not None
    assert float(granted.group(1)) >= 3.5
    assert finished.stdout.splitlines()[-1] == (
        "the resource ends with 'page 1 from the second worker'"
    )
