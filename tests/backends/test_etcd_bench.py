"""The bench's view of etcd (``testing.backends.etcd.bench``) on the server it starts: the server's
figures, the floors' round trips as etcd counts them, the leases each row leaves behind, and
the watch events a waiter's wake-up costs. How fast anything is belongs in the bench's
output, never here."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tumbler.testing.bench
from tumbler.testing.backends.etcd.bench import BENCH, EtcdFloor, EtcdFloorAsync, EtcdGrpcFloor
from tumbler.testing.backends.etcd.server import EtcdNotInstalled, etcd_program
from tumbler.testing.bench import Options, StoreBench

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    try:
        etcd_program()
    except EtcdNotInstalled as error:
        pytest.skip(str(error))
    (target,) = BENCH.targets
    running = target.start(tmp_path_factory.mktemp("etcd-bench"))
    try:
        yield running.fresh_url()
    finally:
        running.close()


@pytest.fixture
def measure(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    original = tumbler.testing.bench.store_bench

    def store_bench(url: str) -> StoreBench | None:
        # the readings as the bench makes them, whether or not a descriptor names BENCH yet
        return BENCH if url.startswith("etcd://") else original(url)

    monkeypatch.setattr(tumbler.testing.bench, "store_bench", store_bench)
    sys.path.insert(0, str(BENCH_DIR))
    try:
        import measure

        yield measure
    finally:
        sys.path.remove(str(BENCH_DIR))


def test_the_server_says_what_it_is_and_counts(url: str) -> None:
    assert (BENCH.version(url) or "").startswith("etcd 3.")
    before = BENCH.request_count(url)
    assert before is not None
    # a reading is not a gRPC request
    assert BENCH.request_count(url) == before
    assert BENCH.push_count(url) is not None
    assert BENCH.leases(url) is not None
    assert BENCH.lease_url(url, 30) == f"{url}?lease_ttl=30"
    assert BENCH.lease_url(url, 0.5) == f"{url}?lease_ttl=2"  # etcd's shortest


def test_nothing_is_read_from_a_server_that_is_not_there() -> None:
    gone = "etcd://127.0.0.1:1/bench"
    assert BENCH.request_count(gone) is None
    assert BENCH.push_count(gone) is None
    assert BENCH.leases(gone) is None
    assert BENCH.version(gone) is None


def test_the_rows_on_an_etcd_url() -> None:
    names = [row.name for row in BENCH.contenders("etcd://127.0.0.1:2379/x", Options())]
    assert names == [
        "etcd-sdk-python",
        "tooz-etcd3gw",
        "etcd-floor-sync",
        "etcd-floor-async",
        "etcd-grpc-floor-sync",
    ]
    # the gRPC floor runs when named, and is no denominator of tumbler's rows
    assert not EtcdGrpcFloor.default
    assert not EtcdGrpcFloor.same_client
    assert BENCH.reference == "etcd-sdk-python"
    assert not BENCH.contenders("etcds://127.0.0.1:2379/x", Options())


def test_each_floor_pair_is_two_transactions_and_leaves_no_lease(url: str, measure: Any) -> None:
    pytest.importorskip("pyetcd")
    before = BENCH.leases(url)
    # A floor keeps its lease alive once a third of it has passed, with one request more:
    # a lease of 60 s keeps that out of 40 pairs however slowly a loaded machine runs them.
    long_lease = BENCH.lease_url(url, 60)
    floors = [
        EtcdFloor(long_lease, Options()),
        EtcdFloorAsync(long_lease, Options()),
        EtcdGrpcFloor(long_lease, Options()),
    ]
    runs = measure.uncontended_rounds(floors, "floor", 40)
    for run in runs:
        assert "errors" not in run, run
        assert run["server_requests_per_pair"] == 2.0
    after = BENCH.leases(url)
    assert before is not None
    assert after is not None
    # none of their own: the module's other cases' leases may run out meanwhile
    assert after <= before, after - before


@pytest.mark.slow
def test_the_peers_lock_and_leave_their_leases(url: str, measure: Any, tmp_path: Path) -> None:
    pytest.importorskip("pyetcd")
    pytest.importorskip("tooz")
    pytest.importorskip("etcd3gw")
    peers = [peer(url, Options()) for peer in BENCH.peers]
    before = BENCH.leases(url)
    assert before is not None
    for run in measure.uncontended_rounds(peers, "peers", 20):
        assert "errors" not in run, run
        # a lease, the txn that puts the key, the txn that deletes it
        assert run["server_requests_per_pair"] == 3.0
    left = BENCH.leases(url)
    assert left is not None
    # one lease per acquisition (the warm-up's too), never revoked; tooz's member lease
    assert len(left - before) >= 2 * (measure.WARMUP + 20)
    # a waiter of etcd-sdk-python's lock is woken by a watch event
    crowd = measure.contended(peers[0], 2, 0.5, "crowd", str(tmp_path))
    assert crowd["counter_ok"], crowd["errors"]
    assert crowd["server_pushes_per_acq"] > 0
    assert crowd["leases_left"] > 0
