"""The conformance suite run as a backend's author runs it: a pytest of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_suite(cwd: Path, *options: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``pytest --pyargs tumbler.testing.conformance`` with ``options``, in ``cwd``, quiet and
    without a cache; the child reads none of this run's settings and is not taken for an
    xdist worker."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    return subprocess.run(
        [
            sys.executable,
            *("-m", "pytest", "-q", "-p", "no:cacheprovider"),
            *("--pyargs", "tumbler.testing.conformance"),
            *options,
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
