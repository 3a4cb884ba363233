"""OpenTelemetry metrics and spans of a client's locks: ``pip install 'tumbler-locks[otel]'``.

    import tumbler
    from tumbler.otel import OpenTelemetryObserver

    locks = tumbler.connect(url, observers=[OpenTelemetryObserver()])

Needs ``opentelemetry-api`` only (importing this module without it raises
``MissingDependency``); the application installs and configures the SDK and its exporters, as
for any instrumented library. ``import tumbler`` never imports this module or OpenTelemetry.

Metrics (meter ``tumbler``), each with the attribute ``tumbler.backend`` (the URL's scheme,
never the URL) and, if asked for, ``tumbler.lock.name``:

- ``tumbler.lock.acquire.duration`` (histogram, s): from the start of an acquisition to its
  grant, timeout or error; ``tumbler.acquire.outcome`` says which (``granted``, ``timeout``,
  ``error``);
- ``tumbler.lock.hold.duration`` (histogram, s): from the grant to the holder's release;
- ``tumbler.lock.grants`` (counter, ``{grant}``): acquisitions granted;
- ``tumbler.lock.timeouts`` (counter, ``{timeout}``): acquisitions whose timeout ran out, a
  refused single try (``blocking=False``) included;
- ``tumbler.lock.errors`` (counter, ``{error}``): acquisitions and releases that raised, with
  ``tumbler.operation`` (``acquire``, ``release``) and ``error.type`` (the exception's class);
- ``tumbler.lock.losses`` (counter, ``{loss}``): holds lost, with ``tumbler.loss.reason`` (one
  of ``tumbler.observe.LOSS_REASONS``);
- ``tumbler.lock.renewals`` (counter, ``{renewal}``): leases renewed;
  ``tumbler.lock.late_renewals``: those sent with less than a third of the lease left;
  ``tumbler.lock.renewal_failures``: renewals that could not reach the backend;
- ``tumbler.lock.waiters`` (up-down counter, ``{waiter}``): this client's acquisitions that
  found their lock taken and wait now.

Spans (tracer ``tumbler``), children of the caller's current span: ``tumbler.acquire``, from the
start of an acquisition to its end (attributes ``tumbler.backend``, ``tumbler.lock.name`` if
asked for, ``tumbler.acquire.timeout``, then ``tumbler.acquire.outcome``,
``tumbler.acquire.waited`` and, once granted, ``tumbler.lock.fencing_token``); and
``tumbler.release``, around the holder's release (``tumbler.lock.fencing_token``,
``tumbler.hold.duration``). A span's status is ERROR when the call raised (the exception is
recorded on it, ``LockLost`` for a release included), and when a wait timed out; a single try
refused (timeout 0) is not an error.

Lock names are left out by default: a name often carries an id (``orders:42``), which would make
a time series per order, and may say more than a metrics store should keep. ``lock_names=True``
adds them; ``lock_names=callable`` adds what it returns for a name (``lambda name:
name.split(":")[0]`` keeps the kind of lock and drops the id).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

from . import __version__
from .errors import InvalidArgument, MissingDependency
from .observe import (
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

try:
    from opentelemetry import metrics, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as error:  # pragma: no cover - the fresh interpreter of the tests sees it
    raise MissingDependency(None, "otel", "opentelemetry-api", needed_by="tumbler.otel") from error

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

__all__ = ["NAMES", "OpenTelemetryObserver"]

#: Histogram buckets for waits and holds, in seconds: a lock waited for or held from a
#: millisecond (an uncontended grant on a local backend) to ten minutes (a batch job). The
#: SDK's own defaults suit milliseconds, and would put every wait under five seconds in one
#: bucket.
DURATION_BUCKETS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)

#: every name this module gives a metric, a span or an attribute
NAMES: Final = frozenset(
    {
        "tumbler.lock.acquire.duration",
        "tumbler.lock.hold.duration",
        "tumbler.lock.grants",
        "tumbler.lock.timeouts",
        "tumbler.lock.errors",
        "tumbler.lock.losses",
        "tumbler.lock.renewals",
        "tumbler.lock.late_renewals",
        "tumbler.lock.renewal_failures",
        "tumbler.lock.waiters",
        "tumbler.acquire",
        "tumbler.release",
        "tumbler.backend",
        "tumbler.lock.name",
        "tumbler.lock.fencing_token",
        "tumbler.acquire.outcome",
        "tumbler.acquire.timeout",
        "tumbler.acquire.waited",
        "tumbler.hold.duration",
        "tumbler.operation",
        "tumbler.loss.reason",
    }
)

#: how many lock names' attribute sets are kept made (more: made afresh for each event)
_KEPT_ATTRIBUTES = 1024

Attributes = Mapping[str, str]
#: a span's attributes
SpanAttributes = dict[str, str | int | float | bool]


class OpenTelemetryObserver(Observer):
    """Records a client's events as OpenTelemetry metrics and spans (see the module docstring).

    ``meter_provider`` and ``tracer_provider``: where to record; the global ones
    (``opentelemetry.metrics.set_meter_provider``) by default. ``lock_names``: False (default)
    leaves lock names out of metrics and spans, True puts them in, a callable puts in what it
    returns for each name. One observer may serve several clients.
    """

    def __init__(
        self,
        *,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
        lock_names: bool | Callable[[str], str] = False,
    ) -> None:
        if not (isinstance(lock_names, bool) or callable(lock_names)):
            raise InvalidArgument(
                "lock_names must be True, False or a function of the lock name, not "
                f"{type(lock_names).__name__}"
            )
        self._lock_names = lock_names
        self._attributes: dict[tuple[str, ...], Attributes] = {}
        meter = metrics.get_meter("tumbler", __version__, meter_provider)
        self._tracer = trace.get_tracer("tumbler", __version__, tracer_provider)
        self._acquire_duration = meter.create_histogram(
            "tumbler.lock.acquire.duration",
            unit="s",
            description="How long acquisitions took, from their start to a grant, a timeout "
            "or an error",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._hold_duration = meter.create_histogram(
            "tumbler.lock.hold.duration",
            unit="s",
            description="How long holds were held, from the grant to the holder's release",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._grants = meter.create_counter(
            "tumbler.lock.grants", unit="{grant}", description="Acquisitions granted"
        )
        self._timeouts = meter.create_counter(
            "tumbler.lock.timeouts",
            unit="{timeout}",
            description="Acquisitions whose timeout ran out before a grant",
        )
        self._errors = meter.create_counter(
            "tumbler.lock.errors",
            unit="{error}",
            description="Acquisitions and releases that raised an error",
        )
        self._losses = meter.create_counter(
            "tumbler.lock.losses", unit="{loss}", description="Holds lost, by reason"
        )
        self._renewals = meter.create_counter(
            "tumbler.lock.renewals", unit="{renewal}", description="Leases renewed"
        )
        self._late_renewals = meter.create_counter(
            "tumbler.lock.late_renewals",
            unit="{renewal}",
            description="Leases renewed with less than a third of the lease left",
        )
        self._renewal_failures = meter.create_counter(
            "tumbler.lock.renewal_failures",
            unit="{renewal}",
            description="Renewals that could not reach the backend (the hold is in doubt)",
        )
        self._waiters = meter.create_up_down_counter(
            "tumbler.lock.waiters",
            unit="{waiter}",
            description="Acquisitions of this process waiting for a lock",
        )
        #: the spans under way, by acquisition number
        self._acquiring: dict[int, Span] = {}
        self._releasing: dict[int, Span] = {}

    def _attributes_of(self, backend: str, name: str, *more: str) -> Attributes:
        """The attributes of the lock ``name``, and ``more`` (keys and values in turn): made
        once for each, not at every event."""
        chosen = self._lock_names
        key = (backend, "" if chosen is False else name, *more)
        found = self._attributes.get(key)
        if found is None:
            made = {"tumbler.backend": backend}
            if chosen is not False:
                made["tumbler.lock.name"] = name if chosen is True else str(chosen(name))
            made.update(zip(more[::2], more[1::2], strict=True))
            if len(self._attributes) < _KEPT_ATTRIBUTES:
                self._attributes[key] = made
            found = made
        return found

    # -- acquisitions ------------------------------------------------------------------------

    def acquire_started(self, event: AcquireStarted) -> None:
        attributes: SpanAttributes = dict(self._attributes_of(event.backend, event.name))
        if event.timeout is not None:
            attributes["tumbler.acquire.timeout"] = event.timeout
        self._acquiring[event.acquisition] = self._tracer.start_span(
            "tumbler.acquire", kind=SpanKind.INTERNAL, attributes=attributes
        )

    def acquire_waiting(self, event: AcquireWaiting) -> None:
        self._waiters.add(1, self._attributes_of(event.backend, event.name))

    def _acquired(
        self,
        event: AcquireGranted | AcquireTimedOut | AcquireFailed,
        outcome: str,
        attributes: Attributes,
    ) -> Span | None:
        waited = event.waited
        if waited:
            self._waiters.add(-1, attributes)
        self._acquire_duration.record(
            event.wait,
            self._attributes_of(event.backend, event.name, "tumbler.acquire.outcome", outcome),
        )
        span = self._acquiring.pop(event.acquisition, None)
        if span is not None:
            ending: SpanAttributes = {
                "tumbler.acquire.outcome": outcome,
                "tumbler.acquire.waited": waited,
            }
            if isinstance(event, AcquireGranted):
                ending["tumbler.lock.fencing_token"] = event.token
            span.set_attributes(ending)
        return span

    def acquire_granted(self, event: AcquireGranted) -> None:
        attributes = self._attributes_of(event.backend, event.name)
        self._grants.add(1, attributes)
        span = self._acquired(event, "granted", attributes)
        if span is not None:
            span.end()

    def acquire_timed_out(self, event: AcquireTimedOut) -> None:
        attributes = self._attributes_of(event.backend, event.name)
        self._timeouts.add(1, attributes)
        span = self._acquired(event, "timeout", attributes)
        if span is not None:
            if event.timeout != 0:
                span.set_status(Status(StatusCode.ERROR, f"not granted within {event.timeout} s"))
            span.end()

    def acquire_failed(self, event: AcquireFailed) -> None:
        attributes = self._attributes_of(event.backend, event.name)
        kind = type(event.error).__name__
        self._errors.add(
            1,
            self._attributes_of(
                event.backend, event.name, "tumbler.operation", "acquire", "error.type", kind
            ),
        )
        span = self._acquired(event, "error", attributes)
        if span is not None:
            _fail(span, event.error)

    # -- holds -------------------------------------------------------------------------------

    def release_started(self, event: ReleaseStarted) -> None:
        attributes: SpanAttributes = dict(self._attributes_of(event.backend, event.name))
        attributes["tumbler.lock.fencing_token"] = event.token
        self._releasing[event.acquisition] = self._tracer.start_span(
            "tumbler.release", kind=SpanKind.INTERNAL, attributes=attributes
        )

    def released(self, event: Released) -> None:
        attributes = self._attributes_of(event.backend, event.name)
        self._hold_duration.record(event.held, attributes)
        span = self._releasing.pop(event.acquisition, None)
        if event.error is not None:
            kind = type(event.error).__name__
            self._errors.add(
                1,
                self._attributes_of(
                    event.backend, event.name, "tumbler.operation", "release", "error.type", kind
                ),
            )
        if span is not None:
            span.set_attribute("tumbler.hold.duration", event.held)
            if event.error is None:
                span.end()
            else:
                _fail(span, event.error)

    def lost(self, event: HoldLost) -> None:
        self._losses.add(
            1, self._attributes_of(event.backend, event.name, "tumbler.loss.reason", event.reason)
        )

    def renewed(self, event: Renewed) -> None:
        attributes = self._attributes_of(event.backend, event.name)
        self._renewals.add(1, attributes)
        if event.late:
            self._late_renewals.add(1, attributes)

    def renewal_failed(self, event: RenewalFailed) -> None:
        self._renewal_failures.add(1, self._attributes_of(event.backend, event.name))


def _fail(span: Span, error: BaseException) -> None:
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
    span.end()
