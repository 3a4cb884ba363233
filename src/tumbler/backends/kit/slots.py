"""A bound on the calls a client has under way at once, for a backend whose connection pool
fails a call at once when it is full (or has no pool of its own that waits).

Not imported by :mod:`tumbler.backends.kit` itself: its asyncio half needs asyncio, which a
blocking-only program should not load. Import it from here.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable


class AsyncSlots:
    """At most ``limit`` calls inside at once (``None``: no bound at all); the others wait up
    to ``wait`` seconds for a place, then ``refuse()`` is raised (the backend's own "no
    connection" error, which it translates as it does its driver's). A caller cancelled
    while it waits takes no place."""

    def __init__(self, limit: int | None, wait: float, refuse: Callable[[], BaseException]) -> None:
        self._semaphore = asyncio.Semaphore(limit) if limit is not None else None
        self._wait = wait
        self._refuse = refuse

    def within(self, wait: float) -> AsyncSlots:
        """The same places, waited for at most ``wait`` seconds (a call with a shorter
        bound of its own)."""
        view = copy.copy(self)
        view._wait = wait
        return view

    async def __aenter__(self) -> None:
        semaphore = self._semaphore
        if semaphore is None:
            return
        if not semaphore.locked():
            await semaphore.acquire()  # free: returns without suspending
            return
        waiter = asyncio.ensure_future(semaphore.acquire())
        try:
            await asyncio.wait({waiter}, timeout=self._wait)
        except BaseException:
            waiter.cancel()
            if waiter.done() and not waiter.cancelled():
                semaphore.release()
            raise
        if not waiter.done():
            # the semaphore gives back a place taken as the cancellation arrives
            waiter.cancel()
            raise self._refuse()

    async def __aexit__(self, *exc_info: object) -> None:
        if self._semaphore is not None:
            self._semaphore.release()


class Slots:
    """Blocking twin of :class:`AsyncSlots`."""

    def __init__(self, limit: int | None, wait: float, refuse: Callable[[], BaseException]) -> None:
        self._semaphore = threading.BoundedSemaphore(limit) if limit is not None else None
        self._wait = wait
        self._refuse = refuse

    def within(self, wait: float) -> Slots:
        """As :meth:`AsyncSlots.within`."""
        view = copy.copy(self)
        view._wait = wait
        return view

    def __enter__(self) -> None:
        if self._semaphore is not None and not self._semaphore.acquire(timeout=self._wait):
            raise self._refuse()

    def __exit__(self, *exc_info: object) -> None:
        if self._semaphore is not None:
            self._semaphore.release()
