"""The SQLite backend's harness: test targets (:mod:`.targets`), the bench's view of it
(:mod:`.bench`) and its torture deployments (:mod:`.torture`).
"""

from __future__ import annotations

from tumbler.backends.descriptor import on_demand
from tumbler.backends.sqlite import DESCRIPTOR
from tumbler.testing.harness import BackendHarness

HARNESS = BackendHarness(
    descriptor=DESCRIPTOR,
    test_targets=on_demand(f"{__name__}.targets", "TARGETS"),
    torture=on_demand(f"{__name__}.torture", "DEPLOYMENTS"),
    bench=on_demand(f"{__name__}.bench", "BENCH"),
)
