"""redis://, rediss://, redis+unix://: what is particular to the Redis backend.

The contract suite already runs every generic lock case on Redis, Redis TLS+ACL and Redis
Cluster. Here: the keys and hash slots, fencing after keys vanish, scripts the server forgot,
crashes and restarts, TLS and ACL failures, wake-ups by pub/sub (no polling, no herd),
``wait_replicas``, the URL grammar, and ``status_all`` across a cluster. Real redis-server
processes only (``tumbler.testing.servers``, fixtures in ``tests/servers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
import redis.cluster
import trustme

import tumbler
import tumbler.aio
from tests.backends.timed_waiter import TimedWaiter
from tests.backends.tls_contexts import ContextsMade
from tumbler import (
    BackendUnavailable,
    InvalidURL,
    LockLost,
    PermissionDenied,
    TumblerError,
)
from tumbler._url import parse_url
from tumbler.backends.redis import lua
from tumbler.backends.redis.common import BACKUP_SLACK, HAND_OFF_CONFIRM_MS, parse_config
from tumbler.testing.backends.redis.server import (
    TUMBLER_PASSWORD,
    RedisServer,
    RedisServerCluster,
    RedisUser,
    valkey_server_binary,
)
from tumbler.testing.conformance.compat import (
    PATIENCE,
    aeventually,
    background,
    eventually,
    gather,
)
from tumbler.testing.servers import free_port, make_tls_files
from tumbler.torture.proxy import FaultProxy

#: how often a waiter re-checks on its own (``capabilities.recheck_interval``)
RECHECK = 1.0
#: a wait that proves "did not hang", far above anything a healthy run needs
NO_HANG = 10.0


# -- helpers -------------------------------------------------------------------------------


def new_prefix() -> str:
    """A key prefix of the test's own: tests sharing a session server stay apart."""
    return f"tumbler:test-{uuid.uuid4().hex[:12]}"


def with_options(url: str, **options: object) -> str:
    query = "&".join(f"{key}={value}" for key, value in options.items())
    return f"{url}{'&' if '?' in url else '?'}{query}"


def keys_under(client: redis.Redis | redis.cluster.RedisCluster, prefix: str) -> list[str]:
    return sorted(text(key) for key in client.scan_iter(match=f"{prefix}:*", count=1000))


def evalsha_calls(admin: redis.Redis) -> int:
    """How many EVALSHA the server has run (every grant, renewal, release and inspection)."""
    stats = admin.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def sha1hex(data: str) -> str:
    return hashlib.sha1(data.encode()).hexdigest()


def text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def secret_free(error: BaseException, *secrets: str) -> bool:
    """True if no secret (raw or percent-encoded) is in the error, its causes or traceback."""
    report = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    report += repr(error) + str(getattr(error, "backend", ""))
    forms = {form for secret in secrets for form in (secret, quote(secret, safe=""))}
    return not any(form in report for form in forms)


def subscriptions(admin: redis.Redis) -> list[int]:
    """The channel count of every connection subscribed to something (CLIENT LIST ``sub=``)."""
    return sorted(int(client["sub"]) for client in admin.client_list() if int(client["sub"]) > 0)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: a unix socket's path must fit in about 100 bytes."""
    path = Path(tempfile.mkdtemp(prefix="tr-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return f"{redis_server.url}?prefix={new_prefix()}"


def cluster_url(cluster: RedisServerCluster, prefix: str) -> str:
    nodes = ",".join(f"{host}:{port}" for host, port in cluster.startup_nodes)
    return f"redis://{nodes}/0?cluster=true&prefix={prefix}"


def tls_url(server: RedisServer, user: str = "tumbler", **options: object) -> str:
    options.setdefault("prefix", new_prefix())
    return with_options(server.url_for(user), **options)


# -- keys ----------------------------------------------------------------------------------

AWKWARD_NAMES = [
    "orders:42",
    "{",
    "}",
    "}{",
    "{}",
    "a{b}c",
    "x:{y}:z",
    "%7B",  # what "{" is escaped to: must stay a different lock
    "%",
    "100%:{%}",
    "ünï{cödé}",
    "*?[]",
]


def test_every_key_of_a_name_shares_one_hash_slot(redis_cluster: RedisServerCluster) -> None:
    prefix = new_prefix()
    with tumbler.connect(cluster_url(redis_cluster, prefix)) as locks:
        # all held at once: a Lua script whose keys were in two slots would fail (CROSSSLOT)
        holds = []
        for name in AWKWARD_NAMES:
            lock = locks.lock(name)
            assert lock.acquire(blocking=False), name
            holds.append(lock.hold)
        assert [locks.status(name).holders[0].token for name in AWKWARD_NAMES] == [
            hold.token for hold in holds
        ]
        admin = redis_cluster.client(decode_responses=True)
        keys = keys_under(admin, prefix)
        node = redis_cluster.nodes[0].client(decode_responses=True)
        by_tag: dict[str, list[str]] = {}
        for key in keys:
            tag = key[key.index("{") + 1 : key.index("}", key.index("{"))]
            by_tag.setdefault(tag, []).append(key)
        # one hash tag per name (no two names collide), each with its entries, sequence and
        # grants keys (the expiries' and the line's are made when somebody else comes)
        assert len(by_tag) == len(AWKWARD_NAMES), keys
        for tag, group in by_tag.items():
            assert sorted(key.rsplit(":", 1)[1] for key in group) == ["e", "h", "n"], group
            slots = {node.execute_command("CLUSTER KEYSLOT", key) for key in group}
            assert slots == {node.execute_command("CLUSTER KEYSLOT", "{" + tag + "}")}, group
        # and every key the scripts may make for a name is in that slot too
        for name in AWKWARD_NAMES:
            every = lua.Keys(prefix).probe_keys(name)
            slots = {node.execute_command("CLUSTER KEYSLOT", key) for key in every}
            assert len(slots) == 1, every
        # and the names come back intact from the keys
        assert sorted(state.name for state in locks.status_all()) == sorted(AWKWARD_NAMES)
        for hold in holds:
            hold.release()
        assert all(key.endswith(":n") for key in keys_under(admin, prefix))


def test_only_the_sequence_key_outlives_a_release_and_it_expires(
    redis_server: RedisServer,
) -> None:
    prefix = new_prefix()
    url = f"{redis_server.url}?prefix={prefix}"
    admin = redis_server.client(decode_responses=True)
    with tumbler.connect(url) as locks, tumbler.connect(url) as other:
        with locks.lock("orders:42"):
            assert (
                len(keys_under(admin, prefix)) == 3
            )  # entries, sequence, grants (expiries: once needed)
            # a waiter that gives up must withdraw its entry, too
            assert not other.lock("orders:42").acquire(timeout=0.2)
        [sequence] = keys_under(admin, prefix)
        assert sequence.endswith(":n")
        assert 0 < admin.pttl(sequence) <= lua.SEQUENCE_TTL_MS
        assert locks.status_all() == []


def test_owners_are_stored_hashed(redis_server: RedisServer, redis_url: str) -> None:
    admin = redis_server.client(decode_responses=True)
    prefix = parse_url(redis_url).query["prefix"]
    with tumbler.connect(redis_url) as locks, tumbler.connect(redis_url) as other:
        lock = locks.lock("payroll")
        assert lock.acquire()
        hold = lock.hold
        owner = hold._request.owner
        waiter = background(lambda: other.lock("payroll").acquire(timeout=PATIENCE))
        eventually(lambda: locks.status("payroll").waiters == 1, "the waiter queued")
        stored: list[str] = []
        for key in keys_under(admin, prefix):
            if admin.type(key) == "hash":
                for field, value in admin.hgetall(key).items():
                    stored += [field, value]
            elif admin.type(key) == "zset":
                stored += admin.zrange(key, 0, -1)
            else:
                stored.append(admin.get(key) or "")
        assert stored
        assert not any(owner in data for data in stored)
        assert sha1hex(owner) in stored
        hold.release()
        assert waiter.result() is True


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_connections_name_their_driver_without_reading_its_metadata_each_time(
    redis_server: RedisServer, redis_url: str, monkeypatch: pytest.MonkeyPatch, flavour: str
) -> None:
    """redis-py names itself to the server (CLIENT SETINFO) from its package's metadata, which
    the newer one reads again for every connection it opens unless it is given its driver's
    description: a millisecond or two of CPU per connection. tumbler's connections say what
    redis-py's own say (on Redis 7.2 and later), made once."""
    admin = redis_server.client(decode_responses=True)
    before = {client["id"] for client in admin.client_list()}  # the admin's connection first
    reads: list[int] = []
    real = redis.utils.get_lib_version
    monkeypatch.setattr(redis.utils, "get_lib_version", lambda: reads.append(1) or real())

    def opened() -> list[dict[str, str]]:
        return [client for client in admin.client_list() if client["id"] not in before]

    async def use_asyncio() -> list[dict[str, str]]:
        async with await tumbler.aio.connect(redis_url) as locks:
            for number in range(5):
                async with locks.lock(f"named-{number}"):
                    pass
            return opened()

    if flavour == "sync":
        with tumbler.connect(redis_url) as locks:
            for number in range(5):
                with locks.lock(f"named-{number}"):
                    pass
            made = opened()
    else:
        made = asyncio.run(use_asyncio())
    assert len(made) >= 2, made  # its calls' and its wake-ups' connections at least
    assert reads == []


# -- fencing tokens ------------------------------------------------------------------------


def test_tokens_keep_increasing_after_the_keys_were_deleted(
    redis_server: RedisServer, redis_url: str
) -> None:
    admin = redis_server.client()
    prefix = parse_url(redis_url).query["prefix"]
    with tumbler.connect(redis_url) as locks:
        tokens = []
        for _ in range(3):
            with locks.lock("ledger") as hold:
                tokens.append(hold.token)
        assert tokens == sorted(set(tokens))
        # what a day without grants does (the sequence key expires), done by hand
        assert admin.delete(*keys_under(admin, prefix)) >= 1
        assert keys_under(admin, prefix) == []
        seconds, micros = admin.time()
        with locks.lock("ledger") as hold:
            assert hold.token > tokens[-1]
            # the floor: no token is below the server's clock in microseconds
            assert hold.token >= seconds * 1_000_000 + micros


# -- scripts -------------------------------------------------------------------------------


def test_scripts_are_loaded_again_after_script_flush(
    redis_server: RedisServer, redis_url: str
) -> None:
    admin = redis_server.client()
    grant_sha = sha1hex(lua.GRANT)
    with tumbler.connect(redis_url) as locks, tumbler.connect(redis_url) as other:
        lock = locks.lock("reports", ttl=30)
        assert lock.acquire()
        assert admin.script_exists(grant_sha) == [True]
        hold = lock.hold
        admin.script_flush()
        assert admin.script_exists(grant_sha) == [False]
        hold.extend()  # the renewal script
        assert hold.held
        admin.script_flush()
        [holder] = other.status("reports").holders  # the inspection script
        assert holder.token == hold.token
        admin.script_flush()
        assert not other.lock("reports").acquire(blocking=False)  # the grant script
        admin.script_flush()
        hold.release()  # the release script
        admin.script_flush()
        assert lock.acquire(blocking=False)
        assert lock.hold.token > hold.token
        admin.script_flush()
        assert other.force_release("reports") == 1
        assert other.status_all() == []


# -- the server goes away --------------------------------------------------------------------


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_an_unreachable_server_is_reported_quickly_without_the_password(flavour: str) -> None:
    secret = "s3cret/pa:ss@word"
    url = f"redis://tumbler:{quote(secret, safe='')}@127.0.0.1:{free_port()}/0"
    began = time.monotonic()
    with pytest.raises(BackendUnavailable) as refused:
        if flavour == "sync":
            tumbler.connect(url)
        else:
            asyncio.run(tumbler.aio.connect(url))
    assert time.monotonic() - began < NO_HANG
    assert secret_free(refused.value, secret)
    assert "tumbler:***@" in str(refused.value)


def test_a_hold_is_lost_when_the_server_dies(fresh_redis_server: RedisServer) -> None:
    server = fresh_redis_server
    url = f"{server.url}?prefix={new_prefix()}"
    with tumbler.connect(url) as locks:
        lock = locks.lock("backup", ttl=1.5)
        assert lock.acquire()
        hold = lock.hold
        server.kill()
        # renewals cannot reach the server: the hold must be given up when its lease ends
        assert hold.wait_lost(timeout=NO_HANG)
        assert "lease" in (hold.lost_reason or "")
        assert not hold.held
        with pytest.raises(LockLost):
            hold.check()
        server.start()
        # The documented weakness: a Redis restarted without persistence forgot the grant,
        # so another client gets the lock at once. Only the fencing token (from the server's
        # clock) still tells the two holders apart.
        with tumbler.connect(url) as after:
            again = after.lock("backup")
            assert again.acquire(blocking=False)
            assert again.hold.token > hold.token
            again.release()


def test_an_appendonly_server_keeps_grants_through_a_crash(tmp_path: Path) -> None:
    # fsync on every write: the grant is on disk before the script's reply
    with RedisServer(
        tmp_path / "aof", appendonly=True, extra_config=["appendfsync always"]
    ) as server:
        url = f"{server.url}?prefix={new_prefix()}"
        with tumbler.connect(url) as first:
            lock = first.lock("nightly", ttl=3, renew=False)
            assert lock.acquire()
            hold = lock.hold
            server.kill()
            server.start()
            with tumbler.connect(url) as second:
                [holder] = second.status("nightly").holders
                assert holder.token == hold.token
                assert holder.expires_in > 0
                assert not second.lock("nightly").acquire(blocking=False)
                after = second.lock("nightly")
                assert after.acquire(timeout=PATIENCE)
                # the second grant came only once the first lease had run out
                assert not hold.held
                assert after.hold.token > hold.token
                after.release()


# -- TLS -------------------------------------------------------------------------------------


def test_rediss_without_the_servers_ca_is_refused(
    redis_tls_server: RedisServer, tmp_path: Path
) -> None:
    stranger = tmp_path / "stranger-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(stranger))
    for url in (
        tls_url(redis_tls_server),  # the system's CAs only
        tls_url(redis_tls_server, ssl_ca_certs=stranger),
        tls_url(redis_tls_server, ssl_ca_certs=stranger, ssl_check_hostname="false"),
    ):
        began = time.monotonic()
        with pytest.raises(TumblerError) as refused:
            tumbler.connect(url)
        assert time.monotonic() - began < NO_HANG
        assert isinstance(refused.value, (BackendUnavailable, PermissionDenied)), refused.value
        assert secret_free(refused.value, TUMBLER_PASSWORD)


def test_rediss_with_the_ca_and_its_options(redis_tls_server: RedisServer) -> None:
    server = redis_tls_server
    ca = server.ca_path
    urls = [
        tls_url(server, ssl_ca_certs=ca),
        tls_url(server, ssl_ca_certs=ca).replace("127.0.0.1", "localhost"),
        tls_url(server, ssl_ca_certs=ca, ssl_check_hostname="false"),
        tls_url(
            server,
            ssl_ca_certs=ca,
            ssl_certfile=server.client_cert_path,
            ssl_keyfile=server.client_key_path,
        ),
    ]
    for url in urls:
        with tumbler.connect(url) as locks, locks.lock("tls") as hold:
            assert hold.held
    with pytest.raises(InvalidURL, match="ssl_check_hostname"):
        tumbler.connect(tls_url(server, ssl_ca_certs=ca, ssl_check_hostname="perhaps"))


class ElsewhereServer(RedisServer):
    """A TLS server whose certificate names another host: the readiness probe (and the
    test's own clients) must not check the hostname to reach it."""

    def connection_kwargs(self, user: str | None = None) -> dict[str, object]:
        return {**super().connection_kwargs(user), "ssl_check_hostname": False}


def test_ssl_check_hostname_decides_on_a_certificate_for_another_name(tmp_path: Path) -> None:
    tls = make_tls_files(tmp_path / "tls", server_names=("tumbler-elsewhere.test",))
    with ElsewhereServer(tmp_path / "redis", tls=tls) as server:
        url = with_options(server.url, prefix=new_prefix(), ssl_ca_certs=tls.ca_path)
        # the certificate is the right CA's, but names another host
        with pytest.raises(TumblerError) as refused:
            tumbler.connect(url)
        assert isinstance(refused.value, (BackendUnavailable, PermissionDenied))
        assert "hostname" in str(refused.value).lower() or "match" in str(refused.value)
        with (
            tumbler.connect(with_options(url, ssl_check_hostname="false")) as locks,
            locks.lock("unchecked") as hold,
        ):
            assert hold.held


def tumbler_connections(admin: redis.Redis, after: int) -> int:
    """How many connections user tumbler has open that the server accepted after id ``after``."""
    return sum(
        1
        for client in admin.client_list()
        if client["user"] == "tumbler" and int(client["id"]) > after
    )


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_client_reads_its_tls_files_once_for_all_its_connections(
    redis_tls_server: RedisServer, monkeypatch: pytest.MonkeyPatch, flavour: str
) -> None:
    server = redis_tls_server
    admin = server.client()
    after = max(int(client["id"]) for client in admin.client_list())
    url = tls_url(
        server,
        ssl_ca_certs=server.ca_path,
        ssl_certfile=server.client_cert_path,
        ssl_keyfile=server.client_key_path,
    )
    contexts = ContextsMade(monkeypatch)
    names = [f"tls-{index}" for index in range(8)]
    if flavour == "sync":
        all_held, counted = threading.Barrier(len(names) + 1), threading.Event()

        def hold(name: str) -> bool:
            lock = locks.lock(name)
            assert lock.acquire(timeout=PATIENCE)
            all_held.wait(PATIENCE)
            assert counted.wait(PATIENCE)
            lock.release()
            return True

        def wait(name: str) -> bool:
            lock = locks.lock(name)
            granted = lock.acquire(timeout=PATIENCE)
            lock.release()
            return granted

        with tumbler.connect(url) as locks:
            holders = [background(functools.partial(hold, name)) for name in names]
            all_held.wait(PATIENCE)
            waiter = background(functools.partial(wait, names[0]))
            eventually(lambda: locks.status(names[0]).waiters == 1, "the waiter waits")
            connections = tumbler_connections(admin, after)
            counted.set()
            assert all(holder.result() for holder in holders)
            assert waiter.result()
    else:

        async def main() -> int:
            async with await tumbler.aio.connect(url) as locks:
                held, counted = asyncio.Semaphore(0), asyncio.Event()

                async def hold(name: str) -> bool:
                    lock = locks.lock(name)
                    assert await lock.acquire(timeout=PATIENCE)
                    held.release()
                    await counted.wait()
                    await lock.release()
                    return True

                async def wait(name: str) -> bool:
                    lock = locks.lock(name)
                    granted = await lock.acquire(timeout=PATIENCE)
                    await lock.release()
                    return granted

                async def waiting() -> bool:
                    return (await locks.status(names[0])).waiters == 1

                holders = [asyncio.create_task(hold(name)) for name in names]
                for _ in names:
                    await asyncio.wait_for(held.acquire(), PATIENCE)
                waiter = asyncio.create_task(wait(names[0]))
                await aeventually(waiting, "the waiter waits")
                made = tumbler_connections(admin, after)
                counted.set()
                assert all(await asyncio.gather(*holders))
                assert await waiter
                return made

        connections = asyncio.run(main())
    # the grants, the renewals, the waiter's wake-ups: connections of their own, one context
    assert connections >= 3
    assert contexts.count == 1


def test_plain_redis_to_a_tls_port_fails_cleanly(redis_tls_server: RedisServer) -> None:
    url = tls_url(redis_tls_server).replace("rediss://", "redis://", 1)
    began = time.monotonic()
    with pytest.raises(BackendUnavailable) as refused:
        tumbler.connect(url)
    assert time.monotonic() - began < NO_HANG
    assert secret_free(refused.value, TUMBLER_PASSWORD)


def open_sockets_to(port: int) -> set[socket.socket]:
    """This process's sockets still open to ``port`` (garbage or not)."""
    found = set()
    for thing in gc.get_objects():
        if isinstance(thing, socket.socket) and thing.family == socket.AF_INET:
            with contextlib.suppress(OSError):  # not connected, or closed
                if thing.getpeername()[1] == port:
                    found.add(thing)
    return found


def test_a_refused_asyncio_connect_leaves_no_socket_open(redis_tls_server: RedisServer) -> None:
    # redis-py closes a connection whose AUTH was refused without waiting for the server's
    # TLS goodbye; with the goodbye slow to come (a proxy delays replies), an event loop that
    # ended at once (asyncio.run) would leave its socket open
    server = redis_tls_server
    with FaultProxy((server.host, server.port), seed=7) as proxy:
        proxy.delay(500, direction="downstream")
        url = tls_url(server, ssl_ca_certs=server.ca_path).replace(
            f":{server.port}/", f":{proxy.port}/"
        )
        url = url.replace(quote(server.users["tumbler"].password, safe=""), "wrong")
        before = open_sockets_to(proxy.port)

        async def refused() -> set[socket.socket]:
            with pytest.raises(PermissionDenied):
                await tumbler.aio.connect(url)
            return open_sockets_to(proxy.port) - before  # at once: the loop runs no further

        assert asyncio.run(refused()) == set()


# -- ACL -------------------------------------------------------------------------------------


def test_a_read_only_user_is_refused(redis_tls_server: RedisServer) -> None:
    server = redis_tls_server
    reader_password = server.users["reader"].password
    url = tls_url(server, "reader", ssl_ca_certs=server.ca_path)
    # refused at connect (INFO is not a read command) or, at the latest, at the grant
    with pytest.raises(PermissionDenied) as refused, tumbler.connect(url) as locks:
        locks.lock("audit").acquire(blocking=False)
    assert secret_free(refused.value, reader_password)


def test_keys_outside_the_users_rights_are_refused_at_connect(
    redis_tls_server: RedisServer,
) -> None:
    server = redis_tls_server
    # the tumbler user may only touch keys under tumbler:
    url = tls_url(server, ssl_ca_certs=server.ca_path, prefix="elsewhere")
    with pytest.raises(PermissionDenied) as refused:
        tumbler.connect(url)
    assert "keys" in str(refused.value)
    assert secret_free(refused.value, TUMBLER_PASSWORD)


def test_permission_denied_names_the_lock(tmp_path: Path) -> None:
    user = RedisUser("locker", "locker-pw", "~tumbler:* &tumbler:* +@all -@dangerous +info")
    with RedisServer(tmp_path / "acl", users=[user]) as server:
        url = with_options(server.url_for("locker"), prefix=new_prefix())
        with tumbler.connect(url) as locks:
            # the operator narrows the user's keys after the connect
            server.client().execute_command("ACL", "SETUSER", "locker", "resetkeys", "~other:*")
            with pytest.raises(PermissionDenied) as refused:
                locks.lock("orders:42").acquire(blocking=False)
            assert refused.value.lock_name == "orders:42"
            assert "orders:42" in str(refused.value)
            assert secret_free(refused.value, user.password)
            with pytest.raises(PermissionDenied):
                locks.status("orders:42")


def test_a_wrong_password_is_refused(redis_tls_server: RedisServer) -> None:
    wrong = "not-" + TUMBLER_PASSWORD
    url = tls_url(redis_tls_server, ssl_ca_certs=redis_tls_server.ca_path)
    url = url.replace(quote(TUMBLER_PASSWORD, safe=""), quote(wrong, safe=""), 1)
    with pytest.raises(PermissionDenied) as refused:
        tumbler.connect(url)
    assert secret_free(refused.value, wrong, TUMBLER_PASSWORD)


def test_the_password_never_shows(redis_tls_server: RedisServer) -> None:
    url = tls_url(redis_tls_server, ssl_ca_certs=redis_tls_server.ca_path)
    with tumbler.connect(url) as locks:
        lock = locks.lock("shown")
        for text in (repr(locks), str(locks.url), repr(lock)):
            assert TUMBLER_PASSWORD not in text
            assert quote(TUMBLER_PASSWORD, safe="") not in text
        assert "tumbler:***@" in str(locks.url)


# -- wake-ups --------------------------------------------------------------------------------


def hand_off_delay(
    locks: tumbler.Locks,
    other: tumbler.Locks,
    admin: redis.Redis | redis.cluster.RedisCluster,
    name: str,
) -> float:
    """Seconds from a release to the waiting client's grant, the release made just after the
    waiter's re-check: the next re-check is a second away, so a hand-off well within that
    second can only come from the server's wake-up message."""
    entries = lua.Keys(parse_url(locks.url).query["prefix"]).entries(name)

    def waiter_expiry() -> int | None:
        for owner, value in admin.hgetall(entries).items():
            entry = lua.parse_entry(text(owner), text(value))
            if entry.token is None:
                return entry.expires_ms
        return None

    lock = locks.lock(name)
    assert lock.acquire(timeout=PATIENCE)
    acquired = threading.Event()

    def wait_for_it() -> None:
        waiting = other.lock(name)
        assert waiting.acquire(timeout=PATIENCE)
        acquired.set()
        waiting.release()

    waiter = background(wait_for_it)
    eventually(lambda: waiter_expiry() is not None, "the waiter queued")
    first = waiter_expiry()
    # each re-check renews the waiter's entry: once it changed, the waiter has just re-checked
    eventually(lambda: waiter_expiry() not in (first, None), "the waiter re-checked")
    released_at = time.monotonic()
    lock.release()
    assert acquired.wait(PATIENCE)
    delay = time.monotonic() - released_at
    waiter.result()
    return delay


@pytest.mark.parametrize("kind", ["redis", "redis-tls-acl", "redis-cluster"])
def test_a_release_wakes_a_waiter_at_once(kind: str, request: pytest.FixtureRequest) -> None:
    admin: redis.Redis | redis.cluster.RedisCluster
    if kind == "redis":
        server = request.getfixturevalue("redis_server")
        url, admin = f"{server.url}?prefix={new_prefix()}", server.client()
    elif kind == "redis-tls-acl":
        server = request.getfixturevalue("redis_tls_server")
        url, admin = tls_url(server, ssl_ca_certs=server.ca_path), server.client()
    else:
        cluster = request.getfixturevalue("redis_cluster")
        url, admin = cluster_url(cluster, new_prefix()), cluster.client()
    with tumbler.connect(url) as locks, tumbler.connect(url) as other:
        # a name the wake-up channel must carry (escaped) and give back intact
        assert hand_off_delay(locks, other, admin, "}{ %7B:x") < RECHECK / 2


def test_wake_ups_work_again_after_a_restart(fresh_redis_server: RedisServer) -> None:
    server = fresh_redis_server
    admin = server.client()
    url = f"{server.url}?prefix={new_prefix()}"
    with tumbler.connect(url) as locks, tumbler.connect(url) as other:
        assert hand_off_delay(locks, other, admin, "restarted") < RECHECK / 2
        server.kill()
        server.start()
        # the waiting client's channel outlived its last wait: it must be subscribed again
        assert hand_off_delay(locks, other, admin, "restarted") < RECHECK / 2


def test_waiters_are_woken_by_the_server_not_by_polling(
    fresh_redis_server: RedisServer,
) -> None:
    admin = fresh_redis_server.client()
    url = f"{fresh_redis_server.url}?prefix={new_prefix()}"
    waiters = 8
    # a client of its own per waiter: a client's waiters on one lock queue inside it, and only
    # its first waits at the server
    with contextlib.ExitStack() as stack:
        locks = stack.enter_context(tumbler.connect(url))
        others = [stack.enter_context(tumbler.connect(url)) for _ in range(waiters)]
        lock = locks.lock("busy")
        assert lock.acquire()

        def wait_then_release(other: tumbler.Locks) -> None:
            waiting = other.lock("busy")
            assert waiting.acquire(timeout=PATIENCE)
            waiting.release()

        threads = [background(lambda o=other: wait_then_release(o)) for other in others]
        eventually(lambda: locks.status("busy").waiters == waiters, "every waiter queued")

        # Nothing is released for a second: only each waiter's re-check may reach the server
        # (a poller would call many times a second). The wait is the observation itself.
        before = evalsha_calls(admin)
        threading.Event().wait(RECHECK)
        quiet = evalsha_calls(admin) - before
        assert quiet <= 2 * waiters, f"{quiet} scripts run while nothing changed"

        before = evalsha_calls(admin)
        released_at = time.monotonic()
        lock.release()
        for thread in threads:
            thread.result()
        chain = time.monotonic() - released_at
        calls = evalsha_calls(admin) - before
        # Each release wakes only the next waiter: one release, then a grant and a release per
        # waiter (17). Re-checks falling in the chain add at most one per waiter, and each
        # may take the lock from under the woken waiter, costing it one more try (33 in all).
        # A herd (every release waking every remaining waiter) costs 7+6+...+1 = 28 more: up
        # to 45, a little less where two wake-ups of one waiter coalesce.
        assert calls <= 1 + 2 * waiters + 2 * waiters, f"{calls} scripts for {waiters} hand-offs"
        assert chain < NO_HANG
        assert locks.status_all() == []


@pytest.mark.asyncio
async def test_waiting_tasks_are_woken_by_the_server_not_by_polling(
    fresh_redis_server: RedisServer,
) -> None:
    admin = fresh_redis_server.client()
    url = f"{fresh_redis_server.url}?prefix={new_prefix()}"
    waiters = 8
    locks = await tumbler.aio.connect(url)
    # a client of its own per waiter, as in the threaded case
    others = [await tumbler.aio.connect(url) for _ in range(waiters)]
    try:
        lock = locks.lock("busy")
        assert await lock.acquire()

        async def wait_then_release(other: tumbler.aio.AsyncLocks) -> None:
            waiting = other.lock("busy")
            assert await waiting.acquire(timeout=PATIENCE)
            await waiting.release()

        tasks = [asyncio.ensure_future(wait_then_release(other)) for other in others]
        deadline = time.monotonic() + PATIENCE
        while (await locks.status("busy")).waiters < waiters:
            assert time.monotonic() < deadline, "the waiting tasks did not queue"
            await asyncio.sleep(0.005)

        before = evalsha_calls(admin)
        await asyncio.sleep(RECHECK)  # the observation window itself
        quiet = evalsha_calls(admin) - before
        assert quiet <= 2 * waiters, f"{quiet} scripts run while nothing changed"

        before = evalsha_calls(admin)
        await lock.release()
        await asyncio.wait_for(asyncio.gather(*tasks), PATIENCE)
        calls = evalsha_calls(admin) - before
        # as in the threaded case: 17 without a herd, at most 33 with re-checks, ~45 with a herd
        assert calls <= 1 + 2 * waiters + 2 * waiters, f"{calls} scripts for {waiters} hand-offs"
        assert await locks.status_all() == []
    finally:
        for other in others:
            await other.close()
        await locks.close()


def test_one_pubsub_connection_per_client(fresh_redis_server: RedisServer) -> None:
    admin = fresh_redis_server.client()
    url = f"{fresh_redis_server.url}?prefix={new_prefix()}"
    with (
        tumbler.connect(url) as holder,
        tumbler.connect(url) as first,
        tumbler.connect(url) as second,
    ):
        held = [holder.lock(name) for name in ("a", "b")]
        for lock in held:
            assert lock.acquire()

        def wait_then_release(locks: tumbler.Locks, name: str) -> None:
            waiting = locks.lock(name)
            assert waiting.acquire(timeout=PATIENCE)
            waiting.release()

        plan = [(first, "a")] * 4 + [(first, "b")] * 4 + [(second, "a")] * 8
        threads = [background(lambda c=c, n=n: wait_then_release(c, n)) for c, n in plan]
        eventually(
            # a client's waiters on one lock wait at the server as one
            lambda: (holder.status("a").waiters, holder.status("b").waiters) == (2, 1),
            "every waiter queued",
        )
        # one connection per client, subscribed to the client's own channel, whatever it
        # waits on. A waiter subscribes after its first try has queued it (the watch is
        # entered only then), so the count is awaited, not read at once: it must settle at
        # one each, never more
        eventually(lambda: subscriptions(admin) == [1, 1], "each waiting client subscribed once")
        for lock in held:
            lock.release()
        for thread in threads:
            thread.result()
        assert len(subscriptions(admin)) <= 2


def test_waits_on_many_names_use_one_subscription(fresh_redis_server: RedisServer) -> None:
    admin = fresh_redis_server.client()
    url = f"{fresh_redis_server.url}?prefix={new_prefix()}"
    names = [f"batch-{index}" for index in range(300)]
    with tumbler.connect(url) as holder, tumbler.connect(url) as waiter:
        for name in names:
            assert holder.lock(name).acquire(blocking=False)
        for name in names:
            assert not waiter.lock(name).acquire(timeout=0.002)
        # nothing per name: channels cannot pile up
        assert subscriptions(admin) == [1]


def wait_after(start: threading.Barrier, locks: tumbler.Locks, name: str) -> bool:
    start.wait()
    return locks.lock(name).acquire(timeout=0.02)


@pytest.fixture
def frequent_thread_switches() -> Iterator[None]:
    """Threads switch every 0.1 ms instead of 5 ms: interleavings that need luck need less."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    yield
    sys.setswitchinterval(previous)


@pytest.mark.usefixtures("frequent_thread_switches")
def test_waits_that_start_together_all_get_their_subscription(redis_server: RedisServer) -> None:
    """Threads of a new client that start waiting at the same moment, on different names,
    subscribe on its one pub/sub connection at the same moment. Repeated, because the
    interleaving that goes wrong is a matter of luck."""
    threads = 8
    names = [f"together-{index}" for index in range(threads)]
    for trial in range(30):
        # a lost subscription shows after socket_timeout: keep that short
        url = f"{redis_server.url}?prefix={new_prefix()}&socket_timeout=1"
        with tumbler.connect(url) as holder, tumbler.connect(url) as waiter:
            for name in names:
                assert holder.lock(name).acquire(blocking=False)
            start = threading.Barrier(threads)
            waits = [functools.partial(wait_after, start, waiter, name) for name in names]
            assert gather(*waits) == [False] * threads, f"trial {trial}"


NO_CHANNELS = RedisUser("locker", "locker-pw", "~tumbler:* resetchannels +@all -@dangerous +info")
ALL_RIGHTS = RedisUser("locker", "locker-pw", "~tumbler:* &tumbler:* +@all -@dangerous +info")


def test_a_user_without_channel_rights_is_refused_at_connect(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "acl", users=[NO_CHANNELS]) as server:
        prefix = new_prefix()
        url = with_options(server.url_for("locker"), prefix=prefix, socket_timeout=1)
        with pytest.raises(PermissionDenied) as refused:
            tumbler.connect(url)  # the keys are allowed, the wake-up channels are not
        assert f"PUBLISH {prefix}:c:" in str(refused.value)
        assert f"SUBSCRIBE {prefix}:c:" in str(refused.value)
        assert secret_free(refused.value, NO_CHANNELS.password)


def test_channel_rights_withdrawn_after_connect_give_permission_denied(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "acl", users=[ALL_RIGHTS]) as server:
        url = with_options(server.url_for("locker"), prefix=new_prefix(), socket_timeout=1)
        with tumbler.connect(url) as holder, tumbler.connect(url) as waiter:
            assert holder.lock("orders:42").acquire()
            server.client().execute_command("ACL", "SETUSER", "locker", "resetchannels")
            with pytest.raises(PermissionDenied) as refused:
                # the wait subscribes to the lock's channel, which the user may no longer
                waiter.lock("orders:42").acquire(timeout=0.2)
            assert refused.value.lock_name == "orders:42"
            assert secret_free(refused.value, ALL_RIGHTS.password)


def test_a_failed_subscription_is_tried_again(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "acl", users=[ALL_RIGHTS]) as server:
        url = with_options(server.url_for("locker"), prefix=new_prefix(), socket_timeout=1)
        with tumbler.connect(url) as holder, tumbler.connect(url) as waiter:
            lock = holder.lock("orders:42")
            assert lock.acquire()
            server.client().execute_command("ACL", "SETUSER", "locker", "resetchannels")
            with pytest.raises(TumblerError):
                waiter.lock("orders:42").acquire(timeout=0.2)
            # the operator fixes the user's rights: the next wait must subscribe anew
            server.client().execute_command("ACL", "SETUSER", "locker", "&tumbler:*")
            assert waiter.lock("orders:42").acquire(timeout=0.2) is False
            later = background(lambda: waiter.lock("orders:42").acquire(timeout=PATIENCE))
            eventually(lambda: holder.status("orders:42").waiters == 1, "the waiter queued")
            lock.release()
            assert later.result() is True


# -- waiters that die as a release comes ------------------------------------------------------

#: a waiter in a process of its own, which the test stops while it waits:
#: ``python -c WAITER URL NAME KIND FLAVOUR TTL``
WAITER = """
import asyncio, sys, threading
import tumbler, tumbler.aio

url, name, kind, flavour, ttl = sys.argv[1:]


def lock_of(locks):
    if kind == "rwlock":
        return locks.rwlock(name, ttl=float(ttl)).read()
    fair, renew = kind != "lock", kind != "fair-not-renewed"
    return locks.lock(name, ttl=float(ttl), fair=fair, renew=renew)


async def main():
    async with await tumbler.aio.connect(url) as locks:
        await lock_of(locks).acquire()
        await asyncio.Event().wait()


if flavour == "asyncio":
    asyncio.run(main())
else:
    with tumbler.connect(url) as locks:
        lock_of(locks).acquire()
        threading.Event().wait()
"""
#: a lease far longer than the provisional one, so that a grant handed to the stopped
#: waiter for the whole of it could not pass for one cut to the window
LONG_LEASE = 5.0
#: how long after a release the waiter behind a dead one may get the lock: the grant or the
#: cut entry handed to the dead one runs out, the backup wake-up's try comes a little later,
#: and then one round trip and a loaded machine's scheduling delays (a re-check's half)
DEAD_WAITER_STALL = HAND_OFF_CONFIRM_MS / 1000 + BACKUP_SLACK + RECHECK / 2


def start_server(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> RedisServer:
    """The session's Redis, or a Valkey server of the test's own."""
    if kind == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        return server
    stack: contextlib.ExitStack = request.getfixturevalue("server_stack")
    return stack.enter_context(RedisServer(tmp_path / "valkey", binary=valkey_server_binary()))


@pytest.fixture
def server_stack() -> Iterator[contextlib.ExitStack]:
    with contextlib.ExitStack() as stack:
        yield stack


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()  # stopped or not
        child.wait()


def queued_clients(admin: redis.Redis, url: str, name: str) -> list[str]:
    """The client channel each waiter's entry names, in line order ("" before it listens)."""
    entries = lua.Keys(parse_url(url).query["prefix"]).entries(name)
    line = []
    for value in admin.hgetall(entries).values():
        seq, _shared, _limit, _fair, token, _expires, client, _holder = text(value).split("|", 7)
        if not token:
            line.append((int(seq), client))
    return [client for _seq, client in sorted(line)]


def all_listen(admin: redis.Redis, url: str, name: str, waiters: int) -> bool:
    """Whether ``waiters`` wait on ``name``, each with its client listening (a release can
    tell it, and hand it the lock)."""
    clients = queued_clients(admin, url, name)
    return len(clients) == waiters and "" not in clients


def stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "T"


def live_lock(locks: tumbler.Locks, kind: str, name: str) -> tumbler.Lock:
    if kind == "rwlock":
        return locks.rwlock(name, ttl=LONG_LEASE).write()
    return locks.lock(name, ttl=LONG_LEASE, fair=kind != "lock")


def alive_lock(locks: tumbler.aio.AsyncLocks, kind: str, name: str) -> tumbler.aio.AsyncLock:
    if kind == "rwlock":
        return locks.rwlock(name, ttl=LONG_LEASE).write()
    return locks.lock(name, ttl=LONG_LEASE, fair=kind != "lock")


def waiter_process(url: str, name: str, kind: str, flavour: str) -> subprocess.Popen[bytes]:
    """A process that waits for ``name`` (``live_lock``'s kind) and never lets go."""
    return subprocess.Popen(
        [sys.executable, "-c", WAITER, url, name, kind, flavour, str(LONG_LEASE)]
    )


def timed_live_waiter(url: str, flavour: str, kind: str, name: str) -> TimedWaiter:
    return TimedWaiter(
        url,
        flavour,
        lambda other: live_lock(other, kind, name),
        lambda other: alive_lock(other, kind, name),
    )


def stop(child: subprocess.Popen[bytes]) -> None:
    """SIGSTOP: its connections stay open and subscribed, and it acts on nothing."""
    child.send_signal(signal.SIGSTOP)
    eventually(lambda: stopped(child.pid), "the waiter stopped")


def stall_after_release(holder: tumbler.Lock, live: TimedWaiter) -> float:
    """Seconds from ``holder``'s release until ``live`` was granted the lock."""
    released_at = time.monotonic()
    holder.release()
    return live.granted_at() - released_at


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
@pytest.mark.parametrize("kind", ["lock", "fair", "rwlock", "fair-not-renewed"])
@pytest.mark.parametrize("server_kind", ["redis", "valkey"])
def test_a_waiter_stopped_as_the_release_comes_holds_the_line_up_a_second(
    server_kind: str,
    kind: str,
    flavour: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    children: list[subprocess.Popen[bytes]],
) -> None:
    """A process that dies while it waits still listens for a few milliseconds (the server
    sees its connections close after the kernel has torn it down): a release in that moment
    judges it alive, and hands it the lock (or, if its hold is not renewed, wakes it). A
    stopped waiter is that moment made to last: its connections stay open and subscribed.
    The grant handed to it is provisional and the woken fair one's entry cut, so the live
    waiter behind it (a writer behind a reader, on the read-write lock) gets the lock once
    they run out, told by its backup wake-up: not after the stopped one's whole lease."""
    server = start_server(server_kind, request, tmp_path)
    admin = server.client()
    url = f"{server.url}?prefix={new_prefix()}"
    name = "line"
    with tumbler.connect(url) as locks:
        holder = live_lock(locks, kind, name)
        assert holder.acquire(timeout=0)
        child = waiter_process(url, name, kind, flavour)
        children.append(child)
        eventually(lambda: all_listen(admin, url, name, 1), "the doomed waiter listens")
        live = timed_live_waiter(url, flavour, kind, name)
        eventually(lambda: all_listen(admin, url, name, 2), "the live waiter listens behind")
        stop(child)
        stall = stall_after_release(holder, live)
    assert stall < DEAD_WAITER_STALL, f"the live waiter got the lock {stall:.2f} s after"


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
@pytest.mark.parametrize("kind", ["lock", "fair"])
def test_a_dead_waiter_behind_a_stopped_one_holds_the_line_up_no_longer(
    redis_server: RedisServer,
    kind: str,
    flavour: str,
    children: list[subprocess.Popen[bytes]],
) -> None:
    """The release hands the stopped waiter a grant (or, fair, cuts its entry) and sends the
    backup wake-up to the waiter behind it; that one is dead, its connections closed, so the
    backup reaches nobody: the release drops it and tells the live waiter behind instead,
    which gets the lock once the stopped one's second is up, not once the dead one's entry
    runs out (``waiter_ttl``, 3 s)."""
    admin = redis_server.client()
    url = f"{redis_server.url}?prefix={new_prefix()}"
    name = "line"
    with tumbler.connect(url) as locks:
        holder = live_lock(locks, kind, name)
        assert holder.acquire(timeout=0)
        for waiters in (1, 2):
            children.append(waiter_process(url, name, kind, flavour))
            eventually(
                functools.partial(all_listen, admin, url, name, waiters), "the waiter listens"
            )
        stopping, dying = children
        live = timed_live_waiter(url, flavour, kind, name)
        eventually(lambda: all_listen(admin, url, name, 3), "the live waiter listens last")
        keys = lua.Keys(parse_url(url).query["prefix"])
        dead_channel = keys.client_channel(queued_clients(admin, url, name)[1])
        dying.kill()
        dying.wait()
        eventually(
            lambda: admin.pubsub_numsub(dead_channel)[0][1] == 0,
            "the server saw the second waiter die",
        )
        stop(stopping)
        stall = stall_after_release(holder, live)
    assert stall < DEAD_WAITER_STALL, f"the live waiter got the lock {stall:.2f} s after"


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
@pytest.mark.parametrize("renew", [True, False], ids=["renewed", "not-renewed"])
def test_a_waiter_handed_the_lock_keeps_the_lease_it_asked_for(
    redis_server: RedisServer, flavour: str, renew: bool
) -> None:
    """The grant a release hands over is provisional, and the waiter's first renewal, at a
    third of it, makes it the lease asked for; a hold that is not renewed is not handed a
    grant at all, but woken, and granted the whole lease by its own try."""
    admin = redis_server.client()
    url = f"{redis_server.url}?prefix={new_prefix()}"
    window = HAND_OFF_CONFIRM_MS / 1000
    with tumbler.connect(url) as locks:
        holder = locks.lock("kept", ttl=LONG_LEASE)
        assert holder.acquire(timeout=0)
        held = holder.hold
        assert held is not None

        def release_once_it_listens() -> None:
            eventually(lambda: all_listen(admin, url, "kept", 1), "the waiter listens")
            held.release()

        releasing = background(release_once_it_listens)
        if flavour == "sync":
            with tumbler.connect(url) as other:
                lock = other.lock("kept", ttl=LONG_LEASE, renew=renew)
                assert lock.acquire(timeout=PATIENCE)
                hold = lock.hold
                assert hold is not None
                first_ttl = hold.ttl
                # past the provisional lease: still held
                assert not hold.wait_lost(timeout=2 * window)
                last_ttl = hold.ttl
                lock.release()
        else:

            async def main() -> tuple[float, float]:
                async with await tumbler.aio.connect(url) as other:
                    lock = other.lock("kept", ttl=LONG_LEASE, renew=renew)
                    assert await lock.acquire(timeout=PATIENCE)
                    hold = lock.hold
                    assert hold is not None
                    first = hold.ttl
                    assert not await hold.wait_lost(timeout=2 * window)
                    await lock.release()  # raises LockLost had the server lost it
                    return first, hold.ttl

            first_ttl, last_ttl = asyncio.run(main())
        releasing.result()
    if renew:
        assert first_ttl <= window  # handed over: provisional
    else:
        assert first_ttl == LONG_LEASE  # its own try's grant
    assert last_ttl == LONG_LEASE


# -- replication ---------------------------------------------------------------------------


@contextlib.contextmanager
def in_sync_replica(primary: RedisServer, directory: Path) -> Iterator[RedisServer]:
    """A replica of ``primary``, in sync with it, stopped at the block's end."""
    primary_admin = primary.client(decode_responses=True)
    # the first full sync would otherwise wait 5 s for more replicas to join it
    primary_admin.config_set("repl-diskless-sync-delay", 0)
    with RedisServer(
        directory, extra_config=[f"replicaof {primary.host} {primary.port}"]
    ) as replica:
        replica_admin = replica.client(decode_responses=True)
        eventually(
            lambda: (
                replica_admin.info("replication").get("master_link_status") == "up"
                and primary_admin.info("replication").get("connected_slaves") == 1
            ),
            "the replica is in sync",
        )
        yield replica


def test_wait_replicas(fresh_redis_server: RedisServer, tmp_path: Path) -> None:
    primary = fresh_redis_server
    prefix = new_prefix()
    with in_sync_replica(primary, tmp_path / "replica") as replica:
        replica_admin = replica.client(decode_responses=True)
        # a replica under a loaded CI machine may take a while to answer the primary's GETACK
        wait_timeout = 2.0
        url = f"{primary.url}?prefix={prefix}&wait_replicas=1&wait_timeout={wait_timeout}"
        with tumbler.connect(url) as locks:
            with locks.lock("replicated") as hold:
                # WAIT returned: the replica has the grant
                [entries] = [key for key in keys_under(replica_admin, prefix) if key[-2:] == ":e"]
                assert sha1hex(hold._request.owner) in replica_admin.hgetall(entries)
            replica.kill()
            began = time.monotonic()
            with pytest.raises(BackendUnavailable, match="replica") as refused:
                locks.lock("replicated").acquire(blocking=False)  # a wait would ask again
            assert time.monotonic() - began < wait_timeout + NO_HANG
            assert refused.value.lock_name == "replicated"
            state = locks.status("replicated")
            assert (state.holders, state.waiters) == ((), 0)
        # the grant was given up, not left to expire
        with tumbler.connect(f"{primary.url}?prefix={prefix}") as plain:
            assert plain.lock("replicated").acquire(blocking=False)


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_wait_replicas_waits_for_the_grant_itself(
    fresh_redis_server: RedisServer, tmp_path: Path, flavour: str
) -> None:
    """WAIT counts the writes of the connection it is sent on: sent on another connection than
    the grant's, it is answered at once by a replica that has not seen the grant."""
    primary = fresh_redis_server
    prefix = new_prefix()
    with in_sync_replica(primary, tmp_path / "replica") as replica:
        url = f"{primary.url}?prefix={prefix}&wait_replicas=1&wait_timeout=0.5"
        (pid,) = replica.pids()
        os.kill(pid, signal.SIGSTOP)  # it acknowledges nothing from now on
        try:
            if flavour == "sync":
                with tumbler.connect(url) as locks, pytest.raises(BackendUnavailable):
                    locks.lock("replicated").acquire(blocking=False)
            else:

                async def acquire() -> None:
                    async with await tumbler.aio.connect(url) as locks:
                        with pytest.raises(BackendUnavailable):
                            await locks.lock("replicated").acquire(blocking=False)

                asyncio.run(acquire())
        finally:
            os.kill(pid, signal.SIGCONT)
        # the grant was given up
        with tumbler.connect(f"{primary.url}?prefix={prefix}") as plain:
            assert plain.lock("replicated").acquire(blocking=False)


# -- URLs ------------------------------------------------------------------------------------

SECRET = "hunter2-secret"
BAD_URLS = [
    pytest.param("redis://u:{s}@h1:6379,h2:6379/0", "Cluster", id="several-hosts-no-cluster"),
    pytest.param("redis://u:{s}@127.0.0.1:0/0", "port", id="port-0"),
    pytest.param("redis://u:{s}@127.0.0.1:65536/0", "port", id="port-too-big"),
    pytest.param("redis://u:{s}@127.0.0.1:six/0", "port", id="port-not-a-number"),
    pytest.param("redis://u:{s}@::1:6379/0", "brackets", id="ipv6-without-brackets"),
    pytest.param("redis://u:{s}@[::1]x/0", "host", id="ipv6-junk-after-bracket"),
    pytest.param("redis://u:{s}@:6379/0", "host", id="no-host"),
    pytest.param("redis://u:{s}@127.0.0.1/0?ssl_ca_certs=/ca.pem", "rediss", id="ssl-on-redis"),
    pytest.param("redis://u:{s}@127.0.0.1/0?prefx=a", "prefx", id="unknown-option"),
    pytest.param("redis://u:{s}@127.0.0.1/10001", "database", id="db-too-big"),
    pytest.param("redis://u:{s}@127.0.0.1/-1", "database", id="db-negative"),
    pytest.param("redis://u:{s}@127.0.0.1/zero", "database", id="db-not-a-number"),
    pytest.param("redis://u:{s}@127.0.0.1/?db=99999", "database", id="db-option-too-big"),
    pytest.param("redis://u:{s}@127.0.0.1/1?db=2", "db", id="db-twice"),
    pytest.param("redis://u:{s}@h1:1,h2:2/3?cluster=true", "database 0", id="cluster-db"),
    pytest.param("redis://u:{s}@h1:1,h2:2/0?cluster=maybe", "cluster", id="cluster-flag"),
    pytest.param(
        "redis://u:{s}@h1:1,h2:2/0?cluster=true&wait_replicas=1",
        "wait_replicas",
        id="wait-replicas-on-cluster",
    ),
    pytest.param("redis://u:{s}@h/0?wait_replicas=101", "wait_replicas", id="replicas-101"),
    pytest.param("redis://u:{s}@h/0?wait_replicas=two", "wait_replicas", id="replicas-word"),
    pytest.param("redis://u:{s}@h/0?wait_timeout=0", "wait_timeout", id="wait-timeout-0"),
    pytest.param("redis://u:{s}@h/0?socket_timeout=nan", "socket_timeout", id="timeout-nan"),
    pytest.param("redis://u:{s}@h/0?connect_timeout=inf", "connect_timeout", id="timeout-inf"),
    pytest.param("redis://u:{s}@h/0?max_connections=0", "max_connections", id="connections-0"),
    pytest.param("redis://u:{s}@h/0?max_connections=-1", "max_connections", id="connections-neg"),
    pytest.param("redis://u:{s}@h/0?max_connections=10001", "10000", id="connections-10001"),
    pytest.param("redis://u:{s}@h/0?max_connections=ten", "max_connections", id="connections-word"),
    pytest.param("redis://u:{s}@h/0?max_connections=1_0", "max_connections", id="connections-1_0"),
    pytest.param("redis://u:{s}@h/0?max_connections=2.5", "max_connections", id="connections-2.5"),
    pytest.param(
        "redis://u:{s}@h1:1,h2:2/0?cluster=true&max_connections=0",
        "max_connections",
        id="connections-0-cluster",
    ),
    pytest.param("redis://u:{s}@h/0?prefix=", "prefix", id="prefix-empty"),
    pytest.param("redis://u:{s}@h/0?prefix=a{b}", "prefix", id="prefix-braces"),
    pytest.param("redis+unix://u:{s}@host/run/redis.sock", "socket", id="unix-with-host"),
    pytest.param("redis+unix://u:{s}@", "socket", id="unix-without-path"),
]


@pytest.mark.parametrize(("url", "says"), BAD_URLS)
def test_bad_urls_are_refused_without_the_password(url: str, says: str) -> None:
    with pytest.raises(InvalidURL, match=says) as refused:
        tumbler.connect(url.replace("{s}", SECRET))
    assert secret_free(refused.value, SECRET)


def test_good_urls_parse() -> None:
    def config(url: str) -> object:
        parsed = parse_config(parse_url(url))
        return parsed.nodes, parsed.db, parsed.unix_path, parsed.cluster, parsed.prefix

    assert config("redis://") == ((("localhost", 6379),), 0, None, False, "tumbler")
    assert config("redis://[::1]:7000/2")[:2] == ((("::1", 7000),), 2)
    assert config("redis://[::1]/0")[0] == (("::1", 6379),)
    assert config("redis://a:1,b:2/0?cluster=true&prefix=p")[0::3] == (
        (("a", 1), ("b", 2)),
        True,
    )
    assert config("redis://h?db=7")[1] == 7
    assert parse_config(parse_url("redis://h")).max_connections == 100
    assert parse_config(parse_url("redis://h?max_connections=7")).max_connections == 7
    assert parse_config(parse_url("redis://h?max_connections=10000")).max_connections == 10_000
    assert config("redis+unix:///run/redis.sock?db=3")[1:3] == (3, "/run/redis.sock")
    tls = parse_config(parse_url("rediss://h/0?ssl_check_hostname=off&ssl_ca_certs=/ca.pem"))
    assert tls.client_options["ssl_check_hostname"] is False
    assert tls.client_options["ssl_ca_certs"] == "/ca.pem"


def test_redis_unix_socket_end_to_end(tmp_path: Path, short_dir: Path) -> None:
    socket_path = short_dir / "redis.sock"
    config = [f"unixsocket {socket_path}", "unixsocketperm 700"]
    with RedisServer(tmp_path / "redis", extra_config=config) as server:
        prefix = new_prefix()
        url = f"redis+unix://{socket_path}?db=5&prefix={prefix}"
        with tumbler.connect(url) as locks, tumbler.connect(url) as other:
            lock = locks.lock("socket")
            assert lock.acquire()
            waiter = background(lambda: other.lock("socket").acquire(timeout=PATIENCE))
            eventually(lambda: locks.status("socket").waiters == 1, "the waiter queued")
            # the database option is honoured
            assert keys_under(server.client(db=5), prefix)
            assert keys_under(server.client(db=0), prefix) == []
            # and the clients came through the socket, not TCP
            addresses = {client["addr"] for client in server.client().client_list()}
            assert f"{socket_path}:0" in addresses
            lock.release()
            assert waiter.result() is True  # woken over the socket's pub/sub


# -- cluster ---------------------------------------------------------------------------------


def test_status_all_lists_locks_on_every_cluster_node(redis_cluster: RedisServerCluster) -> None:
    prefix = new_prefix()
    admin = redis_cluster.client()
    # names whose keys live on different masters
    by_node: dict[str, str] = {}
    index = 0
    while len(by_node) < len(redis_cluster.nodes):
        name = f"job-{index}"
        node = admin.get_node_from_key(lua.Keys(prefix).entries(name))
        by_node.setdefault(node.name, name)
        index += 1
    names = sorted(by_node.values())
    with (
        tumbler.connect(cluster_url(redis_cluster, prefix)) as locks,
        tumbler.connect(cluster_url(redis_cluster, new_prefix())) as elsewhere,
    ):
        assert elsewhere.lock("not-listed").acquire()
        for name in names:
            assert locks.lock(name).acquire()
        for node in redis_cluster.nodes:
            assert keys_under(node.client(), prefix), f"no lock on {node}"
        states = locks.status_all()
        assert [state.name for state in states] == names
        assert all(len(state.holders) == 1 for state in states)
