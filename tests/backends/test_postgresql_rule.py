"""The PostgreSQL backend's grant function, checked against ``tumbler._core`` on random lines.

``tumbler_grant`` (``tumbler.backends.postgresql.statements``) answers a grant request in the
server where the rule's answer needs only a glance at the line, and sends every other request
back "undecided", for the client to decide with ``_core.plan``. This property holds it to
the rule: for a random request against a random line of one lock name, an answer it gives is
``plan``'s decision, and the rows it leaves are the write ``plan`` names (a new grant, the
grant already held with its token, a waiter entry added or refreshed, nothing); an
"undecided" answer writes nothing. It also checks that the cases the function exists for are
answered rather than sent back: a free line, a grant held already, an exclusive request
behind another owner's grant. Some grants of a line are lapsed (their lease over, kept for
a lock-delay): the rule counts them as grants, and their owners get nothing back.

Lines are written by hand, every entry live for far longer than an example runs (a lapsed
grant's row as long, its lease half an hour over). Real
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
from hypothesis import strategies as st
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

#: which owners' grants in a line are lapsed (an owner whose entry waits is unaffected)
lapsing = st.sets(st.sampled_from(("o0", "o1", "o2", "o3", "o4")), max_size=2)

#: a row's expiry and lock-delay: live for an hour, or a lapsed grant (its lease over half an
#: hour ago, its hour's delay not), whose row lives as long
_LIVE_OR_LAPSED = (
    "clock_timestamp() + CASE WHEN %(lapsed)s THEN interval '30 minutes' "
    "ELSE interval '1 hour' END, 'test', CASE WHEN %(lapsed)s THEN 3600 ELSE 0 END"
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
@given(line=lines, request=requests, limit=limits, lapsed=lapsing, delay=st.sampled_from((0, 5)))
def test_the_grant_function_answers_as_the_rule_or_not_at_all(
    admin: psycopg.Connection[Any],
    schema: str,
    line: list[Row],
    request: Request,
    limit: int,
    lapsed: set[str],
    delay: float,
) -> None:
    statements = Statements.of(schema)
    with admin.transaction(force_rollback=True):
        table = sql.Identifier(schema)
        for row in line:
            admin.execute(
                sql.SQL(
                    "INSERT INTO {}.tumbler_entries (name, owner, shared, lim, fair, token, "
                    "expires_at, holder, lock_delay) VALUES ('n', %(owner)s, %(shared)s, "
                    "%(lim)s, %(fair)s, CASE WHEN %(granted)s THEN nextval({}) END, "
                    + _LIVE_OR_LAPSED
                    + ")"
                ).format(table, sql.Literal(statements.tokens)),
                {
                    "owner": row.owner,
                    "shared": row.shared,
                    "lim": limit if row.shared else 1,
                    "fair": row.fair,
                    "granted": row.granted,
                    "lapsed": row.granted and row.owner in lapsed,
                },
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
                "lock_delay": delay,
            },
        ).fetchone()
        assert answer is not None
        after = _entries(admin, schema)
        delays = dict(
            admin.execute(
                sql.SQL("SELECT owner, lock_delay FROM {}.tumbler_entries").format(
                    sql.Identifier(schema)
                )
            ).fetchall()
        )
    *answered, full = answer
    assert not full  # a line never fills here
    entries = [
        entry._replace(lapsed=entry.granted and entry.owner in lapsed)
        for entry in entries_of(line, limit, before, lambda owner: owner)
    ]
    check_answer(entries, request.owner, request, tuple(answered), before, after)
    if answered[0] is not None:
        # a grant made or taken up keeps the delay asked
        assert delays[request.owner] == delay


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(case=long_lines(), lapsed=st.sets(st.sampled_from([f"o{i}" for i in range(12)])))
def test_a_decision_reads_the_part_of_the_line_the_rule_looks_at(
    admin: psycopg.Connection[Any],
    schema: str,
    case: tuple[list[Any], Request],
    lapsed: set[str],
) -> None:
    """The client decides a request the function sends back on the part of the line its
    ``line`` statement reads (each part found by an index, whatever the line's length), and
    tells lapsed grants from live ones: ``plan`` must answer on it as on the whole line."""
    rows, request = case
    statements = Statements.of(schema)
    with admin.transaction(force_rollback=True):
        for owner, shared, lim, fair, granted in rows:
            admin.execute(
                sql.SQL(
                    "INSERT INTO {}.tumbler_entries (name, owner, shared, lim, fair, token, "
                    "expires_at, holder, lock_delay) VALUES ('n', %(owner)s, %(shared)s, "
                    "%(lim)s, %(fair)s, CASE WHEN %(granted)s THEN nextval({}) END, "
                    + _LIVE_OR_LAPSED
                    + ")"
                ).format(sql.Identifier(schema), sql.Literal(statements.tokens)),
                {
                    "owner": owner,
                    "shared": shared,
                    "lim": lim,
                    "fair": fair,
                    "granted": granted,
                    "lapsed": granted and owner in lapsed,
                },
            )
        full = admin.execute(
            sql.SQL(
                "SELECT owner, seq, shared, lim, fair, token, lock_delay > 0 "
                "FROM {}.tumbler_entries WHERE name = 'n' ORDER BY seq"
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
    same_plan([Entry(*row) for row in full], [Entry(*row) for row in part], request.owner, request)
