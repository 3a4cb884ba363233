"""docs/bad-input.md shows every case of the bad-input tables: the lock API's
(:mod:`tumbler.testing.conformance.bad_input`), the URL table (tests/backends/test_bad_urls.py)
and the command line's (tests/cli/test_bad_input.py)."""

from __future__ import annotations

import re
from pathlib import Path

from tumbler.testing.conformance.bad_input import (
    CASES,
    CHOICE_CALLS,
    CHOICES,
    LOCK_DELAY_CALLS,
    LOCK_DELAYS,
    NAME_CALLS,
    NAMES,
    NON_BLOCKING,
    NON_BLOCKING_TIMEOUTS,
    PERMITS,
    PERMITS_CALLS,
    REFUSED,
    SEGMENTS,
    SEGMENTS_CALLS,
    TIMEOUT_CALLS,
    TIMEOUTS,
    TTL_CALLS,
    TTLS,
    Input,
)

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "bad-input.md"


# -- the document -----------------------------------------------------------------------------

_ROW = re.compile(r"^\|\s*`(?P<id>[^`]+)`\s*\|(?P<rest>.*)\|\s*$")


def document_rows(section: str) -> dict[str, str]:
    """The rows of the tables under the heading ``section`` of docs/bad-input.md, by the case
    id in their first column (the rest of the row as text)."""
    text = DOCUMENT.read_text(encoding="utf-8")
    heading = re.search(rf"^##+ {re.escape(section)}\s*$", text, re.MULTILINE)
    assert heading is not None, f"docs/bad-input.md has no section {section!r}"
    body = text[heading.end() :]
    following = re.search(r"^## ", body, re.MULTILINE)
    body = body[: following.start()] if following else body
    rows: dict[str, str] = {}
    for line in body.splitlines():
        match = _ROW.match(line)
        if match:
            assert match["id"] not in rows, f"{match['id']} is shown twice in {section!r}"
            rows[match["id"]] = match["rest"]
    return rows


def check_section(section: str, cases: dict[str, str]) -> None:
    """The section shows exactly these case ids, each row naming its expected outcome."""
    rows = document_rows(section)
    assert sorted(rows) == sorted(cases), f"docs/bad-input.md, {section!r}"
    for case, outcome in cases.items():
        cell = f"| {outcome} |"
        assert cell in rows[case], f"docs/bad-input.md, {section!r}: {case} should say {outcome}"


def outcome(item: Input) -> str:
    return item.error.__name__ if item.error is not None else "works"


def test_the_document_shows_every_case() -> None:
    """docs/bad-input.md shows the inputs of every table, with the calls they are given to."""
    assert len({case.id for case in CASES}) == len(CASES), "case ids must be unique"
    assert len({group.id for group in REFUSED}) == len(REFUSED), "input ids must be unique"
    for section, inputs in (
        ("Lock names", NAMES),
        ("TTLs", TTLS),
        ("Timeouts", [*TIMEOUTS, *NON_BLOCKING_TIMEOUTS]),
        ("Lock-delays", LOCK_DELAYS),
        ("Permits", PERMITS),
        ("Segments", SEGMENTS),
        ("Chosen segments", CHOICES),
    ):
        check_section(section, {item.id: outcome(item) for item in inputs})
    text = DOCUMENT.read_text(encoding="utf-8")
    calls = [
        *NAME_CALLS,
        *TTL_CALLS,
        *TIMEOUT_CALLS,
        NON_BLOCKING,
        *LOCK_DELAY_CALLS,
        *PERMITS_CALLS,
    ]
    for call in [*calls, *SEGMENTS_CALLS, *CHOICE_CALLS]:
        assert f"`{call.text}`" in text, f"docs/bad-input.md does not name the call {call.text}"

    from tests.backends.test_bad_urls import BAD_URLS, SERVER_REFUSALS
    from tests.cli.test_bad_input import CLI_CASES

    check_section("Backend URLs", {case.id: case.error.__name__ for case in BAD_URLS})
    check_section(
        "Refused by the server", {case.id: case.error.__name__ for case in SERVER_REFUSALS}
    )
    check_section("The command line", {case.id: str(case.status) for case in CLI_CASES})
