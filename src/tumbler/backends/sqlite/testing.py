"""The SQLite backend's test target: a new database file per test, no server."""

from __future__ import annotations

import itertools
from pathlib import Path

from ..._url import BackendURL
from ..descriptor import TestTarget


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


def isolate(url: BackendURL, token: str) -> str:
    """A file beside the URL's own (``locks-<token>.db`` next to ``locks.db``), same options."""
    from .backend import resolve_path

    path, _ = resolve_path(url)
    query = url.raw.partition("?")[2]
    isolated = path.with_name(f"{path.stem}-{token}{path.suffix or '.db'}")
    return f"sqlite://{isolated}" + (f"?{query}" if query else "")
