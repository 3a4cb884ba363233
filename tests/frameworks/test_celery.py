"""examples/celery_recipe.py in a real Celery worker (prefork, two processes) on a real Redis
broker and result backend: the tasks' bodies never overlap under the lock, and do without it;
a run that finds the lock taken is skipped; each worker process has a client of its own, closed
at its shutdown, where a client made before the fork fails with ForkedClient.

The worker runs tests/frameworks/celery_worker.py, the recipe's app with its work recorded in a
journal file; the tasks are sent from here by name, as another service would send them.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import redis
from celery import Celery

import tumbler

ROOT = Path(__file__).resolve().parents[2]
PATH = os.pathsep.join(str(p) for p in (ROOT / "src", ROOT / "examples", ROOT))
RUNS = 4
#: seconds for a task's result, and for the worker to stop
PATIENCE = 30.0

# Each worker a Redis database of its own for its broker and results (so that no worker takes
# another's tasks), the locks a prefix of their own: on the session's shared server.
_databases = itertools.count()


@dataclass(frozen=True)
class Run:
    task: str
    pid: int
    began: float
    ended: float


@dataclass
class Worker:
    """A running worker, and a Celery client of its broker that sends it tasks."""

    process: subprocess.Popen[bytes]
    client: Any
    lock_url: str
    journal: Path
    log: Path

    def run_at_once(self, task: str, count: int = RUNS) -> list[Any]:
        """``count`` runs of ``task`` sent together; their results, once all are in."""
        sent = [self.client.send_task(f"celery_recipe.{task}") for _ in range(count)]
        try:
            return [result.get(timeout=PATIENCE, propagate=False) for result in sent]
        except Exception:
            print(self.log.read_text(errors="replace")[-5000:])
            raise

    def lines(self, kind: str) -> list[list[str]]:
        if not self.journal.exists():
            return []
        rows = [line.split() for line in self.journal.read_text().splitlines()]
        return [row[1:] for row in rows if row[0] == kind]

    def runs(self, task: str) -> list[Run]:
        return [
            Run(name, int(pid), float(began), float(ended))
            for name, pid, began, ended in self.lines("ran")
            if name == task
        ]


def overlapping(runs: list[Run]) -> list[tuple[Run, Run]]:
    ordered = sorted(runs, key=lambda run: run.began)
    return [(a, b) for a, b in itertools.pairwise(ordered) if b.began < a.ended]


@contextlib.contextmanager
def celery_worker(server: Any, directory: Path, **environment: str) -> Iterator[Worker]:
    database = next(_databases) % 15 + 1  # of the server's 16
    broker = server.url_for(db=database)
    with contextlib.closing(redis.Redis.from_url(broker)) as admin:
        admin.flushdb()
    directory.mkdir()
    journal = directory / "journal"
    log = directory / "worker.log"
    lock_url = f"{server.url}?prefix=celery-{secrets.token_hex(4)}"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": PATH,
        "CELERY_BROKER_URL": broker,
        "CELERY_RESULT_BACKEND": broker,
        "TUMBLER_URL": lock_url,
        "RECIPE_JOURNAL": str(journal),
        **environment,
    }
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "tests.frameworks.celery_worker",
        "worker",
        "--pool=prefork",
        "--concurrency=2",
        # a process takes one task at a time, so both start on the first two sent
        "--prefetch-multiplier=1",
        "--without-heartbeat",
        "--without-gossip",
        "--without-mingle",
        "--loglevel=INFO",
        f"--hostname=recipe-{secrets.token_hex(4)}@%h",
    ]
    with log.open("wb") as output:
        process = subprocess.Popen(
            command,
            cwd=directory,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the worker's family: killed together if it hangs
        )
    client = Celery("recipe-client", broker=broker, backend=broker)
    worker = Worker(process, client, lock_url, journal, log)
    try:
        yield worker
    finally:
        client.close()
        stop(worker)


def stop(worker: Worker) -> None:
    """A warm shutdown (SIGTERM: running tasks finish, each process's shutdown signal runs),
    then SIGKILL for what is left of the worker's family after PATIENCE."""
    process = worker.process
    if process.poll() is not None:
        return
    try:
        family = [psutil.Process(process.pid), *psutil.Process(process.pid).children(True)]
    except psutil.NoSuchProcess:
        family = []
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=PATIENCE)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    _, alive = psutil.wait_procs(family, timeout=PATIENCE)
    for straggler in alive:
        straggler.kill()
    assert not alive, f"worker processes left running: {alive}"


def test_runs_that_wait_for_the_lock_take_turns_and_each_process_closes_its_client(
    redis_server: Any, tmp_path: Path
) -> None:
    with celery_worker(redis_server, tmp_path / "worker") as worker:
        assert worker.run_at_once("settle_payments") == ["settled"] * RUNS
        runs = worker.runs("settle-payments")
        stop(worker)
        assert worker.process.returncode == 0
    assert len(runs) == RUNS
    assert not overlapping(runs)
    assert len({run.pid for run in runs}) == 2  # both processes ran some
    opened = {int(pid) for (pid,) in worker.lines("opened")}
    closed = {int(pid) for (pid,) in worker.lines("closed")}
    assert {run.pid for run in runs} <= opened
    assert closed == opened
    assert not worker.lines("not-closed")


def test_a_run_that_finds_the_lock_taken_is_skipped(redis_server: Any, tmp_path: Path) -> None:
    with celery_worker(redis_server, tmp_path / "worker") as worker:
        # another holder (a run on another machine, say) has the lock: every run is skipped
        with tumbler.connect(worker.lock_url) as other, other.lock("refresh-prices"):
            held = worker.run_at_once("refresh_prices")
        assert not worker.runs("refresh-prices")
        # runs sent together: one has the lock, the others run after it or are skipped
        results = worker.run_at_once("refresh_prices")
        runs = worker.runs("refresh-prices")
    assert held == ["skipped: another run is refreshing the prices"] * RUNS
    assert "refreshed" in results
    assert len(runs) == results.count("refreshed")
    assert not overlapping(runs)


def test_without_the_lock_the_runs_overlap(redis_server: Any, tmp_path: Path) -> None:
    with celery_worker(redis_server, tmp_path / "worker", RECIPE_WITHOUT_LOCK="1") as worker:
        assert worker.run_at_once("settle_payments") == ["settled"] * RUNS
        assert worker.run_at_once("refresh_prices") == ["refreshed"] * RUNS
        settled = worker.runs("settle-payments")
        refreshed = worker.runs("refresh-prices")
    assert overlapping(settled)
    assert overlapping(refreshed)


def test_a_client_made_before_the_fork_fails_in_the_worker_processes(
    redis_server: Any, tmp_path: Path
) -> None:
    with celery_worker(redis_server, tmp_path / "worker", RECIPE_CONNECT_BEFORE_FORK="1") as worker:
        results = worker.run_at_once("settle_payments", count=2)
    assert [type(result).__name__ for result in results] == ["ForkedClient"] * 2
    assert not worker.runs("settle-payments")
