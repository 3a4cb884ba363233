"""The Redis backend's uncontended fast path: what a free lock's grant and release cost the
server, and the connection kept for grants and releases.

The scripts' decisions are held to ``tumbler._core`` by ``test_redis_lua_oracle.py`` (its
histories grant free locks and release sole entries, the fast paths, as well as the rest);
these tests pin what the fast paths exist for, counted by the server itself
(``INFO commandstats``) on a server of the test's own, and that taking one connection out of
the pool for them starves no other call. Real redis-server only.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import pytest
import redis

import tumbler
import tumbler.aio
from tumbler.testing.backends.redis.server import RedisServer
from tumbler.testing.conformance.compat import PATIENCE, background, eventually

#: the commands a grant of a free lock runs inside its script: TIME, HLEN, the token's GET
#: and SET, the entry's HSET, its ZADD among the grants (by token), a PEXPIREAT per key it
#: wrote (its expiry index waits for a script that finds more than this entry), and the
#: EXISTS that finds nobody watching the lock's state (no PUBLISH then)
GRANT_COMMANDS = Counter(
    {"time": 1, "hlen": 1, "get": 1, "set": 1, "hset": 1, "zadd": 1, "pexpireat": 2, "exists": 1}
)
#: and a release of the lock's only entry: TIME, HGET, HLEN, one DEL of every key, and the
#: EXISTS of the watchers' marker
RELEASE_COMMANDS = Counter({"time": 1, "hget": 1, "hlen": 1, "del": 1, "exists": 1})


def new_url(server: RedisServer, prefix: str | None = None, **options: str) -> str:
    """A URL of the server with a key prefix of the test's own, and ``options``."""
    query = "".join(f"&{key}={value}" for key, value in options.items())
    return f"{server.url}?prefix={prefix or new_prefix()}{query}"


def new_prefix() -> str:
    return f"tumbler:test-{uuid.uuid4().hex[:12]}"


def command_calls(admin: redis.Redis) -> Counter[str]:
    stats = admin.info("commandstats")
    return Counter(
        {key.removeprefix("cmdstat_"): int(value["calls"]) for key, value in stats.items()}
    )


def test_a_free_locks_grant_and_release_run_the_fewest_commands(
    fresh_redis_server: RedisServer,
) -> None:
    admin = fresh_redis_server.client()
    prefix = new_prefix()
    with tumbler.connect(new_url(fresh_redis_server, prefix)) as locks:
        lock = locks.lock("free", ttl=30)
        assert lock.acquire()  # the scripts loaded, the connections made
        lock.release()
        before = command_calls(admin)
        assert lock.acquire()
        granted = command_calls(admin)
        lock.release()
        released = command_calls(admin)
    grant = granted - before
    release = released - granted
    # one script call each, and inside it only what a free lock needs
    assert grant.pop("evalsha") == release.pop("evalsha") == 1
    grant.pop("info"), release.pop("info")  # the readings themselves
    assert grant == GRANT_COMMANDS
    assert release == RELEASE_COMMANDS
    # the released lock left nothing behind but its token sequence
    assert admin.keys(f"{prefix}:*") == [f"{prefix}:{{free}}:n".encode()]


def test_a_lock_with_a_waiter_takes_the_full_path(fresh_redis_server: RedisServer) -> None:
    url = new_url(fresh_redis_server)
    with tumbler.connect(url) as holder, tumbler.connect(url) as waiter:
        held = holder.lock("busy")
        assert held.acquire()
        waiting = background(lambda: waiter.lock("busy").acquire(timeout=PATIENCE))
        eventually(lambda: holder.status("busy").waiters == 1, "the waiter queued")
        held.release()  # not its lock's only entry: the waiter is let through and woken
        assert waiting.result()


def test_a_grant_of_a_free_lock_is_counted_although_its_expiry_index_waits(
    fresh_redis_server: RedisServer,
) -> None:
    """The free lock's grant is in the grants' index only; another contender counts it even
    when the expiry index holds a member that no entry backs (as many as the hash has
    fields, so the hash does not look unindexed), and it is indexed on the way."""
    admin = fresh_redis_server.client()
    prefix = new_prefix()
    with tumbler.connect(new_url(fresh_redis_server, prefix)) as one:
        held = one.lock("solo", ttl=30)
        assert held.acquire()
        admin.zadd(f"{prefix}:{{solo}}:t", {"0" * 40: 2**52})  # left by hand
        with tumbler.connect(new_url(fresh_redis_server, prefix)) as two:
            assert not two.lock("solo").acquire(timeout=0)  # held: refused
            assert [h.token for h in two.status("solo").holders] == [held.hold.token]
            held.release()
            assert two.lock("solo").acquire(timeout=0)


@pytest.mark.parametrize(
    ("connections", "threads"),
    [
        # with one connection the pool has none to spare, so none is kept for grants and
        # releases: the callers take turns on the pool's one, as before
        ("1", 4),
        # two: the kept one and one in the pool, for eight threads at once
        ("2", 8),
    ],
)
def test_concurrent_callers_share_the_kept_connection_and_the_pool(
    fresh_redis_server: RedisServer, connections: str, threads: int
) -> None:
    url = new_url(fresh_redis_server, max_connections=connections)
    with tumbler.connect(url) as locks:

        def pairs(name: str) -> int:
            lock = locks.lock(name)
            for _ in range(50):
                assert lock.acquire(timeout=PATIENCE)
                lock.release()
            return 50

        workers = [background(lambda name=f"n{index}": pairs(name)) for index in range(threads)]
        assert sum(worker.result() for worker in workers) == 50 * threads


def test_asyncio_tasks_share_the_kept_connection_and_the_pool(
    fresh_redis_server: RedisServer,
) -> None:
    url = new_url(fresh_redis_server, max_connections="2")

    async def main() -> int:
        locks = await tumbler.aio.connect(url)
        try:

            async def pairs(name: str) -> int:
                lock = locks.lock(name)
                for _ in range(50):
                    assert await lock.acquire(timeout=PATIENCE)
                    await lock.release()
                return 50

            done = await asyncio.gather(*(pairs(f"n{index}") for index in range(8)))
        finally:
            await locks.close()
        return sum(done)

    assert asyncio.run(main()) == 400
