"""The jsonfile backend's test harness: what ``--tumbler-target jsonfile`` runs on.

``HARNESS`` is registered under the entry point group ``tumbler.harnesses`` (see
``pyproject.toml``). Its one test target starts nothing (the store is a file) and gives each
test a file of its own. A backend needs no harness to be tested: ``--tumbler-url URL`` runs the
suite against any store, with the descriptor's ``isolate``.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from tumbler.testing.harness import BackendHarness
from tumbler.testing.targets import TestTarget

from . import DESCRIPTOR

__all__ = ["HARNESS", "TARGETS"]


class _Files:
    """A :class:`~tumbler.testing.targets.RunningTarget`: nothing runs, files are made."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._numbers = itertools.count()

    def fresh_url(self) -> str:
        return f"jsonfile://{self._directory / f'store-{next(self._numbers)}.json'}"

    def close(self) -> None:
        """Nothing runs; the files go with the directory."""


TARGETS = (TestTarget("jsonfile", _Files),)

HARNESS = BackendHarness(descriptor=DESCRIPTOR, test_targets=lambda: TARGETS)
