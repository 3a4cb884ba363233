"""The conformance suite runs from an installed tumbler, from any directory, against a URL
given on the command line, as a third-party backend's author would run it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

#: two cases of the lock contract (each in both flavours) and one sync-only case
CASES = "test_acquire_gives_a_hold_with_a_token or test_a_client_refuses_a_second_event_loop"


def test_the_suite_runs_against_a_url_from_any_directory(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store' / 'locks.db'}"
    (tmp_path / "store").mkdir(mode=0o700)
    # the child must not read this run's settings or be taken for an xdist worker
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "tumbler.testing.conformance",
            "--tumbler-url",
            url,
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            "-k",
            CASES,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\b3 passed\b", result.stdout), result.stdout
    assert "skipped" not in result.stdout, result.stdout
