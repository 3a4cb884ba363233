"""The Redis backend's lock-delay where Redis itself could lose it: the store's own expiry of
a lock's keys, the scripts' drop of expired entries through the ``t`` index, a grant that a
release hands to a waiter, and entries written without the field (by tumbler before
lock-delays) or with a bad one.

What a lapsed grant means to every decision is held to ``tumbler._core`` by
``test_redis_lua_oracle.py`` (its tables have lapsed grants, made by moving a crashed grant's
expiry by hand); these cases let the server's own clock run a lease out. The conformance
suite's ``test_lock_delay.py`` runs the contract on every Redis target. Real redis-server
only; each case has a key prefix of its own on the session's server.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest
from tumbler.backends.kit.owners import owner_hash
from tumbler.backends.redis import lua
from tumbler.backends.redis._sync.backend import RedisBackend
from tumbler.backends.redis.opener import open_sync
from tumbler.testing.backends.redis.server import RedisServer
from tumbler.testing.conformance.compat import PATIENCE

NAME = "stock"
#: a delay no case waits out
DELAY_MS = 600_000
#: a lease no case waits out
LONG = 60.0
#: a lease the server's clock runs out within moments
SHORT = 0.05


@pytest.fixture
def url(redis_server: RedisServer) -> str:
    return f"{redis_server.url}?prefix=tumbler:test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def admin(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis_server.client(decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def backends(url: str) -> Iterator[list[RedisBackend]]:
    """Clients of one prefix, as many as a case asks for (``backend()``)."""
    opened: list[RedisBackend] = []
    yield opened
    for backend in opened:
        backend.close()


def backend(backends: list[RedisBackend], url: str) -> RedisBackend:
    opened = open_sync(parse_url(url))
    assert isinstance(opened, RedisBackend)
    backends.append(opened)
    return opened


def request(
    owner: str,
    *,
    ttl: float = LONG,
    lock_delay: float = DELAY_MS / 1000,
    shared: bool = False,
    limit: int = 1,
) -> GrantRequest:
    return GrantRequest(
        NAME, owner, shared, limit, False, ttl, "a test", renewed=True, lock_delay=lock_delay
    )


def keys_of(url: str) -> lua.Keys:
    return lua.Keys(url.split("prefix=", 1)[1])


def stored(admin: redis.Redis, url: str, owner: str) -> lua.StoredEntry:
    value = admin.hget(keys_of(url).entries(NAME), owner_hash(owner))
    assert isinstance(value, str), f"{owner}'s entry is gone"
    return lua.parse_entry(owner_hash(owner), value)


def server_ms(admin: redis.Redis) -> int:
    seconds, micros = admin.time()
    return int(seconds) * 1000 + int(micros) // 1000


def past(admin: redis.Redis, moment_ms: int) -> None:
    """Return once the server's clock has passed ``moment_ms`` (a lease's end: a few ms)."""
    while server_ms(admin) <= moment_ms:
        pass


def assert_kept_until(admin: redis.Redis, url: str, owner: str, ends_ms: int) -> None:
    """Every key the lock has expires no earlier than ``ends_ms``, and the expiry index
    (where it lists ``owner``'s entry: a free lock's grant waits for a script that needs it)
    times the entry then."""
    keys = keys_of(url).lock_keys(NAME)
    found = [key for key in keys if admin.exists(key)]
    assert keys[0] in found
    for key in found:
        if key != keys[1]:  # not the sequence: it lives a day
            assert admin.pexpiretime(key) >= ends_ms, key
    score = admin.zscore(keys[2], owner_hash(owner))
    assert score is None or score == ends_ms


# -- the lease's end does not end the entry, nor its keys ------------------------------------


@pytest.mark.parametrize("path", ["free", "beside-a-holder", "renewed", "handed-over"])
def test_a_grants_keys_and_index_outlive_its_lease_by_its_lock_delay(
    backends: list[RedisBackend], url: str, admin: redis.Redis, path: str
) -> None:
    """Each script that writes a grant (a free lock's fast path, the full one, a renewal, a
    release handing the lock to a waiter) times the lock's keys and the grant's place in
    ``t`` by its lease's end plus its delay: the server's expiry of the keys, and the scripts'
    purge through ``t``, would otherwise drop a lapsed grant when its lease ends."""
    one, two = backend(backends, url), backend(backends, url)
    owner = "a"
    if path == "beside-a-holder":
        assert one.try_grant(request("x", shared=True, limit=2, lock_delay=0)) is not None
        assert one.try_grant(request("a", shared=True, limit=2)) is not None
    elif path == "handed-over":
        assert one.try_grant(request("x", lock_delay=0)) is not None
        with two.watch(NAME, "a") as watch:  # subscribed: the release hands it the lock
            assert two.try_grant(request("a")) is None
            assert one.release(NAME, "x")
            watch.wait(PATIENCE)
        assert two.wakeups.handoffs  # the release granted it
    else:
        assert one.try_grant(request("a")) is not None
        if path == "renewed":
            past(admin, server_ms(admin) + 5)  # a renewal that moves the lease on
            before = stored(admin, url, owner).expires_ms
            assert one.renew(NAME, owner, LONG * 2) == LONG * 2
            assert stored(admin, url, owner).expires_ms > before
    entry = stored(admin, url, owner)
    assert entry.delay_ms == DELAY_MS
    assert_kept_until(admin, url, owner, entry.expires_ms + DELAY_MS)


def test_a_lapsed_permit_outlasts_its_lease_through_grants_releases_and_hand_offs(
    backends: list[RedisBackend], url: str, admin: redis.Redis
) -> None:
    """A semaphore of 2: ``x`` holds, ``a``'s lease (with a delay) runs out on the server's
    clock, indexed by the full grant path. Then the scripts that drop expired entries run:
    ``b`` and ``c`` queue (the lapsed permit is the second), ``a``'s owner can neither renew
    nor release it, and ``x``'s release hands a permit to ``b`` and not to ``c``. A force
    release ends it, counting only ``b``'s grant."""
    one, two = backend(backends, url), backend(backends, url)

    def permit(owner: str, ttl: float = LONG, lock_delay: float = 0) -> GrantRequest:
        return request(owner, ttl=ttl, lock_delay=lock_delay, shared=True, limit=2)

    assert one.try_grant(permit("x")) is not None
    lapsing = one.try_grant(permit("a", ttl=SHORT, lock_delay=DELAY_MS / 1000))
    assert lapsing is not None
    past(admin, stored(admin, url, "a").expires_ms)

    with two.watch(NAME, "b") as watch, two.watch(NAME, "c"):
        assert two.try_grant(permit("b")) is None  # behind x and the lapsed a
        assert two.try_grant(permit("c")) is None
        assert one.renew(NAME, "a", LONG) is None
        assert not one.release(NAME, "a")
        assert one.release(NAME, "x")
        watch.wait(PATIENCE)
    assert two.try_grant(permit("b")) is not None  # handed a permit by the release
    assert two.renew(NAME, "b", LONG) == LONG  # its whole lease, not the handed-over second
    assert stored(admin, url, "c").token is None  # the other permit is the lapsed a's
    assert two.try_grant(permit("c")) is None

    state = two.inspect(NAME)
    assert [h.token for h in state.lapsed] == [lapsing.token]
    assert DELAY_MS / 1000 - PATIENCE < state.lapsed[0].expires_in <= DELAY_MS / 1000
    assert len(state.holders) == 1
    assert [s.name for s in two.inspect_all()] == [NAME]
    assert_kept_until(admin, url, "a", stored(admin, url, "a").expires_ms + DELAY_MS)

    assert two.force_release(NAME, "a test") == 1  # b's: a held nothing any more
    assert two.evicted(NAME, "a") is None  # its holder lost it before: no note
    assert two.evicted(NAME, "b") is not None
    assert two.inspect(NAME).lapsed == ()
    assert two.try_grant(permit("c")) is not None
    assert two.try_grant(permit("d")) is not None


@pytest.mark.parametrize("index", ["none", "by-its-lease"])
def test_a_lapsed_grant_that_its_expiry_index_does_not_time_is_kept(
    backends: list[RedisBackend], url: str, admin: redis.Redis, index: str
) -> None:
    """A free lock's grant is in no expiry index until a script needs it (the next one
    sweeps the hash for it); one timed there by its lease alone (by hand, or by a bug) is
    found by the purge. Either way a lapsed grant is indexed anew, not dropped."""
    one, two = backend(backends, url), backend(backends, url)
    lapsing = one.try_grant(request("a", ttl=SHORT))
    assert lapsing is not None
    entry = stored(admin, url, "a")
    expiries = keys_of(url).lock_keys(NAME)[2]
    assert admin.zscore(expiries, owner_hash("a")) is None
    if index == "by-its-lease":
        admin.zadd(expiries, {owner_hash("a"): entry.expires_ms})
    past(admin, entry.expires_ms)
    assert two.try_grant(request("b", lock_delay=0)) is None
    assert [h.token for h in two.inspect(NAME).lapsed] == [lapsing.token]
    assert_kept_until(admin, url, "a", entry.expires_ms + DELAY_MS)
    assert admin.zscore(expiries, owner_hash("a")) == entry.expires_ms + DELAY_MS


def test_a_grant_handed_to_a_waiter_keeps_the_waiters_lock_delay(
    backends: list[RedisBackend], url: str, admin: redis.Redis
) -> None:
    """The release grants the waiter from its hand-off terms, for a provisional lease that
    its first renewal would make whole. A waiter that never takes it (its process died as the
    release came) leaves a grant whose lease runs out: it lapses, as the waiter asked."""
    one, two = backend(backends, url), backend(backends, url)
    assert one.try_grant(request("x", lock_delay=0)) is not None
    with two.watch(NAME, "a") as watch:
        assert two.try_grant(request("a")) is None
        assert one.release(NAME, "x")
        watch.wait(PATIENCE)
    handed = stored(admin, url, "a")
    assert handed.token is not None
    past(admin, handed.expires_ms)  # the provisional lease (a second) ran out, unrenewed
    assert one.try_grant(request("y", lock_delay=0)) is None
    assert [h.token for h in one.inspect(NAME).lapsed] == [handed.token]


# -- the entry's layout: old entries, new entries read by old scripts, bad fields ----------


def test_entries_without_the_field_have_no_lock_delay(
    backends: list[RedisBackend], url: str, admin: redis.Redis
) -> None:
    """Entries in the layout tumbler wrote before lock-delays (which is still the layout of a
    grant without one): one whose lease ran out is gone for the next grant, a live one holds
    as ever. Neither holder text is taken for a delay, although both look like one."""
    locks = backend(backends, url)
    keys = keys_of(url)
    now = server_ms(admin)
    client = "0123456789abcdef"
    gone = f"5|0|1|0|5|{now - 1}||+5000|old host"
    held = f"6|1|0|0|6|{now + 60_000}|{client}|+5000|old host"
    admin.hset(keys.entries(NAME), mapping={owner_hash("gone"): gone, owner_hash("held"): held})
    admin.zadd(keys.lock_keys(NAME)[2], {owner_hash("gone"): now - 1, owner_hash("held"): now})
    admin.zadd(keys.lock_keys(NAME)[3], {owner_hash("gone"): 5, owner_hash("held"): 6})
    state = locks.inspect(NAME)
    assert [(h.token, h.holder) for h in state.holders] == [(6, "+5000|old host")]
    assert state.lapsed == ()
    assert state.malformed == 0
    grant = locks.try_grant(request("new", shared=True, limit=0, lock_delay=0))
    assert grant is not None  # beside the live reader: the expired one counted for nothing
    assert admin.hget(keys.entries(NAME), owner_hash("gone")) is None


def test_a_tumbler_without_lock_delays_reads_a_grant_with_one_as_the_grant_it_is(
    backends: list[RedisBackend], url: str, admin: redis.Redis
) -> None:
    """The previous scripts' pattern (copied here) parses an entry with a lock-delay with its
    token, lease and client in place: during an upgrade, an older client meeting the grant
    of a newer one counts it until its lease's end (it keeps no delay), never dropping it as
    an entry it cannot parse."""
    locks = backend(backends, url)
    grant = locks.try_grant(request("a"))
    assert grant is not None
    value = admin.hget(keys_of(url).entries(NAME), owner_hash("a"))
    previous = """
    local seq, shared, limit, fair, token, expires, client, holder =
        string.match(ARGV[1], '^(%d+)|([01])|(%d+)|([01])|(%d*)|(%d+)|([^|]*)|(.*)$')
    return {token, expires, holder}
    """
    token, expires, holder = admin.eval(previous, 0, value)  # type: ignore[misc]
    entry = stored(admin, url, "a")
    assert (int(token), int(expires)) == (grant.token, entry.expires_ms)
    assert holder.endswith("|a test")  # its client before it: only the text shown is off


@pytest.mark.parametrize(
    "field",
    ["+", "+x", "+-5", f"+{lua.MAX_LOCK_DELAY_MS + 1}", "+" + "9" * 17, "waiter"],
)
def test_a_bad_lock_delay_makes_the_entry_malformed(
    backends: list[RedisBackend], url: str, admin: redis.Redis, field: str
) -> None:
    """A lock-delay tumbler would not write (no number, past the longest, on a waiter's entry)
    is a malformed entry: it blocks nothing, is counted by ``status``, and the next grant
    drops it."""
    locks = backend(backends, url)
    keys = keys_of(url)
    now = server_ms(admin)
    if field == "waiter":
        value = f"5|0|1|0||{now + 60_000}|+5000|0123456789abcdef|someone"
    else:
        value = f"5|0|1|0|5|{now + 60_000}|{field}|0123456789abcdef|someone"
    admin.hset(keys.entries(NAME), owner_hash("bad"), value)  # by hand: in no index
    state = locks.inspect(NAME)
    assert state.malformed == 1
    assert state.holders == state.lapsed == ()
    assert locks.try_grant(request("new")) is not None
    assert admin.hget(keys.entries(NAME), owner_hash("bad")) is None
