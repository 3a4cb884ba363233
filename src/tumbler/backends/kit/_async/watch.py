"""Waiting for a lock to change: the one watch every backend can use.

A watch wakes when its backend's ``WakeHub`` is notified for the lock name (push backends), when
a manual clock moves, or when the timeout passes (pollers).
"""

from __future__ import annotations

from types import TracebackType

from ...._acompat import AsyncEvent
from ...._clock import Clock
from ...contract import WakeHub


class AsyncHubWatch:
    """Subscribed from construction: a backend's own wake-ups reach it through the hub."""

    #: nothing between construction and entry is missed: no need to try again before waiting
    retry_needed = False

    def __init__(
        self, clock: Clock, name: str, hub: WakeHub | None = None, tag: str | None = None
    ) -> None:
        self._clock = clock
        self._name = name
        self._hub = hub
        self._event = AsyncEvent()
        clock.add_listener(self._event.set_threadsafe)
        if hub is not None:
            hub.subscribe(name, self._event.set_threadsafe, tag)

    async def wait(self, timeout: float) -> None:
        """Return when the lock may have changed, or after ``timeout`` seconds on the clock."""
        await self._event.wait(self._clock.real_timeout(timeout))
        self._event.clear()

    def wake(self) -> None:
        """End the current wait now, or the next one if none is under way (from any thread)."""
        self._event.set_threadsafe()

    def close(self) -> None:
        """Stop listening (again is harmless)."""
        self._clock.remove_listener(self._event.set_threadsafe)
        if self._hub is not None:
            self._hub.unsubscribe(self._name, self._event.set_threadsafe)

    async def __aenter__(self) -> AsyncHubWatch:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
