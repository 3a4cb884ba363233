"""The stock-deduction demo as a service: two instances of an HTTP stock service under load.

The story of the stock demo (:mod:`tumbler.demo`), told as services are deployed: the stock
service of ``examples/stock_service.py`` (or its asyncio twin, ``stock_service_async.py``) runs
as two instances, separate processes on their own loopback ports, that share one stock (an
SQLite file) and one lock backend. A load generator sends concurrent ``POST /buy`` requests to
the two in turn, as a round-robin load balancer would, three times:

- without a lock: sales read the same stock and write it back, so updates are lost and more
  is sold than there was;
- with one tumbler lock around each sale: exact, one sale at a time across both instances;
- with a segmented lock over K segments, the stock split into K rows: exact, and up to K
  sales at a time, so more requests a second.

The demo runs the example files themselves, from the installed package (a wheel carries them
as ``tumbler/_examples``) or from the source tree (:func:`examples_directory`), and reads the
outcome from the store itself, with the example's own ``stock_store.py``.

``tumbler demo --http`` shows the runs as a table; :func:`run_http_demo` returns the numbers.
The load generator is the standard library's ``http.client``, one thread per concurrent client
with a kept-alive connection to each instance: plain blocking code, and nothing to install.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import itertools
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http.client import HTTPConnection, HTTPException
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Protocol

import tumbler

from .demo import DemoError, RunResult, shared_by_processes

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

    #: what ``signal.signal`` takes and returns
    _SignalHandler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None

__all__ = [
    "FLAVOURS",
    "MODES",
    "DemoView",
    "HttpDemoResult",
    "HttpRunResult",
    "TerminalView",
    "examples_directory",
    "run_http_demo",
]

#: the example each flavour runs
FLAVOURS = {"sync": "stock_service.py", "asyncio": "stock_service_async.py"}
#: the runs, in order: no lock, one lock, a segmented lock
MODES = ("none", "lock", "segmented")
#: the instances' names, one per process; requests go to them in turn
INSTANCES = ("A", "B")

#: how long an instance may take to start serving
_START_TIMEOUT = 60.0
#: how long a request may take: the services give up waiting for the lock after 30 s (503)
_REQUEST_TIMEOUT = 60.0
#: how long a stopped instance may take to exit before it is killed
_STOP_TIMEOUT = 5.0
#: the line an instance prints once it serves
_SERVING = re.compile(r"serving on http://127\.0\.0\.1:(\d+)")


@dataclass(frozen=True)
class HttpRunResult(RunResult):
    """What one run of the load did to the stock (``workers``: the concurrent clients)."""

    #: what protected each sale: "none", "lock" or "segmented"
    mode: str
    #: the stock's rows; also the segmented lock's segments
    segments: int
    #: answers "sold" (200) and "sold out" (409)
    answered_sold: int
    answered_sold_out: int
    #: requests with any other answer, or none
    failed: int

    @property
    def label(self) -> str:
        return _label(self.mode, self.segments)

    @property
    def exact(self) -> bool:
        """Exact in the store, and every request told the truth: sold or sold out."""
        return (
            super().exact
            and self.failed == 0
            and self.answered_sold == self.sold
            and self.answered_sold_out == self.requests - self.sold
        )


@dataclass(frozen=True)
class HttpDemoResult:
    """The three runs of the HTTP demo."""

    url: str
    flavour: str
    think: float
    unlocked: HttpRunResult
    locked: HttpRunResult
    segmented: HttpRunResult

    @property
    def runs(self) -> tuple[HttpRunResult, HttpRunResult, HttpRunResult]:
        return (self.unlocked, self.locked, self.segmented)

    @property
    def ok(self) -> bool:
        """True when both locked runs came out exactly right."""
        return self.locked.exact and self.segmented.exact

    @property
    def speedup(self) -> float:
        """The segmented lock's throughput over the single lock's."""
        return self.segmented.throughput / self.locked.throughput


class DemoView(Protocol):
    """What the demo tells as it goes: the instances' output and the load's progress.

    ``answered`` is called from the load generator's threads."""

    def instance_output(self, instance: str, line: str) -> None: ...

    def run_started(self, label: str, requests: int) -> None: ...

    def answered(self) -> None: ...

    def run_ended(self, result: HttpRunResult) -> None: ...


class _Silent:
    def instance_output(self, instance: str, line: str) -> None:
        pass

    def run_started(self, label: str, requests: int) -> None:
        pass

    def answered(self) -> None:
        pass

    def run_ended(self, result: HttpRunResult) -> None:
        pass


def examples_directory() -> Path:
    """Where the example stock services are: ``tumbler/_examples`` in an installed wheel,
    else the ``examples`` directory of the source tree this package is in (an editable
    install, or a checkout on ``sys.path``)."""
    package = Path(__file__).resolve().parent
    for candidate in (package / "_examples", package.parent.parent / "examples"):
        if (candidate / "stock_store.py").is_file():
            return candidate
    raise DemoError(
        f"the example stock services are missing: neither {package / '_examples'} nor a "
        "source tree's examples/ directory has them"
    )


def run_http_demo(
    url: str | None = None,
    *,
    flavour: str = "sync",
    requests: int = 150,
    concurrency: int = 30,
    stock: int = 100,
    segments: int = 4,
    think: float = 0.01,
    view: DemoView | None = None,
) -> HttpDemoResult:
    """Run the load without a lock, with one lock, and with a segmented lock.

    Each run starts two instances of the ``flavour``'s example service on a fresh store of
    ``stock`` items in ``segments`` rows, sends them ``requests`` purchase requests from
    ``concurrency`` concurrent clients, alternately, stops them, and reads the store. ``url``
    is the lock backend, by default an SQLite file in a fresh temporary directory (not
    ``$TUMBLER_URL``: the demo should not touch a real lock store unless asked to). ``think``
    is the pause, in seconds, between reading and writing the stock.

    Raises ``tumbler.TumblerError`` if the backend cannot be used, ``DemoError`` if an
    instance fails, ``ValueError`` for arguments that cannot make a demo. Called from the main
    thread, it ends at SIGTERM and SIGHUP as at Ctrl-C: the instances are stopped and the
    temporary files removed before the exception (``KeyboardInterrupt``, or ``SystemExit``
    with 128 + the signal) leaves.
    """
    if flavour not in FLAVOURS:
        raise ValueError(f"flavour must be one of {', '.join(FLAVOURS)}")
    if requests < 1 or concurrency < 1 or segments < 1 or stock < 0:
        raise ValueError("the demo needs a request, a client, a segment, and stock >= 0")
    if not 0 <= think <= 10:
        raise ValueError("think must be between 0 and 10 seconds")
    examples = examples_directory()
    store_class = _load_store(examples)
    view = view or _Silent()
    with _ended_once(), tempfile.TemporaryDirectory(prefix="tumbler-demo-") as scratch:
        directory = Path(scratch)
        if url is None:
            url = f"sqlite://{(directory / 'locks.db').as_posix()}"
        if not shared_by_processes(url):
            raise ValueError(
                f"{url} keeps locks inside one process, and the demo's instances are separate "
                "processes: use sqlite:// or a server backend"
            )
        # Connect once here, so that a bad URL or an unusable backend is reported as the
        # library's own error before any instance starts.
        with tumbler.connect(url) as locks:
            shown_url = locks.url
        runs = [
            _run_once(
                url,
                store_class(str(directory / f"stock-{mode}.db")),
                examples / FLAVOURS[flavour],
                mode=mode,
                requests=requests,
                concurrency=concurrency,
                stock=stock,
                segments=segments,
                think=think,
                view=view,
            )
            for mode in MODES
        ]
    return HttpDemoResult(
        url=shown_url,
        flavour=flavour,
        think=think,
        unlocked=runs[0],
        locked=runs[1],
        segmented=runs[2],
    )


def _run_once(
    url: str,
    store: _Store,
    service: Path,
    *,
    mode: str,
    requests: int,
    concurrency: int,
    stock: int,
    segments: int,
    think: float,
    view: DemoView,
) -> HttpRunResult:
    """One run: two instances of ``service`` (an example's file) sell from ``store``."""
    store.create(stock, segments)
    # A fresh lock name per run: a demo pointed at a shared backend never meets another's.
    lock_name = f"tumbler-demo-http:{secrets.token_hex(6)}"
    argv = [sys.executable, str(service), "--port", "0", "--db", store.path]
    argv += ["--mode", mode, "--segments", str(segments), "--think", repr(think)]
    argv += ["--lock-name", lock_name]
    # The backend's URL goes in the environment, where its password is not shown to every
    # user of the machine, as a command line is.
    environment = {**os.environ, "TUMBLER_URL": url, "PYTHONUNBUFFERED": "1"}
    instances: list[_Instance] = []
    try:
        for name in INSTANCES:
            instances.append(
                _Instance(name, [*argv, "--name", name], environment, view.instance_output)
            )
        ports = [instance.wait_serving() for instance in instances]
        view.run_started(_label(mode, segments), requests)
        statuses, seconds = _load(ports, requests, concurrency, view.answered)
    finally:
        _stop(instances)
    levels: list[int] = store.levels()
    result = HttpRunResult(
        locked=mode != "none",
        workers=concurrency,
        requests=requests,
        initial_stock=stock,
        sold=store.sales(),
        final_stock=sum(levels),
        seconds=seconds,
        mode=mode,
        segments=segments,
        answered_sold=statuses[200],
        answered_sold_out=statuses[409],
        failed=requests - statuses[200] - statuses[409],
    )
    view.run_ended(result)
    return result


def _label(mode: str, segments: int) -> str:
    if mode == "segmented":
        return f"segmented lock ({segments})"
    return "one lock" if mode == "lock" else "without lock"


class _Store(Protocol):
    """What the demo uses of the example's ``StockStore``."""

    path: str

    def create(self, items: int, segments: int = 1) -> None: ...

    def levels(self) -> list[int]: ...

    def sales(self) -> int: ...


def _load_store(examples: Path) -> Callable[[str], _Store]:
    """The example's ``StockStore`` class, loaded from its file (the examples are scripts, not
    a package of tumbler's)."""
    path = examples / "stock_store.py"
    spec = importlib.util.spec_from_file_location("_tumbler_example_stock_store", path)
    if spec is None or spec.loader is None:
        raise DemoError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    store: Callable[[str], _Store] = module.StockStore
    return store


# -- the instances -------------------------------------------------------------------------------


class _Instance:
    """One stock service process; its output goes line by line to ``output``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        environment: dict[str, str],
        output: Callable[[str, str], None],
    ) -> None:
        self.name = name
        self._output = output
        self._port: int | None = None
        self._serving = threading.Event()
        self._last_line = ""
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=environment,
            # Its own session: a Ctrl-C at the terminal reaches the demo alone, which stops
            # the instances itself, in order, rather than every process at once.
            start_new_session=True,
        )
        self._reader = threading.Thread(
            target=self._forward, name=f"tumbler-demo-{name}-output", daemon=True
        )
        self._reader.start()

    def _forward(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            line = line.rstrip("\n")
            self._last_line = line
            if self._port is None and (serving := _SERVING.search(line)):
                self._port = int(serving.group(1))
                self._serving.set()
            self._output(self.name, line)
        self._serving.set()  # its output ended: whoever waits for it to serve must look

    def wait_serving(self) -> int:
        """The port it serves on, once it does; ``DemoError`` if it exits first."""
        if not self._serving.wait(_START_TIMEOUT):
            raise DemoError(f"instance {self.name} did not start within {_START_TIMEOUT:g} s")
        if self._port is None:
            self._reader.join()
            status = self.process.wait()
            # the last line is the error's, after its traceback
            said = self._last_line or "nothing"
            raise DemoError(f"instance {self.name} exited (status {status}): {said}")
        return self._port

    def stop(self) -> None:
        """Terminate it (its service releases what it holds), kill it if it lingers."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join()
        assert self.process.stdout is not None
        self.process.stdout.close()


def _stop(instances: Sequence[_Instance]) -> None:
    # A Ctrl-C now would leave the instances after this one running: it waits for the stop,
    # a few seconds at most, and then ends the demo.
    with _signals_held_back():
        for instance in instances:
            instance.stop()


#: the signals that end the demo: Ctrl-C, and a polite kill or hang-up
_ENDING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _handle(handler: Callable[[int, FrameType | None], None]) -> dict[int, _SignalHandler]:
    """Let ``handler`` take the ending signals that are not ignored (``nohup``, a background
    job's SIGINT); return the handlers to restore."""
    previous: dict[int, _SignalHandler] = {}
    for signum in _ENDING:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, handler)
    return previous


def _restore(previous: dict[int, _SignalHandler]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


@contextlib.contextmanager
def _ended_once() -> Iterator[None]:
    """While the demo runs, the first ending signal ends it, by an exception that unwinds
    through the clean-up (``KeyboardInterrupt`` for SIGINT, else ``SystemExit`` with 128 + the
    signal, a shell's status for it); the signals after it are ignored, so that an impatient
    second Ctrl-C cannot cut the clean-up short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    ended = False

    def end(signum: int, frame: FrameType | None) -> None:
        nonlocal ended
        if ended:
            return
        ended = True
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        sys.exit(128 + signum)

    previous = _handle(end)
    try:
        yield
    finally:
        _restore(previous)


@contextlib.contextmanager
def _signals_held_back() -> Iterator[None]:
    """Hold back the ending signals until the block ends, then act on the first."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold_back(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = _handle(hold_back)
    try:
        yield
    finally:
        _restore(previous)
        if received:
            signal.raise_signal(received[0])


# -- the load ------------------------------------------------------------------------------------


def _load(
    ports: Sequence[int], requests: int, concurrency: int, answered: Callable[[], None]
) -> tuple[collections.Counter[int], float]:
    """Send ``requests`` purchase requests from ``concurrency`` clients, to ``ports`` in turn.

    Returns how many got each status (0: no answer) and the seconds from the start of the
    first request to the last answer.
    """
    tickets = itertools.count()
    statuses: collections.Counter[int] = collections.Counter()
    guard = threading.Lock()
    # Every client begins at once, after the threads are made: as JMeter's threads would.
    start = threading.Barrier(concurrency + 1)
    stopping = threading.Event()

    def client() -> None:
        connections = [
            HTTPConnection("127.0.0.1", port, timeout=_REQUEST_TIMEOUT) for port in ports
        ]
        try:
            start.wait(_START_TIMEOUT)
            while not stopping.is_set():
                with guard:
                    ticket = next(tickets)
                if ticket >= requests:
                    break
                status = _buy(connections[ticket % len(connections)])
                with guard:
                    statuses[status] += 1
                answered()
        except threading.BrokenBarrierError:
            pass
        finally:
            for connection in connections:
                connection.close()

    clients = [
        threading.Thread(target=client, name=f"tumbler-demo-client-{index}", daemon=True)
        for index in range(concurrency)
    ]
    try:
        for thread in clients:
            thread.start()
        start.wait(_START_TIMEOUT)
        began = time.perf_counter()
        for thread in clients:
            thread.join()
        return statuses, time.perf_counter() - began
    finally:
        stopping.set()  # on Ctrl-C: the clients stop at their next request
        start.abort()


def _buy(connection: HTTPConnection) -> int:
    """One ``POST /buy``: the answer's status, 0 if none came."""
    try:
        connection.request("POST", "/buy")
        with connection.getresponse() as response:
            response.read()
            return response.status
    except (OSError, HTTPException):
        connection.close()  # the next request connects anew
        return 0


# -- in a terminal -------------------------------------------------------------------------------


class TerminalView:
    """The demo in a terminal: the instances' output above a progress bar per run (without
    a terminal, a line as each run starts). Use it as a context manager around
    :func:`run_http_demo`. Without ``instance_output``, the instances' own lines are left out.
    """

    def __init__(self, console: Console, *, instance_output: bool = True) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self.console = console
        self._progress: Progress = Progress(
            "{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            # a log file or a pipe would get every bar at its end, after the instances' lines
            disable=not console.is_terminal,
        )
        self._task: TaskID | None = None
        self._instance_output = instance_output

    def __enter__(self) -> TerminalView:
        self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._progress.stop()

    def instance_output(self, instance: str, line: str) -> None:
        if not self._instance_output:
            return
        from rich.text import Text

        self.console.print(Text(f"{instance} | {line}", style="dim"), soft_wrap=True)

    def run_started(self, label: str, requests: int) -> None:
        if self._progress.disable:
            self.console.print(f"run: {label}, {requests} requests")
        self._task = self._progress.add_task(label, total=requests)

    def answered(self) -> None:
        if self._task is not None:
            self._progress.advance(self._task)

    def run_ended(self, result: HttpRunResult) -> None:
        self._task = None
