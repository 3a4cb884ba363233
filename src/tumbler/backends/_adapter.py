"""The asyncio flavour of a backend whose driver only blocks (SQLite's stdlib module).

Each call runs on one worker thread of the adapter's own, in order. That order matters: when a
task is cancelled while its ``try_grant`` runs, the lock logic's clean-up ``release`` queues
behind it and so removes the grant the cancelled call made.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from .._async.watch import AsyncHubWatch
from .contract import Backend, Grant, GrantRequest, LockState, Renewal, WakeHub

T = TypeVar("T")


class AsyncAdapter:
    """``AsyncBackend`` over a blocking ``Backend``.

    ``in_thread=False`` is for backends whose calls never block (the memory backend): they then
    run on the event loop directly. ``hub`` is the blocking backend's wake-up hub, if it has one.
    """

    def __init__(self, backend: Backend, *, in_thread: bool, hub: WakeHub | None = None) -> None:
        self.backend = backend
        self.url = backend.url
        self.capabilities = backend.capabilities
        self.session_events = backend.session_events
        self.clock = backend.clock
        self._hub = hub
        self._executor = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="tumbler-backend")
            if in_thread
            else None
        )

    async def _call(self, function: Callable[..., T], *args: object) -> T:
        if self._executor is None:
            return function(*args)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(function, *args))

    async def try_grant(self, request: GrantRequest) -> Grant | None:
        return await self._call(self.backend.try_grant, request)

    async def renew(self, name: str, owner: str, ttl: float) -> float | None:
        return await self._call(self.backend.renew, name, owner, ttl)

    async def renew_all(self, renewals: Sequence[Renewal], timeout: float) -> list[float | None]:
        return await self._call(self.backend.renew_all, renewals, timeout)

    async def release(self, name: str, owner: str) -> bool:
        return await self._call(self.backend.release, name, owner)

    def watch(self, name: str, owner: str) -> AsyncHubWatch:
        return AsyncHubWatch(self.clock, name, self._hub)

    async def inspect(self, name: str) -> LockState:
        return await self._call(self.backend.inspect, name)

    async def inspect_all(self) -> list[LockState]:
        return await self._call(self.backend.inspect_all)

    async def force_release(self, name: str) -> int:
        return await self._call(self.backend.force_release, name)

    async def close(self) -> None:
        try:
            await self._call(self.backend.close)
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=False)
