"""``_core.let_through``: whom a change to a line lets through, in one pass.

The oracle is the grant rule itself: ``decide`` asked for each waiter in arrival order, each
one granted counting as a grant for those behind it (what releases computed before, at a cost
that grew with the square of the line). The pass must give the oracle's answer for every
waiter up to the first one the oracle keeps waiting, and stop there; on a line of fair
waiters that is the oracle's whole answer. Lines are drawn with grants anywhere in the line
(a barging grant arrives after waiters), kinds mixed, fair and not, and now and then a
permit count that clashes with the others' (which the rule refuses).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.search import examples
from tumbler._core import Decision, Entry, decide, let_through
from tumbler.errors import PermitsMismatch

KINDS = st.sampled_from(["x", "r", "s"])


@st.composite
def lines(draw: st.DrawFn, fair: bool | None = None, size: int = 12) -> list[Entry]:
    permits = draw(st.integers(1, 4))
    clash = draw(st.integers(0, 9)) == 0  # one semaphore entry with another permit count
    count = draw(st.integers(0, size))
    line = []
    for seq in range(count):
        kind = draw(KINDS)
        shared = kind != "x"
        limit = 1 if kind == "x" else 0 if kind == "r" else permits
        if clash and kind == "s" and draw(st.booleans()):
            limit = permits + 1
        token = seq + 100 if draw(st.integers(0, 3)) == 0 else None
        is_fair = draw(st.booleans()) if fair is None else fair
        line.append(Entry(f"o{seq}", seq * 3, shared, limit, is_fair, token))
    return line


def oracle(line: list[Entry]) -> list[int]:
    """The waiters the rule lets through, by ``decide`` for each in turn."""
    line = list(line)
    through = []
    for index, entry in enumerate(line):
        if entry.granted:
            continue
        try:
            decision = decide(line, entry.owner, entry.shared, entry.limit, entry.fair)
        except PermitsMismatch:
            continue
        if decision is Decision.GRANT:
            line[index] = entry._replace(token=0)
            through.append(index)
    return through


def head(line: list[Entry], through: list[int]) -> list[int]:
    """``through`` up to the first waiter it leaves out."""
    kept = []
    for index, entry in enumerate(line):
        if entry.granted:
            continue
        if index not in through:
            break
        kept.append(index)
    return kept


@settings(max_examples=examples(2000), deadline=None)
@given(lines())
def test_the_pass_is_the_rule_up_to_the_first_waiter_that_cannot_go(line: list[Entry]) -> None:
    through, _ = let_through(line)
    assert through == head(line, oracle(line))


@settings(max_examples=examples(1000), deadline=None)
@given(lines(fair=True))
def test_on_a_fair_line_the_pass_is_the_whole_rule(line: list[Entry]) -> None:
    assert let_through(line)[0] == oracle(line)


@settings(max_examples=examples(1000), deadline=None)
@given(lines(), st.data())
def test_a_complete_pass_is_not_changed_by_more_of_the_line(
    line: list[Entry], data: st.DataObject
) -> None:
    """What lets a backend read only the head of a line: a complete answer stays the same
    whatever waiters come behind; an incomplete one let every waiter it was given through."""
    through, complete = let_through(line)
    if not complete:
        assert through == [i for i, entry in enumerate(line) if not entry.granted]
        return
    more = data.draw(lines())
    behind = [
        entry._replace(owner=f"behind{i}", seq=1000 + i, token=None) for i, entry in enumerate(more)
    ]
    # a waiter behind may clash with the line's permit count; the rule then refuses every
    # shared waiter, which the head read before it cannot know: only clash-free tails here
    limits = {entry.limit for entry in line + behind if entry.shared}
    if len(limits) <= 1:
        assert let_through(line + behind)[0] == through


def test_a_mutex_lets_one_waiter_through() -> None:
    line = [Entry(f"o{i}", i, False, 1, True, None) for i in range(5000)]
    assert let_through(line) == ([0], True)


def test_a_read_lock_lets_the_run_of_readers_through() -> None:
    reader = Entry("", 0, True, 0, True, None)
    line = [reader._replace(owner=f"r{i}", seq=i) for i in range(3)]
    line.append(Entry("w", 3, False, 1, True, None))
    line += [reader._replace(owner=f"r{i}", seq=i) for i in range(4, 9)]
    assert let_through(line) == ([0, 1, 2], True)


def test_a_semaphore_lets_as_many_through_as_it_has_free_permits() -> None:
    holder = Entry("h", 0, True, 3, True, 7)
    line = [holder] + [Entry(f"o{i}", i, True, 3, True, None) for i in range(1, 50)]
    assert let_through(line) == ([1, 2], True)
    assert let_through(line[:2]) == ([1], False)  # room for more than it was given
