"""Fixtures for the command-line tests: a lock file per test, and tumbler run as a real process."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tumbler

Spawn = Callable[..., "subprocess.Popen[bytes]"]


def tumbler_argv(*args: str) -> list[str]:
    """The command line that runs the CLI in a fresh interpreter (the one running the tests)."""
    return [sys.executable, "-m", "tumbler.cli", *args]


def run_tumbler(*args: str, timeout: float = 60, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run the CLI to its end; stdout and stderr captured as text."""
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run(
        tumbler_argv(*args), capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )


def python_command(code: str) -> list[str]:
    """A command for ``tumbler run ... --``: this interpreter running ``code``."""
    return [sys.executable, "-c", code]


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting until {what}")
        time.sleep(0.01)


def read_line(process: subprocess.Popen[bytes], timeout: float = 30.0) -> str:
    """Read one line of ``process``'s stdout (a pipe), failing after ``timeout`` seconds."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    data = b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"no line from the process within {timeout} s (got {data!r})")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            # one byte at a time: nothing after the line is taken from the pipe
            chunk = os.read(fd, 1)
            if not chunk:
                pytest.fail(f"the process closed its stdout before a full line (got {data!r})")
            data += chunk
    return data.decode().strip()


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite://{(tmp_path / 'locks.db').as_posix()}"


@pytest.fixture(autouse=True)
def _lock_file_per_test(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The CLI's default is the user's own lock file: no test may touch it.
    monkeypatch.setenv("TUMBLER_URL", url)


@pytest.fixture
def env(_lock_file_per_test: None) -> dict[str, str]:
    """The environment for CLI processes: TUMBLER_URL names this test's lock file."""
    return dict(os.environ)


@pytest.fixture
def locks(url: str) -> Iterator[tumbler.Locks]:
    """A client of this test's lock file, in the test process."""
    with tumbler.connect(url) as client:
        yield client


@pytest.fixture
def spawn(env: dict[str, str]) -> Iterator[Spawn]:
    """Start the CLI as a process; whatever a test leaves running is killed at teardown."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str, **kwargs: Any) -> subprocess.Popen[bytes]:
        kwargs.setdefault("env", env)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        process = subprocess.Popen(tumbler_argv(*args), **kwargs)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        # closing stdin also ends a command that blocks reading it (it runs in its own session)
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()
        process.wait()
