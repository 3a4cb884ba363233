"""tumbler.fencing.mysql on the session's real MariaDB server, with PyMySQL and aiomysql."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tumbler.errors import ConfigurationError, InvalidArgument, StaleToken
from tumbler.testing import wait_until

from .races import BAD_RESOURCES, BAD_TOKENS, race

pymysql = pytest.importorskip("pymysql")
fencing = pytest.importorskip("tumbler.fencing.mysql")

from tumbler.testing.backends.mysql.server import (  # noqa: E402
    TUMBLER_DATABASE,
    TUMBLER_PASSWORD,
    TUMBLER_USER,
    MariaDBServer,
)

Connect = Callable[..., Any]


def settings(server: MariaDBServer) -> dict[str, Any]:
    return {
        "host": server.host,
        "port": server.port,
        "user": TUMBLER_USER,
        "password": TUMBLER_PASSWORD,
        "database": TUMBLER_DATABASE,
    }


@pytest.fixture
def names(mariadb_server: MariaDBServer) -> Iterator[tuple[str, str]]:
    """This test's fence table and writes table (the server is the session's)."""
    suffix = uuid.uuid4().hex[:12]
    table, log = f"fences_{suffix}", f"writes_{suffix}"
    with pymysql.connect(**settings(mariadb_server), autocommit=True) as connection:
        connection.cursor().execute(
            f"CREATE TABLE {log} (id INT AUTO_INCREMENT PRIMARY KEY, token INT) ENGINE=InnoDB"
        )
    yield table, log
    with pymysql.connect(**settings(mariadb_server), autocommit=True) as connection:
        connection.cursor().execute(f"DROP TABLE IF EXISTS {log}, {table}")


@pytest.fixture
def connect(mariadb_server: MariaDBServer, names: tuple[str, str]) -> Iterator[Connect]:
    opened: list[Any] = []

    def open_(**options: Any) -> Any:
        connection = pymysql.connect(**settings(mariadb_server), **options)
        opened.append(connection)
        return connection

    fencing.create_table(open_(), names[0])
    yield open_
    for connection in opened:
        connection.close()


def write(connection: Any, names: tuple[str, str], token: int) -> None:
    connection.begin()
    try:
        fencing.fence(connection, "account:7", token, table=names[0])
        connection.cursor().execute(f"INSERT INTO {names[1]} (token) VALUES (%s)", (token,))
        connection.commit()
    except BaseException:
        connection.rollback()
        raise


def rows(connection: Any, query: str) -> list[Any]:
    connection.begin()
    with connection.cursor() as cursor:
        cursor.execute(query)
        found = [row[0] for row in cursor.fetchall()]
    connection.commit()
    return found


def writes(connection: Any, names: tuple[str, str]) -> list[int]:
    return rows(connection, f"SELECT token FROM {names[1]} ORDER BY id")


def highest(connection: Any, names: tuple[str, str]) -> list[int]:
    return rows(connection, f"SELECT token FROM {names[0]}")


def test_a_higher_or_equal_token_is_accepted(connect: Connect, names: tuple[str, str]) -> None:
    connection = connect()
    for token in (3, 3, 7, 7):
        write(connection, names, token)
    assert writes(connection, names) == [3, 3, 7, 7]
    assert highest(connection, names) == [7]


@pytest.mark.parametrize("found_rows", [False, True])
def test_an_equal_token_is_accepted_whatever_the_affected_rows_flag(
    connect: Connect, names: tuple[str, str], found_rows: bool
) -> None:
    # an update to an equal value is 0 affected rows, or 1 with CLIENT.FOUND_ROWS
    flag = pymysql.constants.CLIENT.FOUND_ROWS if found_rows else 0
    connection = connect(client_flag=flag)
    write(connection, names, 5)
    write(connection, names, 5)
    assert writes(connection, names) == [5, 5]


def test_a_lower_token_is_refused_and_its_transaction_rolled_back(
    connect: Connect, names: tuple[str, str]
) -> None:
    connection = connect()
    write(connection, names, 5)
    with pytest.raises(StaleToken) as refused:
        write(connection, names, 4)
    assert (refused.value.token, refused.value.highest) == (4, 5)
    assert writes(connection, names) == [5]
    assert highest(connection, names) == [5]


@pytest.mark.parametrize("token", BAD_TOKENS, ids=repr)
def test_a_bad_token_is_refused_and_changes_nothing(
    connect: Connect, names: tuple[str, str], token: object
) -> None:
    connection = connect()
    with pytest.raises(InvalidArgument):
        write(connection, names, token)  # type: ignore[arg-type]
    assert highest(connection, names) == []


@pytest.mark.parametrize("resource", BAD_RESOURCES, ids=repr)
def test_a_bad_resource_is_refused_and_changes_nothing(
    connect: Connect, names: tuple[str, str], resource: object
) -> None:
    connection = connect()
    connection.begin()
    with pytest.raises(InvalidArgument):
        fencing.fence(connection, resource, 5, table=names[0])
    connection.rollback()
    assert highest(connection, names) == []


def test_a_fence_in_autocommit_mode_outside_a_transaction_is_refused(
    connect: Connect, names: tuple[str, str]
) -> None:
    alone = connect(autocommit=True)
    with pytest.raises(InvalidArgument, match="transaction"):
        fencing.fence(alone, "account:7", 5, table=names[0])
    assert highest(connect(), names) == []


def test_setup_is_refused_inside_the_callers_transaction(
    connect: Connect, names: tuple[str, str]
) -> None:
    # the DDL would commit the caller's write
    connection = connect()
    connection.begin()
    connection.cursor().execute(f"INSERT INTO {names[1]} (token) VALUES (1)")
    with pytest.raises(InvalidArgument, match="outside your transaction"):
        fencing.create_table(connection, names[0])
    connection.rollback()
    assert writes(connection, names) == []


def test_a_missing_table_is_a_configuration_error(connect: Connect) -> None:
    connection = connect()
    connection.begin()
    with pytest.raises(ConfigurationError, match="create_table"):
        fencing.fence(connection, "account:7", 5, table="no_such_fences")
    connection.rollback()


def test_a_stale_transaction_never_lands_after_a_newer_one(
    connect: Connect, names: tuple[str, str]
) -> None:
    holders = {5: connect(), 4: connect()}
    for _ in range(5):
        holders[5].cursor().execute(f"DELETE FROM {names[1]}")
        holders[5].cursor().execute(f"DELETE FROM {names[0]}")
        holders[5].commit()
        outcomes = race(lambda token, _: write(holders[token], names, token), "account:7")
        landed = writes(holders[5], names)
        assert landed in ([4, 5], [5]), landed
        assert outcomes[5] is None
        assert outcomes[4] is None if landed == [4, 5] else isinstance(outcomes[4], StaleToken)


def waiting_at_a_fence(admin: Any, table: str) -> bool:
    """Whether a fence's statement on ``table`` is under way on the server (``admin``: an
    autocommit connection, so each look is a fresh one). While another transaction holds the
    resource's fence row, such a statement can only be waiting for it. The server's list of
    statements, not INNODB_TRX's lock waits: a waiting INSERT can be missing there a while
    (MariaDB listed only the holder's transaction for 10 s on a loaded machine)."""
    with admin.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
            "WHERE command = 'Query' AND info LIKE %s",
            (f"INSERT INTO `{table}`%",),
        )
        (count,) = cursor.fetchone()
    return bool(count)


def test_a_stale_holder_waits_for_the_newer_transaction_then_is_refused(
    connect: Connect, names: tuple[str, str], mariadb_server: MariaDBServer
) -> None:
    newer, stale = connect(), connect()
    outcome: list[BaseException | None] = []

    def late() -> None:
        try:
            write(stale, names, 4)
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    newer.begin()
    fencing.fence(newer, "account:7", 5, table=names[0])
    thread = threading.Thread(target=late)
    thread.start()
    # the row lock holds it (or it ended, which the assertion shows); one connection for
    # every look: one per look, a thousand a second, is what a loaded server falls behind on
    with mariadb_server.connect() as admin:
        wait_until(lambda: bool(outcome) or waiting_at_a_fence(admin, names[0]))
    assert outcome == [], outcome
    newer.cursor().execute(f"INSERT INTO {names[1]} (token) VALUES (5)")
    newer.commit()
    thread.join()
    assert isinstance(outcome[0], StaleToken)
    assert writes(newer, names) == [5]


@pytest.mark.asyncio
async def test_async_accepts_a_higher_or_equal_token_and_refuses_a_lower(
    mariadb_server: MariaDBServer, connect: Connect, names: tuple[str, str]
) -> None:
    aiomysql = pytest.importorskip("aiomysql")
    options = settings(mariadb_server)
    options["db"] = options.pop("database")
    connection = await aiomysql.connect(**options)
    try:
        await fencing.create_table_async(connection, names[0])

        async def awrite(token: object) -> None:
            await connection.begin()
            try:
                await fencing.fence_async(connection, "account:7", token, table=names[0])
                async with connection.cursor() as cursor:
                    await cursor.execute(f"INSERT INTO {names[1]} (token) VALUES (%s)", (token,))
                await connection.commit()
            except BaseException:
                await connection.rollback()
                raise

        for token in (3, 3, 7):
            await awrite(token)
        with pytest.raises(StaleToken) as refused:
            await awrite(6)
        assert (refused.value.token, refused.value.highest) == (6, 7)
        for bad in BAD_TOKENS:
            with pytest.raises(InvalidArgument):
                await awrite(bad)
        await asyncio.sleep(0)
    finally:
        connection.close()
    assert writes(connect(), names) == [3, 3, 7]
    assert highest(connect(), names) == [7]


def test_a_transaction_whose_snapshot_predates_the_newer_write_is_refused(
    connect: Connect, names: tuple[str, str]
) -> None:
    # InnoDB's REPEATABLE READ: a plain read would see the token as it was at the snapshot
    stale, newer = connect(), connect()
    write(stale, names, 4)
    stale.begin()
    stale.cursor().execute(f"SELECT COUNT(*) FROM {names[0]}")  # the snapshot: 4 is highest
    write(newer, names, 5)
    with pytest.raises(StaleToken) as refused:
        fencing.fence(stale, "account:7", 4, table=names[0])
    stale.rollback()
    assert refused.value.highest == 5
