# Generated from tests/unit/_async/test_otel.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""tumbler.otel's metrics and spans after real acquisitions, releases, timeouts and losses, read
back from OpenTelemetry's SDK with its in-memory readers (asyncio source of
tests/unit/_sync/test_otel.py). On ``memory://`` with a ManualClock: durations are exact.
"""

from __future__ import annotations

import pytest

from tumbler.errors import ClientClosed, LockLost
from tumbler.observe import AcquireWaiting
from tumbler.otel import NAMES
from tumbler.testing import ManualClock
from tumbler.testing.conformance.compat import background, eventually

from ..observing import TTL, Recorder, Telemetry, connect

NAME = "orders:42"
GRANTED = (("tumbler.acquire.outcome", "granted"),)
TIMEOUT = (("tumbler.acquire.outcome", "timeout"),)


def test_a_grant_and_release_record_their_durations_counts_and_spans():
    clock, telemetry = ManualClock(), Telemetry()
    with connect(clock, [telemetry.observer()]) as locks:
        with locks.lock(NAME, ttl=TTL) as hold:
            clock.advance(2.5)
        with locks.lock(NAME, ttl=TTL):
            clock.advance(0.5)
    assert telemetry.metric("tumbler.lock.grants") == {(): 2}
    assert telemetry.metric("tumbler.lock.acquire.duration") == {GRANTED: (0.0, 2)}
    assert telemetry.metric("tumbler.lock.hold.duration") == {(): (3.0, 2)}
    assert telemetry.points("tumbler.lock.timeouts") == []
    acquired, _ = telemetry.spans("tumbler.acquire")
    assert dict(acquired.attributes) == {
        "tumbler.backend": "memory",
        "tumbler.acquire.outcome": "granted",
        "tumbler.acquire.waited": False,
        "tumbler.lock.fencing_token": hold.token,
    }
    released, _ = telemetry.spans("tumbler.release")
    assert dict(released.attributes) == {
        "tumbler.backend": "memory",
        "tumbler.lock.fencing_token": hold.token,
        "tumbler.hold.duration": 2.5,
    }
    assert acquired.status.is_ok
    assert released.status.is_ok


def test_waiters_are_counted_while_they_wait_and_their_wait_recorded():
    clock, telemetry, recorder = ManualClock(), Telemetry(), Recorder()
    with connect(clock, [telemetry.observer(), recorder]) as locks:
        holder = locks.lock(NAME)
        assert holder.acquire()
        waiter = locks.lock(NAME)
        call = background(lambda: waiter.acquire(timeout=60))

        def waiting():
            return recorder.of(AcquireWaiting)

        eventually(waiting, "the second acquisition waits")
        assert telemetry.metric("tumbler.lock.waiters") == {(): 1}
        clock.advance(7)
        holder.release()
        assert call.result() is True
        assert telemetry.metric("tumbler.lock.waiters") == {(): 0}
    assert telemetry.metric("tumbler.lock.acquire.duration") == {GRANTED: (7.0, 2)}
    waited = telemetry.spans("tumbler.acquire")[1]
    assert waited.attributes["tumbler.acquire.waited"] is True


def test_a_wait_that_times_out_is_an_error_span_and_a_refused_try_is_not():
    clock, telemetry, recorder = ManualClock(), Telemetry(), Recorder()
    with connect(clock, [telemetry.observer(), recorder]) as locks:
        assert locks.lock(NAME).acquire()
        assert locks.lock(NAME).acquire(blocking=False) is False
        waiter = locks.lock(NAME)
        call = background(lambda: waiter.acquire(timeout=5))

        def waiting():
            return recorder.of(AcquireWaiting)

        eventually(waiting, "the waiter waits")
        clock.advance(5)
        assert call.result() is False
        assert telemetry.metric("tumbler.lock.waiters") == {(): 0}
    assert telemetry.metric("tumbler.lock.timeouts") == {(): 2}
    assert telemetry.metric("tumbler.lock.acquire.duration") == {
        GRANTED: (0.0, 1),
        TIMEOUT: (5.0, 2),
    }
    _, tried, timed_out = telemetry.spans("tumbler.acquire")
    assert tried.attributes["tumbler.acquire.outcome"] == "timeout"
    assert tried.status.is_unset
    assert timed_out.attributes["tumbler.acquire.timeout"] == 5.0
    assert not timed_out.status.is_ok
    assert timed_out.status.description == "not granted within 5.0 s"


def test_an_acquisition_that_raises_is_counted_and_its_span_records_the_error():
    clock, telemetry, recorder = ManualClock(), Telemetry(), Recorder()
    locks = connect(clock, [telemetry.observer(), recorder])
    with locks:
        assert locks.lock(NAME).acquire()
        waiter = locks.lock(NAME)
        call = background(lambda: waiter.acquire(timeout=60))

        def waiting():
            return recorder.of(AcquireWaiting)

        eventually(waiting, "the waiter waits")
    with pytest.raises(ClientClosed):
        call.result()
    assert telemetry.metric("tumbler.lock.errors") == {
        (("error.type", "ClientClosed"), ("tumbler.operation", "acquire")): 1
    }
    assert telemetry.metric("tumbler.lock.waiters") == {(): 0}
    failed = telemetry.spans("tumbler.acquire")[1]
    assert failed.attributes["tumbler.acquire.outcome"] == "error"
    assert not failed.status.is_ok
    assert [event.name for event in failed.events] == ["exception"]
    assert failed.events[0].attributes["exception.type"].endswith("ClientClosed")


def test_losses_are_counted_by_reason_and_a_lost_release_is_an_error():
    clock, telemetry = ManualClock(), Telemetry()
    with connect(clock, [telemetry.observer()]) as locks:
        expiring = locks.lock("expiring", ttl=TTL, renew=False)
        assert expiring.acquire()
        evicted = locks.lock("evicted", ttl=TTL)
        assert evicted.acquire()
        assert locks.force_release("evicted") == 1
        clock.advance(TTL / 3)  # the renewal finds the grant gone
        locks.settle()
        clock.advance(2 * TTL / 3)  # the unrenewed lease runs out
        locks.settle()
        with pytest.raises(LockLost):
            expiring.release()
        assert locks.lock("left").acquire()  # held when the client closes
    assert telemetry.metric("tumbler.lock.losses") == {
        (("tumbler.loss.reason", "client_closed"),): 1,
        (("tumbler.loss.reason", "expired"),): 1,
        (("tumbler.loss.reason", "force_released"),): 1,
    }
    assert telemetry.metric("tumbler.lock.errors") == {
        (("error.type", "LockLost"), ("tumbler.operation", "release")): 1
    }
    assert telemetry.metric("tumbler.lock.hold.duration") == {(): (TTL, 1)}
    (released,) = telemetry.spans("tumbler.release")
    assert not released.status.is_ok
    assert released.events[0].attributes["exception.type"].endswith("LockLost")
    # the names the docs may quote (tumbler.otel.NAMES) are those used
    used = set()
    for resource in telemetry.reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                used.add(metric.name)
                for point in metric.data.data_points:
                    used.update(point.attributes)
    for span in telemetry.exporter.get_finished_spans():
        used.add(span.name)
        used.update(span.attributes)
    assert used - {"error.type"} <= NAMES


def test_renewals_and_late_renewals_are_counted():
    clock, telemetry = ManualClock(), Telemetry()
    with connect(clock, [telemetry.observer()]) as locks:
        lock = locks.lock(NAME, ttl=TTL)
        assert lock.acquire()
        clock.advance(TTL / 3)
        locks.settle()
        clock.advance(2 * TTL / 3)  # a turn missed
        locks.settle()
        assert lock.hold.held
        lock.release()
    assert telemetry.metric("tumbler.lock.renewals") == {(): 2}
    assert telemetry.metric("tumbler.lock.late_renewals") == {(): 1}
    assert telemetry.points("tumbler.lock.renewal_failures") == []


def test_lock_names_are_left_out_unless_asked_for():
    clock, hidden, shown, coarse = ManualClock(), Telemetry(), Telemetry(), Telemetry()
    observers = [
        hidden.observer(),
        shown.observer(lock_names=True),
        coarse.observer(lock_names=lambda name: name.split(":")[0]),
    ]
    with connect(clock, observers) as locks, locks.lock(NAME):
        pass
    assert hidden.metric("tumbler.lock.grants") == {(): 1}
    assert shown.metric("tumbler.lock.grants") == {(("tumbler.lock.name", NAME),): 1}
    assert coarse.metric("tumbler.lock.grants") == {(("tumbler.lock.name", "orders"),): 1}
    assert "tumbler.lock.name" not in hidden.spans("tumbler.acquire")[0].attributes
    assert shown.spans("tumbler.release")[0].attributes["tumbler.lock.name"] == NAME


def test_the_spans_are_children_of_the_callers_span():
    clock, telemetry = ManualClock(), Telemetry()
    tracer = telemetry.tracer_provider.get_tracer("test")
    with connect(clock, [telemetry.observer()]) as locks:
        with tracer.start_as_current_span("job") as job:
            with locks.lock(NAME):
                pass
    parent = job.get_span_context()
    for name in ("tumbler.acquire", "tumbler.release"):
        (span,) = telemetry.spans(name)
        assert span.parent.span_id == parent.span_id
        assert span.context.trace_id == parent.trace_id
