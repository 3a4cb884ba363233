"""The grant rule of backends whose grants follow from a line's order (ZooKeeper).

``line_position`` must give the same safety as ``decide`` (never two exclusive holders, never
more than ``permits`` semaphore holders, never a reader beside a writer) and its watch target
must be such that a waiter cannot wait for ever: whenever the line changes so that the waiter
could be granted, the thing it watches has changed too.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.search import examples
from tumbler._core import WATCH_LINE, Entry, admits, line_position


def _entry(kind: str, seq: int, permits: int) -> Entry:
    shared = kind != "x"
    limit = 1 if kind == "x" else (0 if kind == "r" else permits)
    return Entry(f"owner{seq}", seq, shared, limit, True, None)


@st.composite
def lines(draw: st.DrawFn) -> list[Entry]:
    """A line of one name: mutexes/writers with readers, or one semaphore's entries."""
    if draw(st.booleans()):
        permits = draw(st.integers(1, 4))
        kinds = ["s"] * draw(st.integers(1, 10))
    else:
        permits = 0
        kinds = draw(st.lists(st.sampled_from(["x", "r"]), min_size=1, max_size=10))
    return [_entry(kind, seq, permits) for seq, kind in enumerate(kinds)]


def granted(line: list[Entry]) -> list[int]:
    return [i for i in range(len(line)) if line_position(line, i) is None]


@settings(max_examples=examples(300))
@given(lines())
def test_granted_entries_are_compatible(line: list[Entry]) -> None:
    holders = [line[i] for i in granted(line)]
    if any(not entry.shared for entry in holders):
        assert len(holders) == 1
    for entry in holders:
        if entry.limit:
            assert len(holders) <= entry.limit


@settings(max_examples=examples(300))
@given(lines())
def test_the_head_of_the_line_is_always_granted(line: list[Entry]) -> None:
    assert 0 in granted(line)


@settings(max_examples=examples(300))
@given(lines())
def test_the_line_is_served_in_order(line: list[Entry]) -> None:
    # a waiter never holds while an earlier entry of the same kind waits
    holders = set(granted(line))
    for i in holders:
        for j in range(i):
            if line[j].shared == line[i].shared and line[j].limit == line[i].limit:
                assert j in holders


@settings(max_examples=examples(500))
@given(lines(), st.data())
def test_a_waiter_is_woken_by_every_change_that_can_let_it_through(
    line: list[Entry], data: st.DataObject
) -> None:
    waiters = [i for i in range(len(line)) if line_position(line, i) is not None]
    if not waiters:
        return
    index = data.draw(st.sampled_from(waiters))
    target = line_position(line, index)
    assert target is not None
    assert target < index
    # any entry ahead leaves; if that lets the waiter through, its watch must have fired
    leaving = data.draw(st.integers(0, index - 1))
    rest = line[:leaving] + line[leaving + 1 :]
    mine = rest.index(line[index])
    now_target = line_position(rest, mine)
    lets_through = admits(rest[:mine], line[index].shared, line[index].limit)
    # a semaphore waiter that became the first waiter must start watching the line
    must_wake = lets_through or (now_target == WATCH_LINE != target)
    if must_wake and target != WATCH_LINE:  # a line watch fires on every change
        # the watched entry left, or (a semaphore predecessor) is now granted and says so
        watched = line[target]
        assert watched not in rest or line_position(rest, rest.index(watched)) is None


@pytest.mark.parametrize(
    ("kinds", "index", "expected"),
    [
        ("x", 0, None),
        ("xx", 1, 0),
        ("xrr", 2, 0),  # a reader watches the writer ahead, not its predecessor
        ("xrxr", 3, 2),  # the nearest writer
        ("rrx", 2, 1),  # a writer watches its predecessor
        ("rr", 1, None),
    ],
)
def test_what_a_waiter_watches(kinds: str, index: int, expected: int | None) -> None:
    line = [_entry(kind, seq, 0) for seq, kind in enumerate(kinds)]
    assert line_position(line, index) == expected


def test_semaphore_waiters_watch_the_holders_or_their_predecessor() -> None:
    line = [_entry("s", seq, 2) for seq in range(5)]
    assert [line_position(line, i) for i in range(5)] == [None, None, WATCH_LINE, 2, 3]
