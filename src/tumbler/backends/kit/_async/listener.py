"""The life of a client's one listening connection, for the backends whose releases reach a
waiting client through a connection of its own (PostgreSQL's ``LISTEN``, MySQL's doorbell).

The connection is made at the first wait (:meth:`AsyncListener.subscribe`) and kept until
:meth:`AsyncListener.close`. When it fails, the reader connects again after a backoff, and
once it listens again wakes every waiter of the client: a wake-up may have been missed
meanwhile. What is the backend's own: how to listen (:meth:`AsyncListener._listen`, which
calls :meth:`AsyncListener._now_listening` once releases can reach the client, and returns
only once the listener is closed) and how to end a listen under way at close
(:meth:`AsyncListener._interrupt`).

What the reader hears it passes to :meth:`AsyncListener.deliver`: a waiter's wake-up, ``<owner
hash> <name>`` (a hand-off's marked ``=<terms>:``, see ``kit.handoffs``), or a wake-up of the
name's state watchers, ``* <name>`` (:data:`STATE_WAKEUP`), which a change of a name's entries
leaves for each client that watches its state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable

from ...._acompat import AsyncEvent, AsyncMutex, AsyncWorker, ajoin, aspawn
from ...._clock import Clock
from ....errors import BackendUnavailable, TumblerError
from ...contract import STATE_TAG, Grant, GrantRequest, WakeHub
from ..handoffs import HandOffs

__all__ = ["STATE_WAKEUP", "AsyncListener"]

#: what a wake-up of a name's state watchers says in place of a waiter's tag (an owner hash,
#: which is hex): ``* <name>``
STATE_WAKEUP = "*"


class AsyncListener:
    """A client's listening connection: ``label`` names the store in thread names and
    logs, ``patience`` is how long a first wait waits for the client to listen."""

    def __init__(
        self,
        clock: Clock,
        hub: WakeHub,
        url: str,
        *,
        label: str,
        log: logging.Logger,
        patience: float,
    ) -> None:
        #: grants releases handed to this client's waiters, until each takes its own
        self.handoffs = HandOffs(clock.now)
        self._hub = hub
        self._url = url
        self._label = label
        self._log = log
        self._patience = patience
        self._reader: AsyncWorker | None = None
        self._lock = threading.Lock()
        self._starting = AsyncMutex()
        self._listening = AsyncEvent()
        #: set when the reader's attempt to listen succeeds or fails, and replaced by a new
        #: one after a failure: a first wait learns at once that the client could not listen
        self._attempt = AsyncEvent()
        self._failure: Exception | None = None
        self._stop = AsyncEvent()
        self._closed = False
        self._failures = 0

    async def take_handed(
        self, request: GrantRequest, take_up: Callable[[int], Awaitable[bool]]
    ) -> Grant | None:
        """The grant a release handed to ``request``'s waiter, taken up; None if none came,
        or if the server shows no such grant (the caller then asks it).

        ``take_up(token)`` is the backend's one write to the owner's own entry: if that is a
        live grant with ``token``, it sets its lease to ``request.ttl`` from now, and says
        whether it did. Until then the grant lives on the waiter's short lease, so that one
        handed to a waiter that died never outlives it by much; and the lease counts from
        this try, which the lock layer times the hold from. A wake-up carries no authority
        (on PostgreSQL any role that may connect can ``NOTIFY`` a waiter's channel, on MySQL
        whoever may write the wake-up table can leave one), whatever token it names: only the
        owner's entry, which only the lock's writers can change, says it holds.
        """
        handed = self.handoffs.grant(request)
        if handed is None:
            return None
        if not await take_up(handed.token):
            self._log.debug("a hand-off of %r the server does not show: asking it", request.name)
            return None
        return Grant(request.name, request.owner, handed.token, request.ttl)

    def deliver(self, message: str) -> None:
        """Act on a wake-up the reader heard: ``* <name>`` wakes the name's state watchers
        (``STATE_TAG``) and no waiter; any other is a waiter's (``HandOffs.deliver``)."""
        tag, _, name = message.partition(" ")
        if tag == STATE_WAKEUP:
            self._hub.notify(name, (STATE_TAG,))
        else:
            self.handoffs.deliver(message, self._hub)

    def subscribed(self) -> bool:
        """Whether a release can reach this client now."""
        return self._listening.is_set()

    def failing(self) -> bool:
        """Whether the last attempt to listen failed (until one succeeds: the client's
        waiters re-check meanwhile)."""
        return self._failures > 0

    async def subscribe(self, name: str) -> None:
        """Return once the client listens (``name``: for errors), waiting through the
        reader's attempts for up to ``patience`` seconds (a server restarting refuses
        connections for a moment). An attempt that fails for a reason no later attempt will
        mend soon (``_refused``: a server out of connections, refused credentials) fails
        this at once, with the backend's error for its cause; past ``patience``, the last
        failure is the cause. The reader keeps trying in the background."""
        async with self._starting:
            self._start_reader()
        deadline = time.monotonic() + self._patience
        while not self._listening.is_set():
            attempt = self._attempt
            left = deadline - time.monotonic()
            settled = left > 0 and await attempt.wait(left)
            if self._listening.is_set():
                return
            failure = self._failure
            if not settled:
                raise BackendUnavailable(
                    "could not listen for wake-ups in time"
                    + ("" if failure is None else f": {failure}"),
                    lock_name=name,
                    backend=self._url,
                ) from failure
            if failure is not None:
                refused = self._refused(failure, name)
                if refused is not None:
                    raise refused from failure

    def _refused(self, failure: Exception, name: str) -> TumblerError | None:
        """The error a wait raises at once for an attempt to listen that failed with
        ``failure``, or None if a later attempt may well succeed (a backend names its
        driver's errors, and which of them last)."""
        return None

    def _start_reader(self) -> None:
        """Start listening in the background, unless it is under way or the listener closed
        (no waiting: for a backend whose waiters need not wait until the client listens)."""
        with self._lock:
            if self._reader is None and not self._closed:
                self._reader = aspawn(self._read, f"tumbler-{self._label.lower()}-wakeups")

    def _now_listening(self) -> None:
        """Called by :meth:`_listen` once releases reach the client."""
        self._listening.set_threadsafe()
        self._attempt.set_threadsafe()
        if self._failures:
            self._hub.notify_all()  # something may have changed unheard
        self._failures = 0

    async def _listen(self) -> None:
        """Connect, listen, and deliver wake-ups until the listener is closed; raise on a
        failure (the connection is the method's to close)."""
        raise NotImplementedError

    async def _interrupt(self) -> None:
        """End a wait for wake-ups under way now rather than at its end (errors are the
        method's to swallow: the reader is stopped anyway)."""

    async def _read(self) -> None:
        while not self._closed:
            try:
                await self._listen()
            except Exception as error:  # the reader must outlive any failure but close()
                self._listening.clear()
                if self._closed:
                    break
                self._failure = error
                failed, self._attempt = self._attempt, AsyncEvent()
                failed.set_threadsafe()
                self._failures += 1
                self._log.warning(
                    "%s wake-up connection failed (waiters re-check): %s", self._label, error
                )
                await self._stop.wait(min(1.0, 0.05 * 2**self._failures))

    async def close(self) -> None:
        with self._lock:
            self._closed = True
            reader, self._reader = self._reader, None
        self._stop.set_threadsafe()
        if reader is None:
            return
        await self._interrupt()
        await ajoin(reader)
