"""``tumbler.connect`` (and ``tumbler.aio.connect``) given the application's configured
redis-py client in place of a URL: the same servers, reached the same way, over connections
of tumbler's own; the client stays the application's.

Real redis-server processes only (fixtures in ``tests/servers``): one plain server, the TLS
server with ACL users, a Redis Cluster of 3 masters.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.credentials import UsernamePasswordCredentialProvider
from redis.sentinel import Sentinel

import tumbler
import tumbler.aio
from tumbler import PermissionDenied
from tumbler.testing.backends.redis.server import RedisSentinel, RedisServer
from tumbler.testing.conformance.compat import eventually
from tumbler.testing.conformance.plugin import server_unavailable
from tumbler.testing.servers import ServerError

from .configured_clients import FLAVOURS, lock_through, refused


def _prefix() -> str:
    return f"tumbler:clients-{uuid.uuid4().hex[:12]}"


def _client(flavour: str, cluster: bool, **settings: Any) -> Any:
    """A client of the flavour, as an application configures one."""
    if cluster:
        nodes = settings.pop("nodes")
        if flavour == "sync":
            return redis.cluster.RedisCluster(
                startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in nodes], **settings
            )
        return redis.asyncio.cluster.RedisCluster(
            startup_nodes=[redis.asyncio.cluster.ClusterNode(h, p) for h, p in nodes], **settings
        )
    if flavour == "sync":
        return redis.Redis(**settings)
    return redis.asyncio.Redis(**settings)


def _use(flavour: str, client: Any, **options: object) -> dict[str, Any]:
    """:func:`lock_through`, then the application's client pinged (``ping``) and closed."""

    def then() -> Any:
        if flavour == "sync":
            answer = client.ping()
            client.close()
            return answer

        async def in_asyncio() -> Any:
            answer = await client.ping()
            await client.aclose()
            return answer

        return in_asyncio()

    seen = lock_through(flavour, client, then=then, **options)
    seen["ping"] = seen.pop("then")
    return seen


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_plain_client_serves_tumbler_whatever_it_decodes_and_the_client_lives_on(
    flavour: str, redis_server
) -> None:
    """The application's client reads text over RESP3 and sets no timeouts: tumbler's own
    connections read bytes over RESP2 and time out after 5 s all the same."""
    client = _client(
        flavour, False, host=redis_server.host, port=redis_server.port, db=3,
        decode_responses=True, protocol=3,
    )  # fmt: skip
    seen = _use(flavour, client, prefix=_prefix(), max_connections=7)
    assert seen["holders"] == 1
    assert seen["token"] > 0
    assert seen["ping"] is True  # closing tumbler's client left the application's open
    config = seen["config"]
    assert config.db == 3
    assert config.max_connections == 7
    assert config.nodes == ((redis_server.host, redis_server.port),)
    assert config.client_options["socket_timeout"] == 5.0
    assert config.client_options["socket_connect_timeout"] == 5.0
    assert "decode_responses" not in config.client_options
    assert "protocol" not in config.client_options


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("credentials", ["password", "credential_provider"])
def test_a_tls_client_with_an_acl_user_gives_tumbler_its_certificates_and_credentials(
    flavour: str, credentials: str, redis_tls_server
) -> None:
    server = redis_tls_server
    user = server.users["tumbler"]
    given: dict[str, Any] = (
        {"username": "tumbler", "password": user.password}
        if credentials == "password"
        else {"credential_provider": UsernamePasswordCredentialProvider("tumbler", user.password)}
    )
    client = _client(
        flavour, False, host=server.host, port=server.port, ssl=True,
        ssl_ca_certs=str(server.ca_path), socket_timeout=2.5, **given,
    )  # fmt: skip
    seen = _use(flavour, client, prefix=_prefix())
    assert seen["holders"] == 1
    assert seen["ping"] is True
    options = seen["config"].client_options
    assert options["ssl"] is True
    assert options["ssl_ca_certs"] == str(server.ca_path)
    assert options["socket_timeout"] == 2.5
    assert seen["config"].url.startswith("rediss://")
    assert user.password not in seen["config"].url


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_cluster_client_gives_tumbler_its_nodes(flavour: str, redis_cluster) -> None:
    nodes = [(node.host, node.port) for node in redis_cluster.nodes]
    client = _client(flavour, True, nodes=nodes[:1], decode_responses=True)
    seen = _use(flavour, client, prefix=_prefix())
    assert seen["holders"] == 1
    assert seen["ping"] is True
    assert seen["config"].cluster is True
    # the nodes the client knows: the one it was given, and those it learnt of since (the
    # blocking client asks for them when it is made)
    assert nodes[0] in seen["config"].nodes
    assert set(seen["config"].nodes) <= set(nodes)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_client_whose_credentials_the_server_refuses_is_refused_without_its_password(
    flavour: str, redis_tls_server
) -> None:
    server = redis_tls_server
    client = _client(
        flavour, False, host=server.host, port=server.port, ssl=True,
        ssl_ca_certs=str(server.ca_path), username="tumbler", password="Sw0rdf1sh-wrong",
    )  # fmt: skip
    with pytest.raises(PermissionDenied) as refused:
        _use(flavour, client, prefix=_prefix())
    assert "Sw0rdf1sh-wrong" not in str(refused.value)
    assert f"{server.host}:{server.port}" in str(refused.value)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_client_whose_user_may_only_read_is_refused_with_the_rules_tumbler_needs(
    flavour: str, redis_tls_server
) -> None:
    """The application's client may serve the application with fewer rights than a lock
    needs: connect says so, naming the command refused (here the first, INFO)."""
    server = redis_tls_server
    reader = server.users["reader"]
    client = _client(
        flavour, False, host=server.host, port=server.port, ssl=True,
        ssl_ca_certs=str(server.ca_path), username="reader", password=reader.password,
    )  # fmt: skip
    with pytest.raises(PermissionDenied) as refused:
        _use(flavour, client, prefix="tumbler:reader-rights")
    assert "the Redis user lacks a permission tumbler needs" in str(refused.value)
    assert "'info' command" in str(refused.value)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_client_of_the_other_flavour_is_refused_with_where_it_goes(flavour: str) -> None:
    other = "asyncio" if flavour == "sync" else "sync"
    refusal = refused(flavour, _client(other, False, host="127.0.0.1", port=1))
    expected = "tumbler.aio.connect" if other == "asyncio" else "tumbler.connect"
    assert f"give it to {expected}" in str(refusal)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_what_no_backend_takes_is_refused_with_what_they_take(flavour: str) -> None:
    refusal = refused(flavour, b"redis://127.0.0.1")
    assert "redis.client.Redis" in str(refusal)
    assert "not a builtins.bytes" in str(refusal)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_options_a_client_says_itself_or_bad_ones_are_refused_before_anything_is_opened(
    flavour: str,
) -> None:
    # port 1: nothing listens there, so a refusal that connected first would say so instead
    client = _client(flavour, False, host="127.0.0.1", port=1)
    said = refused(flavour, client, socket_timeout=1)
    assert "does not take the option(s) socket_timeout" in str(said)
    assert "prefix, max_connections" in str(said)
    bad = refused(flavour, client, prefix="no{braces}")
    assert "prefix must be 1 to 100 characters without braces" in str(bad)
    assert "127.0.0.1:1" in str(bad)
    quick = _client(flavour, False, host="127.0.0.1", port=1, socket_timeout=1)
    wait = refused(flavour, quick, wait_replicas=1, wait_timeout=2)
    assert "wait_timeout must be shorter than the client's socket_timeout" in str(wait)


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisSentinel]:
    """A master, its replica and one Sentinel watching them (``mymaster``), this module's
    own: a test fails the master over."""
    workdir = tmp_path_factory.mktemp("sentinel")
    started: list[RedisServer] = []
    try:
        # a replica's sync at once (each becomes the master in turn), not after the 5 s a
        # diskless sync waits by default
        master = RedisServer(workdir / "master", extra_config=["repl-diskless-sync-delay 0"])
        master.start()
        started.append(master)
        replica = RedisServer(
            workdir / "replica",
            extra_config=[f"replicaof {master.host} {master.port}", "repl-diskless-sync-delay 0"],
        ).start()
        started.append(replica)
        watcher = RedisSentinel(master, workdir / "sentinel").start()
        started.append(watcher)
    except (ServerError, OSError) as error:
        for server in reversed(started):
            server.close()
        server_unavailable(f"cannot start a master, a replica and a Sentinel: {error}")
    eventually(lambda: _settled(watcher), "the Sentinel can promote the replica")
    yield watcher
    for server in reversed(started):
        server.close()


def _promotable(watcher: RedisSentinel) -> bool:
    """Whether the Sentinel would promote a replica now: one it has heard from (its INFO
    read) whose link to the master is up (else a failover is refused: NOGOODSLAVE)."""
    with redis.Redis(host=watcher.host, port=watcher.port) as client:
        replicas = client.sentinel_slaves(watcher.service)
    return any(
        not replica.get("is_disconnected")
        and replica.get("master-link-status") == "ok"
        and 0 < int(replica.get("info-refresh", 0)) < 30_000
        for replica in replicas
    )


def _settled(watcher: RedisSentinel) -> bool:
    """No failover under way (one asked for now would be refused: INPROG), and a replica the
    Sentinel would promote."""
    with redis.Redis(host=watcher.host, port=watcher.port) as client:
        flags = str(client.sentinel_master(watcher.service).get("flags", ""))
    return "failover" not in flags and _promotable(watcher)


def _serves_as_master(address: tuple[str, int] | None) -> bool:
    if address is None:
        return False
    with redis.Redis(host=address[0], port=address[1], socket_timeout=2.0) as client:
        return bool(client.role()[0] in (b"master", "master"))


def _sentinel_client(flavour: str, watcher: RedisSentinel, replica: bool = False) -> Any:
    address = [(watcher.host, watcher.port)]
    if flavour == "sync":
        sentinels: Any = Sentinel(address, socket_timeout=2.0)
    else:
        sentinels = AsyncSentinel(address, socket_timeout=2.0)
    if replica:
        return sentinels.slave_for(watcher.service)
    return sentinels.master_for(watcher.service, socket_timeout=2.0)


def test_sentinel_managed_clients_follow_the_master_through_a_failover(
    sentinel: RedisSentinel,
) -> None:
    """tumbler's connections ask the application's Sentinels for the master, as its client's
    do: lock clients of both flavours, open across a failover, are granted locks by the new
    master after it, tokens still increasing (the sequence came over with the data). One
    failover for both: the Sentinel takes 20 s to see the old master in sync again."""
    eventually(lambda: _settled(sentinel), "the Sentinel is ready for a failover")
    prefix = _prefix()
    before = sentinel.master_address()
    blocking_app = _sentinel_client("sync", sentinel)
    asyncio_app = _sentinel_client("asyncio", sentinel)
    loop = asyncio.new_event_loop()
    locks = tumbler.connect(blocking_app, prefix=prefix)
    alocks = loop.run_until_complete(tumbler.aio.connect(asyncio_app, prefix=prefix))

    async def atoken(name: str) -> int:
        async with alocks.lock(name, timeout=10) as hold:
            return hold.token

    def token(name: str) -> int:
        with locks.lock(name, timeout=10) as hold:
            return hold.token

    try:
        assert locks._backend.config.url.startswith(
            f"redis+sentinel://{sentinel.host}:{sentinel.port}/mymaster/0"
        )
        tokens = [token("stock"), loop.run_until_complete(atoken("stock"))]
        sentinel.failover()
        eventually(
            lambda: (
                sentinel.master_address() not in (None, before)
                and _serves_as_master(sentinel.master_address())
            ),
            "the replica is the master",
        )
        tokens += [token("stock"), loop.run_until_complete(atoken("stock"))]
        assert tokens == sorted(set(tokens))
        assert blocking_app.ping() is True  # the application's clients, on the new master
        assert loop.run_until_complete(asyncio_app.ping()) is True
    finally:
        locks.close()
        loop.run_until_complete(alocks.close())
        # the application's: its clients, and those its Sentinel objects keep to the Sentinel
        blocking_app.close()
        for client in blocking_app.connection_pool.sentinel_manager.sentinels:
            client.close()
        loop.run_until_complete(asyncio_app.aclose())
        for client in asyncio_app.connection_pool.sentinel_manager.sentinels:
            loop.run_until_complete(client.aclose())
        loop.close()


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_client_of_a_sentinels_replica_is_refused_for_the_masters(
    flavour: str, sentinel: RedisSentinel
) -> None:
    refusal = refused(flavour, _sentinel_client(flavour, sentinel, replica=True))
    assert "tumbler writes, so it needs the master's client (master_for)" in str(refusal)
