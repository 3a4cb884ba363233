"""``tumbler torture`` as a command: its exit statuses, its reports, its URL."""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import quote

import psutil
import pytest

import tumbler.torture.cli as torture_cli
from tests.servers.fixtures import server_unavailable
from tumbler.backends.descriptor import BackendDescriptor
from tumbler.testing.backends.redis.server import TUMBLER_RULES, RedisServer, RedisUser
from tumbler.testing.servers import ServerError
from tumbler.torture.backends import BackendSpec
from tumbler.torture.check import CheckResult, Violation
from tumbler.torture.cli import _primitive_list, exit_status, main
from tumbler.torture.harness import BackendRun, Options, RoundResult, TortureRun, environment
from tumbler.torture.report import BEGIN, END, markdown


@pytest.mark.parametrize(
    "argv",
    [
        ["--faults", "bogus"],
        ["--faults", "kill+bogus"],
        ["--backend", "nope"],
        ["--workers", "1"],
        ["--ttl", "0"],
        ["--url", "memory://"],
        ["--primitive", "mutex"],
        ["--primitive", "lock,bogus"],
        ["--permits", "1"],
        ["--lock-delay", "-1"],
        ["--lock-delay", "61"],
    ],
)
def test_usage_errors_exit_64(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 64
    err = capsys.readouterr().err
    assert err.startswith("tumbler: ")
    assert len(err.strip().splitlines()) == 1


def test_a_lock_delay_is_refused_for_a_backend_that_keeps_none(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = torture_cli.descriptor_for

    def without_lock_delay(scheme: str) -> BackendDescriptor:
        descriptor = real(scheme)
        capabilities = dataclasses.replace(descriptor.capabilities, lock_delay=False)
        return dataclasses.replace(descriptor, capabilities=capabilities)

    monkeypatch.setattr(torture_cli, "descriptor_for", without_lock_delay)
    assert main(["--backend", "sqlite", "--lock-delay", "2"]) == 64
    err = capsys.readouterr().err
    assert "sqlite keep no lock-delay (capabilities.lock_delay)" in err


def test_a_bad_url_exits_78(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", "nosuch://somewhere"]) == 78
    assert "unknown backend URL scheme 'nosuch'" in capsys.readouterr().err


def test_without_url_or_backend_tumbler_url_is_the_url(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TUMBLER_URL", "nosuch://somewhere")
    assert main([]) == 78
    assert "unknown backend URL scheme 'nosuch'" in capsys.readouterr().err
    monkeypatch.setenv("TUMBLER_URL", "memory://")
    assert main(["--seconds", "1"]) == 64
    err = capsys.readouterr().err
    assert err.startswith("tumbler: Invalid value for $TUMBLER_URL: memory://: its locks live")
    # --url wins over it
    assert main(["--url", "nosuch://elsewhere"]) == 78


def test_an_unreachable_server_exits_69(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("redis")
    # port 1 on loopback: nothing listens there
    assert main(["--url", "redis://127.0.0.1:1/0?connect_timeout=0.5"]) == 69
    assert "cannot reach Redis" in capsys.readouterr().err


@pytest.mark.timeout(90)
def test_a_short_run_writes_json_and_markdown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # --backend asks for throwaway servers only: $TUMBLER_URL is not tortured as well
    monkeypatch.setenv("TUMBLER_URL", "nosuch://somewhere")
    report = tmp_path / "report.json"
    doc = tmp_path / "torture.md"
    # the markers quoted in the text do not count: only the lines that are nothing else
    intro = f"# Hand-written\n\nmarkers `{BEGIN}` and `{END}`\n\n"
    doc.write_text(f"{intro}{BEGIN}\nold report\n{END}\n\nafter\n")
    argv = ["--backend", "sqlite", "--faults", "kill", "--seconds", "1", "--seed", "11"]
    argv += ["--json", str(report), "--markdown", str(doc), "--workdir", str(tmp_path / "w")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "seed 11" in out
    assert "sqlite" in out
    assert "kill" in out
    document = json.loads(report.read_text())
    assert document["ok"] is True
    assert document["options"]["seed"] == 11
    assert document["environment"]["cpus"] >= 1
    (backend,) = document["backends"]
    (round_,) = backend["rounds"]
    assert round_["fault"] == "kill"
    assert round_["check"]["grants"] > 0
    assert round_["check"]["faults"] >= 1
    assert round_["fault_records"][0]["kind"] == "kill"
    text = doc.read_text()
    assert text.startswith(intro + BEGIN + "\n")
    assert text.endswith(END + "\n\nafter\n")
    assert "old report" not in text
    assert "| sqlite | kill |" in text
    assert "| work after grant |" in text
    assert round_["check"]["work_after_grant_s"] == []


#: a password with characters a URL must percent-encode, unique to this test run
PASSWORD = f"tort-{secrets.token_hex(6)}@p:w/d%?#"


@pytest.fixture
def acl_redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A plain Redis whose only lock user, ``tumbler``, has :data:`PASSWORD`."""
    server = RedisServer(
        tmp_path / "redis-acl", users=[RedisUser("tumbler", PASSWORD, TUMBLER_RULES)]
    )
    try:
        server.start()
    except (ServerError, OSError) as error:
        server_unavailable(f"cannot start redis-server with ACL users: {error}")
    yield server
    server.close()


def _worker_views() -> dict[int, tuple[bytes, bytes]]:
    """What anyone on the machine can read of this process's torture workers: each one's
    command line and (same user, or root) environment."""
    views: dict[int, tuple[bytes, bytes]] = {}
    for child in psutil.Process().children(recursive=True):
        proc = Path(f"/proc/{child.pid}")
        try:
            cmdline = (proc / "cmdline").read_bytes()
            if b"tumbler.torture.worker" in cmdline:
                views[child.pid] = (cmdline, (proc / "environ").read_bytes())
        except OSError:
            continue  # it exited meanwhile (a killed worker)
    return views


@pytest.mark.timeout(90)
def test_a_password_in_tumbler_url_stays_out_of_the_workers_sight(
    acl_redis_server: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"{acl_redis_server.url}?socket_timeout=0.33&connect_timeout=0.33"
    assert quote(PASSWORD, safe="") in url
    monkeypatch.setenv("TUMBLER_URL", url)
    seen: dict[int, tuple[bytes, bytes]] = {}
    run_torture = torture_cli.run_torture

    def looking(
        specs: Sequence[BackendSpec],
        faults: Sequence[str],
        options: Options,
        *,
        log: Callable[[str], None],
        jobs: int,
    ) -> TortureRun:
        def log_and_look(message: str) -> None:
            # the harness logs each fault as it is done: the round's workers are running
            seen.update(_worker_views())
            log(message)

        return run_torture(specs, faults, options, log=log_and_look, jobs=jobs)

    monkeypatch.setattr(torture_cli, "run_torture", looking)
    report = tmp_path / "report.json"
    argv = ["--faults", "kill", "--seconds", "1", "--seed", "3", "--json", str(report)]
    assert main([*argv, "--workdir", str(tmp_path / "w")]) == 0
    out, err = capsys.readouterr()
    (backend,) = json.loads(report.read_text())["backends"]
    assert backend["backend"] == "url-redis"  # $TUMBLER_URL was the server tortured
    (round_,) = backend["rounds"]
    assert round_["check"]["grants"] > 0  # the workers did log in with the password
    assert len(seen) >= 4, seen  # the four workers, and the one that replaced a killed one
    forms = (PASSWORD, quote(PASSWORD, safe=""), quote(PASSWORD))
    leaks = [
        (pid, part)
        for pid, views in seen.items()
        for part, view in zip(("cmdline", "environ"), views, strict=True)
        if any(form.encode() in view for form in forms)
    ]
    assert leaks == []
    assert not any(form in out + err for form in forms)


def _run(round_: RoundResult) -> TortureRun:
    backend = BackendRun("sqlite", "SQLite file", "exclusion", rounds=[round_])
    return TortureRun(Options(), [backend], environment(), "now", 1.0)


def _round(
    violations: list[Violation], not_promised: dict[str, str], exercised: bool
) -> RoundResult:
    check = CheckResult(violations=violations, faults=1, grants=3)
    return RoundResult("sqlite", "kill", check, [], not_promised, exercised, "note", 1.0)


def test_exit_status_counts_only_promised_violations() -> None:
    overlap = Violation("overlap", "A, B, A")
    assert exit_status(_run(_round([], {}, True))) == 0
    assert exit_status(_run(_round([overlap], {}, True))) == 1
    expected = _run(_round([overlap], {"overlap": "fencing off"}, True))
    assert exit_status(expected) == 0
    assert "not promised `overlap`" in markdown(expected)
    unexercised = _run(_round([], {}, False))
    assert exit_status(unexercised) == 0
    assert exit_status(unexercised, strict=True) == 1


def test_primitives_are_a_list_or_all_in_the_table_order() -> None:
    assert _primitive_list(()) == ("lock",)
    assert _primitive_list(("rwlock,lock", "semaphore")) == ("rwlock", "lock", "semaphore")
    assert _primitive_list(("all", "lock")) == (
        "lock",
        "fair",
        "semaphore",
        "rwlock",
        "election",
        "multi",
    )
