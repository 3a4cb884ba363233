"""A conformance case that needs a capability the backend does not declare is skipped, and the
skip names the capability and the backend."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_a_case_needing_process_exclusion_is_skipped_on_a_one_process_backend(
    tmp_path: Path,
) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "tumbler.testing.conformance",
            "--tumbler-url",
            "memory://",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "-k",
            "test_a_forked_child_does_not_inherit_holds",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 skipped" in result.stdout, result.stdout
    assert "needs process_exclusion" in result.stdout, result.stdout
    assert "the memory backend does not declare" in result.stdout, result.stdout
