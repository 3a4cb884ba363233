"""A client's gate to its backend: who may call it, and which calls are still in flight.

Every backend call of a client, from its lock objects, its holds or its renewal worker, passes
through the client's gate. The gate refuses a call once the client is closing
(``ClientClosed``), in a process forked from the one that made the client (``ForkedClient``)
and, in asyncio, from another event loop (``WrongEventLoop``); and it counts each call while it
runs, so that ``close()`` waits for the calls in flight before it closes the backend's
connections (a driver would otherwise reconnect under a call and leave the new connection
open, and an acquire could be granted a lock that nobody renews).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Hashable

from .._acompat import AsyncEvent, acheck_loop, acurrent_context, acurrent_loop
from .._clock import Clock
from .._logs import logger
from ..backends.contract import AsyncBackend
from ..errors import ClientClosed, ForkedClient, InvalidLockDelay, InvalidTTL, TumblerError

_log = logger("tumbler")

#: how many times the process was forked since this module was loaded, as the child counts:
#: a gate made before a fork finds it changed in the child. Cheaper than asking the kernel
#: for the pid on every call; every fork that goes on running Python code runs this hook
#: (``os.fork``, ``os.forkpty``, multiprocessing's fork, and C code, which must call
#: ``PyOS_AfterFork_Child``).
_forks = 0


def _count_fork() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_count_fork)


class AsyncClientGate:
    """The calls of one client on its backend (see the module docstring)."""

    def __init__(self, backend: AsyncBackend) -> None:
        #: the backend every call goes to
        self.backend = backend
        #: the backend's clock: leases, deadlines and waits are measured on it
        self.clock: Clock = backend.clock
        #: the process that made the client: a forked child's copies of its holds are not held
        self.pid = os.getpid()
        self._forks = _forks
        #: the event loop the client belongs to (asyncio)
        self.loop = acurrent_loop()
        #: guards ``closed`` and the calls in flight, and also the client's books that must
        #: agree with ``closed`` (its live holds, waiter lines and watches)
        self.guard = threading.Lock()
        self._closed = False
        self._min_ttl = backend.capabilities.min_ttl
        #: the calls in flight, by thread (asyncio: task): close() waits for all but its own
        self._calls: dict[Hashable, int] = {}
        self._calls_done = AsyncEvent()

    @property
    def url(self) -> str:
        """The backend's URL, without credentials."""
        return self.backend.url

    @property
    def closed(self) -> bool:
        """True once the client began to close."""
        return self._closed

    @property
    def forked(self) -> bool:
        """True in a process forked from the one that made the client."""
        return _forks != self._forks

    def shut(self) -> bool:
        """Refuse every call from now on; False if the gate was shut already.

        The caller holds ``guard``, so that what it does with its own books in the same
        critical section happens at the same moment for every other caller of the gate.
        """
        if self._closed:
            return False
        if not self.forked:
            acheck_loop(self.loop)
        self._closed = True
        return True

    def check_usable(self, name: str | None) -> None:
        """Raise if a call may not start now (the caller holds ``guard``)."""
        if _forks != self._forks:
            raise ForkedClient(
                "this client was made in a parent process; call connect() again in the child",
                lock_name=name,
                backend=self.url,
            )
        acheck_loop(self.loop)
        if self._closed:
            raise ClientClosed("the client is closed", lock_name=name, backend=self.url)

    def operation(self, name: str | None) -> contextlib.AbstractContextManager[None]:
        """A call on the backend: refused once close() began, which waits for it to end."""
        return _Counted(self, name, refuse_if_closed=True)

    def call(self) -> contextlib.AbstractContextManager[None]:
        """A backend call that must run even after close() began (a release): close() waits."""
        return _Counted(self, None, refuse_if_closed=False)

    def begin(self, context: Hashable) -> None:
        """Count a call of ``context`` (a thread or task) in flight. The caller holds
        ``guard``, in the critical section where it found the gate usable: for a caller that
        has books of its own to keep under the guard, one section instead of two."""
        calls = self._calls
        calls[context] = calls.get(context, 0) + 1

    def end(self, context: Hashable) -> None:
        """A call counted by ``begin`` ended (the caller holds ``guard``)."""
        calls = self._calls
        left = calls[context] - 1
        if left:
            calls[context] = left
        else:
            del calls[context]
        if self._closed:
            self._calls_done.set_threadsafe()  # never blocks: safe under the guard

    async def calls_finished(self) -> None:
        """Wait until no backend call is in flight but the closing thread's/task's own (an
        ``on_lost`` callback may call close() from inside a release)."""
        me = acurrent_context()
        while True:
            with self.guard:
                if all(context == me for context in self._calls):
                    return
                self._calls_done.clear()
            await self._calls_done.wait(None)

    async def release_entry(self, name: str, owner: str) -> bool:
        """``backend.release``, counted in flight: it may run on after its caller was
        cancelled (``ashield``), and close() must wait for it."""
        with self.call():
            return await self.backend.release(name, owner)

    async def eviction_of(self, name: str, owner: str) -> str | None:
        """Why the backend no longer has ``owner``'s grant, if an operator forced it out."""
        try:
            note = await self.backend.evicted(name, owner)
        except TumblerError as error:
            _log.debug("could not ask whether lock %r was force-released: %s", name, error)
            return None
        return None if note is None else f"force-released by {note}"

    def lease(self, ttl: float) -> float:
        """``ttl``, refused if shorter than the backend can keep renewed."""
        if ttl < self._min_ttl:
            raise InvalidTTL(
                f"ttl {ttl:g} s is shorter than the {self._min_ttl:g} s lease this backend "
                "can keep renewed",
                backend=self.url,
            )
        return ttl

    def lock_delay(self, lock_delay: float) -> float:
        """``lock_delay``, refused above 0 on a backend that does not keep lapsed grants."""
        if lock_delay and not self.backend.capabilities.lock_delay:
            raise InvalidLockDelay(
                "this backend does not keep a lock-delay (capabilities.lock_delay)",
                backend=self.url,
            )
        return lock_delay

    def grantable(self, ttl: float) -> float:
        """The lease to ask the backend for ``ttl``: cut to the longest it grants
        (``capabilities.max_ttl``), which it may only learn once connected (a ZooKeeper
        session's negotiated timeout). A backend whose safety rests on that bound (Redlock's
        ``restart_delay``) never sees a longer request; a renewed hold does not notice."""
        longest = self.backend.capabilities.max_ttl
        return ttl if longest is None or ttl <= longest else longest


class _Counted(contextlib.AbstractContextManager[None]):
    """A call counted in flight by a gate (a class, not a generator: every grant and release
    goes through two or three of them)."""

    __slots__ = ("_context", "_gate", "_name", "_refuse_if_closed")

    def __init__(self, gate: AsyncClientGate, name: str | None, *, refuse_if_closed: bool) -> None:
        self._gate = gate
        self._name = name
        self._refuse_if_closed = refuse_if_closed
        self._context: Hashable = None

    def __enter__(self) -> None:
        gate = self._gate
        self._context = context = acurrent_context()
        with gate.guard:
            if self._refuse_if_closed:
                gate.check_usable(self._name)
            else:
                acheck_loop(gate.loop)
            gate.begin(context)

    def __exit__(self, *exc_info: object) -> None:
        gate = self._gate
        with gate.guard:
            gate.end(self._context)
