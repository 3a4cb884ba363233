"""Redlock's lock-delay where its masters disagree: each master keeps a lapsed grant as one
Redis server does (the Redis backend's scripts), and the client decides by quorum. A grant
lapsed on a quorum of the masters refuses every grant, and ``status`` shows it; one lapsed on
fewer holds up no grant; a renewal that finds a hold lapsed on a few masters does not grant it
anew there (a grant once lost is not revived), and a hold lapsed on a quorum is lost.

The contract's cases (lapsed on every master) run in the conformance suite on the Redlock
targets. Here the masters are made to disagree by hand, on five real masters of this
module's own; each case has a key prefix of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest, Renewal
from tumbler.backends.kit.owners import owner_hash
from tumbler.backends.redis import lua
from tumbler.backends.redlock import lua as redlock_lua
from tumbler.backends.redlock._sync.backend import RedlockBackend
from tumbler.backends.redlock.opener import open_sync
from tumbler.testing.backends.redlock.server import RedlockMasters
from tumbler.testing.conformance.compat import eventually

NAME = "stock"
#: a delay no case waits out
DELAY = 600.0
#: a lease no case waits out
LONG = 30.0
#: a lease the masters' clocks run out within moments (and long enough for a quorum's replies)
SHORT = 0.3


@pytest.fixture(scope="module")
def masters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedlockMasters]:
    with RedlockMasters(Path(tmp_path_factory.mktemp("masters")), 5) as started:
        yield started


@pytest.fixture
def prefix() -> str:
    return f"tumbler:test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def backend(masters: RedlockMasters, prefix: str) -> Iterator[RedlockBackend]:
    opened = open_sync(parse_url(masters.url(prefix)))
    assert isinstance(opened, RedlockBackend)
    yield opened
    opened.close()


def request(owner: str, ttl: float = LONG, lock_delay: float = DELAY) -> GrantRequest:
    return GrantRequest(NAME, owner, False, 1, False, ttl, "a test", lock_delay=lock_delay)


def admin(masters: RedlockMasters, index: int) -> redis.Redis:
    client: redis.Redis = masters.client(index, decode_responses=True)
    return client


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def entry_on(masters: RedlockMasters, prefix: str, index: int, owner: str) -> lua.StoredEntry:
    value = admin(masters, index).hget(lua.Keys(prefix).entries(NAME), owner_hash(owner))
    assert isinstance(value, str), f"no entry of {owner} on master {index}"
    return lua.parse_entry(owner_hash(owner), value)


def lapsed_on(masters: RedlockMasters, prefix: str, index: int, owner: str) -> bool:
    entry = entry_on(masters, prefix, index, owner)
    return entry.lapsed(server_ms(admin(masters, index)))


def remove_on(masters: RedlockMasters, prefix: str, index: int, owner: str) -> None:
    """Take ``owner``'s entry off master ``index`` (as a master that missed the grant)."""
    keys = lua.Keys(prefix).lock_keys(NAME)
    client = admin(masters, index)
    client.hdel(keys[0], owner_hash(owner))
    for index_key in keys[2:8]:
        client.zrem(index_key, owner_hash(owner))


def run_out_on(masters: RedlockMasters, prefix: str, index: int, owner: str) -> None:
    """End ``owner``'s lease on master ``index`` now, as that master's clock would have: its
    entry and its expiry index (timed by its lease plus its delay) both moved."""
    keys = lua.Keys(prefix).lock_keys(NAME)
    client = admin(masters, index)
    value = client.hget(keys[0], owner_hash(owner))
    assert isinstance(value, str)
    fields = value.split("|", 6)
    now = server_ms(client)
    fields[5] = str(now)
    client.hset(keys[0], owner_hash(owner), "|".join(fields))
    delay_ms = entry_on(masters, prefix, index, owner).delay_ms
    client.zadd(keys[2], {owner_hash(owner): now + delay_ms})


def test_a_grant_lapsed_on_a_quorum_of_masters_refuses_every_grant(
    masters: RedlockMasters, prefix: str, backend: RedlockBackend
) -> None:
    lapsing = backend.try_grant(request("a", ttl=SHORT))
    assert lapsing is not None
    eventually(
        lambda: all(lapsed_on(masters, prefix, index, "a") for index in range(5)),
        "the lease ran out on every master",
    )
    # masters 0 and 1 lose the entry: three of five still keep it lapsed, a quorum
    for index in (0, 1):
        remove_on(masters, prefix, index, "a")
    assert backend.try_grant(request("b", lock_delay=0)) is None
    state = backend.inspect(NAME)
    assert [h.token for h in state.lapsed] == [lapsing.token]
    assert state.holders == ()
    assert [s.name for s in backend.inspect_all()] == [NAME]
    assert not backend.release(NAME, "a")  # its owner's release leaves it where it is
    assert lapsed_on(masters, prefix, 2, "a")
    # and one more: two keep it, and the other three make a quorum for a new grant
    remove_on(masters, prefix, 2, "a")
    granted = backend.try_grant(request("b", lock_delay=0))
    assert granted is not None
    state = backend.inspect(NAME)
    assert [h.token for h in state.holders] == [granted.token]
    assert state.lapsed == ()  # kept by too few masters to close the name


def test_a_renewal_grants_no_lapsed_grant_anew_and_a_quorum_of_them_loses_the_hold(
    masters: RedlockMasters, prefix: str, backend: RedlockBackend
) -> None:
    """A renewal grants a hold anew on the masters that lack it, but a master where it lapsed
    refuses (a grant once lost is not revived there): the hold goes on on the three where it
    lives. Once it lapsed on three, no quorum renews it, and it is lapsed for ``status``."""
    held = backend.try_grant(request("a"))
    assert held is not None
    for index in (0, 1):
        run_out_on(masters, prefix, index, "a")
    assert backend.renew_all([Renewal(NAME, "a", LONG)], LONG) == [LONG]
    assert [lapsed_on(masters, prefix, index, "a") for index in range(5)] == [
        True,
        True,
        False,
        False,
        False,
    ]
    state = backend.inspect(NAME)
    assert [h.token for h in state.holders] == [held.token]
    assert state.lapsed == ()

    run_out_on(masters, prefix, 2, "a")
    assert backend.renew_all([Renewal(NAME, "a", LONG)], LONG) == [None]
    assert [lapsed_on(masters, prefix, index, "a") for index in range(5)] == [
        True,
        True,
        True,
        False,
        False,
    ]
    state = backend.inspect(NAME)
    assert state.holders == ()
    (lapsed,) = state.lapsed
    assert lapsed.token == held.token
    assert DELAY - 5 < lapsed.expires_in <= DELAY
    assert backend.try_grant(request("b", lock_delay=0)) is None  # it is on every master


def test_a_grant_that_lapsed_before_it_was_given_back_or_raised_stays(
    masters: RedlockMasters, prefix: str, backend: RedlockBackend
) -> None:
    """A grant without its quorum goes back in line (REQUEUE), and one that drew less than
    the greatest token takes it (RAISE_TOKEN): on a master where its lease ran out first, it
    lapsed there, and neither script brings it back or makes a waiter of it."""
    held = backend.try_grant(request("a"))
    assert held is not None
    run_out_on(masters, prefix, 0, "a")
    client = admin(masters, 0)
    keys = lua.Keys(prefix)
    requeue = client.register_script(redlock_lua.REQUEUE)
    raise_token = client.register_script(redlock_lua.RAISE_TOKEN)
    channels = keys.client_channel_prefix()
    assert requeue(keys=keys.lock_keys(NAME), args=["a", 1000, "", channels, NAME]) == 0
    floor = redlock_lua.master_keys(prefix)[1]
    assert raise_token(keys=[*keys.lock_keys(NAME), floor], args=["a", held.token + 1]) == 0
    entry = entry_on(masters, prefix, 0, "a")
    assert entry.token == held.token
    assert entry.lapsed(server_ms(client))


def test_a_master_that_forgot_a_lapsed_grant_stays_out_for_its_lock_delay(
    masters: RedlockMasters, prefix: str
) -> None:
    """``restart_delay`` outlasts every lease a master restarted empty may have forgotten; a
    grant with a lock-delay counts that much longer, lapsed. Kept by masters 0, 1 and 2 and
    missed by 3 and 4, it is forgotten by master 2: master 2 must stay out for the delay too,
    or 2, 3 and 4 would make a quorum while 0 and 1 still keep it."""
    backend = open_sync(parse_url(masters.url(prefix, restart_delay=1)))
    try:
        assert backend.try_grant(request("warm-up", lock_delay=0)) is not None  # marks them
        assert backend.release(NAME, "warm-up")
        for index in range(5):  # ... and they have served for a minute: established
            client = admin(masters, index)
            client.set(f"{prefix}:serving-from", server_ms(client) - 60_000)
        assert backend.try_grant(request("a", ttl=SHORT)) is not None
        eventually(
            lambda: all(lapsed_on(masters, prefix, index, "a") for index in range(5)),
            "the lease ran out on every master",
        )
        for index in (3, 4):
            remove_on(masters, prefix, index, "a")
        masters.restart(2)
        restarted = admin(masters, 2)

        def marked() -> bool:
            # refused all along: 0 and 1 keep it lapsed, 2 must not serve
            assert backend.try_grant(request("b", lock_delay=0)) is None
            return restarted.exists(f"{prefix}:serving-from") == 1

        # the first tries find master 2's connection broken, and leave it out for a moment
        eventually(marked, "a grant met master 2 without its marker, and marked it")
        serving_from = restarted.get(f"{prefix}:serving-from")
        assert serving_from is not None
        assert int(serving_from) - server_ms(restarted) > (DELAY - 5) * 1000
    finally:
        backend.close()
