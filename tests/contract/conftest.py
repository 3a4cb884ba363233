"""The contract suite's backends: every case in tests/contract runs against each test target
that the backends' descriptors declare (``BackendDescriptor.test_targets``); the cases that
start other processes run on the targets whose locks exclude across processes.

A target's servers start once per session (per xdist worker), when a test first needs them,
and stop at its end; each test gets a URL of its own (a new file, key prefix or path).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

import tumbler
import tumbler.aio
from tumbler.backends import builtin_descriptors
from tumbler.backends.descriptor import BackendDescriptor, RunningTarget, TestTarget
from tumbler.testing.servers import ServerError

from ..servers.fixtures import server_unavailable

TARGETS: dict[str, tuple[BackendDescriptor, TestTarget]] = {
    target.name: (descriptor, target)
    for descriptor in builtin_descriptors()
    for target in descriptor.test_targets()
}
BACKENDS = list(TARGETS)
#: targets whose locks exclude across OS processes (and that run the costly cases)
PROCESS_BACKENDS = [
    name
    for name, (descriptor, target) in TARGETS.items()
    if target.processes and descriptor.capabilities.scope != "process"
]


class _Running:
    """The targets started in this session, by name; a target that failed to start is not
    tried again (its error is kept)."""

    def __init__(self, directory: Callable[[str], Path]) -> None:
        self._directory = directory
        self._started: dict[str, RunningTarget] = {}
        self._failed: dict[str, str] = {}

    def get(self, name: str) -> RunningTarget:
        if name in self._failed:
            server_unavailable(self._failed[name])
        if name not in self._started:
            _, target = TARGETS[name]
            try:
                self._started[name] = target.start(self._directory(name))
            except (ServerError, OSError) as error:
                self._failed[name] = f"cannot start the {name} test target: {error}"
                server_unavailable(self._failed[name])
        return self._started[name]

    def close(self) -> None:
        for running in self._started.values():
            running.close()


@pytest.fixture(scope="session")
def running_targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Running]:
    running = _Running(lambda name: tmp_path_factory.mktemp(name))
    yield running
    running.close()


def make_url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of the target ``kind`` that no other test uses: a new file, store or prefix."""
    running: _Running = request.getfixturevalue("running_targets")
    return running.get(kind).fresh_url()


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
