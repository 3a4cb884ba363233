"""``tumbler torture`` as a command: its exit statuses and its reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tumbler.torture.check import CheckResult, Violation
from tumbler.torture.cli import exit_status, main
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
    ],
)
def test_usage_errors_exit_64(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 64
    err = capsys.readouterr().err
    assert err.startswith("tumbler: ")
    assert len(err.strip().splitlines()) == 1


def test_a_bad_url_exits_78(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", "nosuch://somewhere"]) == 78
    assert "unknown backend URL scheme 'nosuch'" in capsys.readouterr().err


def test_an_unreachable_server_exits_69(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("redis")
    # port 1 on loopback: nothing listens there
    assert main(["--url", "redis://127.0.0.1:1/0?connect_timeout=0.5"]) == 69
    assert "cannot reach Redis" in capsys.readouterr().err


@pytest.mark.timeout(90)
def test_a_short_run_writes_json_and_markdown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
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
