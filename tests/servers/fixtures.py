"""pytest fixtures with real Redis servers, built on :mod:`tests.servers.redis`.

Register them with ``pytest_plugins = ["tests.servers.fixtures"]`` (in the root conftest, or
in a test module). The session-scoped ``redis_server``, ``redis_tls_server`` and
``redis_cluster`` start once per session (per xdist worker) and stop at its end; tests that
share one call :func:`flush_redis` first (from here or from :mod:`tests.servers.redis`).
``fresh_redis_server`` is a server of the test's own, for tests that kill or restart it.

A fixture whose server cannot start (redis-server missing, or it fails) skips the test with the
reason on a developer's machine, and fails it in CI ($CI is true, 1 or yes), where a skipped
Redis suite would look like a passing one.

PYTEST_DONT_REWRITE: this module has no asserts to rewrite, and the marker keeps pytest from
warning (an error under filterwarnings=error) when a test module imported it before a
``pytest_plugins`` entry registered it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn, TypeVar

import pytest

from tests.conftest import IN_CI

from .redis import (
    RedisServer,
    RedisServerCluster,
    RedisServerError,
    flush_redis,
    start_cluster,
    start_tls_redis,
)

__all__ = [
    "flush_redis",
    "fresh_redis_server",
    "redis_cluster",
    "redis_server",
    "redis_tls_server",
    "server_unavailable",
]

Started = TypeVar("Started", RedisServer, RedisServerCluster)


def server_unavailable(reason: str) -> NoReturn:
    """Fail the test in CI, skip it elsewhere, with ``reason``."""
    if IN_CI:
        pytest.fail(f"{reason} (failing rather than skipping because $CI is set)", pytrace=False)
    pytest.skip(reason)


def _start(what: str, start: Callable[[], Started]) -> Started:
    try:
        return start()
    except (RedisServerError, OSError) as error:
        server_unavailable(f"cannot start {what}: {error}")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One plain server for the whole session (keys from other tests: see :func:`flush_redis`)."""
    workdir = tmp_path_factory.mktemp("redis")
    server = _start("redis-server", lambda: RedisServer(workdir).start())
    yield server
    server.close()


@pytest.fixture(scope="session")
def redis_tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One TLS-only server with ACL users (``tumbler``, ``reader``) for the whole session."""
    workdir = tmp_path_factory.mktemp("redis-tls")
    server = _start("redis-server with TLS", lambda: start_tls_redis(workdir))
    yield server
    server.close()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServerCluster]:
    """One Redis Cluster of 3 masters for the whole session."""
    workdir = tmp_path_factory.mktemp("redis-cluster")
    cluster = _start("a Redis Cluster", lambda: start_cluster(workdir))
    yield cluster
    cluster.close()


@pytest.fixture
def fresh_redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A plain server of this test's own, free to be killed and restarted."""
    server = _start("redis-server", lambda: RedisServer(tmp_path / "redis").start())
    yield server
    server.close()
