"""The asyncio flavour of a backend whose driver only blocks (SQLite's stdlib module).

Every call runs on one worker thread of the adapter's own (the blocking backend keeps one
connection per thread, so one thread means one connection and no contention between them).
Calls do not simply queue in arrival order, though: with many waiting tasks, the queue is
mostly their polls (``try_grant``), and a renewal or release behind hundreds of polls came too
late (a holder lost its lease to its own client's waiters). So the worker serves two queues:

- **urgent**: ``renew``, ``renew_all`` and ``release``. They go before every poll.
- **normal**: everything else, in arrival order (``evicted`` too: it is asked after a loss,
  when nothing of that owner's is left to protect).

One order is kept across the two: calls about the same ``(name, owner)`` run in the order
they were made. When a task is cancelled while its ``try_grant`` is queued or running, the lock
logic's clean-up ``release`` of that owner must run after it, or the grant the cancelled call
makes would survive. So an urgent call first promotes the queued normal calls of its owner
into the urgent queue, ahead of itself; a call already running finishes before the worker
takes the next (one thread). A queued call whose caller was cancelled is dropped unrun.

Duplicate work is coalesced where that is safe: consecutive queued ``try_grant`` calls run as
one batch (``try_grant_many``, one transaction deciding each in arrival order, exactly as if
they ran back to back), when the backend offers it.

``renew_all`` keeps its bound: the time it spent queued counts against its ``timeout``, the
backend gets only what is left, and the caller gets ``BackendUnavailable`` once ``timeout``
has passed, whatever the worker is doing.

**Inline calls.** A thread hop costs two thread wake-ups and an event-loop wake-up, more
than a short SQLite transaction. A backend that can run a call without waiting for anyone
(:class:`NowaitBackend`: it refuses with :class:`WouldBlock`, having changed nothing, where the
call would have to wait: another connection holds the write lock) gets its calls run on the
event loop itself when that cannot reorder anything:

- the worker has nothing queued or running, so every earlier call has run, and none of it
  could be overtaken (a release queued to the worker, then a grant of the same key inline);
- no other task of this client is polling: its polls keep the worker, or its write lock, busy,
  and the worker's urgent-first order and batching govern then. A ``try_grant`` of the one
  polling task itself may run inline (nobody else's call is about);
- for ``try_grant``, at most ``INLINE_GRANTS`` in one pass of the loop: a burst of tries (many
  tasks starting at once) goes on to the worker, which decides it in batches, instead of
  holding the loop for a transaction each.

A refused call goes to the worker as before. A call on the loop is not cancellable (there is no
await in it): it is done when the caller sees its outcome, and a cancellation that arrives
meanwhile is seen at the caller's next await, where the lock logic withdraws the grant as after
any other cancelled try. A task cancelled while its ``try_grant`` is on the worker withdraws
after it, as above.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from ...errors import BackendUnavailable, TumblerError
from ..contract import STATE_TAG, Backend, Grant, GrantRequest, LockState, Renewal, WakeHub
from ._async.watch import AsyncHubWatch

T = TypeVar("T")

#: most polls decided in one batch: a batch holds the database's write lock, and urgent calls
#: that arrive meanwhile wait for it to end
MAX_BATCH = 64

#: most ``try_grant`` calls run on the event loop in one pass of it (see "Inline calls")
INLINE_GRANTS = 8


class WouldBlock(TumblerError):
    """A backend's :meth:`NowaitBackend.call_nowait` declined the call: it would have had to
    wait (for another connection's write lock, an fsync) and did nothing. The adapter runs
    it on its worker thread instead; never seen by a caller."""


class NowaitBackend(Protocol):
    """What a blocking backend offers for its calls to run on the event loop (optional)."""

    def call_nowait(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` (one of the backend's contract methods) on the calling thread,
        never waiting for another connection or process: ``WouldBlock``, with nothing done,
        where it would have had to. It may decline any call so (to do slow upkeep, such as a
        WAL checkpoint, on the worker)."""
        ...


class _Call:
    """One call waiting for (or on) the worker thread."""

    __slots__ = ("args", "function", "future", "key", "loop")

    def __init__(
        self,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        key: tuple[str, str] | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.function = function
        self.args = args
        self.key = key
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()

    def deliver(self, result: object = None, error: BaseException | None = None) -> None:
        """Hand the outcome to the caller's loop (from the worker thread)."""
        # a closed loop raises RuntimeError: nobody is waiting any more
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(_settle, self.future, result, error)


def _settle(future: asyncio.Future[Any], result: object, error: BaseException | None) -> None:
    if future.done():  # cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class _Worker:
    """The one thread that runs a blocking backend's calls, urgent ones first."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        # the optional batch hook: try_grant for each request in order, in one transaction,
        # a request refused with an error (PermitsMismatch) getting it in its place
        self._try_grant_many: (
            Callable[[Sequence[GrantRequest]], list[Grant | TumblerError | None]] | None
        ) = getattr(backend, "try_grant_many", None)
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._urgent: collections.deque[_Call] = collections.deque()
        self._normal: collections.deque[_Call] = collections.deque()
        #: queued normal calls by (name, owner), for promotion ahead of that owner's urgent call
        self._queued: dict[tuple[str, str], list[_Call]] = {}
        #: calls submitted and not yet finished (queued or running): 0 means every call made
        #: so far has run
        self._pending = 0
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="tumbler-backend", daemon=True)
        self._thread.start()

    def submit(
        self,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        *,
        urgent: bool,
        keys: Sequence[tuple[str, str]] = (),
    ) -> asyncio.Future[Any]:
        call = _Call(
            function, args, keys[0] if len(keys) == 1 else None, asyncio.get_running_loop()
        )
        with self._lock:
            if self._stopping:
                raise BackendUnavailable("the backend is closed", backend=self._backend.url)
            self._pending += 1
            if urgent:
                for key in keys:
                    for earlier in self._queued.pop(key, ()):
                        self._normal.remove(earlier)
                        self._urgent.append(earlier)
                self._urgent.append(call)
            else:
                self._normal.append(call)
                if call.key is not None:
                    self._queued.setdefault(call.key, []).append(call)
            self._ready.notify()
        return call.future

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def idle(self) -> bool:
        """Nothing queued or running: every call submitted so far has run. (Read without the
        lock: only the submitting thread raises the count, so a zero it reads stays zero.)"""
        return self._pending == 0 and not self._stopping

    def stop(self) -> None:
        """End the thread once the calls already queued have run."""
        with self._lock:
            self._stopping = True
            self._ready.notify()

    def _take(self) -> list[_Call]:
        """The next call, or a batch of consecutive polls (the caller holds the lock)."""
        if self._urgent:
            return [self._urgent.popleft()]
        first = self._normal.popleft()
        batch = [first]
        if self._try_grant_many is not None and first.function == self._backend.try_grant:
            while (
                self._normal
                and len(batch) < MAX_BATCH
                and self._normal[0].function == self._backend.try_grant
            ):
                batch.append(self._normal.popleft())
        for call in batch:
            if call.key is not None:
                queued = self._queued.get(call.key)
                if queued is not None:
                    queued.remove(call)
                    if not queued:
                        del self._queued[call.key]
        return batch

    def _run(self) -> None:
        while True:
            with self._lock:
                while not (self._urgent or self._normal or self._stopping):
                    self._ready.wait()
                if not (self._urgent or self._normal):
                    return
                batch = self._take()
            taken = len(batch)
            # a call whose caller was cancelled before it began is not run (its owner's
            # clean-up, if any, is queued behind it and runs as usual)
            batch = [call for call in batch if not call.future.cancelled()]
            if len(batch) > 1:
                outcomes = self._run_batch(batch)
            elif batch:
                outcomes = [self._run_one(batch[0])]
            else:
                outcomes = []
            # the calls have run: counted off before their callers hear of it, so that a
            # caller resumed by the outcome finds the worker idle
            with self._lock:
                self._pending -= taken
            for call, (result, error) in zip(batch, outcomes, strict=True):
                call.deliver(result, error)

    def _run_one(self, call: _Call) -> tuple[object, BaseException | None]:
        try:
            return call.function(*call.args), None
        except BaseException as error:  # handed to the caller, whatever it is
            return None, error

    def _run_batch(self, batch: list[_Call]) -> list[tuple[object, BaseException | None]]:
        assert self._try_grant_many is not None
        try:
            results = self._try_grant_many([call.args[0] for call in batch])
        except BaseException as error:
            return [(None, error)] * len(batch)
        return [
            (None, result) if isinstance(result, TumblerError) else (result, None)
            for result in results
        ]


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
        self._worker = _Worker(backend) if in_thread else None
        self._nowait: Callable[..., Any] | None = (
            getattr(backend, "call_nowait", None) if in_thread else None
        )
        #: (name, owner) of the tasks whose last try_grant left them waiting: they poll
        self._polling: set[tuple[str, str]] = set()
        #: try_grant calls run inline in this pass of the loop (reset by a callback queued
        #: with the first: it runs at the start of the next pass)
        self._inline_grants = 0

    def _inline(
        self, function: Callable[..., T], *args: Any, poller: tuple[str, str] | None = None
    ) -> tuple[bool, T | None]:
        """Run a call on the loop if that reorders nothing and the backend need not wait for
        it: ``(True, result)``; ``(False, None)`` if it must go to the worker. ``poller``: the
        caller's own key, which may be polling (its try_grant)."""
        worker = self._worker
        if self._nowait is None or worker is None or not worker.idle:
            return False, None
        if self._polling and (poller is None or self._polling != {poller}):
            return False, None
        try:
            result: T = self._nowait(function, *args)
        except WouldBlock:
            return False, None
        return True, result

    def _new_pass(self) -> None:
        self._inline_grants = 0

    async def _call(
        self,
        function: Callable[..., T],
        *args: Any,
        urgent: bool = False,
        keys: Sequence[tuple[str, str]] = (),
    ) -> T:
        if self._worker is None:
            return function(*args)
        result: T = await self._worker.submit(function, args, urgent=urgent, keys=keys)
        return result

    async def try_grant(self, request: GrantRequest) -> Grant | None:
        key = (request.name, request.owner)
        done = False
        grant: Grant | None = None
        if self._inline_grants < INLINE_GRANTS:
            done, grant = self._inline(self.backend.try_grant, request, poller=key)
            if done:
                if self._inline_grants == 0:
                    asyncio.get_running_loop().call_soon(self._new_pass)
                self._inline_grants += 1
        if not done:
            grant = await self._call(self.backend.try_grant, request, keys=(key,))
        if grant is None and request.queue:
            self._polling.add(key)
        else:
            self._polling.discard(key)
        return grant

    async def renew(self, name: str, owner: str, ttl: float) -> float | None:
        done, renewed = self._inline(self.backend.renew, name, owner, ttl)
        if done:
            return renewed
        return await self._call(
            self.backend.renew, name, owner, ttl, urgent=True, keys=((name, owner),)
        )

    async def renew_all(self, renewals: Sequence[Renewal], timeout: float) -> list[float | None]:
        if self._worker is None:
            return self.backend.renew_all(renewals, timeout)
        started = time.monotonic()
        done, renewed = self._inline(self.backend.renew_all, renewals, timeout)
        if done:
            assert renewed is not None
            return renewed

        def bounded() -> list[float | None]:
            # the time spent queued counts against the caller's bound
            left = timeout - (time.monotonic() - started)
            if left <= 0:
                raise BackendUnavailable(
                    f"the renewals waited more than {timeout:.3g} s for the backend's thread",
                    backend=self.url,
                )
            return self.backend.renew_all(renewals, left)

        future = self._worker.submit(
            bounded, (), urgent=True, keys=[(r.name, r.owner) for r in renewals]
        )
        try:
            # asyncio.wait, not wait_for: it neither cancels the call nor (before 3.12) can
            # swallow a cancellation of the caller
            await asyncio.wait({future}, timeout=max(timeout, 0.0))
        except BaseException:
            future.cancel()
            raise
        if not future.done():
            future.cancel()  # dropped if it has not begun; its result is ignored if it has
            raise BackendUnavailable(
                f"the renewals did not finish within {timeout:.3g} s", backend=self.url
            )
        result: list[float | None] = future.result()
        return result

    async def release(self, name: str, owner: str) -> bool:
        # a release ends a poll (the waiter withdraws) as well as a hold
        self._polling.discard((name, owner))
        done, released = self._inline(self.backend.release, name, owner)
        if done:
            return bool(released)
        return await self._call(
            self.backend.release, name, owner, urgent=True, keys=((name, owner),)
        )

    def watch(self, name: str, owner: str) -> AsyncHubWatch:
        return AsyncHubWatch(self.clock, name, self._hub)

    def watch_state(self, name: str) -> AsyncHubWatch:
        """For a blocking backend with ``state_wakeups``, whose hub is this one's."""
        return AsyncHubWatch(self.clock, name, self._hub, STATE_TAG)

    async def inspect(self, name: str) -> LockState:
        return await self._call(self.backend.inspect, name)

    async def inspect_all(self) -> list[LockState]:
        return await self._call(self.backend.inspect_all)

    async def force_release(self, name: str, note: str) -> int:
        return await self._call(self.backend.force_release, name, note)

    async def evicted(self, name: str, owner: str) -> str | None:
        return await self._call(self.backend.evicted, name, owner)

    async def close(self) -> None:
        if self._worker is None:
            self.backend.close()
            return
        if self._worker.stopping:
            return  # closed already
        try:
            await self._call(self.backend.close)
        finally:
            self._worker.stop()
