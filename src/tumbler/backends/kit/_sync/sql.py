# Generated from src/tumbler/backends/kit/_async/sql.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""What the SQL backends (PostgreSQL, MySQL) share: the pool of connections for calls, the
decision on a name's line and the writes it plans, whom a release wakes, the listener's and
the watch's common part, a state watcher's watch, and the calls that differ between the two
only in their statements.

Each backend keeps what is its own behind a few seams: how its driver connects, closes and
bounds a call (:class:`AsyncSQLPool`'s ``_open`` ... ``_reusable``), how it reads and writes
one name's line in a transaction (:class:`AsyncLine`), and the statements of each call
(:class:`AsyncSQLBackend`'s ``_grant``, ``_release`` ...). Imported from here: the kit's
package does not import it (a backend that is not on SQL has no use for it).

Whom a change wakes, besides waiters: a client that watches a name's state
(:class:`AsyncSQLStateWatch`) says so in a row of the store's table of watched names (the name,
the client's address for wake-ups, and when the row runs out: :data:`WATCHED_TTL` after the
watcher last set it), written in a transaction that takes the name's turn, as a decision does.
Each statement that changes the name's entries (a grant, a waiter added or withdrawn, a
release, a forced release) looks the name up in that table in its own transaction, after it
took the name's turn: one lookup by the table's key, which finds nothing unless someone
watches; for each live row it leaves the client a wake-up ``* <name>``, delivered with the
commit, which the client's listener turns into ``hub.notify(name, [STATE_TAG])``. Taking turns
makes a watcher's first reading, made once its row is written, see every change committed
before, or be told of it. A row no watcher sets again runs out, and the sweep deletes it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from ...._acompat import sleep_real
from ...._clock import SYSTEM_CLOCK, Clock
from ...._core import Decision, Entry, Write, WritePlan, plan
from ...._logs import logger
from ....errors import (
    BackendUnavailable,
    ConfigurationError,
    OutOfConnections,
    PermissionDenied,
    TumblerError,
)
from ...contract import STATE_TAG, Capabilities, Grant, GrantRequest, LockState, WakeHub
from ..options import line_full
from ..owners import owner_hash
from ..slots import Slots
from ..state import states_of
from ..wake import to_wake
from .listener import Listener
from .watch import BaseWatch, MarkedWatch

__all__ = [
    "WAKE_HEAD",
    "WATCHED_TTL",
    "Line",
    "SQLBackend",
    "SQLListener",
    "SQLPool",
    "SQLStateWatch",
    "SQLWatch",
    "Try",
    "decide",
    "line_entries",
]

#: a driver's connection
C = TypeVar("C")
#: what bounds one call on its connection (a backend's own)
B = TypeVar("B")
#: what a write that grants leaves to read its token from, after the commit
R = TypeVar("R")
T = TypeVar("T")

#: waiters a release reads at the head of a line to find whom it lets through; more (twice as
#: many each time) only while every one read goes through (a run of readers)
WAKE_HEAD = 16

#: how long a client's row saying that it watches a name's state lives unless set again (a
#: watcher sets it again once a third of that has passed): the changes of the name go on
#: leaving it wake-ups for at most this long after its last watcher stopped
WATCHED_TTL = 30.0
#: how often a state watcher whom the store refuses the row (a role that may only read) is
#: woken to read again: as the lock layer polls a backend without state wake-ups
REFUSED_POLL = 0.25

_log = logger("tumbler.sql")

#: how long a client's start may spend making the store's tables, or waiting while another
#: client makes them: a bound of its own, as the URL's bounds are for calls on locks
SET_UP_PATIENCE = 30.0


class _Busy(Exception):
    """Every connection of the pool stayed busy for as long as a call may wait."""


class SQLPool(Generic[C, B]):
    """The client's connections for calls to the store ``label``: at most ``limit`` in use at
    once (the others wait for a place ``wait``: its seconds, and the URL option they come
    from; then ``BackendUnavailable``), idle ones kept for the next call. A connection a call
    left in doubt (an error, a cancellation, a limit run out) is closed rather than reused;
    after a connection failed, the idle ones are dropped too (a restarted server has closed
    them all, and a network that dropped one's replies may have dropped theirs). An idle
    connection the server closed meanwhile is dropped before a call gets it, and so are the
    other idle ones.

    What is the driver's: ``_open``, ``_close``, ``_closed_by_server``, ``_refused_now`` (a
    failed connect a restart explains), ``_lost`` (a failure that may have closed every
    connection), ``_closed_error``; and how a call keeps within its bound: ``bound(connection)``
    (given to :meth:`_using`) arms it, ``_ready`` runs before the call, ``_failed`` after a
    call that raised (and may give the error to raise instead), ``_reusable`` after one that
    returned (whether its connection may serve the next call).
    """

    def __init__(self, url: str, label: str, limit: int, wait: tuple[float, str]) -> None:
        self._url = url
        self._label = label
        self._wait_option = wait[1]
        self._idle: list[C] = []
        self._lock = threading.Lock()
        self._slots = Slots(limit, wait[0], _Busy)
        self._closed = False

    # -- the driver's seams ----------------------------------------------------------------

    def _open(self, deadline: float | None) -> C:
        """A new connection; ``deadline`` (``time.monotonic()``): the call's own, if any."""
        raise NotImplementedError

    def _close(self, connection: C) -> None:
        raise NotImplementedError

    def _closed_by_server(self, connection: C) -> bool:
        """Whether an idle connection has heard the server hang up."""
        raise NotImplementedError

    def _refused_now(self, error: Exception) -> bool:
        """Whether a failed connect says the server refuses connections for the moment (a
        restart), rather than that this client may not connect."""
        raise NotImplementedError

    def _lost(self, error: BaseException) -> bool:
        """Whether a call's failure may have come from the server or the network, which
        would have failed the idle connections too."""
        raise NotImplementedError

    def _closed_error(self) -> Exception:
        """What a call on a closed client raises."""
        raise NotImplementedError

    def _ready(self, connection: C, bound: B) -> None:
        """Make ``connection`` ready for a call with ``bound``."""

    def _failed(self, connection: C, bound: B, error: BaseException) -> BaseException | None:
        """After a call with ``bound`` raised ``error``: the error to raise instead, if any."""
        return None

    def _reusable(self, connection: C, bound: B) -> bool:
        """After a call with ``bound`` returned: whether ``connection`` may serve the next."""
        return True

    # -- connections -----------------------------------------------------------------------

    def _connect(self, until: float, deadline: float | None = None) -> C:
        """A new connection, tried again up to ``until`` (``time.monotonic()``) while the
        server refuses connections for a moment (a restart: shutting down, starting up, not
        listening yet): a connection that failed ran nothing, so trying again is safe, and a
        restart then costs callers a wait rather than an error."""
        pause = 0.02
        while True:
            try:
                return self._open(deadline)
            except Exception as error:
                left = until - time.monotonic()
                if self._closed or left <= 0 or not self._refused_now(error):
                    raise
                sleep_real(min(pause, left))
                pause = min(pause * 2, 0.5)

    @contextlib.contextmanager
    def _using(
        self,
        connect: Callable[[], C],
        bound: Callable[[C], B],
        wait: Callable[[], float] | None = None,
    ) -> Iterator[C]:
        """A connection for one call: an idle one, or ``connect()``'s; ``bound`` arms the
        call's bound on it; ``wait()``: how long the call may wait for a place, if less than
        the pool's."""
        if self._closed:
            raise self._closed_error()
        try:
            slots = self._slots if wait is None else self._slots.within(wait())
            with slots:
                connection = self._idle_connection()
                if connection is None:
                    connection = connect()
                armed = bound(connection)
                try:
                    self._ready(connection, armed)
                    yield connection
                except BaseException as error:
                    instead = self._failed(connection, armed, error)
                    self._close(connection)
                    if self._lost(error):
                        self._drop_idle()
                    if instead is not None:
                        raise instead from error
                    raise
                # reusable first: it ends the call's bound, which must never touch a
                # connection once it is closed
                if not self._reusable(connection, armed) or self._closed:
                    self._close(connection)
                    return
                with self._lock:
                    self._idle.append(connection)
        except _Busy:
            raise BackendUnavailable(
                f"every connection of this client to {self._label} stayed busy for "
                f"{self._wait_option}; the client makes more calls at once than "
                "max_connections (in the URL) allows",
                backend=self._url,
            ) from None

    def run(
        self,
        call: Callable[[C], T],
        *,
        idempotent: bool = False,
        limit: float | None = None,
    ) -> T:
        """``call`` on a connection of the pool (tried again as the backend says);
        ``limit``: how long it may wait for replies, if not as long as the URL's bound."""
        raise NotImplementedError

    def _idle_connection(self) -> C | None:
        """An idle connection the server has not closed, if there is one. One it closed
        (a restart, an administrator's kill, the server's idle timeout) would fail the call
        that used it (also a release, which is not tried again), so it is dropped here, and
        so are the other idle ones (a restart closed them all)."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                connection = self._idle.pop()
            if not self._closed_by_server(connection):
                return connection
            self._close(connection)
            self._drop_idle()

    def _drop_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            self._close(connection)

    def close(self) -> None:
        self._closed = True
        self._drop_idle()


@dataclass(frozen=True)
class Try:
    """One try for a grant, as the decision on its name's line writes it: the request, its
    owner as stored, and what its entry stores if it waits (the backend's waiter terms)."""

    request: GrantRequest
    owner: str
    waiter: dict[str, Any]

    def entry(self) -> dict[str, Any]:
        """What the try's entry stores of its request (the owner as stored; ``lock_delay``:
        what its entry keeps once a grant, in seconds)."""
        request = self.request
        return {
            "name": request.name,
            "owner": self.owner,
            "shared": request.shared,
            "lim": request.limit,
            "fair": request.fair,
            "holder": request.holder,
            "lock_delay": float(request.lock_delay),
        }

    def line_terms(self) -> dict[str, Any]:
        """What the read of the line needs of the try: the part of it the rule looks at
        depends on them."""
        entry = self.entry()
        return {key: entry[key] for key in ("name", "owner", "fair", "shared", "lim")}


class Line(Protocol[R]):
    """One name's line as a backend reads and writes it for :func:`decide`, in one
    transaction, for one :class:`Try`."""

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """The transaction the decision and its write are made in: committed at its end."""
        yield

    def read(self) -> Sequence[Sequence[Any]]:
        """Take the name's turn (its row locked till the commit), drop its entries that ran
        out (keeping lapsed grants for their lock-delay), and read its live line as far as
        the grant rule needs it: rows ``(owner, seq, shared, lim, fair, token, lapsed)``
        (:func:`line_entries`; ``lapsed``: a grant whose lease ran out, kept for its
        lock-delay)."""
        ...

    def take_up(self, token: int) -> R | None:
        """Set the lease of the owner's grant with ``token`` anew, from now, if it is live,
        with the lock-delay asked."""
        ...

    def refresh_waiter(self, seq: int) -> None:
        """Refresh the owner's waiting entry ``seq``."""
        ...

    def grant_waiter(self, seq: int) -> R:
        """Grant the owner's waiting entry ``seq`` (with the lock-delay asked)."""
        ...

    def add_grant(self) -> R:
        """Add the owner's entry, granted (with the lock-delay asked)."""
        ...

    def waiting(self) -> int:
        """How many waiters the name has (up to ``max_waiters``)."""
        ...

    def add_waiter(self) -> None:
        """Add the owner's entry, waiting."""
        ...

    def token(self, written: R) -> int | None:
        """The token of a grant written (None: a grant taken up that ran out meanwhile)."""
        ...


class _Full:
    """A decision that refused a new waiter: the line has ``max_waiters`` already."""


_FULL = _Full()


def line_entries(rows: Sequence[Sequence[Any]]) -> list[Entry]:
    """The entries of a name's line as :meth:`AsyncLine.read` reads them, ``(owner, seq,
    shared, lim, fair, token, lapsed)`` (a store without a boolean type gives its flags as
    numbers)."""
    return [
        Entry(row[0], row[1], bool(row[2]), row[3], bool(row[4]), row[5], bool(row[6]))
        for row in rows
    ]


def decide(line: Line[R], attempt: Try, max_waiters: int, url: str) -> tuple[int, float] | None:
    """Decide ``attempt`` by the grant rule on the name's live ``line``, and write what it
    says, in one transaction: the token and the lease of a grant; None if none;
    ``TooManyWaiters`` for a new waiter behind ``max_waiters`` (nothing written)."""
    request = attempt.request
    with line.transaction():
        rows = line.read()
        decided = plan(
            line_entries(rows),
            attempt.owner,
            request.shared,
            request.limit,
            request.fair,
            request.queue,
        )
        written = _write(line, decided, max_waiters)
    if isinstance(written, _Full):
        raise line_full(max_waiters, request.name, url)
    token = None if written is None else line.token(written)
    return None if token is None else (token, request.ttl)


def _write(line: Line[R], decided: WritePlan, max_waiters: int) -> R | _Full | None:
    if decided.decision is Decision.HELD:
        # granted already, by a release that handed it over or by a try whose reply was
        # lost: taken up, with the lease asked for from now
        assert decided.held_token is not None
        return line.take_up(decided.held_token)
    write = decided.write
    if write is Write.NOTHING:
        return None
    if write is Write.REFRESH_WAITER:
        assert decided.mine is not None
        line.refresh_waiter(decided.mine.seq)
        return None
    if write is Write.GRANT_WAITER:
        assert decided.mine is not None
        return line.grant_waiter(decided.mine.seq)
    if write is Write.ADD_GRANT:
        return line.add_grant()
    if line.waiting() >= max_waiters:
        return _FULL  # nothing written: the transaction commits empty
    line.add_waiter()
    return None


#: the life of a waiter's entry whose client polls: nothing tells a release that such a
#: client died (it holds no listening connection), so its entry running out is what ends it,
#: and a fair line waits that long; each poll (``poll_cap`` apart at most) writes it again, so
#: it keeps its place through a stall of most of a second, and one stalled longer only joins
#: the line again at the back
POLLING_WAITER_TTL = 1.0


def polling(capabilities: Capabilities) -> Capabilities:
    """What a client that polls (``?wakeups=poll``, or behind a transaction pooler) offers:
    no push wake-ups (its waiters poll with back-off, not at ``recheck_interval``), no state
    wake-ups (its watchers poll too), and its waiters' shorter entries."""
    return dataclasses.replace(
        capabilities, push_wakeups=False, state_wakeups=False, waiter_ttl=POLLING_WAITER_TTL
    )


class SQLBackend(Generic[C]):
    """The calls of an SQL backend that differ between stores only in their statements: each
    runs one backend call (``_grant``, ``_take_up``, ``_release`` ...: the seams) on a
    connection of the pool, its driver's errors translated (``_translated``)."""

    pool: SQLPool[C, Any]
    wakeups: SQLListener
    #: grants between two sweeps of what ran out
    sweep_every: int

    def __init__(self, url: str, capabilities: Capabilities, *, listens: bool) -> None:
        self.url = url
        self.capabilities = capabilities if listens else polling(capabilities)
        self.clock: Clock = SYSTEM_CLOCK
        self.hub = WakeHub()
        #: whether the client listens for wake-ups (the URL may ask it to poll)
        self.listens = listens
        #: whether the client has said it watches a name's state: its listener then deletes
        #: its rows of watched names as it stops
        self.watching = False
        self._grants = 0

    # -- the backend's seams ---------------------------------------------------------------

    def _translated(self, name: str | None = None) -> contextlib.AbstractContextManager[None]:
        """Where the driver's errors become tumbler's."""
        raise NotImplementedError

    def _tumbler_error(self, error: Exception, name: str) -> TumblerError | None:
        """The tumbler error for the driver's ``error``; None if it is not the driver's."""
        raise NotImplementedError

    def is_set_up(self, connection: C) -> bool:
        """Whether what the store keeps locks in is all there, as this version makes it;
        raises if the server is one the backend's promises do not hold on."""
        raise NotImplementedError

    def set_up(self, connection: C) -> bool | None:
        """Make what the store keeps locks in; whether this call made it (False: another
        client had made it), or None, at once, while another client is making it. Clients
        racing to make it take turns on a lock that each only tries: a wait for it would be
        cut short by the URL's bounds on a call, which another's set-up may outlast."""
        raise NotImplementedError

    def _grant(
        self, connection: C, request: GrantRequest, owner: str, stamp: int
    ) -> tuple[int, float] | None:
        """Ask for ``request`` (``owner``: as stored; ``stamp``: when the try was sent)."""
        raise NotImplementedError

    def _take_up(
        self, connection: C, name: str, owner: str, token: int, ttl: float, lock_delay: float
    ) -> bool:
        """Take up a grant handed over (see ``AsyncListener.take_handed``), keeping
        ``lock_delay`` from then on (a hand-off grants with none: its waiter had no grant
        to lose before it took it up)."""
        raise NotImplementedError

    def _sweep(self, connection: C) -> None:
        """Delete some of what ran out, that no name's next call deletes."""
        raise NotImplementedError

    def _renew(self, connection: C, name: str, owner: str, ttl: float) -> bool:
        raise NotImplementedError

    def _release(self, connection: C, name: str, owner: str) -> bool:
        """Release (``owner``: as stored), and wake whom that lets through."""
        raise NotImplementedError

    def _force_release(self, connection: C, name: str, note: str) -> int:
        raise NotImplementedError

    def _wake_line(
        self, connection: C, name: str, after: int, count: int
    ) -> Sequence[Sequence[Any]]:
        """The rows of ``to_wake`` for ``name``: its grants too if ``after`` is negative, and
        ``count`` waiters after the seq ``after``."""
        raise NotImplementedError

    def _tell(self, connection: C, name: str, woken: list[tuple[Any, str]]) -> None:
        """Send each of ``woken`` (``(client, owner)``) its wake-up."""
        raise NotImplementedError

    def _read_states(self, connection: C, name: str | None) -> Sequence[Sequence[Any]]:
        """The rows of ``states_of`` for ``name`` (None: every name)."""
        raise NotImplementedError

    def _mark_watched(self, connection: C, name: str, ttl: float) -> None:
        """Write (or set again) the client's row saying that it watches ``name``'s state, for
        ``ttl`` seconds, in a transaction that takes the name's turn (see the module
        docstring)."""
        raise NotImplementedError

    def _read_evicted(self, connection: C, name: str, owner: str) -> Any:
        """The row whose first column is the note of ``owner``'s eviction, if any."""
        raise NotImplementedError

    # -- set-up ----------------------------------------------------------------------------

    def start(self) -> None:
        """Connect, and make what the store keeps locks in if any of it is missing."""
        self.prepare()

    def prepare(self) -> bool:
        """What ``start`` does, and ``tumbler init``: make what the store keeps locks in if
        any of it is missing; whether this call made it."""
        deadline = time.monotonic() + SET_UP_PATIENCE
        pause = 0.01
        with self._translated():
            while not self.pool.run(self.is_set_up, idempotent=True):
                made = self.pool.run(self.set_up, idempotent=True, limit=SET_UP_PATIENCE)
                if made is not None:
                    return made
                if time.monotonic() >= deadline:
                    raise BackendUnavailable(
                        f"another client has been making the tables for {SET_UP_PATIENCE:g} s",
                        backend=self.url,
                    )
                sleep_real(pause)
                pause = min(pause * 2, 0.25)
        return False

    # -- grants ----------------------------------------------------------------------------

    def try_grant(self, request: GrantRequest) -> Grant | None:
        owner = owner_hash(request.owner)
        taken = self.wakeups.take_handed(
            request,
            lambda token: self._take_up_handed(
                request.name, owner, token, request.ttl, request.lock_delay
            ),
        )
        if taken is not None:
            return taken
        # when this try was sent, on this client's clock: a release that hands the lock to
        # this waiter says when its lease began in those terms (kit.handoffs)
        stamp = round(self.clock.now() * 1e6)
        with self._translated(request.name):
            # tried again whole if its connection failed: a retry by the same owner is
            # idempotent
            granted = self.pool.run(
                lambda connection: self._grant(connection, request, owner, stamp),
                idempotent=True,
            )
            self._grants += 1
            if self._grants % self.sweep_every == 0:
                self.pool.run(self._sweep, idempotent=True)
        if granted is None:
            return None
        token, left = granted
        return Grant(request.name, request.owner, token, left)

    def _take_up_handed(
        self, name: str, owner: str, token: int, ttl: float, lock_delay: float
    ) -> bool:
        """Take up the grant with ``token`` a release handed to ``owner`` (its hash): its
        lease set to ``ttl`` from now and its lock-delay to ``lock_delay``, if the owner's
        entry is a live grant with that token (see ``AsyncListener.take_handed``)."""
        with self._translated(name):
            return self.pool.run(
                lambda connection: self._take_up(
                    connection, name, owner, token, ttl, float(lock_delay)
                ),
                idempotent=True,
            )

    def _claims(self, request: GrantRequest) -> bool:
        """Whether ``request``'s entry is to name the client's listener key though the client
        does not listen yet, the connection that writes it holding the key meanwhile: when
        the request would queue and its waiter means to wait (its watch is made: the locks
        make it before the first try, and enter it, which starts listening, only once that
        try failed). Until the listener holds the key too, that connection's hold says the
        client lives: a release takes a waiter whose key nobody holds for one whose client is
        gone, and without a key at all its entry held a fair line up for its whole lease
        when the waiter died in that moment."""
        return bool(
            request.queue
            and self.listens
            and not self.wakeups.subscribed()
            and not self.wakeups.failing()  # a client that cannot listen is not told
            and self.hub.subscribers(request.name)
        )

    def _names_listener(self, claimed: bool) -> bool:
        """Whether a waiter's entry names the client's listener: only once the client
        listens, or the connection that writes the entry holds the key (``claimed``): a
        release takes a waiter whose listener key nobody holds for one whose client is gone,
        and deletes its entry."""
        return self.listens and (claimed or self.wakeups.subscribed())

    # -- leases ----------------------------------------------------------------------------

    def renew(self, name: str, owner: str, ttl: float) -> float | None:
        stored = owner_hash(owner)
        with self._translated(name):
            renewed = self.pool.run(
                lambda connection: self._renew(connection, name, stored, ttl), idempotent=True
            )
        return ttl if renewed else None

    # -- release ---------------------------------------------------------------------------

    def release(self, name: str, owner: str) -> bool:
        # a grant handed over that its waiter gives back without taking it
        self.wakeups.handoffs.forget(name, owner)
        stored = owner_hash(owner)
        with self._translated(name):
            return self.pool.run(lambda connection: self._release(connection, name, stored))

    def _wake(self, connection: C, name: str) -> None:
        """Wake the waiters of ``name`` that the grant rule lets through now (after a commit
        that let them through: a woken waiter tries at once), reading the name's grants and
        the head of its line, and more of the line only while every waiter read goes
        through. A wake-up is a hint: one lost here costs the waiter a re-check."""
        rows: list[Sequence[Any]] = []
        after, count = -1, WAKE_HEAD
        while True:
            read = self._wake_line(connection, name, after, count)
            rows = sorted([*rows, *read], key=lambda row: row[1])
            woken, complete = to_wake(rows)
            waiters = [row for row in read if row[5] is None]
            if complete or len(waiters) < count:
                break
            after, count = waiters[-1][1], count * 2
        self._tell(connection, name, woken)

    def watch(self, name: str, owner: str) -> SQLWatch:
        return SQLWatch(self, name, owner)

    def watch_state(self, name: str) -> SQLStateWatch:
        return SQLStateWatch(self, name)

    def mark_watched(self, name: str) -> None:
        """Say, for :data:`WATCHED_TTL`, that this client watches ``name``'s state: until
        then every change of its entries leaves the client a wake-up."""
        self.watching = True
        with self._translated(name):
            self.pool.run(
                lambda connection: self._mark_watched(connection, name, WATCHED_TTL),
                idempotent=True,
            )

    # -- inspection and operators ----------------------------------------------------------

    def inspect(self, name: str) -> LockState:
        states = self._states(name)
        return states[0] if states else LockState(name=name, holders=(), waiters=0)

    def inspect_all(self) -> list[LockState]:
        return sorted(self._states(None), key=lambda state: state.name)

    def _states(self, name: str | None) -> list[LockState]:
        with self._translated(name):
            rows = self.pool.run(
                lambda connection: self._read_states(connection, name), idempotent=True
            )
        return states_of(rows)

    def force_release(self, name: str, note: str) -> int:
        with self._translated(name):
            return self.pool.run(lambda connection: self._force_release(connection, name, note))

    def evicted(self, name: str, owner: str) -> str | None:
        stored = owner_hash(owner)
        with self._translated(name):
            row = self.pool.run(
                lambda connection: self._read_evicted(connection, name, stored),
                idempotent=True,
            )
        return None if row is None else str(row[0])

    def close(self) -> None:
        self.wakeups.close()
        self.pool.close()


class SQLListener(Listener):
    """The listening connection of an SQL backend's client: ``key``, the client's listener
    key, is what its waiters' entries name and what its listener holds while it listens (a
    release hands the lock only to a waiter whose client's key is held)."""

    _backend: SQLBackend[Any]

    def __init__(
        self,
        backend: SQLBackend[Any],
        *,
        label: str,
        log: logging.Logger,
        patience: float,
    ) -> None:
        super().__init__(
            backend.clock, backend.hub, backend.url, label=label, log=log, patience=patience
        )
        self._backend = backend
        self.key = secrets.randbits(62)

    def _refused(self, failure: Exception, name: str) -> TumblerError | None:
        # what waiting for the next attempt will not mend soon: a server out of connections,
        # refused credentials, a database or schema that is not there
        error = self._backend._tumbler_error(failure, name)
        if isinstance(error, (OutOfConnections, PermissionDenied, ConfigurationError)):
            return error
        return None


class SQLWatch(BaseWatch):
    """A waiter's view of its client's wake-ups.

    Made before the first try, it registers for local wake-ups at once; if the client listens
    already, nothing after that try can be missed and entering costs nothing. Otherwise
    entering starts listening and asks for a retry.
    """

    def __init__(self, backend: SQLBackend[Any], name: str, owner: str) -> None:
        super().__init__(backend.clock, name, backend.hub, owner_hash(owner))
        self._backend = backend
        self._listening = not backend.listens or backend.wakeups.subscribed()

    def _subscribe(self) -> bool:
        if self._listening:
            return False
        self._backend.wakeups.subscribe(self.name)
        return True


class SQLStateWatch(MarkedWatch):
    """A state watcher's watch: woken by the wake-ups ``* <name>`` that the changes of the
    name's entries leave its client while the client's row of watched names lives (see the
    module docstring). Entering writes the row, then makes the client listen; the kit's
    marked watch sets the row again while it waits, so it outlives the watch by at most
    :data:`WATCHED_TTL`. A client that polls (the URL asks it to) is woken only by its
    timeout; one whose role may not write the row, every :data:`REFUSED_POLL` seconds."""

    mark_life = WATCHED_TTL

    def __init__(self, backend: SQLBackend[Any], name: str) -> None:
        super().__init__(backend.clock, name, backend.hub, STATE_TAG)
        self._backend = backend
        self._refused = False

    def _subscribe(self) -> bool:
        if self._backend.listens:
            # The row first: a role that may only read is refused it, and then watches by
            # polling, without a listening connection (which it may not have either). A
            # change between the two is in the lock layer's first reading, made after
            # entering; a change after the listener listens reaches it.
            self._mark()
            if not self._refused:
                self._backend.wakeups.subscribe(self.name)
        # the lock layer reads the state after entering: nothing before it matters
        return False

    def _set_mark(self) -> None:
        try:
            self._backend.mark_watched(self.name)
        except PermissionDenied as error:
            if not self._refused:
                _log.info(
                    "lock %r: this role may not say that it watches (%s): its watcher reads "
                    "every %g s",
                    self.name,
                    error,
                    REFUSED_POLL,
                )
            self._refused = True

    def _marking(self) -> bool:
        return self._backend.listens and not self._refused

    def wait(self, timeout: float) -> None:
        if self._refused:
            timeout = min(timeout, REFUSED_POLL)
        super().wait(timeout)
