"""Shared test settings."""

from __future__ import annotations

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
