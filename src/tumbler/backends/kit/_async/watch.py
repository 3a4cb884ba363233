"""Waiting for a lock to change: the watch handshake, written once.

The contract (``tumbler.backends.contract``, "Watch") asks four things of a watch, and
:class:`AsyncBaseWatch` keeps them so that a backend does not derive them again:

1. **Made without I/O, it catches every wake-up from then on.** The lock logic makes the
   watch before its first try and enters it only if that try fails; a release between the two
   must not be lost. So construction subscribes to the backend's ``WakeHub`` (and to a manual
   clock's moves) at once, locally, and an event remembers a wake-up until a wait takes it.
2. **``retry_needed``, read after entry**, says whether a change between construction and
   entry could have been missed: true only when entering had to subscribe somewhere the
   construction could not reach (a server-side subscription made by :meth:`_subscribe`).
3. **``wake()`` from any thread** ends the current wait, or the next one if none is under way;
   ``add_listener()`` passes every wake-up on to a caller that waits on several watches.
4. **``close()``** stops listening; it may be called again, and also on a watch never entered.
   An entry that fails closes the watch before the error goes on.

A backend whose wake-ups all arrive through its hub uses :class:`AsyncHubWatch` as it is; one
that must subscribe on the server first subclasses :class:`AsyncBaseWatch` and fills in
:meth:`~AsyncBaseWatch._subscribe` (and :meth:`~AsyncBaseWatch._unsubscribe` if it holds
anything of its own). A state watch that lasts while a mark on the store says someone watches
subclasses :class:`AsyncMarkedWatch` and fills in :meth:`~AsyncMarkedWatch._set_mark`.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from types import TracebackType

from ...._acompat import AsyncEvent
from ...._clock import Clock
from ....errors import BackendUnavailable
from ...contract import WakeHub


class AsyncBaseWatch:
    """The watch handshake; a backend fills in :meth:`_subscribe` and :meth:`_unsubscribe`.

    ``tag`` is the backend's name for this waiter in ``WakeHub.notify(name, tags)``, for a
    backend that wakes only the waiters a release lets through.
    """

    def __init__(
        self, clock: Clock, name: str, hub: WakeHub | None = None, tag: str | None = None
    ) -> None:
        self.name = name
        #: whether the lock must be tried again before the first wait (meaningful after entry)
        self.retry_needed = False
        self._clock = clock
        self._hub = hub
        # The event is made by the first wait, not here: most watches are closed unused (the
        # lock's first try found it free), and an event costs more than the rest of a watch.
        # Until then ``_woken`` remembers a wake-up for it.
        self._event: AsyncEvent | None = None
        self._woken = False
        self._closing = threading.Lock()
        self._closed = False
        #: replaced whole, never changed in place: read without a lock by any waking thread
        self._listeners: tuple[Callable[[], None], ...] = ()
        #: one bound method, so that the clock and the hub are given back the same one
        self._listener = self._on_change
        clock.add_listener(self._listener)
        if hub is not None:
            hub.subscribe(name, self._listener, tag)

    def _on_change(self) -> None:
        # Written before the event is read, as the first wait makes the event before it reads
        # the flag: whichever comes second sees the other's write, so no wake-up is lost.
        self._woken = True
        event = self._event
        if event is not None:
            event.set_threadsafe()
        for listener in self._listeners:
            listener()

    async def _subscribe(self) -> bool:
        """Make whatever subscription entry needs beyond the hub (I/O allowed); return whether
        a change since construction could have been missed (then the lock is tried again
        before waiting). The hub alone misses nothing: ``False``."""
        return False

    def _unsubscribe(self) -> None:
        """Drop what :meth:`_subscribe` made, if anything is this watch's own: called once,
        by the first :meth:`close`, whether or not the watch was entered."""

    async def wait(self, timeout: float) -> None:
        """Return when the lock may have changed, or after ``timeout`` seconds on the clock."""
        event = self._event
        if event is None:
            event = self._event = AsyncEvent()
            if self._woken:
                event.set_threadsafe()
        await event.wait(self._clock.real_timeout(timeout))
        event.clear()

    def wake(self) -> None:
        """End the current wait now, or the next one if none is under way (from any thread)."""
        self._on_change()

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Also call ``listener`` (from any thread; it must not block) at every wake-up of
        this watch until it is closed."""
        with self._closing:
            self._listeners = (*self._listeners, listener)

    def close(self) -> None:
        """Stop listening (again is harmless; a watch never entered may be closed too)."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
            self._listeners = ()
        self._clock.remove_listener(self._listener)
        if self._hub is not None:
            self._hub.unsubscribe(self.name, self._listener)
        self._unsubscribe()

    async def __aenter__(self) -> AsyncBaseWatch:
        try:
            self.retry_needed = await self._subscribe()
        except BaseException:
            self.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncHubWatch(AsyncBaseWatch):
    """A watch whose wake-ups all come through the backend's hub (or a manual clock's moves):
    subscribed in full from construction, so entering does no I/O and never asks for a retry.
    A poller passes no hub and is woken only by ``wake()`` and its timeout."""


class AsyncMarkedWatch(AsyncBaseWatch):
    """A state watch that lasts while a mark on the store says someone watches (a marker key
    that makes the store publish the name's changes, a row of the name's watchers). Entering
    sets the mark; each wait sets it again once a third of its life has passed, so that a
    watcher that went away stops costing the store within ``mark_life``. A mark the store
    could not be reached to set again costs nothing but latency: the watcher's re-checks
    still see every change, only later. A backend sets ``mark_life`` and fills in
    :meth:`_set_mark` (and :meth:`_marking`, if its watches may keep no mark)."""

    #: how long the store keeps the mark unless it is set again, in seconds
    mark_life: float

    def __init__(
        self, clock: Clock, name: str, hub: WakeHub | None = None, tag: str | None = None
    ) -> None:
        super().__init__(clock, name, hub, tag)
        self._marked_at = -math.inf

    async def _subscribe(self) -> bool:
        await self._mark()
        return False  # the hub heard everything since construction; the caller reads next

    async def _set_mark(self) -> None:
        """Say on the store, for ``mark_life``, that the name is watched (I/O allowed)."""
        raise NotImplementedError

    def _marking(self) -> bool:
        """Whether this watch keeps its mark set (a backend's watch may do without one)."""
        return True

    async def _mark(self) -> None:
        await self._set_mark()
        self._marked_at = time.monotonic()

    async def wait(self, timeout: float) -> None:
        if self._marking() and time.monotonic() - self._marked_at > self.mark_life / 3:
            with contextlib.suppress(BackendUnavailable):
                await self._mark()
        await super().wait(timeout)
