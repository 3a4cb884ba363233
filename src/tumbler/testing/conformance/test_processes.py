"""Contract cases about OS processes: exclusion, a holder killed with SIGKILL, fork.

They run on the backends whose locks work across processes, in both flavours (the worker
process uses the flavour under test).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import tumbler
from tumbler import ForkedClient

from .compat import PATIENCE, eventually

WORKER = str(Path(__file__).with_name("worker.py"))
FLAVOURS = ["sync", "async"]

pytestmark = pytest.mark.tumbler_requires("process_exclusion")


def start(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, WORKER, *args])


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


def read_marker(path: Path) -> int:
    eventually(lambda: path.exists() and path.read_text().strip(), f"{path.name} is written")
    return int(path.read_text().split()[0])


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_processes_exclude_each_other(
    process_backend_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]], flavour: str
) -> None:
    counter, tokens = tmp_path / "counter", tmp_path / "tokens"
    counter.write_text("0")
    workers, increments = 4, 40
    for _ in range(workers):
        processes.append(
            start(
                "count",
                process_backend_url,
                "counter",
                str(counter),
                str(tokens),
                str(increments),
                flavour,
            )
        )
    for process in processes:
        assert process.wait(PATIENCE * 4) == 0
    assert int(counter.read_text()) == workers * increments
    granted = [int(line) for line in tokens.read_text().split()]
    assert len(granted) == workers * increments
    # appended inside the critical section, so in grant order: strictly increasing
    assert granted == sorted(set(granted))


@pytest.mark.tumbler_lock_layer
def test_without_the_lock_the_same_workers_lose_updates(
    process_backend_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """The negative control: the counting workload does race when nothing excludes. Its
    workers take no lock, so one backend stands for all."""
    counter = tmp_path / "counter"
    counter.write_text("0")
    for _ in range(4):
        processes.append(
            start(
                "count",
                process_backend_url,
                "counter",
                str(counter),
                str(tmp_path / "t"),
                "40",
                "sync",
                "--no-lock",
            )
        )
    ready = tmp_path / "counter.ready"
    eventually(
        lambda: ready.exists() and len(ready.read_text().split()) == 4, "the workers are ready"
    )
    (tmp_path / "counter.go").touch()  # all at once: the race is then certain
    for process in processes:
        assert process.wait(PATIENCE * 4) == 0
    assert int(counter.read_text()) < 4 * 40


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_killed_holders_lease_runs_out(
    process_backend_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]], flavour: str
) -> None:
    marker = tmp_path / "held"
    # long enough that a renewal delayed by a loaded machine cannot bring the expiry near the
    # kill: the check below is that the lock is freed by its lease, not by anything sooner
    ttl = 2.0
    holder = start("hold", process_backend_url, "victim", str(marker), str(ttl), flavour)
    processes.append(holder)
    killed_token = read_marker(marker)
    with tumbler.connect(process_backend_url) as locks:
        lock = locks.lock("victim")
        assert not lock.acquire(blocking=False)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        killed_at = time.monotonic()
        assert lock.acquire(timeout=PATIENCE)
        # freed by expiry, not before: renewals come every ttl/3, so even one that a loaded
        # machine ran late leaves more than ttl/4 of the lease after the kill
        assert time.monotonic() - killed_at > ttl / 4
        assert lock.hold is not None
        assert lock.hold.token > killed_token
        lock.release()


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_killed_fair_waiter_does_not_block_the_line(
    process_backend_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]], flavour: str
) -> None:
    with tumbler.connect(process_backend_url) as locks:
        first = locks.lock("line", fair=True)
        assert first.acquire()
        marker = tmp_path / "never"
        waiter = start("hold", process_backend_url, "line", str(marker), "30", flavour, "--fair")
        processes.append(waiter)
        eventually(lambda: locks.status("line").waiters == 1, "the child waits in line")
        waiter.send_signal(signal.SIGKILL)
        waiter.wait()
        first.release()
        # the dead waiter's entry runs out (capabilities.waiter_ttl) and the line moves on
        with tumbler.connect(process_backend_url) as others:
            assert others.lock("line", fair=True).acquire(timeout=PATIENCE)
        assert not marker.exists()


def test_a_forked_child_does_not_inherit_holds(process_backend_url: str) -> None:
    with tumbler.connect(process_backend_url) as locks:
        lock = locks.lock("parental")
        assert lock.acquire()
        hold = lock.hold
        assert hold is not None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads, 3.12+
            pid = os.fork()
        if pid == 0:  # the child: report by exit status only
            code = 0
            try:
                if hold.held or not hold.lost:
                    code = 10
                try:
                    lock.release()
                    code = 11
                except ForkedClient:
                    pass
                try:
                    locks.lock("other").acquire(blocking=False)
                    code = 12
                except ForkedClient:
                    pass
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert hold.held  # the child released nothing
        with tumbler.connect(process_backend_url) as other:
            assert not other.lock("parental").acquire(blocking=False)
        lock.release()


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_program_that_ends_holding_a_lock_releases_it(
    process_backend_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]], flavour: str
) -> None:
    marker = tmp_path / "marker"
    ttl = 20.0  # far longer than the test waits: only a release at exit frees the lock in time
    processes.append(start("forget", process_backend_url, "left", str(marker), str(ttl), flavour))
    assert processes[-1].wait(PATIENCE) == 0
    assert read_marker(marker) > 0
    with tumbler.connect(process_backend_url) as locks:
        assert locks.lock("left").acquire(timeout=ttl / 4)
