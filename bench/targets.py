"""Servers for a bench run, started by name through the backends' harnesses.

``--start NAME`` (bench.py, many_leases.py) names a built-in backend's test target
(``BackendHarness.test_targets``), or a server that the backend's store bench starts in
place of the test target of that name (``StoreBench.targets``: a set-up closer to production,
such as fsync on). Nothing here names a backend: the names come from the harnesses.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from tumbler._url import parse_url
from tumbler.backends import DEFAULT_URL, descriptor_for
from tumbler.testing.bench import StoreBench
from tumbler.testing.harness import builtin_harnesses, harness_for
from tumbler.testing.targets import TestTarget


class StartError(Exception):
    """A --start target that could not be found."""


def _store_benches() -> list[StoreBench]:
    found = []
    for harness in builtin_harnesses():
        bench = harness.bench() if harness.bench is not None else None
        if isinstance(bench, StoreBench):
            found.append(bench)
    return found


def _test_targets() -> Iterator[TestTarget]:
    # one backend at a time, so that a lookup imports only the launchers it passes: they are
    # in the process whose memory many_leases.py reports
    for harness in builtin_harnesses():
        # a launcher that needs the testing extra, where it is not installed: not startable
        with contextlib.suppress(ImportError):
            yield from harness.test_targets()


def target_names() -> list[str]:
    """Every name --start takes."""
    own = [target.name for bench in _store_benches() for target in bench.targets]
    return sorted({*own, *(target.name for target in _test_targets())})


def peer_targets() -> list[str]:
    """What ``--peers`` starts: for each built-in store with peers or floors to compare with,
    its store bench's own server if it has one, else its first test target."""
    names = []
    for harness in builtin_harnesses():
        bench = harness.bench() if harness.bench is not None else None
        if not isinstance(bench, StoreBench) or not (bench.peers or bench.floors):
            continue
        if bench.targets:
            names.append(bench.targets[0].name)
        else:
            with contextlib.suppress(ImportError):
                names.append(harness.test_targets()[0].name)
    return names


def default_target() -> str:
    """The first test target of the backend that the default URL opens: what a bench measures
    when given no URL (a fresh file of the default backend, say)."""
    harness = harness_for(descriptor_for(parse_url(DEFAULT_URL).scheme))
    if harness is None or not harness.test_targets():
        raise StartError("the default backend has no test target")
    return harness.test_targets()[0].name


def target(name: str) -> TestTarget:
    """What --start NAME starts: a store bench's own server of that name if there is one,
    else the test target."""
    for bench in _store_benches():
        for candidate in bench.targets:
            if candidate.name == name:
                return candidate
    for candidate in _test_targets():
        if candidate.name == name:
            return candidate
    raise StartError(f"no built-in test target is named {name!r}: {', '.join(target_names())}")


@contextlib.contextmanager
def started(name: str, directory: str) -> Iterator[str]:
    """Target ``name`` started in ``directory`` (free 127.0.0.1 ports, for this run only) and
    closed at the end (its servers stopped, their files removed). Yields a fresh URL of it."""
    os.makedirs(directory)
    running = target(name).start(Path(directory))
    try:
        yield running.fresh_url()
    finally:
        running.close()
