"""The torture report as a terminal shows it (no servers)."""

from __future__ import annotations

import pytest
from rich.console import Console

from tumbler.torture.check import CheckResult
from tumbler.torture.harness import BackendRun, Options, RoundResult, TortureRun
from tumbler.torture.report import print_report


def _round(backend: str, fault: str, primitive: str) -> RoundResult:
    check = CheckResult(grants=12_345, faults=1_234, stale_refused=1_234, holds_lost=1_234)
    check.recovery = [1.96, 12.34]
    check.work_after_grant = [0.163, 0.084]
    return RoundResult(
        backend=backend,
        fault=fault,
        check=check,
        faults=[],
        not_promised={},
        exercised=True,
        exercised_note="209 grants while a holder was cut off; 12 holds hit, 46 client "
        "errors/losses, proxy hit 24046",
        seconds=5.0,
        primitive=primitive,
    )


@pytest.mark.parametrize("width", [80, 120, 160])
def test_the_report_fits_the_terminal_and_cuts_nothing(width: int) -> None:
    rounds = [
        _round("postgresql-pgbouncer", "net-cut+net-drop+net-delay+net-reset", "semaphore"),
        _round("zookeeper-ensemble", "minority-pause+leader-pause", "rwlock"),
    ]
    run = TortureRun(
        options=Options(),
        backends=[BackendRun("postgresql-pgbouncer", "", "", rounds=rounds)],
        environment={},
        started="now",
        seconds=1.0,
    )
    console = Console(width=width, record=True, markup=False, emoji=False)
    print_report(run, console)
    text = console.export_text()
    assert all(len(line) <= width for line in text.splitlines()), text
    assert "…" not in text, text
    for shown in ("12345", "1234", "7.15 / 12.34", "2 (max 163 ms)", "semaphore", "yes"):
        assert shown in text, text
