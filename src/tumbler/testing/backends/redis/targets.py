"""The Redis backend's test targets: one plain server, one TLS-only server whose client is an
ACL user with exactly the rights the backend needs, a Redis Cluster of three masters, and one
plain Valkey server (what Fedora and RHEL ship in Redis's place).

Each runs for the whole session; a test's URL gets a key prefix of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from tumbler.testing.targets import TestTarget

from .server import (
    RedisServer,
    RedisServerCluster,
    start_cluster,
    start_tls_redis,
    valkey_server_binary,
)


def _prefix() -> str:
    return f"tumbler:test-{uuid.uuid4().hex[:12]}"


class _Running:
    def __init__(
        self, servers: RedisServer | RedisServerCluster, url: Callable[[str], str]
    ) -> None:
        self.servers = servers
        self._url = url

    def fresh_url(self) -> str:
        return self._url(_prefix())

    def server_pids(self) -> list[int]:
        servers = self.servers
        nodes = servers.nodes if isinstance(servers, RedisServerCluster) else [servers]
        return [pid for node in nodes for pid in node.pids()]

    def close(self) -> None:
        self.servers.close()


def _plain(directory: Path, binary: str | None = None) -> _Running:
    server = RedisServer(directory, binary=binary).start()
    return _Running(server, lambda prefix: f"{server.url}?prefix={prefix}")


def _valkey(directory: Path) -> _Running:
    return _plain(directory, valkey_server_binary())


def _tls_acl(directory: Path) -> _Running:
    server = start_tls_redis(directory)
    base = server.url_for("tumbler")
    return _Running(server, lambda prefix: f"{base}?prefix={prefix}&ssl_ca_certs={server.ca_path}")


def _cluster(directory: Path) -> _Running:
    cluster = start_cluster(directory)
    nodes = ",".join(f"{host}:{port}" for host, port in cluster.startup_nodes)
    return _Running(cluster, lambda prefix: f"redis://{nodes}/0?cluster=true&prefix={prefix}")


TARGETS = (
    TestTarget("redis", _plain),
    TestTarget("redis-tls-acl", _tls_acl, connection_variant=True),
    TestTarget("redis-cluster", _cluster),
    # every case: Valkey is the server many distributions ship for Redis
    TestTarget("valkey", _valkey),
)
