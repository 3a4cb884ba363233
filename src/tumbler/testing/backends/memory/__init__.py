"""The memory backend's harness: test targets (:mod:`.targets`)."""

from __future__ import annotations

from tumbler.backends.descriptor import on_demand
from tumbler.backends.memory import DESCRIPTOR
from tumbler.testing.harness import BackendHarness

HARNESS = BackendHarness(
    descriptor=DESCRIPTOR,
    test_targets=on_demand(f"{__name__}.targets", "TARGETS"),
)
