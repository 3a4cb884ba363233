"""The uncontended table's ``server req/pair``: the server's request counter read around each
contender's timed slices, less what a reading adds to the next, divided by the pairs.

The first cases run bench/measure.py on contenders whose "server" is a counter in this
process (each reading adds one to it, as Redis's INFO and ZooKeeper's srvr do), so the
figure is exact; the last runs bench/bench.py on a throwaway ZooKeeper, where the counter is
the server's own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tumbler.testing.bench import Options, SyncContender, SyncSession

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def measure() -> Any:
    sys.path.insert(0, str(BENCH_DIR))
    try:
        import measure

        yield measure
    finally:
        sys.path.remove(str(BENCH_DIR))


class Server:
    """A request counter: each request, and each reading of it, adds one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def request(self, times: int = 1) -> None:
        with self._lock:
            self.count += times

    def read(self) -> int:
        with self._lock:
            value = self.count
            self.count += 1  # counted after it has run, as INFO and srvr are
            return value


SERVERS: dict[str, Server] = {}


class _Session:
    def __init__(self, server: Server, per_acquire: int, per_release: int) -> None:
        self._server = server
        self._per_acquire = per_acquire
        self._per_release = per_release

    def acquire(self) -> None:
        self._server.request(self._per_acquire)

    def release(self) -> None:
        self._server.request(self._per_release)

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Counted(SyncContender):
    """Two requests to acquire, one to release, on the server named by the URL."""

    name: ClassVar[str] = "counted"
    per_acquire: ClassVar[int] = 2
    per_release: ClassVar[int] = 1

    def open(self, lock_name: str) -> SyncSession:
        return _Session(SERVERS[self.url], self.per_acquire, self.per_release)

    def server_ops(self) -> int | None:
        return SERVERS[self.url].read()


@dataclass(frozen=True)
class CountedHeavy(Counted):
    name: ClassVar[str] = "counted-heavy"
    per_acquire: ClassVar[int] = 4
    per_release: ClassVar[int] = 3


@dataclass(frozen=True)
class Uncounted(Counted):
    name: ClassVar[str] = "uncounted"

    def server_ops(self) -> int | None:
        return None


def test_each_contender_gets_its_own_requests_per_pair(measure: Any) -> None:
    SERVERS["fake://one"] = Server()
    contenders = [Counted("fake://one", Options()), CountedHeavy("fake://one", Options())]
    light, heavy = measure.uncontended_rounds(contenders, "lock", 50)
    # the warm-up and the readings themselves are left out; the turns of the other are too
    assert light["server_requests_per_pair"] == 3.0
    assert heavy["server_requests_per_pair"] == 7.0


def test_a_store_without_a_counter_has_no_figure(measure: Any) -> None:
    SERVERS["fake://two"] = Server()
    (figures,) = measure.uncontended_rounds([Uncounted("fake://two", Options())], "lock", 20)
    assert figures["server_requests_per_pair"] is None
    assert figures["n"] == 20


@pytest.mark.servers
def test_the_bench_counts_zookeepers_requests_per_pair(tmp_path: Path) -> None:
    # a smoke test of the bench on the store's own counter; without a ZooKeeper to start, skip
    servers = pytest.importorskip("tumbler.testing.backends.zookeeper.server")
    pytest.importorskip("kazoo")
    try:
        servers.java_binary()
        servers.zookeeper_classpath()
    except servers.ZooKeeperNotInstalled as error:
        pytest.skip(str(error))
    figures_path = tmp_path / "figures.json"
    picks = [
        arg
        for name in ("tumbler-sync", "tumbler-async", "zk-floor-sync", "zk-floor-async")
        for arg in ("--contender", name)
    ]
    result = subprocess.run(
        [
            sys.executable,
            str(BENCH_DIR / "bench.py"),
            *("--pairs", "40", "--procs", "2", "--repeat", "1", "--seconds", "0.3"),
            *("--start", "zookeeper", *picks, "--json", str(figures_path)),
        ],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(figures_path.read_text(encoding="utf-8"))
    counted = {
        row["contender"]: row["summary"]["server_requests_per_pair"]["median"]
        for row in figures["uncontended"]
    }
    assert set(counted) == {"tumbler-sync", "tumbler-async", "zk-floor-sync", "zk-floor-async"}
    for contender, per_pair in counted.items():
        # create, a read of the line, delete; another client's heartbeat may add a little
        assert 3.0 <= per_pair < 3.5, (contender, per_pair)
    assert "server req/pair" in result.stdout
    assert "x peer" in result.stdout
