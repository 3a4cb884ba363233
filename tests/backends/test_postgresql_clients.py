"""``tumbler.connect`` (and ``tumbler.aio.connect``) given the application's psycopg pool in
place of a URL: the same server, reached the same way, over connections of tumbler's own;
the pool stays the application's.

A real PostgreSQL server (the session's, ``tests/servers``); each test keeps to a schema of
its own.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool, AsyncNullConnectionPool, ConnectionPool

from tumbler import PermissionDenied
from tumbler.testing.backends.postgresql.server import (
    TUMBLER_DATABASE,
    TUMBLER_PASSWORD,
    TUMBLER_USER,
)

from .configured_clients import FLAVOURS, lock_through, refused


def _schema() -> str:
    return f"test_{uuid.uuid4().hex[:12]}"


def _conninfo(server: Any, password: str = TUMBLER_PASSWORD) -> str:
    """A libpq key/value connection string, as applications often write them."""
    return (
        f"host={server.host} port={server.port} dbname={TUMBLER_DATABASE} "
        f"user={TUMBLER_USER} password='{password}' application_name=billing"
    )


def _use(flavour: str, pool: Any, **options: object) -> dict[str, Any]:
    """:func:`lock_through` inside the opened pool, then a query on one of its connections
    (``served``)."""

    def then() -> Any:
        if flavour == "sync":
            with pool.connection() as connection:
                return connection.execute("SELECT 1").fetchone()

        async def in_asyncio() -> Any:
            async with pool.connection() as connection:
                cursor = await connection.execute("SELECT 1")
                return await cursor.fetchone()

        return in_asyncio()

    seen = lock_through(flavour, pool, then=then, around=lambda: pool, **options)
    seen["served"] = seen.pop("then")
    return seen


def _pool(flavour: str, conninfo: str, **settings: Any) -> Any:
    if flavour == "sync":
        return ConnectionPool(conninfo, open=False, min_size=1, **settings)
    return AsyncConnectionPool(conninfo, open=False, min_size=1, **settings)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_pool_serves_tumbler_on_connections_of_its_own_and_lives_on(
    flavour: str, postgresql_server
) -> None:
    """The pool's connection string (its password with a quote, an @ and a %) and its
    psycopg-only arguments: tumbler takes the libpq ones, keeps its own timeouts and name."""
    pool = _pool(flavour, _conninfo(postgresql_server), kwargs={"autocommit": True})
    schema = _schema()
    seen = _use(flavour, pool, schema=schema, max_connections=3)
    assert seen["holders"] == 1
    assert seen["token"] > 0
    assert seen["served"] == (1,)  # closing tumbler's client left the pool serving
    config = seen["config"]
    assert config.schema == schema
    assert config.max_connections == 3
    options = config.connect_options
    assert options["password"] == TUMBLER_PASSWORD
    assert options["application_name"] == "tumbler"  # for operators: tumbler's sessions
    assert "autocommit" not in options
    assert options["tcp_user_timeout"] == 5000
    assert TUMBLER_PASSWORD not in config.url


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_pool_given_by_url_and_keyword_arguments_is_read_as_libpq_reads_it(
    flavour: str, postgresql_server
) -> None:
    """A URL for the connection string and the password as a keyword argument (libpq's
    precedence: the keyword wins), on a null pool (a subclass)."""
    url = postgresql_server.url_for(password="not-this-one")
    if flavour == "sync":
        from psycopg_pool import NullConnectionPool

        pool: Any = NullConnectionPool(url, open=False, kwargs={"password": TUMBLER_PASSWORD})
    else:
        pool = AsyncNullConnectionPool(url, open=False, kwargs={"password": TUMBLER_PASSWORD})
    seen = _use(flavour, pool, schema=_schema())
    assert seen["holders"] == 1
    assert seen["config"].connect_options["password"] == TUMBLER_PASSWORD


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_pool_whose_password_the_server_refuses_is_refused_without_it(
    flavour: str, postgresql_server
) -> None:
    pool = _pool(flavour, _conninfo(postgresql_server, password="Sw0rdf1sh-wrong"))
    with pytest.raises(PermissionDenied) as refused:
        _use(flavour, pool, schema=_schema())
    assert "Sw0rdf1sh-wrong" not in str(refused.value)
    assert f"{postgresql_server.host}:{postgresql_server.port}" in str(refused.value)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_pool_of_the_other_flavour_or_a_bad_option_is_refused_before_anything_opens(
    flavour: str,
) -> None:
    # port 1: nothing listens there, so a refusal that connected first would say so instead
    conninfo = "host=127.0.0.1 port=1 dbname=tumbler user=tumbler"
    other = _pool("asyncio" if flavour == "sync" else "sync", conninfo)
    expected = "tumbler.aio.connect" if flavour == "sync" else "tumbler.connect"
    assert f"give it to {expected}" in str(refused(flavour, other))
    pool = _pool(flavour, conninfo)
    said = refused(flavour, pool, sslmode="require")
    assert "does not take the option(s) sslmode" in str(said)
    bad = refused(flavour, pool, lock_timeout=9, statement_timeout=3)
    assert "lock_timeout must not be longer than statement_timeout" in str(bad)
    assert "127.0.0.1:1" in str(bad)
