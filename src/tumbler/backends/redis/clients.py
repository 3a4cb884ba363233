"""A client the application configured already (``redis.Redis``, ``RedisCluster``, in either
flavour), read into the configuration a URL would give.

tumbler does not send its calls through the application's client: it needs connections of
its own that redis-py never retries on (a retried release whose first reply was lost looks
like a lost hold), that read bytes, one that only listens for wake-ups, and renewals that a
busy pool cannot hold up. So it copies what says where and how to connect: the servers (the
cluster's startup nodes), the database, TLS (every ``ssl_*`` setting, the CA and client
certificate among them), the credentials (a ``credential_provider`` too: the same object, so
rotated credentials reach tumbler's connections as well) and the timeouts. What concerns only
the application's own calls (``decode_responses``, ``protocol``, its retries, its pool's
size) is left alone, and the client stays the application's: tumbler never closes it.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any
from urllib.parse import urlencode

from ..._url import parse_url
from ...errors import InvalidArgument, InvalidURL
from .common import RedisConfig, parse_config

#: how long a call or a connection set-up may take when the client sets no limit (redis-py's
#: default): as for a URL without ``socket_timeout``/``connect_timeout``
DEFAULT_TIMEOUT = 5.0
#: the settings of the client's connections that tumbler's take over (and every ``ssl_*``)
_COPIED = (
    "username",
    "password",
    "credential_provider",
    "client_name",
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
    if cluster:
        manager: Any = getattr(client, "nodes_manager")  # noqa: B009 (typed Any on purpose)
        settings = dict(manager.connection_kwargs)
        nodes = [(node.host, int(node.port)) for node in manager.startup_nodes.values()]
        db, unix_path = 0, None
    else:
        pool: Any = getattr(client, "connection_pool", None)
        if pool is None or not hasattr(pool, "connection_kwargs"):
            raise InvalidArgument(f"{kind} has no connection pool tumbler can read")
        if "sentinel" in type(pool).__module__.lower() or "Sentinel" in type(pool).__name__:
            raise InvalidArgument(
                f"{kind} is managed by Sentinel, which tumbler cannot follow through a "
                "failover yet: give tumbler.connect the master's URL"
            )
        settings = dict(pool.connection_kwargs, connection_class=pool.connection_class)
        unix_path = settings.get("path")
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
    config = _parsed(tls, cluster, nodes, unix_path, db, options)
    copied = {
        name: value
        for name, value in settings.items()
        if (name in _COPIED or name.startswith("ssl_")) and value is not None
    }
    copied.setdefault("socket_timeout", DEFAULT_TIMEOUT)
    copied.setdefault("socket_connect_timeout", copied["socket_timeout"])
    if tls:
        copied["ssl"] = True
    if cluster:
        copied = _taken_by_the_cluster_client(copied, asyncio)
    if config.wait_replicas and config.wait_timeout >= copied["socket_timeout"]:
        raise InvalidArgument(
            "wait_timeout must be shorter than the client's socket_timeout (the WAIT would "
            "time out first)"
        )
    return dataclasses.replace(config, client_options=copied)


def _parsed(
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
    query = {name: str(value) for name, value in options.items()}
    if unix_path is not None:
        url = f"redis+unix://{unix_path}"
        query["db"] = str(db)
    else:
        hosts = ",".join(
            f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in nodes
        )
        url = f"{'rediss' if tls else 'redis'}://{hosts}/{db}"
        if cluster:
            query["cluster"] = "true"
    try:
        return parse_config(parse_url(f"{url}?{urlencode(query)}" if query else url))
    except InvalidURL as error:
        raise InvalidArgument(error.message, backend=error.backend) from None


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
