"""tumbler.fencing.redis on the session's real Redis server, with redis.Redis and
redis.asyncio.Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from tumbler.errors import InvalidArgument, StaleToken

from .races import BAD_TOKENS, race

redis = pytest.importorskip("redis")
fencing = pytest.importorskip("tumbler.fencing.redis")

from redis.crc import key_slot  # noqa: E402

from tumbler.testing.backends.redis.server import RedisServer, flush_redis  # noqa: E402

BAD_KEYS: list[object] = ["", None, 7, b"account:7", "a\0b", "x}{y", "a{}b", "{}x{y}"]


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    flush_redis(redis_server)
    with redis.Redis(**redis_server.connection_kwargs(), decode_responses=True) as connection:
        yield connection


@pytest.mark.parametrize(
    "key", ["account:7", "{user:1}:balance", "a{b", "x{y}z{w}", "ключ", "x" * 300]
)
def test_the_fence_key_is_in_the_keys_cluster_slot(key: str) -> None:
    assert key_slot(fencing.fence_key(key).encode()) == key_slot(key.encode())


def test_no_two_keys_share_a_fence() -> None:
    keys = ["account:7", "{account:7}", "{account:7}x", "x{account:7}", "account:7:x"]
    assert len({fencing.fence_key(key) for key in keys}) == len(keys)


def test_a_higher_or_equal_token_is_accepted(client: redis.Redis) -> None:
    fence = fencing.RedisFence(client)
    for token, value in ((3, "a"), (3, "b"), (7, "c")):
        fence.set("account:7", value, token)
    assert client.get("account:7") == "c"
    assert client.get(fencing.fence_key("account:7")) == "7"
    fence.hset("order:42", {"state": "paid", "total": 90}, 9)
    fence.hset("order:42", {"state": "sent"}, 9)
    assert client.hgetall("order:42") == {"state": "sent", "total": "90"}


def test_a_lower_token_is_refused_and_the_key_unchanged(client: redis.Redis) -> None:
    fence = fencing.RedisFence(client)
    fence.set("account:7", "new", 5)
    with pytest.raises(StaleToken) as refused:
        fence.set("account:7", "late", 4)
    assert (refused.value.resource, refused.value.token, refused.value.highest) == (
        "account:7",
        4,
        5,
    )
    fence.hset("order:42", {"state": "paid"}, 5)
    with pytest.raises(StaleToken):
        fence.hset("order:42", {"state": "late"}, 4)
    assert client.get("account:7") == "new"
    assert client.hgetall("order:42") == {"state": "paid"}


def test_tokens_compare_as_numbers_of_any_size(client: redis.Redis) -> None:
    fence = fencing.RedisFence(client)
    fence.set("k", "a", 9)
    fence.set("k", "b", 10)  # as text, "10" < "9"
    with pytest.raises(StaleToken):
        fence.set("k", "c", 9)
    fence.set("k", "d", 2**70 + 1)
    with pytest.raises(StaleToken):
        fence.set("k", "e", 2**70)
    assert client.get("k") == "d"


def test_an_hset_of_a_key_that_is_no_hash_writes_nothing(client: redis.Redis) -> None:
    fence = fencing.RedisFence(client)
    fence.set("k", "text", 5)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        fence.hset("k", {"f": "v"}, 6)
    assert client.get(fencing.fence_key("k")) == "5"
    assert client.get("k") == "text"


@pytest.mark.parametrize("token", BAD_TOKENS[:-1], ids=repr)
def test_a_bad_token_is_refused_and_changes_nothing(client: redis.Redis, token: object) -> None:
    fence = fencing.RedisFence(client)
    with pytest.raises(InvalidArgument):
        fence.set("account:7", "x", token)
    with pytest.raises(InvalidArgument):
        fence.hset("account:7", {"f": "x"}, token)
    assert client.dbsize() == 0


@pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
def test_a_bad_key_is_refused_and_changes_nothing(client: redis.Redis, key: object) -> None:
    fence = fencing.RedisFence(client)
    with pytest.raises(InvalidArgument):
        fence.set(key, "x", 5)
    with pytest.raises(InvalidArgument):
        fence.hset("order:42", {}, 5)
    assert client.dbsize() == 0


def test_a_stale_write_never_lands_after_a_newer_one(
    client: redis.Redis, redis_server: RedisServer
) -> None:
    connections = {token: redis.Redis(**redis_server.connection_kwargs()) for token in (5, 4)}
    holders = {token: fencing.RedisFence(connection) for token, connection in connections.items()}
    try:
        for round_ in range(10):
            key = f"account:{round_}"
            outcomes = race(lambda token, key: holders[token].set(key, str(token), token), key)
            assert client.get(key) == "5"
            assert outcomes[5] is None
            assert outcomes[4] is None or isinstance(outcomes[4], StaleToken)
    finally:
        for connection in connections.values():
            connection.close()


def test_the_script_is_loaded_again_after_a_script_flush(client: redis.Redis) -> None:
    fence = fencing.RedisFence(client)
    fence.set("k", "a", 1)
    client.script_flush()
    fence.set("k", "b", 2)
    assert client.get("k") == "b"


@pytest_asyncio.fixture
async def aclient(redis_server: RedisServer) -> AsyncIterator[redis.asyncio.Redis]:
    flush_redis(redis_server)
    connection = redis.asyncio.Redis(**redis_server.connection_kwargs(), decode_responses=True)
    yield connection
    await connection.aclose()


@pytest.mark.asyncio
async def test_async_accepts_a_higher_or_equal_token_and_refuses_a_lower(
    aclient: redis.asyncio.Redis,
) -> None:
    fence = fencing.AsyncRedisFence(aclient)
    await fence.set("account:7", "a", 3)
    await fence.set("account:7", "b", 3)
    await fence.hset("order:42", {"state": "paid"}, 3)
    with pytest.raises(StaleToken) as refused:
        await fence.set("account:7", "late", 2)
    assert refused.value.highest == 3
    with pytest.raises(StaleToken):
        await fence.hset("order:42", {"state": "late"}, 2)
    with pytest.raises(InvalidArgument):
        await fence.set("account:7", "bad", True)
    assert await aclient.get("account:7") == "b"
    assert await aclient.hgetall("order:42") == {"state": "paid"}
