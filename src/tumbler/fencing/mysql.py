"""A fence in a MySQL or MariaDB database (InnoDB), inside the caller's own transaction
(PyMySQL's connection; aiomysql's for asyncio).

Set up once, outside your transactions (DDL commits implicitly, so it is refused inside one)::

    tumbler.fencing.mysql.create_table(conn)

then, first thing in every transaction that writes the resource::

    conn.begin()
    try:
        tumbler.fencing.mysql.fence(conn, "account:7", hold.token)   # StaleToken if stale
        with conn.cursor() as cursor:
            cursor.execute("UPDATE accounts SET balance = balance - 10 WHERE id = 7")
        conn.commit()
    except BaseException:
        conn.rollback()
        raise

:func:`fence` raises the resource's recorded token to ``token`` if it is not lower (``INSERT ..
ON DUPLICATE KEY UPDATE token = GREATEST(token, ..)``), then reads it back with ``FOR UPDATE``:
the token is accepted if it is what is recorded now. The row stays locked until your
transaction ends, so another fenced transaction of the same resource waits at its own fence
until then: the check and your writes are one transaction. (The statement's affected-row count
is not used: MySQL reports an update to an equal value as 0 rows or 1 by client flag.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, MissingDependency, StaleToken
from ._checks import (
    FENCE_TABLE,
    alone_in_autocommit,
    checked_sql_call,
    checked_table,
    commits_a_transaction,
    driver_connection,
    driver_connection_async,
    no_fence_table,
    setup_connection,
)

try:
    import pymysql
    from pymysql.constants import ER, SERVER_STATUS
except ImportError as error:  # pragma: no cover - the mysql extra is not installed
    raise MissingDependency(None, "mysql", "PyMySQL", needed_by="tumbler.fencing.mysql") from error

__all__ = ["create_table", "create_table_async", "fence", "fence_async"]

if TYPE_CHECKING:
    from sqlalchemy import Connection as SQLAlchemyConnection
    from sqlalchemy.ext.asyncio import AsyncConnection as SQLAlchemyAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

_CREATE = (
    "CREATE TABLE IF NOT EXISTS {} ("
    "resource VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, "
    "token BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB"
)
_EXISTS = (
    "SELECT 1 FROM information_schema.TABLES "
    "WHERE TABLE_SCHEMA = COALESCE(%s, DATABASE()) AND TABLE_NAME = %s"
)
_ACCEPT = (
    "INSERT INTO {} (resource, token) VALUES (%s, %s) "
    "ON DUPLICATE KEY UPDATE token = GREATEST(token, %s)"
)
# a locking read: a plain one would read the transaction's snapshot, which may predate a
# newer holder's commit
_HIGHEST = "SELECT token FROM {} WHERE resource = %s FOR UPDATE"


def _quoted(table: str) -> str:
    return ".".join(f"`{part}`" for part in checked_table(table).split("."))


def _in_transaction(connection: Any) -> bool:
    return bool(connection.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS)


def _setup_refused(connection: Any) -> None:
    if _in_transaction(connection):
        raise commits_a_transaction(" (DDL ends a transaction in MySQL)")


def _checked(connection: Any, resource: str, token: int, table: str) -> tuple[str, int, str]:
    resource, token = checked_sql_call(resource, token)
    quoted = _quoted(table)
    if connection.get_autocommit() and not _in_transaction(connection):
        raise alone_in_autocommit("conn.begin() first")
    return resource, token, quoted


def _decided(resource: str, token: int, row: Any) -> None:
    highest = None if row is None else int(row[0])
    if highest != token:
        raise StaleToken(resource, token, highest)


@contextlib.contextmanager
def _missing_table_named(table: str) -> Iterator[None]:
    """A missing fence table as the ConfigurationError that says how to make it."""
    try:
        yield
    except pymysql.err.ProgrammingError as error:
        missing = _missing(table, error)
        if missing is None:
            raise
        raise missing from error


def _missing(table: str, error: pymysql.err.MySQLError) -> ConfigurationError | None:
    if error.args and error.args[0] == ER.NO_SUCH_TABLE:
        return no_fence_table(table, __name__)
    return None


def create_table(
    connection: pymysql.connections.Connection[Any] | SQLAlchemyConnection, table: str = FENCE_TABLE
) -> None:
    """Create the fence table (``resource VARCHAR(255) PRIMARY KEY, token BIGINT``, InnoDB) if
    it is missing. ``table`` may name a database (``app.fences``). Refused (InvalidArgument)
    inside an open transaction, which the DDL would commit."""
    driver: pymysql.connections.Connection[Any] = setup_connection(connection)
    quoted = _quoted(table)
    _setup_refused(driver)
    with driver.cursor() as cursor:
        cursor.execute(_CREATE.format(quoted))
    driver.commit()


async def create_table_async(connection: Any, table: str = FENCE_TABLE) -> None:
    """:func:`create_table` on an aiomysql connection."""
    quoted = _quoted(table)
    _setup_refused(connection)
    schema, _, name = table.rpartition(".")
    async with connection.cursor() as cursor:
        # aiomysql turns the server's note that the table exists into a Python warning (an
        # error where warnings are errors): ask first
        await cursor.execute(_EXISTS, (schema or None, name))
        if await cursor.fetchone() is None:
            await cursor.execute(_CREATE.format(quoted))
    await connection.commit()


def fence(
    connection: pymysql.connections.Connection[Any] | SQLAlchemyConnection | Session,
    resource: str,
    token: int,
    *,
    table: str = FENCE_TABLE,
) -> None:
    """Accept ``token`` for ``resource`` in the caller's transaction, or raise
    :class:`~tumbler.errors.StaleToken` if a higher token has been accepted for it.

    An equal token is accepted (the same holder writing again). Call it before the
    transaction's reads and writes of the resource: from then until the transaction ends,
    every other fenced transaction of the resource waits, so what it read stays current. Roll
    the transaction back on StaleToken. Refused with InvalidArgument, before anything is sent:
    a token that is not a positive int (at most 2**63 - 1), a resource that is not 1 to 255
    characters of text, a connection in autocommit mode outside a transaction (the fence would
    be committed alone). A missing table is a ConfigurationError.
    """
    driver: pymysql.connections.Connection[Any] = driver_connection(connection)
    resource, token, quoted = _checked(driver, resource, token, table)
    with _missing_table_named(table), driver.cursor() as cursor:
        cursor.execute(_ACCEPT.format(quoted), (resource, token, token))
        cursor.execute(_HIGHEST.format(quoted), (resource,))
        row = cursor.fetchone()
    _decided(resource, token, row)


async def fence_async(
    connection: Any | SQLAlchemyAsyncConnection | AsyncSession,
    resource: str,
    token: int,
    *,
    table: str = FENCE_TABLE,
) -> None:
    """:func:`fence` on an aiomysql connection (``await conn.begin()`` first)."""
    driver: Any = await driver_connection_async(connection)
    resource, token, quoted = _checked(driver, resource, token, table)
    with _missing_table_named(table):
        async with driver.cursor() as cursor:
            await cursor.execute(_ACCEPT.format(quoted), (resource, token, token))
            await cursor.execute(_HIGHEST.format(quoted), (resource,))
            row = await cursor.fetchone()
    _decided(resource, token, row)
