"""The checks every fence makes of its input before it touches the store."""

from __future__ import annotations

import re
from typing import Any

from ..errors import ConfigurationError, InvalidArgument

#: the table the SQL fences keep their highest tokens in, unless told another
FENCE_TABLE = "tumbler_fences"

#: the largest token a SQL fence keeps (a signed 64-bit column, as every SQL store has)
MAX_SQL_TOKEN = 2**63 - 1

#: the longest resource name a SQL fence keeps, in characters (MySQL's VARCHAR(255))
MAX_RESOURCE_LENGTH = 255

# a table name is written into statements, so only plain identifiers, optionally with a schema
_TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?")


def checked_token(token: object, *, most: int | None = None) -> int:
    """``token`` if it is a fencing token (a positive int, not a bool), else InvalidArgument."""
    # bool is an int: True would pass as token 1
    if isinstance(token, bool) or not isinstance(token, int):
        raise InvalidArgument(
            f"a fencing token is a positive int (a hold's token), not {type(token).__name__} "
            f"{token!r}"
        )
    if token < 1:
        raise InvalidArgument(f"a fencing token is a positive int (a hold's token), not {token}")
    if most is not None and token > most:
        raise InvalidArgument(
            f"fencing token {token} is above the largest this store keeps, {most}"
        )
    return token


def checked_name(name: object, what: str, *, longest: int | None = None) -> str:
    """``name`` if it is non-empty text without NUL (and at most ``longest`` characters)."""
    if not isinstance(name, str):
        raise InvalidArgument(f"a {what} is text, not {type(name).__name__} {name!r}")
    if not name:
        raise InvalidArgument(f"a {what} cannot be empty")
    if "\0" in name:
        raise InvalidArgument(f"a {what} cannot hold NUL: {name!r}")
    if longest is not None and len(name) > longest:
        raise InvalidArgument(f"a {what} is at most {longest} characters: {name[:40]!r}...")
    return name


def checked_resource(resource: object) -> str:
    """A SQL fence's resource name: 1 to 255 characters of text, without NUL."""
    return checked_name(resource, "fenced resource's name", longest=MAX_RESOURCE_LENGTH)


def checked_table(table: object) -> str:
    """A table name to write into a statement: ``name`` or ``schema.name``, plain identifiers."""
    if not isinstance(table, str) or not _TABLE.fullmatch(table):
        raise InvalidArgument(
            f"a fence table is a plain identifier, or schema.identifier (letters, digits, _), "
            f"not {table!r}"
        )
    return table


def checked_sql_call(resource: object, token: object) -> tuple[str, int]:
    """A SQL fence's resource and token, checked (InvalidArgument before anything is sent)."""
    checked = checked_token(token, most=MAX_SQL_TOKEN)
    return checked_resource(resource), checked


def alone_in_autocommit(begin: str) -> InvalidArgument:
    """The refusal of a fence outside a transaction; ``begin``: how the driver opens one."""
    return InvalidArgument(
        f"fence() belongs inside your transaction ({begin}): in autocommit mode it would be "
        "committed alone, apart from your writes"
    )


def commits_a_transaction(why: str = "") -> InvalidArgument:
    """The refusal of ``create_table()`` inside a transaction, which it would commit."""
    return InvalidArgument(
        f"create_table() commits{why}: call it outside your transaction, not inside one"
    )


def no_fence_table(table: str, module: str) -> ConfigurationError:
    """A missing fence table, with the call that makes it (``module``: the fence's)."""
    return ConfigurationError(
        f"no fence table {table!r} in this database: run {module}.create_table() once first"
    )


def _from_sqlalchemy(connection: Any) -> bool:
    return type(connection).__module__.startswith("sqlalchemy.")


def _in_sqlalchemy_transaction(connection: Any) -> None:
    if not connection.in_transaction():
        raise alone_in_autocommit("with engine.begin() as conn:, or session.begin()")


def driver_connection(connection: Any) -> Any:
    """The driver's connection a fence runs its statements on: ``connection`` itself, or the
    one under an SQLAlchemy ``Connection`` or ``Session``, in whose transaction (begun by
    SQLAlchemy, refused with InvalidArgument if there is none) the fence's statements then
    run, beside the caller's own."""
    if not _from_sqlalchemy(connection):
        return connection
    _in_sqlalchemy_transaction(connection)
    if not hasattr(connection, "dialect"):  # a Session: its Connection, in its transaction
        connection = connection.connection()
    return connection.connection.driver_connection


async def driver_connection_async(connection: Any) -> Any:
    """:func:`driver_connection` for asyncio: an SQLAlchemy ``AsyncConnection`` or
    ``AsyncSession`` gives the asyncio driver's connection under it."""
    if not _from_sqlalchemy(connection):
        return connection
    _in_sqlalchemy_transaction(connection)
    if not hasattr(connection, "dialect"):  # an AsyncSession
        connection = await connection.connection()
    raw = await connection.get_raw_connection()
    return raw.driver_connection


def setup_connection(connection: Any) -> Any:
    """The driver's connection ``create_table`` runs on: ``connection`` itself, or the one
    under an SQLAlchemy ``Connection``, which must not be in a transaction (refused with
    InvalidArgument: ``create_table`` commits)."""
    if not _from_sqlalchemy(connection):
        return connection
    if connection.in_transaction() or not hasattr(connection, "dialect"):
        raise commits_a_transaction(" (give it an SQLAlchemy Connection outside a transaction)")
    return connection.connection.driver_connection
