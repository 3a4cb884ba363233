"""One renewal scheduler per client: a heap of due times served by one background worker.

Every hold of a client is renewed (at a third of its lease) and checked for expiry by this one
worker (a task, or in the blocking flavour a daemon thread), not by a thread per hold. The heap
keeps only weak references: a hold that nobody references any more (its lock object dropped
without release) stops being renewed, so its lease runs out instead of being kept for ever.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import weakref
from typing import Protocol

from .._acompat import AsyncEvent, AsyncWorker, ajoin, aspawn
from .._clock import Clock

_log = logging.getLogger("tumbler.renewal")


class AsyncRenewable(Protocol):
    async def _due(self) -> float | None:
        """Do what is due (renew, or declare the hold lost); return the next due time or None."""
        ...


_Job = tuple[float, int, weakref.ref[AsyncRenewable]]


class AsyncRenewer:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._heap: list[_Job] = []
        self._order = itertools.count()
        self._wakeup = AsyncEvent()
        self._progress = AsyncEvent()
        self._busy = False
        self._closed = False
        self._worker: AsyncWorker | None = None
        clock.add_listener(self._wakeup.set_threadsafe)

    def schedule(self, item: AsyncRenewable, due: float) -> None:
        """Call ``item._due()`` at ``due`` on the clock (and then whenever it asks)."""
        with self._lock:
            heapq.heappush(self._heap, (due, next(self._order), weakref.ref(item)))
            # The worker sleeps until the earliest due time: wake it only if that moved
            # earlier (a thread switch per acquisition would cost more than the grant).
            earliest = self._heap[0][0] == due
            if self._worker is None and not self._closed:
                self._worker = aspawn(self._run, "tumbler-renewal")
        if earliest:
            self._wakeup.set_threadsafe()

    def expedite(self) -> None:
        """Make every job due now (the backend's connection changed: confirm every hold)."""
        with self._lock:
            now = self._clock.now()
            self._heap = [(min(due, now), order, ref) for due, order, ref in self._heap]
            heapq.heapify(self._heap)
        self._wakeup.set_threadsafe()

    async def _run(self) -> None:
        while True:
            self._wakeup.clear()
            with self._lock:
                if self._closed:
                    return
                now = self._clock.now()
                job = heapq.heappop(self._heap) if self._heap and self._heap[0][0] <= now else None
                self._busy = job is not None
                next_due = self._heap[0][0] if job is None and self._heap else None
            if job is None:
                self._progress.set_threadsafe()
                timeout = None if next_due is None else self._clock.real_timeout(next_due - now)
                await self._wakeup.wait(timeout)
                continue
            item = job[2]()
            if item is None:
                continue
            try:
                again = await item._due()
            except Exception:  # a renewal must never kill the worker that serves all holds
                _log.exception("renewal job failed")
                again = None
            if again is not None:
                with self._lock:
                    heapq.heappush(self._heap, (again, next(self._order), job[2]))

    async def settle(self) -> None:
        """Wait until every job that is due on the clock has run (for tests on a manual clock)."""
        while True:
            with self._lock:
                due = bool(self._heap) and self._heap[0][0] <= self._clock.now()
                if not (self._busy or due) or self._closed or self._worker is None:
                    return
                self._progress.clear()
            self._wakeup.set_threadsafe()
            await self._progress.wait(0.05)

    async def close(self) -> None:
        with self._lock:
            self._closed = True
            self._heap.clear()
            worker = self._worker
        self._clock.remove_listener(self._wakeup.set_threadsafe)
        self._wakeup.set_threadsafe()
        if worker is not None:
            await ajoin(worker)
