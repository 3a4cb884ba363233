"""Clocks: where the lock logic reads the time, so that tests can move it.

Every deadline in tumbler (lease validity, acquire timeouts, renewal schedule) is read from a
``Clock``. The system clock is ``time.monotonic()``. ``ManualClock`` (public in
``tumbler.testing``) moves only when told, and wakes everything that waits on it when it does.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from typing import Protocol

Listener = Callable[[], None]


class Clock(Protocol):
    """What the lock logic needs of a clock."""

    def now(self) -> float:
        """Seconds on a clock that never goes backwards."""
        ...

    def real_timeout(self, seconds: float) -> float | None:
        """How long to block, in real seconds, to let ``seconds`` pass on this clock.

        None means "until a listener is called": the clock moves only when advanced.
        """
        ...

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener`` (from any thread) whenever the clock is moved by hand."""
        ...

    def remove_listener(self, listener: Listener) -> None: ...


class SystemClock:
    """``time.monotonic()``: the clock every client uses unless a test gives it another."""

    def now(self) -> float:
        return time.monotonic()

    def real_timeout(self, seconds: float) -> float | None:
        return max(0.0, seconds)

    def add_listener(self, listener: Listener) -> None:
        pass  # the system clock is never moved by hand

    def remove_listener(self, listener: Listener) -> None:
        pass

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock that stands still until ``advance()`` moves it: for deterministic tests.

    Give it to a ``memory://`` client (``tumbler.connect("memory://", clock=clock)``). Leases,
    acquire timeouts and renewals then follow this clock, not real time: a waiter with
    ``timeout=5`` waits until the test has advanced the clock by 5 seconds. Renewals that fall
    due run in the client's background; ``Locks.settle()`` waits for them.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []

    def now(self) -> float:
        return self._now

    def real_timeout(self, seconds: float) -> float | None:
        return 0.0 if seconds <= 0 else None

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` and wake everything waiting on it."""
        if not 0 <= seconds < math.inf:
            raise ValueError(f"a clock moves forward by a finite amount, not by {seconds!r}")
        with self._lock:
            self._now += seconds
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    def add_listener(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now!r})"
