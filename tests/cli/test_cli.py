"""The ``tumbler`` command: real processes, real SQLite lock files in tmp_path."""

from __future__ import annotations

import dataclasses
import json
import os
import pty
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tumbler
import tumbler.backends
import tumbler.cli as cli_module
from tests.processes import process_gone
from tumbler import errors
from tumbler.backends import BackendDescriptor, builtin_descriptors
from tumbler.cli import (
    EX_CONFIG,
    EX_LOCK_LOST,
    EX_NOPERM,
    EX_TEMPFAIL,
    EX_UNAVAILABLE,
    EX_USAGE,
    EXIT_STATUS_HELP,
    exit_code_for,
    main,
)
from tumbler.errors import TumblerError

from .conftest import (
    Spawn,
    python_command,
    read_line,
    run_tumbler,
    wait_until,
)

# A command that says it started, then blocks until its stdin is closed, and exits 5.
BLOCKS_ON_STDIN = python_command(
    "import sys; print('started', flush=True); sys.stdin.read(); sys.exit(5)"
)


def one_error_line(stderr: str) -> str:
    """The single ``tumbler: ...`` line a failure must print, and nothing else."""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("tumbler: "), stderr
    return lines[0]


def call(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the CLI in this process: exit status, stdout, stderr."""
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# -- version and help ----------------------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = call(capsys, "--version")
    assert status == 0
    assert out.strip() == f"tumbler {tumbler.__version__}"


@pytest.mark.parametrize("command", ["run", "status", "release", "demo"])
def test_every_command_has_help(capsys: pytest.CaptureFixture[str], command: str) -> None:
    status, out, err = call(capsys, command, "--help")
    assert status == 0, err
    assert f"Usage: tumbler {command} " in out
    assert "--url" in out


def test_run_help_documents_lost_status(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = call(capsys, "run", "--help")
    assert status == 0
    assert "-- CMD [ARGS]..." in out
    assert "79" in out


def shared_descriptors() -> list[BackendDescriptor]:
    """The built-in backends whose locks other processes see."""
    return [d for d in builtin_descriptors() if d.capabilities.scope != "process"]


def test_tumbler_help_names_every_builtin_backend(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = call(capsys, "--help")
    assert status == 0, err
    backends = out.partition("Backends")[2].partition("Exit status")[0]
    for descriptor in builtin_descriptors():
        assert f"  {descriptor.name}: {descriptor.summary}" in backends, descriptor.name
        assert descriptor.url_form in backends, descriptor.name
        for scheme in descriptor.schemes:
            assert f"{scheme}://" in backends, scheme
        if descriptor.extra is not None:
            # "tumbler" on PyPI is another project
            assert f"pip install 'tumbler-locks[{descriptor.extra}]'" in backends, descriptor.name


def test_a_backend_added_later_shows_in_the_help_without_editing_the_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlite = next(d for d in builtin_descriptors() if d.name == "sqlite")
    added = dataclasses.replace(
        sqlite,
        name="tape",
        schemes=("tape", "tapes"),
        url_form="tape://DRIVE",
        summary="a tape drive, one process at a time",
        capabilities=dataclasses.replace(sqlite.capabilities, session_liveness=True),
    )
    monkeypatch.setattr(
        tumbler.backends, "builtin_descriptors", lambda: [*builtin_descriptors(), added]
    )

    for command, shown in [
        ((), ["tape: a tape drive, one process at a time", "tape://DRIVE", "tapes://"]),
        (("run",), ["tape://"]),
        (("status",), ["tape"]),
    ]:
        status, out, err = call(capsys, *command, "--help")
        assert status == 0, err
        for text in shown:
            assert text in " ".join(out.split()), (command, text)


def test_run_help_says_whom_each_backend_excludes(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = call(capsys, "run", "--help")
    assert status == 0, err
    text = " ".join(out.split())
    for descriptor in builtin_descriptors():
        assert f"{descriptor.schemes[0]}://" in text, descriptor.name
    assert "processes of one machine" in text
    assert "processes on any machine" in text


def test_status_help_names_the_backends_whose_grants_live_with_a_session(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = call(capsys, "status", "--help")
    assert status == 0, err
    text = " ".join(out.split())
    with_session = [d.name for d in builtin_descriptors() if d.capabilities.session_liveness]
    assert with_session
    assert f"with its holder's session ({', '.join(with_session)})" in text


def test_init_help_names_the_backends_that_have_something_to_make(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = call(capsys, "init", "--help")
    assert status == 0, err
    text = " ".join(out.split())
    making = [d.name for d in builtin_descriptors() if d.prepare is not None]
    assert making
    assert f"({', '.join(making)})" in text


@pytest.mark.parametrize(
    "args", [["demo", "--url", "memory://x"], ["demo", "--http", "--url", "memory://x"]]
)
def test_the_demo_refusing_memory_names_the_backends_to_use(
    capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    status, _, err = call(capsys, *args)
    assert status == EX_USAGE
    line = one_error_line(err)
    for descriptor in shared_descriptors():
        assert f"{descriptor.schemes[0]}://" in line, descriptor.name
    assert "memory://" not in line.partition("use ")[2]


def test_no_command_shows_help_as_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = call(capsys)
    assert status == EX_USAGE
    assert "Usage: tumbler" in err
    assert out == ""


# -- run: exit status, busy, holding -------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 3])
def test_run_passes_the_exit_status_through(
    env: dict[str, str], locks: tumbler.Locks, code: int
) -> None:
    result = run_tumbler(
        "run", "job", "--", *python_command(f"import sys; sys.exit({code})"), env=env
    )
    assert result.returncode == code, result.stderr
    assert result.stderr == ""
    assert locks.status("job").holders == ()


def test_run_reports_death_by_signal_like_a_shell(env: dict[str, str]) -> None:
    command = python_command("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    result = run_tumbler("run", "job", "--", *command, env=env)
    assert result.returncode == 128 + signal.SIGKILL


@pytest.mark.parametrize("wait_option", [["--no-wait"], ["--wait", "0"]])
def test_run_exits_75_at_once_when_the_lock_is_held(
    env: dict[str, str], locks: tumbler.Locks, tmp_path: Path, wait_option: list[str]
) -> None:
    lock = locks.lock("job")
    assert lock.acquire()
    assert lock.hold is not None
    marker = tmp_path / "ran"
    command = python_command(f"open({str(marker)!r}, 'w').close()")
    result = run_tumbler("run", "job", *wait_option, "--", *command, env=env)
    assert result.returncode == EX_TEMPFAIL
    line = one_error_line(result.stderr)
    assert "'job'" in line
    assert f"token {lock.hold.token}" in line
    assert not marker.exists()


@pytest.mark.parametrize("wait", [0.3, 1.5])
def test_run_waits_as_long_as_told(env: dict[str, str], locks: tumbler.Locks, wait: float) -> None:
    assert locks.lock("job").acquire()
    started = time.monotonic()
    result = run_tumbler("run", "job", "--quiet", "--wait", str(wait), "--", "true", env=env)
    elapsed = time.monotonic() - started
    assert result.returncode == EX_TEMPFAIL
    assert f"within {wait:g} s" in one_error_line(result.stderr)
    assert elapsed >= wait - 0.05


def test_run_says_whom_a_wait_of_over_a_second_is_for(spawn: Spawn, locks: tumbler.Locks) -> None:
    lock = locks.lock("job")
    assert lock.acquire()
    assert lock.hold is not None
    waiter = spawn("run", "job", "--", "true", stderr=subprocess.PIPE)
    assert waiter.stderr is not None
    said = waiter.stderr.readline().decode()
    assert re.match(r"tumbler: waiting for lock 'job' \(\d+ s so far\): held by ", said), said
    assert f"pid={os.getpid()} (token {lock.hold.token}, lease " in said
    lock.release()
    assert waiter.wait(timeout=30) == 0
    assert waiter.stderr.read() == b""  # said once: the next is due after 10 s more


def test_run_quiet_says_nothing_while_it_waits(env: dict[str, str], locks: tumbler.Locks) -> None:
    assert locks.lock("job").acquire()
    result = run_tumbler("run", "job", "-q", "--wait", "1.5", "--", "true", env=env)
    assert result.returncode == EX_TEMPFAIL
    assert "within 1.5 s" in one_error_line(result.stderr)


def test_run_gets_the_lock_once_it_is_released(spawn: Spawn, locks: tumbler.Locks) -> None:
    lock = locks.lock("job")
    assert lock.acquire()
    waiter = spawn("run", "job", "--", "true", stderr=subprocess.PIPE)
    wait_until(lambda: locks.status("job").waiters == 1, "tumbler waits for the lock")
    lock.release()
    assert waiter.wait(timeout=30) == 0


def test_run_holds_the_lock_while_the_command_runs(
    spawn: Spawn, locks: tumbler.Locks, env: dict[str, str]
) -> None:
    runner = spawn(
        "run", "job", "--ttl", "7", "--", *BLOCKS_ON_STDIN,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert read_line(runner) == "started"
    holders = locks.status("job").holders
    assert len(holders) == 1
    assert f"pid={runner.pid}" in holders[0].holder
    # the program it runs, not its arguments (which may carry secrets)
    assert holders[0].holder.endswith(f" run: {Path(sys.executable).name}")
    assert not holders[0].shared
    assert 0 < holders[0].expires_in <= 7

    busy = run_tumbler("run", "job", "--no-wait", "--", "true", env=env)
    assert busy.returncode == EX_TEMPFAIL

    assert runner.stdin is not None
    runner.stdin.close()
    assert runner.wait(timeout=30) == 5
    assert locks.status("job").holders == ()


def test_run_elect_runs_one_leader_at_a_time_in_the_order_they_came(
    spawn: Spawn, locks: tumbler.Locks
) -> None:
    """Each runs its command while it leads, with its term as $TUMBLER_TOKEN; the leader's
    value is what the others read."""
    says_its_term = python_command(
        "import os, sys; print(os.environ['TUMBLER_TOKEN'], flush=True); sys.stdin.read()"
    )
    election = locks.election("scheduler")
    leader = spawn(
        "run", "--elect", "--value", "host-a:8080", "scheduler", "--", *says_its_term,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    term = int(read_line(leader))
    assert election.leader() == tumbler.Leader("host-a:8080", term)
    standby = spawn(
        "run", "--elect", "scheduler", "--", *says_its_term,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    wait_until(lambda: locks.status("scheduler").waiters == 1, "the standby waits in line")
    assert leader.stdin is not None
    leader.stdin.close()
    assert leader.wait(timeout=30) == 0
    next_term = int(read_line(standby))
    assert next_term > term
    current = election.leader()
    assert current is not None
    assert current.term == next_term
    assert current.value.endswith(f" run: {Path(sys.executable).name}")  # its default value
    assert standby.stdin is not None
    standby.stdin.close()
    assert standby.wait(timeout=30) == 0
    assert election.leader() is None


def test_run_renews_the_lease_while_the_command_runs(spawn: Spawn, locks: tumbler.Locks) -> None:
    runner = spawn(
        "run", "job", "--ttl", "0.6", "--", *BLOCKS_ON_STDIN,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert read_line(runner) == "started"
    first = locks.status("job").holders[0].token
    # Several leases long: without renewal the grant would be gone and another could take it.
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        assert not locks.lock("job").acquire(timeout=0)
        assert [holder.token for holder in locks.status("job").holders] == [first]
        time.sleep(0.05)
    assert runner.stdin is not None
    runner.stdin.close()
    assert runner.wait(timeout=30) == 5


# -- run: losing the lock ------------------------------------------------------------------------

# Starts a grandchild, says both pids, then blocks on stdin (so it ends if the test goes away).
FAMILY = """
import os, signal, subprocess, sys
if {ignore_term}:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the grandchild
grandchild = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"])
print(os.getpid(), grandchild.pid, flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("ignore_term", [False, True], ids=["sigterm", "sigkill"])
def test_lost_lock_stops_the_command_and_exits_79(
    spawn: Spawn, locks: tumbler.Locks, ignore_term: bool
) -> None:
    kill_after = 0.5
    runner = spawn(
        "run", "job", "--ttl", "1.5", "--kill-after", str(kill_after), "--",
        *python_command(FAMILY.format(ignore_term=ignore_term)),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    child, grandchild = map(int, read_line(runner).split())

    lost_at = time.monotonic()
    assert locks.force_release("job") == 1
    status = runner.wait(timeout=30)
    took = time.monotonic() - lost_at

    assert status == EX_LOCK_LOST
    assert process_gone(child)
    wait_until(lambda: process_gone(grandchild), "the command's own child is killed too")
    _, stderr = runner.communicate(timeout=30)  # the command's family shares the pipe
    line = one_error_line(stderr.decode())
    assert "'job'" in line
    assert "lost" in line
    if ignore_term:
        assert took >= kill_after  # SIGKILL came only after the grace period ...
        assert took < 5.0  # ... of --kill-after, not of the 5 s default
    assert locks.status("job").holders == ()


# -- run: signals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)
def test_signal_while_waiting_exits_at_once_and_withdraws(
    spawn: Spawn, locks: tumbler.Locks, tmp_path: Path, signum: signal.Signals
) -> None:
    assert locks.lock("job").acquire()
    marker = tmp_path / "ran"
    runner = spawn(
        "run", "job", "--", *python_command(f"open({str(marker)!r}, 'w').close()"),
        stderr=subprocess.PIPE,
    )  # fmt: skip
    wait_until(lambda: locks.status("job").waiters == 1, "tumbler waits for the lock")
    runner.send_signal(signum)
    assert runner.wait(timeout=10) == 128 + signum
    # at once: a waiter entry left behind would only expire after the backend's waiter lease
    assert locks.status("job").waiters == 0
    _, stderr = runner.communicate(timeout=30)
    assert signum.name in one_error_line(stderr.decode())
    assert not marker.exists()


# The command exits 100 + the signal's number when it gets SIGINT or SIGTERM.
HANDLES_SIGNALS = """
import os, signal, sys
for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(signum, lambda number, frame: os._exit(100 + number))
print("started", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize(
    ("signum", "handled", "expected"),
    [
        (signal.SIGINT, True, 100 + signal.SIGINT),
        (signal.SIGTERM, True, 100 + signal.SIGTERM),
        (signal.SIGHUP, True, 100 + signal.SIGHUP),
        (signal.SIGTERM, False, 128 + signal.SIGTERM),
    ],
    ids=["SIGINT-handled", "SIGTERM-handled", "SIGHUP-handled", "SIGTERM-default"],
)
def test_signal_while_holding_goes_to_the_command(
    spawn: Spawn, locks: tumbler.Locks, signum: signal.Signals, handled: bool, expected: int
) -> None:
    default = "import sys; print('started', flush=True); sys.stdin.read()"
    code = HANDLES_SIGNALS if handled else default
    runner = spawn(
        "run", "job", "--", *python_command(code), stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert read_line(runner) == "started"
    runner.send_signal(signum)
    assert runner.wait(timeout=30) == expected
    assert locks.status("job").holders == ()


# -- run: commands that cannot run ---------------------------------------------------------------


def test_command_not_found_exits_127(env: dict[str, str], locks: tumbler.Locks) -> None:
    result = run_tumbler("run", "job", "--", "tumbler-test-no-such-command", env=env)
    assert result.returncode == 127
    assert "not found" in one_error_line(result.stderr)
    assert locks.status("job").holders == ()


def test_command_not_executable_exits_126(
    env: dict[str, str], locks: tumbler.Locks, tmp_path: Path
) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)  # no execute bit: refused even to root
    result = run_tumbler("run", "job", "--", str(script), env=env)
    assert result.returncode == 126
    assert "cannot execute" in one_error_line(result.stderr)
    assert locks.status("job").holders == ()


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["run", "job"],
        ["run", "job", "true"],
        ["run", "job", "--"],
        ["run", "", "--", "true"],
        ["run", " ", "--", "true"],
        ["run", "job", "--ttl", "-5", "--", "true"],
        ["run", "job", "--ttl", "0", "--", "true"],
        ["run", "job", "--ttl", "30x", "--", "true"],
        ["run", "job", "--ttl", "nan", "--", "true"],
        ["run", "job", "--ttl", "1e309", "--", "true"],
        ["run", "job", "--ttl", "0.001", "--", "true"],
        ["run", "job", "--wait", "-1", "--", "true"],
        ["run", "job", "--wait", "inf", "--", "true"],
        ["run", "job", "--wait", "2", "--no-wait", "--", "true"],
        ["run", "job", "--kill-after", "soon", "--", "true"],
        ["run", "job", "--bogus", "--", "true"],
        ["run", "--", "true"],
        ["status", ""],
        ["release", "job"],
        ["release", "--force", ""],
        ["run", "--value", "host-a", "job", "--", "true"],
        ["run", "--elect", "--value", "two\nlines", "job", "--", "true"],
        ["demo", "--workers", "0"],
        ["demo", "--url", "memory://x"],
        ["no-such-command"],
        ["--bogus"],
    ],
)
def test_bad_input_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], locks: tumbler.Locks, args: list[str]
) -> None:
    status, _, err = call(capsys, *args)
    assert status == EX_USAGE, err
    one_error_line(err)
    assert "Traceback" not in err
    assert locks.status_all() == []  # nothing was acquired, nothing left waiting


def test_release_without_force_explains_it(
    capsys: pytest.CaptureFixture[str], locks: tumbler.Locks
) -> None:
    assert locks.lock("job").acquire()
    status, _, err = call(capsys, "release", "job", "--yes")
    assert status == EX_USAGE
    assert "--force" in one_error_line(err)
    assert len(locks.status("job").holders) == 1


def test_release_records_who_forced_it_and_why_for_the_holder(
    capsys: pytest.CaptureFixture[str], locks: tumbler.Locks
) -> None:
    lock = locks.lock("job", ttl=30, renew=False)
    assert lock.acquire()
    status, out, _ = call(capsys, "release", "job", "--force", "--yes", "--reason", "hung, INC-7")
    assert status == 0
    assert "released 1 grant" in out
    with pytest.raises(tumbler.LockLost, match=r"force-released by .* pid=\d+ at .*: hung, INC-7"):
        lock.release()


def test_release_refuses_a_bad_reason_before_touching_the_lock(
    capsys: pytest.CaptureFixture[str], locks: tumbler.Locks
) -> None:
    assert locks.lock("job").acquire()
    status, _, err = call(capsys, "release", "job", "--force", "--yes", "--reason", "x" * 501)
    assert status == EX_USAGE
    assert "reason" in one_error_line(err)
    assert len(locks.status("job").holders) == 1


# -- backend configuration -----------------------------------------------------------------------


@pytest.mark.parametrize("via", ["option", "environment"])
def test_unknown_scheme_is_a_configuration_error(via: str, env: dict[str, str]) -> None:
    args = ["status"]
    if via == "option":
        args += ["--url", "nosuch://host/x"]
    else:
        env["TUMBLER_URL"] = "nosuch://host/x"
    result = run_tumbler(*args, env=env)
    assert result.returncode == EX_CONFIG
    line = one_error_line(result.stderr)
    assert "'nosuch'" in line
    assert f"known schemes: {', '.join(tumbler.known_schemes())}" in line


@pytest.mark.parametrize(
    "bad_url", ["no-scheme-here", "sqlite://somehost/x.db", "sqlite:///x.db?bogus=1"]
)
def test_malformed_url_is_a_configuration_error(
    capsys: pytest.CaptureFixture[str], bad_url: str
) -> None:
    status, _, err = call(capsys, "run", "job", "--url", bad_url, "--", "true")
    assert status == EX_CONFIG
    one_error_line(err)


def test_unusable_sqlite_path_has_a_clear_status(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        # A directory we may not write: the backend says permission denied.
        directory = tmp_path / "read-only"
        directory.mkdir()
        directory.chmod(0o500)
        path = directory / "locks.db"
        expected = {EX_NOPERM}
    else:
        # Root may write anywhere, so use a path that nobody can create: its parent is a file,
        # which is a configuration error.
        (tmp_path / "regular-file").write_text("")
        path = tmp_path / "regular-file" / "locks.db"
        expected = {EX_CONFIG}
    status, _, err = call(capsys, "status", "--url", f"sqlite://{path.as_posix()}")
    assert status in expected, err
    assert str(path) in one_error_line(err)


def test_exit_code_mapping() -> None:
    cases = {
        tumbler.UnknownScheme("x", ["sqlite"]): EX_CONFIG,
        tumbler.InvalidURL("bad"): EX_CONFIG,
        tumbler.MissingDependency("redis", "redis", "redis"): EX_CONFIG,
        tumbler.BrokenBackend("broken"): EX_CONFIG,
        tumbler.ConfigurationError("bad"): EX_CONFIG,
        tumbler.InvalidTTL("bad"): EX_USAGE,
        tumbler.InvalidLockName("bad"): EX_USAGE,
        tumbler.PermitsMismatch("other permits"): EX_USAGE,
        tumbler.PermissionDenied("no"): EX_NOPERM,
        tumbler.BackendUnavailable("down"): EX_UNAVAILABLE,
        tumbler.OutOfConnections("full"): EX_UNAVAILABLE,
        tumbler.AcquireTimeout("busy"): EX_TEMPFAIL,
        tumbler.TooManyWaiters("crowded"): EX_TEMPFAIL,
        tumbler.LockLost("lost"): EX_LOCK_LOST,
        tumbler.HoldInDoubt("doubt"): EX_LOCK_LOST,
        tumbler.StaleToken("account:7", 4, 5): EX_LOCK_LOST,
        tumbler.NotHeld("bug"): 70,
        tumbler.TumblerError("bug"): 70,
    }
    expected = {type(error): code for error, code in cases.items()}
    assert {type(error): exit_code_for(error) for error in cases} == expected
    # the status is the error's own, so that any command reports it alike
    assert {type(error): error.exit_status for error in cases} == expected


#: a row of the exit-status table in tumbler.errors' docstring: status, name, classes
EXIT_ROW = re.compile(r"^ {4}(\d+) +(EX_\w+) +(.+)$")


def test_the_errors_docstring_gives_each_class_its_exit_status() -> None:
    rows = [match.groups() for match in map(EXIT_ROW.match, errors.__doc__.splitlines()) if match]
    assert rows, "no exit-status table in tumbler.errors' docstring"
    listed: dict[str, int] = {}
    for status, constant, classes in rows:
        assert getattr(errors, constant) == int(status), constant
        for name in re.findall(r"\b[A-Z]\w+\b", classes.partition("(")[0]):
            listed[name] = int(status)
    every = [getattr(errors, name) for name in errors.__all__]
    assert {name: getattr(errors, name).exit_status for name in listed} == listed
    # a class not in the table has its parent's status
    for kind in every:
        if kind.__name__ not in listed:
            parent = next(base for base in kind.__bases__ if issubclass(base, TumblerError))
            assert kind.exit_status == parent.exit_status, kind.__name__


def test_every_exit_status_of_an_error_is_documented() -> None:
    statuses = {getattr(errors, name).exit_status for name in errors.__all__}
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    paragraph = readme[readme.index("Exit statuses follow sysexits(3)") :].partition("\n\n")[0]
    module_doc = cli_module.__doc__ or ""
    for status in sorted(statuses):
        assert re.search(rf"^ +{status} ", EXIT_STATUS_HELP, re.MULTILINE), status
        assert re.search(rf"^ +{status} ", module_doc, re.MULTILINE), status
        assert re.search(rf"\b{status}\b", paragraph), status


# -- status --------------------------------------------------------------------------------------


def test_status_json_of_one_lock(
    capsys: pytest.CaptureFixture[str], spawn: Spawn, locks: tumbler.Locks
) -> None:
    lock = locks.lock("job", ttl=20)
    assert lock.acquire()
    assert lock.hold is not None
    waiter = spawn("run", "job", "--", "true", stderr=subprocess.PIPE)
    wait_until(lambda: locks.status("job").waiters == 1, "tumbler waits for the lock")

    status, out, err = call(capsys, "status", "job", "--json")
    assert status == 0, err
    document = json.loads(out)
    assert document["name"] == "job"
    assert document["locked"] is True
    assert document["waiters"] == 1
    [holder] = document["holders"]
    assert holder["token"] == lock.hold.token
    assert holder["mode"] == "exclusive"
    assert f"pid={os.getpid()}" in holder["holder"]
    assert 0 < holder["expires_in"] <= 20

    waiter.send_signal(signal.SIGTERM)
    assert waiter.wait(timeout=10) == 128 + signal.SIGTERM


def test_status_of_every_lock(capsys: pytest.CaptureFixture[str], locks: tumbler.Locks) -> None:
    mutex = locks.lock("orders:42")
    assert mutex.acquire()
    assert mutex.hold is not None
    permits = locks.semaphore("pool", 2)
    assert permits.acquire()
    assert permits.acquire()

    status, out, _ = call(capsys, "status", "--json")
    assert status == 0
    by_name = {state["name"]: state for state in json.loads(out)}
    assert set(by_name) == {"orders:42", "pool"}
    assert [holder["token"] for holder in by_name["orders:42"]["holders"]] == [mutex.hold.token]
    assert [holder["mode"] for holder in by_name["pool"]["holders"]] == ["shared", "shared"]
    assert by_name["pool"]["limit"] == 2

    status, out, _ = call(capsys, "status")
    assert status == 0
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert f" {mutex.hold.token} " in rows["orders:42"]
    assert "exclusive" in rows["orders:42"]
    assert "shared (2 permits)" in rows["pool"]
    assert "token" in out
    assert "waiters" in out


def test_status_when_nothing_is_held(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = call(capsys, "status")
    assert status == 0
    assert "no lock" in out
    status, out, _ = call(capsys, "status", "job")
    assert status == 0
    assert "'job' is free" in out
    status, out, _ = call(capsys, "status", "--json")
    assert json.loads(out) == []


def test_status_names_the_backend_it_read_and_where_its_url_came_from(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    tmp_path: Path,
) -> None:
    _, out, _ = call(capsys, "status")
    assert out.splitlines()[0] == f"backend: {url} (from $TUMBLER_URL)"
    _, out, _ = call(capsys, "status", "job", "--url", url)
    assert out.splitlines()[0] == f"backend: {url}"
    monkeypatch.delenv("TUMBLER_URL")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _, out, _ = call(capsys, "status")
    default = tmp_path / "cache" / "tumbler" / "locks.db"
    assert (
        out.splitlines()[0] == f"backend: sqlite://{default} (the default: $TUMBLER_URL is not set)"
    )


def _watching(spawn: Spawn, *options: str) -> subprocess.Popen[bytes]:
    return spawn("status", "--watch", "--interval", "0.05", *options, stdout=subprocess.PIPE)


def _stop_watching(watcher: subprocess.Popen[bytes]) -> None:
    watcher.send_signal(signal.SIGINT)
    assert watcher.wait(timeout=30) == 0  # Ctrl-C is how a watch ends


def test_status_watch_json_prints_a_line_per_read(spawn: Spawn, locks: tumbler.Locks) -> None:
    watcher = _watching(spawn, "--json")
    assert json.loads(read_line(watcher)) == []
    lock = locks.lock("job")
    assert lock.acquire()
    assert lock.hold is not None
    while not (states := json.loads(read_line(watcher))):
        pass
    [state] = states
    assert [holder["token"] for holder in state["holders"]] == [lock.hold.token]
    lock.release()
    while json.loads(read_line(watcher)):
        pass
    _stop_watching(watcher)


def test_status_watch_of_one_lock_reads_it_again_when_it_changes(
    spawn: Spawn, locks: tumbler.Locks
) -> None:
    """Reads an hour apart: each line after the first comes from a change of the lock."""
    watcher = spawn(
        "status", "job", "--watch", "--interval", "3600", "--json", stdout=subprocess.PIPE
    )
    assert json.loads(read_line(watcher))["holders"] == []
    lock = locks.lock("job")
    assert lock.acquire()
    assert lock.hold is not None
    held = json.loads(read_line(watcher))
    assert [holder["token"] for holder in held["holders"]] == [lock.hold.token]
    lock.release()
    assert json.loads(read_line(watcher))["holders"] == []
    _stop_watching(watcher)


def test_status_watch_says_how_long_each_grant_has_been_held(
    spawn: Spawn, locks: tumbler.Locks
) -> None:
    early = locks.lock("early")
    assert early.acquire()
    watcher = _watching(spawn)
    late = locks.lock("late")

    def held_column() -> dict[str, str]:
        """The next table's lock names and their "held" cells."""
        while read_line(watcher).split()[:1] != ["lock"]:
            pass
        cells: dict[str, str] = {}
        while (line := read_line(watcher)).strip():
            found = re.match(r"\s*(early|late)\s.*\s(≥?\d+) s\s+[\d.]+ s left", line)
            if found:
                cells[found[1]] = found[2]
        return cells

    assert held_column() == {"early": "≥0"}  # held when the watch began: maybe for longer
    assert late.acquire()
    while "late" not in (cells := held_column()):
        pass
    assert cells["late"] == "0"
    assert cells["early"].startswith("≥")
    _stop_watching(watcher)


# -- release -------------------------------------------------------------------------------------


def test_force_release_takes_the_lock_and_the_holder_learns(
    capsys: pytest.CaptureFixture[str], locks: tumbler.Locks
) -> None:
    lock = locks.lock("job", ttl=0.5)
    assert lock.acquire()
    hold = lock.hold
    assert hold is not None

    status, out, err = call(capsys, "release", "--force", "job", "--yes")
    assert status == 0, err
    assert "released 1 grant" in out
    assert locks.status("job").holders == ()
    assert hold.wait_lost(10)
    assert hold.lost


def test_force_release_without_a_terminal_needs_yes(
    env: dict[str, str], locks: tumbler.Locks
) -> None:
    assert locks.lock("job").acquire()
    result = run_tumbler("release", "--force", "job", env=env, stdin=subprocess.DEVNULL)
    assert result.returncode == EX_USAGE
    assert "--yes" in one_error_line(result.stderr)
    assert len(locks.status("job").holders) == 1


@pytest.mark.parametrize(("answer", "expected"), [("y", 0), ("n", 1)])
def test_force_release_asks_on_a_terminal(
    env: dict[str, str], locks: tumbler.Locks, answer: str, expected: int
) -> None:
    assert locks.lock("job").acquire()
    controller, terminal = pty.openpty()
    try:
        # the answer waits in the terminal's input queue until the prompt reads it
        os.write(controller, f"{answer}\n".encode())
        result = run_tumbler("release", "--force", "job", env=env, stdin=terminal)
    finally:
        os.close(terminal)
        os.close(controller)
    assert result.returncode == expected, result.stderr
    assert "Force-release lock 'job'" in result.stdout
    assert len(locks.status("job").holders) == (0 if answer == "y" else 1)


@pytest.mark.parametrize("module", ["tumbler", "tumbler.cli"])
def test_main_is_the_module_entry_point(env: dict[str, str], module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", module, "--version"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0
    assert result.stdout.strip() == f"tumbler {tumbler.__version__}"
