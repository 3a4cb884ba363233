"""The Redis backend's hand-off: a release grants the next waiter itself, and the waiter's
wake-up carries the grant, so that taking it costs the waiter no round trip.

What the scripts decide is held to ``tumbler._core`` by ``test_redis_lua_oracle.py`` (whom a
release grants, with which token, and when it only wakes); these tests hold the clients to
the rest, at the backend contract, where no re-check timer of the lock layer can race the
wake-up: the waiter's next try runs no script; the lease it reports never outlasts the one
on the server, also when the grant is found by asking the server instead; and a waiter that
gives up a grant it never took leaves the lock free. Commands are counted by the server
(``INFO commandstats``) on a server of the test's own. Real redis-server only.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
import redis

import tumbler
import tumbler.aio
from tumbler.backends.contract import GrantRequest
from tumbler.backends.kit.owners import owner_hash
from tumbler.backends.redis.common import HAND_OFF_CONFIRM_MS
from tumbler.testing.backends.redis.server import RedisServer
from tumbler.testing.conformance.compat import PATIENCE

TTL = 30.0


@pytest.fixture
def admin(fresh_redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = fresh_redis_server.client()
    yield client
    client.close()


def new_url(server: RedisServer) -> str:
    return f"{server.url}?prefix=tumbler:test-{uuid.uuid4().hex[:12]}"


#: the longest lease of a grant a release hands over, until the waiter's first renewal
WINDOW = HAND_OFF_CONFIRM_MS / 1000


def request(owner: str, ttl: float = TTL, renewed: bool = True) -> GrantRequest:
    """A request of a hold that the lock layer renews (those a release hands the lock to)."""
    return GrantRequest(
        name="stock",
        owner=owner,
        shared=False,
        limit=1,
        fair=False,
        ttl=ttl,
        holder="a test",
        renewed=renewed,
    )


def script_calls(admin: redis.Redis) -> int:
    stats = admin.info("commandstats")
    return sum(
        int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval")
    )


def server_ms(admin: redis.Redis) -> int:
    seconds, micros = admin.time()
    return int(seconds) * 1000 + int(micros) // 1000


def entry_expiry_ms(admin: redis.Redis, url: str, owner: str) -> int:
    """The server's expiry of ``owner``'s entry of the lock (its field in the hash)."""
    prefix = url.split("prefix=", 1)[1]
    value = admin.hget(f"{prefix}:{{stock}}:e", owner_hash(owner))
    assert value is not None
    return int(value.decode().split("|")[5])


def later_ms(admin: redis.Redis, than: int) -> int:
    """The server's time once it reads later than ``than`` (a millisecond passes)."""
    while (now := server_ms(admin)) <= than:
        pass
    return now


def test_a_waiter_takes_the_grant_its_wake_up_carries_without_a_script(
    fresh_redis_server: RedisServer, admin: redis.Redis
) -> None:
    url = new_url(fresh_redis_server)
    with tumbler.connect(url) as one, tumbler.connect(url) as two:
        holder, waiter = one._backend, two._backend
        first = holder.try_grant(request("a"))
        assert first is not None
        with waiter.watch("stock", "b") as watch:  # subscribes: its releases reach it
            assert waiter.try_grant(request("b")) is None  # queued, with hand-off terms
            assert holder.release("stock", "a")
            watch.wait(PATIENCE)  # woken by the release, which granted it
        before = script_calls(admin)
        grant = waiter.try_grant(request("b"))
        assert script_calls(admin) == before  # taken from the wake-up: no round trip
        assert grant is not None
        assert grant.token > first.token
        # its lease never outlasts the server's, counted from the release, which handed over
        # a provisional one
        assert 0 < grant.granted_ttl <= WINDOW
        state = one.status("stock")
        assert [h.token for h in state.holders] == [grant.token]
        assert waiter.release("stock", "b")


@pytest.mark.asyncio
async def test_a_waiter_takes_the_grant_its_wake_up_carries_without_a_script_asyncio(
    fresh_redis_server: RedisServer, admin: redis.Redis
) -> None:
    url = new_url(fresh_redis_server)
    async with await tumbler.aio.connect(url) as one, await tumbler.aio.connect(url) as two:
        holder, waiter = one._backend, two._backend
        first = await holder.try_grant(request("a"))
        assert first is not None
        async with waiter.watch("stock", "b") as watch:
            assert await waiter.try_grant(request("b")) is None
            assert await holder.release("stock", "a")
            await watch.wait(PATIENCE)
        before = await asyncio.to_thread(script_calls, admin)
        grant = await waiter.try_grant(request("b"))
        assert await asyncio.to_thread(script_calls, admin) == before
        assert grant is not None
        assert grant.token > first.token
        assert 0 < grant.granted_ttl <= WINDOW
        assert await waiter.release("stock", "b")


def test_a_grant_found_by_asking_reports_the_lease_left_not_a_new_one(
    fresh_redis_server: RedisServer, admin: redis.Redis
) -> None:
    """A waiter whose wake-up has not come yet asks the server, which finds the grant the
    release made: the lease began then, so the reply gives what is left of it."""
    url = new_url(fresh_redis_server)
    with tumbler.connect(url) as one, tumbler.connect(url) as two:
        holder, waiter = one._backend, two._backend
        assert holder.try_grant(request("a")) is not None
        with waiter.watch("stock", "b") as watch:
            assert waiter.try_grant(request("b")) is None
            assert holder.release("stock", "a")
            watch.wait(PATIENCE)
        handed = waiter.wakeups.handoffs.take("stock", owner_hash("b"))  # as if not come yet
        assert handed is not None
        expires = entry_expiry_ms(admin, url, "b")
        asked_at = later_ms(admin, expires - HAND_OFF_CONFIRM_MS)  # time has passed since
        grant = waiter.try_grant(request("b"))
        assert grant is not None
        assert grant.token == handed[0]
        # counted from this request, the lease must end by the server's expiry
        assert asked_at + grant.granted_ttl * 1000 <= expires
        assert waiter.release("stock", "b")


def test_a_waiter_that_gives_up_a_grant_it_never_took_frees_the_lock(
    fresh_redis_server: RedisServer,
) -> None:
    url = new_url(fresh_redis_server)
    with tumbler.connect(url) as one, tumbler.connect(url) as two:
        holder, waiter = one._backend, two._backend
        assert holder.try_grant(request("a")) is not None
        with waiter.watch("stock", "b") as watch:
            assert waiter.try_grant(request("b")) is None
            assert holder.release("stock", "a")
            watch.wait(PATIENCE)
        assert waiter.wakeups.handoffs  # handed over, not taken
        assert waiter.release("stock", "b")  # a live grant: it was handed over
        assert not waiter.wakeups.handoffs
        assert one.status("stock").holders == ()
        assert holder.try_grant(request("c")) is not None


@pytest.mark.parametrize(
    ("options", "renewed", "takes"),
    [("", True, True), ("&wait_replicas=1", True, False), ("", False, False)],
    ids=["plain", "wait_replicas", "not-renewed"],
)
def test_a_waiter_leaves_hand_off_terms_unless_its_grants_must_wait_for_replicas(
    fresh_redis_server: RedisServer,
    admin: redis.Redis,
    options: str,
    renewed: bool,
    takes: bool,
) -> None:
    """With ``wait_replicas`` a grant counts once the client's own WAIT saw it replicated,
    and a WAIT covers only its own connection's writes: a grant written by a release would
    skip it. A grant handed over lasts until the waiter's first renewal: a hold that will
    not be renewed would lose it. So such a waiter leaves no terms, and is woken, not handed
    the lock; its own try grants it the whole lease."""
    url = new_url(fresh_redis_server)
    prefix = url.split("prefix=", 1)[1]
    with tumbler.connect(url) as one, tumbler.connect(url + options) as two:
        holder, waiter = one._backend, two._backend
        assert holder.try_grant(request("a")) is not None
        with waiter.watch("stock", "b") as watch:
            assert waiter.try_grant(request("b", renewed=renewed)) is None  # queued, subscribed
            terms = admin.hgetall(f"{prefix}:{{stock}}:g")
            assert (owner_hash("b").encode() in terms) is takes, terms
            assert holder.release("stock", "a")
            watch.wait(PATIENCE)
        if options:
            return  # no replica here: no grant of this waiter's would count
        before = script_calls(admin)
        grant = waiter.try_grant(request("b", renewed=renewed))
        assert grant is not None
        if takes:
            assert script_calls(admin) == before
            assert grant.granted_ttl <= WINDOW
        else:
            assert script_calls(admin) > before  # its own try
            assert grant.granted_ttl == TTL
        assert waiter.release("stock", "b")


def test_terms_a_tumbler_before_provisional_grants_left_get_the_whole_lease(
    fresh_redis_server: RedisServer, admin: redis.Redis
) -> None:
    """During an upgrade, a waiter of an older tumbler may not renew the grant it takes (it
    left terms whatever its hold): a release hands it the whole lease, in the wake-up that
    client reads (without the lease), as that tumbler's releases did."""
    url = new_url(fresh_redis_server)
    prefix = url.split("prefix=", 1)[1]
    with tumbler.connect(url) as one, tumbler.connect(url) as two:
        holder, waiter = one._backend, two._backend
        assert holder.try_grant(request("a")) is not None
        with waiter.watch("stock", "b") as watch:
            assert waiter.try_grant(request("b")) is None
            terms_key = f"{prefix}:{{stock}}:g"
            terms = admin.hget(terms_key, owner_hash("b"))
            assert terms is not None
            assert terms.decode().endswith("|1")
            admin.hset(terms_key, owner_hash("b"), terms.decode()[: -len("|1")])
            heard = admin.pubsub()
            heard.subscribe(f"{prefix}:c:{waiter.client_id}")
            assert heard.get_message(timeout=PATIENCE) is not None  # subscribed
            released_at = server_ms(admin)
            assert holder.release("stock", "a")
            watch.wait(PATIENCE)
            message = heard.get_message(timeout=PATIENCE)
            heard.close()
        assert message is not None
        handed, _, _name = message["data"].decode().partition(" ")
        assert handed.startswith("=")
        assert handed[1:].partition(":")[0].count(",") == 2  # token, stamp, elapsed
        assert entry_expiry_ms(admin, url, "b") >= released_at + round(TTL * 1000)
        grant = waiter.try_grant(request("b"))
        assert grant is not None
        assert grant.granted_ttl > TTL - WINDOW
        assert waiter.release("stock", "b")
