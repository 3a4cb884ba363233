"""Test helpers in both flavours (async name -> blocking twin, as in tumbler/_acompat.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tumbler import Locks
    from tumbler.aio import AsyncLocks

#: the ``connect`` fixture: makes clients of the backend under test
Connect = Callable[..., "Locks"]
#: the ``aconnect`` fixture: makes asyncio clients of the backend under test
AsyncConnect = Callable[..., Awaitable["AsyncLocks"]]

#: how long any single wait in a test may take before the test fails
PATIENCE = 30.0


class BackgroundCall:
    """A call running in a thread; ``result()`` waits for it."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        threading.Thread(target=self._run, args=(call,), daemon=True).start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self._future.set_result(call())
        except BaseException as error:
            self._future.set_exception(error)

    def result(self) -> Any:
        return self._future.result(PATIENCE)

    def done(self) -> bool:
        return self._future.done()


class AsyncBackgroundCall:
    """A call running as a task; ``await result()`` waits for it."""

    def __init__(self, call: Callable[[], Awaitable[Any]]) -> None:
        async def run() -> Any:
            return await call()

        self.task = asyncio.ensure_future(run())

    async def result(self) -> Any:
        return await asyncio.wait_for(asyncio.shield(self.task), PATIENCE)

    def done(self) -> bool:
        return self.task.done()


def background(call: Callable[[], Any]) -> BackgroundCall:
    return BackgroundCall(call)


def abackground(call: Callable[[], Awaitable[Any]]) -> AsyncBackgroundCall:
    return AsyncBackgroundCall(call)


def gather(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls at once, each in its own thread; their results in order."""
    running = [BackgroundCall(call) for call in calls]
    return [call.result() for call in running]


async def agather(*calls: Callable[[], Awaitable[Any]]) -> list[Any]:
    """Run the calls at once, each in its own task; their results in order."""
    return list(await asyncio.wait_for(asyncio.gather(*(call() for call in calls)), PATIENCE))


def eventually(condition: Callable[[], Any], what: str) -> None:
    """Wait until ``condition()`` is true (checked every few ms), or fail after PATIENCE."""
    end = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.005)


async def aeventually(condition: Callable[[], Awaitable[Any]], what: str) -> None:
    end = time.monotonic() + PATIENCE
    while not await condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.005)
