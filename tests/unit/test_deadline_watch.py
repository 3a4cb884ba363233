"""The deadline watch of the blocking flavour, where holds are scheduled from the caller's
threads while the watch runs in its own."""

from __future__ import annotations

import threading

import pytest

from tumbler._clock import SYSTEM_CLOCK
from tumbler._sync import renewal
from tumbler._sync.renewal import Renewer

PATIENCE = 30.0


def test_a_hold_scheduled_while_the_watch_looks_is_watched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With nothing left to watch the watch sleeps IDLE_LOOK: made long here, so that a hold
    # it fails to take into account is reported only after the test gave up.
    monkeypatch.setattr(renewal, "IDLE_LOOK", 3600.0)
    deadlines: dict[str, float] = {}
    reported: dict[str, threading.Event] = {"first": threading.Event(), "second": threading.Event()}
    renewer: Renewer[str] = Renewer(SYSTEM_CLOCK, lambda items: [None] * len(items), lambda: look())

    def look() -> float | None:
        now = SYSTEM_CLOCK.now()
        for item, deadline in list(deadlines.items()):
            if deadline <= now:
                del deadlines[item]
                reported[item].set()
        following = min(deadlines.values(), default=None)
        if (
            reported["first"].is_set()
            and "second" not in deadlines
            and not reported["second"].is_set()
        ):
            # Another thread acquires between the watch's look at the holds and its going to
            # sleep: a deadline later than the one the watch last slept until, and not in
            # what this look returns.
            deadlines["second"] = now + 0.1
            renewer.schedule("second", now + 3600.0, deadlines["second"])
        return following

    start = SYSTEM_CLOCK.now()
    deadlines["first"] = start + 0.05
    renewer.schedule("first", start + 3600.0, deadlines["first"])
    try:
        assert reported["first"].wait(PATIENCE)
        assert reported["second"].wait(PATIENCE)
    finally:
        renewer.close()
