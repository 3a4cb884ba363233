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
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from psycopg import sql

from tumbler._core import Entry
from tumbler._url import parse_url
from tumbler.backends.postgresql.opener import open_sync
from tumbler.backends.postgresql.statements import Statements
from tumbler.testing.backends.postgresql.server import TUMBLER_DATABASE, PostgreSQLServer

from .grant_oracle import (
    LEASE,
    Request,
    Row,
    check_answer,
    entries_of,
    limits,
    lines,
    long_lines,
    requests,
    same_plan,
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
    """owner -> (seq, token, expires_at) of the name's rows."""
    query = sql.SQL(
        "SELECT owner, seq, token, expires_at FROM {}.tumbler_entries WHERE name = 'n'"
    ).format(sql.Identifier(schema))
    return {owner: tuple(rest) for owner, *rest in admin.execute(query).fetchall()}


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(line=lines, request=requests, limit=limits)
def test_the_grant_function_answers_as_the_rule_or_not_at_all(
    admin: psycopg.Connection[Any], schema: str, line: list[Row], request: Request, limit: int
) -> None:
    statements = Statements.of(schema)
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
                (row.owner, row.shared, limit if row.shared else 1, row.fair, row.granted),
            )
        before = _entries(admin, schema)
        answer = admin.execute(
            statements["grant"],
            {
                "key": 1,
                "name": "n",
                "owner": request.owner,
                "shared": request.shared,
                "lim": request.asked_limit,
                "fair": request.fair,
                "lease": LEASE,
                "holder": "test",
                "queue": request.queue,
                "ttl": 3.0,
                "client": "channel",
                "listener": 7,
                "stamp": 1,
                "max_waiters": 10_000,
            },
        ).fetchone()
        assert answer is not None
        after = _entries(admin, schema)
    *answered, full = answer
    assert not full  # a line never fills here
    entries = entries_of(line, limit, before, lambda owner: owner)
    check_answer(entries, request.owner, request, tuple(answered), before, after)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(case=long_lines())
def test_a_decision_reads_the_part_of_the_line_the_rule_looks_at(
    admin: psycopg.Connection[Any], schema: str, case: tuple[list[Any], Request]
) -> None:
    """The client decides a request the function sends back on the part of the line its
    ``line`` statement reads (each part found by an index, whatever the line's length):
    ``plan`` must answer on it as on the whole line."""
    rows, request = case
    statements = Statements.of(schema)
    with admin.transaction(force_rollback=True):
        for owner, shared, lim, fair, granted in rows:
            admin.execute(
                sql.SQL(
                    "INSERT INTO {}.tumbler_entries (name, owner, shared, lim, fair, token, "
                    "expires_at, holder) VALUES ('n', %s, %s, %s, %s, "
                    "CASE WHEN %s THEN nextval({}) END, "
                    "clock_timestamp() + interval '1 hour', 'test')"
                ).format(sql.Identifier(schema), sql.Literal(statements.tokens)),
                (owner, shared, lim, fair, granted),
            )
        full = admin.execute(
            sql.SQL(
                "SELECT owner, seq, shared, lim, fair, token FROM {}.tumbler_entries "
                "WHERE name = 'n' ORDER BY seq"
            ).format(sql.Identifier(schema))
        ).fetchall()
        part = admin.execute(
            statements["line"],
            {
                "name": "n",
                "owner": request.owner,
                "fair": request.fair,
                "shared": request.shared,
                "lim": request.asked_limit,
            },
        ).fetchall()
    same_plan(
        [Entry(*row) for row in full],
        [Entry(*row[:6]) for row in part],
        request.owner,
        request,
    )
