# Generated from tests/unit/_async/test_observers.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""A client's observers hear of every acquisition, wait, grant, timeout, error, release,
renewal and loss, with the right times (asyncio source of tests/unit/_sync/test_observers.py).

On ``memory://`` with a ManualClock: every time below is exact, and a waiter waits until the
test moves the clock or releases.
"""

from __future__ import annotations

import logging

import pytest

from tumbler.errors import BackendUnavailable, ClientClosed, LockLost, NotHeld
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
from tumbler.testing.conformance.compat import background, eventually

from ..observing import TTL, Recorder, connect

NAME = "orders:42"


def test_a_grant_and_its_release_are_told_with_their_times():
    clock, recorder = ManualClock(), Recorder()
    with connect(clock, [recorder]) as locks:
        clock.advance(1)
        with locks.lock(NAME, ttl=TTL) as hold:
            clock.advance(2.5)
    number = recorder.events[0].acquisition
    assert recorder.events == [
        AcquireStarted(number, NAME, "memory", None),
        AcquireGranted(number, NAME, "memory", hold.token, 0.0, False),
        ReleaseStarted(number, NAME, "memory", hold.token, 2.5),
        Released(number, NAME, "memory", hold.token, 2.5, None),
    ]


def test_each_acquisition_has_its_own_number():
    clock, recorder = ManualClock(), Recorder()
    with connect(clock, [recorder]) as locks:
        for _ in range(3):
            with locks.lock(NAME):
                pass
    numbers = [event.acquisition for event in recorder.of(AcquireStarted)]
    assert len(set(numbers)) == 3
    assert [event.acquisition for event in recorder.of(Released)] == numbers


def test_a_waiter_is_told_when_it_waits_and_how_long_it_waited():
    clock, recorder = ManualClock(), Recorder()
    with connect(clock, [recorder]) as locks:
        holder = locks.lock(NAME, ttl=TTL)
        assert holder.acquire()
        waiter = locks.lock(NAME, ttl=TTL)
        call = background(lambda: waiter.acquire(timeout=60))

        def waiting():
            return recorder.of(AcquireWaiting)

        eventually(waiting, "the second acquisition waits")
        clock.advance(4)
        holder.release()
        assert call.result() is True
        (first, second) = recorder.of(AcquireGranted)
        (told,) = recorder.of(AcquireWaiting)
        assert told == AcquireWaiting(second.acquisition, NAME, "memory")
        assert (first.wait, first.waited) == (0.0, False)
        assert (second.wait, second.waited) == (4.0, True)
        assert second.token > first.token


def test_a_waiter_whose_timeout_runs_out_is_told_timed_out():
    clock, recorder = ManualClock(), Recorder()
    with connect(clock, [recorder]) as locks:
        assert locks.lock(NAME).acquire()
        waiter = locks.lock(NAME)
        call = background(lambda: waiter.acquire(timeout=5))

        def waiting():
            return recorder.of(AcquireWaiting)

        eventually(waiting, "the second acquisition waits")
        clock.advance(5)
        assert call.result() is False
        (timed_out,) = recorder.of(AcquireTimedOut)
        assert timed_out == AcquireTimedOut(
            recorder.of(AcquireWaiting)[0].acquisition, NAME, "memory", 5.0, 5.0, True
        )


def test_a_refused_single_try_is_timed_out_without_waiting():
    clock, recorder = ManualClock(), Recorder()
    with connect(clock, [recorder]) as locks:
        assert locks.lock(NAME).acquire()
        assert locks.lock(NAME).acquire(blocking=False) is False
    (timed_out,) = recorder.of(AcquireTimedOut)
    assert (timed_out.timeout, timed_out.wait, timed_out.waited) == (0.0, 0.0, False)
    assert recorder.of(AcquireWaiting) == []


def test_a_waiter_whose_client_closes_is_told_failed_and_the_hold_lost():
    clock, recorder = ManualClock(), Recorder()
    locks = connect(clock, [recorder])
    with locks:
        holder = locks.lock(NAME, ttl=TTL)
        assert holder.acquire()
        waiter = locks.lock(NAME)
        call = background(lambda: waiter.acquire(timeout=60))

        def waiting():
            return recorder.of(AcquireWaiting)

        eventually(waiting, "the second acquisition waits")
        clock.advance(3)
    with pytest.raises(ClientClosed) as raised:
        call.result()
    (failed,) = recorder.of(AcquireFailed)
    assert failed.error is raised.value
    assert (failed.name, failed.wait, failed.waited) == (NAME, 3.0, True)
    (lost,) = recorder.of(HoldLost)
    assert (lost.reason, lost.detail, lost.held) == ("client_closed", "the client was closed", 3.0)


def test_a_lease_that_runs_out_is_lost_as_expired_and_its_release_raises():
    clock, recorder = ManualClock(), Recorder()
    with connect(clock, [recorder]) as locks:
        lock = locks.lock(NAME, ttl=TTL, renew=False)
        assert lock.acquire()
        clock.advance(TTL)
        locks.settle()
        (lost,) = recorder.of(HoldLost)
        assert (lost.reason, lost.held) == ("expired", TTL)
        assert lost.detail == "the lease ran out before a renewal succeeded"
        with pytest.raises(LockLost) as raised:
            lock.release()
    (released,) = recorder.of(Released)
    assert released.error is raised.value
    assert released.held == TTL


def test_a_force_released_hold_is_lost_as_force_released():
    clock, recorder = ManualClock(), Recorder()
    with connect(clock, [recorder]) as locks:
        lock = locks.lock(NAME, ttl=TTL)
        assert lock.acquire()
        assert locks.force_release(NAME, reason="stuck") == 1
        clock.advance(TTL / 3)
        locks.settle()
        (lost,) = recorder.of(HoldLost)
        assert lost.reason == "force_released"
        assert lost.detail.startswith("force-released by ")
        assert lost.detail.endswith(": stuck")
        assert lost.token == lock.hold.token
        with pytest.raises(LockLost):
            lock.release()


def test_a_grant_gone_from_the_backend_is_lost_as_refused():
    clock, recorder = ManualClock(), Recorder()
    with connect(clock, [recorder]) as locks:
        lock = locks.lock(NAME, ttl=TTL)
        assert lock.acquire()
        hold = lock.hold
        # as when the backend's lease ran out before the client's (a clock that jumped there)
        assert locks._gate.release_entry(hold.name, hold._request.owner)
        clock.advance(TTL / 3)
        locks.settle()
        (lost,) = recorder.of(HoldLost)
        assert (lost.reason, lost.held) == ("refused", TTL / 3)
        with pytest.raises(LockLost):
            lock.release()


def test_renewals_are_told_and_one_sent_after_a_missed_turn_is_late():
    clock, recorder = ManualClock(), Recorder()
    with connect(clock, [recorder]) as locks:
        lock = locks.lock(NAME, ttl=TTL)
        assert lock.acquire()
        deadline = lock.hold._deadline
        clock.advance(TTL / 3)  # on time: about two thirds of the lease left
        locks.settle()
        renewed_deadline = lock.hold._deadline
        clock.advance(2 * TTL / 3)  # a turn missed: less than a third left
        locks.settle()
        lock.release()
    (on_time, late) = recorder.of(Renewed)
    assert (on_time.lease_left, on_time.late) == (deadline - TTL / 3, False)
    assert (late.lease_left, late.late) == (renewed_deadline - TTL, True)
    assert on_time.acquisition == late.acquisition == recorder.events[0].acquisition


def test_a_renewal_that_cannot_reach_the_backend_is_told(monkeypatch):
    clock, recorder = ManualClock(), Recorder()
    with connect(clock, [recorder]) as locks:
        lock = locks.lock(NAME, ttl=TTL)
        assert lock.acquire()
        deadline = lock.hold._deadline
        unreachable = BackendUnavailable("the backend does not answer")

        def renew_all(renewals, bound):
            raise unreachable

        monkeypatch.setattr(locks._backend, "renew_all", renew_all)
        clock.advance(TTL / 3)
        locks.settle()
        assert lock.hold.in_doubt
        (failed,) = recorder.of(RenewalFailed)
        assert failed.error is unreachable
        assert failed.lease_left == deadline - TTL / 3
        monkeypatch.undo()


def test_a_segmented_lock_is_told_under_its_own_name_with_the_segments_token():
    clock, recorder = ManualClock(), Recorder()
    with connect(clock, [recorder]) as locks, locks.segmented("stock", 4) as hold:
        pass
    (granted,) = recorder.of(AcquireGranted)
    assert granted.name == "stock"
    assert granted.token == hold.token


def test_a_reentrant_acquire_is_not_an_acquisition():
    clock, recorder = ManualClock(), Recorder()
    with connect(clock, [recorder]) as locks:
        lock = locks.rlock(NAME)
        with lock, lock:
            pass
    assert len(recorder.of(AcquireStarted)) == 1
    assert len(recorder.of(Released)) == 1


class Failing(Observer):
    def acquire_started(self, event: AcquireStarted) -> None:
        raise RuntimeError("an observer's own bug")


def test_an_observer_that_raises_changes_nothing_and_is_logged_once(caplog):
    clock, recorder = ManualClock(), Recorder()
    caplog.set_level(logging.DEBUG, logger="tumbler")
    with connect(clock, [Failing(), recorder]) as locks:
        for _ in range(2):
            with locks.lock(NAME) as hold:
                assert hold.held
    assert len(recorder.of(AcquireGranted)) == 2  # the observer after it heard everything
    failures = [record for record in caplog.records if "failed on AcquireStarted" in record.message]
    assert [record.levelno for record in failures] == [logging.WARNING, logging.DEBUG]
    assert failures[0].exc_info is not None
    assert "an observer's own bug" in str(failures[0].exc_info[1])


def test_without_observers_a_client_has_no_dispatch():
    clock = ManualClock()
    with connect(clock, []) as locks:
        assert locks._observers is None
    with connect(clock, [Observer()]) as locks:  # it overrides nothing
        assert locks._observers is None
        with locks.lock(NAME) as hold:
            assert hold._observed is None


class GuardWatch(Recorder):
    """Notes, at each event, whether the client's guard (its books' lock) was held."""

    def __init__(self) -> None:
        super().__init__()
        self.guard: object = None
        self.held_at: list[object] = []

    def note(self, event: object) -> None:
        super().note(event)
        if self.guard is not None and self.guard.locked():
            self.held_at.append(event)


def test_observers_are_never_called_under_the_clients_guard():
    clock, watch = ManualClock(), GuardWatch()
    with connect(clock, [watch]) as locks:
        watch.guard = locks._gate.guard
        holder = locks.lock(NAME, ttl=TTL)
        assert holder.acquire()
        waiter = locks.lock(NAME, ttl=TTL)
        call = background(lambda: waiter.acquire(timeout=60))

        def waiting():
            return watch.of(AcquireWaiting)

        eventually(waiting, "the second acquisition waits")
        clock.advance(TTL / 3)
        locks.settle()
        holder.release()
        assert call.result() is True
        assert locks.lock("other", ttl=TTL, renew=False).acquire()
        clock.advance(TTL)
        locks.settle()
    kinds = {type(event).__name__ for event in watch.events}
    assert {"AcquireWaiting", "Renewed", "Released", "HoldLost"} <= kinds
    assert watch.held_at == []


def test_a_release_of_a_hold_already_released_is_not_a_release():
    clock, recorder = ManualClock(), Recorder()
    with connect(clock, [recorder]) as locks:
        lock = locks.lock(NAME, ttl=TTL)
        assert lock.acquire()
        hold = lock.hold
        clock.advance(1)
        hold.release()
        clock.advance(1)
        with pytest.raises(NotHeld):
            hold.release()
    assert [event.held for event in recorder.of(ReleaseStarted)] == [1.0]
    assert [(event.held, event.error) for event in recorder.of(Released)] == [(1.0, None)]


def test_an_extension_by_hand_is_a_renewal():
    clock, recorder = ManualClock(), Recorder()
    with connect(clock, [recorder]) as locks:
        lock = locks.lock(NAME, ttl=TTL, renew=False)
        assert lock.acquire()
        deadline = lock.hold._deadline
        clock.advance(TTL / 6)
        lock.hold.extend()
        clock.advance(TTL * 5 / 6)
        lock.hold.extend()
        lock.release()
    (early, late) = recorder.of(Renewed)
    assert (early.lease_left, early.late) == (deadline - TTL / 6, False)
    assert late.late
