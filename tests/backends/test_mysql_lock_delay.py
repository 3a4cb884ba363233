"""mysql://, mariadb://: lock-delay as the tables keep it, on real MariaDB. A grant's row
outlives its lease by its ``lock_delay`` (``expires_at`` is the lease's end plus the delay), so
what drops rows whose time is past (a decision's clean-up of its name, the sweep, a client of
an older version) leaves a lapsed grant be; every way a grant is made keeps the delay asked
(a grant a release hands over from its take-up on); tables made before the column existed
gain it, their rows reading as no delay. (A delay tumbler never writes is among the unusable
entries of ``test_mysql.py``.)

A lease is made to have run out by moving its row's times back (the delay left unchanged),
not by waiting for it. The suite's one server; a table prefix per test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import tumbler
from tumbler.backends.contract import GrantRequest, Renewal
from tumbler.backends.kit.owners import owner_hash
from tumbler.testing.backends.mysql.server import TUMBLER_DATABASE, MariaDBServer
from tumbler.testing.conformance.compat import PATIENCE

#: a delay no case waits out
DELAY = 600.0
TTL = 30.0


def request(
    name: str, owner: str, *, lock_delay: float = 0.0, shared: bool = False, limit: int = 1
) -> GrantRequest:
    return GrantRequest(name, owner, shared, limit, False, TTL, "test", lock_delay=lock_delay)


@pytest.fixture
def prefix() -> str:
    return f"d{uuid.uuid4().hex[:10]}_"


@pytest.fixture
def url(mariadb_server: MariaDBServer, prefix: str) -> str:
    return f"{mariadb_server.url}?table_prefix={prefix}"


@pytest.fixture
def admin(mariadb_server: MariaDBServer) -> Iterator[Any]:
    """The superuser, in the tests' database: to look at and change the rows as another
    program would."""
    with mariadb_server.connect(TUMBLER_DATABASE) as connection, connection.cursor() as cursor:
        yield cursor


@pytest.fixture
def locks(url: str) -> Iterator[tumbler.Locks]:
    with tumbler.connect(url) as made:
        yield made


@pytest.fixture
def other(url: str) -> Iterator[tumbler.Locks]:
    with tumbler.connect(url) as made:
        yield made


def kept(admin: Any, prefix: str, name: str, owner: str) -> tuple[int | None, float, float]:
    """``owner``'s entry of ``name``: its token, the seconds left on its lease, its delay."""
    admin.execute(
        "SELECT token, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1e6 "
        f"- lock_delay, lock_delay FROM {prefix}entries WHERE name = %s AND owner = %s",
        (name, owner_hash(owner)),
    )
    row = admin.fetchone()
    assert row is not None, f"{owner} has no entry of {name}"
    return row[0], float(row[1]), float(row[2])


def rows(admin: Any, prefix: str, name: str) -> list[tuple[Any, ...]]:
    admin.execute(
        f"SELECT owner, token, expires_at, lock_delay FROM {prefix}entries WHERE name = %s "
        "ORDER BY seq",
        (name,),
    )
    return list(admin.fetchall())


def run_out(admin: Any, prefix: str, name: str, owner: str) -> None:
    """Make ``owner``'s lease of ``name`` have ended a second ago, as if its holder had stopped
    renewing; the delay left is what it was, less the lease."""
    _, lease_left, _ = kept(admin, prefix, name, owner)
    admin.execute(
        f"UPDATE {prefix}entries SET expires_at = expires_at - INTERVAL %s MICROSECOND "
        "WHERE name = %s AND owner = %s",
        (round((lease_left + 1) * 1e6), name, owner_hash(owner)),
    )
    assert admin.rowcount == 1


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


def test_a_grant_on_a_free_name_keeps_its_delay(locks, admin, prefix):
    assert locks._backend.try_grant(request("x", "a", lock_delay=DELAY)) is not None
    token, lease_left, delay = kept(admin, prefix, "x", "a")
    assert delay == DELAY
    assert TTL - PATIENCE < lease_left <= TTL
    (holder,) = locks.status("x").holders
    assert holder.token == token
    assert TTL - PATIENCE < holder.expires_in <= TTL  # the lease left, not the row's


def test_grants_decided_in_the_client_keep_their_delay_and_waiters_keep_none(
    locks, other, admin, prefix
):
    """A shared request comes back undecided: the client adds its grant, or grants its
    waiter, by the rule."""
    one, two = locks._backend, other._backend
    assert one.try_grant(request("s", "a", lock_delay=DELAY, shared=True, limit=2))
    assert two.try_grant(request("s", "b", lock_delay=DELAY, shared=True, limit=2))
    assert two.try_grant(request("s", "c", lock_delay=DELAY, shared=True, limit=2)) is None
    assert kept(admin, prefix, "s", "b")[2] == DELAY
    assert kept(admin, prefix, "s", "c")[2] == 0  # a waiter: no grant to lose yet
    assert one.release("s", "a")
    assert two.try_grant(request("s", "c", lock_delay=DELAY, shared=True, limit=2))
    token, lease_left, delay = kept(admin, prefix, "s", "c")
    assert token is not None
    assert delay == DELAY
    assert TTL - PATIENCE < lease_left <= TTL


@pytest.mark.parametrize("how", ["its wake-up", "asking"])
def test_a_grant_handed_over_keeps_its_delay_from_its_take_up(locks, other, admin, prefix, how):
    _handed_over(locks, other, lock_delay=DELAY)
    handed, _, delay = kept(admin, prefix, "x", "b")
    assert handed is not None
    assert delay == 0  # not taken up: its waiter has nothing to lose yet
    waiter = other._backend
    if how == "asking":  # as if its wake-up had not come: the server finds the grant
        assert waiter.wakeups.handoffs.take("x", owner_hash("b")) is not None
    grant = waiter.try_grant(request("x", "b", lock_delay=DELAY))
    assert grant is not None
    assert grant.token == handed
    _, lease_left, delay = kept(admin, prefix, "x", "b")
    assert delay == DELAY
    assert TTL - PATIENCE < lease_left <= TTL


def test_a_grant_handed_over_that_is_never_taken_up_ends_with_no_delay(locks, other, admin, prefix):
    _handed_over(locks, other, lock_delay=DELAY)
    run_out(admin, prefix, "x", "b")  # its waiter died before it took the grant up
    state = locks.status("x")
    assert state.holders == state.lapsed == ()
    assert locks._backend.try_grant(request("x", "c")) is not None


# -- a lapsed grant ---------------------------------------------------------------------------


def test_no_clean_up_of_rows_whose_time_is_past_removes_a_lapsed_grant(locks, other, admin, prefix):
    one, two = locks._backend, other._backend
    assert one.try_grant(request("x", "a", lock_delay=DELAY)) is not None
    run_out(admin, prefix, "x", "a")
    (row,) = rows(admin, prefix, "x")
    # others' tries, answered in the server (exclusive) and decided in the client (shared),
    # each of which deletes the name's expired rows first; the sweep of every name:
    assert two.try_grant(request("x", "b")) is None
    assert two.try_grant(request("x", "c", shared=True, limit=0)) is None
    two.pool.run(two._sweep, idempotent=True)
    # and how an older version deletes expired rows, at each decision and in its sweep
    admin.execute(
        f"DELETE FROM {prefix}entries WHERE name = 'x' AND (expires_at <= UTC_TIMESTAMP(6) "
        "OR expires_at > UTC_TIMESTAMP(6) + INTERVAL 1 DAY)"
    )
    assert rows(admin, prefix, "x")[0] == row
    state = locks.status("x")
    assert state.holders == ()
    (lapsed,) = state.lapsed
    assert lapsed.token == row[1]
    assert DELAY - 1 - PATIENCE < lapsed.expires_in <= DELAY - 1  # the delay left
    assert state.waiters == 2  # b's and c's: behind it


@pytest.mark.parametrize("shared", [False, True], ids=["mutex", "semaphore"])
def test_its_owner_can_neither_renew_release_nor_take_up_a_lapsed_grant(
    locks, admin, prefix, shared
):
    backend = locks._backend
    asked = request("x", "a", lock_delay=DELAY, shared=shared, limit=2 if shared else 1)
    assert backend.try_grant(asked) is not None
    assert backend.try_grant(request("y", "a", lock_delay=DELAY)) is not None
    run_out(admin, prefix, "x", "a")
    (row,) = rows(admin, prefix, "x")
    # answered in the server for a mutex, decided in the client for a semaphore: no grant,
    # and nothing written
    assert backend.try_grant(asked) is None
    assert backend.renew("x", "a", TTL) is None
    assert backend.renew_all([Renewal("y", "a", TTL), Renewal("x", "a", TTL)], 5.0) == [
        TTL,
        None,
    ]
    assert backend.release("x", "a") is False
    assert rows(admin, prefix, "x") == [row]
    # the live one was renewed, its delay kept after its new lease
    _, lease_left, delay = kept(admin, prefix, "y", "a")
    assert delay == DELAY
    assert TTL - PATIENCE < lease_left <= TTL
    assert backend.release("y", "a") is True
    assert rows(admin, prefix, "y") == []


def test_a_force_release_ends_a_delay_but_counts_and_notes_only_live_grants(locks, admin, prefix):
    backend = locks._backend
    assert backend.try_grant(request("s", "a", lock_delay=DELAY, shared=True, limit=2))
    assert backend.try_grant(request("s", "b", lock_delay=DELAY, shared=True, limit=2))
    run_out(admin, prefix, "s", "a")
    assert backend.force_release("s", "forced by a test") == 1
    assert backend.evicted("s", "b") == "forced by a test"
    assert backend.evicted("s", "a") is None  # its grant had ended by itself already
    assert rows(admin, prefix, "s") == []


# -- tables an earlier version made -----------------------------------------------------------


def test_tables_made_before_the_column_gain_it_and_their_rows_keep_no_delay(url, admin, prefix):
    tumbler.connect(url).close()
    # what an earlier version's tables are: no column, and its procedures (the one made
    # last, whose comment names the version, among them)
    admin.execute(f"ALTER TABLE {prefix}entries DROP COLUMN lock_delay")
    admin.execute(f"DROP PROCEDURE {prefix}states")
    admin.execute(
        f"INSERT INTO {prefix}entries (name, owner, shared, lim, fair, token, expires_at, "
        "holder) VALUES ('old', %s, FALSE, 1, FALSE, 1, UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, "
        "'an older tumbler')",
        (owner_hash("o"),),
    )
    with tumbler.connect(url) as locks:
        backend = locks._backend
        assert kept(admin, prefix, "old", "o")[2] == 0
        (holder,) = locks.status("old").holders
        assert holder.holder == "an older tumbler"
        assert backend.renew("old", "o", TTL) == TTL
        run_out(admin, prefix, "old", "o")
        state = locks.status("old")
        assert state.holders == state.lapsed == ()  # over with its lease: no delay
        assert backend.try_grant(request("old", "n")) is not None
        # and the tables keep delays from now on
        assert backend.try_grant(request("new", "n", lock_delay=DELAY)) is not None
        run_out(admin, prefix, "new", "n")
        assert len(locks.status("new").lapsed) == 1
