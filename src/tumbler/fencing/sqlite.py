"""A fence in an SQLite database, inside the caller's own transaction (the standard library's
:mod:`sqlite3`).

Set up once (it commits: outside any transaction of yours)::

    tumbler.fencing.sqlite.create_table(db)

then, first thing in every transaction that writes the resource::

    with db:                                                  # commits, or rolls back
        tumbler.fencing.sqlite.fence(db, "account:7", hold.token)   # StaleToken if stale
        db.execute("UPDATE accounts SET balance = balance - 10 WHERE id = 7")

:func:`fence` records the token as the resource's highest in the fence table (one ``INSERT ..
ON CONFLICT .. DO UPDATE .. WHERE`` statement, which writes nothing for a lower token). That
write takes the database's write lock until your transaction ends, so no other fenced
transaction can slip in between the check and your writes: they are one transaction, and a
:class:`~tumbler.errors.StaleToken` rolls all of it back as it leaves ``with db``.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from ..errors import StaleToken
from ._checks import (
    FENCE_TABLE,
    alone_in_autocommit,
    checked_sql_call,
    checked_table,
    commits_a_transaction,
    driver_connection,
    no_fence_table,
    setup_connection,
)

__all__ = ["create_table", "fence"]

if TYPE_CHECKING:
    from sqlalchemy import Connection as SQLAlchemyConnection
    from sqlalchemy.orm import Session

# sqlite3.LEGACY_TRANSACTION_CONTROL (3.12): the transaction handling of every earlier Python
_LEGACY = -1


def _opens_no_transaction(connection: sqlite3.Connection) -> bool:
    """Whether a statement on ``connection`` would be committed by itself, alone."""
    autocommit = getattr(connection, "autocommit", _LEGACY)
    if autocommit is True or (autocommit == _LEGACY and connection.isolation_level is None):
        return not connection.in_transaction
    # the legacy mode opens a transaction before an INSERT; autocommit=False always has one
    return False


def create_table(
    connection: sqlite3.Connection | SQLAlchemyConnection, table: str = FENCE_TABLE
) -> None:
    """Create the fence table (``resource TEXT PRIMARY KEY, token INTEGER``) if it is missing,
    and commit. Refused (InvalidArgument) inside an open transaction, which it would commit."""
    driver: sqlite3.Connection = setup_connection(connection)
    table = checked_table(table)
    if driver.in_transaction and getattr(driver, "autocommit", _LEGACY) is not False:
        raise commits_a_transaction()
    driver.execute(
        f"CREATE TABLE IF NOT EXISTS {table} "
        "(resource TEXT PRIMARY KEY NOT NULL, token INTEGER NOT NULL)"
    )
    driver.commit()


def fence(
    connection: sqlite3.Connection | SQLAlchemyConnection | Session,
    resource: str,
    token: int,
    *,
    table: str = FENCE_TABLE,
) -> None:
    """Accept ``token`` for ``resource`` in the caller's transaction, or raise
    :class:`~tumbler.errors.StaleToken` if a higher token has been accepted for it.

    An equal token is accepted (the same holder writing again). Call it before the
    transaction's reads and writes of the resource: from then until the transaction ends,
    no other fenced transaction can write, so what it read stays current. Let StaleToken roll
    the transaction back (``with connection:`` does). Refused with InvalidArgument, before
    anything is written: a token that is not a positive int, a resource that is not 1 to 255
    characters of text, a connection in autocommit mode outside a transaction (the fence would
    be committed alone). A missing table is a ConfigurationError.
    """
    driver: sqlite3.Connection = driver_connection(connection)
    resource, token = checked_sql_call(resource, token)
    table = checked_table(table)
    if _opens_no_transaction(driver):
        raise alone_in_autocommit("BEGIN first")
    try:
        accepted = driver.execute(
            f"INSERT INTO {table} AS fence (resource, token) VALUES (?, ?) "
            "ON CONFLICT (resource) DO UPDATE SET token = excluded.token "
            "WHERE fence.token <= excluded.token",
            (resource, token),
        ).rowcount
        if accepted:
            return
        row = driver.execute(
            f"SELECT token FROM {table} WHERE resource = ?", (resource,)
        ).fetchone()
    except sqlite3.OperationalError as error:
        if "no such table" in str(error):
            raise no_fence_table(table, __name__) from error
        raise
    raise StaleToken(resource, token, None if row is None else int(row[0]))
