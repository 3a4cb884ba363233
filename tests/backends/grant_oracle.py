"""One oracle for the SQL backends' grant routines (PostgreSQL's function, MySQL's procedure):
each answers a grant request in the server where the rule's answer is plain, and sends every
other request back "undecided", for the client to decide with ``_core.plan``.

A test writes a random ``line`` of one name's entries, reads the name's rows (``before``),
runs the routine for a random ``request``, reads the rows again (``after``) and hands all of
it to :func:`check_answer`, which holds the answer to the rule: an answer given is ``plan``'s
decision, and the rows left are the write ``plan`` names; an "undecided" answer writes
nothing; the cases the routine exists for (a free line, a grant held already, an exclusive
request behind another owner's grant) are answered. The leases the tests use: 30 s asked, a
3 s waiter lease, and an hour for the hand-written rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import event
from hypothesis import strategies as st

from tumbler._core import Decision, Entry, Write, plan
from tumbler.errors import PermitsMismatch

#: the lease every request asks for
LEASE = 30.0
OWNERS = ("o0", "o1", "o2", "o3", "o4")


@dataclass(frozen=True)
class Row:
    """A hand-written entry of the line (its limit is the line's, for a shared one)."""

    owner: str
    shared: bool
    fair: bool
    granted: bool


@dataclass(frozen=True)
class Request:
    owner: str
    shared: bool
    limit: int
    fair: bool
    queue: bool

    @property
    def asked_limit(self) -> int:
        return self.limit if self.shared else 1


#: the lines: the shared rows of one name agree on their limit (``limits``), as the rule
#: keeps them
lines = st.lists(
    st.builds(
        Row,
        owner=st.sampled_from(OWNERS),
        shared=st.booleans(),
        fair=st.booleans(),
        granted=st.booleans(),
    ),
    max_size=5,
    unique_by=lambda row: row.owner,
)
limits = st.sampled_from((0, 2))
requests = st.builds(
    Request,
    owner=st.sampled_from(OWNERS),
    shared=st.booleans(),
    limit=limits,
    fair=st.booleans(),
    queue=st.booleans(),
)


def entries_of(
    line: Sequence[Row], limit: int, before: Mapping[str, tuple[Any, ...]], owner: Any
) -> list[Entry]:
    """The line as the rule sees it, in arrival order: ``before`` maps a stored owner to
    (seq, token, expires_at); ``owner(row.owner)`` is how the routine stores it."""
    found = [
        Entry(
            owner(row.owner),
            before[owner(row.owner)][0],
            row.shared,
            limit if row.shared else 1,
            row.fair,
            before[owner(row.owner)][1],
        )
        for row in line
    ]
    return sorted(found, key=lambda entry: entry.seq)


def check_answer(
    entries: Sequence[Entry],
    me: str,
    request: Request,
    answer: tuple[Any, ...],
    before: Mapping[str, tuple[Any, ...]],
    after: Mapping[str, tuple[Any, ...]],
) -> None:
    """Hold one answer ``(token, lease left, undecided)`` for owner ``me`` (as stored) to the
    rule; ``before`` and ``after`` map each stored owner to (seq, token, expires_at)."""
    token, left, undecided = answer
    mine_granted = any(e.owner == me and e.granted for e in entries)
    others_hold = any(e.owner != me and e.granted for e in entries)
    if undecided:
        event("undecided")
        assert entries  # a free line is answered
        assert not mine_granted  # so is a grant held already
        assert request.shared or not others_hold  # and an exclusive request behind one
        assert after == before  # nothing written
        return
    try:
        expected = plan(
            entries, me, request.shared, request.asked_limit, request.fair, request.queue
        )
    except PermitsMismatch:
        pytest.fail("answered a request the rule refuses")
    event(f"{expected.decision.value}, {expected.write.value}")
    mine = expected.mine
    if expected.decision is Decision.HELD:
        # taken up: the lease asked for, from now (a release may have handed it over on the
        # waiter's short lease); nothing else changes
        assert mine is not None
        assert token == mine.token
        assert left == LEASE
        assert after[me][:2] == before[me][:2]
        assert {o: e for o, e in after.items() if o != me} == {
            o: e for o, e in before.items() if o != me
        }
    elif expected.decision is Decision.GRANT:
        assert expected.write is Write.ADD_GRANT
        assert not before  # granted here only on a free line
        assert token is not None
        assert left == LEASE
        assert after[me][1] == token
    else:
        assert token is None
        if expected.write is Write.ADD_WAITER:
            assert after[me][1] is None
            assert {k: v for k, v in after.items() if k != me} == before
        elif expected.write is Write.REFRESH_WAITER:
            assert mine is not None
            seq, waiting, expires_at = after[me]
            assert (seq, waiting) == (mine.seq, None)
            assert expires_at < before[me][2]  # the waiter lease, not the hour
        else:
            assert expected.write is Write.NOTHING
            assert after == before


#: longer lines for the part of a line a decision reads (``line`` statements): more waiters
#: ahead of a request than it has permits, and now and then a shared entry whose permit
#: count clashes with the others'
@st.composite
def long_lines(draw: st.DrawFn) -> tuple[list[tuple[str, bool, int, bool, bool]], Request]:
    """``(owner, shared, limit, fair, granted)`` rows in arrival order, and a request."""
    limit = draw(st.sampled_from((0, 1, 2, 3)))
    count = draw(st.integers(0, 12))
    # a line of one kind (a semaphore's, or a read lock's readers) or mixed; of fair entries
    # or mixed; with grants, or none (a line freed, whose waiters are left)
    kinds = draw(st.sampled_from(("shared", "mixed")))
    fairness = draw(st.sampled_from(("fair", "mixed")))
    granting = draw(st.sampled_from((0, 4)))
    rows = []
    for index in range(count):
        shared = kinds == "shared" or draw(st.booleans())
        lim = limit if shared else 1
        if shared and draw(st.integers(0, 15)) == 0:
            lim = limit + 1
        fair = fairness == "fair" or draw(st.booleans())
        granted = granting > 0 and draw(st.integers(1, granting)) == 1
        rows.append((f"o{index}", shared, lim, fair, granted))
    owner = draw(st.sampled_from([f"o{index}" for index in range(count + 1)]))
    request = Request(
        owner,
        shared=draw(st.booleans()),
        limit=draw(st.sampled_from((0, 1, 2, 3))),
        fair=draw(st.booleans()),
        queue=draw(st.booleans()),
    )
    return rows, request


def same_plan(full: Sequence[Entry], part: Sequence[Entry], owner: str, request: Request) -> None:
    """``plan`` gives the same answer on the part of the line a decision read as on the
    whole line (or refuses both with ``PermitsMismatch``)."""
    outcomes = []
    for line in (full, part):
        try:
            made = plan(
                line, owner, request.shared, request.asked_limit, request.fair, request.queue
            )
        except PermitsMismatch:
            outcomes.append(None)
            continue
        outcomes.append((made.decision, made.write, made.mine))
    assert outcomes[0] == outcomes[1]
