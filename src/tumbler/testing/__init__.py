"""Helpers for testing code that uses tumbler.

``ManualClock`` with the ``memory://`` backend makes lock behaviour that depends on time
(lease expiry, timeouts, renewal, lost holds) testable without sleeping::

    clock = ManualClock()
    locks = tumbler.connect("memory://", clock=clock)
    hold = ...
    clock.advance(31); locks.settle()
"""

from __future__ import annotations

from .._clock import Clock, ManualClock, SystemClock

__all__ = ["Clock", "ManualClock", "SystemClock"]
