"""The torture report: a rich table for the terminal, JSON for machines, Markdown for docs/.

Markdown written to a file that holds the markers :data:`BEGIN` and :data:`END` replaces only
what is between them, so docs/torture.md keeps its hand-written text around the latest report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .check import CheckResult
from .faults import FAULT_HELP
from .harness import Options, RoundResult, TortureRun

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = ["BEGIN", "END", "markdown", "print_report", "table", "write_json", "write_markdown"]

BEGIN = "<!-- torture-report:begin -->"
END = "<!-- torture-report:end -->"

#: violations listed per round in the Markdown report (the JSON has them all)
_LISTED = 5

_COLUMNS = (
    "backend",
    "fault",
    "primitive",
    "grants",
    "faults",
    "violations",
    "not promised",
    "stale refused",
    "holds lost",
    "work after grant",
    "recovery p50/max s",
    "hazard exercised",
)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _late_work(check: CheckResult) -> str:
    """How many holders went on working after another's grant, and the longest for how long."""
    late = check.work_after_grant
    if not late:
        return "0"
    return f"{len(late)} (max {max(late) * 1000:.0f} ms)"


def _row(round_: RoundResult) -> list[str]:
    check = round_.check
    recovery = (
        f"{_seconds(check.recovery_p50)} / {_seconds(check.recovery_max)}"
        if check.recovery
        else "-"
    )
    if round_.fault == "none":
        hazard = "n/a (baseline)"
    else:
        hazard = ("yes: " if round_.exercised else "NO: ") + round_.exercised_note
    return [
        round_.backend,
        round_.fault,
        round_.primitive,
        str(check.grants),
        str(check.faults),
        str(len(round_.promised_violations)),
        str(len(round_.expected_violations)),
        str(check.stale_refused),
        str(check.holds_lost),
        _late_work(check),
        recovery,
        hazard,
    ]


def _flavours(check: CheckResult) -> str:
    return ", ".join(f"{count} {name}" for name, count in sorted(check.flavours.items())) or "0"


def deployment_totals(run: TortureRun) -> list[tuple[str, int, dict[str, int], int, int]]:
    """Per deployment, summed over its rounds (every fault and primitive): grants, faults
    injected by kind, promised violations and rounds stopped at the round limit."""
    totals: list[tuple[str, int, dict[str, int], int, int]] = []
    for backend in run.backends:
        if not backend.rounds:
            continue
        kinds: dict[str, int] = {}
        for round_ in backend.rounds:
            for record in round_.faults:
                kinds[record.kind] = kinds.get(record.kind, 0) + 1
        totals.append(
            (
                backend.backend,
                sum(round_.check.grants for round_ in backend.rounds),
                kinds,
                sum(len(round_.promised_violations) for round_ in backend.rounds),
                sum(1 for round_ in backend.rounds if round_.limit_hit),
            )
        )
    return totals


def _totals_lines(run: TortureRun) -> list[str]:
    lines = []
    for name, grants, kinds, violations, limited in deployment_totals(run):
        faults = ", ".join(f"{count} {kind}" for kind, count in kinds.items()) or "no faults"
        lines.append(
            f"{name}: {grants} grants, {faults}, {violations} promised violations"
            + (f", {limited} rounds stopped at the round limit" if limited else "")
        )
    return lines


#: the terminal table's headings, on two lines where one would widen the table
_TERMINAL_HEADINGS = (
    "backend",
    "fault",
    "primitive",
    "grants",
    "faults",
    "viola-\ntions",
    "not\npromised",
    "stale\nrefused",
    "holds\nlost",
    "work after\ngrant",
    "recovery\np50/max s",
    "hazard\nhit",
)

#: below this width a terminal gets the rounds as blocks of lines instead of a table (the
#: table's numbers alone take about 100 columns)
_TABLE_WIDTH = 140


def _hazard_word(round_: RoundResult) -> str:
    """Whether the fault bit, in a word (the note that says how is in the Markdown and JSON
    reports, and printed after the table for a round whose fault did not bite)."""
    if round_.fault == "none":
        return "n/a"
    return "yes" if round_.exercised else "NO"


def table(run: TortureRun) -> Table:
    """The run as a rich table, one row per backend and fault. Text cells fold where the
    terminal is narrow; numbers and headings keep their width, so nothing is cut."""
    from rich import box
    from rich.table import Table

    result = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for index, heading in enumerate(_TERMINAL_HEADINGS):
        if index < 3:
            result.add_column(heading, overflow="fold")
        else:
            widest = max(map(len, heading.splitlines()))
            result.add_column(heading, justify="right", no_wrap=True, min_width=widest)
    for round_ in run.rounds:
        style = None if round_.ok else "bold red"
        result.add_row(*_row(round_)[:-1], _hazard_word(round_), style=style)
    return result


def blocks(run: TortureRun) -> list[str]:
    """The run for a narrow terminal: a round in three lines (which the terminal may wrap)."""
    lines: list[str] = []
    for round_ in run.rounds:
        cells = dict(zip(_COLUMNS, _row(round_), strict=True))
        recovery = cells["recovery p50/max s"]
        lines += [
            f"{round_.backend} {round_.fault} {round_.primitive}"
            + ("" if round_.ok else ": FAILED"),
            "  " + ", ".join(f"{name} {cells[name]}" for name in _COLUMNS[3:8]),
            f"  holds lost {cells['holds lost']}, late work {cells['work after grant']}, "
            f"recovery {recovery}{' s' if recovery != '-' else ''}, hit {_hazard_word(round_)}",
        ]
    return lines


def print_report(run: TortureRun, console: Console) -> None:
    """The table, then every promised violation and every unexercised fault, then skips."""
    if console.width >= _TABLE_WIDTH:
        console.print(table(run))
    else:
        for line in blocks(run):
            console.print(line)
    for line in _totals_lines(run):
        console.print(f"total {line}")
    for round_ in run.rounds:
        if round_.limit_hit:
            console.print(f"warning: {round_.name} {round_.limit_hit}")
        for violation in round_.promised_violations[:_LISTED]:
            console.print(f"VIOLATION {round_.name} {violation.kind}: {violation.detail}")
        more = len(round_.promised_violations) - _LISTED
        if more > 0:
            console.print(f"... and {more} more in {round_.name}")
        if round_.promised_violations and round_.directory is not None:
            console.print(f"histories kept in {round_.directory}")
        if round_.fault != "none" and not round_.exercised:
            console.print(f"warning: {round_.name} proved nothing: {round_.exercised_note}")
    for backend in run.backends:
        if backend.unavailable:
            console.print(f"skipped {backend.backend}: {backend.unavailable}")
        for fault, why in backend.skipped.items():
            console.print(f"skipped {backend.backend}/{fault}: {why}")


def write_json(run: TortureRun, path: Path) -> None:
    path.write_text(json.dumps(run.as_json(), indent=2) + "\n")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _soak_text(options: Options) -> str:
    """``, at least 50 faults of each kind and 10000 grants per deployment`` (a soak's totals)."""
    totals = [
        *([f"{options.min_faults} faults of each kind"] if options.min_faults else []),
        *([f"{options.min_grants} grants"] if options.min_grants else []),
    ]
    return f", at least {' and '.join(totals)} per deployment" if totals else ""


def markdown(run: TortureRun) -> str:
    """The report as Markdown: results, what was not promised, violations, machine, options."""
    lines: list[str] = []
    env = run.environment
    options = run.options
    lines.append(
        f"Run of {run.started}: {options.workers} workers, {options.seconds:g} s of faults per "
        f"round, TTL {options.ttl:g} s, think {options.think * 1000:g} ms, fencing "
        f"{options.fencing}, seed {options.seed}, primitives {', '.join(options.primitives)}"
        f" (semaphore of {options.permits}), a round each"
        + (f", lock-delay {options.lock_delay:g} s" if options.lock_delay else "")
        + _soak_text(options)
        + f"; {run.seconds:.0f} s in all. "
        f"Result: **{'no promised property violated' if run.ok else 'VIOLATIONS'}**."
    )
    lines += ["", "| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    for round_ in run.rounds:
        lines.append("| " + " | ".join(_cell(cell) for cell in _row(round_)) + " |")
    skipped = [
        f"- {backend.backend}: {backend.unavailable}"
        for backend in run.backends
        if backend.unavailable
    ] + [
        f"- {backend.backend}/{fault}: {why}"
        for backend in run.backends
        for fault, why in backend.skipped.items()
    ]
    if skipped:
        lines += ["", "Not run:", "", *skipped]
    lines += ["", "Per deployment, over every fault and primitive:", ""]
    lines += [f"- {line}" for line in _totals_lines(run)]

    lines += ["", "### Details per round", ""]
    for round_ in run.rounds:
        check = round_.check
        lines.append(
            f"- **{round_.backend} / {round_.fault} / {round_.primitive}** "
            f"({FAULT_HELP.get(round_.fault, '')}): "
            f"{check.acquires} acquires, {check.grants} grants ({_flavours(check)}"
            + (
                f"; {check.sides.get('read', 0)} read, {check.sides.get('write', 0)} write"
                if round_.primitive == "rwlock"
                else ""
            )
            + f"), {check.acquire_errors} failed "
            f"with an error, {check.acquire_timeouts} timed out; {check.writes_accepted} writes "
            f"accepted, counter {check.final_counter}; {check.faults} faults"
            + (f" ({round_.missed} found no holder)" if round_.missed else "")
            + (f" ({round_.astray} missed the hold they aimed at)" if round_.astray else "")
            + f", {check.kills_of_holders} holders killed, {check.grants_during_pause} grants "
            f"during pauses, {check.pauses_loss_detected} paused holders told of the loss, "
            f"{len(check.work_after_grant)} holders still working after another's grant, "
            f"{check.disruptions} client errors during server/network faults; lock free "
            f"{_seconds(check.free_after_stop)} s after the workers stopped; "
            f"{round_.seconds:.0f} s"
            + (f"; {check.fair_pairs} pairs of queued waiters in order" if check.fair_pairs else "")
            + (
                f"; {check.paused_holders_exempt} paused holders left out of the count"
                if check.paused_holders_exempt
                else ""
            )
            + (f"; {round_.limit_hit}" if round_.limit_hit else "")
            + "."
        )
        for violation in round_.check.violations[:_LISTED]:
            mark = "not promised" if violation.kind in round_.not_promised else "VIOLATION"
            lines.append(f"  - {mark} `{violation.kind}`: {_cell(violation.detail)}")
        more = len(round_.check.violations) - _LISTED
        if more > 0:
            lines.append(f"  - ... {more} more (see the JSON report)")

    promised_lines: list[str] = []
    for backend in run.backends:
        promised_lines.append(f"- **{backend.backend}** ({backend.summary}): {backend.promise}.")
        for fault, kinds in backend.not_promised.items():
            reasons: dict[str, list[str]] = {}
            for kind, why in kinds.items():
                reasons.setdefault(why, []).append(kind)
            for why, names in reasons.items():
                promised_lines.append(
                    f"  - not promised under `{fault}`: {', '.join(names)}: {why}."
                )
    lines += ["", "### What each backend promises", "", *promised_lines]

    servers = ", ".join(f"{name} {version}" for name, version in env["servers"].items())
    lines += [
        "",
        "### Machine",
        "",
        f"- {env['cpus']} CPUs ({env['cpu']}), {env['kernel']}; load average at the end "
        f"(1, 5, 15 min): {', '.join(map(str, env.get('load_average', [])))}",
        f"- Python {env['python']}, tumbler {env['tumbler']}",
        f"- servers: {servers or 'none'}",
    ]
    return "\n".join(lines) + "\n"


def write_markdown(run: TortureRun, path: Path) -> None:
    """Write the Markdown report to ``path``: between the marker lines if the file has them
    (each alone on its line; a marker quoted in the text does not count), else all of it."""
    text = markdown(run)
    try:
        current = path.read_text()
    except FileNotFoundError:
        current = ""
    lines = current.splitlines(keepends=True)
    stripped = [line.strip() for line in lines]
    if BEGIN in stripped and END in stripped[stripped.index(BEGIN) :]:
        begin = stripped.index(BEGIN)
        end = stripped.index(END, begin)
        path.write_text("".join([*lines[: begin + 1], text, *lines[end:]]))
    else:
        path.write_text(text)


def summary_json(run: TortureRun) -> dict[str, Any]:
    """A short JSON summary: per round, the headline numbers."""
    return {
        round_.name: {
            "ok": round_.ok,
            "grants": round_.check.grants,
            "violations": len(round_.promised_violations),
            "exercised": round_.exercised,
        }
        for round_ in run.rounds
    }
