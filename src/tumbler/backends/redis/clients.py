"""A client the application configured already (``redis.Redis``, one that Sentinels manage,
``RedisCluster``, in either flavour), read into the configuration a URL would give.

tumbler does not send its calls through the application's client: it needs connections of
its own that redis-py never retries on (a retried release whose first reply was lost looks
like a lost hold), that read bytes, one that only listens for wake-ups, and renewals that a
busy pool cannot hold up. So it copies what says where and how to connect: the servers (the
cluster's startup nodes), the database, TLS (every ``ssl_*`` setting, the CA and client
certificate among them), the credentials (a ``credential_provider`` too: the same object, so
rotated credentials reach tumbler's connections as well) and the timeouts. What concerns only
the application's own calls (``decode_responses``, ``protocol``, its retries, its pool's
size) is left alone, and the client stays the application's: tumbler never closes it.

A client that Sentinels manage has no address of its own: each of its connections asks the
application's ``Sentinel`` for the master of its service. tumbler's do the same, through the
same ``Sentinel`` (which it never closes either), so they follow a failover as the
application's do. Nothing Sentinel does makes a failover safe for a lock: a grant the old
master had not passed on to the replica is forgotten (see :mod:`.common`).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from ...errors import InvalidArgument
from ..kit.options import host_list, parsed_with_options
from .common import CLIENT_INFO, RedisConfig, parse_config

#: how long a call or a connection set-up may take when the client sets no limit (redis-py's
#: default): as for a URL without ``socket_timeout``/``connect_timeout``
DEFAULT_TIMEOUT = 5.0
#: the settings of the client's connections that tumbler's take over (and every ``ssl_*``;
#: not its ``client_name``, which names the application's connections, not tumbler's)
_COPIED = (
    "username",
    "password",
    "credential_provider",
    "socket_timeout",
    "socket_connect_timeout",
    "socket_keepalive",
    "socket_keepalive_options",
)
#: what tumbler's own options for a client are (those of a URL that the client does not say)
OPTIONS = ("prefix", "max_connections", "max_waiters", "wait_replicas", "wait_timeout")


def config_from_client(client: object, *, asyncio: bool, **options: object) -> RedisConfig:
    """The configuration of tumbler's connections to the servers ``client`` connects to, as
    it connects; ``options`` as a URL's (``prefix``, ``max_connections``...). Raises
    ``InvalidArgument`` for a client of the other flavour, one it cannot copy, or a bad option.
    """
    flavour_is_asyncio = type(client).__module__.startswith("redis.asyncio")
    kind = f"{type(client).__module__}.{type(client).__qualname__}"
    if flavour_is_asyncio != asyncio:
        raise InvalidArgument(
            f"{kind} is an {'asyncio' if flavour_is_asyncio else 'blocking'} client: give it "
            f"to {'tumbler.aio.connect' if flavour_is_asyncio else 'tumbler.connect'}"
        )
    cluster = hasattr(client, "nodes_manager")
    sentinel = None
    if cluster:
        manager: Any = getattr(client, "nodes_manager")  # noqa: B009 (typed Any on purpose)
        settings = dict(manager.connection_kwargs)
        nodes = [(node.host, int(node.port)) for node in manager.startup_nodes.values()]
        db, unix_path = 0, None
    else:
        pool: Any = getattr(client, "connection_pool", None)
        if pool is None or not hasattr(pool, "connection_kwargs"):
            raise InvalidArgument(f"{kind} has no connection pool tumbler can read")
        settings = dict(pool.connection_kwargs, connection_class=pool.connection_class)
        sentinel = _sentinel_of(kind, pool)
        unix_path = settings.get("path")
        if sentinel is not None:
            # each connection asks the Sentinels for the master: no address of its own
            nodes = list(sentinel[2])
        else:
            nodes = [] if unix_path else [(settings["host"], int(settings["port"]))]
        db = int(settings.get("db") or 0)
    # the blocking RedisCluster keeps the arguments it was given (``ssl``), the others the
    # class of connection they make
    connection_class = settings.get("connection_class")
    names = {klass.__name__ for klass in getattr(connection_class, "__mro__", ())}
    tls = "SSLConnection" in names or bool(settings.get("ssl"))
    known = {"Connection", "SSLConnection", "UnixDomainSocketConnection"}
    if connection_class is not None and not names & known:
        raise InvalidArgument(f"{kind} makes connections tumbler does not know: {connection_class}")
    # (the first Sentinel stands for the master here: its URL checks the options)
    config = _parsed(kind, tls, cluster, nodes[:1] if sentinel else nodes, unix_path, db, options)
    copied = {
        name: value
        for name, value in settings.items()
        if (name in _COPIED or name.startswith("ssl_")) and value is not None
    }
    copied.setdefault("socket_timeout", DEFAULT_TIMEOUT)
    copied.setdefault("socket_connect_timeout", copied["socket_timeout"])
    if tls:
        copied["ssl"] = True
    copied.update(CLIENT_INFO)
    if cluster:
        copied = _taken_by_the_cluster_client(copied, asyncio)
    if config.wait_replicas and config.wait_timeout >= copied["socket_timeout"]:
        raise InvalidArgument(
            "wait_timeout must be shorter than the client's socket_timeout (the WAIT would "
            "time out first)"
        )
    if sentinel is None:
        return dataclasses.replace(config, client_options=copied, tls=None)
    service, manager_of_sentinels, _addresses = sentinel
    return dataclasses.replace(
        config,
        # no URL names a Sentinel's master: this form says which, for messages
        url=_sentinel_url(config.url, nodes, service, db, tls),
        nodes=(),
        client_options=copied,
        tls=None,
        sentinel=(service, manager_of_sentinels),
    )


def _sentinel_url(
    url: str, sentinels: list[tuple[str, int]], service: str, db: int, tls: bool
) -> str:
    """``redis+sentinel://SENTINEL,SENTINEL/SERVICE/DB?OPTIONS`` (``rediss+sentinel`` over
    TLS): the master of ``service`` as the Sentinels at those addresses name it."""
    query = url.partition("?")[2]
    scheme = "rediss+sentinel" if tls else "redis+sentinel"
    return f"{scheme}://{host_list(sentinels)}/{service}/{db}" + (f"?{query}" if query else "")


def _sentinel_of(kind: str, pool: Any) -> tuple[str, Any, list[tuple[str, int]]] | None:
    """The service, the ``Sentinel`` and the Sentinels' addresses of a pool whose connections
    go to the master Sentinels name; None for another pool. A replica's pool is refused:
    tumbler writes."""
    service = getattr(pool, "service_name", None)
    manager = getattr(pool, "sentinel_manager", None)
    if service is None or manager is None:
        return None
    proxy = getattr(pool, "proxy", pool)
    if not getattr(proxy, "is_master", getattr(pool, "is_master", True)):
        raise InvalidArgument(
            f"{kind} reaches a replica of {service!r} (slave_for): tumbler writes, so it needs "
            "the master's client (master_for)"
        )
    addresses = []
    for sentinel in manager.sentinels:
        options = sentinel.connection_pool.connection_kwargs
        addresses.append((str(options["host"]), int(options["port"])))
    return str(service), manager, addresses


def _parsed(
    kind: str,
    tls: bool,
    cluster: bool,
    nodes: list[tuple[str, int]],
    unix_path: str | None,
    db: int,
    options: dict[str, object],
) -> RedisConfig:
    """What a URL naming the client's servers and carrying ``options`` would configure: the
    options are checked as a URL's are, and the URL (without credentials) names the backend
    in messages."""
    if unix_path is not None:
        url = f"redis+unix://{unix_path}?db={db}"
    else:
        url = f"{'rediss' if tls else 'redis'}://{host_list(nodes)}/{db}"
        if cluster:
            url += "?cluster=true"
    return parsed_with_options(url, options, OPTIONS, kind, parse_config)


def _taken_by_the_cluster_client(settings: dict[str, Any], asyncio: bool) -> dict[str, Any]:
    """The settings that the flavour's ``RedisCluster`` takes as arguments (the asyncio one
    takes only those it names)."""
    if asyncio:
        from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

        accepted = inspect.signature(AsyncRedisCluster.__init__).parameters
    else:
        from redis.cluster import RedisCluster

        accepted = inspect.signature(RedisCluster.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
        return settings
    return {name: value for name, value in settings.items() if name in accepted}
