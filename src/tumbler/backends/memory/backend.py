"""``memory://``: an in-process backend with the same semantics, for unit tests.

URL grammar::

    memory://[STORE][?max_waiters=N]

Option: ``max_waiters`` (default 10000: the most waiters one lock queues; one more acquire of
this client that would wait gets ``TooManyWaiters``, and leaves nothing behind).

Clients in one process that name the same ``STORE`` (the empty name included) share its locks,
so a test can play several clients; a store lives while any client of it is open. Nothing is
shared between processes and nothing survives the process.

Give it a ``tumbler.testing.ManualClock`` (``connect("memory://", clock=clock)``) to make
leases, timeouts and renewals follow a clock the test moves: expiry and lost-hold behaviour can
then be tested without sleeping. All clients of a store must use the same clock.

Guarantees: the same grant rule, fencing tokens, leases and wake-ups as every backend, decided
under one in-process lock. Waiters are woken directly on release (push wake-ups). Locks exclude
the threads and tasks of one process (``capabilities.scope == "process"``). Leases of at least
0.2 s on the real clock (``capabilities.min_ttl``), of any length on a ``ManualClock``.

A ``force_release`` leaves its note for each owner it evicted in the store, where ``evicted``
finds it until that grant's lease would have ended plus ``NOTE_GRACE`` (on the store's clock);
each ``force_release`` drops the notes whose time is up.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ... import _core as core
from ..._clock import SYSTEM_CLOCK, Clock, ManualClock
from ..._url import BackendURL
from ...errors import ConfigurationError, InvalidURL
from ..contract import (
    STATE_TAG,
    Grant,
    GrantRequest,
    LockState,
    Renewal,
    SessionEvents,
    WakeHub,
)
from ..kit import HubWatch, LockStateBuilder
from ..kit.options import DEFAULT_MAX_WAITERS, line_full, waiter_count
from . import CAPABILITIES

if TYPE_CHECKING:
    from ..kit.adapter import AsyncAdapter

#: on a ManualClock time moves only when the test says so: no lease is too short to renew
MANUAL_CLOCK_CAPABILITIES = dataclasses.replace(CAPABILITIES, min_ttl=core.MIN_TTL)


#: how long a force-release note outlives the lease it ended: the evicted holder may learn of
#: its loss a little after that lease would have run out (a renewal worker scheduled late, a
#: release that finds the grant gone), and should still be told it was forced, not expired
NOTE_GRACE = 60.0


@dataclass
class _Row:
    entry: core.Entry
    expires_at: float
    holder: str
    #: how long the grant stays, lapsed, once its lease ran out (``GrantRequest.lock_delay``)
    lock_delay: float = 0.0

    def live(self, now: float) -> bool:
        return self.expires_at > now

    def counts(self, now: float) -> bool:
        """Live, or a lapsed grant within its lock-delay."""
        return self.expires_at + self.lock_delay > now

    def as_seen(self, now: float) -> core.Entry:
        """The entry as the grant rule sees it: lapsed once its lease ran out."""
        if self.live(now):
            return self.entry
        return self.entry._replace(lapsed=True)


class _Store:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.rows: dict[str, list[_Row]] = {}
        self.last_token = 0
        self.order = itertools.count(1)
        self.hub = WakeHub()
        #: (name, owner) of an evicted grant -> (the force-release note, when it may go)
        self.evictions: dict[tuple[str, str], tuple[str, float]] = {}

    def live_rows(self, name: str, now: float) -> list[_Row]:
        """The name's rows with expired ones dropped, lapsed grants kept for their lock-delay
        (caller holds self.lock)."""
        rows = [row for row in self.rows.get(name, ()) if row.counts(now)]
        if rows:
            self.rows[name] = rows
        else:
            self.rows.pop(name, None)
        return rows


_stores: weakref.WeakValueDictionary[str, _Store] = weakref.WeakValueDictionary()
_stores_lock = threading.Lock()


class MemoryBackend:
    """The blocking flavour; ``open_async`` wraps it (its calls never block)."""

    capabilities = CAPABILITIES
    session_events: SessionEvents | None = None

    def __init__(self, url: BackendURL, store: _Store) -> None:
        self.url = url.redacted
        self.clock: Clock = store.clock
        if isinstance(store.clock, ManualClock):
            self.capabilities = MANUAL_CLOCK_CAPABILITIES
        self.hub = store.hub
        self._store = store
        self.max_waiters = url.option("max_waiters", waiter_count, DEFAULT_MAX_WAITERS)

    def try_grant(self, request: GrantRequest) -> Grant | None:
        store = self._store
        with store.lock:
            now = store.clock.now()
            before = len(store.rows.get(request.name, ()))
            rows = store.live_rows(request.name, now)
            expired = before != len(rows)
            seen = [row.as_seen(now) for row in rows]
            plan = core.plan(
                seen,
                request.owner,
                request.shared,
                request.limit,
                request.fair,
                request.queue,
            )
            mine = next(
                (row for row, entry in zip(rows, seen, strict=True) if entry is plan.mine), None
            )
            write = plan.write
            result: Grant | None = None
            changed = expired
            if plan.decision is core.Decision.HELD:
                return Grant(request.name, request.owner, plan.held_token, request.ttl)
            if write is core.Write.ADD_GRANT or write is core.Write.GRANT_WAITER:
                store.last_token += 1
                token = store.last_token
                seq = plan.mine.seq if plan.mine is not None else next(store.order)
                entry = core.Entry(
                    request.owner, seq, request.shared, request.limit, request.fair, token
                )
                row = _Row(entry, now + request.ttl, request.holder, request.lock_delay)
                if mine is not None:
                    rows[rows.index(mine)] = row
                else:
                    rows.append(row)
                store.rows[request.name] = rows
                result = Grant(request.name, request.owner, token, request.ttl)
                changed = True
            elif write is core.Write.REFRESH_WAITER:
                assert mine is not None
                mine.expires_at = now + self.capabilities.waiter_ttl
            elif write is core.Write.ADD_WAITER:
                if sum(not row.entry.granted for row in rows) >= self.max_waiters:
                    raise line_full(self.max_waiters, request.name, self.url)
                entry = core.Entry(
                    request.owner,
                    next(store.order),
                    request.shared,
                    request.limit,
                    request.fair,
                    None,
                )
                rows.append(_Row(entry, now + self.capabilities.waiter_ttl, request.holder))
                store.rows[request.name] = rows
                changed = True
        if expired:
            store.hub.notify(request.name)
        elif changed:
            store.hub.notify(request.name, (STATE_TAG,))  # no waiter's turn came
        return result

    def renew(self, name: str, owner: str, ttl: float) -> float | None:
        store = self._store
        with store.lock:
            return self._renew(name, owner, ttl, store.clock.now())

    def renew_all(self, renewals: Sequence[Renewal], timeout: float) -> list[float | None]:
        """One pass under the store's lock, at one instant of its clock (``timeout`` is moot:
        nothing here waits but for that lock, held by others for microseconds)."""
        store = self._store
        with store.lock:
            now = store.clock.now()
            return [self._renew(r.name, r.owner, r.ttl, now) for r in renewals]

    def _renew(self, name: str, owner: str, ttl: float, now: float) -> float | None:
        """Renew one grant (the caller holds the store's lock)."""
        for row in self._store.rows.get(name, ()):
            if row.entry.owner == owner and row.entry.granted and row.live(now):
                row.expires_at = now + ttl
                return ttl
        return None

    def release(self, name: str, owner: str) -> bool:
        store = self._store
        with store.lock:
            now = store.clock.now()
            rows = store.live_rows(name, now)
            mine = next((row for row in rows if row.entry.owner == owner), None)
            if mine is None or not mine.live(now):
                return False  # a lapsed grant stays for its lock-delay
            rows.remove(mine)
            if not rows:
                store.rows.pop(name, None)
        store.hub.notify(name)
        return mine.entry.granted

    def watch(self, name: str, owner: str) -> HubWatch:
        return HubWatch(self.clock, name, self.hub)

    def watch_state(self, name: str) -> HubWatch:
        return HubWatch(self.clock, name, self.hub, STATE_TAG)

    def inspect(self, name: str) -> LockState:
        store = self._store
        with store.lock:
            now = store.clock.now()
            return self._state(name, store.live_rows(name, now), now)

    def inspect_all(self) -> list[LockState]:
        store = self._store
        with store.lock:
            now = store.clock.now()
            states = [
                self._state(name, store.live_rows(name, now), now) for name in sorted(store.rows)
            ]
        return [state for state in states if state.holders or state.waiters or state.lapsed]

    def _state(self, name: str, rows: list[_Row], now: float) -> LockState:
        """``rows``, read at ``now`` (one instant: a row that ran out between two readings of
        the clock would be told as neither live nor gone)."""
        state = LockStateBuilder(name)
        for row in rows:
            entry = row.entry
            live = row.live(now)
            state.add(
                token=entry.token,
                shared=entry.shared,
                limit=entry.limit,
                expires_in=row.expires_at - now if live else row.expires_at + row.lock_delay - now,
                holder=row.holder,
                lapsed=not live,
            )
        return state.build()

    def force_release(self, name: str, note: str) -> int:
        store = self._store
        with store.lock:
            now = store.clock.now()
            rows = store.live_rows(name, now)
            kept = [row for row in rows if not row.entry.granted]
            removed = sum(row.entry.granted and row.live(now) for row in rows)
            if kept:
                store.rows[name] = kept
            else:
                store.rows.pop(name, None)
            # notes are few (one per evicted grant), so a full pass here keeps them bounded
            for key, (_, until) in list(store.evictions.items()):
                if until <= now:
                    del store.evictions[key]
            for row in rows:
                if row.entry.granted and row.live(now):
                    store.evictions[name, row.entry.owner] = (note, row.expires_at + NOTE_GRACE)
        store.hub.notify(name)
        return removed

    def evicted(self, name: str, owner: str) -> str | None:
        store = self._store
        with store.lock:
            found = store.evictions.get((name, owner))
            if found is None:
                return None
            note, until = found
            if until <= store.clock.now():
                del store.evictions[name, owner]
                return None
            return note

    def close(self) -> None:
        pass


def _open(url: BackendURL, clock: Clock | None) -> MemoryBackend:
    url.allow_options(("max_waiters",))
    if url.path not in ("", "/"):
        raise InvalidURL("memory:// takes a store name, not a path: memory://NAME")
    name = url.hosts
    with _stores_lock:
        store = _stores.get(name)
        if store is None:
            store = _Store(clock or SYSTEM_CLOCK)
            _stores[name] = store
        elif clock is not None and clock is not store.clock:
            raise ConfigurationError(
                f"memory store {name!r} already runs on another clock; "
                "every client of a store must use the same clock",
                backend=url.redacted,
            )
    return MemoryBackend(url, store)


def open_sync(url: BackendURL, *, clock: Clock | None = None) -> MemoryBackend:
    return _open(url, clock)


async def open_async(url: BackendURL, *, clock: Clock | None = None) -> AsyncAdapter:
    backend = _open(url, clock)
    from ..kit.adapter import AsyncAdapter  # the blocking flavour never needs it

    return AsyncAdapter(backend, in_thread=False, hub=backend.hub)


if TYPE_CHECKING:
    # mypy checks here that this module has what tumbler.connect calls
    from ..descriptor import BackendOpener
    from . import backend as _this

    _checked: BackendOpener = _this
