"""tumbler.fencing.postgresql on the session's real PostgreSQL server, with psycopg's
Connection and AsyncConnection."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from tumbler.errors import ConfigurationError, InvalidArgument, StaleToken
from tumbler.testing import wait_until

from .races import BAD_RESOURCES, BAD_TOKENS, race

psycopg = pytest.importorskip("psycopg")
fencing = pytest.importorskip("tumbler.fencing.postgresql")

from tumbler.testing.backends.postgresql.server import PostgreSQLServer  # noqa: E402


@pytest.fixture
def schema(postgresql_server: PostgreSQLServer) -> Iterator[str]:
    name = f"fencing_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgresql_server.url, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {name}")
        connection.execute(f"CREATE TABLE {name}.writes (id serial PRIMARY KEY, token int)")
    yield name
    with psycopg.connect(postgresql_server.url, autocommit=True) as connection:
        connection.execute(f"DROP SCHEMA {name} CASCADE")


@pytest.fixture
def table(schema: str) -> str:
    return f"{schema}.tumbler_fences"


@pytest.fixture
def connect(postgresql_server: PostgreSQLServer, table: str) -> Iterator[Any]:
    opened: list[Any] = []

    def open_() -> Any:
        connection = psycopg.connect(postgresql_server.url)
        opened.append(connection)
        return connection

    fencing.create_table(open_(), table)
    yield open_
    for connection in opened:
        connection.close()


def write(connection: Any, schema: str, token: int) -> None:
    with connection.transaction():
        fencing.fence(connection, "account:7", token, table=f"{schema}.tumbler_fences")
        connection.execute(f"INSERT INTO {schema}.writes (token) VALUES (%s)", (token,))


def writes(connection: Any, schema: str) -> list[int]:
    with connection.transaction():
        rows = connection.execute(f"SELECT token FROM {schema}.writes ORDER BY id").fetchall()
    return [token for (token,) in rows]


def highest(connection: Any, table: str) -> int | None:
    with connection.transaction():
        row = connection.execute(f"SELECT max(token) FROM {table}").fetchone()
    return None if row is None else row[0]


def test_a_higher_or_equal_token_is_accepted(connect: Any, schema: str, table: str) -> None:
    connection = connect()
    for token in (3, 3, 7):
        write(connection, schema, token)
    assert writes(connection, schema) == [3, 3, 7]
    assert highest(connection, table) == 7


def test_a_lower_token_is_refused_and_its_transaction_rolled_back(
    connect: Any, schema: str, table: str
) -> None:
    connection = connect()
    write(connection, schema, 5)
    with pytest.raises(StaleToken) as refused, connection.transaction():
        connection.execute(f"INSERT INTO {schema}.writes (token) VALUES (4)")
        fencing.fence(connection, "account:7", 4, table=table)
    assert (refused.value.token, refused.value.highest) == (4, 5)
    assert writes(connection, schema) == [5]


@pytest.mark.parametrize("token", BAD_TOKENS, ids=repr)
def test_a_bad_token_is_refused_and_changes_nothing(
    connect: Any, table: str, token: object
) -> None:
    connection = connect()
    with pytest.raises(InvalidArgument), connection.transaction():
        fencing.fence(connection, "account:7", token, table=table)
    assert highest(connection, table) is None


@pytest.mark.parametrize("resource", BAD_RESOURCES, ids=repr)
def test_a_bad_resource_is_refused_and_changes_nothing(
    connect: Any, table: str, resource: object
) -> None:
    connection = connect()
    with pytest.raises(InvalidArgument), connection.transaction():
        fencing.fence(connection, resource, 5, table=table)
    assert highest(connection, table) is None


def test_a_fence_outside_any_transaction_is_refused(
    postgresql_server: PostgreSQLServer, connect: Any, table: str
) -> None:
    with (
        psycopg.connect(postgresql_server.url, autocommit=True) as alone,
        pytest.raises(InvalidArgument, match="transaction"),
    ):
        fencing.fence(alone, "account:7", 5, table=table)
    assert highest(connect(), table) is None


def test_setup_is_refused_inside_the_callers_transaction(connect: Any, schema: str) -> None:
    connection = connect()
    connection.execute(f"INSERT INTO {schema}.writes (token) VALUES (1)")
    with pytest.raises(InvalidArgument, match="outside your transaction"):
        fencing.create_table(connection, f"{schema}.other")
    connection.rollback()
    assert writes(connection, schema) == []


def test_a_missing_table_is_a_configuration_error(connect: Any, schema: str) -> None:
    connection = connect()
    with pytest.raises(ConfigurationError, match="create_table"), connection.transaction():
        fencing.fence(connection, "account:7", 5, table=f"{schema}.nowhere")


def test_a_stale_transaction_never_lands_after_a_newer_one(connect: Any, schema: str) -> None:
    holders = {5: connect(), 4: connect()}
    for _ in range(5):
        with holders[5].transaction():
            holders[5].execute(f"TRUNCATE {schema}.writes, {schema}.tumbler_fences")
        outcomes = race(lambda token, _: write(holders[token], schema, token), "account:7")
        landed = writes(holders[5], schema)
        assert landed in ([4, 5], [5]), landed
        assert outcomes[5] is None
        assert outcomes[4] is None if landed == [4, 5] else isinstance(outcomes[4], StaleToken)


def waiting_at_a_fence(connection: Any, table: str) -> bool:
    schema = table.partition(".")[0]
    with connection.transaction():
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE %s",
            (f"%{schema}%",),
        ).fetchone()
    return bool(row[0])


def test_a_stale_holder_waits_for_the_newer_transaction_then_is_refused(
    connect: Any, schema: str, table: str
) -> None:
    newer, stale, watcher = connect(), connect(), connect()
    outcome: list[BaseException | None] = []

    def late() -> None:
        try:
            write(stale, schema, 4)
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    with newer.transaction():
        fencing.fence(newer, "account:7", 5, table=table)
        thread = threading.Thread(target=late)
        thread.start()
        wait_until(lambda: waiting_at_a_fence(watcher, table))  # the row lock holds it
        newer.execute(f"INSERT INTO {schema}.writes (token) VALUES (5)")
    thread.join()
    assert isinstance(outcome[0], StaleToken)
    assert writes(watcher, schema) == [5]


@pytest_asyncio.fixture
async def aconnect(postgresql_server: PostgreSQLServer, table: str) -> AsyncIterator[Any]:
    opened: list[Any] = []

    async def open_() -> Any:
        connection = await psycopg.AsyncConnection.connect(postgresql_server.url)
        opened.append(connection)
        return connection

    await fencing.create_table_async(await open_(), table)
    yield open_
    for connection in opened:
        await connection.close()


async def awrite(connection: Any, schema: str, token: int) -> None:
    async with connection.transaction():
        await fencing.fence_async(connection, "account:7", token, table=f"{schema}.tumbler_fences")
        await connection.execute(f"INSERT INTO {schema}.writes (token) VALUES (%s)", (token,))


@pytest.mark.asyncio
async def test_async_accepts_a_higher_or_equal_token_and_refuses_a_lower(
    aconnect: Any, connect: Any, schema: str
) -> None:
    connection = await aconnect()
    for token in (3, 3, 7):
        await awrite(connection, schema, token)
    with pytest.raises(StaleToken) as refused:
        await awrite(connection, schema, 6)
    assert (refused.value.token, refused.value.highest) == (6, 7)
    assert writes(connect(), schema) == [3, 3, 7]


@pytest.mark.asyncio
async def test_async_refuses_bad_input_and_a_fence_outside_a_transaction(
    aconnect: Any, postgresql_server: PostgreSQLServer, table: str
) -> None:
    connection = await aconnect()
    for token in BAD_TOKENS:
        with pytest.raises(InvalidArgument):
            async with connection.transaction():
                await fencing.fence_async(connection, "account:7", token, table=table)
    alone = await psycopg.AsyncConnection.connect(postgresql_server.url, autocommit=True)
    try:
        with pytest.raises(InvalidArgument, match="transaction"):
            await fencing.fence_async(alone, "account:7", 5, table=table)
        cursor = await alone.execute(f"SELECT count(*) FROM {table}")
        assert await cursor.fetchone() == (0,)
    finally:
        await alone.close()


@pytest.mark.asyncio
async def test_async_a_stale_holder_waits_for_the_newer_transaction_then_is_refused(
    aconnect: Any, connect: Any, schema: str, table: str
) -> None:
    newer, stale, watcher = await aconnect(), await aconnect(), connect()
    async with newer.transaction():
        await fencing.fence_async(newer, "account:7", 5, table=table)
        late = asyncio.ensure_future(awrite(stale, schema, 4))
        await asyncio.to_thread(wait_until, lambda: waiting_at_a_fence(watcher, table))
        await newer.execute(f"INSERT INTO {schema}.writes (token) VALUES (5)")
    with pytest.raises(StaleToken):
        await late
    assert writes(watcher, schema) == [5]
