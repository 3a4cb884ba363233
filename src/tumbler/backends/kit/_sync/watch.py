# Generated from src/tumbler/backends/kit/_async/watch.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
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
3. **``wake()`` from any thread** ends the current wait, or the next one if none is under way.
4. **``close()``** stops listening; it may be called again, and also on a watch never entered.
   An entry that fails closes the watch before the error goes on.

A backend whose wake-ups all arrive through its hub uses :class:`AsyncHubWatch` as it is; one
that must subscribe on the server first subclasses :class:`AsyncBaseWatch` and fills in
:meth:`~AsyncBaseWatch._subscribe` (and :meth:`~AsyncBaseWatch._unsubscribe` if it holds
anything of its own).
"""

from __future__ import annotations

import threading
from types import TracebackType

from ...._acompat import Event
from ...._clock import Clock
from ...contract import WakeHub


class BaseWatch:
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
        self._event = Event()
        self._closing = threading.Lock()
        self._closed = False
        clock.add_listener(self._event.set_threadsafe)
        if hub is not None:
            hub.subscribe(name, self._event.set_threadsafe, tag)

    def _subscribe(self) -> bool:
        """Make whatever subscription entry needs beyond the hub (I/O allowed); return whether
        a change since construction could have been missed (then the lock is tried again
        before waiting). The hub alone misses nothing: ``False``."""
        return False

    def _unsubscribe(self) -> None:
        """Drop what :meth:`_subscribe` made, if anything is this watch's own: called once,
        by the first :meth:`close`, whether or not the watch was entered."""

    def wait(self, timeout: float) -> None:
        """Return when the lock may have changed, or after ``timeout`` seconds on the clock."""
        self._event.wait(self._clock.real_timeout(timeout))
        self._event.clear()

    def wake(self) -> None:
        """End the current wait now, or the next one if none is under way (from any thread)."""
        self._event.set_threadsafe()

    def close(self) -> None:
        """Stop listening (again is harmless; a watch never entered may be closed too)."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
        self._clock.remove_listener(self._event.set_threadsafe)
        if self._hub is not None:
            self._hub.unsubscribe(self.name, self._event.set_threadsafe)
        self._unsubscribe()

    def __enter__(self) -> BaseWatch:
        try:
            self.retry_needed = self._subscribe()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class HubWatch(BaseWatch):
    """A watch whose wake-ups all come through the backend's hub (or a manual clock's moves):
    subscribed in full from construction, so entering does no I/O and never asks for a retry.
    A poller passes no hub and is woken only by ``wake()`` and its timeout."""
