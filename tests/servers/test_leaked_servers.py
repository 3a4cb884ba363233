"""What a test process's exit ends: the servers its own launchers left running, and no
other process's. mirakuru marks what it launches with ``mirakuru_uuid=<pid>:<uuid>``, and its
own exit hook ends every process whose mark merely contains the exiting pid, so a process of
pid 96 ended the servers of the process of pid 23196: another test run's, mid-run."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest
from mirakuru.base import ENV_UUID
from mirakuru.base_env import processes_with_env

from tumbler.testing.conformance.compat import eventually
from tumbler.testing.servers.process import leaked_servers

#: a pid no process of this test has: the marks below name it, or contain it
PID = 4242


@pytest.fixture
def marked() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """Idle processes marked as if launched by the process ``PID``, and by others whose
    marks contain ``PID``."""
    marks = {
        "own": f"{PID}:0f3c",
        "longer pid": f"{PID}7:0f3c",
        "pid inside": f"1{PID}:0f3c",
        "in the uuid": f"17:ab{PID}cd",
    }
    started = {
        what: subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            env={**os.environ, ENV_UUID: mark},
        )
        for what, mark in marks.items()
    }
    yield started
    for process in started.values():
        process.kill()
        process.wait()


def test_only_the_exiting_processs_own_servers_are_ended(
    marked: dict[str, subprocess.Popen[bytes]],
) -> None:
    assert set(leaked_servers(PID)) == {marked["own"].pid}
    # mirakuru's own search, which its exit hook uses, takes the others too
    assert {process.pid for process in marked.values()} <= processes_with_env(ENV_UUID, str(PID))


_CHILD = """
import os, subprocess, sys
import tumbler.testing.servers.process  # replaces mirakuru's exit hook
sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
def marked(mark):
    env = {**os.environ, "mirakuru_uuid": mark}
    quiet = subprocess.DEVNULL  # not this process's output: its parent reads that to the end
    return subprocess.Popen(
        sleep, env=env, start_new_session=True, stdout=quiet, stderr=quiet
    ).pid
# one of its own, and one of a process whose pid has this one's in it
print(marked(f"{os.getpid()}:own"), marked(f"1{os.getpid()}:other"))
"""


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_an_exiting_process_ends_its_own_servers_and_no_other() -> None:
    child = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True
    )
    own, other = (int(pid) for pid in child.stdout.split())
    try:
        eventually(lambda: not _running(own), "the exited process's own server is ended")
        assert _running(other)  # mirakuru's hook would have ended it too
    finally:
        for pid in (own, other):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
