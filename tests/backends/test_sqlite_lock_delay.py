"""sqlite://: lock-delay as the file keeps it. A grant's row outlives its lease by its
``lock_delay``, so what drops rows whose time is past (a grant's clean-up of its name, the
sweep of other names, a client of an older tumbler) must leave a lapsed grant be; a file made
before the column existed gains it, its rows reading as no delay; and nothing but a delay
of 0 to an hour can be stored in it.

A lease is made to have run out by moving its row's times back (the delay left unchanged),
not by waiting for it.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import tumbler
from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest, Renewal
from tumbler.backends.kit.boot import boot_time_ns
from tumbler.backends.sqlite.backend import DOORBELLS, SQLiteBackend
from tumbler.testing.conformance.compat import PATIENCE

#: a delay no case waits out
DELAY = 600.0
TTL = 30.0


def request(
    name: str,
    owner: str,
    *,
    lock_delay: float = 0.0,
    shared: bool = False,
    limit: int = 1,
    queue: bool = True,
) -> GrantRequest:
    return GrantRequest(
        name, owner, shared, limit, False, TTL, "test", queue=queue, lock_delay=lock_delay
    )


@contextlib.contextmanager
def opened(path: Path) -> Iterator[sqlite3.Connection]:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        yield db


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "locks.db"


@pytest.fixture
def backend(path: Path) -> Iterator[SQLiteBackend]:
    made = SQLiteBackend(parse_url(f"sqlite:///{path}"))
    yield made
    made.close()


def run_out(path: Path, name: str, owner: str) -> None:
    """Make ``owner``'s lease of ``name`` have ended a second ago, as if its holder had stopped
    renewing; its delay left is what it was, less its lease."""
    with opened(path) as db:
        (lease_ends,) = db.execute(
            "SELECT expires_at - lock_delay FROM tumbler_entries WHERE name = ? AND owner = ?",
            (name, owner),
        ).fetchone()
        shift = lease_ends - boot_time_ns() + 1_000_000_000
        db.execute(
            "UPDATE tumbler_entries SET expires_at = expires_at - ? WHERE name = ? AND owner = ?",
            (shift, name, owner),
        )


def stored(path: Path, name: str) -> list[tuple[str, int | None, int, int]]:
    """The name's rows as kept: ``(owner, token, expires_at, lock_delay)``."""
    with opened(path) as db:
        return db.execute(
            "SELECT owner, token, expires_at, lock_delay FROM tumbler_entries WHERE name = ? "
            "ORDER BY seq",
            (name,),
        ).fetchall()


def test_a_grant_keeps_its_delay_and_its_row_outlives_its_lease_by_it(path, backend):
    before = boot_time_ns()
    assert backend.try_grant(request("x", "a", lock_delay=DELAY)) is not None
    ((_, _, expires_at, lock_delay),) = stored(path, "x")
    assert lock_delay == round(DELAY * 1e9)
    assert expires_at - lock_delay >= before + round(TTL * 1e9)
    (holder,) = backend.inspect("x").holders
    assert TTL - PATIENCE < holder.expires_in <= TTL  # the lease left, not the row's
    # a waiter has no grant to lose: it keeps no delay, whatever it asked for
    assert backend.try_grant(request("x", "b", lock_delay=DELAY)) is None
    assert stored(path, "x")[1][3] == 0


def test_no_clean_up_of_rows_whose_time_is_past_removes_a_lapsed_grant(path, backend):
    assert backend.try_grant(request("x", "a", lock_delay=DELAY)) is not None
    run_out(path, "x", "a")
    (row,) = stored(path, "x")
    # Another client's try on the name (which deletes its expired rows first), the sweep of
    # other names that comes with each grant, and a batch of the asyncio client's polls,
    # with the lapsed grant's owner among them:
    assert backend.try_grant(request("x", "b", queue=False)) is None
    for index in range(20):
        assert backend.try_grant(request(f"other-{index}", "c")) is not None
    polls = [request("x", "d", queue=False), request("x", "a")]
    assert backend.try_grant_many(polls) == [None, None]
    # and the statements an older tumbler deletes expired rows with, at its grants and sweeps
    with opened(path) as db:
        now = boot_time_ns()
        db.execute("DELETE FROM tumbler_entries WHERE name = ? AND expires_at <= ?", ("x", now))
        db.execute(
            "DELETE FROM tumbler_entries WHERE seq IN (SELECT seq FROM tumbler_entries "
            "WHERE expires_at <= ? LIMIT ?)",
            (now, 8),
        )
    assert stored(path, "x")[0] == row
    state = backend.inspect("x")
    assert state.holders == ()
    (lapsed,) = state.lapsed
    assert lapsed.token == row[1]
    assert DELAY - 1 - PATIENCE < lapsed.expires_in <= DELAY - 1  # the delay left
    assert state.waiters == 0  # a's own try, which would wait, left nothing either


def test_its_owner_can_neither_renew_nor_release_a_lapsed_grant(path, backend):
    assert backend.try_grant(request("x", "a", lock_delay=DELAY)) is not None
    assert backend.try_grant(request("y", "a", lock_delay=DELAY)) is not None
    run_out(path, "x", "a")
    (row,) = stored(path, "x")
    assert backend.renew("x", "a", TTL) is None
    assert backend.renew_all([Renewal("y", "a", TTL), Renewal("x", "a", TTL)], 5.0) == [
        TTL,
        None,
    ]
    assert backend.release("x", "a") is False
    assert stored(path, "x") == [row]
    # the live one was renewed with its delay kept after the new lease
    ((_, _, expires_at, lock_delay),) = stored(path, "y")
    assert expires_at - lock_delay > boot_time_ns() + round((TTL - PATIENCE) * 1e9)
    assert backend.release("y", "a") is True
    assert stored(path, "y") == []


def test_a_force_release_ends_a_delay_but_counts_and_notes_only_live_grants(path, backend):
    assert backend.try_grant(request("s", "a", lock_delay=DELAY, shared=True, limit=2))
    assert backend.try_grant(request("s", "b", lock_delay=DELAY, shared=True, limit=2))
    run_out(path, "s", "a")
    assert backend.force_release("s", "forced by a test") == 1
    assert backend.evicted("s", "b") == "forced by a test"
    assert backend.evicted("s", "a") is None  # its grant had ended by itself already
    assert stored(path, "s") == []


@pytest.mark.skipif(not DOORBELLS, reason="doorbells are Linux-only")
def test_a_force_release_of_a_lapsed_grant_rings_its_waiters(path, backend):
    """Nothing else would: a lapsed grant's end is announced by nobody, so its waiters only
    poll; but a force release frees them now."""
    waiter = SQLiteBackend(parse_url(f"sqlite:///{path}"))
    rung = threading.Event()
    try:
        assert backend.try_grant(request("x", "a", lock_delay=DELAY)) is not None
        run_out(path, "x", "a")
        assert waiter.try_grant(request("x", "b")) is None  # its entry names its doorbell
        assert waiter.hub is not None
        waiter.hub.subscribe("x", rung.set)
        assert backend.force_release("x", "forced by a test") == 0
        assert rung.wait(PATIENCE)
        assert waiter.try_grant(request("x", "b")) is not None
    finally:
        waiter.close()


def test_a_file_made_before_the_column_gains_it_and_its_rows_keep_no_delay(path):
    url = f"sqlite:///{path}"
    with tumbler.connect(url):
        pass
    # what an older tumbler's file is: the same but for the column, with a grant in it
    with opened(path) as db:
        db.execute("ALTER TABLE tumbler_entries DROP COLUMN lock_delay")
        db.execute(
            "INSERT INTO tumbler_entries (name, owner, shared, lim, fair, token, expires_at, "
            "holder) VALUES ('old', 'o', 0, 1, 0, 1, ?, 'an older tumbler')",
            (boot_time_ns() + round(TTL * 1e9),),
        )
    backend = SQLiteBackend(parse_url(url))
    try:
        assert stored(path, "old")[0][3] == 0
        (holder,) = backend.inspect("old").holders
        assert holder.holder == "an older tumbler"
        assert backend.renew("old", "o", TTL) == TTL
        run_out(path, "old", "o")
        state = backend.inspect("old")
        assert state.holders == state.lapsed == ()  # over with its lease: no delay
        assert backend.try_grant(request("old", "n")) is not None
        # and the file keeps delays from now on, checked as a new file's are
        assert backend.try_grant(request("new", "n", lock_delay=DELAY)) is not None
        run_out(path, "new", "n")
        assert len(backend.inspect("new").lapsed) == 1
        with opened(path) as db, pytest.raises(sqlite3.IntegrityError):
            db.execute("UPDATE tumbler_entries SET lock_delay = -1 WHERE name = 'new'")
    finally:
        backend.close()


@pytest.mark.parametrize("bad", [-1, 3600 * 10**9 + 1, 1.5, "soon", b"\x00", None], ids=repr)
def test_the_file_refuses_a_lock_delay_that_is_not_one(path, backend, bad):
    """A row whose delay could not be read would close its name for a time nobody chose:
    the file's own CHECK (and NOT NULL) keeps such a value out, whoever writes it."""
    assert backend.try_grant(request("x", "a", lock_delay=DELAY)) is not None
    before = stored(path, "x")
    with opened(path) as db, pytest.raises(sqlite3.IntegrityError):
        db.execute("UPDATE tumbler_entries SET lock_delay = ? WHERE name = 'x'", (bad,))
    assert stored(path, "x") == before
    assert backend.release("x", "a") is True
