"""The bench's view of Redlock (``testing.backends.redlock.bench``) on masters of its own: the URL
read into one client per master, the masters' figures, the floors' commands as the masters
count them, and pottery's Redlock locking and handing the lock over. How fast anything is
belongs in the bench's output, never here."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tumbler.testing.backends.redlock.bench import (
    BENCH,
    PotteryRedlock,
    RedlockFloor,
    RedlockFloorAsync,
    master_options,
)
from tumbler.testing.backends.redlock.server import RedlockMasters
from tumbler.testing.bench import Options

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def masters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedlockMasters]:
    with RedlockMasters(tmp_path_factory.mktemp("redlock-bench"), 3) as started:
        yield started


@pytest.fixture
def measure() -> Iterator[Any]:
    sys.path.insert(0, str(BENCH_DIR))
    try:
        import measure

        yield measure
    finally:
        sys.path.remove(str(BENCH_DIR))


def test_the_url_gives_one_client_per_master_without_tumblers_options() -> None:
    url = (
        "redlocks://me:p%40ss@10.0.0.1:7001,10.0.0.2,10.0.0.3:7003/2?prefix=x&node_timeout=0.2"
        "&socket_timeout=0.5&ssl_ca_certs=/ca.pem&ssl_check_hostname=no"
    )
    first, second, third = master_options(url)
    assert (first["host"], first["port"]) == ("10.0.0.1", 7001)
    assert (second["host"], second["port"]) == ("10.0.0.2", 6379)
    assert third["port"] == 7003
    assert first == {
        "host": "10.0.0.1",
        "port": 7001,
        "db": 2,
        "username": "me",
        "password": "p@ss",
        "socket_timeout": 0.5,
        "ssl": True,
        "ssl_ca_certs": "/ca.pem",
        "ssl_check_hostname": False,
    }
    assert "ssl" not in master_options("redlock://a:1,b:2,c:3?db=4")[0]
    assert master_options("redlock://a:1,b:2,c:3?db=4")[0]["db"] == 4


def test_the_masters_say_what_they_are_and_count(masters: RedlockMasters) -> None:
    url = masters.url("bench")
    version = BENCH.version(url) or ""
    assert version.startswith("Redis 7."), version
    assert version.endswith(" x 3 masters, no persistence"), version
    before = BENCH.request_count(url)
    assert before is not None
    # a reading is one INFO on each master, counted once it has run
    assert BENCH.request_count(url) == before + 3
    gone = "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"
    assert BENCH.request_count(gone) is None
    assert BENCH.version(gone) is None


def test_the_rows_on_a_redlock_url() -> None:
    for scheme in ("redlock", "redlocks"):
        url = f"{scheme}://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"
        names = [row.name for row in BENCH.contenders(url, Options())]
        assert names == ["pottery-Redlock", "redlock-floor-sync", "redlock-floor-async"]
    assert BENCH.reference == "pottery-Redlock"
    assert not BENCH.contenders("redis://127.0.0.1:6379/0", Options())


def test_each_floor_pair_is_two_commands_on_every_master(
    masters: RedlockMasters, measure: Any
) -> None:
    url = masters.url("bench")
    floors = [RedlockFloor(url, Options()), RedlockFloorAsync(url, Options())]
    for run in measure.uncontended_rounds(floors, "floor", 40):
        assert "errors" not in run, run
        assert run["server_requests_per_pair"] == 2.0 * 3


def test_potterys_redlock_locks_and_hands_the_lock_over(
    masters: RedlockMasters, measure: Any, tmp_path: Path
) -> None:
    pytest.importorskip("pottery")
    url = masters.url("bench")
    peer = PotteryRedlock(url, Options(ttl=5.0, timeout=10.0))
    (run,) = measure.uncontended_rounds([peer], "peer", 20)
    assert "errors" not in run, run
    crowd = measure.contended(peer, 2, 0.5, "crowd", str(tmp_path))
    assert crowd["counter_ok"], crowd["errors"]
    assert min(crowd["counts"]) >= 1
