"""The SQLite backend's test target: a new database file per test, no server."""

from __future__ import annotations

import itertools
from pathlib import Path

from tumbler.testing.targets import TestTarget


class _Files:
    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._numbers = itertools.count()

    def fresh_url(self) -> str:
        directory = self._directory / f"test-{next(self._numbers)}"
        directory.mkdir(mode=0o700)
        return f"sqlite://{directory / 'locks.db'}"

    def close(self) -> None:
        """Nothing runs; the files go with the directory."""


TARGETS = (TestTarget("sqlite", _Files),)
