"""The PostgreSQL backend's grant function, checked against ``tumbler._core`` on random lines.

``tumbler_grant`` (``tumbler.backends.postgresql.statements``) answers a grant request in the
server where the rule's answer needs only a glance at the line, and sends every other request
back "undecided", for the client to decide with ``_core.plan``. This property holds it to
the rule: for a random request against a random line of one lock name, an answer it gives is
``plan``'s decision, and the rows it leaves are the write ``plan`` names (a new grant, the
grant already held with its token, a waiter entry added or refreshed, nothing); an
"undecided" answer writes nothing. It also checks that the cases the function exists for are
answered rather than sent back: a free line, a grant held already, an exclusive request
behind another owner's grant.

Lines are written by hand, every entry live for far longer than an example runs. Real
PostgreSQL only (the session's ``postgresql_server``); each test has a schema of its own, and
each example runs in a transaction that is rolled back.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from psycopg import sql

from tumbler._core import Decision, Entry, Write, plan
from tumbler._url import parse_url
from tumbler.backends.postgresql.common import open_sync
from tumbler.backends.postgresql.server import TUMBLER_DATABASE, PostgreSQLServer
from tumbler.backends.postgresql.statements import Statements
from tumbler.errors import PermitsMismatch

OWNERS = ("o0", "o1", "o2", "o3", "o4")


@dataclass(frozen=True)
class Row:
    owner: str
    shared: bool
    limit: int
    fair: bool
    granted: bool


@dataclass(frozen=True)
class Request:
    owner: str
    shared: bool
    limit: int
    fair: bool
    queue: bool


def rows() -> st.SearchStrategy[list[Row]]:
    row = st.builds(
        Row,
        owner=st.sampled_from(OWNERS),
        shared=st.booleans(),
        limit=st.sampled_from((0, 2)),
        fair=st.booleans(),
        granted=st.booleans(),
    )
    return st.lists(row, max_size=5, unique_by=lambda r: r.owner)


def requests() -> st.SearchStrategy[Request]:
    return st.builds(
        Request,
        owner=st.sampled_from(OWNERS),
        shared=st.booleans(),
        limit=st.sampled_from((0, 2)),
        fair=st.booleans(),
        queue=st.booleans(),
    )


@pytest.fixture(scope="module")
def schema(postgresql_server: PostgreSQLServer) -> str:
    """A schema with the backend's tables and functions, made by the backend itself."""
    name = f"test_{uuid.uuid4().hex[:12]}"
    open_sync(parse_url(f"{postgresql_server.url}?schema={name}")).close()
    return name


@pytest.fixture(scope="module")
def admin(postgresql_server: PostgreSQLServer) -> Iterator[psycopg.Connection[Any]]:
    with postgresql_server.connect(TUMBLER_DATABASE) as connection:
        yield connection


def _entries(admin: psycopg.Connection[Any], schema: str) -> dict[str, tuple[Any, ...]]:
    """owner -> (seq, token, expires_at, shared) of the name's rows."""
    query = sql.SQL(
        "SELECT owner, seq, token, expires_at, shared FROM {}.tumbler_entries WHERE name = 'n'"
    ).format(sql.Identifier(schema))
    return {owner: rest for owner, *rest in admin.execute(query).fetchall()}


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(line=rows(), request=requests())
def test_the_grant_function_answers_as_the_rule_or_not_at_all(
    admin: psycopg.Connection[Any], schema: str, line: list[Row], request: Request
) -> None:
    statements = Statements.of(schema)
    # the shared rows of one name agree on their limit, as the rule keeps them
    limit = next((row.limit for row in line if row.shared), 0)
    line = [Row(r.owner, r.shared, limit if r.shared else 1, r.fair, r.granted) for r in line]
    with admin.transaction(force_rollback=True):
        table = sql.Identifier(schema)
        for row in line:
            admin.execute(
                sql.SQL(
                    "INSERT INTO {}.tumbler_entries (name, owner, shared, lim, fair, token, "
                    "expires_at, holder) VALUES ('n', %s, %s, %s, %s, "
                    "CASE WHEN %s THEN nextval({}) END, "
                    "clock_timestamp() + interval '1 hour', 'test')"
                ).format(table, sql.Literal(statements.tokens)),
                (row.owner, row.shared, row.limit, row.fair, row.granted),
            )
        before = _entries(admin, schema)
        entries = [
            Entry(owner, seq, shared, row.limit, row.fair, token)
            for row in line
            for owner, (seq, token, _, shared) in [(row.owner, before[row.owner])]
        ]
        entries.sort(key=lambda entry: entry.seq)
        answer = admin.execute(
            statements["grant"],
            {
                "key": 1,
                "name": "n",
                "owner": request.owner,
                "shared": request.shared,
                "lim": request.limit if request.shared else 1,
                "fair": request.fair,
                "lease": 30.0,
                "holder": "test",
                "queue": request.queue,
                "ttl": 3.0,
                "client": "channel",
                "listener": 7,
                "stamp": 1,
            },
        ).fetchone()
        assert answer is not None
        token, left, undecided = answer
        after = _entries(admin, schema)

    # what the function exists for is answered, not sent back
    mine_granted = any(e.owner == request.owner and e.granted for e in entries)
    others_hold = any(e.owner != request.owner and e.granted for e in entries)
    if undecided:
        event("undecided")
        assert entries
        assert not mine_granted
        assert request.shared or not others_hold
        assert after == before  # nothing written
        return
    try:
        expected = plan(
            entries,
            request.owner,
            request.shared,
            request.limit if request.shared else 1,
            request.fair,
            request.queue,
        )
    except PermitsMismatch:
        pytest.fail("answered a request the rule refuses")
    event(f"{expected.decision.value}, {expected.write.value}")
    mine = expected.mine
    if expected.decision is Decision.HELD:
        assert mine is not None
        assert token == mine.token
        assert 0 < left <= 30.0
        assert after == before
    elif expected.decision is Decision.GRANT:
        assert expected.write is Write.ADD_GRANT
        assert not before  # granted here only on a free line
        assert token is not None
        assert left == 30.0
        assert after[request.owner][1] == token
    else:
        assert token is None
        if expected.write is Write.ADD_WAITER:
            assert after[request.owner][1] is None
            assert {k: v for k, v in after.items() if k != request.owner} == before
        elif expected.write is Write.REFRESH_WAITER:
            assert mine is not None
            seq, waiting, expires_at, _ = after[request.owner]
            assert (seq, waiting) == (mine.seq, None)
            assert expires_at < before[request.owner][2]  # the waiter lease, not the hour
        else:
            assert expected.write is Write.NOTHING
            assert after == before
