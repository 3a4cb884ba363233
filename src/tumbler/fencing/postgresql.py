"""A fence in a PostgreSQL database, inside the caller's own transaction (psycopg 3: a
``Connection`` or an ``AsyncConnection``).

Set up once, outside your transactions (it commits)::

    tumbler.fencing.postgresql.create_table(conn)

then, first thing in every transaction that writes the resource::

    with conn.transaction():
        tumbler.fencing.postgresql.fence(conn, "account:7", hold.token)  # StaleToken if stale
        conn.execute("UPDATE accounts SET balance = balance - 10 WHERE id = 7")

:func:`fence` records the token as the resource's highest (one ``INSERT .. ON CONFLICT ..
DO UPDATE .. WHERE`` statement, which changes nothing for a lower token). Either way the
resource's fence row stays locked until your transaction ends, so another fenced transaction
of the same resource waits at its own fence until then: the check and your writes are one
transaction, and a :class:`~tumbler.errors.StaleToken` rolls all of it back as it leaves the
``transaction()`` block. Under REPEATABLE READ or SERIALIZABLE, a fence that waited for a
concurrent one fails with PostgreSQL's serialization error instead: retry as for any other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import MissingDependency, StaleToken
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
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import sql
    from psycopg.pq import TransactionStatus
except ImportError as error:  # pragma: no cover - the postgresql extra is not installed
    raise MissingDependency(
        None, "postgresql", "psycopg", needed_by="tumbler.fencing.postgresql"
    ) from error

__all__ = ["create_table", "create_table_async", "fence", "fence_async"]

if TYPE_CHECKING:
    from sqlalchemy import Connection as SQLAlchemyConnection
    from sqlalchemy.ext.asyncio import AsyncConnection as SQLAlchemyAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

_CREATE = sql.SQL(
    "CREATE TABLE IF NOT EXISTS {} "
    "(resource text PRIMARY KEY, token bigint NOT NULL CHECK (token > 0))"
)
# RETURNING yields a row only when the token was written: none means a higher one is there
_ACCEPT = sql.SQL(
    "INSERT INTO {} AS fence (resource, token) VALUES (%s, %s) "
    "ON CONFLICT (resource) DO UPDATE SET token = excluded.token "
    "WHERE fence.token <= excluded.token RETURNING fence.token"
)
_HIGHEST = sql.SQL("SELECT token FROM {} WHERE resource = %s")


def _identifier(table: str) -> sql.Identifier:
    return sql.Identifier(*checked_table(table).split("."))


def _setup_refused(connection: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    if connection.info.transaction_status != TransactionStatus.IDLE:
        raise commits_a_transaction()


def _checked(
    connection: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
    resource: str,
    token: int,
    table: str,
) -> tuple[str, int, sql.Identifier]:
    resource, token = checked_sql_call(resource, token)
    name = _identifier(table)
    if connection.autocommit and connection.info.transaction_status == TransactionStatus.IDLE:
        raise alone_in_autocommit("conn.transaction()")
    return resource, token, name


def create_table(
    connection: psycopg.Connection[Any] | SQLAlchemyConnection, table: str = FENCE_TABLE
) -> None:
    """Create the fence table (``resource text PRIMARY KEY, token bigint``) if it is missing,
    and commit. ``table`` may name a schema (``app.fences``). Refused (InvalidArgument) inside
    an open transaction, which it would commit."""
    driver: psycopg.Connection[Any] = setup_connection(connection)
    name = _identifier(table)
    _setup_refused(driver)
    with driver.transaction():
        driver.execute(_CREATE.format(name))


async def create_table_async(
    connection: psycopg.AsyncConnection[Any], table: str = FENCE_TABLE
) -> None:
    """:func:`create_table` on an ``AsyncConnection``."""
    name = _identifier(table)
    _setup_refused(connection)
    async with connection.transaction():
        await connection.execute(_CREATE.format(name))


def fence(
    connection: psycopg.Connection[Any] | SQLAlchemyConnection | Session,
    resource: str,
    token: int,
    *,
    table: str = FENCE_TABLE,
) -> None:
    """Accept ``token`` for ``resource`` in the caller's transaction, or raise
    :class:`~tumbler.errors.StaleToken` if a higher token has been accepted for it.

    An equal token is accepted (the same holder writing again). Call it before the
    transaction's reads and writes of the resource: from then until the transaction ends,
    every other fenced transaction of the resource waits, so what it read stays current. Let
    StaleToken roll the transaction back. Refused with InvalidArgument, before anything is
    sent: a token that is not a positive int (at most 2**63 - 1), a resource that is not 1 to
    255 characters of text, a connection in autocommit mode outside a transaction (the fence
    would be committed alone). A missing table is a ConfigurationError (and, as any error
    does, it aborts the transaction).
    """
    driver: psycopg.Connection[Any] = driver_connection(connection)
    resource, token, name = _checked(driver, resource, token, table)
    try:
        if driver.execute(_ACCEPT.format(name), (resource, token)).fetchone() is not None:
            return
        row = driver.execute(_HIGHEST.format(name), (resource,)).fetchone()
    except pg_errors.UndefinedTable as error:
        raise no_fence_table(table, __name__) from error
    raise StaleToken(resource, token, None if row is None else int(row[0]))


async def fence_async(
    connection: psycopg.AsyncConnection[Any] | SQLAlchemyAsyncConnection | AsyncSession,
    resource: str,
    token: int,
    *,
    table: str = FENCE_TABLE,
) -> None:
    """:func:`fence` on an ``AsyncConnection``, inside ``async with conn.transaction()``."""
    driver: psycopg.AsyncConnection[Any] = await driver_connection_async(connection)
    resource, token, name = _checked(driver, resource, token, table)
    try:
        cursor = await driver.execute(_ACCEPT.format(name), (resource, token))
        if await cursor.fetchone() is not None:
            return
        cursor = await driver.execute(_HIGHEST.format(name), (resource,))
        row = await cursor.fetchone()
    except pg_errors.UndefinedTable as error:
        raise no_fence_table(table, __name__) from error
    raise StaleToken(resource, token, None if row is None else int(row[0]))
