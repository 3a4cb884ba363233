"""What the test harness knows of one backend, said once, beside the backend rather than in it.

A backend package (``tumbler.backends.<name>``) holds what runs in production and describes
it with a :class:`~tumbler.backends.descriptor.BackendDescriptor`. What only tests, the bench
and the torture harness need (the launchers of throwaway servers, the conformance suite's test
targets, the bench's peers, the torture deployments) lives in the backend's harness package,
``tumbler.testing.backends.<name>``, which exposes a :class:`BackendHarness` as ``HARNESS``.
The harness names its backend's descriptor; the descriptor names no part of the harness, so
that importing a backend loads nothing of it.

A harness module must stay cheap to import, as a descriptor's: the parts that import launchers,
drivers or the torture harness are callables that import them on demand
(:func:`~tumbler.backends.descriptor.on_demand`).

Built-in harnesses are found by listing the subpackages of ``tumbler.testing.backends``. A
third-party backend needs none: the conformance suite runs against a URL of it
(``pytest --pyargs tumbler.testing.conformance --tumbler-url URL``) with only its descriptor.
One that declares a harness does so under the entry point group ``tumbler.harnesses``, named
for its backend (``jsonfile = "package.module:HARNESS"``); ``--tumbler-target`` then runs the
suite on its test targets.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..backends.descriptor import BackendDescriptor
from .targets import RunningTarget, ServedTarget, TestTarget

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendHarness",
    "RunningTarget",
    "ServedTarget",
    "TestTarget",
    "builtin_harnesses",
    "harness_for",
    "third_party_harnesses",
]

#: the entry point group a third-party backend's harness is registered in, named for its backend
ENTRY_POINT_GROUP = "tumbler.harnesses"


@dataclass(frozen=True)
class BackendHarness:
    """How tests, the bench and the torture harness run one backend. Only ``descriptor`` is
    required; a backend without servers to start or peers to compare leaves the rest empty."""

    #: the backend it runs (its runtime descriptor)
    descriptor: BackendDescriptor
    #: the Debian packages its servers come from (``scripts/servers`` installs them); none for
    #: a store that needs no server
    system_packages: tuple[str, ...] = ()
    #: the targets the conformance suite runs on (imports the launchers on demand)
    test_targets: Callable[[], Sequence[TestTarget]] = field(default=lambda: (), repr=False)
    #: the torture harness's deployments of it (``tumbler.torture.backends.BackendSpec`` each,
    #: checked there: the testing side does not import the torture harness)
    torture: Callable[[], Sequence[Any]] = field(default=lambda: (), repr=False)
    #: the bench's view of this store, its peers, request counter, version
    #: (``tumbler.testing.bench.StoreBench``, checked by ``store_bench``)
    bench: Callable[[], Any] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """Its backend's name (``redis``)."""
        return self.descriptor.name


_builtin: list[BackendHarness] | None = None


def builtin_harnesses() -> list[BackendHarness]:
    """The harnesses of the backends that come with tumbler, in their backends' name order."""
    global _builtin
    if _builtin is None:
        from . import backends

        found: list[BackendHarness] = []
        for module in pkgutil.iter_modules(backends.__path__):
            if not module.ispkg or module.name.startswith("_"):
                continue
            package = importlib.import_module(f"{backends.__name__}.{module.name}")
            harness = getattr(package, "HARNESS", None)
            if isinstance(harness, BackendHarness):
                found.append(harness)
        _builtin = sorted(found, key=lambda harness: harness.name)
    return _builtin


def third_party_harnesses() -> list[BackendHarness]:
    """The harnesses installed packages register under :data:`ENTRY_POINT_GROUP`, loaded
    (each entry point's name is its backend's); TypeError names one that is no harness."""
    from importlib.metadata import entry_points

    found = [_load(point) for point in entry_points(group=ENTRY_POINT_GROUP)]
    return sorted(found, key=lambda harness: harness.name)


def _load(point: EntryPoint) -> BackendHarness:
    harness = point.load()
    if not isinstance(harness, BackendHarness):
        raise TypeError(
            f"the {ENTRY_POINT_GROUP} entry point {point.name} ({point.value}) is a "
            f"{type(harness).__name__}, not a BackendHarness"
        )
    return harness


def harness_for(descriptor: BackendDescriptor) -> BackendHarness | None:
    """The harness of ``descriptor``'s backend: the built-in one of that name, else one an
    installed package registers for it; None if it has none. TypeError names an entry point
    that is no harness."""
    for harness in builtin_harnesses():
        if harness.name == descriptor.name:
            return harness
    from importlib.metadata import entry_points

    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name == descriptor.name:
            return _load(point)
    return None
