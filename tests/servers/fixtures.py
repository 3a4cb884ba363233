"""pytest fixtures with real Redis, ZooKeeper, PostgreSQL, MariaDB and etcd servers, built on
:mod:`tumbler.testing.servers`.

Register them with ``pytest_plugins = ["tests.servers.fixtures"]`` (in the root conftest, or
in a test module). The session-scoped ``redis_server``, ``redis_tls_server``,
``redis_cluster``, ``zookeeper_server``, ``zookeeper_tls_server``, ``postgresql_server``,
``mariadb_server``, ``etcd_server`` and ``etcd_tls_server`` start once per session (per xdist
worker, and only in a worker whose tests ask for them) and stop at its end; tests sharing a
Redis call ``flush_redis`` (of ``tumbler.testing.backends.redis.server``) first, tests sharing
a ZooKeeper server keep to znodes of their own (a chroot of their own, e.g.
``zookeeper_server.url_for("/" + unique name)``), tests sharing a PostgreSQL server to a
schema of their own, tests sharing a MariaDB server to
tables of their own in its ``tumbler`` database, tests sharing an etcd server to a key prefix
of their own. ``fresh_redis_server``, ``fresh_zookeeper_server``, ``zookeeper_ensemble``,
``fresh_mariadb_server``, ``fresh_etcd_server`` and ``etcd_cluster`` are the test's own, for
tests that kill or restart servers.

The ZooKeeper servers have a super user: a client adding ``server.super_auth`` passes every
ACL, so a test can look at znodes that the code under test protected.

A fixture whose server cannot start (the program missing, or it fails) skips the test with the
reason on a developer's machine, and fails it in CI ($CI is true, 1 or yes), where a skipped
suite would look like a passing one.

PYTEST_DONT_REWRITE: this module has no asserts to rewrite, and the marker keeps pytest from
warning (an error under filterwarnings=error) when a test module imported it before a
``pytest_plugins`` entry registered it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest

from tumbler.testing.conformance.plugin import server_unavailable
from tumbler.testing.servers import ServerError, make_tls_files

# The launchers load their servers' drivers (redis-py, psycopg, PyMySQL, httpx): they are
# imported by the fixtures that use them, so a run that starts no server needs no driver.
if TYPE_CHECKING:
    from tumbler.testing.backends.etcd.server import EtcdCluster, EtcdServer
    from tumbler.testing.backends.mysql.server import MariaDBServer
    from tumbler.testing.backends.postgresql.server import PostgreSQLServer
    from tumbler.testing.backends.redis.server import RedisServer, RedisServerCluster
    from tumbler.testing.backends.zookeeper.server import ZooKeeperEnsemble, ZooKeeperServer

__all__ = [
    "etcd_cluster",
    "etcd_server",
    "etcd_tls_server",
    "fresh_etcd_server",
    "fresh_mariadb_server",
    "galera_node",
    "fresh_redis_server",
    "fresh_zookeeper_server",
    "mariadb_server",
    "postgresql_server",
    "redis_cluster",
    "redis_server",
    "redis_tls_server",
    "server_unavailable",
    "zookeeper_ensemble",
    "zookeeper_server",
    "zookeeper_tls_server",
]

Started = TypeVar("Started")


def _start(what: str, start: Callable[[], Started]) -> Started:
    try:
        return start()
    except (ServerError, OSError) as error:
        server_unavailable(f"cannot start {what}: {error}")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One plain server for the whole session (keys from other tests: see :func:`flush_redis`)."""
    from tumbler.testing.backends.redis.server import RedisServer

    workdir = tmp_path_factory.mktemp("redis")
    server = _start("redis-server", lambda: RedisServer(workdir).start())
    yield server
    server.close()


@pytest.fixture(scope="session")
def redis_tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One TLS-only server with ACL users (``tumbler``, ``reader``) for the whole session."""
    from tumbler.testing.backends.redis.server import start_tls_redis

    workdir = tmp_path_factory.mktemp("redis-tls")
    server = _start("redis-server with TLS", lambda: start_tls_redis(workdir))
    yield server
    server.close()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServerCluster]:
    """One Redis Cluster of 3 masters for the whole session."""
    from tumbler.testing.backends.redis.server import start_cluster

    workdir = tmp_path_factory.mktemp("redis-cluster")
    cluster = _start("a Redis Cluster", lambda: start_cluster(workdir))
    yield cluster
    cluster.close()


@pytest.fixture
def fresh_redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A plain server of this test's own, free to be killed and restarted."""
    from tumbler.testing.backends.redis.server import RedisServer

    server = _start("redis-server", lambda: RedisServer(tmp_path / "redis").start())
    yield server
    server.close()


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One standalone ZooKeeper server, with a super user, for the whole session (znodes from
    other tests: keep to a chroot of the test's own)."""
    from tumbler.testing.backends.zookeeper.server import ZooKeeperServer

    workdir = tmp_path_factory.mktemp("zookeeper")
    password = secrets.token_hex(12)
    server = _start(
        "a ZooKeeper server", lambda: ZooKeeperServer(workdir, super_password=password).start()
    )
    yield server
    server.close()


@pytest.fixture(scope="session")
def zookeeper_tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One standalone ZooKeeper server that speaks only TLS (a Netty ``secureClientPort``, a
    throw-away CA's certificate; client certificates wanted, not needed), with a super user,
    for the whole session. Its URLs are ``zookeepers://`` and need ``ssl_ca_certs`` (its
    :attr:`~ZooKeeperServer.ca_path`); keep to a chroot of the test's own."""
    from tumbler.testing.backends.zookeeper.server import ZooKeeperServer

    workdir = tmp_path_factory.mktemp("zookeeper-tls")
    password = secrets.token_hex(12)

    def start() -> ZooKeeperServer:
        tls = make_tls_files(workdir / "tls")
        return ZooKeeperServer(workdir / "server", super_password=password, tls=tls).start()

    server = _start("a ZooKeeper server with TLS", start)
    yield server
    server.close()


@pytest.fixture
def fresh_zookeeper_server(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper server (with a super user) of this test's own, free to be killed
    and restarted."""
    from tumbler.testing.backends.zookeeper.server import ZooKeeperServer

    password = secrets.token_hex(12)
    server = _start(
        "a ZooKeeper server",
        lambda: ZooKeeperServer(tmp_path / "zookeeper", super_password=password).start(),
    )
    yield server
    server.close()


@pytest.fixture
def zookeeper_ensemble(tmp_path: Path) -> Iterator[ZooKeeperEnsemble]:
    """A 3-member ZooKeeper ensemble (with a super user) of this test's own, every member
    serving; the test may kill and restart members."""
    from tumbler.testing.backends.zookeeper.server import ZooKeeperEnsemble

    password = secrets.token_hex(12)
    ensemble = _start(
        "a ZooKeeper ensemble",
        lambda: ZooKeeperEnsemble(tmp_path / "zookeeper", super_password=password).start(),
    )
    yield ensemble
    ensemble.close()


@pytest.fixture(scope="session")
def postgresql_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgreSQLServer]:
    """One PostgreSQL server for the whole session (tables of other tests: keep to a schema of
    the test's own)."""
    from tumbler.testing.backends.postgresql.server import PostgreSQLServer

    workdir = tmp_path_factory.mktemp("postgresql")
    server = _start("postgres", lambda: PostgreSQLServer(workdir).start())
    yield server
    server.close()


@pytest.fixture(scope="session")
def mariadb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    """One MariaDB server for the whole session (tables of other tests: keep to tables of the
    test's own in the ``tumbler`` database)."""
    from tumbler.testing.backends.mysql.server import MariaDBServer

    workdir = tmp_path_factory.mktemp("mariadb")
    server = _start("mariadbd", lambda: MariaDBServer(workdir).start())
    yield server
    server.close()


@pytest.fixture
def fresh_mariadb_server(tmp_path: Path) -> Iterator[MariaDBServer]:
    """A MariaDB server of this test's own, free to be killed and restarted."""
    from tumbler.testing.backends.mysql.server import MariaDBServer

    server = _start("mariadbd", lambda: MariaDBServer(tmp_path / "mariadb").start())
    yield server
    server.close()


@pytest.fixture
def galera_node(tmp_path: Path) -> Iterator[MariaDBServer]:
    """A MariaDB server of this test's own that is a Galera cluster of one node."""
    from tumbler.testing.backends.mysql.server import MariaDBServer

    server = _start(
        "a Galera node", lambda: MariaDBServer(tmp_path / "galera", galera=True).start()
    )
    yield server
    server.close()


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One etcd member for the whole session (keys from other tests: keep to a prefix of the
    test's own)."""
    from tumbler.testing.backends.etcd.server import EtcdServer

    workdir = tmp_path_factory.mktemp("etcd")
    server = _start("etcd", lambda: EtcdServer(workdir).start())
    yield server
    server.close()


@pytest.fixture(scope="session")
def etcd_tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One etcd member for the whole session that speaks only TLS and takes only clients
    with a certificate of its CA (``--client-cert-auth``), authentication on: docs/security.md's
    set-up. Its URL is ``etcds://`` with the CA and a client certificate; keep to a prefix of
    the test's own."""
    from tumbler.testing.backends.etcd.server import EtcdServer

    workdir = tmp_path_factory.mktemp("etcd-tls")

    def start() -> EtcdServer:
        server = EtcdServer(workdir / "server", tls=make_tls_files(workdir / "tls")).start()
        server.enable_auth()
        return server

    server = _start("etcd with TLS", start)
    yield server
    server.close()


@pytest.fixture
def fresh_etcd_server(tmp_path: Path) -> Iterator[EtcdServer]:
    """An etcd member of this test's own, free to be killed and restarted."""
    from tumbler.testing.backends.etcd.server import EtcdServer

    server = _start("etcd", lambda: EtcdServer(tmp_path / "etcd").start())
    yield server
    server.close()


@pytest.fixture
def etcd_cluster(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A 3-member etcd cluster of this test's own, every member serving; the test may kill
    and restart members."""
    from tumbler.testing.backends.etcd.server import EtcdCluster

    cluster = _start("an etcd cluster", lambda: EtcdCluster(tmp_path / "etcd").start())
    yield cluster
    cluster.close()
