"""Redis ACLs: the rights tumbler needs are exactly the documented ones, checked at connect.

A user that lacks any documented command, or the prefix's keys or channels, is refused at
connect with ``PermissionDenied`` naming what it lacks, instead of failing later inside a
script (a renewal without ``PEXPIRETIME``, a release without ``PUBLISH``), where Redis's own
error names no command. A right taken away after the connect fails the call that needs it
with ``PermissionDenied`` naming the command, never ``BackendUnavailable``. A user with the
documented rights and nothing more can do everything. Real redis-server processes only.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterator

import pytest
import redis

import tumbler
import tumbler.aio
from tumbler import PermissionDenied
from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest, Renewal
from tumbler.backends.kit.owners import owner_hash
from tumbler.backends.redis import opener as redis_backend
from tumbler.backends.redis.common import ACL_RULES
from tumbler.backends.redis.lua import Keys
from tumbler.testing.backends.redis.server import RedisServer, RedisUser
from tumbler.testing.conformance.compat import (
    PATIENCE,
    abackground,
    aeventually,
    background,
    eventually,
)

from ..servers.fixtures import server_unavailable

FLAVOURS = ["sync", "asyncio"]

#: the commands the Redis backend's module docstring and the README list, in their order
DOCUMENTED_COMMANDS = [
    *("evalsha", "script|load", "info", "subscribe", "scan"),
    *("time", "hget", "hset", "hdel", "hgetall", "hlen", "get", "set", "del", "pexpireat"),
    *("pexpiretime", "exists", "publish", "zadd", "zrem", "zrange", "zrangebyscore"),
    *("zcard", "zcount", "zscore"),
]
DOCUMENTED_RULES = "~tumbler:* &tumbler:* " + " ".join(f"+{c}" for c in DOCUMENTED_COMMANDS)


def user_name(missing: str) -> str:
    return "no-" + missing.replace("|", "-")


def without(command: str) -> RedisUser:
    rules = " ".join(part for part in DOCUMENTED_RULES.split() if part != f"+{command}")
    return RedisUser(user_name(command), "pw-" + uuid.uuid4().hex[:8], rules)


EXACT = RedisUser("exact", "exact-pw", DOCUMENTED_RULES)
NO_CHANNELS = RedisUser(
    "no-channels", "no-channels-pw", DOCUMENTED_RULES.replace("&tumbler:* ", "")
)
LATER = RedisUser("later", "later-pw", DOCUMENTED_RULES)
#: a user that may read the prefix's keys, and nothing more
READER = RedisUser("reader", "reader-pw", "~tumbler:* +@read +@connection")
#: every key of a lock but its evicted notes (``<prefix>:{<name>}:evicted``)
LOCK_KEYS_ONLY = RedisUser(
    "lock-keys-only",
    "lock-keys-only-pw",
    DOCUMENTED_RULES.replace(
        "~tumbler:* ",
        " ".join(f"~tumbler:*:{suffix}" for suffix in ("e", "n", "t", "h", "w", "wf", "wx", "ws"))
        + " ",
    ),
)


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    users = [
        EXACT,
        NO_CHANNELS,
        LATER,
        READER,
        LOCK_KEYS_ONLY,
        *(without(command) for command in DOCUMENTED_COMMANDS),
    ]
    server = RedisServer(tmp_path_factory.mktemp("redis-acl"), users=users)
    try:
        server.start()
    except OSError as error:
        server_unavailable(f"cannot start redis-server with ACL users: {error}")
    yield server
    server.close()


def url_for(server: RedisServer, user: str, **options: object) -> str:
    options.setdefault("prefix", f"tumbler:test-{uuid.uuid4().hex[:12]}")
    return server.url_for(user) + "?" + "&".join(f"{k}={v}" for k, v in options.items())


def connect_error(flavour: str, url: str) -> PermissionDenied:
    """The PermissionDenied that connecting to ``url`` raises."""
    if flavour == "sync":
        with pytest.raises(PermissionDenied) as refused:
            tumbler.connect(url).close()
        return refused.value

    async def main() -> None:
        async with await tumbler.aio.connect(url):
            pass

    with pytest.raises(PermissionDenied) as refused:
        asyncio.run(main())
    return refused.value


def refused_part(error: Exception) -> str:
    """What the error says the user lacks (the ACL rules it then lists name everything)."""
    return str(error).split("tumbler needs the ACL rules")[0]


def names(text: str, command: str) -> bool:
    """Whether ``text`` names ``command`` as a word (``GET`` is not ``HGET``)."""
    return re.search(rf"(?<![\w|]){re.escape(command)}(?![\w|])", text, re.IGNORECASE) is not None


def test_the_documented_rules_are_the_ones_the_backend_needs() -> None:
    assert ACL_RULES == DOCUMENTED_RULES


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("command", DOCUMENTED_COMMANDS)
def test_a_user_lacking_a_command_is_refused_at_connect_naming_it(
    acl_server: RedisServer, command: str, flavour: str
) -> None:
    user = acl_server.users[user_name(command)]
    error = connect_error(flavour, url_for(acl_server, user.name))
    said = refused_part(error)
    assert names(said, command), said
    # and nothing else: every other right is there
    others = [other for other in DOCUMENTED_COMMANDS if other != command]
    assert not [other for other in others if names(said, other)], said
    assert user.password not in str(error)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_user_lacking_the_channels_is_refused_at_connect(
    acl_server: RedisServer, flavour: str
) -> None:
    url = url_for(acl_server, NO_CHANNELS.name, prefix="tumbler:chan")
    said = refused_part(connect_error(flavour, url))
    assert "PUBLISH tumbler:chan:c:" in said
    assert "SUBSCRIBE tumbler:chan:c:" in said


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_user_lacking_the_evicted_notes_key_is_refused_at_connect(
    acl_server: RedisServer, flavour: str
) -> None:
    # it could force-release, but its evicted holders could never learn why they lost. Redis
    # refuses the probe's call itself, which declares the notes key (the message names no key)
    url = url_for(acl_server, LOCK_KEYS_ONLY.name, prefix="tumbler:notes")
    assert "keys" in str(connect_error(flavour, url))


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_wait_replicas_needs_wait(acl_server: RedisServer, flavour: str) -> None:
    said = refused_part(connect_error(flavour, url_for(acl_server, EXACT.name, wait_replicas=1)))
    assert names(said, "wait"), said


def test_the_documented_rights_are_enough_for_everything(acl_server: RedisServer) -> None:
    url = url_for(acl_server, EXACT.name)
    with tumbler.connect(url) as locks, tumbler.connect(url) as other:
        lock = locks.lock("orders:42", ttl=30, fair=True)
        assert lock.acquire()
        hold = lock.hold
        waiter = background(lambda: other.lock("orders:42", fair=True).acquire(timeout=PATIENCE))
        eventually(lambda: locks.status("orders:42").waiters == 1, "the waiter queued")
        hold.extend(60)
        renewal = Renewal("orders:42", hold._request.owner, 30.0)
        assert locks._backend.renew_all([renewal], 5.0) == [30.0]
        assert [state.name for state in locks.status_all()] == ["orders:42"]
        lock.release()
        assert waiter.result() is True  # woken by the release's PUBLISH
        assert locks.force_release("orders:42") == 1
        with locks.semaphore("pool", permits=2), locks.rwlock("doc").read():
            assert locks.status("pool").limit == 2


@pytest.mark.asyncio
async def test_the_documented_rights_are_enough_for_everything_asyncio(
    acl_server: RedisServer,
) -> None:
    url = url_for(acl_server, EXACT.name)
    async with await tumbler.aio.connect(url) as locks, await tumbler.aio.connect(url) as other:
        lock = locks.lock("orders:42", ttl=30)
        assert await lock.acquire()
        waiter = abackground(lambda: other.lock("orders:42").acquire(timeout=PATIENCE))

        async def queued() -> bool:
            return (await locks.status("orders:42")).waiters == 1

        await aeventually(queued, "the waiter queued")
        await lock.hold.extend(60)
        await lock.release()
        assert await waiter.result() is True
        assert await locks.force_release("orders:42") == 1


def test_a_reader_cannot_hand_a_waiter_a_grant(acl_server: RedisServer) -> None:
    """A release that grants a waiter says so in its wake-up, which the waiter takes without
    asking the server: only who may write the lock may publish one. A user that may read the
    prefix's keys finds the waiter's channel there, and is refused the PUBLISH."""
    prefix = f"tumbler:test-{uuid.uuid4().hex[:12]}"
    url = url_for(acl_server, EXACT.name, prefix=prefix)

    def request(owner: str) -> GrantRequest:
        return GrantRequest("stock", owner, False, 1, False, 30.0, holder="case")

    with tumbler.connect(url) as holding, tumbler.connect(url) as waiting:
        held = holding._backend.try_grant(request("a"))
        assert held is not None
        waiter = waiting._backend
        with waiter.watch("stock", "b"):
            assert waiter.try_grant(request("b")) is None  # queued, listening
            reader = acl_server.client(READER.name)
            entries = reader.hvals(Keys(prefix).entries("stock"))
            (client,) = [value.split(b"|")[6] for value in entries if not value.split(b"|")[4]]
            forged = f"=999999999999,0,0:{owner_hash('b')} stock"
            with pytest.raises(redis.exceptions.NoPermissionError):
                reader.publish(Keys(prefix).client_channel(client.decode()), forged)
        assert waiter.try_grant(request("b")) is None
        (holder,) = holding.status("stock").holders
        assert holder.token == held.token


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_documented_rights_are_enough_for_force_release_notes(
    acl_server: RedisServer, flavour: str
) -> None:
    url = parse_url(url_for(acl_server, EXACT.name))
    holder = uuid.uuid4().hex
    request = GrantRequest("orders:42", holder, False, 1, False, 30.0, "test")

    async def run_async() -> tuple[int, str | None]:
        backend = await redis_backend.open_async(url)
        try:
            assert await backend.try_grant(request) is not None
            removed = await backend.force_release("orders:42", "by ops: stuck")
            return removed, await backend.evicted("orders:42", holder)
        finally:
            await backend.close()

    if flavour == "sync":
        backend = redis_backend.open_sync(url)
        try:
            assert backend.try_grant(request) is not None
            result = (
                backend.force_release("orders:42", "by ops: stuck"),
                backend.evicted("orders:42", holder),
            )
        finally:
            backend.close()
    else:
        result = asyncio.run(run_async())
    assert result == (1, "by ops: stuck")


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_right_taken_away_later_is_named_by_the_refused_call(
    acl_server: RedisServer, flavour: str
) -> None:
    admin = acl_server.client()

    def take(*rules: str) -> None:
        admin.execute_command("ACL", "SETUSER", LATER.name, *rules)

    url = url_for(acl_server, LATER.name)
    try:
        if flavour == "sync":
            with tumbler.connect(url) as locks:
                lock = locks.lock("ledger", ttl=30)
                assert lock.acquire()
                take("-pexpiretime")  # the renewal script needs it
                with pytest.raises(PermissionDenied) as refused:
                    lock.hold.extend(30)
                assert names(str(refused.value), "PEXPIRETIME"), refused.value
                assert refused.value.lock_name == "ledger"
                renewal = Renewal("ledger", lock.hold._request.owner, 30.0)
                with pytest.raises(PermissionDenied) as refused:
                    locks._backend.renew_all([renewal], 5.0)
                assert names(str(refused.value), "PEXPIRETIME"), refused.value
                take("+pexpiretime", "-zadd")  # the grant script needs it
                with pytest.raises(PermissionDenied) as refused:
                    locks.lock("other").acquire(blocking=False)
                assert names(str(refused.value), "ZADD"), refused.value
                take("+zadd")
                lock.release()
        else:

            async def main() -> None:
                async with await tumbler.aio.connect(url) as locks:
                    lock = locks.lock("ledger", ttl=30)
                    assert await lock.acquire()
                    take("-pexpiretime")
                    with pytest.raises(PermissionDenied) as refused:
                        await lock.hold.extend(30)
                    assert names(str(refused.value), "PEXPIRETIME"), refused.value
                    renewal = Renewal("ledger", lock.hold._request.owner, 30.0)
                    with pytest.raises(PermissionDenied) as refused:
                        await locks._backend.renew_all([renewal], 5.0)
                    assert names(str(refused.value), "PEXPIRETIME"), refused.value
                    take("+pexpiretime", "-zadd")
                    with pytest.raises(PermissionDenied) as refused:
                        await locks.lock("other").acquire(blocking=False)
                    assert names(str(refused.value), "ZADD"), refused.value
                    take("+zadd")
                    await lock.release()

            asyncio.run(main())
    finally:
        take("+pexpiretime", "+zadd")
