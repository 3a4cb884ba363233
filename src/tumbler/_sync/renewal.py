# Generated from src/tumbler/_async/renewal.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""One renewal worker and one deadline watch per client.

Every hold of a client is renewed (at a third of its lease) by one background worker (a task,
or in the blocking flavour a daemon thread), not by a worker per hold: it wakes at the earliest
due time and hands every hold then due to the client in one batch, which the client renews with
one backend call (``renew_all``).

A second worker, the *deadline watch*, does no I/O: it wakes at the earliest local deadline of
the client's holds and reports every hold whose deadline has passed as lost, at once. A renewal
call stuck on a silent network (the connection open, no bytes flowing) may hold the renewal
worker up to the end of its bound; the watch makes sure the holder is told (``on_lost``,
``wait_lost()``) at its own deadline all the same, which comes before the backend's expiry.

The scheduler keeps its holds (strong references): a hold whose lock object the caller dropped
is still renewed until it is released, lost, or its client closed.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from .._acompat import Event, Worker, join, spawn
from .._clock import Clock
from .._logs import logger

_log = logger("tumbler.renewal")

T = TypeVar("T")
#: seconds the deadline watch sleeps when no hold is live (a new hold that must be watched
#: sooner wakes it at once)
IDLE_LOOK = 5.0
#: for each item served, its next due time or None
NextDue = list[float | None]


class Renewer(Generic[T]):
    """Schedules items (holds) and serves them in batches.

    ``serve(items)`` does what is due for each item and returns, for each, the next due time
    or None (done). ``expire()`` reports every item whose deadline passed and returns the next
    deadline to watch for, or None.
    """

    def __init__(
        self,
        clock: Clock,
        serve: Callable[[list[T]], NextDue],
        expire: Callable[[], float | None],
    ) -> None:
        self._clock = clock
        self._serve = serve
        self._expire = expire
        self._lock = threading.Lock()
        self._heap: list[tuple[float, int, T]] = []
        self._order = itertools.count()
        self._wakeup = Event()
        self._watch_wakeup = Event()
        self._progress = Event()
        self._busy = False
        #: the deadline the watch sleeps until (None: no hold to watch)
        self._watched: float | None = None
        self._watch_busy = False
        self._closed = False
        self._workers: list[Worker] = []
        clock.add_listener(self._wake_both)

    def schedule(self, item: T, due: float, deadline: float | None = None) -> None:
        """Serve ``item`` at ``due`` on the clock (and then whenever it asks); ``deadline``:
        a new item's deadline, for the deadline watch, which moves its alarm if this one
        comes first."""
        with self._lock:
            heapq.heappush(self._heap, (due, next(self._order), item))
            # The worker sleeps until the earliest due time: wake it only if that moved
            # earlier (a thread switch per acquisition would cost more than the grant).
            earliest = self._heap[0][0] == due
            # While the watch is looking (busy) it may have read the holds before this one
            # was added, and goes to sleep until what it found: it must look again.
            earlier = deadline is not None and (
                self._watch_busy or self._watched is None or deadline < self._watched
            )
            if not self._workers and not self._closed:
                self._workers = [
                    spawn(self._run, "tumbler-renewal"),
                    spawn(self._watch, "tumbler-deadlines"),
                ]
        if earliest:
            self._wakeup.set_threadsafe()
        if earlier:
            self._watch_wakeup.set_threadsafe()

    def expedite(self) -> None:
        """Make every job due now (the backend's connection changed: confirm every hold)."""
        with self._lock:
            now = self._clock.now()
            self._heap = [(min(due, now), order, item) for due, order, item in self._heap]
            heapq.heapify(self._heap)
        self._wake_both()

    def _wake_both(self) -> None:
        self._wakeup.set_threadsafe()
        self._watch_wakeup.set_threadsafe()

    def _run(self) -> None:
        while True:
            self._wakeup.clear()
            with self._lock:
                if self._closed:
                    return
                now = self._clock.now()
                batch: list[T] = []
                while self._heap and self._heap[0][0] <= now:
                    batch.append(heapq.heappop(self._heap)[2])
                self._busy = bool(batch)
                next_due = self._heap[0][0] if not batch and self._heap else None
            if not batch:
                self._progress.set_threadsafe()
                timeout = None if next_due is None else self._clock.real_timeout(next_due - now)
                self._wakeup.wait(timeout)
                continue
            try:
                again = self._serve(batch)
            except Exception:  # a renewal must never kill the worker that serves all holds
                _log.exception("renewal failed")
                again = [None] * len(batch)
            with self._lock:
                for item, due in zip(batch, again, strict=True):
                    if due is not None:
                        heapq.heappush(self._heap, (due, next(self._order), item))

    def _watch(self) -> None:
        while True:
            self._watch_wakeup.clear()
            with self._lock:
                if self._closed:
                    return
                self._watch_busy = True
            try:
                deadline = self._expire()
            except Exception:
                _log.exception("deadline watch failed")
                deadline = None
            if deadline is None:
                # No hold to watch: look again after a while all the same. A hold that came and
                # went before the watch got to run (a client that acquires and releases in a
                # loop, on an event loop) leaves it nothing to watch; sleeping until woken would
                # make every next acquisition wake it (schedule), a task switch each.
                deadline = self._clock.now() + IDLE_LOOK
            with self._lock:
                self._watched = deadline
                self._watch_busy = False
            self._progress.set_threadsafe()
            left = deadline - self._clock.now()
            if left > 0:
                self._watch_wakeup.wait(self._clock.real_timeout(left))

    def settle(self) -> None:
        """Wait until every job and deadline that is due on the clock has been served (for
        tests on a manual clock)."""
        while True:
            with self._lock:
                now = self._clock.now()
                due = bool(self._heap) and self._heap[0][0] <= now
                overdue = self._watched is not None and self._watched <= now
                busy = self._busy or self._watch_busy
                if not (busy or due or overdue) or self._closed or not self._workers:
                    return
                self._progress.clear()
            self._wake_both()
            self._progress.wait(0.05)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._heap.clear()
            workers, self._workers = self._workers, []
        self._clock.remove_listener(self._wake_both)
        self._wake_both()
        for worker in workers:
            join(worker)
