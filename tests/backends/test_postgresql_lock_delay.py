"""postgresql://: lock-delay as the tables keep it. A grant's row outlives its lease by its
``lock_delay`` (``expires_at`` is the lease's end plus the delay), so what drops rows whose
time is past (a decision's clean-up of its name, the sweep, a client of an older version)
leaves a lapsed grant be; every way a grant is made keeps the delay asked (a grant a release
hands over from its take-up on); a schema made before the column existed gains it, its rows
reading as no delay; a delay tumbler never writes makes its entry unreadable.

A lease is made to have run out by moving its row's times back (the delay left unchanged),
not by waiting for it. The suite's one server; a schema per test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

import tumbler
from tumbler.backends.contract import GrantRequest, Renewal
from tumbler.backends.kit.owners import owner_hash
from tumbler.testing.backends.postgresql.server import TUMBLER_DATABASE, PostgreSQLServer
from tumbler.testing.conformance.compat import PATIENCE

#: a delay no case waits out
DELAY = 600.0
TTL = 30.0


def request(
    name: str, owner: str, *, lock_delay: float = 0.0, shared: bool = False, limit: int = 1
) -> GrantRequest:
    return GrantRequest(name, owner, shared, limit, False, TTL, "test", lock_delay=lock_delay)


@pytest.fixture
def schema() -> str:
    return f"test_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def url(postgresql_server: PostgreSQLServer, schema: str) -> str:
    return f"{postgresql_server.url}?schema={schema}"


@pytest.fixture
def admin(postgresql_server: PostgreSQLServer) -> Iterator[psycopg.Connection[Any]]:
    """The superuser, in the tests' database: to look at and change the rows as another
    program would."""
    with postgresql_server.connect(TUMBLER_DATABASE) as connection:
        yield connection


@pytest.fixture
def locks(url: str) -> Iterator[tumbler.Locks]:
    with tumbler.connect(url) as made:
        yield made


@pytest.fixture
def other(url: str) -> Iterator[tumbler.Locks]:
    with tumbler.connect(url) as made:
        yield made


def entries(schema: str) -> sql.Composed:
    return sql.SQL("{}.tumbler_entries").format(sql.Identifier(schema))


def kept(
    admin: psycopg.Connection[Any], schema: str, name: str, owner: str
) -> tuple[int | None, float, float]:
    """``owner``'s entry of ``name``: its token, the seconds left on its lease, its delay."""
    row = admin.execute(
        sql.SQL(
            "SELECT token, extract(epoch FROM expires_at - lock_delay * interval '1 second' "
            "- clock_timestamp())::float8, lock_delay FROM {} WHERE name = %s AND owner = %s"
        ).format(entries(schema)),
        (name, owner_hash(owner)),
    ).fetchone()
    assert row is not None, f"{owner} has no entry of {name}"
    return row[0], row[1], row[2]


def rows(admin: psycopg.Connection[Any], schema: str, name: str) -> list[tuple[Any, ...]]:
    return admin.execute(
        sql.SQL(
            "SELECT owner, token, expires_at, lock_delay FROM {} WHERE name = %s ORDER BY seq"
        ).format(entries(schema)),
        (name,),
    ).fetchall()


def run_out(admin: psycopg.Connection[Any], schema: str, name: str, owner: str) -> None:
    """Make ``owner``'s lease of ``name`` have ended a second ago, as if its holder had stopped
    renewing; the delay left is what it was, less the lease."""
    changed = admin.execute(
        sql.SQL(
            "UPDATE {} SET expires_at = expires_at - ((expires_at - lock_delay * interval "
            "'1 second') - clock_timestamp() + interval '1 second') WHERE name = %s AND owner = %s"
        ).format(entries(schema)),
        (name, owner_hash(owner)),
    ).rowcount
    assert changed == 1


# -- every way to a grant keeps its delay ----------------------------------------------------


def _handed_over(locks: tumbler.Locks, other: tumbler.Locks, *, lock_delay: float) -> None:
    """``locks`` takes "x" as "a"; ``other`` queues as "b" (listening), asking for
    ``lock_delay``; "a" releases, which hands the lock to "b", whose wake-up has come."""
    holder, waiter = locks._backend, other._backend
    assert holder.try_grant(request("x", "a")) is not None
    with waiter.watch("x", "b") as watch:
        assert waiter.try_grant(request("x", "b", lock_delay=lock_delay)) is None
        assert holder.release("x", "a")
        watch.wait(PATIENCE)


def test_a_grant_on_a_free_name_keeps_its_delay(locks, admin, schema):
    assert locks._backend.try_grant(request("x", "a", lock_delay=DELAY)) is not None
    token, lease_left, delay = kept(admin, schema, "x", "a")
    assert delay == DELAY
    assert TTL - PATIENCE < lease_left <= TTL
    (holder,) = locks.status("x").holders
    assert holder.token == token
    assert TTL - PATIENCE < holder.expires_in <= TTL  # the lease left, not the row's


def test_grants_decided_in_the_client_keep_their_delay_and_waiters_keep_none(
    locks, other, admin, schema
):
    """A shared request comes back undecided: the client adds its grant, or grants its
    waiter, by the rule."""
    one, two = locks._backend, other._backend
    assert one.try_grant(request("s", "a", lock_delay=DELAY, shared=True, limit=2))
    assert two.try_grant(request("s", "b", lock_delay=DELAY, shared=True, limit=2))
    assert two.try_grant(request("s", "c", lock_delay=DELAY, shared=True, limit=2)) is None
    assert kept(admin, schema, "s", "b")[2] == DELAY
    assert kept(admin, schema, "s", "c")[2] == 0  # a waiter: no grant to lose yet
    assert one.release("s", "a")
    assert two.try_grant(request("s", "c", lock_delay=DELAY, shared=True, limit=2))
    token, lease_left, delay = kept(admin, schema, "s", "c")
    assert token is not None
    assert delay == DELAY
    assert TTL - PATIENCE < lease_left <= TTL


@pytest.mark.parametrize("how", ["its wake-up", "asking"])
def test_a_grant_handed_over_keeps_its_delay_from_its_take_up(locks, other, admin, schema, how):
    _handed_over(locks, other, lock_delay=DELAY)
    handed, _, delay = kept(admin, schema, "x", "b")
    assert handed is not None
    assert delay == 0  # not taken up: its waiter has nothing to lose yet
    waiter = other._backend
    if how == "asking":  # as if its wake-up had not come: the server finds the grant
        assert waiter.wakeups.handoffs.take("x", owner_hash("b")) is not None
    grant = waiter.try_grant(request("x", "b", lock_delay=DELAY))
    assert grant is not None
    assert grant.token == handed
    _, lease_left, delay = kept(admin, schema, "x", "b")
    assert delay == DELAY
    assert TTL - PATIENCE < lease_left <= TTL


def test_a_grant_handed_over_that_is_never_taken_up_ends_with_no_delay(locks, other, admin, schema):
    _handed_over(locks, other, lock_delay=DELAY)
    run_out(admin, schema, "x", "b")  # its waiter died before it took the grant up
    state = locks.status("x")
    assert state.holders == state.lapsed == ()
    assert locks._backend.try_grant(request("x", "c")) is not None


# -- a lapsed grant ---------------------------------------------------------------------------


def test_no_clean_up_of_rows_whose_time_is_past_removes_a_lapsed_grant(locks, other, admin, schema):
    one, two = locks._backend, other._backend
    assert one.try_grant(request("x", "a", lock_delay=DELAY)) is not None
    run_out(admin, schema, "x", "a")
    (row,) = rows(admin, schema, "x")
    # others' tries, answered in the server (exclusive) and decided in the client (shared),
    # each of which deletes the name's expired rows first; the sweep of every name:
    assert two.try_grant(request("x", "b")) is None
    assert two.try_grant(request("x", "c", shared=True, limit=0)) is None
    two.pool.run(two._sweep, idempotent=True)
    # and how an older version deletes expired rows, at each decision and in its sweep
    admin.execute(
        sql.SQL(
            "DELETE FROM {} WHERE name = 'x' AND (expires_at <= now() "
            "OR expires_at > clock_timestamp() + interval '1 day')"
        ).format(entries(schema))
    )
    admin.execute(
        sql.SQL("DELETE FROM {} WHERE expires_at <= clock_timestamp()").format(entries(schema))
    )
    assert rows(admin, schema, "x")[0] == row
    state = locks.status("x")
    assert state.holders == ()
    (lapsed,) = state.lapsed
    assert lapsed.token == row[1]
    assert DELAY - 1 - PATIENCE < lapsed.expires_in <= DELAY - 1  # the delay left
    assert state.waiters == 2  # b's and c's: behind it


@pytest.mark.parametrize("shared", [False, True], ids=["mutex", "semaphore"])
def test_its_owner_can_neither_renew_release_nor_take_up_a_lapsed_grant(
    locks, admin, schema, shared
):
    backend = locks._backend
    asked = request("x", "a", lock_delay=DELAY, shared=shared, limit=2 if shared else 1)
    assert backend.try_grant(asked) is not None
    assert backend.try_grant(request("y", "a", lock_delay=DELAY)) is not None
    run_out(admin, schema, "x", "a")
    (row,) = rows(admin, schema, "x")
    # answered in the server for a mutex, decided in the client for a semaphore: no grant,
    # and nothing written
    assert backend.try_grant(asked) is None
    assert backend.renew("x", "a", TTL) is None
    assert backend.renew_all([Renewal("y", "a", TTL), Renewal("x", "a", TTL)], 5.0) == [
        TTL,
        None,
    ]
    assert backend.release("x", "a") is False
    assert rows(admin, schema, "x") == [row]
    # the live one was renewed, its delay kept after its new lease
    _, lease_left, delay = kept(admin, schema, "y", "a")
    assert delay == DELAY
    assert TTL - PATIENCE < lease_left <= TTL
    assert backend.release("y", "a") is True
    assert rows(admin, schema, "y") == []


def test_a_force_release_ends_a_delay_but_counts_and_notes_only_live_grants(locks, admin, schema):
    backend = locks._backend
    assert backend.try_grant(request("s", "a", lock_delay=DELAY, shared=True, limit=2))
    assert backend.try_grant(request("s", "b", lock_delay=DELAY, shared=True, limit=2))
    run_out(admin, schema, "s", "a")
    assert backend.force_release("s", "forced by a test") == 1
    assert backend.evicted("s", "b") == "forced by a test"
    assert backend.evicted("s", "a") is None  # its grant had ended by itself already
    assert rows(admin, schema, "s") == []


# -- the column: older schemas, and values tumbler never writes ------------------------------


def _overloads(admin: psycopg.Connection[Any], schema: str) -> int:
    row = admin.execute(
        "SELECT count(*) FROM pg_proc WHERE pronamespace = to_regnamespace(%s) "
        "AND proname = 'tumbler_grant'",
        (sql.Identifier(schema).as_string(admin),),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_schema_made_before_the_column_gains_it_and_its_rows_keep_no_delay(url, admin, schema):
    tumbler.connect(url).close()
    # what an earlier version's schema is: no column, its grant function without the delay
    previous = (
        "{}.tumbler_grant(bigint, text, text, boolean, integer, boolean, float8, text, "
        "boolean, float8, text, bigint, bigint, integer)"
    )
    table = sql.Identifier(schema)
    admin.execute(sql.SQL("ALTER TABLE {}.tumbler_entries DROP COLUMN lock_delay").format(table))
    admin.execute(sql.SQL("COMMENT ON SCHEMA {} IS NULL").format(table))
    admin.execute(
        sql.SQL("CREATE FUNCTION " + previous + " RETURNS void LANGUAGE sql AS ''").format(table)
    )
    admin.execute(
        sql.SQL(
            "INSERT INTO {} (name, owner, shared, lim, fair, token, expires_at, holder) "
            "VALUES ('old', %s, false, 1, false, 1, clock_timestamp() + interval '30 seconds', "
            "'an older tumbler')"
        ).format(entries(schema)),
        (owner_hash("o"),),
    )
    assert _overloads(admin, schema) == 2
    with tumbler.connect(url) as locks:
        assert _overloads(admin, schema) == 1
        backend = locks._backend
        assert kept(admin, schema, "old", "o")[2] == 0
        (holder,) = locks.status("old").holders
        assert holder.holder == "an older tumbler"
        assert backend.renew("old", "o", TTL) == TTL
        run_out(admin, schema, "old", "o")
        state = locks.status("old")
        assert state.holders == state.lapsed == ()  # over with its lease: no delay
        assert backend.try_grant(request("old", "n")) is not None
        # and the schema keeps delays from now on
        assert backend.try_grant(request("new", "n", lock_delay=DELAY)) is not None
        run_out(admin, schema, "new", "n")
        assert len(locks.status("new").lapsed) == 1


@pytest.mark.parametrize("delay", ["-1", "3601", "NaN", "Infinity", "-Infinity"])
def test_a_lock_delay_tumbler_never_writes_makes_its_entry_unreadable(locks, admin, schema, delay):
    """Skipped and counted by ``status``, dropped by the next decision, and no statement
    that meets it fails on its arithmetic (NaN and infinity take none)."""
    locks.lock("x").acquire(timeout=0)  # the schema is made
    locks.force_release("x")

    def write() -> None:
        admin.execute(
            sql.SQL(
                "INSERT INTO {} (name, owner, shared, lim, fair, token, expires_at, holder, "
                "lock_delay) VALUES ('x', %s, false, 1, false, 7, "
                "clock_timestamp() + interval '1 hour', 'by hand', %s::float8)"
            ).format(entries(schema)),
            (owner_hash("x"), delay),
        )

    write()
    backend = locks._backend
    state = locks.status("x")
    assert (state.malformed, state.holders, state.lapsed) == (1, (), ())
    backend.renew("x", "x", TTL)  # whatever it answers, it answers
    assert backend.renew_all([Renewal("x", "x", TTL)], 5.0) in ([TTL], [None])
    lock = locks.lock("x")
    assert lock.acquire(timeout=0)
    assert locks.status("x").malformed == 0
    lock.release()
    assert rows(admin, schema, "x") == []
    write()
    assert locks.force_release("x") == 0  # nothing live; the row is gone
    assert rows(admin, schema, "x") == []
