"""What tests ask of processes they start: whether one has exited, and a fresh interpreter's
run of some code."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` (dedented) in a fresh interpreter, its output captured: for what depends on
    what the process has imported or done before."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def process_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie nobody reaped yet counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    # the state follows the command name, which is in parentheses and may contain spaces
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")
