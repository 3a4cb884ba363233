"""Which contenders run on a URL: tumbler's own rows, the store's peers, the negative control.

The contenders themselves are defined in ``tumbler.testing.bench`` (the framework, tumbler's
rows) and in each backend's harness package (its peers, as a ``StoreBench`` that the
backend's harness names in its ``bench`` field). This module only gathers them for a URL: tumbler's
rows on every scheme a backend opens, the peers of the backend that opens it, and ``nolock``
where asked for. A new peer goes into its backend's bench module, never here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar
from urllib.parse import urlsplit

import tumbler
from tumbler.testing.bench import (
    Contender,
    Options,
    StoreBench,
    SyncContender,
    SyncSession,
    TumblerAsync,
    TumblerSync,
    store_bench,
)
from tumbler.testing.harness import builtin_harnesses

# -- negative control ---------------------------------------------------------------------------


class _NoSession:
    def acquire(self) -> None:
        pass

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class NoLock(SyncContender):
    """Excludes nothing: its contended run must fail the counter check, which shows that the
    check catches a broken lock. Run it with ``--contender nolock``."""

    name: ClassVar[str] = "nolock"
    mechanism: ClassVar[str] = "negative control: acquire and release do nothing"
    default: ClassVar[bool] = False

    def open(self, lock_name: str) -> SyncSession:
        return _NoSession()


# -- the registry -------------------------------------------------------------------------------


def store_benches() -> list[StoreBench]:
    """The built-in backends' store benches."""
    found = []
    for harness in builtin_harnesses():
        if harness.bench is not None:
            bench = harness.bench()
            if isinstance(bench, StoreBench):
                found.append(bench)
    return found


def contenders_for(url: str, options: Options, names: list[str] | None) -> list[Contender]:
    """The contenders to run on ``url``: the default ones, or those ``names`` picks."""
    found: list[Contender] = []
    scheme = urlsplit(url).scheme.lower()
    if scheme in tumbler.known_schemes():
        found += [TumblerSync(url, options), TumblerAsync(url, options)]
        if (bench := store_bench(url)) is not None:
            found += bench.contenders(url, options)
    found.append(NoLock(url, options))
    if names is None:
        return [contender for contender in found if contender.default]
    return [contender for contender in found if contender.name in names]


def peer_schemes() -> list[str]:
    """The URL schemes some store's peers speak."""
    return [scheme for bench in store_benches() if bench.peers for scheme in bench.schemes]


def known_names() -> list[str]:
    """Every contender name the bench can run (for --help, and to refuse typos)."""
    names = {TumblerSync.name, TumblerAsync.name, NoLock.name}
    for bench in store_benches():
        names.update(bench.names)
    return sorted(names)


def server_version(url: str) -> str | None:
    """Which server ``url`` reaches, for the header; None if its store cannot say."""
    bench = store_bench(url)
    return None if bench is None else bench.version(url)
