"""Redlock backend cases beyond the contract suite, on real masters (five redis-server
processes started by ``RedlockMasters``): a minority of masters killed or stopped while locks
are held and wanted; a majority lost (a typed error naming how many answered, never a false
grant); a master restarted empty (kept out for ``restart_delay``, and what happens without
it); fencing tokens raised to the greatest a quorum drew; split grants given back, or put back
in line where they were; the quorum of a semaphore; renewals that need a quorum, and that ask
a master left out after a failure; a reply later than node_timeout never taken for another
call's; configurations refused at connect.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tumbler
import tumbler.aio
from tests.backends.tls_contexts import ContextsMade
from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest, Renewal
from tumbler.backends.kit.owners import owner_hash
from tumbler.backends.redis.lua import Keys
from tumbler.backends.redlock._sync.backend import RedlockBackend
from tumbler.backends.redlock.common import quorum
from tumbler.backends.redlock.lua import master_keys
from tumbler.backends.redlock.opener import open_async, open_sync
from tumbler.errors import BackendUnavailable, ConfigurationError, LockLost, TooManyWaiters
from tumbler.testing.backends.redlock.server import RedlockMasters, start_tls_masters
from tumbler.testing.conformance.compat import eventually

#: a lease short enough that a case waits for one to run out in a few seconds
TTL = 2.0


@pytest.fixture
def masters(tmp_path: Any) -> Iterator[RedlockMasters]:
    with RedlockMasters(tmp_path / "masters", 5) as started:
        yield started


@pytest.fixture
def prefix() -> str:
    return f"tumbler:test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def connect(masters: RedlockMasters, prefix: str) -> Iterator[Callable[..., tumbler.Locks]]:
    clients: list[tumbler.Locks] = []

    def make(**options: object) -> tumbler.Locks:
        client = tumbler.connect(masters.url(prefix, **options))
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def backend(masters: RedlockMasters, prefix: str) -> Iterator[RedlockBackend]:
    """The backend itself, for the cases that call the contract directly."""
    opened = open_sync(parse_url(masters.url(prefix)))
    yield opened
    opened.close()


def request(name: str, owner: str, *, fair: bool = False) -> GrantRequest:
    """An exclusive request with a 10 s lease."""
    return GrantRequest(name, owner, False, 1, fair, 10.0, holder="case")


def grants_on(masters: RedlockMasters, prefix: str, name: str) -> list[int]:
    """The live grants of ``name`` on each master that runs (-1 for one that does not)."""
    counts = []
    entries = Keys(prefix).entries(name)
    for index, master in enumerate(masters.masters):
        if not master.running or masters.paused(index):
            counts.append(-1)
            continue
        client = masters.client(index)
        raw = client.hgetall(entries)
        counts.append(sum(1 for value in raw.values() if value.split(b"|")[4]))
    return counts


def tokens_on(masters: RedlockMasters, prefix: str, name: str) -> set[int]:
    """The tokens of ``name``'s grants on every master that runs."""
    found = set()
    entries = Keys(prefix).entries(name)
    for index, master in enumerate(masters.masters):
        if master.running and not masters.paused(index):
            for value in masters.client(index).hgetall(entries).values():
                token = value.split(b"|")[4]
                if token:
                    found.add(int(token))
    return found


# -- quorums ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("masters_count", "shared", "limit", "needed"),
    [
        (3, False, 1, 2),
        (5, False, 1, 3),
        (5, True, 0, 3),  # a read lock: a majority, as the write side
        (5, True, 1, 3),
        (5, True, 2, 4),  # 3 holders of a semaphore of 2 would need 12 grants of 10 permits
        (5, True, 3, 4),
        (5, True, 4, 5),
        (7, True, 2, 5),
    ],
)
def test_a_quorum_leaves_no_room_for_one_holder_too_many(
    masters_count: int, shared: bool, limit: int, needed: int
) -> None:
    assert quorum(masters_count, shared, limit) == needed
    permits = max(1, limit)
    # limit + 1 holders with this quorum each would take more grants than the masters give
    assert (permits + 1) * needed > masters_count * permits


# -- a minority lost ----------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_two_masters_lost_while_a_lock_is_held_and_wanted(
    masters: RedlockMasters, connect: Callable[..., tumbler.Locks], prefix: str, fault: str
) -> None:
    """A minority killed or stopped: the hold is renewed, the waiter gets the lock at the
    release, never while it is held, with a greater token."""
    first, second = connect(), connect()
    lock = first.lock("minority", ttl=TTL)
    assert lock.acquire()
    hold = lock.hold
    assert hold is not None
    for index in (3, 4):
        getattr(masters, fault)(index)
    got: list[int] = []
    other = second.lock("minority", ttl=TTL)

    def wait() -> None:
        with other as taken:
            got.append(taken.token)

    waiter = threading.Thread(target=wait)
    waiter.start()
    # several leases' worth of renewals on three masters
    deadline = time.monotonic() + 2.5 * TTL
    while time.monotonic() < deadline:
        assert hold.held
        assert not got
        time.sleep(0.05)
    before = hold.token
    lock.release()
    waiter.join(10)
    assert len(got) == 1
    assert got[0] > before
    if fault == "pause":
        for index in (3, 4):
            masters.resume(index)


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_majority_lost_fails_an_acquire_with_how_many_answered(
    masters: RedlockMasters, prefix: str, flavour: str
) -> None:
    url = masters.url(prefix)
    message = "2 of 5 Redis masters answered within 0.1 s, 3 are needed"
    if flavour == "sync":
        with tumbler.connect(url) as locks:
            for index in (2, 3, 4):
                masters.kill(index)
            started = time.monotonic()
            with pytest.raises(BackendUnavailable, match=message):
                locks.lock("gone").acquire(blocking=False)  # one try: a wait would ride it out
            spent = time.monotonic() - started
    else:
        import asyncio

        async def run() -> float:
            async with await tumbler.aio.connect(url) as locks:
                for index in (2, 3, 4):
                    masters.kill(index)
                started = time.monotonic()
                with pytest.raises(BackendUnavailable, match=message):
                    await locks.lock("gone").acquire(blocking=False)
                return time.monotonic() - started

        spent = asyncio.run(run())
    # masters that refuse connections are down: no waiting for them beyond three tries
    assert spent < 1
    # nothing granted anywhere: the two that answered gave their grants back
    assert grants_on(masters, prefix, "gone") == [0, 0, -1, -1, -1]


def test_a_connect_with_a_majority_down_names_how_many_answered(
    masters: RedlockMasters, prefix: str
) -> None:
    for index in (0, 1, 2):
        masters.kill(index)
    with pytest.raises(BackendUnavailable, match="2 of 5 Redis masters answered"):
        tumbler.connect(masters.url(prefix))


def test_stopped_masters_do_not_hold_up_a_grant_for_longer_than_their_timeout(
    masters: RedlockMasters, connect: Callable[..., tumbler.Locks]
) -> None:
    """Two masters that take the request and never answer cost one node_timeout, after
    which they are left out for a while."""
    locks = connect(node_timeout=0.2)
    masters.pause(0)
    masters.pause(1)
    lock = locks.lock("stopped", ttl=TTL)
    spent = []
    for _ in range(5):
        started = time.monotonic()
        with lock:
            pass
        spent.append(time.monotonic() - started)
    assert max(spent) < 1.0  # a connection's set-up (connect_timeout 0.5) at most
    masters.resume(0)
    masters.resume(1)


# -- a master restarted empty -------------------------------------------------------------


def _held_on_three(
    masters: RedlockMasters,
    connect: Callable[..., tumbler.Locks],
    prefix: str,
    renew: bool = False,
    **options: object,
) -> tuple[tumbler.Lock, tumbler.Locks]:
    """A lock held on masters 0, 1, 2 only: masters 3 and 4 lose its keys (as if its grant
    had not reached them). Not renewed unless ``renew``: a renewal would grant it anew on
    the masters that lack it."""
    first = connect(**options)
    with first.lock("warm-up"):  # every master is marked (see redlock.lua)
        pass
    # ... and has served for a minute: a master without its marker now lost its data (a
    # deployment younger than a second could still be marking its masters)
    for index in range(5):
        client = masters.client(index)
        seconds, micros = client.time()
        client.set(f"{prefix}:serving-from", seconds * 1000 + micros // 1000 - 60_000)
    lock = first.lock("restarted", ttl=10, renew=renew)
    assert lock.acquire()
    for index in (3, 4):
        masters.client(index).delete(*Keys(prefix).lock_keys("restarted"))
    assert grants_on(masters, prefix, "restarted") == [1, 1, 1, 0, 0]
    return lock, first


def test_a_master_restarted_empty_grants_nothing_for_restart_delay(
    masters: RedlockMasters, connect: Callable[..., tumbler.Locks], prefix: str
) -> None:
    lock, _first = _held_on_three(masters, connect, prefix, restart_delay=3)
    masters.restart(2)  # empty: it forgot the grant
    other = connect(restart_delay=3).lock("restarted", ttl=10)
    # masters 2, 3, 4 would be a quorum: master 2 must stay out
    assert not other.acquire(timeout=1.0)
    # the first holder has lost its quorum too (its next renewal says so): the delay keeps
    # anyone else out while its lease may still run
    with pytest.raises(LockLost):
        lock.release()
    # masters 0, 1, 3, 4 are a quorum without it
    assert other.acquire(timeout=2.0)
    assert grants_on(masters, prefix, "restarted") == [1, 1, 0, 1, 1]
    other.release()

    def rejoined() -> bool:
        with other:
            return grants_on(masters, prefix, "restarted") == [1, 1, 1, 1, 1]

    eventually(rejoined, "the restarted master grants again, after restart_delay")


def test_without_restart_delay_a_master_restarted_empty_makes_two_holders(
    masters: RedlockMasters, connect: Callable[..., tumbler.Locks], prefix: str
) -> None:
    """What the docs say happens with restart_delay=0: shown, so that the delay is not
    taken for decoration."""
    lock, _first = _held_on_three(masters, connect, prefix, restart_delay=0)
    masters.restart(2)
    other = connect(restart_delay=0).lock("restarted", ttl=10)
    assert other.acquire(timeout=2.0)
    assert lock.hold is not None
    assert lock.hold.held  # two holders
    assert other.hold is not None
    assert other.hold.token > lock.hold.token  # fencing tells them apart
    other.release()
    # the first holder learns at the latest at its release: two masters had its grant
    with pytest.raises(LockLost):
        lock.release()


def test_masters_losing_their_data_one_after_another_never_make_two_holders(
    tmp_path: Any, prefix: str
) -> None:
    """Two of three masters restarted empty one after the other, while a lock asked for with a
    lease far longer than restart_delay is held without renewal: nobody is granted it while the
    holder's lease may still run, because no lease is longer than restart_delay."""
    with RedlockMasters(tmp_path / "three", 3) as three:
        url = three.url(prefix, restart_delay=2)
        with tumbler.connect(url) as first, tumbler.connect(url) as second:
            with first.lock("warm-up"):  # every master is marked (see redlock.lua) ...
                pass
            for index in range(3):  # ... and has served for a minute
                client = three.client(index)
                seconds, micros = client.time()
                client.set(f"{prefix}:serving-from", seconds * 1000 + micros // 1000 - 60_000)
            lock = first.lock("lost-twice", ttl=60, renew=False)
            assert lock.acquire()
            hold = lock.hold
            assert hold is not None
            assert hold.ttl == 2  # cut to restart_delay
            wanted = second.lock("lost-twice", ttl=60)
            three.restart(0)
            assert not wanted.acquire(timeout=0)  # marks master 0: out for restart_delay
            three.restart(1)
            assert wanted.acquire(timeout=10)
            # granted only once the first lease had run out on its holder's clock
            assert not hold.held
            assert hold.expires_in <= 0
            assert wanted.hold is not None
            assert wanted.hold.token > hold.token
            wanted.release()


def test_a_hold_on_a_bare_quorum_survives_the_loss_of_one_of_its_masters(
    masters: RedlockMasters, connect: Callable[..., tumbler.Locks], prefix: str
) -> None:
    """Granted by masters 0, 1, 2 only (3 and 4 missed it); master 0 dies: a majority still
    answers, and the renewal grants the lease anew on 3 and 4, so the hold goes on."""
    lock, _first = _held_on_three(masters, connect, prefix, renew=True, restart_delay=3)
    hold = lock.hold
    assert hold is not None
    masters.kill(0)
    eventually(
        lambda: grants_on(masters, prefix, "restarted") == [-1, 1, 1, 1, 1],
        "the renewal granted the lease on the masters that had missed it",
    )
    assert hold.held
    other = connect(restart_delay=3).lock("restarted")
    assert not other.acquire(timeout=0)
    lock.release()
    assert grants_on(masters, prefix, "restarted") == [-1, 0, 0, 0, 0]


def test_every_master_new_serves_at_once(
    masters: RedlockMasters, connect: Callable[..., tumbler.Locks]
) -> None:
    """A new deployment (no master has a marker) does not wait for restart_delay."""
    started = time.monotonic()
    with connect(restart_delay=30).lock("first"):
        pass
    assert time.monotonic() - started < 5


# -- fencing ------------------------------------------------------------------------------


def test_a_grant_takes_the_greatest_token_its_masters_drew_and_gives_it_to_all(
    masters: RedlockMasters, connect: Callable[..., tumbler.Locks], prefix: str
) -> None:
    locks = connect()
    with locks.lock("fenced") as hold:
        first = hold.token
    # one master's sequence is far ahead (it kept a later grant that the others missed)
    ahead = first + 10**9
    masters.client(4).set(Keys(prefix).sequence("fenced"), ahead)
    with locks.lock("fenced", ttl=10) as hold:
        assert hold.token == ahead + 1
        # the other masters hold it with that token too, and draw above it next
        assert tokens_on(masters, prefix, "fenced") == {ahead + 1}
        for index in range(4):
            assert int(masters.client(index).get(Keys(prefix).sequence("fenced"))) >= ahead + 1
    with locks.lock("fenced") as hold:
        assert hold.token > ahead + 1


def test_two_holders_of_a_semaphore_never_share_a_token(
    masters: RedlockMasters, backend: RedlockBackend
) -> None:
    """Two grants of a semaphore that reach the masters in opposite orders (x first on master
    0, y first on master 1) each draw the greater value on the master the other reached
    first, and would both raise their quorum to it. A master whose sequence for the name
    already gave that value out refuses the raise, so neither counts with it; tried again,
    both are granted, with tokens of their own."""
    assert backend.try_grant(request("warm-up", "w")) is not None  # every master is marked
    proposal = time.time_ns() // 1000 + 10**9  # ahead of every sequence: each draws from it
    x, y = (GrantRequest("permits", owner, True, 2, False, 10.0, holder="case") for owner in "xy")

    def draw(grant: GrantRequest, index: int) -> int:
        call = backend._grant_call(grant, grant.ttl, False, index, proposal)
        (replies,) = backend._fan_out({index: [call]}).values()
        assert not isinstance(replies, Exception)
        assert int(replies[0][0]) == 1
        return int(replies[0][1])

    drawn_x, drawn_y = {0: draw(x, 0)}, {1: draw(y, 1)}
    drawn_x[1], drawn_y[0] = draw(x, 1), draw(y, 0)
    for index in (2, 3):
        drawn_x[index] = draw(x, index)
    for index in (2, 3):
        drawn_y[index] = draw(y, index)
    token = proposal + 1
    assert max(drawn_x.values()) == max(drawn_y.values()) == token
    needed = quorum(5, True, 2)
    held_x = backend._raise_token(x, drawn_x, token)
    held_y = backend._raise_token(y, drawn_y, token)
    assert held_x < needed or held_y < needed, "two holders of one token"
    for grant in (x, y):
        backend.release(grant.name, grant.owner)
    granted = [backend.try_grant(grant._replace(queue=False)) for grant in (x, y)]
    tokens = [grant.token for grant in granted if grant is not None]
    assert len(tokens) == 2
    assert len(set(tokens)) == 2
    assert min(tokens) > token


def test_tokens_keep_increasing_while_masters_are_killed_and_restarted(
    masters: RedlockMasters, connect: Callable[..., tumbler.Locks]
) -> None:
    locks = connect(restart_delay=TTL)
    lock = locks.lock("sequence", ttl=TTL)
    tokens = []
    for round_ in range(6):
        index = round_ % 5
        masters.kill(index)
        with lock as hold:
            tokens.append(hold.token)
        masters.restart(index)
        with lock as hold:
            tokens.append(hold.token)
    assert tokens == sorted(set(tokens))


def test_tokens_order_grants_across_changing_quorums_and_lost_masters(
    masters: RedlockMasters, connect: Callable[..., tumbler.Locks], prefix: str
) -> None:
    """The objection that the greatest of independent counters cannot order grants whose
    quorums change while masters lose their data, replayed with tokens far above every
    client's clock (so that the clock, which masters that lost everything draw from, would
    not save them): each later grant still gets a greater token."""
    locks = connect(restart_delay=1)
    with locks.lock("warm-up"):  # every master is marked ...
        pass
    for index in range(5):  # ... and has served for a minute
        client = masters.client(index)
        seconds, micros = client.time()
        client.set(f"{prefix}:serving-from", seconds * 1000 + micros // 1000 - 60_000)
    ahead = time.time_ns() // 1000 + 10**12
    first: dict[str, int] = {}
    # quorum 0, 1, 2 grants "x" and "y"; masters 3 and 4 never hear of either
    masters.pause(3)
    masters.pause(4)
    try:
        for offset, name in enumerate(("x", "y"), start=1):
            for index in (0, 1, 2):
                masters.client(index).set(Keys(prefix).sequence(name), ahead * offset)
            with locks.lock(name) as hold:
                first[name] = hold.token
    finally:
        masters.resume(3)
        masters.resume(4)

    def serving(index: int) -> bool:
        seconds, micros = masters.client(index).time()
        served = masters.client(index).get(f"{prefix}:serving-from")
        return served is not None and int(served) <= seconds * 1000 + micros // 1000

    # master 0 restarts empty; while it is kept out, "x" is granted by 1, 2, 3, 4 (once 3 and
    # 4, which failed the grants above while paused, are no longer left out of grants)
    masters.restart(0)
    left_out = locks._backend.masters[3:]
    eventually(
        lambda: all(master.out_until <= time.monotonic() for master in left_out),
        "the masters paused above are asked again",
    )
    with locks.lock("x") as hold:
        assert hold.token > first["x"]
        assert grants_on(masters, prefix, "x") == [0, 1, 1, 1, 1]
    # master 1 restarts empty too; once both serve again, "y" is granted by 0, 1, 3 alone:
    # two that lost everything and one that never heard of "y"
    masters.restart(1)

    def both_serve() -> bool:
        # a grant that reaches a master without its marker marks it (a master that failed
        # is left out of grants for a moment)
        with locks.lock("other"):
            pass
        return serving(0) and serving(1)

    eventually(both_serve, "the restarted masters serve again")
    masters.pause(2)
    masters.pause(4)
    try:
        with locks.lock("y") as hold:
            assert hold.token > first["y"]
    finally:
        masters.resume(2)
        masters.resume(4)


def test_a_wake_up_never_grants_a_waiter(
    masters: RedlockMasters, backend: RedlockBackend, prefix: str
) -> None:
    """A grant counts only where a quorum made it: a wake-up that says a release handed the
    waiter the lock (as one Redis server's does), published on every master by whoever may,
    is a hint that makes the waiter ask the masters, which refuse while the holder holds."""
    holder = open_sync(parse_url(masters.url(prefix)))
    try:
        held = holder.try_grant(request("stock", "a"))
        assert held is not None
        with backend.watch("stock", "b"):
            assert backend.try_grant(request("stock", "b")) is None  # queued on every master
            channel = Keys(prefix).client_channel(backend._client.decode())

            def subscribed() -> bool:
                return all(
                    masters.client(index).pubsub_numsub(channel)[0][1] > 0 for index in range(5)
                )

            eventually(subscribed, "the waiter listens on every master")
            forged = f"=999999999999,0,0:{owner_hash('b')} stock"
            for index in range(5):
                masters.client(index).publish(channel, forged)
            assert backend.try_grant(request("stock", "b")) is None
        assert tokens_on(masters, prefix, "stock") == {held.token}
    finally:
        holder.close()


def test_a_masters_own_keys_set_by_hand_block_nothing(
    masters: RedlockMasters, connect: Callable[..., tumbler.Locks], prefix: str
) -> None:
    locks = connect()
    with locks.lock("warm-up") as hold:
        first = hold.token
    for index in range(5):
        client = masters.client(index)
        client.set(f"{prefix}:token-floor", "abc")
        client.set(f"{prefix}:longest-lease", "9223372036854775807")
        client.set(Keys(prefix).sequence("warm-up"), "-1")
    with locks.lock("warm-up") as hold:
        assert first < hold.token <= 2**53


# -- split grants, renewals ---------------------------------------------------------------


def test_a_grant_short_of_a_quorum_is_given_back_on_every_master(
    masters: RedlockMasters, connect: Callable[..., tumbler.Locks], prefix: str
) -> None:
    """A holder has masters 0, 1, 2 of a lock; a try that finds 3 and 4 free gives both
    back."""
    holder = connect().lock("split", ttl=10)
    masters.pause(3)
    masters.pause(4)
    assert holder.acquire()
    masters.resume(3)
    masters.resume(4)
    other = connect().lock("split", ttl=10)
    assert not other.acquire(blocking=False)
    assert grants_on(masters, prefix, "split") == [1, 1, 1, 0, 0]
    holder.release()


def test_a_hold_whose_quorum_is_lost_is_lost(
    masters: RedlockMasters, connect: Callable[..., tumbler.Locks]
) -> None:
    lost = threading.Event()
    lock = connect().lock("renewed", ttl=TTL)
    assert lock.acquire()
    hold = lock.hold
    assert hold is not None
    hold.on_lost(lambda _hold: lost.set())
    for index in (0, 1, 2):
        masters.kill(index)
    # lost at its deadline at the latest: no renewal reaches a quorum
    assert lost.wait(2 * TTL)
    assert hold.lost
    assert not hold.held


def test_a_renewal_revives_no_hold_that_fewer_than_a_quorum_still_have(
    masters: RedlockMasters, connect: Callable[..., tumbler.Locks], prefix: str
) -> None:
    """The lease is gone from 4 of the 5 masters (as a force release that crossed a renewal
    leaves it): the renewal that finds it on one master only loses the hold, rather than
    granting it anew where it is gone, which would undo the force release."""
    lost = threading.Event()
    lock = connect().lock("revived", ttl=TTL)
    assert lock.acquire()
    hold = lock.hold
    assert hold is not None
    hold.on_lost(lambda _hold: lost.set())
    entries = Keys(prefix).entries("revived")
    for index in range(4):
        masters.client(index).delete(entries)
    assert lost.wait(2 * TTL)
    eventually(
        lambda: grants_on(masters, prefix, "revived") == [0, 0, 0, 0, 0],
        "the lost hold's grant was given back on the master that still had it",
    )


def test_a_semaphore_needs_more_masters_than_a_majority(
    masters: RedlockMasters, connect: Callable[..., tumbler.Locks]
) -> None:
    """A semaphore of 2 on five masters needs four: with two lost it is unavailable (a
    majority of three would let a third holder in), with one lost it works."""
    locks = connect()
    masters.kill(4)
    with locks.semaphore("permits", 2), locks.semaphore("permits", 2):
        assert not locks.semaphore("permits", 2).acquire(timeout=0.3)
    masters.kill(3)
    with pytest.raises(BackendUnavailable, match="4 are needed"):
        locks.semaphore("permits", 2).acquire(timeout=1)
    # the mutex on the same masters still works
    with locks.lock("mutex"):
        pass


# -- configurations refused at connect ----------------------------------------------------


def test_one_server_under_two_names_is_refused(masters: RedlockMasters, prefix: str) -> None:
    first = masters.masters[0]
    hosts = f"127.0.0.1:{first.port},localhost:{first.port},{masters.masters[1].host}:" + str(
        masters.masters[1].port
    )
    with pytest.raises(ConfigurationError, match="are one server"):
        tumbler.connect(f"redlock://{hosts}/0?prefix={prefix}")


def test_a_replica_is_refused(masters: RedlockMasters, prefix: str) -> None:
    replica = masters.client(2)
    primary = masters.masters[0]
    replica.replicaof(primary.host, primary.port)
    try:
        with pytest.raises(ConfigurationError, match="is a replica"):
            tumbler.connect(masters.url(prefix))
    finally:
        replica.replicaof("NO", "ONE")


def test_nothing_is_left_on_the_masters_but_their_own_keys_and_sequences(
    masters: RedlockMasters, connect: Callable[..., tumbler.Locks], prefix: str
) -> None:
    locks = connect()
    for name in ("a", "b"):
        with locks.lock(name), locks.semaphore(f"s-{name}", 3):
            pass
    locks.close()

    # the names' sequences stay (a day: see the Redis backend's keys), so that their tokens
    # keep increasing; each master's marker, token floor and longest lease stay for good
    kept = set(master_keys(prefix)) | {
        Keys(prefix).sequence(name) for name in ("a", "b", "s-a", "s-b")
    }

    def only_kept() -> bool:
        for index in range(5):
            keys = {key.decode() for key in masters.client(index).scan_iter(f"{prefix}:*")}
            if keys != kept:
                return False
        return True

    eventually(only_kept, "every key but the markers and sequences is gone")


def test_a_reply_later_than_node_timeout_is_never_read_as_another_calls(
    masters: RedlockMasters, prefix: str
) -> None:
    """A master stopped while it has a grant to answer answers it once resumed: the client
    gave up on it at node_timeout and must not take that reply for the next call's (redis-py's
    asyncio read with a timeout leaves it on the connection)."""
    import asyncio

    async def run() -> list[int]:
        tokens = []
        async with await tumbler.aio.connect(masters.url(prefix)) as locks:
            lock = locks.lock("late", ttl=TTL)
            async with lock as hold:  # every connection made
                tokens.append(hold.token)
            masters.pause(0)
            async with lock as hold:
                tokens.append(hold.token)
            masters.resume(0)
            # calls go to master 0 again once its pause after the failure is over
            for _ in range(20):
                async with lock as hold:
                    tokens.append(hold.token)
                await asyncio.sleep(0.05)
        return tokens

    tokens = asyncio.run(run())
    assert tokens == sorted(set(tokens))
    # (master 0 may keep the grant it made when resumed, until its lease runs out: its
    # release went out while master 0 was left out)
    assert grants_on(masters, prefix, "late")[1:] == [0, 0, 0, 0]


def test_a_grant_short_of_a_quorum_goes_back_in_line_where_it_was(
    masters: RedlockMasters, prefix: str, backend: RedlockBackend
) -> None:
    """A fair waiter granted on two masters (the other three held by someone else) keeps its
    place in line there, as a waiter: a later fair waiter cannot pass it on any master."""
    assert backend.try_grant(request("line", "holder", fair=True)) is not None
    for index in (0, 1):  # the holder's grant did not reach masters 0 and 1
        masters.client(index).delete(*Keys(prefix).lock_keys("line"))
    assert backend.try_grant(request("line", "first", fair=True)) is None  # no quorum
    entries = Keys(prefix).entries("line")
    first = hashlib.sha1(b"first").hexdigest().encode()
    places = []
    for index in range(5):
        value = masters.client(index).hget(entries, first)
        assert value is not None, f"master {index} lost the first waiter's place"
        fields = value.split(b"|")
        assert fields[4] == b"", f"master {index} still has the first waiter's grant"
        places.append(int(fields[0]))
    # one arrival number on every master (drawn from the client's proposal): one order
    assert len(set(places)) == 1
    assert backend.try_grant(request("line", "second", fair=True)) is None
    assert backend.release("line", "holder")
    # the second comes first now, but the first is ahead of it on every master
    assert backend.try_grant(request("line", "second", fair=True)) is None
    assert backend.try_grant(request("line", "first", fair=True)) is not None


def entries_of(masters: RedlockMasters, prefix: str, name: str, owner: str) -> list[bool]:
    """Whether each master has an entry (grant or waiter) of ``owner`` for ``name``."""
    entries = Keys(prefix).entries(name)
    return [bool(masters.client(index).hexists(entries, owner_hash(owner))) for index in range(5)]


def test_an_acquire_refused_for_a_full_line_leaves_no_place_on_any_master(
    masters: RedlockMasters, prefix: str
) -> None:
    """One waiter fills the line (``max_waiters=1``) on every master but one, which its try
    did not reach: a second request is refused there too, not left in line on that master."""
    backend = open_sync(parse_url(masters.url(prefix, max_waiters=1)))
    try:
        assert backend.try_grant(request("full", "holder")) is not None
        assert backend.try_grant(request("full", "first")) is None
        backend._release_on("full", "first", [0])
        with pytest.raises(TooManyWaiters):
            backend.try_grant(request("full", "second"))
        assert entries_of(masters, prefix, "full", "second") == [False] * 5
        assert backend.inspect("full").waiters == 1
    finally:
        backend.close()


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_line_full_on_a_minority_of_masters_refuses_no_waiter(
    masters: RedlockMasters, prefix: str, flavour: str
) -> None:
    """An entry left in line on fewer than half the masters (a refused try whose release
    reached them later than the others) fills the line there alone: with ``max_waiters=1``,
    the waiter that comes next is not refused, but queues on the masters that have room and
    is the lock's one waiter."""
    url = parse_url(masters.url(prefix, max_waiters=1))
    if flavour == "sync":
        backend = open_sync(url)
        try:
            assert backend.try_grant(request("crowded", "holder")) is not None
            assert backend.try_grant(request("crowded", "left")) is None
            backend._release_on("crowded", "left", [2, 3, 4])
            assert backend.try_grant(request("crowded", "waiting")) is None
            waiters = backend.inspect("crowded").waiters
        finally:
            backend.close()
    else:

        async def queue() -> int:
            backend = await open_async(url)
            try:
                assert await backend.try_grant(request("crowded", "holder")) is not None
                assert await backend.try_grant(request("crowded", "left")) is None
                await backend._release_on("crowded", "left", [2, 3, 4])
                assert await backend.try_grant(request("crowded", "waiting")) is None
                return (await backend.inspect("crowded")).waiters
            finally:
                await backend.close()

        waiters = asyncio.run(queue())
    assert entries_of(masters, prefix, "crowded", "waiting") == [False, False, True, True, True]
    assert waiters == 1


def test_a_waiter_left_in_line_on_a_minority_of_masters_is_not_counted(
    masters: RedlockMasters, prefix: str, backend: RedlockBackend
) -> None:
    """A try that reached some masters later than the others leaves its entry there a little
    longer: such an entry, on fewer than half the masters, holds up no grant and is no waiter
    in the lock's state; one in line on most masters is."""
    assert backend.try_grant(request("line", "holder")) is not None
    assert backend.try_grant(request("line", "gone")) is None
    entries = Keys(prefix).entries("line")
    for index in (1, 2, 3):
        masters.client(index).hdel(entries, owner_hash("gone"))
    assert backend.inspect("line").waiters == 0
    assert backend.try_grant(request("line", "waiting")) is None
    masters.client(4).hdel(entries, owner_hash("waiting"))
    assert backend.inspect("line").waiters == 1


def test_a_waiter_on_most_of_the_masters_that_answer_but_no_quorum_is_not_counted(
    masters: RedlockMasters, prefix: str, backend: RedlockBackend
) -> None:
    """With two of five masters not answering, an entry on two of the three that do is most
    of the answers but no quorum: it cannot be granted, and a request made after it can be
    ahead of it on a quorum (the order a fair line keeps), so it is no waiter yet."""
    assert backend.try_grant(request("line", "holder")) is not None
    assert backend.try_grant(request("line", "waiting")) is None
    masters.client(2).hdel(Keys(prefix).entries("line"), owner_hash("waiting"))
    assert backend.inspect("line").waiters == 1  # in line on four of the five
    masters.pause(3)
    masters.pause(4)
    try:
        state = backend.inspect("line")
    finally:
        masters.resume(3)
        masters.resume(4)
    assert len(state.holders) == 1
    assert state.waiters == 0


def test_a_master_left_out_after_a_failure_still_renews_and_releases_the_grant_it_holds(
    masters: RedlockMasters, prefix: str, backend: RedlockBackend
) -> None:
    """A grant held on exactly a quorum, one of whose masters failed a call a moment ago (and
    is left out of grants for a while): its renewal and its release still ask that master, or
    they would count too few and report the hold lost."""
    assert backend.try_grant(request("exact", "holder")) is not None
    for index in (3, 4):
        masters.client(index).delete(*Keys(prefix).lock_keys("exact"))
    for _ in range(4):  # left out for 0.8 s: the failures of a master that hung a moment
        backend.masters[2].failed()
    assert backend.renew("exact", "holder", 10.0) == 10.0
    assert backend.release("exact", "holder")
    assert grants_on(masters, prefix, "exact") == [0, 0, 0, 0, 0]


def test_a_renewal_waits_for_a_quorum_that_answers_late(
    masters: RedlockMasters, backend: RedlockBackend
) -> None:
    """Three masters that answer 0.3 s late (a busy machine, a stall): the renewal waits for
    them, within socket_timeout and the lease, rather than giving up at node_timeout."""
    assert backend.try_grant(request("late-quorum", "holder")) is not None
    for index in (0, 1, 2):
        masters.pause(index)
    resumed = threading.Timer(0.3, lambda: [masters.resume(i) for i in (0, 1, 2)])
    resumed.start()
    try:
        renewed = backend.renew_all([Renewal("late-quorum", "holder", 10.0)], timeout=5.0)
    finally:
        resumed.join()
    assert renewed == [10.0]


def test_a_renewal_does_not_ask_again_masters_that_are_down(
    masters: RedlockMasters, backend: RedlockBackend
) -> None:
    """Masters that refuse connections are not asked again and again while the renewal waits
    for a quorum (each refusal counted as a failure: thousands of them overflowed the pause
    that leaves a master out)."""
    assert backend.try_grant(request("down", "holder")) is not None
    for index in (0, 1, 2):
        masters.kill(index)
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="2 of 5 Redis masters answered"):
        backend.renew_all([Renewal("down", "holder", 10.0)], timeout=5.0)
    assert time.monotonic() - started < 0.5
    for _ in range(5000):  # a master down for a long while
        backend.masters[0].failed()
    assert backend.masters[0].out_until - time.monotonic() <= 2.0


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_client_reads_its_tls_files_once_for_all_its_masters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flavour: str
) -> None:
    with start_tls_masters(tmp_path / "tls", 3) as masters:
        contexts = ContextsMade(monkeypatch)
        url = masters.url(f"tumbler:{uuid.uuid4().hex}")
        if flavour == "sync":
            with tumbler.connect(url) as locks, locks.lock("tls") as hold:
                assert hold.held
        else:

            async def main() -> None:
                async with await tumbler.aio.connect(url) as locks, locks.lock("tls") as hold:
                    assert hold.held

            asyncio.run(main())
        assert contexts.count == 1
