"""``tumbler run`` and the processes its command starts: real processes, SQLite lock files.

The lock is kept until every process the command started has exited (``tumbler run`` is their
subreaper), unless ``--no-wait-descendants``; a lost lock stops all of them; signals reach the
command whichever thread of ``tumbler run`` the kernel hands them to; and the command's
environment carries no backend credentials.
"""

from __future__ import annotations

import ctypes
import json
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

import tumbler
from tests.processes import process_gone
from tumbler.cli import EX_LOCK_LOST, EX_TEMPFAIL
from tumbler.testing.backends.redis.server import RedisServer

from .conftest import Spawn, python_command, read_line, run_tumbler, wait_until

# The command: a shell that starts a background process and exits 3 at once, as a script that
# ends with `work &` does. The background process says its pid and its shell's, then blocks
# reading tumbler run's stdin, so the test ends it by closing that pipe (through fd 3: a shell
# gives a background job /dev/null as its stdin before any redirection of its own).
LEAVES_A_BACKGROUND_PROCESS = [
    "sh",
    "-c",
    f'exec 3<&0; "{sys.executable}" -c "import sys; sys.stdin.read()" <&3 3<&- & '
    "echo $$ $!; exit 3",
]


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rpartition(")")[2].split()[1])


def end_by_closing_stdin(process: subprocess.Popen[bytes]) -> None:
    assert process.stdin is not None
    process.stdin.close()


def test_a_background_process_keeps_the_lock_until_it_exits(
    spawn: Spawn, locks: tumbler.Locks, env: dict[str, str]
) -> None:
    runner = spawn(
        "run", "job", "--", *LEAVES_A_BACKGROUND_PROCESS,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    shell, background = map(int, read_line(runner).split())
    wait_until(lambda: process_gone(shell), "the command itself has exited")

    # Orphaned, the background process was adopted by tumbler run, which still holds the lock.
    assert parent_of(background) == runner.pid
    assert runner.poll() is None
    assert len(locks.status("job").holders) == 1
    busy = run_tumbler("run", "job", "--no-wait", "--", "true", env=env)
    assert busy.returncode == EX_TEMPFAIL, busy.stderr

    end_by_closing_stdin(runner)
    assert runner.wait(timeout=30) == 3  # the command's own status, not the background's
    assert process_gone(background)
    assert locks.status("job").holders == ()


def test_no_wait_descendants_releases_when_the_command_exits(
    spawn: Spawn, locks: tumbler.Locks
) -> None:
    runner = spawn(
        "run", "job", "--no-wait-descendants", "--", *LEAVES_A_BACKGROUND_PROCESS,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    _, background = map(int, read_line(runner).split())

    assert runner.wait(timeout=30) == 3
    assert not process_gone(background)  # still running, unguarded: what was asked for
    assert locks.status("job").holders == ()

    end_by_closing_stdin(runner)  # the background process reads the same pipe
    wait_until(lambda: process_gone(background), "the background process ends")


def test_help_explains_how_to_opt_out(env: dict[str, str]) -> None:
    result = run_tumbler("run", "--help", env=env)
    assert result.returncode == 0
    assert "--no-wait-descendants" in result.stdout
    assert "background" in result.stdout


# The command starts a process in a session of its own (so outside its process group, where a
# signal to the group does not reach), which ignores SIGTERM; says both pids; then either
# blocks on stdin itself or exits at once, leaving that process running.
ESCAPES_THE_GROUP = """
import os, signal, subprocess, sys
escaped = subprocess.Popen(
    [sys.executable, "-c",
     "import signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
     "print('ready', flush=True); sys.stdin.read()"],
    start_new_session=True, stdout=subprocess.PIPE,
)
assert escaped.stdout.readline() == b"ready\\n"  # SIGTERM is ignored from here on
print(os.getpid(), escaped.pid, flush=True)
if {command_stays}:
    sys.stdin.read()
"""


@pytest.mark.parametrize("command_stays", [True, False], ids=["command-running", "command-gone"])
def test_lost_lock_stops_every_descendant(
    spawn: Spawn, locks: tumbler.Locks, command_stays: bool
) -> None:
    runner = spawn(
        "run", "job", "--ttl", "1.5", "--kill-after", "0.5", "--",
        *python_command(ESCAPES_THE_GROUP.format(command_stays=command_stays)),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    command, escaped = map(int, read_line(runner).split())
    if not command_stays:
        wait_until(lambda: process_gone(command), "the command itself has exited")

    assert locks.force_release("job") == 1
    assert runner.wait(timeout=30) == EX_LOCK_LOST
    # stopped by tumbler run (SIGKILL: it ignored SIGTERM) and reaped: not even a zombie left
    assert not Path(f"/proc/{escaped}").exists()
    assert process_gone(command)
    _, stderr = runner.communicate(timeout=30)
    line = stderr.decode().strip()
    assert "lost" in line
    if not command_stays:
        assert "it had exited with status 0; what it left running was stopped" in line
    assert locks.status("job").holders == ()


# The command starts a process in a session of its own that ends on SIGTERM, waits until its
# handler is in place, says both pids, and exits 4, leaving it running.
LEAVES_ITS_OWN_SESSION = """
import os, subprocess, sys
left = subprocess.Popen(
    [sys.executable, "-c",
     "import os, signal, sys; signal.signal(signal.SIGTERM, lambda *_: os._exit(0)); "
     "print(os.getpid(), flush=True); sys.stdin.read()"],
    start_new_session=True, stdout=subprocess.PIPE,
)
print(os.getpid(), left.stdout.readline().decode().strip(), flush=True)
sys.exit(4)
"""


def test_signals_reach_what_the_command_left_in_a_session_of_its_own(spawn: Spawn) -> None:
    runner = spawn(
        "run", "job", "--", *python_command(LEAVES_ITS_OWN_SESSION),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    command, left = map(int, read_line(runner).split())
    wait_until(lambda: process_gone(command), "the command itself has exited")
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=30) == 4  # the command's status, though it had exited before
    assert process_gone(left)


def tgkill(pid: int, tid: int, signum: int) -> None:
    """Send ``signum`` to one thread of process ``pid`` (glibc's tgkill)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.tgkill(pid, tid, signum) != 0:
        raise OSError(ctypes.get_errno(), "tgkill")


# Exits 100 + the signal's number on SIGTERM.
HANDLES_SIGTERM = """
import os, signal, sys
signal.signal(signal.SIGTERM, lambda number, frame: os._exit(100 + number))
print("started", flush=True)
sys.stdin.read()
"""


def test_a_signal_taken_by_another_thread_still_reaches_the_command(spawn: Spawn) -> None:
    """The kernel may hand a process's signal to any of its threads; Python runs the handler
    in the main thread only, so a main thread asleep on a lock would never pass it on."""
    runner = spawn(
        "run", "job", "--", *python_command(HANDLES_SIGTERM),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert read_line(runner) == "started"
    tasks = Path(f"/proc/{runner.pid}/task")

    def other_threads() -> list[int]:
        return [int(tid.name) for tid in tasks.iterdir() if int(tid.name) != runner.pid]

    wait_until(lambda: bool(other_threads()), "tumbler run has a thread besides the main one")
    tgkill(runner.pid, other_threads()[0], signal.SIGTERM)
    assert runner.wait(timeout=30) == 100 + signal.SIGTERM


# -- the command's environment -------------------------------------------------------------------

PRINTS_ITS_ENVIRONMENT = python_command("import json, os; print(json.dumps(dict(os.environ)))")


SECRET = "Sekr1tPw"


@pytest.mark.parametrize(
    ("tumbler_url", "child_sees"),
    [
        (
            f"redis://tumbler:{SECRET}%2F@127.0.0.1:6379/0?prefix=x",
            "redis://127.0.0.1:6379/0?prefix=x",
        ),
        (f"zookeeper://app:{SECRET}@h1:2181,h2:2181/locks", "zookeeper://h1:2181,h2:2181/locks"),
        (f"redis://:{SECRET}@127.0.0.1:6379/0#frag", "redis://127.0.0.1:6379/0"),
        (f"redis+unix://:{SECRET}@/run/redis.sock?db=1", "redis+unix:///run/redis.sock?db=1"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        # malformed (an unencoded '/' in the password): where the secret ends cannot be told
        (f"redis://tumbler:{SECRET}/x@127.0.0.1:6379/0", None),
    ],
    ids=[
        "user-and-password",
        "zookeeper-digest",
        "password-only",
        "unix-socket",
        "no-credentials",
        "malformed",
    ],
)
def test_the_command_gets_no_credentials(
    env: dict[str, str], url: str, tumbler_url: str, child_sees: str | None
) -> None:
    env["TUMBLER_URL"] = tumbler_url  # not the lock's backend here: --url names that
    env["TUMBLER_TEST_OTHER"] = "kept"
    result = run_tumbler("run", "job", "--url", url, "--", *PRINTS_ITS_ENVIRONMENT, env=env)
    assert result.returncode == 0, result.stderr
    assert SECRET not in result.stdout
    seen = json.loads(result.stdout)
    assert seen.get("TUMBLER_URL") == child_sees
    assert seen["TUMBLER_TEST_OTHER"] == "kept"


# Prints the grant it was given, then blocks until its stdin is closed.
PRINTS_ITS_GRANT = python_command(
    "import json, os, sys; print(json.dumps({k: os.environ.get(k) for k in "
    "('TUMBLER_LOCK', 'TUMBLER_TOKEN', 'TUMBLER_SEGMENT')}), flush=True); sys.stdin.read()"
)


@pytest.mark.parametrize("malformed_url", [False, True], ids=["url", "malformed-url"])
def test_the_command_is_handed_its_grant(
    spawn: Spawn, locks: tumbler.Locks, env: dict[str, str], malformed_url: bool
) -> None:
    env["TUMBLER_SEGMENT"] = "3"  # an outer segmented run's: not this run's
    options = ["--url", env["TUMBLER_URL"]] if malformed_url else []
    if malformed_url:
        env["TUMBLER_URL"] = f"redis://tumbler:{SECRET}/x@127.0.0.1:6379/0"
    runner = spawn(
        "run", "nightly report", *options, "--", *PRINTS_ITS_GRANT,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    handed = json.loads(read_line(runner))
    [holder] = locks.status("nightly report").holders
    assert handed == {
        "TUMBLER_LOCK": "nightly report",
        "TUMBLER_TOKEN": str(holder.token),
        "TUMBLER_SEGMENT": None,
    }
    assert runner.stdin is not None
    runner.stdin.close()
    assert runner.wait(timeout=30) == 0


def test_the_command_gets_no_credentials_from_the_url_tumbler_used(
    env: dict[str, str], redis_tls_server: RedisServer, tmp_path: Path
) -> None:
    password = redis_tls_server.users["tumbler"].password
    query = f"?prefix=tumbler:cli-{tmp_path.name}&ssl_ca_certs={redis_tls_server.ca_path}"
    env["TUMBLER_URL"] = redis_tls_server.url_for("tumbler") + query
    result = run_tumbler("run", "job", "--", *PRINTS_ITS_ENVIRONMENT, env=env)
    assert result.returncode == 0, result.stderr
    assert password not in result.stdout
    assert quote(password, safe="") not in result.stdout
    host = f"{redis_tls_server.host}:{redis_tls_server.port}"
    assert json.loads(result.stdout)["TUMBLER_URL"] == f"rediss://{host}/0{query}"
