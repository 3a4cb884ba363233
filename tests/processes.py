"""What tests ask of processes they start: whether one has exited."""

from __future__ import annotations

from pathlib import Path


def process_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie nobody reaped yet counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    # the state follows the command name, which is in parentheses and may contain spaces
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")
