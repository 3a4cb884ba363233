"""What the cases that drive the backend Protocol directly share, in both flavours: backends
opened on the URL under test, each closed when its case ends.

These cases work below the lock API (``tumbler.backends.contract``): they send grant requests,
renewals and releases themselves, to hold each backend to the guarantees of the contract's
docstring that no lock object shows (a retried request, a renewal of what is gone, what a
release returns, a waiter that vanished).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TypeVar

from ..._acompat import asleep_real, sleep_real
from ..._url import parse_url
from ...backends import load_backend
from ...backends.contract import AsyncBackend, Backend

__all__ = ["POLL", "AsyncBackends", "Backends"]

T = TypeVar("T")

#: how often ``until`` looks again (real seconds)
POLL = 0.02


def _overdue(asked: float, since: float, bound: float, what: str) -> None:
    if asked - since > bound:
        raise AssertionError(f"{what}: not so {asked - since:.2f} s after it should begin")


class Backends:
    """Blocking backends of ``url``: each ``open()`` is a connection of its own (a session of
    its own, on a session-based backend); leaving the ``with`` block closes those still open."""

    def __init__(self, url: str) -> None:
        self._url = parse_url(url)
        self._open: list[Backend] = []

    def open(self) -> Backend:
        backend = load_backend(self._url).open_sync(self._url)
        self._open.append(backend)
        return backend

    def close(self, backend: Backend) -> None:
        """Close ``backend`` now (its session ends, on a session-based backend)."""
        self._open.remove(backend)
        backend.close()

    @staticmethod
    def until(
        backend: Backend, probe: Callable[[], T | None], since: float, bound: float, what: str
    ) -> T:
        """Call ``probe`` until it returns something, and return that. Fail if a call sent
        more than ``bound`` seconds after ``since`` (on ``backend``'s clock) still found
        nothing: how soon it finds something is not asserted, only that it does in time."""
        while True:
            asked = backend.clock.now()
            found = probe()
            if found is not None:
                return found
            _overdue(asked, since, bound, what)
            sleep_real(POLL)

    def __enter__(self) -> Backends:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        while self._open:
            self.close(self._open[-1])


class AsyncBackends:
    """Asyncio backends of ``url``: ``Backends`` with awaitable opening and closing."""

    def __init__(self, url: str) -> None:
        self._url = parse_url(url)
        self._open: list[AsyncBackend] = []

    async def open(self) -> AsyncBackend:
        backend = await load_backend(self._url).open_async(self._url)
        self._open.append(backend)
        return backend

    async def close(self, backend: AsyncBackend) -> None:
        """Close ``backend`` now (its session ends, on a session-based backend)."""
        self._open.remove(backend)
        await backend.close()

    @staticmethod
    async def until(
        backend: AsyncBackend,
        probe: Callable[[], Awaitable[T | None]],
        since: float,
        bound: float,
        what: str,
    ) -> T:
        """``Backends.until`` with an awaitable ``probe``."""
        while True:
            asked = backend.clock.now()
            found = await probe()
            if found is not None:
                return found
            _overdue(asked, since, bound, what)
            await asleep_real(POLL)

    async def __aenter__(self) -> AsyncBackends:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        while self._open:
            await self.close(self._open[-1])
