"""postgresql://, postgres://: what is particular to the PostgreSQL backend.

The conformance suite runs every generic lock case on the ``postgresql`` and
``postgresql-tls`` targets. Here: the server's clock decides every lease (a client whose wall
clock is an hour off changes nothing); tokens keep increasing after a name's rows are gone
and across a server restart; a connection killed by ``pg_terminate_backend`` while its client
holds a lock; a restart while a lock is held and waited for; a role with only the grants the
docs list; the URL grammar. A real ``postgres`` from Debian's packages, one per module.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

import tumbler
import tumbler.aio
from tumbler import ConfigurationError, InvalidURL, PermissionDenied, TooManyWaiters
from tumbler._url import parse_url
from tumbler.backends import load_backend
from tumbler.backends.contract import GrantRequest, Renewal
from tumbler.backends.kit._async.sql import POLLING_WAITER_TTL
from tumbler.backends.kit.owners import owner_hash
from tumbler.backends.postgresql import statements as postgresql_statements
from tumbler.backends.postgresql.common import parse_config
from tumbler.backends.postgresql.opener import open_async, open_sync
from tumbler.backends.postgresql.statements import Statements, name_key, schema_key
from tumbler.cli import main
from tumbler.errors import BackendUnavailable
from tumbler.testing.backends.postgresql.server import (
    TUMBLER_DATABASE,
    TUMBLER_PASSWORD,
    TUMBLER_USER,
    PostgreSQLServer,
)
from tumbler.testing.conformance import worker as conformance_worker
from tumbler.testing.conformance.compat import PATIENCE, aeventually, background, eventually
from tumbler.testing.conformance.plugin import server_unavailable
from tumbler.testing.servers import ServerError
from tumbler.torture.backends import DEAD_WAITER_BOUND
from tumbler.torture.proxy import FaultProxy


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgreSQLServer]:
    """This module's own server: its tests restart it and terminate its connections."""
    try:
        started = PostgreSQLServer(tmp_path_factory.mktemp("postgresql")).start()
    except (ServerError, OSError) as error:
        server_unavailable(f"cannot start postgres: {error}")
    yield started
    started.close()


@pytest.fixture
def schema() -> str:
    return f"test_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def url(server: PostgreSQLServer, schema: str) -> str:
    return f"{server.url}?schema={schema}"


@pytest.fixture
def admin(server: PostgreSQLServer) -> Iterator[psycopg.Connection[Any]]:
    """The superuser, in the tests' database: to look at the rows as another program would."""
    with server.connect(TUMBLER_DATABASE) as connection:
        yield connection


def rows_of(admin: psycopg.Connection[Any], schema: str, name: str) -> int:
    query = sql.SQL("SELECT count(*) FROM {}.tumbler_entries WHERE name = %s").format(
        sql.Identifier(schema)
    )
    row = admin.execute(query, (name,)).fetchone()
    assert row is not None
    return int(row[0])


# -- the server's clock --------------------------------------------------------------------


def test_a_client_whose_clock_is_an_hour_ahead_gets_the_leases_of_the_servers_clock(
    url: str, schema: str, admin: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    with tumbler.connect(url) as honest, tumbler.connect(url) as skewed:
        # the wall clock is the only one a client could share with a server: skew it
        monkeypatch.setattr(time, "time", lambda: time.monotonic() + 3600.0 + 1e9)
        monkeypatch.setattr(time, "time_ns", lambda: time.monotonic_ns() + 3600 * 10**9 + 10**18)
        with skewed.lock("clock", ttl=30, renew=False):
            query = sql.SQL(
                "SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 "
                "FROM {}.tumbler_entries WHERE name = 'clock' AND token IS NOT NULL"
            ).format(sql.Identifier(schema))
            row = admin.execute(query).fetchone()
            assert row is not None
            # the lease is 30 s of the server's clock from the grant: not an hour off
            assert 0 < row[0] <= 30
            (state,) = honest.status_all()
            assert 0 < state.holders[0].expires_in <= 30
            assert not honest.lock("clock").acquire(timeout=0)


def test_a_lease_ends_when_the_servers_clock_says_so(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At the backend's level, where no lock layer releases a lease that ran out on the
    # client: the grant ends because the server's clock passed it, while the client's wall
    # clock says an hour has not yet gone by.
    monkeypatch.setattr(time, "time", lambda: time.monotonic() - 3600.0 + 1e9)
    monkeypatch.setattr(time, "time_ns", lambda: time.monotonic_ns() - 3600 * 10**9 + 10**18)
    backend = open_sync(parse_url(url))
    try:
        first = GrantRequest("ends", "owner-1", False, 1, False, 1.0, "test")
        second = GrantRequest("ends", "owner-2", False, 1, False, 5.0, "test", queue=False)
        granted = backend.try_grant(first)
        assert granted is not None
        assert backend.try_grant(second) is None
        eventually(lambda: backend.try_grant(second) is not None, "the first lease ran out")
        assert backend.renew("ends", "owner-1", 5.0) is None  # never revived
    finally:
        backend.close()


@pytest.mark.timeout(60)
def test_a_listening_connection_that_goes_silent_is_replaced(
    server: PostgreSQLServer, schema: str
) -> None:
    """A listening connection hears nothing when the network drops its packets: it pings
    within ``socket_timeout``, gives it up when no reply comes, and listens again once the
    server can be reached."""
    with FaultProxy((server.host, server.port)) as proxy:
        backend = open_sync(parse_url(_proxied_url(server, proxy, schema)))
        try:
            a_silent_listener_is_replaced(backend, proxy)
        finally:
            backend.close()


def a_silent_listener_is_replaced(backend: Any, proxy: FaultProxy) -> None:
    """The case of a blocking backend reached through ``proxy`` that listens for wake-ups on
    a connection of its own, shared by the SQL backends."""
    with backend.watch("silent", "waiter"):  # starts listening
        assert backend.wakeups.subscribed()
        proxy.drop("downstream")
        eventually(lambda: not backend.wakeups.subscribed(), "it gives the connection up")
        proxy.heal()
        eventually(backend.wakeups.subscribed, "it listens again")


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_asyncio_a_listening_connection_that_goes_silent_is_replaced(
    server: PostgreSQLServer, schema: str
) -> None:
    with FaultProxy((server.host, server.port)) as proxy:
        locks = await tumbler.aio.connect(_proxied_url(server, proxy, schema))
        try:
            backend = locks._backend
            async with backend.watch("silent", "waiter"):
                assert backend.wakeups.subscribed()
                proxy.drop("downstream")
                await aeventually(
                    lambda: asyncio.sleep(0, not backend.wakeups.subscribed()),
                    "it gives the connection up",
                )
                proxy.heal()
                await aeventually(
                    lambda: asyncio.sleep(0, backend.wakeups.subscribed()), "it listens again"
                )
        finally:
            await locks.close()


# -- hand-off ------------------------------------------------------------------------------
#
# A release grants the lock to the first waiter of a line it leaves without a grant, in its
# own transaction, and tells that waiter so in the NOTIFY its commit sends: the waiter's next
# try takes the grant without a call. Held at the backend contract, where no re-check timer
# of the lock layer races the wake-up.


class CountedCalls:
    """The calls a backend's pool makes (each is at least one round trip)."""

    def __init__(self, backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        run = backend.pool.run

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return run(*args, **kwargs)

        monkeypatch.setattr(backend.pool, "run", counted)


def _expiry_and_now(admin: psycopg.Connection[Any], schema: str, owner: str) -> tuple[Any, Any]:
    query = sql.SQL(
        "SELECT expires_at, clock_timestamp() FROM {}.tumbler_entries "
        "WHERE name = 'stock' AND owner = %s"
    ).format(sql.Identifier(schema))
    row = admin.execute(query, (owner_hash(owner),)).fetchone()
    assert row is not None
    return row[0], row[1]


def _handed_over(holder: Any, waiter: Any) -> Any:
    """``holder`` takes "stock" as "a", ``waiter`` queues as "b" (listening), and ``holder``
    releases: the release hands the lock to "b", and its wake-up has come. The first grant."""
    first = holder.try_grant(_request("stock", "a"))
    assert first is not None
    with waiter.watch("stock", "b") as watch:  # listens: its releases reach it
        assert waiter.try_grant(_request("stock", "b")) is None  # queued
        assert holder.release("stock", "a")
        watch.wait(PATIENCE)
    return first


def test_a_waiter_takes_the_grant_its_wake_up_carries_once_the_server_shows_it(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with tumbler.connect(url) as one, tumbler.connect(url) as two:
        waiter = two._backend
        first = _handed_over(one._backend, waiter)
        # granted by the release itself: the waiter has done nothing since it queued
        (handed,) = one.status("stock").holders
        assert handed.token > first.token
        # another request finds the waiter's client listening: the grant stays its own
        assert one._backend.try_grant(_request("stock", "c")) is None
        assert one._backend.release("stock", "c") is False  # withdrawn
        assert [h.token for h in one.status("stock").holders] == [handed.token]
        calls = CountedCalls(waiter, monkeypatch)
        grant = waiter.try_grant(_request("stock", "b"))
        assert calls.count == 1  # one write to its own entry: the wake-up is a hint
        assert grant is not None
        assert grant.token == handed.token
        assert grant.granted_ttl == 30.0  # taken up: the lease asked, from this try
        (taken,) = one.status("stock").holders
        assert waiter.capabilities.waiter_ttl < taken.expires_in <= 30.0
        assert waiter.release("stock", "b")
        assert one.status("stock").holders == ()


@pytest.mark.asyncio
async def test_a_waiter_takes_the_grant_its_wake_up_carries_once_the_server_shows_it_asyncio(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with await tumbler.aio.connect(url) as one, await tumbler.aio.connect(url) as two:
        holder, waiter = one._backend, two._backend
        first = await holder.try_grant(_request("stock", "a"))
        assert first is not None
        async with waiter.watch("stock", "b") as watch:
            assert await waiter.try_grant(_request("stock", "b")) is None
            assert await holder.release("stock", "a")
            await watch.wait(PATIENCE)

        calls = 0
        run = waiter.pool.run

        async def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            return await run(*args, **kwargs)

        monkeypatch.setattr(waiter.pool, "run", counted)
        grant = await waiter.try_grant(_request("stock", "b"))
        assert calls == 1
        assert grant is not None
        assert grant.token > first.token
        assert 0 < grant.granted_ttl <= 30.0
        assert await waiter.release("stock", "b")


@pytest.fixture
def reader(server: PostgreSQLServer, url: str, admin: psycopg.Connection[Any]) -> Iterator[Any]:
    """A role that may only read the schema's tables, connected."""
    tumbler.connect(url).close()  # the schema is made
    schema = parse_config(parse_url(url)).schema
    role = f"reader_{uuid.uuid4().hex[:8]}"
    admin.execute(
        sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'reader-Pa55'").format(sql.Identifier(role))
    )
    for statement in (
        "GRANT CONNECT ON DATABASE {db} TO {role}",
        "GRANT USAGE ON SCHEMA {schema} TO {role}",
        "GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}",
    ):
        admin.execute(
            sql.SQL(statement).format(
                db=sql.Identifier(TUMBLER_DATABASE),
                role=sql.Identifier(role),
                schema=sql.Identifier(schema),
            )
        )
    with psycopg.connect(server.url_for(role, "reader-Pa55"), autocommit=True) as connection:
        yield connection, schema


def _forge_hand_off(reader: Any, name: str, owner: str) -> None:
    """As a role that may only read: find the waiter's channel, owner hash and stamp, and
    NOTIFY it that a release handed it the lock with a token far above the holder's."""
    connection, schema = reader
    query = sql.SQL("SELECT client, stamp FROM {}.tumbler_entries WHERE name = %s AND owner = %s")
    row = connection.execute(
        query.format(sql.Identifier(schema)), (name, owner_hash(owner))
    ).fetchone()
    assert row is not None
    channel, stamp = row
    payload = f"=999999999999,{stamp},0:{owner_hash(owner)} {name}"
    connection.execute("SELECT pg_notify(%s, %s)", (channel, payload))


def test_a_forged_hand_off_does_not_grant_the_waiter(url: str, reader: Any) -> None:
    with tumbler.connect(url) as one, tumbler.connect(url) as two:
        holder, waiter = one._backend, two._backend
        held = holder.try_grant(_request("stock", "a"))
        assert held is not None
        with waiter.watch("stock", "b"):
            assert waiter.try_grant(_request("stock", "b")) is None  # queued
            _forge_hand_off(reader, "stock", "b")
            eventually(lambda: bool(waiter.wakeups.handoffs), "the forged wake-up came")
        assert waiter.try_grant(_request("stock", "b")) is None
        (holding,) = one.status("stock").holders
        assert holding.token == held.token
        assert holder.release("stock", "a")
        granted = waiter.try_grant(_request("stock", "b"))
        assert granted is not None
        assert held.token < granted.token < 999999999999
        assert waiter.release("stock", "b")


@pytest.mark.asyncio
async def test_a_forged_hand_off_does_not_grant_the_waiter_asyncio(url: str, reader: Any) -> None:
    async with await tumbler.aio.connect(url) as one, await tumbler.aio.connect(url) as two:
        holder, waiter = one._backend, two._backend
        held = await holder.try_grant(_request("stock", "a"))
        assert held is not None
        async with waiter.watch("stock", "b"):
            assert await waiter.try_grant(_request("stock", "b")) is None
            await asyncio.to_thread(_forge_hand_off, reader, "stock", "b")

            async def came() -> bool:
                return bool(waiter.wakeups.handoffs)

            await aeventually(came, "the forged wake-up came")
        assert await waiter.try_grant(_request("stock", "b")) is None
        (holding,) = (await one.status("stock")).holders
        assert holding.token == held.token
        assert await holder.release("stock", "a")
        granted = await waiter.try_grant(_request("stock", "b"))
        assert granted is not None
        assert held.token < granted.token < 999999999999
        assert await waiter.release("stock", "b")


def test_a_role_that_may_only_read_cannot_hold_grants_releases_or_force_release_up(
    url: str, reader: Any
) -> None:
    """Any role may take any advisory lock, on a key anyone can compute from the name; and a
    role with SELECT may try to lock the rows it reads. Neither holds a lock's name up."""
    connection, schema = reader
    connection.execute(
        "SELECT pg_advisory_lock(%s)", (name_key(parse_config(parse_url(url)).schema, "held-up"),)
    )
    for table in ("tumbler_names", "tumbler_entries"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege), connection.transaction():
            connection.execute(
                sql.SQL("SELECT FROM {}.{} FOR UPDATE").format(
                    sql.Identifier(schema), sql.Identifier(table)
                )
            )
    with tumbler.connect(url) as locks, tumbler.connect(url) as other:
        lock = locks.lock("held-up")
        assert lock.acquire(timeout=0)
        waiting = other.lock("held-up", fair=True)
        call = background(lambda: waiting.acquire(timeout=PATIENCE))
        eventually(lambda: locks.status("held-up").waiters == 1, "it waits")
        lock.release()
        assert call.result()
        assert locks.force_release("held-up", reason="a test") == 1


@pytest.mark.parametrize("expires_at", ["infinity", "200000-01-01"])
@pytest.mark.parametrize("kind", ["waiter", "holder"])
def test_an_entry_tumbler_did_not_write_blocks_nothing(
    url: str, schema: str, admin: psycopg.Connection[Any], kind: str, expires_at: str
) -> None:
    """A row whose lease ends at ``infinity`` (which no arithmetic takes) or after any lease
    tumbler grants: skipped and counted by ``status``, dropped by the next decision."""
    with tumbler.connect(url) as locks:
        locks.lock("stock").acquire(timeout=0)  # the schema is made
        locks.force_release("stock")
        admin.execute(
            sql.SQL(
                "INSERT INTO {}.tumbler_entries (name, owner, shared, lim, fair, token, "
                "expires_at, holder) VALUES ('stock', 'x', false, 1, true, %s, %s, 'by hand')"
            ).format(sql.Identifier(schema)),
            (7 if kind == "holder" else None, expires_at),
        )
        (state,) = locks.status_all()
        assert (state.malformed, state.holders, state.waiters) == (1, (), 0)
        with locks.lock("stock", fair=True) as hold:
            assert hold.token > 0
            assert locks.status("stock").malformed == 0
        assert rows_of(admin, schema, "stock") == 0
        admin.execute(
            sql.SQL(
                "INSERT INTO {}.tumbler_entries (name, owner, shared, lim, fair, token, "
                "expires_at, holder) VALUES ('stock', 'x', false, 1, true, %s, %s, 'by hand')"
            ).format(sql.Identifier(schema)),
            (7 if kind == "holder" else None, expires_at),
        )
        assert locks.force_release("stock") == 0  # nothing live; the row is gone
        assert rows_of(admin, schema, "stock") == 0


def test_what_a_decision_deletes_first_is_found_by_index_however_long_the_line(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    """A grant, a release and a decision in the client first delete the name's ended and
    unreadable entries (a lease past any tumbler grants, a lock-delay it never writes): each
    reads those and the few entries its rule looks at, not the name's every entry, so a line
    of 2,000 waiters costs them no more than a short one. Counted in rows the call read from
    the table (``pg_stat_xact_user_tables``), each call rolled back."""
    with tumbler.connect(url) as locks:
        assert locks.lock("other").acquire(timeout=0)  # the schema is made
    entries = sql.Identifier(schema, "tumbler_entries")
    insert = sql.SQL(
        "INSERT INTO {} (name, owner, shared, lim, fair, token, expires_at, holder, lease, "
        "stamp, written_at, lock_delay) SELECT 'long', %s || i, false, 1, false, %s, "
        "clock_timestamp() + %s * interval '1 second', 'by hand', 30, 0, now(), %s "
        "FROM generate_series(1, %s) AS i"
    ).format(entries)
    admin.execute(insert, ("holder", 1, 3600, 0.0, 1))
    admin.execute(insert, ("waiter", None, 3600, 0.0, 2000))
    admin.execute(insert, ("ended", None, -1, 0.0, 1))
    admin.execute(insert, ("far", 2, 10 * 366 * 86400, 0.0, 1))
    admin.execute(insert, ("nan", 3, 3600, float("nan"), 1))
    admin.execute("ANALYZE")
    admin.commit()
    statements = Statements.of(schema)
    grant = {
        "key": name_key(schema, "long"),
        "queue": False,
        "max_waiters": 10_000,
        **{"name": "long", "owner": "asker", "shared": False, "lim": 1, "fair": False},
        **{"holder": "test", "lock_delay": 0.0, "ttl": 3.0, "client": None},
        **{"listener": None, "lease": 30.0, "stamp": 0},
    }
    calls: dict[str, tuple[bytes, Any]] = {
        "a decision's clean-up": (statements.text["drop_expired"], ("long",)),
        "a grant": (statements.text["grant"], grant),
        "a release": (
            sql.SQL("SELECT * FROM {}.tumbler_release(%s, 'long', 'holder1')")
            .format(sql.Identifier(schema))
            .as_bytes(admin),
            (name_key(schema, "long"),),
        ),
    }

    def rows_read() -> int:
        # the session's counts not yet reported are in the view too: read before and after
        row = admin.execute(
            "SELECT seq_tup_read + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables "
            "WHERE relid = %s::regclass",
            (f"{schema}.tumbler_entries",),
        ).fetchone()
        assert row is not None
        return int(row[0])

    for call, (statement, arguments) in calls.items():
        with admin.transaction(force_rollback=True):
            before = rows_read()
            admin.execute(statement, arguments)
            read = rows_read() - before
            assert read < 100, f"{call} read {read} rows of a line of 2,000"
            # the unreadable rows gone, and the ended one (a grant and a decision delete it,
            # the release its own grant)
            assert rows_of(admin, schema, "long") == 2001, call
    assert rows_of(admin, schema, "long") == 2004


def test_a_grant_found_by_asking_is_taken_up_with_the_lease_asked(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    """A waiter whose wake-up has not come yet asks the server, which finds the grant the
    release made, on the waiter's own short lease: the request takes it up, and the server's
    lease becomes the one asked for, counted from the request."""
    with tumbler.connect(url) as one, tumbler.connect(url) as two:
        _handed_over(one._backend, two._backend)
        waiter = two._backend
        handed = waiter.wakeups.handoffs.take("stock", owner_hash("b"))  # as if not come yet
        assert handed is not None
        expires, asked_at = _expiry_and_now(admin, schema, "b")
        assert (expires - asked_at).total_seconds() <= waiter.capabilities.waiter_ttl
        grant = waiter.try_grant(_request("stock", "b"))
        assert grant is not None
        assert grant.token == handed[0]
        assert grant.granted_ttl == 30.0
        expires, _ = _expiry_and_now(admin, schema, "b")
        # counted from this request, the lease must end by the server's expiry
        assert grant.granted_ttl <= (expires - asked_at).total_seconds()
        assert waiter.release("stock", "b")


def test_a_hand_off_names_its_waiter_by_the_owner_its_entry_stores(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    """The wake-up's tag is the owner the waiter's entry stores, and the waiter's client
    finds the grant under it: the store and the hand-offs hash an owner alike."""
    with tumbler.connect(url) as one, tumbler.connect(url) as two:
        _handed_over(one._backend, two._backend)
        query = sql.SQL(
            "SELECT owner, token FROM {}.tumbler_entries WHERE name = 'stock' AND token IS NOT NULL"
        ).format(sql.Identifier(schema))
        row = admin.execute(query).fetchone()
        assert row is not None
        stored, token = row
        assert stored == owner_hash("b")
        # as the waiter's next try looks for it: by its owner id
        handed = two._backend.wakeups.handoffs.grant(_request("stock", "b"))
        assert handed is not None
        assert handed.token == token


def test_a_waiter_that_gives_up_a_grant_it_never_took_frees_the_lock(url: str) -> None:
    with tumbler.connect(url) as one, tumbler.connect(url) as two:
        holder, waiter = one._backend, two._backend
        _handed_over(holder, waiter)
        assert waiter.wakeups.handoffs  # handed over, not taken
        assert waiter.release("stock", "b")  # a live grant: it was handed over
        assert not waiter.wakeups.handoffs
        assert one.status("stock").holders == ()
        assert holder.try_grant(_request("stock", "c")) is not None


def _listener_held(admin: psycopg.Connection[Any], key: int) -> bool:
    """Whether a connection holds the listener key ``key`` (two-integer advisory lock)."""
    row = admin.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
        "AND classid = %s AND objid = %s AND objsubid = 2",
        (key >> 32, key & 0x7FFFFFFF),
    ).fetchone()
    assert row is not None
    return bool(row[0])


def test_a_waiter_whose_client_is_gone_is_not_handed_the_lock(
    url: str, admin: psycopg.Connection[Any]
) -> None:
    """A release hands the lock only to a waiter whose client still listens: one whose
    client is gone (closed, its process killed) would hold the lock for a whole lease. The
    release deletes its entry (it would hold a fair line up until it ran out), and the lock
    stays free."""
    with tumbler.connect(url) as one:
        holder = one._backend
        waiter = open_sync(parse_url(url))
        try:
            assert holder.try_grant(_request("stock", "a")) is not None
            with waiter.watch("stock", "b"):
                assert waiter.try_grant(_request("stock", "b")) is None
                key = waiter.wakeups.key
                assert _listener_held(admin, key)
        finally:
            waiter.close()
        eventually(lambda: not _listener_held(admin, key), "the listening connection is gone")
        assert one.status("stock").waiters == 1  # its entry is still there
        assert holder.release("stock", "a")
        assert one.status("stock").holders == ()  # not handed over
        assert one.status("stock").waiters == 0  # and its entry gone
        assert holder.try_grant(_request("stock", "c")) is not None


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_waiter_killed_before_its_client_listens_is_told_dead_too(
    url: str, admin: psycopg.Connection[Any], flavour: str
) -> None:
    """A waiter's first entry is written before its client listens (the locks enter the
    watch, which starts listening, only once a try failed): it names the client's listener
    key all the same, which the connection that wrote it holds till the listener does. A
    waiter killed in that moment is then told dead by the next release, as one killed later:
    its entry is deleted and the lock not handed to it (it held a fair line up for its
    entry's whole lease, 3 s)."""
    request = GrantRequest("stock", "b", False, 1, True, 30.0, "test")
    backend_of = load_backend(parse_url(url))

    async def first_try() -> Any:
        waiter = await backend_of.open_async(parse_url(url))
        try:
            watch = waiter.watch("stock", "b")  # made before the first try, as the locks do
            assert await waiter.try_grant(request) is None
            assert not waiter.wakeups.subscribed()
            watch.close()
            return waiter.wakeups.key
        finally:
            await waiter.close()

    with tumbler.connect(url) as one:
        holder = one._backend
        assert holder.try_grant(_request("stock", "a")) is not None
        if flavour == "sync":
            waiter = open_sync(parse_url(url))
            try:
                watch = waiter.watch("stock", "b")
                assert waiter.try_grant(request) is None
                assert not waiter.wakeups.subscribed()
                watch.close()
                key = waiter.wakeups.key
            finally:
                waiter.close()
        else:
            key = asyncio.run(first_try())
        eventually(lambda: not _listener_held(admin, key), "the waiter's connections are gone")
        assert one.status("stock").waiters == 1
        assert holder.release("stock", "a")
        assert one.status("stock").holders == ()  # not handed over
        assert one.status("stock").waiters == 0  # and its entry gone


def test_a_polling_waiters_entry_runs_out_a_second_after_its_last_poll(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    """Nothing tells a release that a polling waiter died (its client holds no listening
    connection): its entry running out is what ends it, and the line waits for that. Each
    poll (0.1 s apart at most) writes the entry again, so it lives 1 s, not the 3 s of a
    listening client's waiter (refreshed once a second)."""
    waiter_entry = sql.SQL(
        "SELECT extract(epoch FROM expires_at - statement_timestamp()) "
        "FROM {}.tumbler_entries WHERE name = %s AND token IS NULL"
    ).format(sql.Identifier(schema))
    fair = GrantRequest("stock", "b", False, 1, True, 30.0, "test")
    with tumbler.connect(url) as one, tumbler.connect(f"{url}&wakeups=poll") as polling:
        assert one._backend.try_grant(_request("stock", "a")) is not None
        assert polling._backend.try_grant(fair) is None
        row = admin.execute(waiter_entry, ("stock",)).fetchone()
        assert row is not None
        assert 0.5 < float(row[0]) <= POLLING_WAITER_TTL == 1.0


def test_a_shared_waiter_is_woken_to_ask_rather_than_handed_the_lock(url: str) -> None:
    """The statement hands over only to an exclusive waiter; the rule in the client decides
    for the others, and the release wakes those it lets through."""
    reader = GrantRequest("stock", "r", True, 0, False, 30.0, "test")
    with tumbler.connect(url) as one, tumbler.connect(url) as two:
        holder, waiter = one._backend, two._backend
        assert holder.try_grant(_request("stock", "a")) is not None
        with waiter.watch("stock", "r") as watch:
            assert waiter.try_grant(reader) is None
            assert holder.release("stock", "a")
            assert one.status("stock").holders == ()
            watch.wait(PATIENCE)
        assert not waiter.wakeups.handoffs
        assert waiter.try_grant(reader) is not None
        assert waiter.release("stock", "r")


# -- fencing tokens ------------------------------------------------------------------------


def test_tokens_keep_increasing_after_the_names_rows_are_gone(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    tokens = []
    with tumbler.connect(url) as locks:
        for _ in range(3):
            with locks.lock("fenced") as hold:
                tokens.append(hold.token)
            # a free name leaves no row behind
            assert rows_of(admin, schema, "fenced") == 0
        with locks.lock("another") as hold:
            tokens.append(hold.token)
        with locks.lock("fenced") as hold:
            tokens.append(hold.token)
    assert tokens == sorted(set(tokens))


def test_tokens_keep_increasing_across_a_restart_of_the_server(
    server: PostgreSQLServer, url: str
) -> None:
    # A release does not wait for the disk: the crash may forget it, and the lock is then
    # held until its lease ends, as after a crash of its holder. A short lease keeps that
    # wait short here.
    with tumbler.connect(url) as locks, locks.lock("restart-fenced", ttl=1) as hold:
        before = hold.token
    server.kill()  # a crash: nothing flushed that the kernel did not have
    server.start()
    with tumbler.connect(url) as locks, locks.lock("restart-fenced") as hold:
        assert hold.token > before


# -- connections that die ------------------------------------------------------------------


def _terminate_clients(admin: psycopg.Connection[Any]) -> int:
    row = admin.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE usename = %s AND pid <> pg_backend_pid()",
        (TUMBLER_USER,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_holder_whose_connections_are_terminated_keeps_its_lease_and_renews_it(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    with tumbler.connect(url) as holder, tumbler.connect(url) as other:
        lock = holder.lock("terminated", ttl=3.0)
        assert lock.acquire()
        hold = lock.hold
        assert hold is not None
        assert not other.lock("terminated").acquire(timeout=0)
        query = sql.SQL(
            "SELECT expires_at FROM {}.tumbler_entries WHERE name = 'terminated' "
            "AND token IS NOT NULL"
        ).format(sql.Identifier(schema))
        first = admin.execute(query).fetchone()
        assert first is not None
        assert _terminate_clients(admin) >= 1
        # the lease runs on in the server; the holder's next renewals (on new connections)
        # push it further, and nobody else gets the lock meanwhile

        def renewed_after(at: Any) -> bool:
            row = admin.execute(query).fetchone()
            return row is not None and row[0] > at

        eventually(lambda: renewed_after(first[0]), "the holder renewed on a new connection")
        second = admin.execute(query).fetchone()
        assert second is not None
        eventually(lambda: renewed_after(second[0]), "the holder renewed again")
        assert hold.held
        assert not other.lock("terminated").acquire(timeout=0)
        hold.release()
        assert other.lock("terminated").acquire(timeout=0)


# -- a network that drops replies -----------------------------------------------------------

#: every bound of the proxied clients: short, so that a call that ran out says so soon
_DROPPED = "statement_timeout=1&lock_timeout=0.5&socket_timeout=1&connect_timeout=1"


def _proxied_url(server: PostgreSQLServer, proxy: FaultProxy, schema: str) -> str:
    return (
        server.url.replace(f"{server.host}:{server.port}", f"127.0.0.1:{proxy.port}")
        + f"?schema={schema}&{_DROPPED}"
    )


def _request(name: str, owner: str) -> GrantRequest:
    return GrantRequest(name, owner, False, 1, False, 30.0, "test")


@pytest.mark.timeout(60)  # the backstop: a call that hangs fails here
def test_every_call_gives_up_when_the_network_drops_replies(
    server: PostgreSQLServer, schema: str
) -> None:
    with FaultProxy((server.host, server.port)) as proxy:
        locks = tumbler.connect(_proxied_url(server, proxy, schema))
        try:
            every_call_gives_up_when_replies_are_dropped(locks._backend, proxy)
        finally:
            locks.close()


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_waiter_rides_out_a_network_that_drops_replies_for_a_while(
    server: PostgreSQLServer, url: str, schema: str, flavour: str
) -> None:
    """A waiter whose grant request (or subscription) gets no reply within socket_timeout
    asks again until its own timeout rather than failing the acquire, and gets the lock when
    the holder lets go."""
    with FaultProxy((server.host, server.port)) as proxy, tumbler.connect(url) as holding:
        held = holding.lock("blip")
        assert held.acquire()
        proxied = _proxied_url(server, proxy, schema)

        def drop_replies_until_a_request_failed() -> None:
            eventually(lambda: holding.status("blip").waiters == 1, "it waits")
            failed = threading.Event()
            handler = _Failures(failed)
            logging.getLogger("tumbler").addHandler(handler)
            proxy.drop()
            try:
                assert failed.wait(PATIENCE), "no grant request failed"
            finally:
                logging.getLogger("tumbler").removeHandler(handler)
                proxy.heal()

        if flavour == "sync":
            with tumbler.connect(proxied) as other:
                call = background(lambda: other.lock("blip").acquire(timeout=PATIENCE))
                drop_replies_until_a_request_failed()
                held.release()
                assert call.result() is True
            return

        async def main() -> None:
            async with await tumbler.aio.connect(proxied) as other:
                waiting = asyncio.ensure_future(other.lock("blip").acquire(timeout=PATIENCE))
                await asyncio.to_thread(drop_replies_until_a_request_failed)
                held.release()  # the holder's own thread: a moment's block of the loop
                assert await waiting is True

        asyncio.run(main())


class _Failures(logging.Handler):
    """Sets ``failed`` when the lock layer says a grant request got no answer."""

    def __init__(self, failed: threading.Event) -> None:
        super().__init__(logging.DEBUG)
        self.failed = failed

    def emit(self, record: logging.LogRecord) -> None:
        if "did not answer a grant request" in record.getMessage():
            self.failed.set()


def every_call_gives_up_when_replies_are_dropped(backend: Any, proxy: FaultProxy) -> None:
    """The case of a blocking backend reached through ``proxy``, shared by the SQL backends."""
    held = backend.try_grant(_request("dropped", "holder"))
    assert held is not None
    renewal = Renewal("dropped", "holder", 30.0)
    proxy.drop("downstream")  # requests reach the server; its replies are lost
    # each raises within its bound instead of waiting for the lost reply for ever
    for call in (
        lambda: backend.try_grant(_request("dropped", "other")),
        lambda: backend.release("dropped", "holder"),
        lambda: backend.inspect("dropped"),
        lambda: backend.renew_all([renewal], 0.5),
    ):
        with pytest.raises(BackendUnavailable):
            call()
    proxy.heal()
    # nothing left behind trips the next calls
    # (the server may have run what the lost replies answered: the release, say)
    assert backend.renew_all([renewal], 5.0) in ([30.0], [None])
    assert backend.release("dropped", "holder") in (True, False)  # it may have gone
    again = backend.try_grant(_request("dropped", "other"))
    assert again is not None
    assert again.token > held.token
    assert len(backend.inspect("dropped").holders) == 1


async def aevery_call_gives_up_when_replies_are_dropped(backend: Any, proxy: FaultProxy) -> None:
    """:func:`every_call_gives_up_when_replies_are_dropped` for an asyncio backend."""
    held = await backend.try_grant(_request("dropped", "holder"))
    assert held is not None
    renewal = Renewal("dropped", "holder", 30.0)
    proxy.drop("downstream")
    for call in (
        lambda: backend.try_grant(_request("dropped", "other")),
        lambda: backend.release("dropped", "holder"),
        lambda: backend.inspect("dropped"),
        lambda: backend.renew_all([renewal], 0.5),
    ):
        with pytest.raises(BackendUnavailable):
            await call()
    proxy.heal()
    # (the server may have run what the lost replies answered: the release, say)
    assert await backend.renew_all([renewal], 5.0) in ([30.0], [None])
    assert await backend.release("dropped", "holder") in (True, False)  # it may have gone
    again = await backend.try_grant(_request("dropped", "other"))
    assert again is not None
    assert again.token > held.token
    assert len((await backend.inspect("dropped")).holders) == 1


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_asyncio_every_call_gives_up_when_the_network_drops_replies(
    server: PostgreSQLServer, schema: str
) -> None:
    async with FaultProxy((server.host, server.port)) as proxy:
        locks = await tumbler.aio.connect(_proxied_url(server, proxy, schema))
        try:
            await aevery_call_gives_up_when_replies_are_dropped(locks._backend, proxy)
        finally:
            await locks.close()


def test_a_restart_while_a_lock_is_held_and_waited_for(server: PostgreSQLServer, url: str) -> None:
    # a fast shutdown: every connection closed, the rows kept
    held_across_restart(url, server.restart)


def held_across_restart(
    url: str,
    restart: Callable[[], None],
    settled: Callable[[tumbler.Locks, int], None] = lambda holder, token: None,
) -> None:
    """A lock held and waited for while ``restart()`` runs: the holder still holds it (once
    ``settled(holder, its token)`` returns) and releases it, and the waiter then takes it
    with a higher token."""
    with tumbler.connect(url) as holder, tumbler.connect(url) as waiter:
        lock = holder.lock("restarted", ttl=10.0)
        assert lock.acquire()
        hold = lock.hold
        assert hold is not None
        before = hold.token
        waiting = waiter.lock("restarted")
        started = threading.Event()

        def wait_for_it() -> Any:
            started.set()
            assert waiting.acquire(timeout=PATIENCE)
            return waiting.hold  # the hold of the thread that took it

        call = background(wait_for_it)
        assert started.wait(PATIENCE)
        eventually(lambda: holder.status("restarted").waiters == 1, "the waiter queued")
        restart()
        assert hold.held
        settled(holder, before)
        hold.release()
        taken = call.result()
        assert taken.token > before
        taken.release()


# -- tumbler init --------------------------------------------------------------------------


def test_init_makes_the_schema_once_and_says_what_it_made(
    url: str, schema: str, admin: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", url]) == 0
    made = capsys.readouterr().out
    assert f'made "{schema}".tumbler_entries' in made
    assert TUMBLER_PASSWORD not in made
    tables = admin.execute(
        "SELECT count(*) FROM pg_class JOIN pg_namespace ON pg_namespace.oid = relnamespace "
        "WHERE nspname = %s AND relname IN "
        "('tumbler_entries', 'tumbler_evictions', 'tumbler_tokens')",
        (schema,),
    ).fetchone()
    assert tables == (3,)
    functions = admin.execute(
        "SELECT count(*) FROM pg_proc JOIN pg_namespace ON pg_namespace.oid = pronamespace "
        "WHERE nspname = %s AND proname IN "
        "('tumbler_grant', 'tumbler_release', 'tumbler_hand_off')",
        (schema,),
    ).fetchone()
    assert functions == (3,)
    assert main(["init", url]) == 0
    assert "nothing to make" in capsys.readouterr().out
    # the public call behind it says the same, without the password
    again = tumbler.prepare(url)
    assert again.endswith("are there already: nothing to make")
    assert TUMBLER_PASSWORD not in again
    with tumbler.connect(url) as locks, locks.lock("after-init") as hold:
        assert hold.token == 1  # the sequence init made, untouched by the second run


def waits_out_another_clients_set_up(
    url: str,
    flavour: str,
    bound: float,
    another_making: contextlib.AbstractContextManager[Callable[[], None]],
) -> None:
    """The instances of a service start together on a fresh database: all but one wait for
    the one making the tables, however short the URL's bounds on a call are (they are for
    calls on locks, not for another client's set-up). ``url``'s bounds are at most
    ``bound``; ``another_making`` holds the lock that makers take turns on, and gives the
    call that lets it go, having made nothing."""

    def start() -> None:
        if flavour == "sync":
            tumbler.connect(url).close()
            return

        async def main() -> None:
            await (await tumbler.aio.connect(url)).close()

        asyncio.run(main())

    with another_making as give_up, concurrent.futures.ThreadPoolExecutor(1) as pool:
        starting = pool.submit(start)
        with pytest.raises(concurrent.futures.TimeoutError):
            starting.result(timeout=3 * bound)  # still waiting, past every bound
        give_up()
        starting.result(timeout=PATIENCE)


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_client_that_starts_while_another_makes_the_tables_waits_for_them(
    server: PostgreSQLServer, url: str, schema: str, admin: psycopg.Connection[Any], flavour: str
) -> None:
    @contextlib.contextmanager
    def another_making() -> Iterator[Callable[[], None]]:
        with server.connect(TUMBLER_DATABASE) as maker:
            key = schema_key(schema)
            maker.execute("SELECT pg_advisory_lock(%s)", (key,))
            yield lambda: maker.execute("SELECT pg_advisory_unlock(%s)", (key,)).fetchone()

    short = f"{url}&lock_timeout=0.05&statement_timeout=0.2&socket_timeout=0.3"
    waits_out_another_clients_set_up(short, flavour, 0.3, another_making())
    made = admin.execute(
        "SELECT count(*) FROM pg_class JOIN pg_namespace ON pg_namespace.oid = relnamespace "
        "WHERE nspname = %s AND relname = 'tumbler_entries'",
        (schema,),
    ).fetchone()
    assert made == (1,)


def test_init_takes_the_url_from_the_environment(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TUMBLER_URL", url)
    assert main(["init"]) == 0
    assert "made" in capsys.readouterr().out


def test_init_of_a_backend_with_nothing_to_make_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["init", "memory://"]) == 0
    assert "needs nothing made before first use" in capsys.readouterr().out


def test_init_with_a_wrong_password_exits_77_without_showing_it(
    server: PostgreSQLServer, schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = "not-the-Pa55word"
    assert main(["init", server.url_for(TUMBLER_USER, wrong) + f"?schema={schema}"]) == 77
    assert wrong not in capsys.readouterr().err


# -- a role with only the grants the docs list ---------------------------------------------


def test_a_role_with_only_the_documented_grants_can_lock(
    server: PostgreSQLServer, url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    assert main(["init", url]) == 0  # the owner makes the schema
    role = f"minimal_{uuid.uuid4().hex[:8]}"
    password = "minimal-Pa55"
    quoted = sql.Identifier(schema)
    admin.execute(
        sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
            sql.Identifier(role), sql.Literal(password)
        )
    )
    for statement in (
        "GRANT CONNECT ON DATABASE {db} TO {role}",
        "GRANT USAGE ON SCHEMA {schema} TO {role}",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
        "GRANT USAGE, UPDATE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
        # a database that does not let every role run every function: the grant the docs give
        "REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} FROM PUBLIC",
        "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {role}",
        "REVOKE CREATE ON DATABASE {db} FROM PUBLIC",
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
    ):
        admin.execute(
            sql.SQL(statement).format(
                db=sql.Identifier(TUMBLER_DATABASE), role=sql.Identifier(role), schema=quoted
            )
        )
    minimal = server.url_for(role, password) + f"?schema={schema}"
    with tumbler.connect(minimal) as locks, tumbler.connect(url) as other:
        with locks.lock("minimal") as hold:
            assert hold.token > 0
            assert [state.name for state in other.status_all()] == ["minimal"]
        waiting = locks.lock("minimal-waited")
        with other.lock("minimal-waited"):

            def wait_for_it() -> Any:
                assert waiting.acquire(timeout=PATIENCE)
                return waiting.hold  # the hold of the thread that took it

            call = background(wait_for_it)
            eventually(lambda: other.status("minimal-waited").waiters == 1, "it waits")
        call.result().release()
        assert locks.lock("forced").acquire()
        assert other.force_release("forced", reason="a test") == 1


@pytest.mark.parametrize("pooler", ["none", "transaction"])
def test_a_role_that_may_create_objects_cannot_plant_a_function_in_a_grant(
    server: PostgreSQLServer, schema: str, admin: psycopg.Connection[Any], pooler: str
) -> None:
    """A schema named like the lock user comes first in the default search path: a function
    planted there that resolves better than the built-in (``nextval(text)`` beside
    ``pg_catalog.nextval(regclass)``) would run inside every grant, as the lock user."""
    suffix = uuid.uuid4().hex[:8]
    victim, attacker = f"victim_{suffix}", f"attacker_{suffix}"
    database = sql.Identifier(TUMBLER_DATABASE)
    for role in (victim, attacker):
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'role-Pa55'").format(sql.Identifier(role))
        )
        admin.execute(
            sql.SQL("GRANT CREATE, CONNECT ON DATABASE {} TO {}").format(
                database, sql.Identifier(role)
            )
        )
    url = server.url_for(victim, "role-Pa55") + f"?schema={schema}&pooler={pooler}"
    with tumbler.connect(url) as locks, locks.lock("planted") as hold:  # the schema is made
        before = hold.token
    with psycopg.connect(server.url_for(attacker, "role-Pa55"), autocommit=True) as hostile:
        planted = sql.Identifier(victim)
        for statement in (
            "CREATE SCHEMA {planted}",
            "GRANT USAGE ON SCHEMA {planted} TO PUBLIC",
            "CREATE FUNCTION {planted}.nextval(text) RETURNS bigint LANGUAGE sql "
            "AS 'SELECT 4242::bigint'",
        ):
            hostile.execute(sql.SQL(statement).format(planted=planted))
    with tumbler.connect(url) as locks, tumbler.connect(url) as other:
        tokens = [before]
        for _ in range(2):
            with locks.lock("planted") as hold:
                tokens.append(hold.token)
        # a semaphore's line the client decides, and a waiter handed the lock at a release
        with locks.semaphore("planted-semaphore", 2) as hold:
            tokens.append(hold.token)
        waiting = other.lock("planted")
        with locks.lock("planted") as hold:
            tokens.append(hold.token)

            def wait_for_it() -> Any:
                assert waiting.acquire(timeout=PATIENCE)
                return waiting.hold  # the hold of the thread that took it

            call = background(wait_for_it)
            eventually(lambda: locks.status("planted").waiters == 1, "it waits")
        handed = call.result()
        tokens.append(handed.token)
        handed.release()
    assert 4242 not in tokens
    assert tokens == sorted(set(tokens))


def test_functions_made_without_a_pinned_search_path_are_made_again(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    """A schema made by an earlier version, whose functions run with the caller's path."""
    tumbler.connect(url).close()
    function = sql.SQL("{}.tumbler_grant").format(sql.Identifier(schema))
    admin.execute(sql.SQL("ALTER FUNCTION {} RESET search_path").format(function))
    admin.execute(sql.SQL("COMMENT ON SCHEMA {} IS NULL").format(sql.Identifier(schema)))

    def pinned() -> Any:
        query = "SELECT proconfig FROM pg_proc WHERE oid = to_regproc(%s)"
        row = admin.execute(query, (function.as_string(admin),)).fetchone()
        return row and row[0]

    assert not pinned()
    with tumbler.connect(url) as locks, locks.lock("remade"):
        assert pinned() == ["search_path=pg_catalog, pg_temp"]


def test_a_schema_an_earlier_version_made_gets_its_indexes_and_grant_function(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    """An earlier version's schema lacked the indexes a release and a decision read the head
    of a line by, and its grant function took no max_waiters: a client of this version makes
    them, and drops the earlier function."""
    tumbler.connect(url).close()
    old = (
        "{}.tumbler_grant(bigint, text, text, boolean, integer, boolean, float8, text, "
        "boolean, float8, text, bigint, bigint)"
    )
    for index in ("tumbler_entries_limits", "tumbler_entries_bad_delay"):
        admin.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(schema, index)))
    admin.execute(sql.SQL("COMMENT ON SCHEMA {} IS NULL").format(sql.Identifier(schema)))
    admin.execute(
        sql.SQL("CREATE FUNCTION " + old + " RETURNS void LANGUAGE sql AS ''").format(
            sql.Identifier(schema)
        )
    )

    def found(name: str) -> bool:
        row = admin.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
        return bool(row and row[0])

    def overloads() -> int:
        row = admin.execute(
            "SELECT count(*) FROM pg_proc WHERE pronamespace = to_regnamespace(%s) "
            "AND proname = 'tumbler_grant'",
            (sql.Identifier(schema).as_string(admin),),
        ).fetchone()
        assert row is not None
        return int(row[0])

    assert not found(f'"{schema}".tumbler_entries_limits')
    assert not found(f'"{schema}".tumbler_entries_bad_delay')
    assert overloads() == 2
    with tumbler.connect(url) as locks, locks.lock("remade"):
        assert found(f'"{schema}".tumbler_entries_limits')
        assert found(f'"{schema}".tumbler_entries_bad_delay')
        assert overloads() == 1


def test_the_schemas_version_follows_every_part_its_statements_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A schema is made again when its version differs: a change of a part the functions
    name (``{unreadable_at}`` ...) alone is a new version too, or the old functions stay."""
    before = Statements.of("s").version
    monkeypatch.setitem(postgresql_statements._PARTS, "unreadable_at", "(false)")
    assert Statements.of("s").version != before


def test_a_role_that_may_not_make_the_schema_is_told_so(
    server: PostgreSQLServer, schema: str, admin: psycopg.Connection[Any]
) -> None:
    role = f"nocreate_{uuid.uuid4().hex[:8]}"
    admin.execute(
        sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'no-create-7'").format(sql.Identifier(role))
    )
    admin.execute(
        sql.SQL("REVOKE CREATE ON DATABASE {} FROM PUBLIC").format(sql.Identifier(TUMBLER_DATABASE))
    )
    with pytest.raises(PermissionDenied, match="permission denied"):
        tumbler.connect(server.url_for(role, "no-create-7") + f"?schema={schema}")


def test_a_wrong_password_is_refused_without_showing_it(server: PostgreSQLServer) -> None:
    wrong = "not-the-Passw0rd"
    with pytest.raises(PermissionDenied) as refused:
        tumbler.connect(server.url_for(TUMBLER_USER, wrong))
    assert wrong not in str(refused.value)
    assert TUMBLER_PASSWORD not in str(refused.value)


def test_a_database_that_does_not_exist_is_a_configuration_error(
    server: PostgreSQLServer,
) -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        tumbler.connect(server.url_for(database="no_such_database"))


# -- the URL grammar -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql://u:secret@h/db?schema=", "schema"),
        ("postgresql://u:secret@h/db?schema=" + "x" * 64, "schema"),
        ("postgresql://u:secret@h/db?sslmode=sometimes", "sslmode"),
        ("postgresql://u:secret@h/db?sslmode=verify-full", "sslrootcert"),
        ("postgresql://u:secret@h/db?sslmode=disable&sslrootcert=/etc/hostname", "sslrootcert"),
        ("postgresql://u:secret@h/db?connect_timeout=0", "connect_timeout"),
        ("postgresql://u:secret@h/db?statement_timeout=-1", "statement_timeout"),
        ("postgresql://u:secret@h/db?lock_timeout=9&statement_timeout=5", "lock_timeout"),
        ("postgresql://u:secret@h/db?socket_timeout=2&statement_timeout=5", "socket_timeout"),
        ("postgresql://u:secret@h/db?max_connections=0", "max_connections"),
        ("postgresql://u:secret@h/db?wakeups=push", "wakeups"),
        ("postgresql://u:secret@h/db?pooler=session", "pooler"),
        ("postgresql://u:secret@h/db?pooler=transaction&wakeups=listen", "LISTEN"),
        ("postgresql://u:secret@h/db?prefix=x", "unknown URL option"),
        ("postgresql://u:secret@h1,h2/db", "one host"),
        ("postgresql://u:secret@h:99999/db", "port"),
        ("postgresql://u:secret@h/db?host=relative/dir", "host="),
        ("postgresql://u:secret@h/db?host=/run/postgresql", "not both"),
        ("postgresql://u:secret@h/a/b", "database"),
    ],
)
def test_bad_urls_are_refused_without_the_password(url: str, says: str) -> None:
    with pytest.raises(InvalidURL, match=says) as refused:
        parse_config(parse_url(url))
    assert "secret" not in str(refused.value)


def test_a_missing_certificate_file_is_a_configuration_error(tmp_path: Path) -> None:
    missing = tmp_path / "ca.pem"
    with pytest.raises(ConfigurationError, match="not a file"):
        parse_config(parse_url(f"postgres://u@h/db?sslmode=verify-full&sslrootcert={missing}"))


def test_what_a_url_says() -> None:
    config = parse_config(
        parse_url(
            "postgres://me:p%40ss@db.example:6543/app?schema=Locks&wakeups=poll"
            "&statement_timeout=2.5&lock_timeout=1&max_connections=3"
        )
    )
    options = config.connect_options
    assert (options["host"], options["port"], options["dbname"]) == ("db.example", 6543, "app")
    assert (options["user"], options["password"]) == ("me", "p@ss")
    assert config.schema == "Locks"
    assert not config.listen
    assert (config.statement_timeout, config.lock_timeout, config.max_connections) == (2.5, 1, 3)
    assert config.socket_timeout == 5.0  # Redis's default
    assert parse_config(parse_url("postgres://h/db?statement_timeout=8")).socket_timeout == 8.0
    short = parse_config(
        parse_url("postgres://h/db?socket_timeout=0.5&statement_timeout=0.5&lock_timeout=0.2")
    )
    assert short.socket_timeout == 0.5
    assert "p@ss" not in repr(config)
    socket = parse_config(parse_url("postgresql:///app?host=/run/postgresql"))
    assert socket.connect_options["host"] == "/run/postgresql"
    assert "port" not in socket.connect_options

    assert not config.pooled


def test_a_transaction_pooler_polls_and_keeps_no_session_state() -> None:
    pooled = parse_config(parse_url("postgresql://u@h/db?pooler=transaction"))
    assert pooled.pooled
    assert not pooled.listen  # wakeups=poll is implied
    explicit = parse_config(parse_url("postgresql://u@h/db?pooler=transaction&wakeups=poll"))
    assert explicit.pooled
    assert not explicit.listen
    assert parse_config(parse_url("postgresql://u@h/db?pooler=none")).listen


# -- a waiter's entry that runs out between the two transactions of a decision --------------


def _waiting_for_names(admin: psycopg.Connection[Any]) -> int:
    """How many sessions wait for a lock (a name's row, which another transaction holds)."""
    row = admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_waiters_entry_that_runs_out_before_its_decision_is_written_anew(
    server: PostgreSQLServer,
    url: str,
    schema: str,
    admin: psycopg.Connection[Any],
    flavour: str,
) -> None:
    """A request the grant function sends back (a semaphore's) is decided in a second
    transaction, which reads the live line: the waiter's own entry could run out in between,
    be missing from that line yet still in the table, and writing it anew broke the (name,
    owner) key, an internal error ("duplicate key value violates unique constraint")
    raised from an acquire. Here the entry runs out in that gap for certain: a transaction
    that holds the name's lock keeps the retry waiting, a second one queues behind it and,
    once the grant function is done, ends the entry's lease before the decision goes on."""
    url = f"{url}&lock_timeout=4&statement_timeout=8"
    holder = GrantRequest("crowd", "h", True, 1, True, 30.0, "test")
    waiter = GrantRequest("crowd", "w", True, 1, True, 30.0, "test")
    key = name_key(schema, "crowd")
    backend = open_sync(parse_url(url))
    try:
        assert backend.try_grant(holder) is not None
        assert backend.try_grant(waiter) is None  # its entry, in line
        with (
            server.connect(TUMBLER_DATABASE) as first,
            server.connect(TUMBLER_DATABASE) as second,
        ):
            first.execute("BEGIN")
            first.execute(
                sql.SQL("SELECT {}.tumbler_take_name(%s, %s)").format(sql.Identifier(schema)),
                (key, "crowd"),
            )

            async def retry() -> Any:
                other = await open_async(parse_url(url))
                try:
                    return await other.try_grant(waiter)
                finally:
                    await other.close()

            if flavour == "sync":
                call = background(lambda: backend.try_grant(waiter))
            else:
                call = background(lambda: asyncio.run(retry()))
            eventually(
                lambda: call.done() or _waiting_for_names(admin) == 1,
                "the retry waits for the name",
            )
            assert not call.done()

            def expire() -> None:
                with second.transaction():
                    second.execute(
                        sql.SQL("SELECT {}.tumbler_take_name(%s, %s)").format(
                            sql.Identifier(schema)
                        ),
                        (key, "crowd"),
                    )
                    second.execute(
                        sql.SQL(
                            "UPDATE {}.tumbler_entries SET expires_at = clock_timestamp() "
                            "- interval '1 second' WHERE name = 'crowd' AND owner = %s"
                        ).format(sql.Identifier(schema)),
                        (owner_hash("w"),),
                    )

            expiring = background(expire)
            eventually(lambda: _waiting_for_names(admin) == 2, "the expiry queues behind it")
            first.execute("COMMIT")
            expiring.result()
            assert call.result() is None  # in line again, not granted
        assert rows_of(admin, schema, "crowd") == 2
    finally:
        backend.close()


# -- a server out of connections -------------------------------------------------------------


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_server_out_of_connections_is_named_and_ridden_out(
    tmp_path: Path, flavour: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A waiter whose client cannot open its listening connection, because the server has
    every connection it allows in use, is told why at once, typed (``OutOfConnections``, a
    ``BackendUnavailable``, with the server's refusal): it used to wait out the listener's
    patience (10 s) and fail with "could not listen for wake-ups in time". It then waits by
    polling, and gets the lock when the holder lets go."""
    try:
        started = PostgreSQLServer(tmp_path / "small", max_connections=8).start()
    except (ServerError, OSError) as error:
        server_unavailable(f"cannot start postgres: {error}")
    url = f"{started.url}?schema=crowded"
    filled: list[psycopg.Connection[Any]] = []
    with started.connect() as admin:
        row = admin.execute(
            "SELECT current_setting('max_connections')::int "
            "- current_setting('superuser_reserved_connections')::int"
        ).fetchone()
        assert row is not None
    # the two clients' connections (each one's for calls; the holder never waits, so it
    # opens no listening one) and every other one the server gives this user
    free = int(row[0]) - 2
    try:
        with tumbler.connect(url) as holder:
            holder_lock = holder.lock("busy")
            assert holder_lock.acquire()
            if flavour == "sync":
                waiter = tumbler.connect(url)
            else:
                loop = asyncio.new_event_loop()
                waiter_aio = loop.run_until_complete(tumbler.aio.connect(url))
            eventually(
                lambda: client_backends(started) == 2,
                "the backends of the connections closed before (the launcher's, the admin's) "
                "exited",
            )
            # every connection the server allows this user, taken
            options = parse_config(parse_url(url)).connect_options
            filled.extend(psycopg.connect(**options) for _ in range(free))
            with pytest.raises(psycopg.OperationalError, match="connection slots are reserved"):
                psycopg.connect(**options)
            # it cannot listen, so it polls, and says why (typed, with the server's refusal)
            if flavour == "sync":
                waits_by_polling(
                    caplog,
                    filled,
                    holder_lock,
                    lambda timeout: waiter.lock("busy").acquire(timeout=timeout),
                    waiter.close,
                )
            else:
                waits_by_polling(
                    caplog,
                    filled,
                    holder_lock,
                    lambda timeout: loop.run_until_complete(
                        waiter_aio.lock("busy").acquire(timeout=timeout)
                    ),
                    lambda: close_on(loop, waiter_aio),
                )
    finally:
        for connection in filled:
            connection.close()
        started.close()


def close_on(loop: asyncio.AbstractEventLoop, client: tumbler.aio.Locks) -> None:
    loop.run_until_complete(client.close())
    loop.close()


def client_backends(server: PostgreSQLServer) -> int:
    """How many of ``server``'s processes serve a client connection (their titles name the
    client's address: ``postgres: USER DATABASE 127.0.0.1(PORT) STATE``, or ``[local]``).
    A closed connection's backend keeps its connection slot until it has exited, which on a
    busy machine can come after the next connection asks for one."""
    import psutil  # mirakuru's own dependency

    serving = 0
    for pid in server.pids()[1:]:
        with contextlib.suppress(psutil.Error):
            title = " ".join(psutil.Process(pid).cmdline())
            serving += "127.0.0.1(" in title or "[local]" in title
    return serving


def waits_by_polling(
    caplog: pytest.LogCaptureFixture,
    filled: list[Any],
    holder_lock: tumbler.Lock,
    acquire: Callable[[float], bool],
    close: Callable[[], None],
) -> None:
    """The case of a SQL backend whose server has every connection it allows in use
    (``filled`` holds them): a waiter whose client cannot open its listening connection says
    why (``OutOfConnections``, the server's refusal) and waits by polling, and gets the lock
    once the connections are given back and the holder lets go. ``acquire(timeout)``: the
    waiter's acquire (an asyncio one run on its loop); ``close``: closes its client."""
    with caplog.at_level(logging.WARNING, logger="tumbler"):
        call = background(lambda: acquire(PATIENCE))

        def told() -> bool:
            return any(
                "OutOfConnections" in record.getMessage()
                and "refused a connection" in record.getMessage()
                and "'busy'" in record.getMessage()
                for record in caplog.records
            )

        try:
            eventually(told, "the waiter was told why it cannot listen")
            for connection in filled:
                connection.close()
            filled.clear()
            holder_lock.release()
            assert call.result() is True  # the polling waiter got the lock
        finally:
            close()


# -- a fair waiter killed while it waits -------------------------------------------------------

WORKER = str(Path(conformance_worker.__file__))


def killed_fair_waiter_holds_nothing_up(
    url: str,
    flavour: str,
    waiters_listeners: Callable[[], list[Any]],
    listens: Callable[[Any], bool],
) -> None:
    """A fair waiter's process is killed (SIGKILL: it says nothing) while it waits first in
    line; once the server has seen its connections close (``listens`` of its listener is
    false), the holder releases, and the next fair waiter must have the lock within the
    re-check interval (1 s), the bound a release that skips the dead waiter keeps: before,
    the dead waiter's entry held the line up until its lease ran out (waiter_ttl, 3 s).

    ``waiters_listeners`` gives the listener of each waiting entry, in line order. The next
    waiter's client listens before the release: one whose listener is not there yet cannot
    be told, and learns of the release at its next re-check, whose own round trip comes on
    top of the interval."""
    recheck = 1.0
    with tumbler.connect(url) as locks:
        first = locks.lock("line", fair=True)
        assert first.acquire()
        child = subprocess.Popen(
            [sys.executable, WORKER, "hold", url, "line", os.devnull, "30", flavour, "--fair"]
        )
        try:
            key: list[Any] = []

            def child_listens() -> bool:
                found = waiters_listeners()[:1]
                if not found or found[0] is None or not listens(found[0]):
                    return False
                key[:] = found
                return True

            def next_listens() -> bool:
                found = waiters_listeners()
                return len(found) == 2 and found[1] is not None and listens(found[1])

            eventually(child_listens, "the child waits first in line, and listens")

            async def wait_async() -> bool:
                async with await tumbler.aio.connect(url) as others:
                    return bool(await others.lock("line", fair=True).acquire(timeout=PATIENCE))

            def wait_sync() -> bool:
                with tumbler.connect(url) as others:
                    return bool(others.lock("line", fair=True).acquire(timeout=PATIENCE))

            call = background(wait_sync if flavour == "sync" else lambda: asyncio.run(wait_async()))
            eventually(next_listens, "the next waiter waits behind, and listens")
            child.send_signal(signal.SIGKILL)
            child.wait()
            eventually(lambda: not listens(key[0]), "the server sees the child's connections go")
            released_at = time.monotonic()
            first.release()
            assert call.result() is True
            assert time.monotonic() - released_at < recheck
        finally:
            if child.poll() is None:
                child.kill()
            child.wait()


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_killed_fair_waiter_holds_the_line_up_no_longer_than_a_recheck(
    url: str, schema: str, admin: psycopg.Connection[Any], flavour: str
) -> None:
    def waiters_listeners() -> list[Any]:
        rows = admin.execute(
            sql.SQL(
                "SELECT listener FROM {}.tumbler_entries WHERE name = 'line' AND token IS NULL "
                "ORDER BY seq"
            ).format(sql.Identifier(schema))
        ).fetchall()
        return [row[0] for row in rows]

    killed_fair_waiter_holds_nothing_up(
        url, flavour, waiters_listeners, lambda key: _listener_held(admin, key)
    )


# -- a waiter that dies between a release's hand-off and its take-up ------------------------

#: the next waiter's acquire: long enough for a re-check or two, far shorter than the lease
#: a dead waiter's grant held before (30 s)
_NEXT_WAITS = 5.0


def _dead_waiters_request(fair: bool) -> GrantRequest:
    return GrantRequest("line", "dead", False, 1, fair, 30.0, "test")


def _handed_lease_left(state: Any) -> float:
    (handed,) = state.holders
    assert handed.token is not None
    return float(handed.expires_in)


#: how long the dead waiter of the lingering case lives on after the hand-off reached it:
#: more than the dead-waiter bound, less than the short lease the handed grant lives on
_LINGERS = 1.6


def handed_to_the_dead_holds_nothing_up(
    url: str, flavour: str, fair: bool, lingers: float = 0.0
) -> None:
    """A release hands the lock to the first waiter while its client still listens, and the
    client dies before it takes the grant up (its connections closed, nothing said: the
    moment after a kill, before the server saw it), ``lingers`` seconds after the hand-off
    reached it. The grant lives on the waiter's own short lease (``waiter_ttl``), never on the
    30 s it asked for, and stays its while its client lives; the next live waiter has the lock
    within the dead-waiter bound of the death, with a greater token.

    The bound counts from the death, not from the release: the next waiter learns of the
    death at its first re-check after it, and a re-check that ran between the release and the
    death (the moments a loaded machine stretches) found the waiter alive."""
    if flavour == "async":
        asyncio.run(_handed_to_the_dead_holds_nothing_up_async(url, fair, lingers))
        return
    backend_of = load_backend(parse_url(url))
    with tumbler.connect(url) as locks, tumbler.connect(url) as others:
        holder = locks.lock("line", fair=fair)
        assert holder.acquire(timeout=0)
        dead = backend_of.open_sync(parse_url(url))
        try:
            with dead.watch("line", "dead"):  # listens: the release may hand it the lock
                assert dead.try_grant(_dead_waiters_request(fair)) is None
            nexts = background(lambda: others.lock("line", fair=fair).acquire(timeout=_NEXT_WAITS))
            eventually(lambda: locks.status("line").waiters == 2, "the next waiter waits behind")
            holder.release()
            eventually(lambda: bool(dead.wakeups.handoffs), "the hand-off reached the waiter")
            assert _handed_lease_left(locks.status("line")) <= dead.capabilities.waiter_ttl
            if lingers:
                time.sleep(lingers)  # alive, and so still the lock's, however often re-checked
                assert not nexts.done()
        finally:
            dead.close()  # gone before it took the grant up
            gone_at = time.monotonic()
        assert nexts.result() is True
        assert time.monotonic() - gone_at < DEAD_WAITER_BOUND
        (state,) = locks.status_all()
        assert len(state.holders) == 1  # the next waiter's, not the dead one's


async def _handed_to_the_dead_holds_nothing_up_async(url: str, fair: bool, lingers: float) -> None:
    backend_of = load_backend(parse_url(url))
    async with await tumbler.aio.connect(url) as locks, await tumbler.aio.connect(url) as others:
        holder = locks.lock("line", fair=fair)
        assert await holder.acquire(timeout=0)
        dead = await backend_of.open_async(parse_url(url))
        nexts = asyncio.ensure_future(asyncio.sleep(0))
        try:
            async with dead.watch("line", "dead"):
                assert await dead.try_grant(_dead_waiters_request(fair)) is None
            nexts = asyncio.ensure_future(
                others.lock("line", fair=fair).acquire(timeout=_NEXT_WAITS)
            )

            async def two_wait() -> bool:
                return (await locks.status("line")).waiters == 2

            await aeventually(two_wait, "the next waiter waits behind")
            await holder.release()

            async def handed() -> bool:
                return bool(dead.wakeups.handoffs)

            await aeventually(handed, "the hand-off reached the waiter")
            left = _handed_lease_left(await locks.status("line"))
            assert left <= dead.capabilities.waiter_ttl
            if lingers:
                await asyncio.sleep(lingers)
                assert not nexts.done()
        except BaseException:
            nexts.cancel()
            raise
        finally:
            await dead.close()
            gone_at = time.monotonic()
        assert await nexts is True
        assert time.monotonic() - gone_at < DEAD_WAITER_BOUND
        (state,) = await locks.status_all()
        assert len(state.holders) == 1


@pytest.mark.parametrize("fair", [True, False], ids=["fair", "unfair"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_hand_off_to_a_waiter_that_died_before_taking_it_holds_nothing_up(
    url: str, flavour: str, fair: bool
) -> None:
    handed_to_the_dead_holds_nothing_up(url, flavour, fair)


def test_a_waiter_handed_the_lock_keeps_it_till_it_dies_then_the_next_has_it(url: str) -> None:
    handed_to_the_dead_holds_nothing_up(url, "sync", True, lingers=_LINGERS)


# -- max_waiters ---------------------------------------------------------------------------


def full_line_refuses_a_waiter_decided_in_the_client(url: str, flavour: str) -> None:
    """A semaphore's request is decided in the client (the grant routine sends it back): a
    new waiter there is refused too once ``max_waiters`` wait, and writes nothing; the
    waiter already in line keeps its place, and a single try still answers."""
    holder = GrantRequest("sem", "h", True, 1, True, 30.0, "test")
    first = GrantRequest("sem", "w1", True, 1, True, 30.0, "test")
    second = GrantRequest("sem", "w2", True, 1, True, 30.0, "test")
    single = GrantRequest("sem", "w3", True, 1, True, 30.0, "test", queue=False)
    url = f"{url}{'&' if '?' in url else '?'}max_waiters=1"
    backend_of = load_backend(parse_url(url))

    async def calls() -> list[Any]:
        backend = await backend_of.open_async(parse_url(url))
        try:
            answers: list[Any] = [await backend.try_grant(r) for r in (holder, first)]
            with pytest.raises(TooManyWaiters, match="max_waiters") as refused:
                await backend.try_grant(second)
            assert refused.value.lock_name == "sem"
            answers += [await backend.try_grant(single), await backend.try_grant(first)]
            answers.append((await backend.inspect("sem")).waiters)
            return answers
        finally:
            await backend.close()

    def blocking_calls() -> list[Any]:
        backend = backend_of.open_sync(parse_url(url))
        try:
            answers: list[Any] = [backend.try_grant(r) for r in (holder, first)]
            with pytest.raises(TooManyWaiters, match="max_waiters") as refused:
                backend.try_grant(second)
            assert refused.value.lock_name == "sem"
            answers += [backend.try_grant(single), backend.try_grant(first)]
            answers.append(backend.inspect("sem").waiters)
            return answers
        finally:
            backend.close()

    granted, *rest = blocking_calls() if flavour == "sync" else asyncio.run(calls())
    assert granted is not None
    assert rest == [None, None, None, 1]


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_full_line_refuses_a_waiter_decided_in_the_client(url: str, flavour: str) -> None:
    full_line_refuses_a_waiter_decided_in_the_client(url, flavour)


def test_max_waiters_defaults_to_ten_thousand_and_is_checked(url: str) -> None:
    assert parse_config(parse_url(url)).max_waiters == 10_000
    with pytest.raises(InvalidURL, match="max_waiters"):
        parse_config(parse_url(f"{url}&max_waiters=0"))
