"""The contract suite's backends: every case in tests/contract runs against each of them.

A backend joins by adding its name to BACKENDS (and to PROCESS_BACKENDS if its locks work
across processes) and a branch to ``make_url`` that starts or reuses its server.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

import tumbler
import tumbler.aio

BACKENDS = [
    "sqlite",
    "memory",
    "redis",
    "redis-tls-acl",
    "redis-cluster",
    "zookeeper",
    "zookeeper-tls",
]
#: backends whose locks exclude across OS processes (memory:// is in-process only)
PROCESS_BACKENDS = ["sqlite", "redis", "redis-cluster", "zookeeper"]
#: the ZooKeeper session timeout of the suite: a killed holder's entry goes after this long
ZOOKEEPER_SESSION_TIMEOUT = 3.0
#: the digest credentials of the zookeeper-tls backend: every node its clients make is theirs
#: alone, and every node they use is checked to be
ZOOKEEPER_TLS_USER = f"tumbler:{secrets.token_urlsafe(12)}"


def make_url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of a backend of ``kind`` that no other test uses: a new file, store or prefix."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/locks.db"
    if kind == "memory":
        return f"memory://{uuid.uuid4().hex}"
    # one server per session; a key prefix of the test's own keeps tests apart
    prefix = f"tumbler:test-{uuid.uuid4().hex[:12]}"
    if kind == "redis":
        return f"{request.getfixturevalue('redis_server').url}?prefix={prefix}"
    if kind == "redis-tls-acl":
        server = request.getfixturevalue("redis_tls_server")
        return f"{server.url_for('tumbler')}?prefix={prefix}&ssl_ca_certs={server.ca_path}"
    if kind == "redis-cluster":
        cluster = request.getfixturevalue("redis_cluster")
        nodes = ",".join(f"{host}:{port}" for host, port in cluster.startup_nodes)
        return f"redis://{nodes}/0?cluster=true&prefix={prefix}"
    if kind == "zookeeper":
        server = request.getfixturevalue("zookeeper_server")
        base = f"/tumbler-test-{uuid.uuid4().hex[:12]}"
        return f"{server.url_for(base)}?session_timeout={ZOOKEEPER_SESSION_TIMEOUT}"
    if kind == "zookeeper-tls":
        # TLS with a client certificate, and digest credentials over it
        server = request.getfixturevalue("zookeeper_tls_server")
        base = f"/tumbler-test-{uuid.uuid4().hex[:12]}"
        return (
            f"{server.scheme}://{ZOOKEEPER_TLS_USER}@{server.connect_string}{base}"
            f"?session_timeout={ZOOKEEPER_SESSION_TIMEOUT}&ssl_ca_certs={server.ca_path}"
            f"&ssl_certfile={server.client_cert_path}&ssl_keyfile={server.client_key_path}"
        )
    raise AssertionError(f"no such test backend {kind!r}")


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return make_url(request.param, request, tmp_path)


@pytest.fixture(params=PROCESS_BACKENDS)
def process_backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return make_url(request.param, request, tmp_path)


@pytest.fixture
def connect(backend_url: str) -> Iterator[Callable[..., tumbler.Locks]]:
    """Make clients of the backend under test; each is closed after the test."""
    clients: list[tumbler.Locks] = []

    def make(**options: object) -> tumbler.Locks:
        client = tumbler.connect(backend_url, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest_asyncio.fixture
async def aconnect(
    backend_url: str,
) -> AsyncIterator[Callable[..., Awaitable[tumbler.aio.AsyncLocks]]]:
    clients: list[tumbler.aio.AsyncLocks] = []

    async def make(**options: object) -> tumbler.aio.AsyncLocks:
        client = await tumbler.aio.connect(backend_url, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()
