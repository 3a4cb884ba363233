"""Helpers for testing code that uses tumbler.

``ManualClock`` with the ``memory://`` backend makes lock behaviour that depends on time
(lease expiry, timeouts, renewal, lost holds) testable without sleeping::

    clock = ManualClock()
    locks = tumbler.connect("memory://", clock=clock)
    hold = ...
    clock.advance(31); locks.settle()

The pytest fixtures of :mod:`tumbler.testing.fixtures` (``tumbler_locks``, ``tumbler_clock``,
``tumbler_connect``, ``tumbler_url``) set this up for each test.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .._clock import Clock, ManualClock, SystemClock

__all__ = ["Clock", "ManualClock", "SystemClock", "wait_until"]


def wait_until(condition: Callable[[], object], timeout: float = 10.0) -> None:
    """Wait, in real time, until ``condition()`` is true: checked every millisecond, and an
    ``AssertionError`` after ``timeout`` seconds.

    For a test on a ``ManualClock``, before it advances the clock past another thread's wait:
    a wait that has not begun yet would start its timeout after the move and wait for ever::

        waiter = threading.Thread(target=lambda: got.append(lock.acquire(timeout=5)))
        waiter.start()
        wait_until(lambda: locks.status("job").waiters == 1)  # the waiter is in line
        clock.advance(5)
        waiter.join()
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"the condition did not hold within {timeout:g} s")
        time.sleep(0.001)
