"""The SQL fences given SQLAlchemy's ``Connection`` and ``Session`` (and their asyncio twins)
in place of a driver's connection: the fence runs in SQLAlchemy's transaction, beside the
caller's own statements, on SQLite, PostgreSQL and MariaDB (real servers, the session's).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tumbler.errors import InvalidArgument, StaleToken

sqlalchemy = pytest.importorskip("sqlalchemy")
from sqlalchemy import text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from tumbler.testing.backends.mysql.server import (  # noqa: E402
    TUMBLER_DATABASE as MARIADB_DATABASE,
)
from tumbler.testing.backends.mysql.server import (  # noqa: E402
    TUMBLER_PASSWORD as MARIADB_PASSWORD,
)
from tumbler.testing.backends.mysql.server import (  # noqa: E402
    TUMBLER_USER as MARIADB_USER,
)

STORES = ["sqlite", "postgresql", "mariadb"]


@dataclass
class Store:
    """A database, its fence module, and SQLAlchemy URLs of it (``async_url``: None for a
    store whose fence has no asyncio twin)."""

    fencing: ModuleType
    url: Any
    async_url: Any
    table: str
    writes: str


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    suffix = uuid.uuid4().hex[:12]
    table, writes = f"fences_{suffix}", f"writes_{suffix}"
    if request.param == "sqlite":
        import tumbler.fencing.sqlite as module

        url: Any = f"sqlite:///{tmp_path / 'store.db'}"
        async_url: Any = None
    elif request.param == "postgresql":
        module = pytest.importorskip("tumbler.fencing.postgresql")
        server = request.getfixturevalue("postgresql_server")
        url = sqlalchemy.make_url(server.url).set(drivername="postgresql+psycopg")
        async_url = url
    else:
        module = pytest.importorskip("tumbler.fencing.mysql")
        server = request.getfixturevalue("mariadb_server")
        url = sqlalchemy.URL.create(
            "mysql+pymysql",
            username=MARIADB_USER,
            password=MARIADB_PASSWORD,
            host=server.host,
            port=server.port,
            database=MARIADB_DATABASE,
        )
        async_url = url.set(drivername="mysql+aiomysql")
    engine = sqlalchemy.create_engine(url)
    with engine.connect() as connection:
        module.create_table(connection, table)  # a Connection outside a transaction
    with engine.begin() as connection:
        connection.execute(text(f"CREATE TABLE {writes} (token BIGINT NOT NULL)"))
    yield Store(module, url, async_url, table, writes)
    with engine.begin() as connection:
        connection.execute(text(f"DROP TABLE {writes}"))
        connection.execute(text(f"DROP TABLE {table}"))
    engine.dispose()


def _written(store: Store) -> list[int]:
    engine = sqlalchemy.create_engine(store.url)
    try:
        with engine.connect() as connection:
            query = text(f"SELECT token FROM {store.writes} ORDER BY token")
            return [int(token) for (token,) in connection.execute(query)]
    finally:
        engine.dispose()


def test_a_connection_in_its_transaction_fences_and_a_stale_write_rolls_back(
    store: Store,
) -> None:
    engine = sqlalchemy.create_engine(store.url)
    try:
        with engine.begin() as connection:
            store.fencing.fence(connection, "account:7", 5, table=store.table)
            connection.execute(text(f"INSERT INTO {store.writes} (token) VALUES (5)"))
        with pytest.raises(StaleToken) as stale, engine.begin() as connection:
            connection.execute(text(f"INSERT INTO {store.writes} (token) VALUES (4)"))
            store.fencing.fence(connection, "account:7", 4, table=store.table)
        assert stale.value.highest == 5
        # the stale transaction's write went with it; the same token again is accepted
        with Session(engine) as session, session.begin():
            store.fencing.fence(session, "account:7", 5, table=store.table)
            session.execute(text(f"INSERT INTO {store.writes} (token) VALUES (6)"))
    finally:
        engine.dispose()
    assert _written(store) == [5, 6]


def test_a_connection_outside_a_transaction_is_refused_and_nothing_is_written(
    store: Store,
) -> None:
    engine = sqlalchemy.create_engine(store.url)
    try:
        with engine.connect() as connection:
            assert not connection.in_transaction()
            with pytest.raises(InvalidArgument, match="belongs inside your transaction"):
                store.fencing.fence(connection, "account:7", 9, table=store.table)
            with pytest.raises(InvalidArgument, match="call it outside your transaction"):
                connection.begin()
                store.fencing.create_table(connection, store.table)
        with engine.begin() as connection:  # 9 was never accepted: 8 still is
            store.fencing.fence(connection, "account:7", 8, table=store.table)
    finally:
        engine.dispose()


# the SQLite fence has no asyncio twin (sqlite3 is blocking)
@pytest.mark.parametrize("store", ["postgresql", "mariadb"], indirect=True)
def test_an_asyncio_connection_and_session_fence_in_their_transaction(store: Store) -> None:
    assert store.async_url is not None

    async def main() -> int | None:
        engine = create_async_engine(store.async_url)
        try:
            async with engine.begin() as connection:
                await store.fencing.fence_async(connection, "account:7", 5, table=store.table)
                await connection.execute(text(f"INSERT INTO {store.writes} (token) VALUES (5)"))
            try:
                async with AsyncSession(engine) as session, session.begin():
                    await store.fencing.fence_async(session, "account:7", 3, table=store.table)
            except StaleToken as stale:
                return stale.highest
            return None
        finally:
            await engine.dispose()

    assert asyncio.run(main()) == 5
    assert _written(store) == [5]
