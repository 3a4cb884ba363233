"""The few things that really differ between the asyncio and the threaded flavour.

The lock logic is written once, async-first, in ``tumbler/_async/``; ``tools/generate_sync.py``
derives ``tumbler/_sync/`` from it by dropping ``async``/``await`` and renaming each async name
below to its sync twin (``AsyncEvent`` -> ``Event``, ``aspawn`` -> ``spawn``, ...). Each pair
here has the same shape, so the generated code reads as if written by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

#: what spawn() and aspawn() return
Worker = threading.Thread
AsyncWorker = asyncio.Task[None]


class Event:
    """A flag one thread waits on and any thread sets."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set_threadsafe(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None) -> bool:
        """Wait until set or ``timeout`` real seconds pass (None: no limit); True if set."""
        return self._event.wait(timeout)


class AsyncEvent:
    """A flag one task waits on and any thread (or the loop itself) sets."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()

    def set_threadsafe(self) -> None:
        loop = self._loop
        if loop is None:
            self._event.set()  # nobody has waited yet, so nobody needs waking
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._event.set()
        elif not loop.is_closed():
            loop.call_soon_threadsafe(self._event.set)

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self, timeout: float | None) -> bool:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if self._event.is_set():
            return True
        # Not asyncio.wait_for: before Python 3.12 it can swallow a cancellation that arrives
        # as the event is set, and a cancelled waiter would then wait on.
        waiter = asyncio.ensure_future(self._event.wait())
        try:
            await asyncio.wait({waiter}, timeout=timeout)
        finally:
            waiter.cancel()
        return self._event.is_set()


#: a mutual-exclusion lock for code that awaits while holding it (threads: threading.Lock)
Mutex = threading.Lock
AsyncMutex = asyncio.Lock


def spawn(target: Callable[[], None], name: str) -> Worker:
    """Run ``target`` in the background: a daemon thread, so it never keeps a process alive."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def aspawn(target: Callable[[], Coroutine[Any, Any, None]], name: str) -> AsyncWorker:
    """Run ``target`` in the background as a task on the running loop."""
    return asyncio.get_running_loop().create_task(target(), name=name)


def join(worker: Worker) -> None:
    if worker is not threading.current_thread():
        worker.join()


async def ajoin(worker: AsyncWorker) -> None:
    if worker is not asyncio.current_task():
        await asyncio.gather(worker, return_exceptions=True)


def shield(result: T) -> T:
    """Sync twin of ``ashield``: a blocking call already runs to its end."""
    return result


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # an abandoned shielded call's error is logged by its own code


async def ashield(call: Awaitable[T]) -> T:
    """Run ``call`` to its end even if the awaiting task is cancelled.

    The caller still sees the CancelledError at once; the work goes on and keeps the backend
    and the local state in step (a cancelled release still releases: redis-py #3847).
    """
    task = asyncio.ensure_future(call)
    task.add_done_callback(_retrieve)
    return await asyncio.shield(task)


def current_context() -> Hashable:
    """Who is acting: re-entrancy and ``release()`` are per thread."""
    return threading.get_ident()


def acurrent_context() -> Hashable:
    """Who is acting: re-entrancy and ``release()`` are per task."""
    task = asyncio.current_task()
    return task if task is not None else threading.get_ident()


def check_cancelled() -> None:
    """Sync twin of ``acheck_cancelled``: threads are not cancelled."""


def acheck_cancelled() -> None:
    """Raise CancelledError if the current task was cancelled and something swallowed it.

    Some awaits below tumbler swallow a cancellation that arrives at the wrong moment
    (``asyncio.wait_for`` before Python 3.12, which drivers use); the task's cancellation
    count (Python 3.11+) still records the request, so a waiter is not left waiting on.
    """
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    if cancelling is not None and cancelling():
        raise asyncio.CancelledError


def sleep_real(seconds: float) -> None:
    threading.Event().wait(seconds)


async def asleep_real(seconds: float) -> None:
    await asyncio.sleep(seconds)
