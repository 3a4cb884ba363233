"""The contended table's ``server pushes/acq`` and ``leases left``: a store's count of what its
server pushed to waiting clients, read around each contended run, per acquisition; and the
leases the server holds after the run's workers have exited that it did not hold before.

The contenders here keep their "server" in this process (their runs use threads), so the
figures are exact.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tumbler.testing.bench import Options, SyncContender, SyncSession

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def measure() -> Iterator[Any]:
    sys.path.insert(0, str(BENCH_DIR))
    try:
        import measure

        yield measure
    finally:
        sys.path.remove(str(BENCH_DIR))


class Server:
    """A lock that pushes one wake-up per release, and a lease per client."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._guard = threading.Lock()
        self.pushes = 0
        self.leases: set[str] = set()
        self._next = 0

    def push(self) -> None:
        with self._guard:
            self.pushes += 1

    def grant(self) -> str:
        with self._guard:
            self._next += 1
            lease = f"lease-{self._next}"
            self.leases.add(lease)
            return lease

    def revoke(self, lease: str) -> None:
        with self._guard:
            self.leases.discard(lease)


SERVERS: dict[str, Server] = {}


class _Session:
    def __init__(self, server: Server, tidy: bool) -> None:
        self._server = server
        self._tidy = tidy
        self._lease = server.grant()

    def acquire(self) -> None:
        self._server.lock.acquire()

    def release(self) -> None:
        self._server.lock.release()
        self._server.push()

    def close(self) -> None:
        if self._tidy:
            self._server.revoke(self._lease)


@dataclass(frozen=True)
class Pushing(SyncContender):
    """Wakes one waiter per release and revokes its lease at close."""

    name: ClassVar[str] = "pushing"
    tidy: ClassVar[bool] = True

    @property
    def cross_process(self) -> bool:
        return False

    def open(self, lock_name: str) -> SyncSession:
        return _Session(SERVERS[self.url], self.tidy)

    def server_pushes(self) -> int | None:
        return SERVERS[self.url].pushes

    def server_leases(self) -> frozenset[str] | None:
        return frozenset(SERVERS[self.url].leases)


@dataclass(frozen=True)
class Leaky(Pushing):
    """The same, but its clients leave their leases behind."""

    name: ClassVar[str] = "leaky"
    tidy: ClassVar[bool] = False


@dataclass(frozen=True)
class Silent(Pushing):
    """A store that counts neither."""

    name: ClassVar[str] = "silent"

    def server_pushes(self) -> int | None:
        return None

    def server_leases(self) -> frozenset[str] | None:
        return None


def test_pushes_per_acquisition_and_no_lease_left(measure: Any, tmp_path: Path) -> None:
    SERVERS["fake://tidy"] = server = Server()
    server.grant()  # someone else's lease, there before the run and after it
    run = measure.contended(Pushing("fake://tidy", Options()), 3, 0.2, "lock", str(tmp_path))
    assert run["counter_ok"], run["errors"]
    # the workers' untimed first pairs come before the first reading
    assert run["server_pushes_per_acq"] == 1.0
    assert run["leases_left"] == 0


def test_the_leases_a_run_leaves_are_counted(measure: Any, tmp_path: Path) -> None:
    SERVERS["fake://leaky"] = server = Server()
    server.grant()
    run = measure.contended(Leaky("fake://leaky", Options()), 3, 0.2, "lock", str(tmp_path))
    assert run["counter_ok"], run["errors"]
    assert run["leases_left"] == 3  # one per worker; the lease from before is not the run's


def test_a_store_that_counts_neither_has_no_figures(measure: Any, tmp_path: Path) -> None:
    SERVERS["fake://silent"] = Server()
    run = measure.contended(Silent("fake://silent", Options()), 2, 0.2, "lock", str(tmp_path))
    assert run["counter_ok"], run["errors"]
    assert run["server_pushes_per_acq"] is None
    assert run["leases_left"] is None
