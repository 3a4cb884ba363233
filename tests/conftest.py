"""Shared test settings."""

from __future__ import annotations

import gc
import hashlib

import pytest

from tumbler.testing.conformance.plugin import in_ci

# CI must fail, not skip, when something a test needs is missing.
IN_CI = in_ci()

# real servers for the backends that need one (started once per session, on loopback)
pytest_plugins = ["tests.servers.fixtures"]

# a transport left unclosed says which test made it, when the collector finds it
import tests.transports  # noqa: E402, F401

#: the part of each worker's share of the run that gets its long cases (``spread``)
SPREAD_OVER = 0.75


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shard",
        metavar="SEED:INDEX/COUNT",
        help="run only the cases dealt to shard INDEX of COUNT (0-based) by the hash of SEED "
        "and each case's id: every case falls in exactly one shard, and which one changes "
        "with SEED (.ci/run's quick tiers: one shard on each of the other Pythons)",
    )


def shard_of(seed: str, nodeid: str, count: int) -> int:
    """The shard of ``count`` that case ``nodeid`` is dealt to under ``seed``."""
    digest = hashlib.sha256(f"{seed}:{nodeid}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


def _parse_shard(value: str) -> tuple[str, int, int]:
    seed, _, place = value.rpartition(":")
    index, _, count = place.partition("/")
    try:
        shard = (seed, int(index), int(count))
    except ValueError:
        shard = None
    if not seed or shard is None or not 0 <= shard[1] < shard[2]:
        raise pytest.UsageError(
            f"--shard wants SEED:INDEX/COUNT with 0 <= INDEX < COUNT: {value!r}"
        )
    return shard


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = config.getoption("shard")
    if shard:
        seed, index, count = _parse_shard(shard)
        kept: list[pytest.Item] = []
        deselected: list[pytest.Item] = []
        for item in items:
            (kept if shard_of(seed, item.nodeid, count) == index else deselected).append(item)
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = kept
    _spread(config, items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Set what collection made aside from the garbage collector: it lives to the end of the
    session, and every full collection went through it again. In each worker of the full run
    that is some 300,000 objects (a quarter of a CPU-second a collection), and on two busy
    cores collections held every thread of the worker for 0.3 to 1.2 s, 13 to 23 times per
    worker, a case's clients with them: in one run a fair waiter's turn on Redis Cluster
    (600 ms) ran out while its worker was held for 0.71 s."""
    _freeze_what_lives()


def pytest_runtest_logfinish() -> None:
    """Collect what the case left, and set the rest aside too, as after collection: what
    cases leave alive (reports, captured logs, a server's handle) piles up over a worker's
    thousand cases, and a full collection that the collector decides on by itself in the
    middle of a case walks all of it. With the pile frozen (after the case, when no lease is
    running) a collection in a case walks only what that case made. In a full run, without
    this, 97 collections in the middle of cases held a worker's threads for over 50 ms, up
    to 2.2 s (some while a case's lease of 1 s ran); with it, 23, the longest of a case with
    servers 0.23 s."""
    _freeze_what_lives()
    # mypy's API (which tests/unit/test_typing.py runs in the worker) makes the young
    # generation 200,000 objects (not 700) for good: every case after it in the worker met
    # collections of up to 190,000 objects
    if gc.get_threshold() != COLLECTOR_THRESHOLDS:
        gc.set_threshold(*COLLECTOR_THRESHOLDS)


def _freeze_what_lives() -> None:
    gc.collect()  # garbage frozen would never be collected
    gc.freeze()


#: the collector's thresholds each case starts with: the interpreter's own
COLLECTOR_THRESHOLDS = gc.get_threshold()


def _spread(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deal the long, busy cases (marker ``spread``: the torture runs, each up to a minute of
    four processes and their servers; a conformance run in a process of its own) out evenly
    over the first three quarters of each worker's share. xdist gives each worker a slice of
    this order and an idle one takes the end of another's: collected together, they ran side
    by side at the end of the run, on a machine they left no core of, and the worker that
    drew the last one ended half a minute after the others."""
    spread = [item for item in items if item.get_closest_marker("spread")]
    if not spread:
        return
    rest = [item for item in items if not item.get_closest_marker("spread")]
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    ordered: list[pytest.Item] = []
    for worker in range(workers):
        share = rest[len(rest) * worker // workers : len(rest) * (worker + 1) // workers]
        long_ones = spread[worker::workers]
        # the i-th long case goes after this many of the share's others (the first not
        # at once: every worker would start with one, beside the servers' start-ups)
        places = [
            int(len(share) * SPREAD_OVER * (i + 0.5) / len(long_ones))
            for i in range(len(long_ones))
        ]
        taken = 0
        for place, item in zip(places, long_ones, strict=True):
            ordered += share[taken:place]
            ordered.append(item)
            taken = place
        ordered += share[taken:]
    items[:] = ordered
