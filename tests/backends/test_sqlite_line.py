"""The SQLite backend decides on part of a line (``_Line.relevant``): the same decisions as
``core.decide`` on the whole line, through a sequence of requests that change it, grants
leaving by a release or lapsing (kept for a lock-delay)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.search import examples
from tumbler import _core as core
from tumbler.backends.contract import GrantRequest
from tumbler.backends.sqlite.backend import _Line
from tumbler.errors import PermitsMismatch

KINDS = st.sampled_from([(False, 1), (True, 0), (True, 2), (True, 3)])  # (shared, limit)


@st.composite
def requests(draw: st.DrawFn) -> list[GrantRequest]:
    owners = [f"o{i}" for i in range(draw(st.integers(1, 8)))]
    made = []
    for _ in range(draw(st.integers(1, 30))):
        shared, limit = draw(KINDS)
        made.append(
            GrantRequest(
                "x", draw(st.sampled_from(owners)), shared, limit, draw(st.booleans()), 1.0, "t"
            )
        )
    return made


def decided(entries: list[core.Entry], request: GrantRequest) -> object:
    try:
        return core.decide(entries, request.owner, request.shared, request.limit, request.fair)
    except PermitsMismatch as error:
        return ("mismatch", str(error))


@settings(max_examples=examples(300), deadline=None)
@given(requests(), st.data())
def test_the_relevant_part_decides_as_the_whole_line(made, data):
    entries: list[core.Entry] = []  # the whole line, as the backend used to decide on it
    line = _Line([])
    seq = 0
    token = 0
    for request in made:
        whole = decided(entries, request)
        assert decided(line.relevant(request), request) == whole
        mine = next((entry for entry in entries if entry.owner == request.owner), None)
        if whole is core.Decision.GRANT:
            token += 1
            if mine is not None:
                entries[entries.index(mine)] = mine._replace(token=token)
                line.granted(mine, token)
            else:
                seq += 1
                entry = core.Entry(
                    request.owner, seq, request.shared, request.limit, request.fair, token
                )
                entries.append(entry)
                line.add(entry)
        elif whole is core.Decision.WAIT and mine is None:
            seq += 1
            entry = core.Entry(
                request.owner, seq, request.shared, request.limit, request.fair, None
            )
            entries.append(entry)
            line.add(entry)
        if data.draw(st.booleans(), label="a grant leaves"):
            grants = [entry for entry in entries if entry.granted]
            if grants:
                gone = data.draw(st.sampled_from(grants), label="which")
                if data.draw(st.booleans(), label="its lease runs out, kept for a lock-delay"):
                    entries[entries.index(gone)] = gone._replace(lapsed=True)
                else:
                    entries.remove(gone)
                # a release, or the next read after a lease ran out, is another transaction:
                # the line is read anew
                line = _Line(entries)
