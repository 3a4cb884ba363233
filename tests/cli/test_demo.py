"""The stock-deduction demo: the race is real without a lock, and gone with one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tumbler.demo import RunResult, run_demo

from .conftest import run_tumbler


def test_the_lock_makes_the_sale_exact_and_its_absence_does_not() -> None:
    # 20 ms between read and write, 4 workers started together: without a lock their
    # read-write windows overlap on essentially every request, so updates are lost for sure.
    result = run_demo(workers=4, requests=10, stock=20, think=0.02)

    locked = result.locked
    assert locked.locked
    assert (locked.requests, locked.sold, locked.final_stock) == (40, 20, 0)
    assert (locked.oversold, locked.lost_updates) == (0, 0)
    assert locked.exact
    assert result.ok

    unlocked = result.unlocked
    assert not unlocked.locked
    assert unlocked.requests == 40
    assert unlocked.oversold > 0 or unlocked.lost_updates > 0
    assert not unlocked.exact


def test_fewer_requests_than_stock_sell_every_request(tmp_path: Path) -> None:
    url = f"sqlite://{(tmp_path / 'demo.db').as_posix()}"
    result = run_demo(url, workers=2, requests=5, stock=50, think=0.0)
    assert result.url == url
    assert (result.locked.sold, result.locked.final_stock) == (10, 40)
    assert result.locked.exact
    assert (tmp_path / "demo.db").exists()


@pytest.mark.parametrize(
    ("sold", "final_stock", "oversold", "lost", "exact"),
    [
        (10, 0, 0, 0, True),  # right
        (14, 0, 4, 4, False),  # sold items that never were
        (10, 3, 0, 3, False),  # deductions overwritten
        (8, 2, 0, 0, False),  # stock left although every request wanted an item
    ],
)
def test_run_result_arithmetic(
    sold: int, final_stock: int, oversold: int, lost: int, exact: bool
) -> None:
    result = RunResult(
        locked=True,
        workers=2,
        requests=20,
        initial_stock=10,
        sold=sold,
        final_stock=final_stock,
        seconds=0.1,
    )
    assert (result.oversold, result.lost_updates, result.exact) == (oversold, lost, exact)


@pytest.mark.parametrize(
    "arguments",
    [
        {"workers": 0},
        {"requests": 0},
        {"stock": -1},
        {"think": -0.1},
        {"url": "memory://demo"},
    ],
)
def test_run_demo_refuses_what_cannot_make_a_demo(arguments: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - several messages, one kind of refusal
        run_demo(**arguments)  # type: ignore[arg-type]


def test_demo_command_defaults(env: dict[str, str]) -> None:
    # The demo keeps its locks in a temporary file of its own, whatever TUMBLER_URL says.
    env["TUMBLER_URL"] = "nosuch://ignored"
    result = run_tumbler("demo", env=env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for heading in ("run", "requests", "sold", "left", "oversold", "lost", "secs"):
        assert heading in out
    [locked_row] = [line for line in out.splitlines() if "with tumbler lock" in line]
    assert locked_row.split()[3:8] == ["120", "100", "0", "0", "0"]
    assert "exactly right" in out


def test_demo_command_with_a_url(env: dict[str, str], tmp_path: Path) -> None:
    database = tmp_path / "elsewhere.db"
    result = run_tumbler(
        "demo",
        "--url",
        f"sqlite://{database.as_posix()}",
        "--workers",
        "2",
        "--requests",
        "5",
        "--stock",
        "5",
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert database.exists()
    assert str(database) in result.stdout


def test_demo_command_reports_a_bad_backend(env: dict[str, str]) -> None:
    result = run_tumbler("demo", "--url", "nosuch://x", env=env)
    assert result.returncode == 78
    assert result.stderr.startswith("tumbler: ")


def test_the_demo_tables_fit_80_columns() -> None:
    from rich.console import Console

    from tumbler.cli import _demo_table
    from tumbler.demo_http import HttpRunResult

    runs = [
        HttpRunResult(
            locked=mode != "none", workers=30, requests=99_999, initial_stock=99_999,
            sold=99_999, final_stock=99_999, seconds=999.99, mode=mode, segments=1024,
            answered_sold=0, answered_sold_out=0, failed=0,
        )
        for mode in ("none", "lock", "segmented")
    ]  # fmt: skip
    for throughput in (False, True):
        console = Console(width=80, record=True, markup=False, emoji=False)
        console.print(_demo_table(runs, throughput=throughput))
        lines = [line for line in console.export_text().splitlines() if line.strip()]
        assert len(lines) == 2 + len(runs), lines  # heading, rule, one line a run: no wrapping
        assert all(len(line) <= 80 and "…" not in line for line in lines), lines
        assert lines[-1].split()[:3] == ["segmented", "lock", "(1024)"]
