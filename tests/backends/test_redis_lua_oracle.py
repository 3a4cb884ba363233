"""Redis's grant and wake-up Lua scripts, checked against ``tumbler._core`` on random tables.

SQLite and memory decide grants with ``_core.decide``; Redis restates that rule in Lua over
sorted-set indexes (``tumbler.backends.redis.lua``), and its release wakes, by pub/sub, just
the waiters it lets through. These properties hold the Lua to the Python rule:

- **grant**: for a random request against a random table of one lock name, GRANT's answer
  (granted with a new token, already held with the old one, waiting in line, or
  ``PERMITS_MISMATCH``) is what ``decide`` and ``check_limits`` say for the same live entries
  and lapsed grants (``Entry.lapsed``), and the table it leaves is the one that answer implies:
  expired entries gone (a lapsed grant kept), the owner's entry granted (with its lock-delay) or
  in line at its place (an earlier entry keeps its arrival number, a new one comes last),
  nothing else changed; nothing at all for the owner of a lapsed grant. When every live entry is
  fair, the answer also agrees with ``line_position`` (the order-of-the-line rule ZooKeeper
  uses).
- **release**: the waiters a RELEASE wakes are exactly those that ``decide`` would grant if
  each retried now, in arrival order (the oracle ``let_through`` below, written from that
  sentence, not from the Lua), among the first ``WAKE_SCAN`` waiters: no lost wake-up, no
  extra one, but for the documented extras (the *backup* wake-up to the first waiter that may
  not go, which only makes it re-check) and removals (a waiter whose client is gone, when the
  release may judge it). Where the release may judge, a waiter that left hand-off terms is
  granted by the release itself, with a token above every one before, a provisional lease
  and the lock-delay of its terms, and its wake-up says so. A lapsed grant counts as the
  grant it was for whom the release lets through, and its owner's release changes nothing.

Tables are made by the scripts themselves: a random sequence of grant attempts (queueing or not,
of random owners, kinds (some with a lock-delay) and clients), releases, and holders that crash.
A crash, and an entry left expired in the final table, are the one thing written by hand: the
entry's expiry (in its hash value and its ``t`` score, exactly as the scripts keep both) is
moved to the server's present; a grant with a lock-delay is then lapsed, for the ``LONG_MS``
delay every such owner asks for. Time passing would do the same to the keys, but waiting for it
would cost a sleep per example, and every script drops the expired entries at once, so only a
table aged after its last script run holds any. Every other time is the server's (``TIME``), and
every live entry's lease or waiter entry lasts ``LONG_MS``, far longer than an example runs, so
that no entry expires by itself between reading the table and running a script.

The scripts are the same for both flavours of the backend (each only passes them arguments),
so these tests run them with a blocking redis-py client: there is no asyncio twin to check.
Real redis-server only (the session's ``redis_server``); each example has a key prefix of its
own and deletes its keys.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest
import redis
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.search import THOROUGH, examples
from tumbler import _core as core
from tumbler._core import Decision, Entry
from tumbler.backends.redis import lua
from tumbler.backends.redis.common import BACKUP_FAIR_MS, BACKUP_RETRY_MS, HAND_OFF_CONFIRM_MS
from tumbler.errors import PermitsMismatch
from tumbler.testing.backends.redis.server import RedisServer

NAME = "orders:42"
#: examples per property (twice as many for releases): about 6 s in all on an idle machine;
#: a thorough depth (tests/search.py) searches harder
EXAMPLES = 3000 if THOROUGH else examples(150)
#: every live lease and waiter entry: far longer than any example runs
LONG_MS = 600_000
#: the raw owner ids of the random tables; a few, so that owners try again
OWNERS = [f"owner-{i}" for i in range(8)]
#: the clients whose channels wake waiters ("": a waiter whose client has not subscribed yet)
CLIENTS = ["", "client-a", "client-b", "client-c"]
SUBSCRIBERS = CLIENTS[1:]
#: the clock readings clients send ("": a client that takes no hand-off)
STAMPS = ["", "", "1000", "123456789"]
#: an end marker, published after a release: its arrival means every wake-up has arrived
SENTINEL = "sentinel"

#: the release modes the backend uses (judge, backup_ms, retry_ms): one server, where a
#: wake-up that reaches nobody means the waiter is gone, and a grant handed over is
#: provisional; Redis Cluster, where nobody is judged and the first waiter held back gets a
#: backup wake-up
SINGLE = (1, HAND_OFF_CONFIRM_MS, 0)
CLUSTER = (0, BACKUP_FAIR_MS, BACKUP_RETRY_MS)
#: the releases that build a table: nobody judged (no subscriber listens then), no backup
QUIET = (0, 0, 0)


def owner_hash(owner: str) -> str:
    """How the scripts store an owner (``redis.sha1hex``)."""
    return hashlib.sha1(owner.encode()).hexdigest()


RAW_OWNER = {owner_hash(owner): owner for owner in [*OWNERS, "owner-new", "owner-unknown"]}


@dataclass(frozen=True)
class Stored:
    """One entry of the lock's hash, as ``_core`` sees it plus what only Redis keeps: its
    expiry, its client's channel, its lock-delay, and its hand-off terms (``ttl_ms|stamp|1``,
    and ``|delay_ms`` if it asked for one, without the time they were written) if it left
    any."""

    entry: Entry
    expires_ms: int
    client: str
    terms: str | None = None
    delay_ms: int = 0

    def live(self, now_ms: int) -> bool:
        return self.expires_ms > now_ms

    def counts(self, now_ms: int) -> bool:
        """Live, or a grant lapsed within its lock-delay."""
        return self.live(now_ms) or (
            self.entry.granted and self.expires_ms + self.delay_ms > now_ms
        )

    def seen(self, now_ms: int) -> Entry:
        """The entry as the rule sees it: lapsed once its lease ran out."""
        return self.entry if self.live(now_ms) else self.entry._replace(lapsed=True)


def parse(owner: str, value: str) -> Stored:
    """An entry in the scripts' format ``seq|shared|limit|fair|token|expires_ms|client|holder``
    (a grant with a lock-delay: ``...|expires_ms|+delay_ms|client|holder``)."""
    seq, shared, limit, fair, token, expires, client, holder = value.split("|", 7)
    delay = 0
    if client.startswith("+"):
        delay = int(client[1:])
        client, _holder = holder.split("|", 1)
    entry = Entry(
        owner=owner,
        seq=int(seq),
        shared=shared == "1",
        limit=int(limit),
        fair=fair == "1",
        token=int(token) if token else None,
    )
    return Stored(entry, int(expires), client, delay_ms=delay)


def terms_delay(terms: str) -> int:
    """The lock-delay of hand-off terms as ``Stored`` keeps them (0: none)."""
    fields = terms.split("|")
    return int(fields[3]) if len(fields) > 3 else 0


@dataclass(frozen=True)
class Request:
    owner: str  # raw, as a client passes it
    shared: bool
    limit: int
    fair: bool
    queue: bool = True
    client: str = ""
    #: the client's clock reading, sent by a client that takes hand-offs ("": it does not)
    stamp: str = ""
    #: the lock-delay its grants keep (0: none)
    delay_ms: int = 0


class Lock:
    """One lock name's keys under a prefix of the example's own, and the scripts run on them."""

    def __init__(self, admin: redis.Redis) -> None:
        self.admin = admin
        self.prefix = f"tumbler:oracle-{uuid.uuid4().hex[:12]}"
        self.keys = lua.Keys(self.prefix).lock_keys(NAME)
        self._grant = admin.register_script(lua.GRANT)
        self._release = admin.register_script(lua.RELEASE)

    def now_ms(self) -> int:
        seconds, micros = self.admin.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def read(self) -> dict[str, Stored]:
        """Every entry of the hash, expired ones included (the scripts wrote them all), with
        the hand-off terms of each (every terms field must belong to a waiter's entry)."""
        raw: dict[str, str] = self.admin.hgetall(self.keys[0])  # type: ignore[assignment]
        terms: dict[str, str] = self.admin.hgetall(self.keys[8])  # type: ignore[assignment]
        table = {owner: parse(owner, value) for owner, value in raw.items()}
        for owner, value in terms.items():
            assert owner in table, (owner, value, table)
            assert not table[owner].entry.granted, (owner, value, table)
            fields = value.split("|")
            del fields[2]  # the time they were written
            table[owner] = replace(table[owner], terms="|".join(fields))
        return table

    def sequence(self) -> int:
        return int(self.admin.get(self.keys[1]) or 0)  # type: ignore[arg-type]

    def grant(self, request: Request, ttl_ms: int = LONG_MS) -> Any:
        return self._grant(
            keys=self.keys,
            args=[
                request.owner,
                int(request.shared),
                request.limit,
                int(request.fair),
                ttl_ms,
                "a test",
                int(request.queue),
                LONG_MS,  # waiter_ttl_ms
                request.client,
                10_000,  # max_waiters: a line never fills here
                request.stamp,
                request.delay_ms or "",
            ],
        )

    def release(self, owner: str, mode: tuple[int, int, int]) -> int:
        judge, backup_ms, retry_ms = mode
        channels = lua.Keys(self.prefix).client_channel_prefix()
        args = [owner, channels, NAME, judge, backup_ms, retry_ms]
        return int(self._release(keys=self.keys, args=args))

    def expire(self, owner: str) -> None:
        """Make the owner's entry expired now, as time passing would: its expiry moves to the
        server's present in the hash and in the ``t`` index (where a grant's lock-delay comes
        on top), nothing else changes."""
        owner = owner_hash(owner)
        value = self.admin.hget(self.keys[0], owner)
        if value is None:
            return
        fields = str(value).split("|", 7)
        now_ms = self.now_ms()
        fields[5] = str(now_ms)
        self.admin.hset(self.keys[0], owner, "|".join(fields))
        stored = parse(owner, str(value))
        delay = stored.delay_ms if stored.entry.granted else 0
        self.admin.zadd(self.keys[2], {owner: now_ms + delay})

    def channel(self, client: str) -> str:
        return lua.Keys(self.prefix).client_channel(client)

    def delete(self) -> None:
        self.admin.delete(*self.keys)


@pytest.fixture(scope="module")
def admin(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of the session's server (module-scoped: hypothesis runs many examples in one
    call of the test, and each example takes a key prefix of its own)."""
    client = redis_server.client(decode_responses=True)
    yield client
    client.close()


# -- the oracle ------------------------------------------------------------------------------


def live_entries(table: dict[str, Stored], now_ms: int) -> list[Entry]:
    """The entries the rule decides on: the live ones and the lapsed grants (marked so)."""
    return [stored.seen(now_ms) for stored in table.values() if stored.counts(now_ms)]


@dataclass(frozen=True)
class Wakes:
    """What a release should do to the line: whom it lets through, whom it drops (a waiter
    whose client is gone), and the first waiter it holds back."""

    let_through: list[str]
    dropped: list[str]
    held_back: str | None


def let_through(
    entries: Sequence[Entry],
    clients: dict[str, str],
    alive: set[str],
    judge: bool,
    scan: int = lua.WAKE_SCAN,
) -> Wakes:
    """The waiters a release lets through: those ``decide`` grants if each retries now, in
    arrival order, each one let through counted as granted for those behind it; among the
    first ``scan`` waiters only (the rest re-check by themselves). A waiter that may go but
    whose client is gone (it has a channel, nobody listens to it, and the release may judge)
    is dropped instead, and does not count.
    """
    table = list(entries)
    waiters = sorted((entry for entry in table if not entry.granted), key=lambda e: e.seq)
    through: list[str] = []
    dropped: list[str] = []
    held_back: str | None = None
    for waiter in waiters[:scan]:
        if core.decide(table, waiter.owner, waiter.shared, waiter.limit, waiter.fair) is not (
            Decision.GRANT
        ):
            held_back = held_back or waiter.owner
            continue
        index = table.index(waiter)
        client = clients[waiter.owner]
        if judge and client != "" and client not in alive:
            dropped.append(waiter.owner)
            del table[index]
        else:
            through.append(waiter.owner)
            table[index] = waiter._replace(token=waiter.seq)
    return Wakes(through, dropped, held_back)


# -- building random tables with the scripts -------------------------------------------------

#: one step of a table's history: a grant attempt (a request), a release or a crash (an owner)
Step = tuple[str, Any]


@dataclass(frozen=True)
class History:
    """How a random table came to be: each owner's kind of request (an owner asks for the
    same thing every time, as a client does), the steps, and the owners whose entries have
    expired by the time of the request or release checked."""

    limit: int  # the name's usual shared limit
    kinds: dict[str, Request]
    steps: list[Step]
    aged: list[str]


#: how often an owner asks for a shared grant, or a fair one, or a lock-delay: per table, so
#: that some tables are all semaphore permits, or all fair, and others mixed
SHARES = [0.0, 0.5, 0.8, 1.0]
#: how often an owner asks for a lock-delay (of ``LONG_MS``: a crashed grant of its stays
#: lapsed for the whole example)
DELAYS = [0.0, 0.0, 0.5, 1.0]


def kinds(
    limit: int, shared: float = 0.5, fair: float = 0.5, delayed: float = 0.0
) -> st.SearchStrategy[Request]:
    """One owner's kind of request: shared, fair or with a lock-delay with these odds. A
    shared one mostly has the name's limit, now and then another (PERMITS_MISMATCH, or the
    name's new limit once no shared entry is left)."""
    odds = st.sampled_from([0.1, 0.3, 0.5, 0.7, 0.9])
    return st.builds(
        lambda is_shared, permits, is_fair, has_delay: normalised(
            Request(
                "",
                is_shared < shared,
                permits,
                is_fair < fair,
                delay_ms=LONG_MS if has_delay < delayed else 0,
            )
        ),
        odds,
        st.sampled_from([limit] * 5 + [0, 1, 2, 3]),
        odds,
        odds,
    )


def normalised(request: Request) -> Request:
    """An exclusive request as the lock layer makes it: limit 1."""
    return request if request.shared else replace(request, limit=1)


@st.composite
def histories(draw: st.DrawFn) -> History:
    """Owners arrive one after the other (each tries once, most queue if they must), then
    they come and go at random: tries again (with the channel of its client's subscription,
    or none yet), releases, crashes."""
    limit = draw(st.sampled_from([0, 1, 2, 2, 3]))
    shared, fair = draw(st.sampled_from(SHARES)), draw(st.sampled_from(SHARES))
    delayed = draw(st.sampled_from(DELAYS), label="delayed")
    owners = OWNERS[: draw(st.integers(3, len(OWNERS)), label="owners")]
    kind = kinds(limit, shared, fair, delayed)
    kinds_of = {owner: replace(draw(kind), owner=owner) for owner in owners}
    queue = st.sampled_from([True, True, True, False])
    client = st.sampled_from(CLIENTS)
    stamp = st.sampled_from(STAMPS)

    def attempt(owner: str) -> st.SearchStrategy[Step]:
        return st.builds(
            lambda q, c, t: ("grant", replace(kinds_of[owner], queue=q, client=c, stamp=t)),
            queue,
            client,
            stamp,
        )

    steps: list[Step] = [draw(attempt(owner)) for owner in owners]
    owner = st.sampled_from(owners)
    churn = st.one_of(
        *[owner.flatmap(attempt)] * 4,
        owner.map(lambda o: ("release", o)),
        owner.map(lambda o: ("crash", o)),
    )
    steps += draw(st.lists(churn, max_size=8), label="churn")
    aged = draw(st.lists(owner, max_size=1), label="aged")
    return History(limit, kinds_of, steps, aged)


def build(lock: Lock, history: History) -> None:
    """Run the history with the scripts, then let the ``aged`` owners' entries expire."""
    for kind, what in history.steps:
        if kind == "grant":
            try:
                lock.grant(what)
            except redis.ResponseError as error:
                if not str(error).startswith("PERMITS_MISMATCH"):  # the one refusal expected
                    raise
        elif kind == "release":
            lock.release(what, QUIET)
        else:
            lock.expire(what)
    for owner in history.aged:
        lock.expire(owner)


def checked_now(lock: Lock, table: dict[str, Stored]) -> int:
    """The server's time, checked to be far from every entry's expiry and lapsed grant's
    end: no entry expires or stops counting between this reading and the script run that
    follows."""
    now_ms = lock.now_ms()
    for stored in table.values():
        for ends in (stored.expires_ms, stored.expires_ms + stored.delay_ms):
            assert not now_ms < ends < now_ms + LONG_MS // 2, stored
    return now_ms


# -- the grant property ----------------------------------------------------------------------


def request_for(data: st.DataObject, history: History) -> Request:
    """A request of an owner of the history (of its kind: an owner of the table tries again,
    any other comes anew), or of a newcomer of any kind."""
    client = data.draw(st.sampled_from(CLIENTS), label="client")
    stamp = data.draw(st.sampled_from(STAMPS), label="stamp")
    queue = data.draw(st.booleans(), label="queue")
    owner = data.draw(st.sampled_from([*history.kinds, "owner-new"]), label="owner")
    if owner in history.kinds:
        kind = history.kinds[owner]
    else:
        kind = replace(data.draw(kinds(history.limit, delayed=0.5), label="kind"), owner=owner)
    return replace(kind, queue=queue, client=client, stamp=stamp)


#: expect_decision's answer for a request that check_limits refuses
MISMATCH = "mismatch"


def expect_decision(live: list[Entry], owner: str, request: Request) -> Decision | str:
    """decide()'s answer, or MISMATCH if it refuses the request for its limit (as
    check_limits does)."""
    try:
        return core.decide(live, owner, request.shared, request.limit, request.fair)
    except PermitsMismatch:
        with pytest.raises(PermitsMismatch):
            core.check_limits(live, owner, request.shared, request.limit)
        return MISMATCH


def check_line_position(live: list[Entry], owner: str, request: Request, granted: bool) -> None:
    """In a line where everyone is fair, the grant rule is the order-of-the-line rule."""
    mine = next((entry for entry in live if entry.owner == owner), None)
    line = sorted((entry for entry in live if entry.owner != owner), key=lambda e: e.seq)
    if mine is None:
        last = max((entry.seq for entry in line), default=0) + 1
        mine = Entry(owner, last, request.shared, request.limit, True, None)
    line.append(mine)
    line.sort(key=lambda e: e.seq)
    assert (core.line_position(line, line.index(mine)) is None) == granted, (line, mine)


def check_grant(lock: Lock, request: Request) -> None:
    """Run GRANT for the request and check its answer, and the table it leaves, against
    what ``_core`` says of the table as it was."""
    before = lock.read()
    sequence = lock.sequence()
    t0 = checked_now(lock, before)
    live = live_entries(before, t0)
    owner = owner_hash(request.owner)
    mine = next((entry for entry in live if entry.owner == owner), None)
    expected = expect_decision(live, owner, request)
    event(f"expected {expected}")
    try:
        answer: Any = lock.grant(request)
    except redis.ResponseError as error:
        answer = str(error)
    t1 = lock.now_ms()
    after = lock.read()
    kept = {o: stored for o, stored in before.items() if stored.counts(t0)}
    context = (request, mine, live)

    if expected == MISMATCH:
        conflicting = {entry.limit for entry in live if entry.shared and entry.owner != owner} - {
            request.limit
        }
        assert isinstance(answer, str), context
        kind, permits = answer.split(" ")
        assert kind == "PERMITS_MISMATCH", context
        assert int(permits) in conflicting, context
        assert after == kept, context
        return
    assert isinstance(answer, list), (answer, context)
    if mine is not None and mine.lapsed:
        event("the owner of a lapsed grant tried again")
        assert answer == [0], context  # refused as everyone is (expected is WAIT)
        assert after == kept, context  # and it leaves no place in line
        return
    if expected is Decision.HELD:
        assert mine is not None
        # the lease left, which began with the grant, not with this request
        expires = before[owner].expires_ms
        assert answer[:2] == [1, mine.token], context
        assert len(answer) == 3, context
        assert expires - t1 <= answer[2] <= expires - t0, context
        assert after == kept, context
        return
    if all(entry.fair for entry in live) and request.fair:
        check_line_position(live, owner, request, expected is Decision.GRANT)

    newest = max([sequence, *(e.seq for e in live), *(e.token or 0 for e in live)])
    if expected is Decision.GRANT:
        assert answer[0] == 1, context
        token = int(answer[1])
        assert token > newest, context  # fencing: above every token and number given before
        base = mine or Entry(owner, token, request.shared, request.limit, request.fair, None)
        ours = after.pop(owner)
        assert ours.entry == base._replace(token=token), context
        assert ours.delay_ms == request.delay_ms, context
        assert t0 + LONG_MS <= ours.expires_ms <= t1 + LONG_MS, context
        assert ours.client == (before[owner].client if mine else request.client), context
        assert ours.terms is None, context  # a grant takes no hand-off
        kept.pop(owner, None)
        assert after == kept, context
        return
    assert answer == [0], context
    if mine is None and not request.queue:
        assert after == kept, context  # a try that does not queue leaves nothing
        return
    ours = after.pop(owner)
    if mine is None:
        assert ours.entry.seq > newest, context  # a new waiter comes last in line
        base = Entry(owner, ours.entry.seq, request.shared, request.limit, request.fair, None)
    else:
        base = mine  # one in line keeps its place
    assert ours.entry == base, context
    assert ours.client == request.client, context  # it tells its current channel
    # a waiter whose client listens leaves the terms of this request for a hand-off, which
    # say that it renews the grant it takes (its client sends a stamp only then), and the
    # lock-delay that grant keeps; its entry keeps none (only a grant's does)
    terms = f"{LONG_MS}|{request.stamp}|1" if request.client and request.stamp else None
    if terms is not None and request.delay_ms:
        terms += f"|{request.delay_ms}"
    assert ours.terms == terms, context
    assert ours.delay_ms == 0, context
    assert t0 + LONG_MS <= ours.expires_ms <= t1 + LONG_MS, context
    kept.pop(owner, None)
    assert after == kept, context


@settings(max_examples=EXAMPLES, deadline=None)
@given(history=histories(), data=st.data())
def test_grant_script_decides_as_core(
    admin: redis.Redis, history: History, data: st.DataObject
) -> None:
    lock = Lock(admin)
    try:
        build(lock, history)
        check_grant(lock, request_for(data, history))
    finally:
        lock.delete()


# -- the release property --------------------------------------------------------------------


class Listener:
    """The subscribers of a release's wake-ups: one pub/sub connection on the live clients'
    channels, so a wake-up on a channel nobody listens to reaches nobody, as when a waiter's
    process died."""

    def __init__(self, lock: Lock, alive: set[str]) -> None:
        self.lock = lock
        self.pubsub = lock.admin.pubsub()
        self.channels = [lock.channel(client) for client in sorted(alive)]
        self.sentinel = lock.channel(SENTINEL)
        self.pubsub.subscribe(*self.channels, self.sentinel)
        for _ in range(len(self.channels) + 1):
            self._next("subscribe")

    def _next(self, kind: str) -> dict[str, Any]:
        message = self.pubsub.get_message(timeout=10.0)
        assert message is not None, f"no {kind} message within 10 s"
        assert message["type"] == kind, message
        return message

    def heard(self) -> list[tuple[str, str]]:
        """(client, message) of every wake-up published so far, in order."""
        self.lock.admin.publish(self.sentinel, "end")
        heard = []
        while True:
            message = self._next("message")
            if message["channel"] == self.sentinel:
                return heard
            client = message["channel"][len(self.lock.channel("")) :]
            heard.append((client, message["data"]))

    def close(self) -> None:
        self.pubsub.close()


@st.composite
def releases(draw: st.DrawFn, table: dict[str, Stored], now_ms: int) -> str:
    """Whose release: mostly a holder, else a waiter, a lapsed grant, an expired entry or an
    unknown owner."""
    holders = [o for o, s in table.items() if s.live(now_ms) and s.entry.granted]
    others = [o for o, s in table.items() if not (s.live(now_ms) and s.entry.granted)]
    choices = [st.sampled_from(holders)] * 3 if holders else []
    if others:
        choices.append(st.sampled_from(others))
    if not choices or draw(st.integers(0, 9)) == 0:
        return "owner-unknown"
    return RAW_OWNER[draw(st.one_of(choices))]


def check_release(lock: Lock, owner: str, alive: set[str], mode: tuple[int, int, int]) -> None:
    judge, backup_ms, retry_ms = mode
    before = lock.read()
    t0 = checked_now(lock, before)
    released = owner_hash(owner)
    clients = {o: stored.client for o, stored in before.items()}
    listener = Listener(lock, alive)
    try:
        answer = lock.release(owner, mode)
        t1 = lock.now_ms()
        heard = listener.heard()
    finally:
        listener.close()
    after = lock.read()
    context = (owner, alive, mode, sorted(before.values(), key=lambda s: s.entry.seq))

    if released not in before:
        assert (answer, heard) == (0, []), context  # an unknown owner changes nothing
        assert after == before, context
        return
    if before[released].counts(t0) and before[released].seen(t0).lapsed:
        event("the owner of a lapsed grant released it")
        assert (answer, heard) == (0, []), context  # it stays for its lock-delay
        assert after == before, context
        return
    was_held = before[released].live(t0) and before[released].entry.granted
    assert answer == int(was_held), context
    live = [e for e in live_entries(before, t0) if e.owner != released]
    wakes = let_through(live, clients, alive, bool(judge))
    if wakes != let_through(live, clients, alive, bool(judge)):
        event("the known gap: a waiter behind a fair one held back is not woken")

    # where it may judge, a release grants a waiter that left hand-off terms itself, for a
    # provisional lease where it has a window to cut it to (backup_ms)
    handed = [o for o in wakes.let_through if judge and before[o].terms is not None]
    lease_ms = min(LONG_MS, backup_ms) if backup_ms else LONG_MS
    expected = [
        (clients[o], f"{'=' if o in handed else ''}{o} {NAME}")
        for o in wakes.let_through
        if clients[o] in alive
    ]
    backup = wakes.held_back
    cut = False
    dropped_behind: list[str] = []
    if backup_ms and backup and wakes.let_through and clients[backup] != "":
        # the woken fair waiters' entries are cut when the one held back is fair (a grant
        # handed over has its own lease), and it tries again when they, or the provisional
        # grants, run out
        woken = [o for o in wakes.let_through if o not in handed]
        cut = before[backup].entry.fair and any(before[o].entry.fair for o in woken)
        delay = backup_ms if cut or handed else retry_ms
        # where it may judge, a backup that reaches nobody drops its waiter, and the next
        # one held back is told instead
        behind = [
            e.owner
            for e in sorted(live, key=lambda e: e.seq)
            if not e.granted
            and e.seq > before[backup].entry.seq
            and e.owner not in wakes.let_through
            and e.owner not in wakes.dropped
        ]
        told: str | None = backup
        while delay and judge and told and clients[told] != "" and clients[told] not in alive:
            dropped_behind.append(told)
            told = behind.pop(0) if behind else None
        if dropped_behind:
            event("a backup wake-up reached nobody, and the next waiter was told")
        if delay and told and clients[told] in alive:
            expected.append((clients[told], f"~{delay}:{told} {NAME}"))
    holders = sum(e.granted for e in live)
    waiters = len(live) - holders
    event(f"{holders} left holding, {waiters} waiting, {len(wakes.let_through)} let through")
    if any(e.lapsed for e in live):
        event("a lapsed grant held the line")
    sequence = max([lock_sequence_before(before), *(e.token or 0 for e in live)])
    heard, tokens = read_hand_offs(
        heard, before, sequence, None if lease_ms == LONG_MS else lease_ms
    )
    if tokens:
        event("a release handed the lock over")
    heard_owners = {text.split(" ")[0].lstrip("=") for _, text in heard if text[0] != "~"}
    expected_owners = {text.split(" ")[0].lstrip("=") for _, text in expected if text[0] != "~"}
    # named apart first, for a readable failure: a waiter that may go and was not woken, and
    # one woken that may not go
    assert not expected_owners - heard_owners, ("lost wake-ups", heard, expected, context)
    assert not heard_owners - expected_owners, ("woken but may not go", heard, expected, context)
    assert heard == expected, context

    gone = {released, *wakes.dropped, *dropped_behind}
    kept = {o: s for o, s in before.items() if s.counts(t0) and o not in gone}
    for o, token in tokens.items():
        # granted by the release: the token of its wake-up, the lease of its terms (cut), and
        # the lock-delay its terms carried
        assert t0 + lease_ms <= after[o].expires_ms <= t1 + lease_ms, context
        entry = kept[o].entry._replace(token=token)
        terms = kept[o].terms
        assert terms is not None
        kept[o] = replace(
            kept[o],
            entry=entry,
            expires_ms=after[o].expires_ms,
            terms=None,
            delay_ms=terms_delay(terms),
        )
    if cut:
        # a woken fair waiter has backup_ms to come before the fair one behind may pass it
        for o in wakes.let_through:
            if before[o].entry.fair and o not in handed:
                assert t0 + backup_ms <= after[o].expires_ms <= t1 + backup_ms, context
                kept[o] = replace(kept[o], expires_ms=after[o].expires_ms)
    assert after == kept, context


def lock_sequence_before(table: dict[str, Stored]) -> int:
    """The highest arrival number or token the table's entries show (the sequence key may be
    higher still: a token is checked against what the entries show, and for order)."""
    return max(
        [0, *(s.entry.seq for s in table.values()), *(s.entry.token or 0 for s in table.values())]
    )


def read_hand_offs(
    heard: list[tuple[str, str]], before: dict[str, Stored], newest: int, lease_ms: int | None
) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """The wake-ups heard, with each hand-off's ``=<token>,<stamp>,<elapsed>[,<lease>]:<owner>
    <name>`` written ``=<owner> <name>``, and the tokens they carried, by owner: each checked
    to be above every token and arrival number before, in the order they were sent, with the
    waiter's own stamp, a time that did not run backwards, and the provisional lease
    ``lease_ms`` (None: the whole lease, unsaid)."""
    pattern = re.compile(rf"=(\d+),(\d+),(\d+)(?:,(\d+))?:([0-9a-f]+) {re.escape(NAME)}")
    written: list[tuple[str, str]] = []
    tokens: dict[str, int] = {}
    for client, text in heard:
        match = pattern.fullmatch(text)
        if match is None:
            assert not text.startswith("="), text
            written.append((client, text))
            continue
        token, stamp, _elapsed, lease, owner = match.groups()
        terms = before[owner].terms
        assert terms is not None, (text, before)
        assert terms.split("|")[1] == stamp, (text, terms)
        assert (None if lease is None else int(lease)) == lease_ms, (text, lease_ms)
        assert int(token) > max([newest, *tokens.values()]), (text, newest, tokens)
        tokens[owner] = int(token)
        written.append((client, f"={owner} {NAME}"))
    return written, tokens


@settings(max_examples=2 * EXAMPLES, deadline=None)  # its shapes are rarer
@given(
    history=histories(),
    # mostly every client listening, so that a wrong wake-up is heard
    alive=st.sampled_from([set(SUBSCRIBERS)] * 3 + [set(SUBSCRIBERS[:2]), {SUBSCRIBERS[0]}, set()]),
    mode=st.sampled_from([SINGLE, CLUSTER]),
    data=st.data(),
)
def test_release_wakes_exactly_the_waiters_core_lets_through(
    admin: redis.Redis,
    history: History,
    alive: set[str],
    mode: tuple[int, int, int],
    data: st.DataObject,
) -> None:
    lock = Lock(admin)
    try:
        build(lock, history)
        entries = lock.read()
        owner = data.draw(releases(entries, lock.now_ms()), label="released")
        check_release(lock, owner, alive, mode)
    finally:
        lock.delete()


def test_a_release_wakes_no_more_than_wake_scan_waiters(admin: redis.Redis) -> None:
    """Behind a writer, more readers wait than a release looks at: it wakes the first
    ``WAKE_SCAN`` (the others re-check by themselves), as the oracle bounded so says."""
    lock = Lock(admin)
    try:
        assert lock.grant(Request("writer", False, 1, False)) == [1, lock.sequence()]
        for index in range(lua.WAKE_SCAN + 5):
            reader = Request(f"reader-{index}", True, 0, False, client="client-a")
            assert lock.grant(reader) == [0]
        before = lock.read()
        clients = {o: stored.client for o, stored in before.items()}
        live = [e.entry for e in before.values() if e.entry.owner != owner_hash("writer")]
        wakes = let_through(live, clients, {"client-a"}, judge=True)
        assert len(wakes.let_through) == lua.WAKE_SCAN
        listener = Listener(lock, {"client-a"})
        try:
            assert lock.release("writer", SINGLE) == 1
            heard = listener.heard()
        finally:
            listener.close()
        assert heard == [("client-a", f"{o} {NAME}") for o in wakes.let_through]
    finally:
        lock.delete()


def test_a_release_wakes_a_non_fair_waiter_behind_a_held_fair_one(admin: redis.Redis) -> None:
    """A semaphore of 2 permits held twice, a fair writer in line, then a non-fair permit
    waiter. One holder releases: the writer may not go (a permit is still held), but the
    permit waiter may, since a non-fair request waits only behind grants."""
    lock = Lock(admin)
    try:
        assert lock.grant(Request("owner-0", True, 2, False))[0] == 1
        assert lock.grant(Request("owner-1", True, 2, False))[0] == 1
        writer = Request("owner-2", False, 1, True, client="client-a")
        permit = Request("owner-3", True, 2, False, client="client-a")
        assert lock.grant(writer) == [0]
        assert lock.grant(permit) == [0]
        after = [e.entry for o, e in lock.read().items() if o != owner_hash("owner-0")]
        # what _core says of each waiter retrying once the holder has gone
        assert core.decide(after, owner_hash("owner-2"), False, 1, True) is Decision.WAIT
        assert core.decide(after, owner_hash("owner-3"), True, 2, False) is Decision.GRANT
        listener = Listener(lock, {"client-a"})
        try:
            assert lock.release("owner-0", SINGLE) == 1
            heard = listener.heard()
        finally:
            listener.close()
        assert heard == [("client-a", f"{owner_hash('owner-3')} {NAME}")]
    finally:
        lock.delete()


# -- the oracle, on tables written by hand ---------------------------------------------------


def waiting(owner: str, seq: int, shared: bool, fair: bool, limit: int = 0) -> Entry:
    return Entry(owner, seq, shared, limit if shared else 1, fair, None)


def holding(owner: str, seq: int, shared: bool, limit: int = 0) -> Entry:
    return Entry(owner, seq, shared, limit if shared else 1, False, seq)


def test_the_oracle_lets_readers_through_together_and_a_writer_alone() -> None:
    line = [
        waiting("r1", 1, True, True),
        waiting("r2", 2, True, False),
        waiting("w", 3, False, True),
        waiting("r3", 4, True, True),  # fair: behind the fair writer
        waiting("r4", 5, True, False),  # not fair: passes the writer
    ]
    clients = dict.fromkeys(["r1", "r2", "w", "r3", "r4"], "client-a")
    wakes = let_through(line, clients, {"client-a"}, judge=True)
    assert wakes == Wakes(["r1", "r2", "r4"], [], "w")
    writer_first = [waiting("w", 1, False, True), *line[:2]]
    assert let_through(writer_first, clients, {"client-a"}, True) == Wakes(["w"], [], "r1")


def test_the_oracle_counts_permits_drops_the_gone_and_scans_a_bounded_line() -> None:
    line = [holding("h", 1, True, 2), *(waiting(f"s{i}", 2 + i, True, False, 2) for i in range(3))]
    clients = {"h": "", "s0": "client-b", "s1": "", "s2": "client-a"}
    # s0's client is gone: dropped; s1 (not subscribed yet) takes the permit left
    assert let_through(line, clients, {"client-a"}, judge=True) == Wakes(["s1"], ["s0"], "s2")
    # where nobody is judged, s0 takes it
    assert let_through(line, clients, {"client-a"}, judge=False) == Wakes(["s0"], [], "s1")
    assert let_through(line, clients, set(), judge=False, scan=0) == Wakes([], [], None)
