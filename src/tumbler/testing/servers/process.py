"""The life of one throwaway server process: launched on free ports, counted as started only
once it serves, stopped, killed and started again on the same ports and files.

A backend's launcher (``tumbler.testing.backends.<name>.server``) subclasses
:class:`ProcessLauncher` and says only what is its own: the command, the files to write first,
when the server serves, its error class. Everything else (picking ports and trying others when
another program binds one first, telling "port taken" from "would not start", the end of its
logs in the error, start-up time) is here once. Needs mirakuru (the ``testing`` extra).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, ClassVar, TypeVar

from mirakuru import TCPExecutor
from mirakuru.base import ENV_UUID, SimpleExecutor, cleanup_subprocesses
from mirakuru.exceptions import (
    AlreadyRunning,
    ExecutorError,
    ProcessExitedWithError,
    ProcessFinishedWithError,
    TimeoutExpired,
)

from ._common import Launcher, PortTaken, ServerError, free_port, tail

__all__ = ["BIND_ATTEMPTS", "ProcessLauncher", "ReadyExecutor", "leaked_servers"]


def leaked_servers(pid: int) -> list[int]:
    """The processes that executors of the process ``pid`` launched and that still run:
    mirakuru marks each one's environment with ``mirakuru_uuid=<pid>:<uuid>``."""
    import psutil  # mirakuru's own dependency

    marker = f"{pid}:"
    found = []
    for process in psutil.process_iter():
        try:
            mark = process.environ().get(ENV_UUID, "")
        except (psutil.Error, OSError):
            continue  # gone meanwhile, or not ours to read
        if mark.startswith(marker):
            found.append(process.pid)
    return found


def _end_leaked_servers() -> None:
    for pid in leaked_servers(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# mirakuru's own exit hook ends the servers whose marker merely *contains* the exiting
# process's pid: a process of pid 96 that exits kills the servers of the process of pid 23196
# (and those whose random part has "96" in it), servers that other test runs on the machine
# are using. This one ends only this process's own.
atexit.unregister(cleanup_subprocesses)
atexit.register(_end_leaked_servers)

#: how many sets of free ports a first start tries before it gives up
BIND_ATTEMPTS = 8

_Process = TypeVar("_Process", bound="ProcessLauncher")


class ReadyExecutor(TCPExecutor):
    """A mirakuru executor that counts its process as started once ``ready()`` says so (the
    server answers a real request), not merely once its port accepts connections: a server
    still loading its data accepts connections but does not serve yet. Its start is split in
    two (:meth:`spawn`, :meth:`wait_started`), so that the members of an ensemble can all be
    launched before the first is waited for: on two cores their start-ups then overlap."""

    def __init__(self, command: list[str], *, ready: Callable[[], bool], **kwargs: Any) -> None:
        super().__init__(command, **kwargs)
        self._ready = ready

    def after_start_check(self) -> bool:
        return self._ready()

    def spawn(self) -> None:
        """Launch the process, refusing (``AlreadyRunning``) if something answers on the port
        already."""
        if self.pre_start_check():
            raise AlreadyRunning(self)
        SimpleExecutor.start(self)

    def wait_started(self) -> None:
        """Wait until ``ready()``; raises mirakuru's errors if the process exits or the timeout
        (counted from :meth:`spawn`) passes first."""
        self.wait_for(self.check_subprocess)


class ProcessLauncher(Launcher):
    """A launcher of one server process on ``host:port`` (``port`` 0 until the first start
    picks a free one), in its own directory.

    A subclass sets ``host``, ``port``, ``startup_timeout``, ``config_path`` and ``log_path``
    in its constructor (after ``_use_directory``) and provides :meth:`_command`,
    :meth:`_write_files` and :meth:`_ready`; it may change :attr:`error`, :attr:`program`,
    :attr:`poll_interval`, :meth:`_pick_ports` (a server with more than one port),
    :meth:`_output_path` (where the process's own output goes, when not to its log),
    :meth:`_port_taken_message`, :meth:`_executor_options` and :attr:`ready_errors`.
    """

    #: what a failed start raises (the launcher's subclass of :class:`ServerError`)
    error: ClassVar[type[ServerError]] = ServerError
    #: the server's name in error messages
    program: ClassVar[str] = "the server"
    #: how often a start asks ``_ready()``
    poll_interval: ClassVar[float] = 0.05
    #: errors of ``_ready()`` that mean "did not come up" (a driver's, say) rather than a bug
    ready_errors: ClassVar[tuple[type[Exception], ...]] = ()

    host: str
    port: int
    startup_timeout: float
    config_path: Path
    log_path: Path
    _executor: ReadyExecutor | None = None
    #: where the server's logs were at the last launch: what an error shows is what came after
    _offsets: tuple[tuple[Path, int], ...] = ()
    _began = 0.0
    #: the program launched last (for messages)
    _launched = ""
    #: seconds the last start took, from launching the process until it served
    startup_seconds = 0.0

    # -- what a server says about itself ---------------------------------------------------

    def _command(self) -> list[str]:
        """The command that runs the server in the foreground (raising the launcher's
        ``ServerNotInstalled`` when its program is missing)."""
        raise NotImplementedError

    def _write_files(self) -> None:
        """Write what the server reads at start (its config, on the current ports)."""
        raise NotImplementedError

    def _ready(self) -> bool:
        """Whether the server serves now; False (not an error) while it cannot be reached."""
        raise NotImplementedError

    def _pick_ports(self) -> None:
        self.port = free_port()

    def _output_path(self) -> Path:
        return self.log_path

    def _port_taken_message(self) -> str:
        return f"port {self.port} on {self.host} is taken by another program"

    def _executor_options(self) -> dict[str, Any]:
        return {}

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the process is alive (it may not serve yet)."""
        return self._executor is not None and bool(self._executor.running())

    @property
    def pid(self) -> int | None:
        if self._executor is None or self._executor.process is None:
            return None
        pid: int = self._executor.process.pid
        return pid

    def pids(self) -> list[int]:
        """The process and its descendants (a server that forks a process per connection,
        or one launched through a program that switches user): every process that serves,
        for a test that stops them all (SIGSTOP) to stall the server. Empty when it is down."""
        import psutil  # mirakuru's own dependency

        pid = self.pid
        if pid is None or not self.running:
            return []
        try:
            children = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            return []
        return [pid, *(child.pid for child in children)]

    def start(self: _Process) -> _Process:
        """Start the process and wait until it serves; returns the launcher itself.

        The first start picks free ports (trying again with others if another program binds
        one first); later starts reuse them. Raises :attr:`error`, with the end of the
        server's logs, if it does not serve within ``startup_timeout`` seconds.
        """
        if self.running:
            return self
        if self._executor is not None:
            self.kill()  # it ended on its own (a crash, a shutdown): reap it first
        pick_ports = self.port == 0
        attempts = BIND_ATTEMPTS if pick_ports else 1
        for attempt in range(1, attempts + 1):
            if pick_ports:
                self._pick_ports()
            try:
                self._spawn()
                self._await_started()
                return self
            except PortTaken as taken:
                if attempt == attempts:
                    raise self.error(str(taken)) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _spawn(self) -> None:
        """Write the files and launch the process, without waiting for it to serve."""
        command = self._command()
        self._launched = Path(command[0]).name
        self._write_files()
        output_path = self._output_path()
        self._offsets = tuple(
            (path, path.stat().st_size if path.exists() else 0)
            for path in dict.fromkeys([self.log_path, output_path])
        )
        output: IO[bytes] = output_path.open("ab")
        executor = ReadyExecutor(
            command,
            ready=self._ready,
            host=self.host,
            port=self.port,
            cwd=str(self.dir),
            timeout=self.startup_timeout,
            sleep=self.poll_interval,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            **self._executor_options(),
        )
        try:
            executor.spawn()
        except AlreadyRunning:
            raise PortTaken(self._port_taken_message()) from None
        finally:
            output.close()
        self._began = time.monotonic()
        self._executor = executor

    def _await_started(self) -> None:
        """Wait until the process launched by :meth:`_spawn` serves (see :meth:`_ready`)."""
        executor = self._executor
        if executor is None:
            raise self.error(f"{self!r} was not launched")
        try:
            executor.wait_started()
        except BaseException as error:
            self._executor = None
            executor.kill()
            logs = {path: tail(path, offset) for path, offset in self._offsets}
            if "Address already in use" in "".join(logs.values()):
                raise PortTaken(self._port_taken_message()) from None
            if isinstance(error, ProcessExitedWithError):
                reason = f"{self._launched} exited with code {error.exit_code}"
            elif isinstance(error, TimeoutExpired):
                reason = f"it did not serve within {self.startup_timeout:g} s"
            elif isinstance(error, (ExecutorError, *self.ready_errors)):
                reason = str(error)
            else:
                raise
            shown = "".join(
                f"\n--- end of {path} ---\n{text or '(empty)'}" for path, text in logs.items()
            )
            raise self.error(
                f"{self.program} ({self.config_path}) did not come up on "
                f"{self.host}:{self.port}: {reason}{shown}"
            ) from error
        self.startup_seconds = time.monotonic() - self._began

    def log_tail(self, lines: int = 25) -> str:
        """The last ``lines`` lines the server logged since its last start."""
        return tail(self.log_path, dict(self._offsets).get(self.log_path, 0), lines)

    def stop(self) -> None:
        """End the process with SIGTERM, as an orderly shutdown; the directory stays."""
        executor, self._executor = self._executor, None
        if executor is not None:
            # already gone (a crash, or a shutdown a test asked the server for): down is all
            # stop() promises
            with contextlib.suppress(ProcessFinishedWithError):
                executor.stop()

    def kill(self) -> None:
        """End the process with SIGKILL, as in a crash: no shutdown, nothing flushed; the
        directory stays."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.kill()

    def restart(self: _Process) -> _Process:
        """:meth:`stop` (if running) and :meth:`start` on the same ports and directory."""
        self.stop()
        return self.start()
