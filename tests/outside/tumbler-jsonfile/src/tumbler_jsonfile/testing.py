"""The jsonfile backend's test target and ``isolate``: what the conformance suite needs.

``TARGETS`` is what ``BackendDescriptor.test_targets`` returns: here one target that starts
nothing (the store is a file) and gives each test a file of its own. ``isolate`` lets the
suite run against a URL given by hand (``--tumbler-url``): each test gets a file beside it.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from tumbler.backends.contract import BackendURL
from tumbler.backends.descriptor import TestTarget

from .backend import resolve_path

__all__ = ["TARGETS", "isolate"]


class _Files:
    """A :class:`~tumbler.backends.descriptor.RunningTarget`: nothing runs, files are made."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._numbers = itertools.count()

    def fresh_url(self) -> str:
        return f"jsonfile://{self._directory / f'store-{next(self._numbers)}.json'}"

    def close(self) -> None:
        """Nothing runs; the files go with the directory."""


TARGETS = (TestTarget("jsonfile", _Files),)


def isolate(url: BackendURL, token: str) -> str:
    """A file beside the URL's own (``store-<token>.json`` next to ``store.json``), same
    options: the same store kind, sharing no lock with any other token's file."""
    path = resolve_path(url)
    query = url.raw.partition("?")[2]
    isolated = path.with_name(f"{path.stem}-{token}{path.suffix or '.json'}")
    return f"jsonfile://{isolated}" + (f"?{query}" if query else "")
