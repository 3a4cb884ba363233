"""The conformance suite runs from an installed tumbler, from any directory, against a URL
given on the command line, as a third-party backend's author would run it."""

from __future__ import annotations

import re
from pathlib import Path

from .suite import run_suite

#: two cases of the lock contract (each in both flavours) and one sync-only case
CASES = "test_acquire_gives_a_hold_with_a_token or test_a_client_refuses_a_second_event_loop"


def test_the_suite_runs_against_a_url_from_any_directory(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store' / 'locks.db'}"
    (tmp_path / "store").mkdir(mode=0o700)
    result = run_suite(tmp_path, "--tumbler-url", url, "-x", "-k", CASES, timeout=100)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\b3 passed\b", result.stdout), result.stdout
    assert "skipped" not in result.stdout, result.stdout
