"""What the observer tests of both flavours share (tests/unit/_async/test_observers.py and
test_otel.py, and their generated twins): a client on ``memory://``, an observer that records
every event, and OpenTelemetry's SDK with in-memory readers.

``connect`` and ``aconnect`` are the flavours of one helper (the generator renames the
second to the first).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import tumbler
import tumbler.aio
from tumbler.observe import (
    AcquireFailed,
    AcquireGranted,
    AcquireStarted,
    AcquireTimedOut,
    AcquireWaiting,
    HoldLost,
    Observer,
    Released,
    ReleaseStarted,
    RenewalFailed,
    Renewed,
)
from tumbler.testing import ManualClock

#: the lease of the tests' locks: renewals fall due every TTL / 3
TTL = 30.0

E = TypeVar("E")


def store() -> str:
    """A memory store of its own (every client of a store must share its clock)."""
    return f"memory://observing-{next(_stores)}"


_stores = itertools.count()


def connect(clock: ManualClock, observers: Iterable[Observer]) -> tumbler.Locks:
    return tumbler.connect(store(), clock=clock, observers=observers)


async def aconnect(clock: ManualClock, observers: Iterable[Observer]) -> tumbler.aio.AsyncLocks:
    return await tumbler.aio.connect(store(), clock=clock, observers=observers)


class Recorder(Observer):
    """Keeps every event it is told, in order."""

    def __init__(self) -> None:
        self.events: list[object] = []

    def note(self, event: object) -> None:
        self.events.append(event)

    def of(self, kind: type[E]) -> list[E]:
        return [event for event in self.events if isinstance(event, kind)]

    def acquire_started(self, event: AcquireStarted) -> None:
        self.note(event)

    def acquire_waiting(self, event: AcquireWaiting) -> None:
        self.note(event)

    def acquire_granted(self, event: AcquireGranted) -> None:
        self.note(event)

    def acquire_timed_out(self, event: AcquireTimedOut) -> None:
        self.note(event)

    def acquire_failed(self, event: AcquireFailed) -> None:
        self.note(event)

    def release_started(self, event: ReleaseStarted) -> None:
        self.note(event)

    def released(self, event: Released) -> None:
        self.note(event)

    def lost(self, event: HoldLost) -> None:
        self.note(event)

    def renewed(self, event: Renewed) -> None:
        self.note(event)

    def renewal_failed(self, event: RenewalFailed) -> None:
        self.note(event)


class Telemetry:
    """An SDK MeterProvider and TracerProvider of their own (not the global ones), read in
    memory, and the observer that records into them."""

    def __init__(self) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def observer(self, **options: Any) -> Observer:
        from tumbler.otel import OpenTelemetryObserver

        return OpenTelemetryObserver(
            meter_provider=self.meter_provider, tracer_provider=self.tracer_provider, **options
        )

    def points(self, name: str) -> list[Any]:
        """The data points of the metric ``name`` collected now (none if it has none)."""
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found

    def metric(self, name: str) -> dict[tuple[tuple[str, Any], ...], Any]:
        """The metric ``name`` now: its value (a counter's) or (sum, count) (a histogram's)
        by its attributes, sorted; attributes of ``tumbler.backend`` left out (always
        ``memory`` here) once checked."""
        values = {}
        for point in self.points(name):
            attributes = dict(point.attributes)
            assert attributes.pop("tumbler.backend") == "memory"
            key = tuple(sorted(attributes.items()))
            values[key] = (point.sum, point.count) if hasattr(point, "count") else point.value
        return values

    def spans(self, name: str) -> Sequence[Any]:
        return [span for span in self.exporter.get_finished_spans() if span.name == name]
