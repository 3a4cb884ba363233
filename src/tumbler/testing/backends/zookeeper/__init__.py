"""The ZooKeeper backend's harness: its servers' launchers (:mod:`.server`), test targets
(:mod:`.targets`), the bench's view of it (:mod:`.bench`) and its torture deployments
(:mod:`.torture`).
"""

from __future__ import annotations

from tumbler.backends.descriptor import on_demand
from tumbler.backends.zookeeper import DESCRIPTOR
from tumbler.testing.harness import BackendHarness

HARNESS = BackendHarness(
    descriptor=DESCRIPTOR,
    # its hard dependency default-jre brings the JVM, so --no-install-recommends still gets
    # one, and libzookeeper-java brings slf4j-simple, which the launcher logs with
    system_packages=("zookeeper",),
    test_targets=on_demand(f"{__name__}.targets", "TARGETS"),
    torture=on_demand(f"{__name__}.torture", "DEPLOYMENTS"),
    bench=on_demand(f"{__name__}.bench", "BENCH"),
)
