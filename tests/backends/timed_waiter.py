"""A waiter in a thread of its own, in either flavour, that notes when it was granted: what
the cases of a dead waiter ahead of a live one (``test_redis*.py``) time."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import tumbler
import tumbler.aio
from tumbler.testing.conformance.compat import PATIENCE, background


class TimedWaiter:
    """Connects to ``url`` in a thread, waits for the lock ``lock_of`` makes (``alock_of`` in
    the asyncio flavour) and releases it at once."""

    def __init__(
        self,
        url: str,
        flavour: str,
        lock_of: Callable[[tumbler.Locks], Any],
        alock_of: Callable[[tumbler.aio.AsyncLocks], Any],
    ) -> None:
        self._acquired = threading.Event()
        self._at: list[float] = []

        def wait_for_it() -> None:
            if flavour == "sync":
                with tumbler.connect(url) as locks:
                    waiting = lock_of(locks)
                    assert waiting.acquire(timeout=PATIENCE)
                    self._got_it()
                    waiting.release()
                return

            async def main() -> None:
                async with await tumbler.aio.connect(url) as locks:
                    waiting = alock_of(locks)
                    assert await waiting.acquire(timeout=PATIENCE)
                    self._got_it()
                    await waiting.release()

            asyncio.run(main())

        self._call = background(wait_for_it)

    def _got_it(self) -> None:
        self._at.append(time.monotonic())
        self._acquired.set()

    def granted_at(self) -> float:
        """When the lock was granted (on ``time.monotonic``), once it was, and released."""
        assert self._acquired.wait(PATIENCE)
        self._call.result()
        return self._at[0]
