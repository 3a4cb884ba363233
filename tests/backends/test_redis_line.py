"""A Redis lock's line: bounded in length, and robust to entries tumbler did not write.

- ``max_waiters``: a lock queues at most that many waiters; one more acquire that would wait
  gets ``TooManyWaiters`` and leaves nothing behind, while tries that do not wait still work.
  (What a long line costs the server is measured by bench/redis_long_line.py, not here.)
- Malformed entries in a lock's hash (written by hand, by another program, by a bug) are
  skipped by every script and counted by ``status`` (``LockState.malformed``); the lock
  keeps working, ``status`` and ``status_all`` keep working, ``force_release`` works, and the
  next grant or release drops them, so that no key is left without an expiry. A token
  counter set by hand to what is no number, or past the integers a double holds, and a key
  of the lock holding another type, block nothing either.

Real redis-server processes only; the malformed entries are written with redis-py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid

import pytest
import redis

import tumbler
import tumbler.aio
from tumbler import TooManyWaiters
from tumbler.cli import main
from tumbler.testing.backends.redis.server import RedisServer
from tumbler.testing.conformance.compat import (
    PATIENCE,
    abackground,
    aeventually,
    background,
    eventually,
)

FLAVOURS = ["sync", "asyncio"]

#: entries no tumbler script wrote: field -> value
JUNK: dict[str, str | bytes] = {
    "not-an-owner": "not an entry",
    "f" * 40: "1|2|3",  # too few fields
    "e" * 40: "1|0|1|0||99999999999999999999||x",  # an expiry no double holds exactly
    "d" * 40: "x|0|1|0|5|1|c|h",  # not a number
    "c" * 40: b"\xff\xfe\x00|\x80",  # not text
    "b" * 40: "",
}


def new_prefix() -> str:
    return f"tumbler:test-{uuid.uuid4().hex[:12]}"


def entries_key(prefix: str, name: str) -> str:
    return f"{prefix}:{{{name}}}:e"


def write_junk(admin: redis.Redis, prefix: str, name: str) -> None:
    """The junk in the lock's hash, and the hash made to live for ever (as HSET by hand does)."""
    key = entries_key(prefix, name)
    admin.hset(key, mapping=JUNK)  # type: ignore[arg-type]
    admin.persist(key)
    # and index members that name no entry
    admin.zadd(f"{prefix}:{{{name}}}:w", {"a" * 40: 1})
    admin.zadd(f"{prefix}:{{{name}}}:h", {"9" * 40: 1})


def keys_without_expiry(admin: redis.Redis, prefix: str) -> list[bytes]:
    return [key for key in admin.scan_iter(match=f"{prefix}:*") if admin.pttl(key) < 0]


# -- max_waiters ---------------------------------------------------------------------------


def test_a_full_line_refuses_one_more_waiter(redis_server: RedisServer) -> None:
    url = f"{redis_server.url}?prefix={new_prefix()}&max_waiters=2"
    with (
        tumbler.connect(url) as holder,
        tumbler.connect(url) as first,
        tumbler.connect(url) as second,
        tumbler.connect(url) as third,
    ):
        lock = holder.lock("busy")
        assert lock.acquire()
        waits = [
            background(lambda c=c: c.lock("busy").acquire(timeout=PATIENCE))
            for c in (first, second)
        ]
        eventually(lambda: holder.status("busy").waiters == 2, "two waiters queued")
        with pytest.raises(TooManyWaiters) as refused:
            third.lock("busy").acquire(timeout=PATIENCE)
        assert refused.value.lock_name == "busy"
        assert "max_waiters" in str(refused.value)
        assert third.lock("busy").acquire(blocking=False) is False  # a try does not queue
        assert holder.status("busy").waiters == 2  # the refused one left nothing
        lock.release()
        eventually(lambda: holder.status("busy").waiters == 1, "one waiter got the lock")
        # a place came free: the third queues now, and simply times out
        assert third.lock("busy").acquire(timeout=0.2) is False
        holder.force_release("busy")
        assert sorted(wait.result() for wait in waits) == [True, True]


@pytest.mark.asyncio
async def test_a_full_line_refuses_one_more_waiter_asyncio(redis_server: RedisServer) -> None:
    url = f"{redis_server.url}?prefix={new_prefix()}&max_waiters=1"
    async with (
        await tumbler.aio.connect(url) as holder,
        await tumbler.aio.connect(url) as first,
        await tumbler.aio.connect(url) as second,
    ):
        lock = holder.lock("busy")
        assert await lock.acquire()
        wait = abackground(lambda: first.lock("busy").acquire(timeout=PATIENCE))

        async def queued(count: int) -> bool:
            return (await holder.status("busy")).waiters == count

        await aeventually(lambda: queued(1), "the waiter queued")
        with pytest.raises(TooManyWaiters) as refused:
            await second.lock("busy").acquire(timeout=PATIENCE)
        assert refused.value.lock_name == "busy"
        assert await second.lock("busy").acquire(blocking=False) is False
        assert await queued(1)
        await lock.release()
        assert await wait.result() is True
        assert await second.lock("busy").acquire(timeout=0.2) is False  # queues, times out
        await holder.force_release("busy")


def test_max_waiters_defaults_to_ten_thousand(redis_server: RedisServer) -> None:
    with tumbler.connect(f"{redis_server.url}?prefix={new_prefix()}") as locks:
        assert locks._backend.config.max_waiters == 10_000


# -- malformed entries ---------------------------------------------------------------------


def test_malformed_entries_block_nothing_and_are_dropped(redis_server: RedisServer) -> None:
    prefix = new_prefix()
    url = f"{redis_server.url}?prefix={prefix}"
    admin = redis_server.client()
    with tumbler.connect(url) as locks, tumbler.connect(url) as other:
        lock = locks.lock("ledger")
        assert lock.acquire()
        write_junk(admin, prefix, "ledger")
        write_junk(admin, prefix, "fresh")  # a lock nobody used: nothing but junk

        state = locks.status("ledger")
        assert (len(state.holders), state.waiters, state.malformed) == (1, 0, len(JUNK))
        assert [state.name for state in locks.status_all()] == ["ledger"]
        assert locks.status("fresh").malformed == len(JUNK)

        # the line still works, and the waiter's grant attempt drops the junk
        waiter = background(lambda: other.lock("ledger").acquire(timeout=PATIENCE))
        eventually(lambda: locks.status("ledger").waiters == 1, "the waiter queued")
        assert locks.status("ledger").malformed == 0
        write_junk(admin, prefix, "ledger")
        lock.release()  # the waiter gets the lock (its re-check or the release drops the junk)
        assert waiter.result() is True
        assert admin.hlen(entries_key(prefix, "ledger")) == 1

        fresh = locks.lock("fresh")
        assert fresh.acquire(blocking=False)  # junk holds nothing up
        fresh.release()
        assert admin.exists(entries_key(prefix, "fresh")) == 0

        write_junk(admin, prefix, "ledger")
        assert locks.force_release("ledger") == 1  # the waiter's grant
        assert admin.exists(entries_key(prefix, "ledger")) == 0
        assert keys_without_expiry(admin, prefix) == []
        assert locks.status_all() == []


@pytest.mark.asyncio
async def test_malformed_entries_block_nothing_and_are_dropped_asyncio(
    redis_server: RedisServer,
) -> None:
    prefix = new_prefix()
    url = f"{redis_server.url}?prefix={prefix}"
    admin = redis_server.client()
    async with await tumbler.aio.connect(url) as locks:
        write_junk(admin, prefix, "ledger")
        state = await locks.status("ledger")
        assert (state.holders, state.waiters, state.malformed) == ((), 0, len(JUNK))
        assert await locks.status_all() == []
        lock = locks.lock("ledger")
        assert await lock.acquire(blocking=False)
        assert (await locks.status("ledger")).malformed == 0  # the grant dropped them
        write_junk(admin, prefix, "ledger")
        assert [state.name for state in await locks.status_all()] == ["ledger"]
        assert await locks.force_release("ledger") == 1
        assert keys_without_expiry(admin, prefix) == []
        assert await asyncio.wait_for(lock.acquire(blocking=False), PATIENCE)
        await locks.force_release("ledger")


def test_entries_without_indexes_are_respected(redis_server: RedisServer) -> None:
    """A well-formed entry that no index knows (tumbler before the indexes wrote only the
    hash, so both may run side by side during an upgrade) holds the lock as it says, also
    when its lease was extended in the hash alone."""
    prefix = new_prefix()
    admin = redis_server.client(decode_responses=True)
    seconds, micros = admin.time()
    now_ms = seconds * 1000 + micros // 1000
    token = seconds * 1_000_000 + micros
    field = hashlib.sha1(b"an older client's owner id").hexdigest()

    def write(expires_ms: int) -> None:
        admin.hset(entries_key(prefix, "ledger"), field, f"{token}|0|1|0|{token}|{expires_ms}||old")

    write(now_ms + 30_000)
    with tumbler.connect(f"{redis_server.url}?prefix={prefix}") as locks:
        assert locks.lock("ledger").acquire(blocking=False) is False
        [holder] = locks.status("ledger").holders
        assert (holder.token, holder.holder) == (token, "old")
        # the older client renews in the hash only; the index still has the first expiry
        write(now_ms + 60_000)
        admin.zadd(f"{prefix}:{{ledger}}:t", {field: now_ms - 1})
        assert locks.lock("ledger").acquire(blocking=False) is False
        write(now_ms - 1)  # its lease ran out
        lock = locks.lock("ledger")
        assert lock.acquire(blocking=False)
        assert lock.hold.token > token
        lock.release()


def sequence_key(prefix: str, name: str) -> str:
    return f"{prefix}:{{{name}}}:n"


@pytest.mark.parametrize(
    "sequence",
    [
        "abc",  # no number
        "9223372036854775807",  # 2**63 - 1: past the integers a double holds exactly
        "9007199254740992",  # 2**53: one past them
        "-5",
    ],
)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_sequence_tumbler_did_not_write_blocks_nothing(
    redis_server: RedisServer, sequence: str, flavour: str
) -> None:
    """The name's token counter set by hand: the next grant draws from the server's clock
    instead, each grant's token is one the scripts can read back, and only one holder is
    granted (an unreadable token would make the grant an entry that does not parse)."""
    prefix = new_prefix()
    url = f"{redis_server.url}?prefix={prefix}"
    admin = redis_server.client()
    admin.set(sequence_key(prefix, "ledger"), sequence)

    if flavour == "sync":
        with tumbler.connect(url) as locks, tumbler.connect(url) as other:
            with locks.lock("ledger") as hold:
                assert 0 < hold.token <= 2**53
                assert not other.lock("ledger").acquire(blocking=False)
                assert [h.token for h in locks.status("ledger").holders] == [hold.token]
            admin.set(sequence_key(prefix, "ledger"), sequence)
            assert other.lock("ledger").acquire(blocking=False)
            assert locks.force_release("ledger") == 1
        return

    async def main() -> None:
        async with await tumbler.aio.connect(url) as locks, await tumbler.aio.connect(url) as other:
            async with locks.lock("ledger") as hold:
                assert 0 < hold.token <= 2**53
                assert not await other.lock("ledger").acquire(blocking=False)
            assert await other.lock("ledger").acquire(blocking=False)
            assert await locks.force_release("ledger") == 1

    asyncio.run(main())


@pytest.mark.parametrize("key", ["e", "n", "t", "h", "w", "g"])
def test_a_key_of_the_lock_holding_another_type_blocks_nothing(
    redis_server: RedisServer, key: str
) -> None:
    """A key of the lock that holds another type than tumbler keeps there (written by hand,
    by another program): it goes as an entry that does not parse does, and force_release
    always clears the lock."""
    prefix = new_prefix()
    url = f"{redis_server.url}?prefix={prefix}"
    admin = redis_server.client()
    with tumbler.connect(url) as locks, tumbler.connect(url) as other:
        lock = locks.lock("ledger")
        assert lock.acquire()
        wrong = f"{prefix}:{{ledger}}:{key}"
        admin.delete(wrong)
        admin.rpush(wrong, "not", "tumbler's")  # a list, where no key of a lock is one
        state = locks.status("ledger")
        if key == "e":
            assert state.malformed == 1
        # the grant is gone with a hash that is no hash; an index is rebuilt from the hash
        assert locks.force_release("ledger") == (0 if key == "e" else 1)
        assert other.lock("ledger").acquire(blocking=False)
        assert admin.type(wrong) != b"list"
        assert locks.force_release("ledger") == 1
        assert locks.status_all() == []


def test_status_says_how_many_entries_tumbler_did_not_write(
    redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = new_prefix()
    url = f"{redis_server.url}?prefix={prefix}"
    write_junk(redis_server.client(), prefix, "ledger")
    assert main(["status", "--url", url, "ledger"]) == 0
    said = capsys.readouterr().out
    assert f"lock 'ledger': {len(JUNK)} entries tumbler did not write" in said
    assert main(["status", "--url", url, "--json", "ledger"]) == 0
    assert json.loads(capsys.readouterr().out)["malformed"] == len(JUNK)
