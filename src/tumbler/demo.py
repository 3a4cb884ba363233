"""The stock-deduction demo: why a lock is needed, and that tumbler's lock is enough.

A stock of items is kept in a small file. Several worker *processes* handle purchase
requests: each reads the stock, "thinks" for a moment (the time a real service spends between
reading and writing: a price lookup, a payment call), writes the stock back minus one, and
records the sale. Reading and writing back is not atomic, so without a lock two workers can
read the same stock and both sell from it: updates are lost and more items are sold than there
were. Sales are appended to a second file with ``O_APPEND``, which is atomic for small writes,
so the number of sales is always counted exactly.

The demo runs the same workload twice, without a lock and with a tumbler lock around each
read-think-write, and reports both. ``tumbler demo`` shows it as a table; ``run_demo()``
returns the numbers.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import secrets
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path

import tumbler

__all__ = ["DemoError", "DemoResult", "RunResult", "run_demo", "run_once", "shared_by_processes"]

#: how long workers and the parent wait for every worker to be ready to start
_START_TIMEOUT = 120.0


class DemoError(Exception):
    """A worker process of the demo failed (its error is in the message)."""


@dataclass(frozen=True)
class RunResult:
    """What one run of the workload did to the stock."""

    #: whether each read-think-write was done holding a tumbler lock
    locked: bool
    workers: int
    #: purchase requests handled, all workers together
    requests: int
    initial_stock: int
    #: sales recorded (counted exactly: one atomic append each)
    sold: int
    #: the stock left in the file at the end
    final_stock: int
    #: wall-clock seconds from the start signal until the last worker finished
    seconds: float

    @property
    def label(self) -> str:
        return "with tumbler lock" if self.locked else "without lock"

    @property
    def throughput(self) -> float:
        """Requests handled a second."""
        return self.requests / self.seconds if self.seconds > 0 else float("inf")

    @property
    def deducted(self) -> int:
        """Items actually taken off the stock."""
        return self.initial_stock - self.final_stock

    @property
    def oversold(self) -> int:
        """Sales beyond the initial stock: items sold that never existed."""
        return max(0, self.sold - self.initial_stock)

    @property
    def lost_updates(self) -> int:
        """Sales whose deduction was overwritten by another worker's write."""
        return self.sold - self.deducted

    @property
    def expected_sold(self) -> int:
        """What a correct run sells: every request while stock lasts."""
        return min(self.requests, self.initial_stock)

    @property
    def exact(self) -> bool:
        """Sold what a correct run sells, and the stock went down by exactly that much."""
        return self.sold == self.expected_sold and self.deducted == self.sold


@dataclass(frozen=True)
class DemoResult:
    """Both runs of the demo."""

    url: str
    think: float
    unlocked: RunResult
    locked: RunResult

    @property
    def ok(self) -> bool:
        """True when the run with the lock came out exactly right."""
        return self.locked.exact


def shared_by_processes(url: str) -> bool:
    """Whether a backend URL's locks exclude other processes: not those of a backend that
    declares the scope "process" (``memory://``). A URL that names no known backend counts as
    shared here; connecting to it says what is wrong."""
    from ._url import parse_url
    from .backends import descriptor_for
    from .errors import TumblerError

    try:
        return descriptor_for(parse_url(url).scheme).capabilities.scope != "process"
    except TumblerError:
        return True


def run_demo(
    url: str | None = None,
    *,
    workers: int = 4,
    requests: int = 30,
    stock: int = 100,
    think: float = 0.001,
) -> DemoResult:
    """Run the workload without and then with a lock; ``requests`` is per worker.

    ``url`` defaults to an SQLite file in a fresh temporary directory (not ``$TUMBLER_URL``:
    the demo should not touch a real lock store unless asked to). ``think`` is the pause, in
    seconds, between reading and writing the stock: the wider it is, the surer the race.
    Raises ``tumbler.TumblerError`` if the backend cannot be used, ``DemoError`` if a worker
    fails, ``ValueError`` for arguments that cannot make a demo.
    """
    if workers < 1 or requests < 1 or stock < 0:
        raise ValueError("the demo needs at least 1 worker, 1 request per worker and stock >= 0")
    if not 0 <= think <= 10:
        raise ValueError("think must be between 0 and 10 seconds")
    with tempfile.TemporaryDirectory(prefix="tumbler-demo-") as scratch:
        directory = Path(scratch)
        if url is None:
            url = f"sqlite://{(directory / 'demo.db').as_posix()}"
        if not shared_by_processes(url):
            raise ValueError(
                f"{url} keeps locks inside one process, and the demo's workers are separate "
                "processes: use sqlite:// or a server backend"
            )
        # Connect once here, so that a bad URL or an unusable backend is reported as the
        # library's own error before any worker starts.
        with tumbler.connect(url) as locks:
            shown_url = locks.url
        runs = [
            run_once(
                url,
                directory / ("locked" if locked else "unlocked"),
                locked=locked,
                workers=workers,
                requests=requests,
                stock=stock,
                think=think,
            )
            for locked in (False, True)
        ]
    return DemoResult(url=shown_url, think=think, unlocked=runs[0], locked=runs[1])


def run_once(
    url: str,
    directory: Path,
    *,
    locked: bool,
    workers: int,
    requests: int,
    stock: int,
    think: float,
) -> RunResult:
    """One run: ``workers`` processes handle ``requests`` each against a fresh stock file."""
    directory.mkdir(parents=True, exist_ok=True)
    stock_path = directory / "stock"
    sales_path = directory / "sales"
    stock_path.write_text(str(stock))
    sales_path.write_bytes(b"")
    # A fresh name per run: a demo pointed at a shared backend never meets another's lock.
    lock_name = f"tumbler-demo:{secrets.token_hex(6)}" if locked else None
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(workers + 1)
    processes = [
        context.Process(
            target=_worker,
            args=(_Job(str(directory), url, lock_name, requests, think, index), start),
            name=f"tumbler-demo-{index}",
        )
        for index in range(workers)
    ]
    try:
        for process in processes:
            process.start()
        # Everyone starts together, after the slow part (process start-up and connecting):
        # otherwise the first worker could be done before the last one began. A broken
        # barrier means a worker failed to get ready; its error file says why.
        with contextlib.suppress(threading.BrokenBarrierError):
            start.wait(_START_TIMEOUT)
        began = time.perf_counter()
        for process in processes:
            process.join()
        seconds = time.perf_counter() - began
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
                process.join()
    failures = [
        (process.exitcode, _worker_error(directory, index))
        for index, process in enumerate(processes)
        if process.exitcode != 0
    ]
    if failures:
        # A worker that saw the start barrier broken only reports another worker's failure.
        failures.sort(key=lambda failure: "BrokenBarrierError" in failure[1])
        code, message = failures[0]
        raise DemoError(f"a demo worker failed (exit status {code}): {message}")
    return RunResult(
        locked=locked,
        workers=workers,
        requests=workers * requests,
        initial_stock=stock,
        sold=sales_path.read_bytes().count(b"\n"),
        final_stock=int(stock_path.read_text()),
        seconds=seconds,
    )


# -- the worker process ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Job:
    directory: str
    url: str
    #: None: no lock (the unsafe run)
    lock_name: str | None
    requests: int
    think: float
    index: int


def _worker_error(directory: Path, index: int) -> str:
    try:
        return (directory / f"worker-{index}.error").read_text().strip() or "no message"
    except OSError:
        return "it exited without saying why"


def _worker(job: _Job, start: Barrier) -> None:
    """One worker process: handle ``job.requests`` purchase requests, then exit."""
    # Errors are reported through the error file; the library's warnings would only be noise.
    logging.getLogger("tumbler").addHandler(logging.NullHandler())
    directory = Path(job.directory)
    try:
        locks = tumbler.connect(job.url) if job.lock_name is not None else None
        try:
            lock = locks.lock(job.lock_name) if locks is not None and job.lock_name else None
            sales = os.open(directory / "sales", os.O_WRONLY | os.O_APPEND)
            try:
                start.wait(_START_TIMEOUT)
                for _ in range(job.requests):
                    if lock is None:
                        _purchase(directory, sales, job)
                    else:
                        with lock:
                            _purchase(directory, sales, job)
            finally:
                os.close(sales)
        finally:
            if locks is not None:
                locks.close()
    except BaseException as error:
        try:
            start.abort()  # the others must not wait for a worker that will never come
        finally:
            (directory / f"worker-{job.index}.error").write_text(
                f"{type(error).__name__}: {error}\n"
            )
        sys.exit(1)


def _purchase(directory: Path, sales: int, job: _Job) -> None:
    """Sell one item if there is stock: read, think, write back, record the sale."""
    stock_path = directory / "stock"
    stock = int(stock_path.read_text())
    if stock <= 0:
        return
    time.sleep(job.think)  # the work between read and write: here another worker can read too
    # Written to a side file and renamed over the stock file, so a reader never sees a
    # half-written number: the only race left is the read-think-write one the demo is about.
    scratch = directory / f"stock.{job.index}"
    scratch.write_text(str(stock - 1))
    os.replace(scratch, stock_path)
    os.write(sales, f"{job.index}\n".encode())
