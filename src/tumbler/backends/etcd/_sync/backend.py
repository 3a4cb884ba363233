# Generated from src/tumbler/backends/etcd/_async/backend.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""The etcd backend (asyncio flavour, the source of the generated blocking twin).

See ``tumbler.backends.etcd.common`` for the URL grammar, the key layout and the guarantees;
every request goes through the gateway client (``gateway.AsyncGateway``).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...._acompat import Event, Mutex, Worker, join, shield, spawn
from ...._clock import SYSTEM_CLOCK, Clock
from ...._core import WATCH_LINE, Entry, check_limits, let_through, line_position
from ...._logs import logger
from ....errors import InvalidTimeout, PermitsMismatch
from ...contract import (
    STATE_TAG,
    Grant,
    GrantRequest,
    LockState,
    Renewal,
    SessionEvents,
    WakeHub,
)
from ...kit import BaseWatch, HubWatch, InspectEachName, LockStateBuilder
from ...kit._sync.listener import Listener
from ...kit.options import line_full
from ...kit.owners import owner_hash
from ...kit.tls import tls_context
from .. import CAPABILITIES, LEASE_SWEEP, WAITER_TTL
from ..common import (
    NOTE_GRACE,
    TURN,
    Contender,
    EtcdConfig,
    Line,
    Tombstone,
    ended_key,
    entry_key,
    entry_value,
    lease_gone,
    line_key,
    lock_names_of,
    locks_key,
    notes_key,
    parse_line,
    part_key,
    seq_in,
    tomb_key,
    tomb_value,
    translate_errors,
    turn_in,
)
from ..http import HTTPFailure
from ..wire import (
    EtcdError,
    GatewayUnavailable,
    WatchEvent,
    WatchRequest,
    b64,
    compare,
    count_of,
    created_before,
    delete,
    kvs,
    nested,
    prefix_end,
    put,
    ranged,
    read,
    read_range,
    relet,
    untouched_since,
)
from .gateway import Gateway, LeaseAnswer, WatchStream, attempt_bound

_log = logger("tumbler.etcd")

#: etcd's default limit on the operations of one transaction (``--max-txn-ops``)
MAX_TXN_OPS = 128
#: how often a transaction is tried again when the line changed under it
FORCE_RELEASE_TRIES = 10
#: the TTL the client asks for its waiters' lease: etcd grants at least its own floor,
#: 1.5 election timeouts rounded up to whole seconds (2 s with etcd's defaults)
WAITER_LEASE_TTL = 1
#: how long a stream waits for the next of its watches' creation notices once one came:
#: the gateway sends a hundred within about 10 ms when it makes them all
CREATION_PATIENCE = 0.25


@dataclass(eq=False)
class _Lease:
    """The client's lease, as this client knows it."""

    id: int
    #: the monotonic time before which etcd cannot end it: the sending of the last grant or
    #: keep-alive etcd answered in ``term``, plus the TTL it answered with
    expires: float
    #: the raft term of the answers that timed ``expires`` (0: not known)
    term: int = 0
    #: an answer came from a later term: the leader of an earlier one may still end the lease
    #: at ``expires`` (see :meth:`confirm`), which no keep-alive moves any more
    doomed: bool = False

    def confirm(self, sent: float, answer: LeaseAnswer, latest: int) -> None:
        """Take etcd's answer to a keep-alive sent at ``sent`` (a TTL above 0), the highest
        term any member has told the client of being ``latest``.

        Only the leader keeps leases (keep-alives are not replicated), and etcd before
        3.4.31 / 3.5.13 lets a deposed leader end them: one that hung (SIGSTOP, a stalled
        disk) and comes back still counts each lease from the last keep-alive *it* answered,
        and the revocation it then proposes is forwarded to the new leader and applied,
        however long the new leader has kept the lease alive. So an answer of a later term
        extends nothing: the lease stays good until ``expires`` only, and the client moves
        its keys to a lease of the new term (:meth:`AsyncEtcdBackend._rehome`). An answer of
        an earlier term than the client has seen (a deposed leader, or a member, not yet told)
        renewed nothing.
        """
        if answer.term and answer.term < max(latest, self.term):
            self.doomed = self.doomed or latest > self.term > 0
            return
        if self.term == 0 or answer.term in (0, self.term):
            self.term = self.term or answer.term
            self.expires = max(self.expires, sent + answer.ttl)
        elif answer.term > self.term:
            self.doomed = True


@dataclass(eq=False)
class _OwnEntry:
    """This client's key for one acquisition."""

    key: bytes
    create_revision: int
    lease: int
    granted: bool = False
    #: the monotonic time of the last read of its line
    read_at: float = 0.0
    #: its tombstone's key, once its put was sent (a grant with a lock-delay: it may exist
    #: from then on), and its value and delay
    tomb: bytes | None = None
    tomb_value: bytes = b""
    delay: float = 0.0


#: how many keys past those the grant rule needs an ahead read brings: keys no client wrote
#: there are skipped, and only reads crowded with them send the grant to read the whole line
AHEAD_SLACK = 4
#: how many times in a row one call takes a new lease for the client's lease found gone
LEASE_LOSSES = 3
#: how many later turns a grant request takes when the line has entries newer than the turn
#: it asked for (arrivals that came together, or a client whose latest revision was behind)
TURN_TRIES = 64
#: how long a waiter whose watch is made, and has not fired, goes without reading its line:
#: the watch tells it of every change it waits for; this read is for what no watch tells
SAFETY_RECHECK = 30.0


def _line_reads(prefix: bytes, request: GrantRequest, mine_key: bytes) -> list[dict[str, Any]]:
    """The reads that decide ``request``, beside its own key's: in each part of its line, the
    entries nearest ahead of ``mine_key`` (a range from it to the end of the part's turns,
    which etcd walks in key order and stops at the limit), as many as the rule can need; then,
    in each part, the keys past the turns: the layout before them, which makes the grant read
    its whole line."""
    turn = turn_in(mine_key)
    shared_needed = request.limit + 1 if request.shared and request.limit else 1
    reads = []
    for exclusive, needed in ((True, 1), (False, shared_needed)):
        part = part_key(prefix, request.name, exclusive)
        reads.append(read_range(part + turn + b"\0", part + _PAST_TURNS, needed + AHEAD_SLACK))
    for exclusive in (True, False):
        part = part_key(prefix, request.name, exclusive)
        reads.append(read_range(part + _PAST_TURNS, prefix_end(part), 1))
    return reads


#: the byte after :data:`TURN`: the end of a part's turns, the start of the keys past them
_PAST_TURNS = bytes([TURN[0] + 1])


def _last_in_line(prefix: bytes, name: str, mine_key: bytes, seq: int) -> list[dict[str, Any]]:
    """The comparisons that make an entry of turn ``seq`` the last of its line: every key of
    a later turn (a lower key, in either part) was created before ``seq``. A client's key is
    created at its turn or after, so none is; a key no client wrote can be (it changes
    nothing, and is no entry: ``parse_line``)."""
    turn = turn_in(mine_key)
    checks = []
    for exclusive in (True, False):
        part = part_key(prefix, name, exclusive)
        # an equal turn in the other part counts as later: no two entries share a turn
        end = mine_key if part + turn == mine_key else part + turn + b"\0"
        checks.append(created_before(part + TURN, end, seq))
    return checks


@dataclass(frozen=True)
class _Ahead:
    """The entries read nearest ahead of an entry in one part of its line."""

    #: the entries of the range read, nearest first (keys no client wrote left out)
    entries: list[Contender]
    #: the read took every key ahead in the part
    whole: bool
    #: how many keys are ahead in the part, counted by etcd (keys no client wrote too)
    count: int


def _ahead(response: dict[str, Any]) -> _Ahead:
    found = ranged(response)
    line = parse_line(found).contenders
    line.sort(key=lambda contender: turn_in(contender.key))
    return _Ahead(line, not _more(response), count_of(response))


@dataclass(frozen=True)
class _Place:
    """Where an entry stands in its line, as far as the grant rule needs to know."""

    granted: bool
    #: what it waits for if not granted: a key (to a range end), and whether its puts matter
    watch: Slot | None
    #: the entries read, for ``check_limits``
    seen: list[Entry]


def _more(response: dict[str, Any]) -> bool:
    return bool(response.get("response_range", {}).get("more", False))


def _place(
    mine: Contender,
    request: GrantRequest,
    line_prefix: bytes,
    writers: _Ahead,
    shared: _Ahead,
) -> _Place | None:
    """Where ``mine`` stands, decided from the entries nearest ahead of it in each part of its
    line; None when these are not enough (keys no client wrote crowd them)."""
    seen = [c.entry() for c in writers.entries + shared.entries]
    semaphore = bool(request.shared and request.limit)
    if writers.whole and shared.whole:
        # everything ahead is known: the rule over the line up to this entry
        line = sorted(writers.entries + shared.entries, key=lambda c: c.create_revision)
        line.append(mine)
        blocker = line_position([c.entry() for c in line], len(line) - 1)
        if blocker is None:
            return _Place(True, None, seen)
        if blocker == WATCH_LINE:
            return _Place(False, (line_prefix, prefix_end(line_prefix), True), seen)
        return _Place(False, (line[blocker].key, None, semaphore), seen)
    nearest_writer = writers.entries[0] if writers.entries else None
    if nearest_writer is None and not writers.whole:
        return None
    if not request.shared:
        # a mutex or writer waits for its predecessor: the nearer of the two parts' nearest
        if not shared.entries and not shared.whole:
            return None
        nearest = min(
            [c for c in (nearest_writer, *shared.entries[:1]) if c is not None],
            key=lambda c: turn_in(c.key),
        )
        return _Place(False, (nearest.key, None, False), seen)
    if nearest_writer is not None:
        # a reader or semaphore entry waits for the nearest writer ahead
        return _Place(False, (nearest_writer.key, None, semaphore), seen)
    if not request.limit:
        return _Place(True, None, seen)  # a reader with no writer ahead
    if len(shared.entries) > request.limit:
        # more than the permits ahead: it waits for its predecessor's grant
        return _Place(False, (shared.entries[0].key, None, True), seen)
    return None


def _place_in(
    line: list[Contender], mine: Contender, request: GrantRequest, line_prefix: bytes
) -> _Place:
    """Where ``mine`` stands, decided from its whole ``line``."""
    entries = [c.entry() for c in line]
    index = next((i for i, c in enumerate(line) if c.key == mine.key), None)
    if index is None:
        raise EtcdError(0, f"the entry {mine.key!r} is not in its line")
    blocker = line_position(entries, index)
    if blocker is None:
        return _Place(True, None, entries)
    if blocker == WATCH_LINE:
        return _Place(False, (line_prefix, prefix_end(line_prefix), True), entries)
    semaphore = bool(request.shared and request.limit)
    return _Place(False, (line[blocker].key, None, semaphore), entries)


#: what a waiter waits for: a key (to a range end, if not None), and whether a put of it
#: matters (a semaphore waiter's predecessor rewrites its key when granted) or only its
#: deletion (every other waiter: a put is then only a key moved between leases)
Slot = tuple[bytes, "bytes | None", bool]


def _unchanged(key: bytes, mod_revision: int) -> dict[str, Any]:
    """A comparison that holds when ``key`` was last written at ``mod_revision``."""
    return {
        "key": b64(key),
        "target": "MOD",
        "mod_revision": str(mod_revision),
        "result": "EQUAL",
    }


def _covers(slot: Slot, key: bytes) -> bool:
    start, end, _puts = slot
    return key == start if end is None else start <= key < end


class KeyWatches(Listener):
    """The client's one watch stream, carrying the watch of every waiter of the client.

    A waiter found blocked registers what it waits for (:meth:`add`): a key, or a range for
    the first semaphore waiter, with the revision of the read that found it blocked. The
    stream watches every registered key from the moment etcd creates the watch (a watch from
    a past revision would be served by etcd's catch-up loop, every 100 ms, not at once); a
    waiter whose read is older than its key's watch might have missed a change in between,
    so it is woken to read its line again rather than wait. Registering a key the stream
    does not carry replaces the stream by one that does (the gateway takes a stream's watches
    only when it starts). A change to a key wakes the waiters registered on it
    (``WakeHub.notify`` with their tags) and ends their registration, as a ZooKeeper watch
    fires once. Without registrations no stream is open. A stream that fails is started
    again after a backoff, and every waiter is then woken (:class:`AsyncListener`).

    The gateway does not make every watch a stream asks for (of a hundred, often only the
    first few dozen) and says nothing of the others; each watch carries an id of its own, so
    that its creation notice names it, and a stream whose notices stop coming
    (:data:`CREATION_PATIENCE`) before every watch is made is replaced by one that asks for
    the missing ones first. A stream of which no watch is made is on a member that does not
    answer: the next one opens on another member.
    """

    def __init__(self, backend: EtcdBackend) -> None:
        super().__init__(
            backend.clock,
            backend.hub,
            backend.url,
            label="etcd",
            log=_log,
            patience=backend.config.request_timeout,
        )
        self._gateway = backend.gateway
        self._gateway.on_leave(self._member_failed)
        self._request_timeout = backend.config.request_timeout
        #: for each key (or range) waited for, its waiters, (lock name, tag), each with the
        #: revision its read had
        self._interests: dict[Slot, dict[tuple[str, str], int]] = {}
        #: the slot each registered waiter is in
        self._slot_of: dict[tuple[str, str], Slot] = {}
        #: the registrations a change does not end: state watchers' (:meth:`follow`)
        self._kept: set[tuple[str, str]] = set()
        #: the keys the open stream watches, in the order it asked for them
        self._streamed: list[Slot] = []
        #: the revision each of them was created at, once etcd said
        self._created: dict[Slot, int] = {}
        #: the revision of the latest change the stream told of each of them
        self._seen: dict[Slot, int] = {}
        #: the keys the last stream asked for and etcd did not watch: the next asks first
        self._unmade: set[Slot] = set()
        #: set at each creation notice, for the watchdog of the stream's creations
        self._made = Event()
        self._stream: WatchStream | None = None
        #: set when the stream must be replaced (or opened, or closed)
        self._changed = Event()
        #: the watch events this client's stream received (for the bench and tests)
        self.events_received = 0

    def add(
        self,
        name: str,
        tag: str,
        key: bytes,
        range_end: bytes | None,
        read: int,
        puts: bool = True,
    ) -> None:
        """Wake waiter ``tag`` of ``name`` at the first change of ``key`` (to ``range_end``)
        after revision ``read``, at which its line was read (without ``puts``, at its first
        deletion); a waiter waits for one thing at a time."""
        slot = (key, range_end, puts)
        with self._lock:
            self._drop(name, tag)
            created = self._created.get(slot)
            # watched only from after the read, or changed since it (the stream told before
            # the waiter came): read the line again
            missed = (created is not None and created > read) or self._seen.get(slot, 0) > read
            if not missed:
                self._interests.setdefault(slot, {})[(name, tag)] = read
                self._slot_of[(name, tag)] = slot
            stream = None if slot in self._streamed else self._stream
            restart = not missed and slot not in self._streamed
        if missed:
            self._hub.notify(name, (tag,))
            return
        if restart:
            self._changed.set_threadsafe()
            if stream is not None:
                stream.interrupt()
        self._start_reader()

    def follow(self, name: str, tag: str, key: bytes, range_end: bytes) -> None:
        """Wake ``tag`` of ``name`` at every change of the keys from ``key`` to ``range_end``
        from now on, until :meth:`drop`: a state watcher's registration, which a change does
        not end (its watcher reads the state again, and still watches)."""
        slot = (key, range_end, True)
        with self._lock:
            self._drop(name, tag)
            self._interests.setdefault(slot, {})[(name, tag)] = self._gateway.revision
            self._slot_of[(name, tag)] = slot
            self._kept.add((name, tag))
            stream = None if slot in self._streamed else self._stream
            restart = slot not in self._streamed
        if restart:
            self._changed.set_threadsafe()
            if stream is not None:
                stream.interrupt()
        self._start_reader()

    def watching(self, name: str, tag: str) -> bool:
        """Whether waiter ``tag`` of ``name`` is registered on a watch the open stream has
        made: whatever it waits for has not changed since its read (it would have been woken,
        and its registration ended)."""
        with self._lock:
            slot = self._slot_of.get((name, tag))
            return slot is not None and slot in self._created

    def drop(self, name: str, tag: str) -> None:
        """Forget what waiter ``tag`` of ``name`` waited for (it was granted, or withdrew)."""
        with self._lock:
            self._drop(name, tag)
            stream = self._stream if not self._interests else None
        if stream is not None:
            # nobody waits any more: the stream is closed rather than kept open for nothing
            self._changed.set_threadsafe()
            stream.interrupt()

    def _drop(self, name: str, tag: str) -> None:
        self._kept.discard((name, tag))
        slot = self._slot_of.pop((name, tag), None)
        waiters = self._interests.get(slot) if slot is not None else None
        if slot is not None and waiters is not None:
            waiters.pop((name, tag), None)
            if not waiters:
                del self._interests[slot]

    def changed(self, key: bytes) -> None:
        """``key`` changed (this client deleted it): wake its waiters now, not when the
        stream tells."""
        self._deliver([key])

    def _deliver(self, keys: list[bytes], puts: bool = False) -> None:
        """``keys`` were deleted (or, with ``puts``, put): wake the waiters they concern."""
        woken: dict[str, set[str]] = {}
        with self._lock:
            for slot, waiters in list(self._interests.items()):
                if (slot[2] or not puts) and any(_covers(slot, key) for key in keys):
                    for name, tag in list(waiters):
                        woken.setdefault(name, set()).add(tag)
                        if (name, tag) not in self._kept:
                            del waiters[(name, tag)]
                            self._slot_of.pop((name, tag), None)
                    if not waiters:
                        del self._interests[slot]
        self._wake(woken)

    def _told(self, events: Sequence[WatchEvent]) -> None:
        """The stream told of ``events``: wake their waiters, and remember when each key
        changed, for a waiter whose read came before the change but who registers after
        the stream told of it."""
        with self._lock:
            for slot in self._streamed:
                for event in events:
                    if (slot[2] or event.deleted) and _covers(slot, event.key):
                        self._seen[slot] = max(self._seen.get(slot, 0), event.revision)
        self._deliver([event.key for event in events if event.deleted])
        self._deliver([event.key for event in events if not event.deleted], puts=True)

    def _watch_created(self, slot: Slot, revision: int) -> None:
        """The stream's watch of ``slot`` sees every change after ``revision``: its waiters
        whose read is older might have missed one in between."""
        woken: dict[str, set[str]] = {}
        with self._lock:
            self._created[slot] = revision
            waiters = self._interests.get(slot, {})
            for (name, tag), read in list(waiters.items()):
                if read < revision:
                    woken.setdefault(name, set()).add(tag)
                    if (name, tag) in self._kept:
                        waiters[(name, tag)] = revision
                        continue
                    del waiters[(name, tag)]
                    self._slot_of.pop((name, tag), None)
            if slot in self._interests and not waiters:
                del self._interests[slot]
        self._wake(woken)

    def _wake(self, woken: dict[str, set[str]]) -> None:
        for name, tags in woken.items():
            self._hub.notify(name, tags)

    def _listen(self) -> None:
        stream = self._gateway.watch_stream()
        with self._lock:
            self._changed.clear()
            # the gateway drops the last watches of a stream, never the first: those it
            # dropped last time go first (a stable sort keeps the others' order)
            slots = sorted(self._interests, key=lambda slot: slot not in self._unmade)
            self._unmade = set()
            self._streamed = slots
            self._created = {}
            self._seen = {}
            # from here on a registration the stream lacks interrupts it, even before it opens
            self._stream = stream if slots else None
        if self._closed:
            return  # closed before the flag was cleared: the close's wake-up is gone with it
        if not slots:
            self._changed.wait(None)  # until a waiter registers, or the client closes
            return
        requests = [
            WatchRequest(key, end, watch_id=i + 1, deletions_only=not puts)
            for i, (key, end, puts) in enumerate(slots)
        ]
        watchdog = spawn(lambda: self._await_creations(stream, slots), "tumbler-etcd-creations")
        try:
            with stream.open(requests):
                self._now_listening()
                for news in stream.events():
                    if news.created:
                        if 0 < news.watch_id <= len(slots):
                            self._watch_created(slots[news.watch_id - 1], news.revision)
                            self._made.set_threadsafe()
                    else:
                        self.events_received += len(news.events)
                        self._told(news.events)
            if not (self._changed.is_set() or self._closed):
                raise GatewayUnavailable("etcd ended the watch stream")
        except HTTPFailure:
            if self._changed.is_set() or self._closed:
                return  # interrupted to be replaced or closed
            if stream.member is not None:
                self._gateway.leave(stream.member)
            raise
        finally:
            with self._lock:
                self._stream = None
                self._streamed = []
                self._created = {}
                self._seen = {}
            self._made.set_threadsafe()  # the watchdog sees the stream is gone
            join(watchdog)

    def _member_failed(self, member: int) -> None:
        """A call found ``member`` failing: a stream on it is opened on another one, since
        a member that stopped answering calls (stopped, cut off) sends no events either."""
        if len(self._gateway.endpoints) == 1:
            return  # no other member to open it on
        with self._lock:
            stream = self._stream
        if stream is not None and stream.member == member:
            self._changed.set_threadsafe()
            stream.interrupt()

    def _await_creations(self, stream: WatchStream, slots: list[Slot]) -> None:
        """Replace ``stream`` when etcd's notices of its watches' creations stop coming
        before every one of ``slots`` is made: the first within a request's attempt (the
        stream is opened then), each next within :data:`CREATION_PATIENCE`."""
        made = -1
        patience = attempt_bound(self._request_timeout, len(self._gateway.endpoints))
        while True:
            with self._lock:
                if self._stream is not stream:
                    return  # ended, or being replaced
                now_made = sum(slot in self._created for slot in slots)
            if now_made == len(slots):
                return
            if now_made == made:
                break  # no notice for a whole patience: the others will not come
            if now_made:
                patience = CREATION_PATIENCE
            made = now_made
            self._made.clear()  # a notice between the count and here is counted next turn
            self._made.wait(patience)
        with self._lock:
            if self._stream is not stream:
                return
            self._unmade = {slot for slot in slots if slot not in self._created}
        if not made and stream.member is not None:
            self._gateway.leave(stream.member)  # it does not answer: open on the next one
        _log.debug("etcd made %d of the %d watches of a stream: asking again", made, len(slots))
        self._changed.set_threadsafe()
        stream.interrupt()

    def _interrupt(self) -> None:
        self._changed.set_threadsafe()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.interrupt()


class EtcdStateWatch(BaseWatch):
    """A state watcher's watch: the client's watch stream follows the lock's whole line (every
    entry put or deleted, a lease's expiry included), and each change wakes the watcher."""

    def __init__(self, backend: EtcdBackend, name: str) -> None:
        self._watches = backend.watches
        self._line = line_key(backend.config.prefix, name)
        # a tag of its own: the stream's registrations are one per (name, tag)
        tag = f"{STATE_TAG}{next(_state_watchers)}"
        self._tag = tag
        super().__init__(backend.clock, name, backend.hub, tag)

    def _subscribe(self) -> bool:
        self._watches.follow(self.name, self._tag, self._line, prefix_end(self._line))
        return False

    def _unsubscribe(self) -> None:
        self._watches.drop(self.name, self._tag)


#: numbers the state watchers of a process, for their tags
_state_watchers = itertools.count(1)


class EtcdBackend(InspectEachName):
    """The etcd backend contract over etcd's JSON gateway: one lease per client, kept alive by
    its renewals, and one watch stream for its waiters."""

    def __init__(self, config: EtcdConfig) -> None:
        # first: unusable certificate files are refused before anything is made
        tls = tls_context(config.tls, config.url) if config.tls is not None else None
        self.config = config
        self.url = config.url
        self.clock: Clock = SYSTEM_CLOCK
        self.hub = WakeHub()
        self.session_events = SessionEvents()
        ttl = float(config.lease_ttl)
        self.capabilities = dataclasses.replace(
            CAPABILITIES, max_ttl=ttl, waiter_ttl=min(ttl, WAITER_TTL)
        )
        self.gateway = Gateway(
            config.endpoints,
            tls=tls,
            credentials=config.credentials,
            timeout=config.request_timeout,
        )
        self.watches = KeyWatches(self)
        self._guard = threading.Lock()
        self._lease: _Lease | None = None
        self._leasing = Mutex()
        #: the short lease of the client's waiters' entries, and its TTL as etcd granted it
        self._waiter_lease: _Lease | None = None
        self._waiter_ttl = 0
        self._waiter_leasing = Mutex()
        #: moves of entries onto the waiters' lease under way: the keeper keeps the lease alive
        #: for them too, from its grant on, as a move whose answer comes late can take most of
        #: the lease's life
        self._moving_to_waiters = 0
        #: keeps the waiters' lease alive while any entry of the client waits on it
        self._keeper: Worker | None = None
        self._keeper_stop = Event()
        self._entries: dict[tuple[str, str], _OwnEntry] = {}
        #: acquisitions whose key may exist although no reply said so (the reply was lost),
        #: with that key
        self._uncertain: dict[tuple[str, str], bytes] = {}
        #: keys whose deletion did not get through, with the guard to delete them by
        #: (``wire.compare``'s target and value): deleted at the client's next call, or they would
        #: stay in their line for as long as the client keeps its lease alive
        self._orphans: dict[bytes, tuple[str, int]] = {}
        #: entry keys a grant request of which went unanswered: it may reach etcd late,
        #: whenever the path it was held on comes back, so the end of their acquisition
        #: leaves the mark that request finds (``common.ended_key``)
        self._doubtful: set[bytes] = set()

    # -- connection ------------------------------------------------------------------------

    def start(self) -> None:
        """Reach a member, check that the prefix may be read (with the URL's user), and take
        the client's lease: a first acquire's first request is then its entry in line, and
        a fair lock serves it before every acquire that began after it."""
        prefix = self.config.prefix
        with translate_errors(self.url):
            self.gateway.call(
                "/v3/kv/range",
                {"key": b64(prefix), "range_end": b64(prefix_end(prefix)), "limit": 1},
                idempotent=True,
                timeout=self.config.connect_timeout,
            )
            with self._leasing:
                self._grant_lease()

    def close(self) -> None:
        """Revoke the client's lease (etcd deletes every key still attached to it), end the
        watch stream and close the connections."""
        with self._guard:
            lease, self._lease = self._lease, None
            waiting, self._waiter_lease = self._waiter_lease, None
            keeper, self._keeper = self._keeper, None
            self._entries.clear()
        self._keeper_stop.set_threadsafe()
        try:
            if keeper is not None:
                join(keeper)
            for ending in (lease, waiting):
                if ending is None:
                    continue
                try:
                    self.gateway.revoke(ending.id)
                except Exception as error:
                    # it runs out on its own, with every key on it
                    _log.warning("could not revoke an etcd lease at close: %s", error)
            self.watches.close()
        finally:
            self.gateway.close()

    # -- the lease ---------------------------------------------------------------------------

    def _lease_lost(self, lease: _Lease) -> None:
        """etcd no longer has ``lease``: every entry on it is gone, every hold on it lost.

        Only those: a waiter's entry lives on the waiters' lease, and stays in line. Were
        the client to forget it, its acquire would queue again behind it, and the client's
        next waiters would keep the forgotten entry alive with their lease: a line stalled
        for as long as the client has waiters. Keys whose deletion did not get through are
        deleted still (by their guard: one gone with the lease is found gone)."""
        with self._guard:
            if self._lease is not lease:
                return  # already known
            self._lease = None
            gone = [key for key, entry in self._entries.items() if entry.lease == lease.id]
            for key in gone:
                del self._entries[key]
            # made on the client's lease, and a late grant request attaches its key to a
            # lease that is gone: etcd refuses it
            self._uncertain.clear()
            self._doubtful.clear()
        if gone:
            _log.warning("the etcd lease of this client is gone: every hold of this client is lost")
        else:
            # a client that held nothing for longer than its lease (nobody kept it alive)
            _log.debug("the etcd lease of this idle client ran out: a new one is granted")
        self.session_events.notify(SessionEvents.EXPIRED)
        self.hub.notify_all()

    def _lease_gone(self, lease: _Lease, error: EtcdError, before: int) -> None:
        """A call found ``lease`` gone (``error``) after ``before`` such losses in a row:
        forget it (a new one is granted next), unless that keeps happening."""
        if before >= LEASE_LOSSES:
            raise EtcdError(0, "the client's lease kept disappearing") from error
        self._lease_lost(lease)

    def _fresh_lease(self, began: float) -> _Lease:
        """The client's lease, with at least two thirds of its TTL left from ``began``:
        granted if the client has none, kept alive first if a third has gone."""
        lease = self._lease
        fresh = self.config.lease_ttl * 2 / 3
        if lease is not None and not lease.doomed and lease.expires - began >= fresh:
            return lease
        with self._leasing:
            lease = self._lease
            if lease is not None:
                if not lease.doomed and lease.expires - time.monotonic() >= fresh:
                    return lease  # kept alive meanwhile
                if not lease.doomed:
                    sent = time.monotonic()
                    answer = self.gateway.lease_keep_alive(lease.id)
                    if answer.ttl <= 0:
                        self._lease_lost(lease)
                        return self._grant_lease()
                    lease.confirm(sent, answer, self.gateway.term)
                if lease.doomed:
                    return self._rehome(lease)
                return lease
            return self._grant_lease()

    def _lease_to_enter(self, began: float) -> _Lease:
        """The lease a new entry goes in line on: the client's as it is, without a request,
        while a third of it is left (or a request's timeout, if less), else
        :meth:`_fresh_lease`. A keep-alive first would put the entry behind those of
        acquires that began after this one; a grant is timed by a fresh lease all the same
        (``try_grant`` freshens it). Should the lease end before the entry's write lands,
        etcd refuses the write, and the client takes a new lease and a new place."""
        lease = self._lease
        margin = min(self.config.request_timeout, self.config.lease_ttl / 3)
        if lease is not None and not lease.doomed and lease.expires - time.monotonic() >= margin:
            return lease
        return self._fresh_lease(began)

    def _grant_lease(self) -> _Lease:
        """A new lease for the client (with ``_leasing`` held)."""
        sent = time.monotonic()
        answer = self.gateway.lease_grant(self.config.lease_ttl)
        lease = _Lease(answer.id, sent + answer.ttl, answer.term)
        with self._guard:
            self._lease = lease
        return lease

    def _rehome(self, doomed: _Lease, timeout: float | None = None) -> _Lease:
        """Replace ``doomed`` (with ``_leasing`` held) by a new lease, granted by the leader
        of the new term, and move every granted entry on it there, keeping its value and
        create revision (its place and token): a deposed leader that ends ``doomed`` then
        deletes none of them. An entry whose move did not get through (no reply, or its key
        is gone) stays on ``doomed``, and its renewal reports no more than ``doomed`` is
        good for (a key gone: its hold lost)."""
        with self._guard:
            current = self._lease
        if current is not doomed:
            return current if current is not None else self._grant_lease()
        lease = self._grant_lease()
        with self._guard:
            moving = [
                entry
                for entry in self._entries.values()
                if entry.granted and entry.lease == doomed.id
            ]
        for start in range(0, len(moving), MAX_TXN_OPS // 2):
            batch = moving[start : start + MAX_TXN_OPS // 2]
            _succeeded, _revision, responses = self.gateway.txn(
                [],
                [
                    nested(
                        [compare(entry.key, "CREATE", entry.create_revision)],
                        [relet(entry.key, lease.id)],
                        [],
                    )
                    for entry in batch
                ],
                [],
                idempotent=True,  # the same key on the same lease again
                timeout=timeout,
            )
            for entry, response in zip(batch, responses, strict=True):
                if response.get("response_txn", {}).get("succeeded", False):
                    entry.lease = lease.id
        _log.info(
            "etcd's leader changed since the client's lease was last kept alive: %d "
            "entries moved to a lease of the new leader",
            len(moving),
        )
        return lease

    def _fresh_waiter_lease(self) -> _Lease:
        """The waiters' lease, granted if the client has none (or it ran out)."""
        lease = self._waiter_lease
        if lease is not None and lease.expires > time.monotonic():
            return lease
        with self._waiter_leasing:
            lease = self._waiter_lease
            if lease is not None and lease.expires > time.monotonic():
                return lease
            # a waiter cancelled meanwhile must not leave a lease its client does not know of
            # (close() would not revoke it): the grant is seen through and recorded
            return shield(self._grant_waiter_lease())

    def _grant_waiter_lease(self) -> _Lease:
        sent = time.monotonic()
        lease_id, ttl = self.gateway.grant_lease(WAITER_LEASE_TTL)
        lease = _Lease(lease_id, sent + ttl)
        with self._guard:
            self._waiter_lease, self._waiter_ttl = lease, ttl
        if ttl + LEASE_SWEEP > self.capabilities.waiter_ttl:
            # a cluster whose floor is above etcd's default one
            self.capabilities = dataclasses.replace(
                self.capabilities,
                waiter_ttl=min(float(self.config.lease_ttl), ttl + LEASE_SWEEP),
            )
        return lease

    def _keep_waiting(self) -> None:
        """Keep the waiters' lease alive from now on, for as long as an entry waits on it."""
        with self._guard:
            if self._keeper is not None or self._keeper_stop.is_set():
                return
            self._keeper = spawn(self._keep_waiter_lease, "tumbler-etcd-waiters-lease")

    def _keep_waiter_lease(self) -> None:
        """Keep the waiters' lease alive while an entry waits on it: a client that dies stops,
        and its waiters' entries leave the line with the lease.

        Each keep-alive goes a third of the TTL after the one that last renewed it was sent,
        not after its answer came: etcd answers one only once it has applied what it has
        committed, and on a slow disk that takes a while, which would otherwise push every
        next keep-alive later until one came too late. Its answer is awaited for as long as
        it can be of use, the whole TTL: etcd renewed the lease when the request came, and
        an answer that comes before the TTL has passed since its sending still shows the
        lease alive, also when the client's own count ran out meanwhile (a stalled client).
        One that fails is sent again after a quarter of that third."""
        failed = False
        while True:
            with self._guard:
                lease = self._waiter_lease
                waiting = lease is not None and (
                    self._moving_to_waiters > 0
                    or any(
                        entry.lease == lease.id and not entry.granted
                        for entry in self._entries.values()
                    )
                )
                if not waiting or lease is None:
                    self._keeper = None
                    return
                whole = self._waiter_ttl
                every = whole / 3
            pause = every / 4 if failed else lease.expires - 2 * every - time.monotonic()
            if self._keeper_stop.wait(max(pause, 0.0)):
                return
            sent = time.monotonic()
            try:
                ttl = self.gateway.keep_alive(lease.id, whole)
            except Exception as error:  # the keeper must outlive any failure but close()
                if not failed:  # once for a run of failures, tried again every quarter third
                    _log.warning("could not keep the etcd waiters' lease alive: %s", error)
                failed = True
                continue
            failed = False
            if ttl > 0:
                lease.expires = max(lease.expires, sent + ttl)
                continue
            # gone (it ran out unheard): the waiters on it take new places in line
            with self._guard:
                if self._waiter_lease is lease:
                    self._waiter_lease = None
                for owner, entry in list(self._entries.items()):
                    if entry.lease == lease.id:
                        del self._entries[owner]
            self.hub.notify_all()

    def _to_waiters_lease(self, entry: _OwnEntry, value: bytes) -> bool:
        """Attach a waiter's ``entry`` to the waiters' lease, if it is not yet: a waiter whose
        client dies then leaves the line when that lease runs out, not the client's (which
        outlives it by ``lease_ttl``). False if the key is gone."""
        for _ in range(2):
            waiting = self._fresh_waiter_lease()
            if entry.lease == waiting.id:
                # the keeper may have stopped (the client's lease was lost, which forgets
                # every entry): it keeps this one again
                self._keep_waiting()
                return True
            with self._guard:
                self._moving_to_waiters += 1
            self._keep_waiting()
            try:
                moved = self._move(entry, value, waiting.id)
            except EtcdError as error:
                if not lease_gone(error):
                    raise
                # revoked, or it ran out unheard: a new one
                with self._guard:
                    if self._waiter_lease is waiting:
                        self._waiter_lease = None
                continue
            finally:
                with self._guard:
                    self._moving_to_waiters -= 1
            if moved:
                self._keep_waiting()
            return moved
        return True  # it waits on the client's lease: a dead client's entry goes later

    def _move(self, entry: _OwnEntry, value: bytes, lease: int) -> bool:
        """Attach ``entry``'s key to ``lease``, writing ``value``; False if the key is gone.

        Only if the key was not written since the latest revision the client had seen: an
        attempt held on a silent path that lands after a later move (a waiter's, to its
        waiters' lease, after its grant took the key back to the client's) changes nothing.
        A second attempt after a lost reply finds the key where the first put it: moved."""
        moved, _revision, responses = self.gateway.txn(
            [
                compare(entry.key, "CREATE", entry.create_revision),
                untouched_since(entry.key, self.gateway.revision),
            ],
            [put(entry.key, value, lease)],
            [read(entry.key)],
            idempotent=True,
        )
        if not moved and responses:
            moved = any(
                kv["create_revision"] == entry.create_revision
                and kv["lease"] == lease
                and kv["value"] == value
                for kv in ranged(responses[0])
            )
        if moved:
            entry.lease = lease
        return moved

    # -- the contract ----------------------------------------------------------------------

    def _resting(self, known: _OwnEntry, request: GrantRequest, tag: str, began: float) -> bool:
        """Whether a waiter's re-check may go without reading its line: its watch is made on
        the open stream and has not fired, so nothing it waits for changed since its last
        read, which is less than :data:`SAFETY_RECHECK` old."""
        return (
            request.queue
            and not known.granted
            and began - known.read_at < SAFETY_RECHECK
            and self.watches.watching(request.name, tag)
        )

    def try_grant(self, request: GrantRequest) -> Grant | None:
        began = time.monotonic()
        if self._orphans:
            self._tidy()
        key = (request.name, request.owner)
        tag = owner_hash(request.owner)
        prefix = self.config.prefix
        line_prefix = line_key(prefix, request.name)
        with translate_errors(self.url, request.name):
            with self._guard:
                known = self._entries.get(key)
                # a key the last call may have made unheard is asked for again by its name
                mine_key = known.key if known is not None else self._uncertain.get(key)
            if known is not None and self._resting(known, request, tag, began):
                # only the client's lease needs the server now and then, while it only waits
                self._fresh_lease(began)
                return None
            if mine_key is None:
                mine_key = self._new_key(request, tag, self.gateway.revision + 1)
            ended = ended_key(prefix, mine_key)
            losses = turns = 0
            while True:
                lease = self._lease_to_enter(began)
                value = entry_value(
                    request.holder, request.shared, request.limit, self.config.lease_ttl
                )
                with self._guard:
                    self._uncertain[key] = mine_key
                seq = seq_in(mine_key)
                reads = [read(mine_key), *_line_reads(prefix, request, mine_key)]
                try:
                    # a second run after a lost reply finds the key the first made, by its
                    # name, and reads the same line: it may go to another member. A run
                    # that comes after its acquisition ended (held on a silent path) finds
                    # the mark of that end, written after this was sent, and makes nothing.
                    created, revision, responses = self.gateway.txn(
                        [
                            compare(mine_key, "CREATE", 0),
                            untouched_since(ended, self.gateway.revision),
                            *_last_in_line(prefix, request.name, mine_key, seq),
                        ],
                        [put(mine_key, value, lease.id), *reads],
                        reads,
                        idempotent=True,
                        unanswered=functools.partial(self._doubt, mine_key),
                    )
                except EtcdError as error:
                    if not lease_gone(error):
                        raise
                    self._lease_gone(lease, error, losses)
                    losses += 1
                    continue  # a new lease, and a new place at the end of the line
                if created or ranged(responses[0]):
                    break
                # the line has an entry of a later turn than this one (arrivals that came
                # together, or this client's latest revision was behind): a later turn, once
                # a request for this key that may yet land is turned away
                turns += 1
                if turns == TURN_TRIES:
                    raise EtcdError(0, f"the line of {request.name!r} kept growing past its turn")
                with self._guard:
                    doubtful = mine_key in self._doubtful
                if doubtful:
                    self._end(mine_key, ("CREATE", 0))
                mine_key = self._new_key(request, tag, max(revision, self.gateway.revision) + 1)
            if created:
                responses = responses[1:]
            found = parse_line(ranged(responses[0])).contenders
            if not found:
                # a key of that name but not tumbler's (or a race with a deletion of it)
                raise EtcdError(0, f"the entry {mine_key!r} is not in its line")
            mine = found[0]
            entry = _OwnEntry(mine_key, mine.create_revision, mine.lease, read_at=began)
            with self._guard:
                self._entries[key] = entry
                self._uncertain.pop(key, None)
            writers, shared = _ahead(responses[1]), _ahead(responses[2])
            # keys past the turns: entries of the layout before them, or tombstones
            earlier_layout = bool(ranged(responses[3]) or ranged(responses[4]))
            place = None
            if not earlier_layout:
                place = _place(mine, request, line_prefix, writers, shared)
            if place is None:
                # the nearest entries are not enough to decide (keys no client wrote fill
                # them), or the line has entries of the layout before turns, or tombstones
                # (a lock-delay was used): the whole line
                revision, line = self._read_line(request.name)
                place = _place_in(line.contenders, mine, request, line_prefix)
                lapsed = line.lapsed() if place.granted else []
                if lapsed and self._held_back(line, mine, lapsed):
                    # the line lets it through, not the grants in their lock-delay: woken
                    # by a deletion in the line (a tombstone's, when its delay ends)
                    place = _Place(False, (line_prefix, prefix_end(line_prefix), False), [])
            try:
                check_limits(place.seen, tag, request.shared, request.limit)
            except PermitsMismatch:
                self._withdraw(key, entry)
                raise
            if place.granted:
                # the lease the entry went in on may be older than a grant may be timed by
                lease = self._fresh_lease(began)
                if entry.lease != lease.id:
                    # a waiter's entry lives with the waiters' short lease: a grant lives
                    # with the client's (the waiter behind a semaphore entry learns of the
                    # grant by the same write)
                    granted_value = entry_value(
                        request.holder,
                        request.shared,
                        request.limit,
                        self.config.lease_ttl,
                        granted=bool(request.shared and request.limit),
                    )
                    for moves in itertools.count():
                        try:
                            moved = self._move(entry, granted_value, lease.id)
                            break
                        except EtcdError as error:
                            if not lease_gone(error):
                                raise
                            # the client's lease is gone, not the entry, which is on the
                            # waiters' lease: it keeps its place, and moves to a new lease
                            self._lease_gone(lease, error, moves)
                        lease = self._fresh_lease(began)
                    if not moved:
                        # the waiters' lease ran out: a new place at the end of the line
                        with self._guard:
                            if self._entries.get(key) is entry:
                                del self._entries[key]
                        self.hub.notify(request.name, (tag,))
                        return None
                elif request.shared and request.limit and not created and not entry.granted:
                    self._announce_grant(entry, request)
                # the tombstone before the grant is returned: a holder that dies before this
                # never had it, so had no writes in flight for a delay to wait out
                if (
                    request.lock_delay
                    and entry.tomb is None
                    and not self._make_tomb(entry, request)
                ):
                    with self._guard:
                        if self._entries.get(key) is entry:
                            del self._entries[key]
                    self.hub.notify(request.name, (tag,))  # its key is gone: ask again now
                    return None
                entry.granted = True
                self.watches.drop(request.name, tag)
                # the lease was kept alive (or granted) at ``lease.expires - TTL`` at the
                # earliest; no grant outlives it
                ttl = min(request.ttl, self.config.lease_ttl, lease.expires - began)
                return Grant(request.name, request.owner, mine.create_revision, ttl)
            if not request.queue:
                self._withdraw(key, entry)
                return None
            if created and writers.count + shared.count >= self.config.max_waiters:
                self._check_line_cap(key, entry, request)
            if not self._to_waiters_lease(entry, value):
                with self._guard:
                    if self._entries.get(key) is entry:
                        del self._entries[key]
                self.hub.notify(request.name, (tag,))  # its key is gone: ask again now
                return None
            assert place.watch is not None
            self.watches.add(request.name, tag, *place.watch[:2], revision, puts=place.watch[2])
            return None

    def _new_key(self, request: GrantRequest, tag: str, seq: int) -> bytes:
        """The key of a new entry of ``request`` at turn ``seq``."""
        return entry_key(self.config.prefix, request.name, tag, not request.shared, seq)

    def _check_line_cap(
        self, key: tuple[str, str], entry: _OwnEntry, request: GrantRequest
    ) -> None:
        """Withdraw a new waiter's ``entry`` and raise ``TooManyWaiters`` if ``max_waiters``
        wait ahead of it. The line is read whole only when it is longer than that: each
        entry counts those created before it, so entries that arrive together count each
        other."""
        _revision, line = self._read_line(request.name)
        entries = [contender.entry() for contender in line.contenders]
        index = next((i for i, c in enumerate(line.contenders) if c.key == entry.key), len(entries))
        holding, _complete = let_through(entries[:index])
        if index - len(holding) >= self.config.max_waiters:
            self._withdraw(key, entry)
            raise line_full(self.config.max_waiters, request.name, self.url)

    def _announce_grant(self, entry: _OwnEntry, request: GrantRequest) -> None:
        """Rewrite a semaphore entry granted after waiting: the waiter behind it watches it."""
        value = entry_value(
            request.holder, request.shared, request.limit, self.config.lease_ttl, granted=True
        )
        self.gateway.txn(
            [compare(entry.key, "CREATE", entry.create_revision)],
            [put(entry.key, value, None)],
            [],
            idempotent=True,  # the same value again
        )

    def _withdraw(self, key: tuple[str, str], entry: _OwnEntry) -> bool:
        """Delete this client's ``entry`` if it is still the one made (the guard of etcd's
        own mutex lacked: a retried deletion never takes a newer key of the same name), and
        its tombstone with it: a released grant leaves no lock-delay."""
        self.watches.drop(key[0], owner_hash(key[1]))
        also = [] if entry.tomb is None else [delete(entry.tomb)]
        # kept until etcd has answered: a renewal meanwhile asks etcd rather than guess
        deleted = self._delete_guarded(entry.key, ("CREATE", entry.create_revision), also)
        with self._guard:
            if self._entries.get(key) is entry:
                del self._entries[key]
        if deleted:
            self.watches.changed(entry.key)
        return deleted

    def _delete_guarded(
        self, key: bytes, guard: tuple[str, int], also: Sequence[dict[str, Any]] = ()
    ) -> bool:
        """Delete ``key`` if ``guard`` holds, and do ``also`` with it; if etcd cannot be told
        now (no reply, or the call cancelled), the key is deleted at the client's next call
        (``_tidy``), and ``also`` is not done (a tombstone left: the grant ended other than
        by a release, as far as etcd can tell)."""
        try:
            if also:
                return self._end(key, guard, None, also)
            return self._end(key, guard)
        except BaseException:
            with self._guard:
                self._orphans[key] = guard
            raise

    def _doubt(self, key: bytes) -> None:
        """A grant request for ``key`` went unanswered: it may yet reach etcd."""
        with self._guard:
            self._doubtful.add(key)

    def _end(
        self,
        key: bytes,
        guard: tuple[str, int],
        timeout: float | None = None,
        also: Sequence[dict[str, Any]] = (),
    ) -> bool:
        """End the acquisition of entry ``key``: delete the key if ``guard`` holds. If a
        grant request for it may yet reach etcd, the key goes whatever the guard finds (that
        request may have made it again: the acquisition is over, and no other has the key),
        and the end is marked, on the client's lease, where such a request finds it: a key
        made then would be on that lease, and stay in line for as long as the client keeps
        it alive, which nobody else can end."""
        with self._guard:
            lease = self._lease if key in self._doubtful else None
        checks = [compare(key, *guard)]
        if lease is None:
            deleted, _revision, _responses = self.gateway.txn(
                checks, [delete(key), *also], [], timeout=timeout
            )
            return deleted
        ending = [delete(key), put(ended_key(self.config.prefix, key), b"", lease.id)]
        try:
            # ``also`` only if the guard holds: a tombstone of an entry gone stays
            deleted, _revision, _responses = self.gateway.txn(
                checks, [*ending, *also], ending, timeout=timeout
            )
        except EtcdError as error:
            if not lease_gone(error):
                raise
            self._lease_lost(lease)  # and, with it, every late request's chance
            return self._end(key, guard, timeout, also)
        with self._guard:
            self._doubtful.discard(key)
        return deleted

    def _tidy(self, timeout: float | None = None) -> None:
        """Delete the keys withdrawals could not (within ``timeout``, if given); those etcd
        still cannot be told of wait for the next call."""
        with self._guard:
            orphans = list(self._orphans.items())
        for key, guard in orphans:
            try:
                self._end(key, guard, timeout)
            except (EtcdError, GatewayUnavailable):
                return  # the call that follows meets the same trouble, and says so
            with self._guard:
                if self._orphans.get(key) == guard:
                    del self._orphans[key]
                for owner, entry in list(self._entries.items()):
                    if entry.key == key:
                        del self._entries[owner]
            self.watches.changed(key)

    # -- lock-delay: tombstones ------------------------------------------------------------

    def _make_tomb(self, entry: _OwnEntry, request: GrantRequest) -> bool:
        """Put the tombstone of ``entry``'s grant: a key on no lease, which outlives the
        client's, so that a grant that ends other than by a release is known to have ended
        so (its entry gone, its tombstone left). False if the entry is gone."""
        entry.tomb = tomb_key(entry.key)
        entry.delay = request.lock_delay
        entry.tomb_value = tomb_value(
            request.holder, request.lock_delay, entry.create_revision, request.shared, request.limit
        )
        made, _revision, _responses = self.gateway.txn(
            [compare(entry.key, "CREATE", entry.create_revision)],
            [put(entry.tomb, entry.tomb_value, 0)],
            [],
            idempotent=True,  # the same value again, on no lease
        )
        if not made:
            entry.tomb = None
        return made

    def _delay_lease(self, delay: float) -> int:
        """A lease of the lock-delay ``delay``: etcd times it and deletes what is attached to
        it when it ends (whole seconds, rounded up; etcd's floor may make it longer)."""
        lease, _ttl = self.gateway.grant_lease(max(1, math.ceil(delay)))
        return lease

    def _held_back(self, line: Line, mine: Contender, lapsed: list[Tombstone]) -> bool:
        """Whether grants in their lock-delay (``lapsed``, from ``line``) hold ``mine`` back,
        which its line lets through. The delay of each starts now if nobody noticed the end
        of its grant yet: it is attached to a lease of its delay, guarded by its mod
        revision (a second client that noticed it too changes nothing), and etcd deletes it
        when the delay ends."""
        for tomb in lapsed:
            if tomb.lease:
                continue
            lease = self._delay_lease(tomb.delay)
            attached, _revision, _responses = self.gateway.txn(
                [_unchanged(tomb.key, tomb.mod_revision), compare(tomb.entry_key, "CREATE", 0)],
                [relet(tomb.key, lease)],
                [],
            )
            if not attached:
                # another client attached it, or it was deleted: the waiter's watch of the
                # line, from before, sees its deletion either way
                self.gateway.revoke(lease)
        entries = [contender.entry() for contender in line.contenders]
        index = next(i for i, c in enumerate(line.contenders) if c.key == mine.key)
        ahead = [tomb.entry() for tomb in lapsed]
        return line_position([*ahead, *entries], index + len(ahead)) is not None

    def lapse(self, name: str, owner: str) -> None:
        """End ``owner``'s grant of ``name`` as lost: delete its entry and attach its
        tombstone to a lease of its lock-delay in one transaction, so the name stays closed
        for that long from now. Without a tombstone (no lock-delay) this is a release."""
        key = (name, owner)
        with self._guard:
            entry = self._entries.get(key)
        if entry is None:
            return  # its lease ended (the tombstone stays, for whoever notices), or released
        with translate_errors(self.url, name):
            if entry.tomb is None:
                self._withdraw(key, entry)
                return
            self.watches.drop(name, owner_hash(owner))
            lease = self._delay_lease(entry.delay)
            try:
                ended, _revision, _responses = self.gateway.txn(
                    [compare(entry.key, "CREATE", entry.create_revision)],
                    [delete(entry.key), put(entry.tomb, entry.tomb_value, lease)],
                    [],
                )
            except BaseException:
                # the entry goes when the client's lease does; its tombstone, on no lease,
                # is attached by whoever notices: the delay starts later, never sooner
                with self._guard:
                    self._orphans[entry.key] = ("CREATE", entry.create_revision)
                raise
            finally:
                with self._guard:
                    if self._entries.get(key) is entry:
                        del self._entries[key]
            if ended:
                self.watches.changed(entry.key)
            else:
                self.gateway.revoke(lease)

    def renew(self, name: str, owner: str, ttl: float) -> float | None:
        (granted,) = self.renew_all([Renewal(name, owner, ttl)], self.config.request_timeout)
        return granted

    def renew_all(self, renewals: Sequence[Renewal], timeout: float) -> list[float | None]:
        """Keep the client's lease alive, then read every renewed key in one transaction: a
        grant is renewed when etcd still has the lease and the key with its create revision
        (an operator's force_release deleted it otherwise). Two round trips however many
        grants; raises ``BackendUnavailable`` once ``timeout`` (at most the request timeout)
        has passed without an answer."""
        if math.isnan(timeout):
            raise InvalidTimeout("the renewal timeout is NaN", backend=self.url)
        began = time.monotonic()
        deadline = began + max(0.0, min(timeout, self.config.request_timeout))
        with self._guard:
            mine = [self._entries.get((renewal.name, renewal.owner)) for renewal in renewals]
            lease = self._lease
        refused: list[float | None] = [None] * len(renewals)
        granted = [entry for entry in mine if entry is not None and entry.granted]
        if lease is None or not granted:
            return refused  # nothing to confirm: no need to ask the server
        name = renewals[0].name if len(renewals) == 1 else None
        with translate_errors(self.url, name):
            leases = {lease.id: lease}
            if not lease.doomed:
                answer = self.gateway.lease_keep_alive(
                    lease.id, max(0.0, deadline - time.monotonic())
                )
                if answer.ttl <= 0:
                    self._lease_lost(lease)
                    return refused
                lease.confirm(began, answer, self.gateway.term)
            if lease.doomed:
                with self._leasing:
                    moved = self._rehome(lease, max(0.0, deadline - time.monotonic()))
                leases[moved.id] = moved
            found: dict[bytes, int] = {}
            for start in range(0, len(granted), MAX_TXN_OPS):
                batch = granted[start : start + MAX_TXN_OPS]
                _succeeded, _revision, responses = self.gateway.txn(
                    [],
                    [read(entry.key) for entry in batch],
                    [],
                    idempotent=True,
                    timeout=max(0.0, deadline - time.monotonic()),
                )
                for response in responses:
                    for kv in ranged(response):
                        found[kv["key"]] = kv["create_revision"]
        if self._orphans:
            self._tidy(max(0.0, deadline - time.monotonic()))
        granted_ttls: list[float | None] = []
        for renewal, entry in zip(renewals, mine, strict=True):
            on = None if entry is None else leases.get(entry.lease)
            # no more than the lease is good for from the renewal's start: a doomed lease's
            # keys that could not be moved are given up before a deposed leader ends it
            good_for = 0.0 if on is None else on.expires - began
            renewed = (
                entry is not None
                and entry.granted
                and found.get(entry.key) == entry.create_revision
                and good_for > 0
            )
            granted_ttls.append(min(renewal.ttl, good_for) if renewed else None)
        return granted_ttls

    def release(self, name: str, owner: str) -> bool:
        if self._orphans:
            self._tidy()
        key = (name, owner)
        with self._guard:
            entry = self._entries.get(key)
            mine_key = self._uncertain.get(key)
            lease = self._lease
        tag = owner_hash(owner)
        with translate_errors(self.url, name):
            if entry is not None:
                return self._withdraw(key, entry) and entry.granted
            self.watches.drop(name, tag)
            if mine_key is None or lease is None:
                return False  # nothing of this owner was ever created (or its lease is gone)
            # the create's reply was lost: its key, if made, is attached to this lease
            try:
                self._delete_guarded(mine_key, ("LEASE", lease.id))
            finally:
                with self._guard:
                    self._uncertain.pop(key, None)
            return False  # a lost create was never a grant its caller knew of

    def watch_state(self, name: str) -> EtcdStateWatch:
        return EtcdStateWatch(self, name)

    def watch(self, name: str, owner: str) -> HubWatch:
        return HubWatch(self.clock, name, self.hub, owner_hash(owner))

    def _read_line(self, name: str) -> tuple[int, Line]:
        prefix = line_key(self.config.prefix, name)
        revision, found = self.gateway.range(prefix, prefix_end(prefix), by_creation=True)
        return revision, parse_line(found)

    def _delay_left(self, tomb: Tombstone) -> float:
        """Seconds of ``tomb``'s lock-delay left: what its lease has left, once attached to
        one (etcd's floor may have made it longer than the delay: at most the delay is
        shown); the whole delay before."""
        if not tomb.lease:
            return tomb.delay
        reply = self.gateway.call("/v3/lease/timetolive", {"ID": str(tomb.lease)}, idempotent=True)
        return float(min(tomb.delay, max(0, int(reply.get("TTL", -1)))))

    def inspect(self, name: str) -> LockState:
        with translate_errors(self.url, name):
            _revision, read = self._read_line(name)
            lapsed = read.lapsed()
            left = [self._delay_left(tomb) for tomb in lapsed]
        line = read.contenders
        entries = [contender.entry() for contender in line]
        ahead = [tomb.entry() for tomb in lapsed]
        state = LockStateBuilder(name)
        state.malformed = len(read.malformed)
        for tomb, seconds in zip(lapsed, left, strict=True):
            state.add(
                token=tomb.token,
                shared=tomb.shared,
                limit=tomb.limit,
                expires_in=seconds,
                holder=tomb.holder,
                lapsed=True,
            )
        for index, contender in enumerate(line):
            # an entry that grants in their lock-delay hold back waits
            granted = line_position([*ahead, *entries], index + len(ahead)) is None
            # A grant lives as long as its holder's lease, whatever its ttl: how long it
            # would outlive a dead holder is that lease's TTL, which the entry records.
            state.add(
                token=contender.create_revision if granted else None,
                shared=contender.shared,
                limit=contender.limit,
                expires_in=contender.lease_ttl,
                holder=contender.holder if granted else "",
                session=granted,
            )
        return state.build()

    def lock_names(self) -> list[str]:
        locks = locks_key(self.config.prefix)
        with translate_errors(self.url):
            reply = self.gateway.call(
                "/v3/kv/range",
                {"key": b64(locks), "range_end": b64(prefix_end(locks)), "keys_only": True},
                idempotent=True,
            )
        return lock_names_of(self.config.prefix, [kv["key"] for kv in kvs(reply)])

    def force_release(self, name: str, note: str) -> int:
        """Delete every granted entry of ``name``, leaving ``note`` for each evicted owner, and
        every key of its line that no tumbler client wrote.

        The notes and the deletions are one transaction, guarded by each key's create
        revision: a holder whose key is gone finds its note at once, and no note is left for
        an entry that was not removed here. The notes are attached to a lease of their own
        that outlives the longest evicted lease by ``NOTE_GRACE``. Tried again when the line
        changed meanwhile.
        """
        prefix = self.config.prefix
        removed = 0
        conflicts = 0
        #: once a batch is removed, the holders found then: the waiters the removal let
        #: through are not the operator's to evict
        evicting: set[bytes] | None = None
        with translate_errors(self.url, name):
            while True:
                _revision, read = self._read_line(name)
                line = read.contenders
                entries = [contender.entry() for contender in line]
                # grants in their lock-delay are removed, not counted; entries they hold
                # back are waiters
                ahead = [tomb.entry() for tomb in read.lapsed()]
                holders = [
                    c
                    for i, c in enumerate(line)
                    if line_position([*ahead, *entries], i + len(ahead)) is None
                ]
                if evicting is not None:
                    holders = [c for c in holders if c.key in evicting]
                if not holders and not read.malformed and not read.tombs:
                    return removed
                # a deletion and a note for each holder, a deletion for each unreadable key,
                # within etcd's limit per transaction
                batch = holders[: MAX_TXN_OPS // 2]
                strays = read.malformed[: MAX_TXN_OPS - 2 * len(batch)]
                # every tombstone too: an operator's word ends a lock-delay (a live grant's
                # release then finds its tombstone gone, which changes nothing)
                tombs = read.tombs[: MAX_TXN_OPS - 2 * len(batch) - len(strays)]
                note_lease = None
                if batch:
                    # lease_ttl is at most a year (parse_line): etcd takes such a lease
                    longest = max(contender.lease_ttl for contender in batch)
                    note_lease, _ttl = self.gateway.grant_lease(math.ceil(longest + NOTE_GRACE))
                succeeded, _revision, _responses = self.gateway.txn(
                    [compare(c.key, "CREATE", c.create_revision) for c in batch]
                    + [compare(key, "CREATE", created) for key, created in strays]
                    + [compare(tomb.key, "CREATE", tomb.create_revision) for tomb in tombs],
                    [delete(c.key) for c in batch]
                    + [
                        put(notes_key(prefix, name, c.owner), note.encode(), note_lease)
                        for c in batch
                    ]
                    + [delete(key) for key, _created in strays]
                    + [delete(tomb.key) for tomb in tombs],
                    [],
                )
                if succeeded:
                    if evicting is None:
                        evicting = {c.key for c in holders}
                    removed += len(batch)
                    for contender in batch:
                        self.watches.changed(contender.key)
                    self.hub.notify(name)
                    continue  # a read lock may have had more holders than one batch
                if note_lease is not None:
                    self.gateway.revoke(note_lease)
                conflicts += 1
                if conflicts == FORCE_RELEASE_TRIES:
                    raise EtcdError(0, f"the line of {name!r} kept changing during force_release")

    def evicted(self, name: str, owner: str) -> str | None:
        """The note ``force_release`` left for ``owner``'s grant of ``name``, if it is kept."""
        with translate_errors(self.url, name):
            _revision, found = self.gateway.range(
                notes_key(self.config.prefix, name, owner_hash(owner))
            )
        return found[0]["value"].decode("utf-8", "replace") if found else None


__all__ = ["EtcdBackend", "KeyWatches"]
