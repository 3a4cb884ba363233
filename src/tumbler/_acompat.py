"""The few things that really differ between the asyncio and the threaded flavour.

The lock logic is written once, async-first, in ``tumbler/_async/``; ``tools/generate_sync.py``
derives ``tumbler/_sync/`` from it by dropping ``async``/``await`` and renaming each async name
below to its sync twin (``AsyncEvent`` -> ``Event``, ``aspawn`` -> ``spawn``, ...). Each pair
here has the same shape, so the generated code reads as if written by hand.

The blocking flavour (``import tumbler``) loads this module too, and must not pay for asyncio,
one of the heaviest modules it would import: the async halves import asyncio when first
called, and the two aliases of asyncio's classes (``AsyncWorker``, ``AsyncMutex``) are made on
first access.
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import os
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from typing import TYPE_CHECKING, Any, TypeVar

from ._logs import logger
from .errors import WrongEventLoop

if TYPE_CHECKING:
    import asyncio

T = TypeVar("T")

_log = logger("tumbler")

#: what spawn() and aspawn() return
Worker = threading.Thread
if TYPE_CHECKING:
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
        import asyncio

        self._event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()

    def set_threadsafe(self) -> None:
        import asyncio

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
        import asyncio

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
if TYPE_CHECKING:
    AsyncMutex = asyncio.Lock


if not TYPE_CHECKING:
    # Hidden from mypy, which would otherwise take any misspelt name imported from here for
    # one this function makes.

    def __getattr__(name: str) -> object:
        # AsyncWorker and AsyncMutex at run time: only the asyncio flavour imports them
        if name == "AsyncWorker":
            import asyncio

            return asyncio.Task[None]
        if name == "AsyncMutex":
            import asyncio

            return asyncio.Lock
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def spawn(target: Callable[[], None], name: str) -> Worker:
    """Run ``target`` in the background: a daemon thread, so it never keeps a process alive."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def aspawn(target: Callable[[], Coroutine[Any, Any, None]], name: str) -> AsyncWorker:
    """Run ``target`` in the background as a task on the running loop."""
    import asyncio

    return asyncio.get_running_loop().create_task(target(), name=name)


def join(worker: Worker) -> None:
    if worker is not threading.current_thread():
        worker.join()


async def ajoin(worker: AsyncWorker) -> None:
    import asyncio

    if worker is not asyncio.current_task():
        await asyncio.gather(worker, return_exceptions=True)


def shield(result: T) -> T:
    """Sync twin of ``ashield``: a blocking call already runs to its end."""
    return result


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # an abandoned shielded call's error is logged by its own code


async def ashield(call: Coroutine[Any, Any, T]) -> T:
    """Run ``call`` to its end even if the awaiting task is cancelled.

    The caller still sees the CancelledError at once; the work goes on and keeps the backend
    and the local state in step (a cancelled release still releases: redis-py #3847).

    The work runs as a task of its own. Where asyncio allows (Python 3.12+), that task starts
    at once, and a call that finishes without waiting (a release on a backend that answers
    at once) costs no trip through the event loop; the task is still the current one while
    its call runs, as in any task. Before 3.12 the task hands its outcome to the caller
    itself, one trip through the loop sooner than ``asyncio.shield`` would.
    """
    import asyncio

    if sys.version_info >= (3, 12):
        task = asyncio.Task(call, loop=asyncio.get_running_loop(), eager_start=True)
        if task.done():
            return task.result()
        task.add_done_callback(_retrieve)
        return await asyncio.shield(task)
    loop = asyncio.get_running_loop()
    # cancelled with the caller, without the task: what the caller awaits
    outcome: asyncio.Future[T] = loop.create_future()
    loop.create_task(_hand_over(call, outcome)).add_done_callback(_retrieve)
    return await outcome


async def _hand_over(call: Coroutine[Any, Any, T], outcome: asyncio.Future[T]) -> None:
    """Run ``call`` and give its outcome to ``outcome``, unless its awaiter was cancelled."""
    import asyncio

    try:
        result = await call
    except asyncio.CancelledError:
        outcome.cancel()  # the task itself was cancelled (the loop is shutting down)
        raise
    except BaseException as error:
        if not outcome.done():
            outcome.set_exception(error)
        raise  # kept by the task too, and retrieved there: never reported as unretrieved
    if not outcome.done():
        outcome.set_result(result)


def current_context() -> Hashable:
    """Who is acting: re-entrancy and ``release()`` are per thread."""
    return threading.get_ident()


def acurrent_context() -> Hashable:
    """Who is acting: re-entrancy and ``release()`` are per task."""
    import asyncio

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
    import asyncio

    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    if cancelling is not None and cancelling():
        raise asyncio.CancelledError


def sleep_real(seconds: float) -> None:
    threading.Event().wait(seconds)


async def asleep_real(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


def current_loop() -> object | None:
    """Sync twin of ``acurrent_loop``: a blocking client belongs to no event loop."""
    return None


def acurrent_loop() -> object | None:
    """The running event loop, or None outside one."""
    import asyncio

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def check_loop(home: object | None) -> None:
    """Sync twin of ``acheck_loop``: threads need no check."""


def acheck_loop(home: object | None) -> None:
    """Raise ``WrongEventLoop`` unless called on ``home``, the loop the client was made on."""
    if home is not None and acurrent_loop() is not home:
        raise WrongEventLoop(
            "this asyncio client was made on another event loop, which renews its leases; "
            "connect anew on this loop"
        )


def _is_coroutine_function(function: Callable[..., object]) -> bool:
    # an object whose class has an "async def __call__" counts too
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        type(function).__call__
    )


def check_synchronizable(function: Callable[..., object]) -> None:
    """``@synchronized`` of the blocking client holds the lock for a plain call only."""
    if _is_coroutine_function(function):
        raise TypeError(
            f"{function!r} is a coroutine function: the blocking client's @synchronized would "
            "release the lock before its body runs; use tumbler.aio's client"
        )
    if inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function):
        raise TypeError(
            f"{function!r} is a generator function: @synchronized would release the lock when "
            "the generator is made, before its body runs; take the lock inside it instead"
        )


def acheck_synchronizable(function: Callable[..., object]) -> None:
    """``@synchronized`` of the asyncio client holds the lock while a coroutine runs."""
    if inspect.isasyncgenfunction(function) or inspect.isgeneratorfunction(function):
        raise TypeError(
            f"{function!r} is a generator function: @synchronized would release the lock when "
            "the generator is made, before its body runs; take the lock inside it instead"
        )
    if not _is_coroutine_function(function):
        raise TypeError(
            f"{function!r} is not a coroutine function: the asyncio client's @synchronized "
            "decorates 'async def' functions; use the blocking client (tumbler.connect) for "
            "plain ones"
        )


#: how long closing a forgotten client may hold up the end of the program
EXIT_GRACE = 2.0


class ExitGuard:
    """Close a client still open when the interpreter exits normally.

    Its holds would otherwise keep their locks for a whole lease after the process is gone.
    The closes run in a daemon thread given ``EXIT_GRACE`` seconds in all: an unreachable
    backend must not hang the exit (the grants then run out by themselves). Only a weak
    reference is kept, so the guard never keeps a client alive.
    """

    def __init__(self, close: Callable[[], object]) -> None:
        self._close = weakref.WeakMethod(close)
        _EXIT_CLOSER.add(self)

    def disarm(self) -> None:
        _EXIT_CLOSER.discard(self)

    def close_client(self) -> None:
        close = self._close()
        if close is None:
            return
        try:
            close()
        except Exception:
            _log.warning("could not close a client left open at exit", exc_info=True)


class _ExitCloser:
    """The one daemon thread that closes the guarded clients at exit.

    It starts with the first guard rather than at exit: from Python 3.12 on, no thread can
    start once the interpreter has begun to exit. A child process made by fork has neither
    the thread nor its parent's clients to close, and starts afresh.
    """

    def __init__(self) -> None:
        self._registered = False
        self._start()

    def _start(self) -> None:
        self._lock = threading.Lock()
        self._guards: weakref.WeakSet[ExitGuard] = weakref.WeakSet()
        self._exiting = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, guard: ExitGuard) -> None:
        with self._lock:
            self._guards.add(guard)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tumbler-exit", daemon=True)
                self._thread.start()
            if not self._registered:
                self._registered = True
                atexit.register(self._at_exit)
                if hasattr(os, "register_at_fork"):
                    os.register_at_fork(after_in_child=self._start)

    def discard(self, guard: ExitGuard) -> None:
        with self._lock:
            self._guards.discard(guard)

    def _run(self) -> None:
        self._exiting.wait()
        with self._lock:
            guards = list(self._guards)
        for guard in guards:
            guard.close_client()
        self._closed.set()

    def _at_exit(self) -> None:
        with self._lock:
            if self._thread is None or not self._guards:
                return
        self._exiting.set()
        self._closed.wait(EXIT_GRACE)


_EXIT_CLOSER = _ExitCloser()


class AsyncExitGuard:
    """Close a client still open when its event loop shuts down (``asyncio.run()`` returns).

    ``asyncio.run()`` cancels the tasks still pending before it closes the loop: a task of the
    guard's own waits for that cancellation and then closes the client on the loop, within
    ``EXIT_GRACE`` seconds. Made outside a running loop, it guards nothing.
    """

    def __init__(self, close: Callable[[], Awaitable[object]]) -> None:
        import asyncio

        self._close = weakref.WeakMethod(close)
        self._armed = True
        self._task: asyncio.Task[None] | None = None
        with contextlib.suppress(RuntimeError):
            self._task = asyncio.get_running_loop().create_task(
                self._watch(), name="tumbler-exit-guard"
            )

    def disarm(self) -> None:
        if not self._armed:
            return  # already closing the client: the close must not cancel itself
        self._armed = False
        task, self._task = self._task, None
        if task is not None:
            with contextlib.suppress(RuntimeError):  # its loop is already closed
                task.cancel()

    async def _watch(self) -> None:
        import asyncio

        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            # the loop is shutting down; the close below must not see this task as cancelled
            uncancel = getattr(asyncio.current_task(), "uncancel", None)
            if uncancel is not None:
                uncancel()
            close = self._close()
            if close is None or not self._armed:
                return
            self._armed = False
            try:
                await asyncio.wait_for(close(), EXIT_GRACE)
            except (Exception, asyncio.CancelledError):
                _log.warning("could not close a client left open at exit", exc_info=True)
