"""How a round goes on: which fault it injects next, and when it stops, and how its workers
stop (no servers)."""

from __future__ import annotations

import re
import signal
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tumbler.torture.harness import Options, _busiest_threads, _round_shares, next_fault
from tumbler.torture.pool import PoolError, ResourceProcess, WorkerPool
from tumbler.torture.report import _soak_text


def test_past_its_seconds_a_round_injects_again_the_kinds_that_have_not_hit() -> None:
    """A round whose fault never bit proves nothing: once its seconds are over it goes on
    with the kinds that have not hit what they aimed at, three futile tries per kind at most.
    (It used to stop as soon as it had injected each kind once, hit or not.)"""
    kinds = ["net-cut", "net-drop"]
    during = [next_fault(kinds, {"net-cut"}, n, overtime=False, futile=0) for n in range(3)]
    assert during == ["net-cut", "net-drop", "net-cut"]
    assert next_fault(kinds, {"net-cut"}, 3, overtime=True, futile=5) == "net-drop"
    assert next_fault(kinds, {"net-cut"}, 4, overtime=True, futile=6) is None
    assert next_fault(kinds, {"net-cut", "net-drop"}, 3, overtime=True, futile=0) is None
    assert next_fault(["minority"], set(), 1, overtime=True, futile=1) == "minority"
    assert next_fault([], set(), 0, overtime=False, futile=0) is None


def _done(grants: int, *kinds: str) -> SimpleNamespace:
    """What ``_round_shares`` reads of a finished round: its grants and its faults' kinds."""
    return SimpleNamespace(
        check=SimpleNamespace(grants=grants),
        faults=[SimpleNamespace(kind=kind) for kind in kinds],
    )


def test_a_soak_spreads_its_totals_over_a_deployments_rounds() -> None:
    options = Options(min_faults=50, min_grants=10_000, primitives=("lock", "fair"))
    plan = [("kill", "lock"), ("kill", "fair"), ("pause", "lock"), ("pause", "fair")]
    first = _round_shares([], plan, options)
    assert (first.min_faults, first.min_grants) == (25, 2500)
    # a round that fell short is made up by the rounds after it
    done = [_done(1000, *["kill"] * 20)]
    second = _round_shares(done, plan[1:], options)
    assert (second.min_faults, second.min_grants) == (30, 3000)
    done.append(_done(6000, *["kill"] * 30))
    third = _round_shares(done, plan[2:], options)
    assert (third.min_faults, third.min_grants) == (25, 1500)
    # past the totals a round needs nothing more than its seconds
    done.append(_done(9000, *["pause"] * 50))
    last = _round_shares(done, plan[3:], options)
    assert (last.min_faults, last.min_grants) == (0, 0)


def test_the_grants_are_asked_of_the_rounds_that_fault_only_holders() -> None:
    options = Options(min_faults=10, min_grants=1000, primitives=("lock",))
    plan = [("restart", "lock"), ("kill", "lock"), ("net-cut", "lock"), ("pause", "lock")]
    restart = _round_shares([], plan, options)
    assert (restart.min_faults, restart.min_grants) == (10, 0)
    kill = _round_shares([_done(100, *["restart"] * 10)], plan[1:], options)
    assert kill.min_grants == 450  # the restart round's 100 count; two holder rounds are left
    net = _round_shares([_done(100), _done(450)], plan[2:], options)
    assert net.min_grants == 0
    pause = _round_shares([_done(100), _done(450), _done(20)], plan[3:], options)
    assert pause.min_grants == 430
    # without holder rounds, every round takes a share
    alone = _round_shares([], [("restart", "lock"), ("net-cut", "lock")], options)
    assert alone.min_grants == 500


def test_a_round_of_dead_waiters_runs_for_its_faults_only() -> None:
    """Each dead waiter holds the line up until the backend ends its entry (a second or more
    on etcd): a kill-waiter round asked for a share of a soak's grants ran for many minutes
    to get them."""
    options = Options(min_faults=10, min_grants=1000, primitives=("lock",))
    plan = [("kill-waiter", "lock"), ("kill", "lock")]
    dead_waiters = _round_shares([], plan, options)
    assert (dead_waiters.min_faults, dead_waiters.min_grants) == (10, 0)
    assert _round_shares([_done(40, *["kill-waiter"] * 10)], plan[1:], options).min_grants == 960


def test_a_round_of_joined_kinds_takes_the_largest_share_of_its_kinds() -> None:
    options = Options(min_faults=10, primitives=("lock",))
    plan = [("net-cut+net-drop", "lock"), ("net-drop", "lock")]
    shares = _round_shares([_done(0, "net-drop", "net-drop")], plan, options)
    # net-cut has this one round for all 10; net-drop 8 left over two rounds
    assert shares.min_faults == 10


def test_without_a_soak_the_options_are_left_as_they_are() -> None:
    options = Options()
    assert _round_shares([], [("kill", "lock")], options) is options


def test_the_report_names_a_soaks_totals_per_deployment() -> None:
    assert _soak_text(Options()) == ""
    assert _soak_text(Options(min_faults=50)) == ", at least 50 faults of each kind per deployment"
    assert _soak_text(Options(min_faults=50, min_grants=10_000)) == (
        ", at least 50 faults of each kind and 10000 grants per deployment"
    )


def _pool(url: str, resource: Path, directory: Path, count: int) -> WorkerPool:
    """A pool of ``count`` workers of a 1 s lease, not started."""
    return WorkerPool(
        url=url,
        lock="torture-test",
        resource=resource,
        directory=directory,
        count=count,
        ttl=1.0,
        think=0.02,
        acquire_timeout=1.0,
        idle=0.0,
        seed=0,
    )


def test_a_worker_stopped_before_it_began_is_no_bad_exit(tmp_path: Path) -> None:
    # A worker started as the round ends (the replacement of a killed one, on a loaded
    # machine) may get the stop request before its interpreter has put in the handler that
    # makes it stop cleanly: SIGTERM ends it then, having done nothing.
    pool = _pool("memory://", tmp_path / "resource.sock", tmp_path, count=0)
    slot = pool._spawn(0, 1)
    pool.slots.append(slot)
    try:
        pool.stop(timeout=30)
    finally:
        pool.kill_all()
    assert slot.process.returncode == -signal.SIGTERM  # it was stopped before it began
    assert pool.bad_exits == {}


def test_workers_that_cannot_connect_are_named_with_what_they_met(tmp_path: Path) -> None:
    # On a loaded machine this message is all there is to go on when a round cannot start:
    # it names each worker still connecting and the last error it recorded.
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    resource = ResourceProcess(tmp_path, "on").start()
    pool = _pool(f"redis://127.0.0.1:{port}/0", resource.socket_path, tmp_path, count=1)
    try:
        with pytest.raises(PoolError, match="did not connect within 1 s") as raised:
            pool.start(timeout=1.0)
    finally:
        pool.kill_all()
        resource.stop()
    message = str(raised.value)
    assert "w0 (pid " in message, message
    assert "running" in message, message
    assert re.search(r"[1-9]\d* connect errors, the last: .*\S", message), message


def test_the_harness_ranks_its_threads_by_the_cpu_they_used() -> None:
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    idler = threading.Thread(target=stop.wait, name="idler", daemon=True)
    spinner = threading.Thread(target=spin, name="spinner", daemon=True)
    idler.start()
    spinner.start()
    try:
        # the spinner ahead of the idler, whatever else the process runs
        deadline = time.monotonic() + 30
        while True:
            named = _busiest_threads(top=1000)
            used = re.search(r"spinner (\d+\.\d) s", named)
            if (used and float(used[1]) >= 0.2) or time.monotonic() > deadline:
                break
            stop.wait(0.05)
        assert used, named
        assert float(used[1]) >= 0.2, named
        assert named.index("spinner") < named.index("idler"), named
    finally:
        stop.set()
        spinner.join()
        idler.join()
