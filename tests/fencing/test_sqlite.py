"""tumbler.fencing.sqlite on a real database file: the fence refuses a stale token inside the
caller's transaction, and that transaction's writes go with it."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tumbler.errors import ConfigurationError, InvalidArgument, StaleToken
from tumbler.fencing import sqlite as fencing

from .races import BAD_RESOURCES, BAD_TOKENS, race


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def db(path: Path) -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(path, timeout=30)
    fencing.create_table(connection)
    connection.execute("CREATE TABLE writes (id INTEGER PRIMARY KEY, resource TEXT, token INT)")
    connection.commit()
    yield connection
    connection.close()


def write(db: sqlite3.Connection, resource: str, token: int) -> None:
    with db:
        fencing.fence(db, resource, token)
        db.execute("INSERT INTO writes (resource, token) VALUES (?, ?)", (resource, token))


def writes(db: sqlite3.Connection, resource: str) -> list[int]:
    rows = db.execute("SELECT token FROM writes WHERE resource = ? ORDER BY id", (resource,))
    return [token for (token,) in rows]


def highest(db: sqlite3.Connection, resource: str) -> int | None:
    row = db.execute("SELECT token FROM tumbler_fences WHERE resource = ?", (resource,)).fetchone()
    return None if row is None else int(row[0])


def test_a_higher_or_equal_token_is_accepted(db: sqlite3.Connection) -> None:
    for token in (3, 3, 7):
        write(db, "account:7", token)
    assert writes(db, "account:7") == [3, 3, 7]
    assert highest(db, "account:7") == 7


def test_a_lower_token_is_refused_and_its_transaction_rolled_back(db: sqlite3.Connection) -> None:
    write(db, "account:7", 5)
    with pytest.raises(StaleToken) as refused, db:
        db.execute("INSERT INTO writes (resource, token) VALUES ('account:7', 4)")
        fencing.fence(db, "account:7", 4)
    assert (refused.value.resource, refused.value.token, refused.value.highest) == (
        "account:7",
        4,
        5,
    )
    assert writes(db, "account:7") == [5]
    assert highest(db, "account:7") == 5


def test_resources_are_fenced_apart(db: sqlite3.Connection) -> None:
    write(db, "account:7", 50)
    write(db, "account:8", 2)
    assert writes(db, "account:8") == [2]


@pytest.mark.parametrize("token", BAD_TOKENS, ids=repr)
def test_a_bad_token_is_refused_and_changes_nothing(db: sqlite3.Connection, token: object) -> None:
    write(db, "account:7", 5)
    with pytest.raises(InvalidArgument), db:
        fencing.fence(db, "account:7", token)  # type: ignore[arg-type]
    assert highest(db, "account:7") == 5


@pytest.mark.parametrize("resource", BAD_RESOURCES, ids=repr)
def test_a_bad_resource_is_refused_and_changes_nothing(
    db: sqlite3.Connection, resource: object
) -> None:
    with pytest.raises(InvalidArgument), db:
        fencing.fence(db, resource, 5)  # type: ignore[arg-type]
    assert db.execute("SELECT COUNT(*) FROM tumbler_fences").fetchone() == (0,)


def test_a_bad_table_name_is_refused(db: sqlite3.Connection) -> None:
    with pytest.raises(InvalidArgument):
        fencing.create_table(db, "fences; DROP TABLE writes")
    with pytest.raises(InvalidArgument), db:
        fencing.fence(db, "account:7", 5, table="x y")


def test_a_fence_outside_any_transaction_is_refused(path: Path, db: sqlite3.Connection) -> None:
    # in autocommit mode the fence would be committed alone, apart from the writes it guards
    alone = sqlite3.connect(path, isolation_level=None)
    try:
        with pytest.raises(InvalidArgument, match="transaction"):
            fencing.fence(alone, "account:7", 5)
        alone.execute("BEGIN")
        fencing.fence(alone, "account:7", 5)
        alone.execute("COMMIT")
    finally:
        alone.close()
    assert highest(db, "account:7") == 5


def test_the_table_is_not_made_inside_the_callers_transaction(db: sqlite3.Connection) -> None:
    db.execute("INSERT INTO writes (resource, token) VALUES ('x', 1)")
    with pytest.raises(InvalidArgument, match="outside your transaction"):
        fencing.create_table(db, "other_fences")
    db.rollback()
    assert writes(db, "x") == []


def test_a_missing_table_is_a_configuration_error(tmp_path: Path) -> None:
    bare = sqlite3.connect(tmp_path / "bare.db")
    try:
        with pytest.raises(ConfigurationError, match="create_table"), bare:
            fencing.fence(bare, "account:7", 5)
    finally:
        bare.close()


def test_a_stale_transaction_never_lands_after_a_newer_one(
    path: Path, db: sqlite3.Connection
) -> None:
    def holder(token: int, resource: str) -> None:
        connection = sqlite3.connect(path, timeout=30)
        try:
            write(connection, resource, token)
        finally:
            connection.close()

    for round_ in range(10):
        outcomes = race(holder, f"account:{round_}")
        landed = writes(db, f"account:{round_}")
        # whichever fenced first, 5 lands last: 4 either before it or not at all
        assert landed in ([4, 5], [5]), landed
        assert outcomes[4] is None if landed == [4, 5] else isinstance(outcomes[4], StaleToken)
        assert outcomes[5] is None


def test_a_fence_column_on_the_users_own_row(db: sqlite3.Connection) -> None:
    # the recipe of docs/fencing.md: the row carries its own highest token
    db.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INT, fence INT NOT NULL)")
    db.execute("INSERT INTO accounts VALUES (7, 100, 0)")
    db.commit()

    def debit(token: int) -> int:
        with db:
            return db.execute(
                "UPDATE accounts SET balance = balance - 10, fence = ? WHERE id = ? AND fence <= ?",
                (token, 7, token),
            ).rowcount

    assert debit(5) == 1
    assert debit(4) == 0  # stale: nothing updated
    assert db.execute("SELECT balance, fence FROM accounts").fetchone() == (90, 5)


def test_a_thread_blocked_behind_a_newer_holder_is_refused(
    path: Path, db: sqlite3.Connection
) -> None:
    newer = sqlite3.connect(path, timeout=30, check_same_thread=False)
    newer.execute("BEGIN")
    fencing.fence(newer, "account:7", 5)
    result: list[BaseException | None] = []
    started = threading.Event()

    def stale() -> None:
        connection = sqlite3.connect(path, timeout=30)
        try:
            started.set()
            write(connection, "account:7", 4)
            result.append(None)
        except BaseException as error:
            result.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=stale)
    thread.start()
    started.wait()
    newer.execute("INSERT INTO writes (resource, token) VALUES ('account:7', 5)")
    newer.commit()
    newer.close()
    thread.join()
    assert isinstance(result[0], StaleToken)
    assert writes(db, "account:7") == [5]
