"""``tumbler run`` cut off from Redis in silence (the connection open, no byte flowing): the
command is stopped, SIGKILL included, before the server can grant the lock to anyone else.

The stop comes from the supervisor's own clock: once no renewal has got through for so long
that the command, given ``--kill-after`` to exit, might outlive the lease, it gets SIGTERM,
while the renewal call is still waiting for the silenced server.
"""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest

import tumbler
from tests.processes import process_gone
from tumbler.cli import EX_LOCK_LOST
from tumbler.testing.backends.redis.server import RedisServer
from tumbler.torture.proxy import FaultProxy

from .conftest import Spawn, python_command, read_line

# The command says it runs, then on SIGTERM says when it was stopped (CLOCK_MONOTONIC is
# system-wide, so the test can compare it with its own clock) and exits.
STOPPABLE = """
import os, signal, sys, time
def stopped(*_):
    print(time.monotonic(), flush=True)
    os._exit(0)
signal.signal(signal.SIGTERM, stopped)
print("running", flush=True)
while True:
    time.sleep(3600)
"""

# The command ignores SIGTERM and says its pid: only the SIGKILL stops it.
STUBBORN = """
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(os.getpid(), flush=True)
while True:
    time.sleep(3600)
"""


def test_a_silenced_run_stops_its_command_before_another_grant(
    spawn: Spawn, redis_server: RedisServer
) -> None:
    url = f"{redis_server.url}?prefix=tumbler:cli-{uuid.uuid4().hex[:12]}"
    with FaultProxy((redis_server.host, redis_server.port), seed=5) as proxy:
        cut = url.replace(f":{redis_server.port}/", f":{proxy.port}/", 1)
        runner = spawn(
            "run", "job", "--url", cut, "--ttl", "2", "--",
            *python_command(STOPPABLE),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert read_line(runner) == "running"
        proxy.blackhole()
        with tumbler.connect(url) as other:
            assert other.lock("job").acquire(timeout=30)
            granted_at = time.monotonic()
            stopped_at = float(read_line(runner))
            assert stopped_at < granted_at
            proxy.heal()
            assert runner.wait(timeout=30) == EX_LOCK_LOST


@pytest.mark.parametrize("kill_after", [None, "0.6"], ids=["default", "a-third-of-the-lease"])
def test_a_silenced_run_kills_a_command_that_ignores_sigterm_before_another_grant(
    spawn: Spawn, redis_server: RedisServer, kill_after: str | None
) -> None:
    url = f"{redis_server.url}?prefix=tumbler:cli-{uuid.uuid4().hex[:12]}"
    options = () if kill_after is None else ("--kill-after", kill_after)
    with FaultProxy((redis_server.host, redis_server.port), seed=5) as proxy:
        cut = url.replace(f":{redis_server.port}/", f":{proxy.port}/", 1)
        runner = spawn(
            "run", "job", "--url", cut, "--ttl", "1.8", *options, "--",
            *python_command(STUBBORN),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        command = int(read_line(runner))
        proxy.blackhole()
        with tumbler.connect(url) as other:
            assert other.lock("job").acquire(timeout=30)
            # once the server may grant the lock again, the command is dead (a zombie at most)
            assert process_gone(command)
            proxy.heal()
            assert runner.wait(timeout=30) == EX_LOCK_LOST
            _, stderr = runner.communicate(timeout=30)
            assert "could not be renewed" in stderr.decode()
