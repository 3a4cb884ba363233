"""Clocks: the system clock, and the manual clock tests move by hand."""

from __future__ import annotations

import math
import threading

import pytest

from tumbler.testing import Clock, ManualClock, SystemClock


def test_a_manual_clock_stands_still_until_advanced() -> None:
    clock = ManualClock(start=100)
    assert clock.now() == 100.0
    assert clock.now() == 100.0
    clock.advance(2.5)
    assert clock.now() == 102.5
    clock.advance(0)
    assert clock.now() == 102.5


def test_advance_wakes_every_listener_after_the_clock_moved() -> None:
    clock = ManualClock()
    seen: list[tuple[str, float]] = []
    clock.add_listener(lambda: seen.append(("first", clock.now())))
    clock.add_listener(lambda: seen.append(("second", clock.now())))
    clock.advance(5)
    assert seen == [("first", 5.0), ("second", 5.0)]


def test_a_removed_listener_is_not_woken() -> None:
    clock = ManualClock()
    calls: list[float] = []

    def listener() -> None:
        calls.append(clock.now())

    clock.add_listener(listener)
    clock.advance(1)
    clock.remove_listener(listener)
    clock.advance(1)
    assert calls == [1.0]
    clock.remove_listener(listener)  # removing twice is harmless


def test_a_listener_may_remove_itself_while_being_woken() -> None:
    clock = ManualClock()
    calls: list[str] = []

    def once() -> None:
        calls.append("once")
        clock.remove_listener(once)

    clock.add_listener(once)
    clock.add_listener(lambda: calls.append("always"))
    clock.advance(1)
    clock.advance(1)
    assert calls == ["once", "always", "always"]


def test_advance_from_another_thread_wakes_a_waiter() -> None:
    clock = ManualClock()
    woken = threading.Event()
    clock.add_listener(woken.set)
    mover = threading.Thread(target=clock.advance, args=(30,))
    mover.start()
    assert woken.wait(timeout=10)
    mover.join(timeout=10)
    assert clock.now() == 30.0


@pytest.mark.parametrize("seconds", [-1, -0.001, -math.inf, math.nan])
def test_a_manual_clock_only_moves_forward(seconds: float) -> None:
    clock = ManualClock(start=7)
    woken: list[None] = []
    clock.add_listener(lambda: woken.append(None))
    with pytest.raises(ValueError, match="forward"):
        clock.advance(seconds)
    assert clock.now() == 7.0
    assert woken == []


def test_a_manual_clock_blocks_until_moved_not_for_real_time() -> None:
    clock = ManualClock()
    assert clock.real_timeout(5) is None
    assert clock.real_timeout(1e-9) is None
    assert clock.real_timeout(0) == 0.0
    assert clock.real_timeout(-3) == 0.0


def test_the_system_clock_blocks_for_real_time() -> None:
    clock = SystemClock()
    assert clock.real_timeout(2.5) == 2.5
    assert clock.real_timeout(0) == 0.0
    assert clock.real_timeout(-1) == 0.0


def test_the_system_clock_never_goes_backwards() -> None:
    clock = SystemClock()
    readings = [clock.now() for _ in range(1000)]
    assert readings == sorted(readings)


def test_the_system_clock_ignores_listeners() -> None:
    clock = SystemClock()
    clock.add_listener(pytest.fail)  # never called: nobody moves the system clock by hand
    clock.remove_listener(pytest.fail)
    clock.remove_listener(pytest.fail)


def test_both_clocks_have_what_the_lock_logic_needs() -> None:
    for clock in (SystemClock(), ManualClock()):
        for method in ("now", "real_timeout", "add_listener", "remove_listener"):
            assert callable(getattr(clock, method))
    assert {name for name in vars(Clock) if not name.startswith("_")} == {
        "now",
        "real_timeout",
        "add_listener",
        "remove_listener",
    }


def test_reprs() -> None:
    assert repr(ManualClock(3)) == "ManualClock(now=3.0)"
    assert repr(SystemClock()) == "SystemClock()"


@pytest.mark.parametrize("step", [math.inf, math.nan, -1.0])
def test_a_manual_clock_moves_forward_by_finite_steps_only(step: float) -> None:
    clock = ManualClock()
    with pytest.raises(ValueError, match="finite"):
        clock.advance(step)
    assert clock.now() == 0.0
