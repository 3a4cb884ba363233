"""bench/bench.py runs end to end: a tiny run on a real SQLite file with real spawned processes,
and, where redis-server is installed, the Redis peers on a throwaway server.

Only that it runs, that its figures parse, and that its counter check holds (and can fail) are
checked here: how fast anything is belongs in the bench's output, never in an assertion.
bench/startup.py likewise: every row runs, and a row whose process fails is reported as such.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.servers.fixtures import server_unavailable

pytestmark = pytest.mark.tools  # mypy, the build, the bench: the same on every Python

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench.py"
TINY = ("--pairs", "20", "--procs", "2", "--repeat", "1")


def peer_names(url: str) -> list[str]:
    """The rows a store's bench adds on ``url`` besides tumbler's (its floor, its peers)."""
    from tumbler.testing.bench import Options, store_bench

    bench = store_bench(url)
    if bench is None:
        return []
    return [contender.name for contender in bench.contenders(url, Options()) if contender.default]


def floor_names(url: str) -> set[str]:
    """The store's floors among ``peer_names(url)``: rows timed uncontended only."""
    from tumbler.testing.bench import store_bench

    bench = store_bench(url)
    return set() if bench is None else {floor.name for floor in bench.floors}


def run_bench(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    figures = tmp_path / "figures.json"
    result = subprocess.run(
        [sys.executable, str(BENCH), *TINY, *args, "--json", str(figures)],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert figures.exists(), result.stderr
    return result, json.loads(figures.read_text(encoding="utf-8"))


def uncontended(figures: Any) -> dict[str, Any]:
    """The uncontended rows' summaries of a ``--json`` file, by contender."""
    return {row["contender"]: row["summary"] for row in figures["uncontended"]}


def pair_median(flat: dict[str, Any], name: str) -> float:
    return float(flat[name]["pair_median_us"]["median"])


def test_tiny_run_measures_every_row_and_the_counter_check_passes(tmp_path: Path) -> None:
    sqlite_url = f"sqlite:///{tmp_path / 'locks.db'}"
    memory_url = "memory://bench-smoke"

    result, figures = run_bench(
        tmp_path, "--url", sqlite_url, "--url", memory_url, "--seconds", "0.3"
    )

    assert result.returncode == 0, result.stderr
    assert "Uncontended" in result.stdout
    assert "Contended" in result.stdout
    assert figures["machine"]["cpus"] >= 1
    assert figures["servers"][sqlite_url].startswith("SQLite ")  # its store bench says
    expected = {
        (contender, url)
        for url in (sqlite_url, memory_url)
        for contender in ("tumbler-sync", "tumbler-async", *peer_names(url))
    }
    assert {(row["contender"], row["url"]) for row in figures["uncontended"]} == expected
    for row in figures["uncontended"]:
        (run,) = row["repeats"]
        assert run["n"] == 20
        assert run["pair_median_us"] > 0
        assert run["pair_p99_us"] >= run["pair_median_us"]
        assert run["pairs_per_s"] > 0
        assert row["contender"] in result.stdout

    # a floor excludes nothing: it is timed uncontended only
    floors = {(name, url) for name, url in expected if name in floor_names(url)}
    assert floors, "the SQLite bench names its floor"
    assert {(row["contender"], row["url"]) for row in figures["contended"]} == expected - floors
    for row in figures["contended"]:
        (run,) = row["repeats"]
        assert row["counter_ok"] == "OK 1/1", run["errors"]
        assert run["errors"] == []
        assert row["mode"] == ("threads" if row["url"] == memory_url else "processes")
        assert run["workers"] == 2
        assert len(run["counts"]) == 2
        # every worker makes at least one round, however late it starts
        assert min(run["counts"]) >= 1
        assert run["counter"] == run["acquisitions"] == sum(run["counts"])
        assert run["overlaps"] == 0
        assert 0.5 <= run["jain"] <= 1.0
        assert run["wait_max_ms"] >= run["wait_mean_ms"] >= 0
        assert run["client_cpu_ms_per_acq"] > 0


def test_counter_check_catches_a_lock_that_excludes_nothing(tmp_path: Path) -> None:
    result, figures = run_bench(
        tmp_path,
        "--url",
        f"sqlite:///{tmp_path / 'locks.db'}",
        "--contender",
        "nolock",
        "--seconds",
        "1",
    )

    assert result.returncode == 1, result.stderr
    (row,) = figures["contended"]
    assert row["contender"] == "nolock"
    assert row["counter_ok"] == "FAIL 0/1"
    (run,) = row["repeats"]
    assert run["overlaps"] > 0
    assert "FAIL" in result.stdout


@pytest.mark.servers
def test_redis_peers_and_tumbler_rows_run_on_a_throwaway_server(tmp_path: Path) -> None:
    # without a Redis to start: skipped, but failed in CI, as a backend's tests are
    servers = pytest.importorskip("tumbler.testing.backends.redis.server")  # the testing extra
    pytest.importorskip("redis_lock")
    try:
        servers.redis_server_binary()
    except servers.RedisNotInstalled as error:
        server_unavailable(str(error))
    peers = ("redis-py-0.001", "python-redis-lock")
    picks = [arg for name in (*peers, "tumbler-sync") for arg in ("--contender", name)]

    result, figures = run_bench(tmp_path, "--start", "redis", *picks, "--seconds", "0.3")

    redis_rows = [row for row in figures["uncontended"] if row["backend"] == "redis (temp)"]
    assert {row["contender"] for row in redis_rows} == {*peers, "tumbler-sync"}, result.stderr
    (url,) = {row["url"] for row in redis_rows}
    assert url.startswith("redis://127.0.0.1:")
    # tumbler's row is there whether its Redis backend works yet or reports why not
    tumbler_failed = any(
        run.get("errors")
        for row in [*figures["uncontended"], *figures["contended"]]
        if row["contender"] == "tumbler-sync"
        for run in row["repeats"]
    )
    assert result.returncode == (1 if tumbler_failed else 0), result.stderr
    for row in figures["uncontended"]:
        if row["contender"] in peers:
            (run,) = row["repeats"]
            assert run["n"] == 20
            assert run["pair_median_us"] > 0
    contended = {row["contender"]: row for row in figures["contended"]}
    assert set(contended) == {*peers, "tumbler-sync"}
    for name in peers:
        (run,) = contended[name]["repeats"]
        assert contended[name]["counter_ok"] == "OK 1/1", run["errors"]
        assert run["counter"] == run["acquisitions"] == sum(run["counts"])
        assert min(run["counts"]) >= 1
        # every acquisition costs the server at least a SET and a release script
        assert run["server_ops_per_acq"] >= 2
        assert name in result.stdout
    # the throwaway server is gone once the bench has exited
    address = urlsplit(url)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((address.hostname, address.port), timeout=2).close()


def test_start_refuses_a_name_no_backend_has_and_lists_those_it_has() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), *TINY, "--start", "no-such-target"],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )

    assert result.returncode == 2, result.stderr
    assert "--start no-such-target: StartError: no built-in test target" in result.stderr
    # the built-in backends' targets are offered, read from their harnesses
    offered = result.stderr.rpartition(": ")[2].strip().split(", ")
    assert "sqlite" in offered
    assert result.stdout == ""


STARTUP = BENCH.with_name("startup.py")
STARTUP_ROWS = [
    "python -c pass",
    "flock FILE true",
    'python -c "import tumbler"',
    'python -c "import tumbler.aio"',
]


def run_startup(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    figures = tmp_path / "startup.json"
    result = subprocess.run(
        [sys.executable, str(STARTUP), "--runs", "2", *args, "--json", str(figures)],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert figures.exists(), result.stderr
    return result, json.loads(figures.read_text(encoding="utf-8"))


def test_startup_times_every_row_in_fresh_processes(tmp_path: Path) -> None:
    result, figures = run_startup(tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr
    assert figures["runs"] == 2
    assert figures["bytecode"] == "cached"
    rows = {row["label"]: row for row in figures["rows"]}
    assert list(rows) == [
        *STARTUP_ROWS,
        "tumbler run NAME -- true (new SQLite file)",
        "tumbler run NAME -- true (existing file)",
    ]
    assert rows["python -c pass"]["ratio_to_python"] == 1.0
    for label, row in rows.items():
        if label == "flock FILE true" and row["error"] and "not installed" in row["error"]:
            continue  # util-linux missing: the row says so, the others still run
        assert row["error"] is None, row
        assert row["runs"] == 2
        assert 0 < row["min_ms"] <= row["median_ms"] <= row["p90_ms"] <= row["max_ms"]
        assert row["ratio_to_python"] > 0
        assert label in result.stdout


def test_startup_reports_a_row_whose_process_fails(tmp_path: Path) -> None:
    # tumbler run refuses memory:// (its locks live inside one process): exit status 78
    result, figures = run_startup(tmp_path, "--url", "memory://startup-smoke")

    assert result.returncode == 1, result.stdout + result.stderr
    rows = {row["label"]: row for row in figures["rows"]}
    assert list(rows) == [*STARTUP_ROWS, "tumbler run NAME -- true"]
    failed = rows["tumbler run NAME -- true"]
    assert failed["error"].startswith("exit status 78: tumbler: ")
    assert failed["runs"] == 0
    assert "ERROR: exit status 78" in result.stdout
    assert rows['python -c "import tumbler"']["error"] is None


@pytest.mark.servers  # a throwaway Redis: not the quick tier's
def test_a_stores_floor_is_timed_uncontended_and_divides_its_flavours_rows(
    tmp_path: Path,
) -> None:
    servers = pytest.importorskip("tumbler.testing.backends.redis.server")  # the testing extra
    try:
        servers.redis_server_binary()
    except servers.RedisNotInstalled as error:
        server_unavailable(str(error))
    names = ("redis-floor-sync", "redis-floor-async", "redis-py-0.1", "tumbler-sync")
    picks = [arg for name in names for arg in ("--contender", name)]

    result, figures = run_bench(tmp_path, "--start", "redis", *picks, "--seconds", "0.3")

    assert result.returncode == 0, result.stderr
    flat = uncontended(figures)
    assert set(flat) == set(names)
    # a floor excludes nothing: it has no contended row (it would fail the counter check)
    assert {row["contender"] for row in figures["contended"]} == {"redis-py-0.1", "tumbler-sync"}

    def median(name: str) -> float:
        return pair_median(flat, name)

    tumbler_sync = flat["tumbler-sync"]
    # tumbler's blocking row over the store's reference peer and over the blocking floor
    assert tumbler_sync["pair_median_per_peer"] == median("tumbler-sync") / median("redis-py-0.1")
    assert tumbler_sync["pair_median_per_floor"] == (
        median("tumbler-sync") / median("redis-floor-sync")
    )
    # the peer has a floor ratio but is not its own reference; a floor has a ratio to the
    # peer (what the store's round trips cost beside the peer's lock), and none to a floor
    assert flat["redis-py-0.1"]["pair_median_per_peer"] is None
    assert flat["redis-py-0.1"]["pair_median_per_floor"] is not None
    for floor in ("redis-floor-sync", "redis-floor-async"):
        assert flat[floor]["pair_median_per_peer"] == median(floor) / median("redis-py-0.1")
        assert flat[floor]["pair_median_per_floor"] is None
    assert "x floor" in result.stdout


@pytest.mark.servers  # a throwaway etcd: not the quick tier's
def test_a_floor_through_another_client_divides_no_row(tmp_path: Path) -> None:
    """etcd's gRPC floor goes through another client than the backend's: it is shown beside
    the peer, and tumbler's rows are divided by the gateway's floor, whichever comes first."""
    pytest.importorskip("pyetcd")
    etcd = pytest.importorskip("tumbler.testing.backends.etcd.server")
    try:
        etcd.etcd_program()
    except etcd.EtcdNotInstalled as error:
        server_unavailable(str(error))
    names = ("etcd-grpc-floor-sync", "etcd-floor-sync", "etcd-sdk-python", "tumbler-sync")
    picks = [arg for name in names for arg in ("--contender", name)]

    result, figures = run_bench(tmp_path, "--start", "etcd", *picks, "--seconds", "0.3")

    assert result.returncode == 0, result.stderr
    flat = uncontended(figures)

    def median(name: str) -> float:
        return pair_median(flat, name)

    assert flat["tumbler-sync"]["pair_median_per_floor"] == (
        median("tumbler-sync") / median("etcd-floor-sync")
    )
    grpc = flat["etcd-grpc-floor-sync"]
    assert grpc["pair_median_per_peer"] == median("etcd-grpc-floor-sync") / median(
        "etcd-sdk-python"
    )
    assert grpc["pair_median_per_floor"] is None


FAILOVER = BENCH.with_name("failover.py")


def test_failover_times_a_new_leader_after_the_leader_is_killed(tmp_path: Path) -> None:
    """Two failovers on a fresh SQLite file: each is timed, and none can come before the dead
    leader's lease ran out (it was just granted or renewed when killed: at least two thirds
    of the lease were left)."""
    figures = tmp_path / "failover.json"
    result = subprocess.run(
        [sys.executable, str(FAILOVER), "--runs", "2", "--ttl", "0.6", "--json", str(figures)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(figures.read_text())
    assert row["runs"] == 2
    assert row["ttl"] == 0.6
    assert 0.4 <= row["median_s"] <= row["max_s"]
    assert "median s" in result.stdout
