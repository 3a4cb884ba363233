"""What the ``tumbler`` command shows operators, and the backends it refuses.

Holder descriptions and lock names written by a client reach the operator's terminal escaped;
a grant that lives with its holder's session is shown as such rather than as a countdown; and a
backend whose locks live inside one process is refused by the commands that work with other
processes' locks.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import uuid
from pathlib import Path

import pytest
from rich.console import Console

import tumbler
from tumbler import HolderInfo, LockState
from tumbler._url import parse_url
from tumbler.backends import builtin_descriptors
from tumbler.backends.contract import GrantRequest
from tumbler.backends.memory.backend import MemoryBackend
from tumbler.backends.sqlite import backend as sqlite
from tumbler.cli import EX_CONFIG, EX_TEMPFAIL, _state_json, _status_parts, _status_table, main
from tumbler.testing.backends.zookeeper.server import ZooKeeperServer

from .conftest import python_command, run_tumbler

# -- escape sequences from holders ---------------------------------------------------------------

#: a holder description as a hostile client could write it: set the window title (OSC ... BEL),
#: clear the screen (CSI), a C1 CSI, DEL, a right-to-left override, a carriage return
HOSTILE_HOLDER = "evil\x1b]0;pwned\x07\x1b[2J\x9b31m\x7f\u202egnp.exe\r pid=1"
#: a lock name that no client of the library could use, written to the store directly
HOSTILE_NAME = "job\x1b[31m"

#: what must not reach a terminal raw (a newline ends a line and is allowed)
RAW_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def hostile_grants(url: str) -> None:
    """Grants of ``job`` and of HOSTILE_NAME, whose holder is HOSTILE_HOLDER, made through the
    backend API (the library's own clients describe themselves as host and pid)."""
    backend = sqlite.open_sync(parse_url(url))
    try:
        for name in ("job", HOSTILE_NAME):
            request = GrantRequest(
                name=name,
                owner=uuid.uuid4().hex,
                shared=False,
                limit=1,
                fair=False,
                ttl=60,
                holder=HOSTILE_HOLDER,
            )
            assert backend.try_grant(request) is not None
    finally:
        backend.close()


@pytest.mark.usefixtures("hostile_grants")
@pytest.mark.parametrize("args", [["status"], ["status", "job"]], ids=["every-lock", "one-lock"])
def test_status_escapes_what_a_holder_wrote(
    capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    assert main(args) == 0
    out = capsys.readouterr().out
    assert RAW_CONTROL.search(out) is None, repr(out)
    # (the table may wrap the cell at its space)
    assert r"evil\x1b]0;pwned\x07\x1b[2J\x9b31m\x7f\u202egnp.exe\x0d" in out
    if args == ["status"]:
        assert r"job\x1b[31m" in out


@pytest.mark.usefixtures("hostile_grants")
def test_busy_message_escapes_what_the_holder_wrote(env: dict[str, str]) -> None:
    result = run_tumbler("run", "job", "--no-wait", "--", "true", env=env)
    assert result.returncode == EX_TEMPFAIL
    assert result.stderr.endswith("\n")
    assert RAW_CONTROL.search(result.stderr) is None, repr(result.stderr)
    assert r"holder: evil\x1b]0;pwned\x07" in result.stderr


@pytest.mark.usefixtures("hostile_grants")
def test_status_json_escapes_every_control_character(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["status", "--json"]) == 0
    out = capsys.readouterr().out
    assert RAW_CONTROL.search(out) is None, repr(out)
    by_name = {state["name"]: state for state in json.loads(out)}
    assert set(by_name) == {"job", HOSTILE_NAME}
    assert by_name["job"]["holders"][0]["holder"] == HOSTILE_HOLDER


# -- grants that live with a session -------------------------------------------------------------

ON_ZOOKEEPER = LockState("job", (HolderInfo(7, False, 10.0, "zk-host pid=1", session=True),), 1)
ON_REDIS = LockState("other", (HolderInfo(8, False, 4.25, "redis-host pid=2"),), 0)


def rendered(states: list[LockState]) -> dict[str, str]:
    console = Console(file=io.StringIO(), width=200, markup=False, highlight=False)
    console.print(_status_table(states))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    return {line.split()[0]: line for line in text.splitlines() if line.strip()}


def test_status_table_shows_a_session_grant_as_such() -> None:
    rows = rendered([ON_ZOOKEEPER, ON_REDIS])
    assert "lease" in rows["lock"]
    assert "with session (timeout 10 s)" in rows["job"]
    assert "4.2 s left" in rows["other"]
    assert "session" not in rows["other"]


def test_status_json_shows_a_session_grant_as_such() -> None:
    [session] = _state_json(ON_ZOOKEEPER)["holders"]
    assert session["session"] is True
    assert session["session_timeout"] == 10.0
    assert session["expires_in"] is None  # not a countdown: no number a script could misread
    [lease] = _state_json(ON_REDIS)["holders"]
    assert lease["session"] is False
    assert lease["session_timeout"] is None
    assert lease["expires_in"] == 4.25


def test_status_tells_of_a_lock_closed_by_the_lock_delay_of_a_lost_grant() -> None:
    closed = LockState("job", (), 1, lapsed=(HolderInfo(9, False, 4.25, "gone pid=3"),))
    parts = _status_parts([closed], "job")
    assert not any("is free" in str(part) for part in parts)
    assert (
        "lock 'job': closed 4.2 s more, the lock-delay of gone pid=3's grant (token 9), "
        "which ended without a release"
    ) in parts
    shown = _state_json(closed)
    assert shown["locked"] is False
    assert [(h["token"], h["expires_in"]) for h in shown["lapsed"]] == [(9, 4.25)]
    assert _state_json(ON_REDIS)["lapsed"] == []


def test_status_on_zookeeper_shows_the_session(
    zookeeper_server: ZooKeeperServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = zookeeper_server.url_for(f"/cli-{uuid.uuid4().hex[:12]}")
    with tumbler.connect(url) as locks:
        lock = locks.lock("job")
        assert lock.acquire()
        [holder] = locks.status("job").holders
        if not holder.session:
            pytest.skip(
                "the ZooKeeper backend reports HolderInfo.session from another branch; "
                "this case runs once that has landed"
            )
        assert main(["status", "job", "--url", url]) == 0
        out = capsys.readouterr().out
        assert f"with session (timeout {holder.expires_in:g} s)" in out
        assert main(["status", "job", "--json", "--url", url]) == 0
        [shown] = json.loads(capsys.readouterr().out)["holders"]
        assert shown["session"] is True
        assert shown["expires_in"] is None
        assert shown["session_timeout"] == pytest.approx(holder.expires_in, abs=0.001)


# -- backends whose locks live inside one process ------------------------------------------------


@pytest.fixture
def memory_in_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """memory:// declaring scope "process", as it does once that lands from another branch
    (until then, this test's process declares it on its behalf; after, this does nothing)."""
    declared = MemoryBackend.capabilities
    if declared.scope != "process":
        monkeypatch.setattr(
            MemoryBackend, "capabilities", dataclasses.replace(declared, scope="process")
        )


@pytest.mark.usefixtures("memory_in_one_process")
@pytest.mark.parametrize(
    ("args", "command"),
    [
        (["run", "job", "--url", "memory://"], "run"),
        (["status", "--url", "memory://"], "status"),
        (["status", "job", "--url", "memory://shared"], "status"),
        (["release", "--force", "--yes", "job", "--url", "memory://"], "release"),
    ],
    ids=["run", "status", "status-of-one", "release"],
)
def test_a_backend_inside_one_process_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], command: str
) -> None:
    marker = tmp_path / "ran"
    if command == "run":
        args = [*args, "--", *python_command(f"open({str(marker)!r}, 'w').close()")]
    assert main(args) == EX_CONFIG
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("tumbler: ")
    assert "inside one process" in line
    assert f"'tumbler {command}'" in line
    # the backends to use instead, each by its scheme
    for descriptor in builtin_descriptors():
        if descriptor.capabilities.scope != "process":
            assert f"{descriptor.schemes[0]}://" in line, descriptor.name
    assert not marker.exists()


@pytest.mark.skipif(
    MemoryBackend.capabilities.scope != "process",
    reason="memory:// declares scope 'process' on another branch; this case runs once it lands",
)
def test_run_on_memory_is_refused_as_a_process(env: dict[str, str], tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    command = python_command(f"open({str(marker)!r}, 'w').close()")
    result = run_tumbler("run", "job", "--url", "memory://", "--", *command, env=env)
    assert result.returncode == EX_CONFIG
    assert "inside one process" in result.stderr
    assert not marker.exists()
