"""The backend contract: what a backend must do so that every tumbler lock works on it.

tumbler's lock objects (``tumbler/_async/``: the client, the primitives, the hold) hold all
the logic that is the same for every backend: re-entrancy, per-thread/task ownership, acquire
timeouts and backoff, renewal scheduling, lost-hold detection, fencing bookkeeping, errors.
A backend only stores *entries* (grants and waiters) for lock names and decides grants
atomically. Each backend module provides two classes with the same method names, one per flavour:

- ``Backend`` (blocking) and ``AsyncBackend`` (asyncio), the Protocols below;
- a module-level ``open_sync(url, **options) -> Backend`` and a coroutine function
  ``open_async(url, **options) -> AsyncBackend``, found by URL scheme (see
  ``tumbler.backends``). ``url`` is a parsed :class:`BackendURL` (exported here: its
  ``scheme``, ``hosts``, ``username``, ``password``, ``path``, ``option()`` and ``redacted``);
  the options are the keyword arguments given to ``connect()``; unknown ones are refused
  before the call.

A backend that only has a blocking driver (SQLite's stdlib module) gets its asyncio flavour
from ``tumbler.backends.kit.AsyncAdapter``; one with both (redis-py, psycopg) implements
``AsyncBackend`` natively, and should generate the blocking twin from it.

What every backend must guarantee
---------------------------------

Grant (``try_grant``)
    Atomic: decide and record in one step (a Lua script, one SQL transaction, one ZooKeeper
    create plus a read of the siblings) so that two clients can never both be granted an
    exclusive entry. **Idempotent by owner**: the owner id is fresh for every acquisition,
    and a retry with the same request (after a lost reply) returns the grant already made, or
    keeps the same place in line; it never creates a second entry. Expired entries are ignored
    (and may be removed). The grant rule is ``tumbler.backends.kit.decide``: backends that
    decide in Python call it (or ``kit.plan``, which also says what to write); those that
    decide on the server (Redis Lua) must implement the same rule, and the conformance suite
    holds them to it. A request that is not granted leaves a *waiter* entry (unless
    ``request.queue`` is False) with a short lease (``capabilities.waiter_ttl``), refreshed
    by each retry, so that fair requests queue in
    arrival order and ``inspect`` can count waiters; a waiter that vanishes drops out when
    that lease runs out.

Fencing tokens
    Every grant gets an int strictly greater than every token ever granted before for that
    name, by any client, also after the name's entries were all removed. A global counter
    satisfies this. ``capabilities.durable_fencing`` says whether this survives a backend
    crash and restart.

Leases (``renew``, ``renew_all``)
    ``renew`` sets a grant's lease to ``ttl`` from now and returns the TTL granted (a backend
    may clamp it), or None if the owner has no live grant. It **never revives** an expired or
    removed grant, even if nobody else has taken the lock. ``renew_all`` does the same for many
    grants at once, in as few round trips as the store allows (one script call, one
    transaction, one session check): the client's renewal worker renews every hold that is due
    with one call. It returns or raises ``BackendUnavailable`` within about ``timeout``
    seconds, whatever the network does: a renewal that outlived the leases it renews would
    keep the worker from every other hold. ``capabilities.min_ttl`` is the shortest lease the
    backend can keep renewed; shorter ones are refused before any call.

Release (``release``)
    Compare-and-delete: removes the owner's entry (grant or waiter) and nobody else's, wakes
    waiters, and returns True only if a live grant was removed. Releasing an unknown owner is
    not an error (it is how a cancelled or timed-out waiter withdraws).

Lock-delay (``request.lock_delay``, where ``capabilities.lock_delay``)
    A grant made with a ``lock_delay`` above 0 that ends other than by a release (its lease
    ran out; where grants live with a session or a lease of the client's, that ended) stays
    as a *lapsed grant* for ``lock_delay`` seconds after it ended: every decision counts it
    as the grant it was (an exclusive one refuses every request, a shared one keeps its
    permit), its owner included; ``renew`` does not revive it (None); ``release`` leaves it
    (False); ``inspect`` reports it in ``LockState.lapsed``, with the delay left as its
    ``expires_in``; ``force_release`` removes it with the grants (an operator's word ends the
    delay) without counting it. A release of a live grant ends it with no delay. So a holder
    that died, paused or was cut off has its writes in flight land before the next holder
    starts, as Chubby's lock-delay does. A backend without the capability is never asked
    for one: the lock layer refuses the request first.

    ``lapse(name, owner)`` (optional: :class:`Lapsing`, for backends whose grants live with
    the client's session) ends the owner's grant as lost: removes its live entry and keeps
    it lapsed for its ``lock_delay`` from now. The lock layer calls it, where a backend has
    it and ``capabilities.session_liveness``, for a hold with a lock-delay that it gives up
    (its lease ran out on the client), instead of the ``release`` that would end the grant
    with no delay; a backend without it has the grant released.

Waking waiters (``watch``)
    The lock logic makes ``watch = backend.watch(name, owner)`` before its first try:
    construction does no I/O but must catch every wake-up the backend delivers from then on.
    Only if that try fails does it enter ``with watch`` (``async with`` in asyncio), which may
    subscribe on the server; ``watch.retry_needed``, read after entering, says whether a change
    between construction and entry could have been missed (the subscription is new), and then
    the lock is tried again before waiting. ``watch.wait(timeout)`` returns when the lock may
    have changed or ``timeout`` seconds passed on the backend's clock; ``watch.wake()``, from
    any thread, makes the current wait (or the next, if none is under way) return at once:
    closing the client ends its waits so. ``watch.close()`` (also when never entered) ends
    the watch, and may be called again. A
    backend with push wake-ups (``capabilities.push_wakeups``) wakes waiters from the server;
    the others return after the timeout and the lock logic polls with jittered backoff. A
    wake-up is a hint, never a grant: the caller always tries again. A backend may wake only
    the waiters a release lets through (by ``owner``), rather than every waiter (a herd).

Losing the server
    Driver errors are converted at the edge: an unreachable or timed-out server raises
    ``BackendUnavailable`` (never a hang past the operation's bound); refused access raises
    ``PermissionDenied``. A ``renew`` that raises ``BackendUnavailable`` is retried by the lock
    logic until the client's local deadline, then the hold is reported lost.

Watching a name's state (``watch_state``, optional)
    A backend that declares ``capabilities.state_wakeups`` also has ``watch_state(name)``:
    a :class:`Watch` (made and entered as a waiter's is) woken at every change of the name's
    entries that the backend makes or learns of: a grant, a release, a waiter arriving or
    leaving, a forced release, and an expiry where the store itself removes what ran out (a
    ZooKeeper session, an etcd lease). It wakes the name's state watchers only (a waiter is
    not woken by a grant to someone else). The lock layer reads ``inspect`` after each
    wake-up, times its next read by the holders' leases where the store is silent about an
    expiry, and polls every ``recheck_interval`` anyway; without the capability it polls.

Inspection and operators
    ``inspect(name)`` and ``inspect_all()`` read without changing anything; ``force_release``
    removes every grant of a name (their holders learn at their next renewal) and returns how
    many live grants it removed (expired ones do not count). It leaves ``note`` (who forced
    it, from where, when and why: written by the lock logic) for each owner it evicted, where
    ``evicted(name, owner)`` finds it, for at least as long as that grant's lease had left
    (so that the holder's next renewal or release can tell a forced release from an expiry);
    ``evicted`` returns None for an owner no forced release removed.

Session-based backends (ZooKeeper, SQL connections) map their session onto the lease: a
grant lives as long as the session, ``renew`` confirms the session is alive, and a lost
session is reported as ``None`` from ``renew``. A lease cannot outlast the session's timeout,
so such a backend grants at most that (``capabilities.max_ttl``). Its ``session_events``
(``SessionEvents``) report a dropped connection at once, so holds are in doubt from that
moment rather than from the next renewal, and an expired session, so they are lost at once.
When the lock logic gives a hold up because its lease ran out on the client, it releases the
grant: a session-based backend would otherwise keep it for as long as the session lives.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import NamedTuple, Protocol

from .._clock import Clock, SystemClock
from .._url import BackendURL


class GrantRequest(NamedTuple):
    """What a client asks for: a grant of ``name`` for ``owner``.

    ``shared`` entries coexist with other shared entries, up to ``limit`` of them (0: no limit);
    an exclusive entry (``shared=False``, ``limit=1``) coexists with nothing. A mutex and the
    write side of a read/write lock are exclusive; the read side is shared with no limit; a
    semaphore of N permits is shared with limit N. ``holder`` describes the client for operators
    (host and pid); it is never used for ownership.
    """

    name: str
    owner: str
    shared: bool
    limit: int
    fair: bool
    ttl: float
    holder: str
    #: if not granted, leave a waiter entry (False for a single try, which never waits)
    queue: bool = True
    #: seconds the name stays closed to everyone after this grant ends other than by a
    #: release (see "Lock-delay"); 0: none. Above 0 only where ``capabilities.lock_delay``.
    lock_delay: float = 0.0
    #: the lock layer renews the grant's lease while it is held, the first renewal at a third
    #: of the lease granted (``RENEW_FRACTION``), each asking for ``ttl``. Then a backend may
    #: grant a shorter lease than ``ttl``, for the first renewal to extend: Redis does for a
    #: grant that a release hands straight to a waiter, which may have died unseen, so that
    #: such a grant lasts a second unless its waiter shows it lives. False (the default: a
    #: caller that says nothing may never renew): grant ``ttl``, up to ``max_ttl``, as a
    #: backend that ignores this field does.
    renewed: bool = False


class Renewal(NamedTuple):
    """One lease to renew: ``owner``'s grant of ``name``, for ``ttl`` seconds from now."""

    name: str
    owner: str
    ttl: float


class Grant(NamedTuple):
    """A grant made by the backend: the fencing ``token`` and the lease it ``granted_ttl``."""

    name: str
    owner: str
    token: int
    granted_ttl: float


@dataclass(frozen=True)
class HolderInfo:
    """One grant as ``inspect`` reports it (for operators: no owner id is exposed)."""

    token: int
    shared: bool
    #: seconds left on the lease; for a grant that lives with its holder's session
    #: (``session``), the session timeout instead: how long the grant outlives a dead holder
    expires_in: float
    holder: str
    #: the grant lives as long as its holder's session (ZooKeeper), not a lease that counts down
    session: bool = False


@dataclass(frozen=True)
class LockState:
    """A read-only picture of one lock name."""

    name: str
    holders: tuple[HolderInfo, ...]
    waiters: int
    #: permits of a semaphore (0 for read locks) while shared holders or waiters exist
    limit: int | None = None
    #: entries of the name the backend cannot read (written by hand, by another program, by
    #: a bug: a lease past any the backend grants, a token that is no number): every decision
    #: skips them, the name's next grant, release or force release removes them
    malformed: int = 0
    #: grants that ended other than by a release and still close the name for their
    #: lock-delay, each with the delay left as its ``expires_in`` (see "Lock-delay")
    lapsed: tuple[HolderInfo, ...] = ()

    @property
    def locked(self) -> bool:
        return bool(self.holders)

    def same_entries(self, other: LockState) -> bool:
        """Whether ``other`` reads the same entries: the same grants (by token, kind and
        holder), waiters, permits and malformed entries; the time left on leases aside."""
        return _entries_of(self) == _entries_of(other)


def _entries_of(state: LockState) -> tuple[object, ...]:
    grants = sorted((h.token, h.shared, h.holder, h.session) for h in state.holders)
    lapsed = sorted(h.token for h in state.lapsed)
    return (state.name, grants, lapsed, state.waiters, state.limit, state.malformed)


@dataclass(frozen=True)
class Leader:
    """The leader of an election, as read from its lock: the ``value`` it campaigned with,
    and its ``term`` (the fencing token of its grant: greater for every later leader)."""

    value: str
    term: int

    @classmethod
    def of(cls, state: LockState) -> Leader | None:
        """The leader ``state`` shows: its exclusive holder, or None."""
        holders = [holder for holder in state.holders if not holder.shared]
        if len(holders) != 1:
            return None
        return cls(holders[0].holder, holders[0].token)


@dataclass(frozen=True)
class Capabilities:
    """What a backend can promise; the lock logic and the tests adapt to it."""

    #: waiters are woken by the backend on release (no polling)
    push_wakeups: bool
    #: fencing tokens keep increasing across a crash and restart of the backend
    durable_fencing: bool
    #: leases are timed on the backend's clock, not the client's
    server_clock: bool
    #: holds live as long as a session/connection, not only a TTL
    session_liveness: bool = False
    #: the lease of a waiter entry: a vanished waiter stops blocking fair waiters after this
    waiter_ttl: float = 5.0
    #: how often a push-woken waiter re-checks anyway, in case a wake-up message was lost
    recheck_interval: float = 1.0
    #: poll backoff for backends without push wake-ups: first and longest wait
    poll_base: float = 0.002
    poll_cap: float = 0.05
    #: the longest lease it grants (ZooKeeper: the session timeout); longer ones are cut to it
    max_ttl: float | None = None
    #: the shortest lease it can keep renewed: a shorter ttl is refused with ``InvalidTTL``
    min_ttl: float = 0.5
    #: who the locks exclude: ``"process"`` (threads and tasks of one process only),
    #: ``"host"`` (processes of one machine) or ``"network"`` (processes on any machine)
    scope: str = "network"
    #: ``watch_state`` is woken by the backend at every change of a name's entries (see
    #: "Watching a name's state"); without it a state watcher polls
    state_wakeups: bool = False
    #: it keeps a lapsed grant for its ``lock_delay`` (see "Lock-delay"); without it the lock
    #: layer refuses a lock-delay
    lock_delay: bool = False
    #: a lock's line is bounded: the URL option ``max_waiters`` (default 10,000) is the most
    #: waiters one lock queues, and an acquire that would queue behind that many gets
    #: ``TooManyWaiters`` and leaves nothing behind (a try that does not wait still answers)
    line_cap: bool = False


class WakeHub:
    """Per-name wake-up callbacks: how a backend's wake-ups reach local waiters.

    A backend calls ``notify(name)`` when it learns a lock may have changed (a release it made
    itself, a pub/sub message, a ZooKeeper watch), or ``notify(name, tags)`` to wake only the
    waiters subscribed with one of ``tags`` (the backend's name for a waiter, e.g. a hash of
    its owner id). Thread-safe; callbacks must not block.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: dict[str, list[tuple[str | None, Callable[[], None]]]] = {}

    def subscribe(self, name: str, callback: Callable[[], None], tag: str | None = None) -> None:
        with self._lock:
            self._subscribers.setdefault(name, []).append((tag, callback))

    def unsubscribe(self, name: str, callback: Callable[[], None]) -> None:
        with self._lock:
            subscribers = self._subscribers.get(name)
            if subscribers is None:
                return
            kept = [entry for entry in subscribers if entry[1] != callback]
            if kept:
                self._subscribers[name] = kept
            else:
                del self._subscribers[name]

    def subscribers(self, name: str) -> int:
        """How many callbacks are subscribed for ``name``: what a closed watch must leave
        behind is none of its own."""
        with self._lock:
            return len(self._subscribers.get(name, ()))

    def notify(self, name: str, tags: Collection[str] | None = None) -> None:
        with self._lock:
            subscribers = list(self._subscribers.get(name, ()))
        for tag, callback in subscribers:
            if tags is None or tag in tags:
                callback()

    def notify_all(self) -> None:
        """Wake every waiter of every name (the connection came back: anything may have changed)."""
        with self._lock:
            subscribers = [entry for entries in self._subscribers.values() for entry in entries]
        for _tag, callback in subscribers:
            callback()


class SessionEvents:
    """How a session-based backend tells the lock logic that its session is in trouble.

    ``SUSPENDED``: the connection dropped; holds may be lost and are *in doubt* until a renewal
    confirms them. ``RECONNECTED``: the same session is back; holds should be confirmed now.
    ``EXPIRED``: the session ended; every hold made in it is lost. Callbacks run on the
    backend's own thread and must not block. Thread-safe.
    """

    SUSPENDED = "suspended"
    RECONNECTED = "reconnected"
    EXPIRED = "expired"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[str], None]] = []

    def subscribe(self, callback: Callable[[str], None]) -> None:
        with self._lock:
            self._callbacks.append(callback)

    def unsubscribe(self, callback: Callable[[str], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def notify(self, event: str) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback(event)


class Watch(Protocol):
    """A subscription to changes of one lock name (blocking flavour); see "Waking waiters"
    in the module docstring for the handshake. :class:`tumbler.backends.kit.HubWatch` is a
    complete one, :class:`tumbler.backends.kit.BaseWatch` the base to fill in."""

    #: read after ``__enter__``: True if a change between construction and entry may have
    #: been missed (the subscription is new), so the caller tries the lock again before waiting
    retry_needed: bool

    def wait(self, timeout: float) -> None:
        """Return when the lock may have changed (a wake-up for this name or this owner, or
        ``wake()``), or when ``timeout`` seconds have passed on the backend's clock, whichever
        is first. A wake-up that arrived since construction or since the last ``wait``
        returned makes it return at once: none is lost between two waits. Returning says
        nothing about the lock: the caller tries again."""
        ...

    def wake(self) -> None:
        """Make the ``wait`` under way return now, or the next one if none is; callable from
        any thread (the client's ``close()`` ends its waits so), never blocks, no I/O."""
        ...

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Also call ``listener`` at every wake-up of this watch from now until ``close()``
        (the wake-ups that make ``wait`` return, ``wake()`` included): from any thread, and
        it must not block. How a caller waits on several watches at once (a segmented lock
        waits for whichever of its segments frees first)."""
        ...

    def close(self) -> None:
        """End the watch and drop its subscriptions, on the server and in the backend's
        :class:`WakeHub`; also for a watch never entered. Idempotent."""
        ...

    def __enter__(self) -> Watch:
        """Subscribe (on the server if the backend must) and set ``retry_needed``; may do I/O
        and raise ``BackendUnavailable``."""
        ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """``close()``."""
        ...


class AsyncWatch(Protocol):
    """A subscription to changes of one lock name (asyncio flavour): :class:`Watch` with an
    awaitable ``wait`` and ``async with``; ``wake()`` and ``close()`` stay plain calls, so
    that another thread or a callback can end a wait."""

    retry_needed: bool

    async def wait(self, timeout: float) -> None:
        """As :meth:`Watch.wait`; cancelling it leaves the watch usable."""
        ...

    def wake(self) -> None:
        """As :meth:`Watch.wake`: from any thread, also from outside the event loop."""
        ...

    def add_listener(self, listener: Callable[[], None]) -> None:
        """As :meth:`Watch.add_listener`: called from any thread, also from outside the event
        loop."""
        ...

    def close(self) -> None:
        """As :meth:`Watch.close`."""
        ...

    async def __aenter__(self) -> AsyncWatch:
        """As :meth:`Watch.__enter__`."""
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """``close()``."""
        ...


#: the tag a backend wakes a name's state watchers by (``WakeHub.notify(name, (STATE_TAG,))``,
#: or an untagged ``notify(name)``, which also reaches them): a grant or a waiter's arrival
#: concerns no waiter, so they are not woken by it
STATE_TAG = "\x00state"


class Backend(Protocol):
    """The blocking backend contract (the module docstring has the guarantees at length).

    Every method may raise ``BackendUnavailable`` (the server cannot be reached in time) or
    ``PermissionDenied`` (it refused this client); none raises a driver's own exception, and
    none blocks past the bound of the client's configured timeouts. Methods are called from
    any thread, concurrently: a backend serialises what its driver cannot share.
    """

    #: the URL with credentials removed, for messages and reprs
    url: str
    capabilities: Capabilities
    #: the clock the backend's leases follow as seen by this client
    clock: Clock

    @property
    def session_events(self) -> SessionEvents | None:
        """Session trouble reports (session-based backends), or None. Read only: a backend
        may keep them in an attribute typed without the None."""
        ...

    def try_grant(self, request: GrantRequest) -> Grant | None:
        """Decide ``request`` by the grant rule (``kit.decide``) and record the outcome, in one
        atomic step: return the new :class:`Grant` (a fencing token above every token ever
        granted for the name, and the lease actually granted, at most ``max_ttl``), or None
        when not granted, having left or refreshed the owner's waiter entry (lease
        ``capabilities.waiter_ttl``) unless ``request.queue`` is False.

        Idempotent by owner: asked again for an owner that holds a live grant, it returns
        that grant (same token) and writes nothing new; for an owner waiting, it refreshes the
        same waiter entry, which keeps its place in line. It never makes a second entry for an
        owner. Raises ``PermitsMismatch`` (writing nothing) when a shared request's ``limit``
        differs from that of the name's live shared entries."""
        ...

    def renew(self, name: str, owner: str, ttl: float) -> float | None:
        """Set ``owner``'s live grant of ``name`` to expire ``ttl`` seconds from now and return
        the lease granted (clamped to ``max_ttl``); None if the owner has no live grant: its
        lease ran out, it was released or forced out, or its session ended. Never revives an
        expired or removed grant, even when nobody else has taken the lock."""
        ...

    def renew_all(self, renewals: Sequence[Renewal], timeout: float) -> list[float | None]:
        """``renew`` for each of ``renewals``, results in the same order, in as few round trips
        as the store allows; returns, or raises ``BackendUnavailable``, within about
        ``timeout`` seconds whatever the network does. A result of None loses that hold only;
        an error says nothing about any of them (the caller retries until its own deadline)."""
        ...

    def release(self, name: str, owner: str) -> bool:
        """Remove ``owner``'s entry of ``name`` (its grant or its waiter entry) and nobody
        else's, and wake the waiters that may now go. True only if a live grant was removed;
        False for an expired grant, a waiter, an owner with no entry (how a waiter withdraws:
        not an error), and a second release. The lock layer releases through the client that
        made the entry; a session-based backend may see only its own session's entries."""
        ...

    def watch(self, name: str, owner: str) -> Watch:
        """A :class:`Watch` on ``name`` for ``owner``'s waiter, made without I/O, that catches
        every wake-up delivered from this call on."""
        ...

    def inspect(self, name: str) -> LockState:
        """The live grants and the count of live waiters of ``name``, read without changing
        anything; expired entries are not reported. An unknown name is a free lock."""
        ...

    def inspect_all(self) -> list[LockState]:
        """``inspect`` of every name with at least one live grant, waiter or lapsed grant,
        sorted by name."""
        ...

    def force_release(self, name: str, note: str) -> int:
        """Remove every grant of ``name`` (waiters stay) and wake the waiters; leave ``note``
        for each owner removed, kept for at least as long as that grant's lease had left.
        Returns how many live grants it removed; their holders learn at their next renewal,
        and ``evicted`` tells them why."""
        ...

    def evicted(self, name: str, owner: str) -> str | None:
        """The ``note`` a ``force_release`` left for ``owner``'s grant of ``name``, or None if
        none did (the grant expired, or the note has run out)."""
        ...

    def close(self) -> None:
        """Release the connections, threads and files the backend opened, ending any waits
        under way. Does not release grants (the lock layer does that first). Idempotent."""
        ...


class Lapsing(Protocol):
    """What a session-based backend with ``capabilities.lock_delay`` may have besides
    :class:`Backend` (see "Lock-delay")."""

    def lapse(self, name: str, owner: str) -> None:
        """End ``owner``'s grant of ``name`` as lost: remove its live entry and keep it lapsed
        for its ``lock_delay`` from now (a release if it was granted with none). Nothing if
        the owner has no live grant."""
        ...


class AsyncLapsing(Protocol):
    """As :class:`Lapsing`, for :class:`AsyncBackend`."""

    async def lapse(self, name: str, owner: str) -> None:
        """As :meth:`Lapsing.lapse`."""
        ...


class StateWatching(Protocol):
    """What a backend with ``capabilities.state_wakeups`` has besides :class:`Backend`."""

    def watch_state(self, name: str) -> Watch:
        """A :class:`Watch` on ``name``, made without I/O, that catches every change of its
        entries the backend delivers from this call on (see "Watching a name's state")."""
        ...


class AsyncStateWatching(Protocol):
    """What an asyncio backend with ``capabilities.state_wakeups`` has besides
    :class:`AsyncBackend`."""

    def watch_state(self, name: str) -> AsyncWatch:
        """As :meth:`StateWatching.watch_state`, returning an :class:`AsyncWatch`."""
        ...


class AsyncBackend(Protocol):
    """The asyncio backend contract: :class:`Backend` with awaitable I/O, the same names and
    the same guarantees; ``watch`` stays a plain call (it does no I/O). Cancelling a call
    leaves the store as one of the two outcomes (done or not done), never a half-written one:
    the lock layer retries or withdraws by owner."""

    url: str
    capabilities: Capabilities
    clock: Clock

    @property
    def session_events(self) -> SessionEvents | None:
        """As :attr:`Backend.session_events`."""
        ...

    async def try_grant(self, request: GrantRequest) -> Grant | None:
        """As :meth:`Backend.try_grant`."""
        ...

    async def renew(self, name: str, owner: str, ttl: float) -> float | None:
        """As :meth:`Backend.renew`."""
        ...

    async def renew_all(self, renewals: Sequence[Renewal], timeout: float) -> list[float | None]:
        """As :meth:`Backend.renew_all`."""
        ...

    async def release(self, name: str, owner: str) -> bool:
        """As :meth:`Backend.release`."""
        ...

    def watch(self, name: str, owner: str) -> AsyncWatch:
        """As :meth:`Backend.watch`, returning an :class:`AsyncWatch`."""
        ...

    async def inspect(self, name: str) -> LockState:
        """As :meth:`Backend.inspect`."""
        ...

    async def inspect_all(self) -> list[LockState]:
        """As :meth:`Backend.inspect_all`."""
        ...

    async def force_release(self, name: str, note: str) -> int:
        """As :meth:`Backend.force_release`."""
        ...

    async def evicted(self, name: str, owner: str) -> str | None:
        """As :meth:`Backend.evicted`."""
        ...

    async def close(self) -> None:
        """As :meth:`Backend.close`."""
        ...


__all__ = [
    "STATE_TAG",
    "AsyncBackend",
    "AsyncLapsing",
    "AsyncStateWatching",
    "AsyncWatch",
    "Backend",
    "BackendURL",
    "Capabilities",
    "Clock",
    "Grant",
    "GrantRequest",
    "HolderInfo",
    "Lapsing",
    "Leader",
    "LockState",
    "Renewal",
    "SessionEvents",
    "StateWatching",
    "SystemClock",
    "WakeHub",
    "Watch",
]
