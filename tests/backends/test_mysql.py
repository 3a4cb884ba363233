"""mysql://, mariadb://: what is particular to the MySQL / MariaDB backend, on real MariaDB.

The conformance suite runs every generic lock case on the ``mysql`` and ``mysql-tls``
targets; the procedures are held to the rule in ``test_mysql_statements.py``. Here: tokens
keep increasing across a crash and restart of the server; a restart while a lock is held and
waited for; a holder whose connections are killed (``KILL CONNECTION``) keeps its lease; a
waiter is handed the lock by the release and takes it once one read of its entry confirms
it, and a forged or stale hand-off grants nothing; the listener outlives a short
socket_timeout; names are bytes; a user with only the documented grants; a user that may
only read, holding every locking read it may, holds no decision up; a release that a
deadlock rolls back is run again; a URL that asks for TLS refuses a server without it;
renewals go by the batch; closed clients leave no wake-ups behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pymysql
import pytest

import tumbler
import tumbler.aio
from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest, Renewal
from tumbler.backends.kit.owners import owner_hash
from tumbler.backends.mysql.common import (
    aclose_connection,
    aopen_connection,
    open_connection,
    parse_config,
)
from tumbler.backends.mysql.opener import open_async, open_sync
from tumbler.backends.mysql.statements import RENEW_ROWS
from tumbler.cli import main
from tumbler.demo import run_demo
from tumbler.errors import BackendUnavailable, ConfigurationError, InvalidURL, PermissionDenied
from tumbler.testing.backends.mysql.server import (
    TUMBLER_DATABASE,
    TUMBLER_PASSWORD,
    TUMBLER_USER,
    MariaDBServer,
)
from tumbler.testing.conformance.compat import (
    PATIENCE,
    aeventually,
    background,
    eventually,
    gather,
)
from tumbler.testing.conformance.plugin import server_unavailable
from tumbler.testing.servers import ServerError, make_tls_files
from tumbler.torture.proxy import FaultProxy

from .test_postgresql import (
    _LINGERS,
    a_silent_listener_is_replaced,
    aevery_call_gives_up_when_replies_are_dropped,
    close_on,
    every_call_gives_up_when_replies_are_dropped,
    full_line_refuses_a_waiter_decided_in_the_client,
    handed_to_the_dead_holds_nothing_up,
    held_across_restart,
    killed_fair_waiter_holds_nothing_up,
    waits_by_polling,
    waits_out_another_clients_set_up,
)


def _request(name: str, owner: str) -> GrantRequest:
    return GrantRequest(name, owner, False, 1, False, 30.0, "test")


def test_tokens_keep_increasing_across_a_crash_of_the_server(
    fresh_mariadb_server: MariaDBServer,
) -> None:
    url = fresh_mariadb_server.url
    with tumbler.connect(url) as locks, locks.lock("restart-fenced", ttl=1) as hold:
        before = hold.token
    fresh_mariadb_server.kill()  # a crash: nothing kept that the kernel did not have
    fresh_mariadb_server.start()
    with tumbler.connect(url) as locks, locks.lock("restart-fenced", timeout=PATIENCE) as hold:
        assert hold.token > before


def test_a_waiter_takes_the_grant_its_wake_up_carries_once_the_server_shows_it(
    mariadb_server: MariaDBServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"{mariadb_server.url}?table_prefix=handoff_"
    with tumbler.connect(url) as one, tumbler.connect(url) as two:
        holder, waiter = one._backend, two._backend
        first = holder.try_grant(_request("stock", "a"))
        assert first is not None
        with waiter.watch("stock", "b") as watch:  # listens: its releases reach it
            assert waiter.try_grant(_request("stock", "b")) is None  # queued
            assert holder.release("stock", "a")
            watch.wait(PATIENCE)
        # granted by the release itself: the waiter has done nothing since it queued
        (handed,) = one.status("stock").holders
        assert handed.token > first.token
        # another request finds the waiter's client listening: the grant stays its own
        assert holder.try_grant(_request("stock", "c")) is None
        assert holder.release("stock", "c") is False  # withdrawn
        assert [h.token for h in one.status("stock").holders] == [handed.token]
        calls = 0
        run = waiter.pool.run

        def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            return run(*args, **kwargs)

        monkeypatch.setattr(waiter.pool, "run", counted)
        grant = waiter.try_grant(_request("stock", "b"))
        assert calls == 1  # one write to its own entry, which takes the grant up
        assert grant is not None
        assert grant.token == handed.token
        assert grant.granted_ttl == 30.0  # taken up: the lease asked, from this try
        (taken,) = one.status("stock").holders
        assert waiter.capabilities.waiter_ttl < taken.expires_in <= 30.0
        assert waiter.release("stock", "b")
        assert one.status("stock").holders == ()


def test_a_hand_off_names_its_waiter_by_the_owner_its_entry_stores(
    mariadb_server: MariaDBServer,
) -> None:
    """The wake-up's tag is the owner the waiter's entry stores, and the waiter's client
    finds the grant under it: the store and the hand-offs hash an owner alike."""
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    url = f"{mariadb_server.url}?table_prefix={prefix}"
    with tumbler.connect(url) as one, tumbler.connect(url) as two:
        holder, waiter = one._backend, two._backend
        assert holder.try_grant(_request("stock", "a")) is not None
        with waiter.watch("stock", "b") as watch:  # listens: its releases reach it
            assert waiter.try_grant(_request("stock", "b")) is None  # queued
            assert holder.release("stock", "a")
            watch.wait(PATIENCE)
        with mariadb_server.connect(TUMBLER_DATABASE) as admin, admin.cursor() as cursor:
            cursor.execute(
                f"SELECT owner, token FROM {prefix}entries WHERE name = %s AND token IS NOT NULL",
                ("stock",),
            )
            row = cursor.fetchone()
        assert row is not None
        stored, token = row
        assert (stored.decode() if isinstance(stored, bytes) else stored) == owner_hash("b")
        # as the waiter's next try looks for it: by its owner id
        handed = waiter.wakeups.handoffs.grant(_request("stock", "b"))
        assert handed is not None
        assert handed.token == token


def test_the_listener_outlives_a_short_socket_timeout(mariadb_server: MariaDBServer) -> None:
    """The listener's sleep ends within socket_timeout (which the blocking driver applies to
    every read, the sleep's too): with a timeout shorter than the re-check interval it keeps
    its connection, rather than losing it at every sleep and missing the rings meanwhile."""
    url = f"{mariadb_server.url}?table_prefix=short_&socket_timeout=0.5&lock_timeout=0.2"
    with tumbler.connect(url) as locks:
        backend = locks._backend
        with backend.watch("short", "w"):  # starts listening
            assert backend.wakeups.subscribed()
            listener = backend.pool.run(_listener_of(backend.wakeups.key))
            assert listener is not None
            started = time.monotonic()
            # the claim is about time: three socket_timeouts must go by
            eventually(lambda: time.monotonic() - started > 1.5, "1.5 s went by")
            assert backend.pool.run(_listener_of(backend.wakeups.key)) == listener
            assert backend.wakeups.subscribed()


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_client_that_starts_while_another_makes_the_tables_waits_for_them(
    mariadb_server: MariaDBServer, flavour: str
) -> None:
    prefix = f"s{uuid.uuid4().hex[:8]}_"

    @contextlib.contextmanager
    def another_making() -> Iterator[Callable[[], None]]:
        with mariadb_server.connect(TUMBLER_DATABASE) as maker, maker.cursor() as cursor:
            name = "LEFT(CONCAT('tumbler-schema-', MD5(CONCAT(DATABASE(), '.', %s))), 64)"
            cursor.execute(f"SELECT GET_LOCK({name}, 0)", (f"tumbler-schema-{prefix}",))
            assert cursor.fetchone() == (1,)
            yield lambda: cursor.execute(
                f"SELECT RELEASE_LOCK({name})", (f"tumbler-schema-{prefix}",)
            )

    url = f"{mariadb_server.url}?table_prefix={prefix}&socket_timeout=0.3&lock_timeout=0.1"
    waits_out_another_clients_set_up(url, flavour, 0.3, another_making())
    assert main(["init", url]) == 0  # made: nothing left to make


def _listener_of(key: int) -> Any:
    def read(connection: Any) -> Any:
        with connection.cursor() as cursor:
            cursor.execute("SELECT IS_USED_LOCK(CONCAT('tumbler-listener-', %s))", (key,))
            row = cursor.fetchone()
        return None if row is None else row[0]

    return read


def test_a_restart_while_a_lock_is_held_and_waited_for(
    fresh_mariadb_server: MariaDBServer,
) -> None:
    # an orderly shutdown: every connection closed, the rows kept
    held_across_restart(fresh_mariadb_server.url, fresh_mariadb_server.restart)


def test_a_holder_whose_connections_are_killed_keeps_its_lease_and_renews_it(
    mariadb_server: MariaDBServer,
) -> None:
    prefix = "killed_"
    url = f"{mariadb_server.url}?table_prefix={prefix}"
    query = (
        f"SELECT expires_at FROM {TUMBLER_DATABASE}.{prefix}entries "
        "WHERE name = 'killed' AND token IS NOT NULL"
    )
    with mariadb_server.connect() as admin, admin.cursor() as cursor:

        def expiry() -> Any:
            cursor.execute(query)
            row = cursor.fetchone()
            return None if row is None else row[0]

        with tumbler.connect(url) as holder, tumbler.connect(url) as other:
            lock = holder.lock("killed", ttl=3.0)
            assert lock.acquire()
            hold = lock.hold
            assert hold is not None
            assert not other.lock("killed").acquire(timeout=0)
            first = expiry()
            cursor.execute(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = %s", (TUMBLER_USER,)
            )
            killed = [connection_id for (connection_id,) in cursor.fetchall()]
            assert killed
            for connection_id in killed:
                cursor.execute(f"KILL CONNECTION {int(connection_id)}")
            # the lease runs on in the server; the holder's next renewals (on new
            # connections) push it further, and nobody else gets the lock meanwhile
            eventually(lambda: expiry() > first, "the holder renewed on a new connection")
            second = expiry()
            eventually(lambda: expiry() > second, "the holder renewed again")
            assert hold.held
            assert not other.lock("killed").acquire(timeout=0)
            hold.release()
            assert other.lock("killed").acquire(timeout=0)


def test_names_that_differ_only_in_case_or_trailing_spaces_are_different_locks(
    mariadb_server: MariaDBServer,
) -> None:
    """MariaDB's default collations would take "Stock", "stock" and "stock " for one name:
    the names are stored and compared as bytes."""
    url = f"{mariadb_server.url}?table_prefix=bytes_"
    with tumbler.connect(url) as locks, tumbler.connect(url) as other, locks.lock("stock"):
        # "\u017ftock": a long s, which some collations take for an s
        for name in ("Stock", "stock ", "\u017ftock"):
            lock = other.lock(name)
            assert lock.acquire(timeout=0), name
            lock.release()
        assert not other.lock("stock").acquire(timeout=0)


def test_a_user_with_only_the_documented_grants_can_lock(
    mariadb_server: MariaDBServer, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = f"m{uuid.uuid4().hex[:8]}_"
    url = f"{mariadb_server.url}?table_prefix={prefix}"
    assert main(["init", url]) == 0  # the owner makes the tables and procedures
    assert f"made the tables and procedures {prefix}*" in capsys.readouterr().out
    assert main(["init", url]) == 0
    assert "nothing to make" in capsys.readouterr().out
    user = f"minimal_{uuid.uuid4().hex[:8]}"
    password = "minimal-Pa55"
    with mariadb_server.connect() as admin, admin.cursor() as cursor:
        cursor.execute("CREATE USER %s@'127.0.0.1' IDENTIFIED BY %s", (user, password))
        # what the README lists, and nothing more
        cursor.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE ON `{TUMBLER_DATABASE}`.* "
            "TO %s@'127.0.0.1'",
            (user,),
        )
    minimal = mariadb_server.url_for(user, password) + f"?table_prefix={prefix}"
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


#: what a reader tries, in one open transaction, to hold a lock's name up: every locking read
#: of the tables, and a read at SERIALIZABLE (which InnoDB makes a locking read) through
#: what it is granted; a statement it is refused is skipped
_LOCKING_READS = (
    "SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE",
    "START TRANSACTION",
    "SELECT * FROM {p}names FOR UPDATE",
    "SELECT * FROM {p}entries FOR UPDATE",
    "SELECT * FROM {p}names LOCK IN SHARE MODE",
    "SELECT * FROM {p}entries LOCK IN SHARE MODE",
    "SELECT * FROM {p}entries",
    "CALL {p}states('held-up')",
    "CALL {p}states(NULL)",
)


def _grant_reader(server: MariaDBServer, prefix: str) -> str:
    """A user with the grants docs/security.md gives a reader, and nothing more; its URL."""
    user = f"reader_{uuid.uuid4().hex[:8]}"
    password = "reader-Pa55"
    with server.connect() as admin, admin.cursor() as cursor:
        cursor.execute("CREATE USER %s@'127.0.0.1' IDENTIFIED BY %s", (user, password))
        cursor.execute(
            f"GRANT EXECUTE ON PROCEDURE `{TUMBLER_DATABASE}`.`{prefix}states` TO %s@'127.0.0.1'",
            (user,),
        )
    return server.url_for(user, password) + f"?table_prefix={prefix}"


@contextmanager
def _locking_reads(url: str, prefix: str) -> Iterator[list[str]]:
    """A connection of ``url``'s user that runs every one of :data:`_LOCKING_READS` it may and
    keeps its transaction open; the statements it ran."""
    config = parse_config(parse_url(url))
    connection = open_connection(config)
    ran = []
    try:
        with connection.cursor() as cursor:
            for statement in _LOCKING_READS:
                try:
                    cursor.execute(statement.replace("{p}", prefix))
                except pymysql.err.OperationalError as error:
                    if error.args[0] not in (1142, 1370):  # refused: not its to run
                        raise
                    continue
                cursor.fetchall()
                while cursor.nextset():
                    pass
                ran.append(statement)
        yield ran
    finally:
        connection.close()


def test_a_user_that_may_only_read_cannot_hold_grants_releases_or_force_release_up(
    mariadb_server: MariaDBServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user with the documented read grants, holding every locking read it may in an open
    transaction: grants, releases (one that hands the lock over too) and forced releases of
    the name go on as if it were not there, and its ``status`` shows them."""
    url, reader, prefix = _reader_set_up(mariadb_server)
    with _locking_reads(reader, prefix) as ran:
        assert "CALL {p}states('held-up')" in ran  # what the reader reads by
        assert not [statement for statement in ran if "FROM" in statement]  # all refused
        with tumbler.connect(url) as locks, tumbler.connect(url) as other:
            lock = locks.lock("held-up")
            assert lock.acquire(timeout=0)
            waiting = other.lock("held-up", fair=True)
            call = background(lambda: waiting.acquire(timeout=PATIENCE))
            eventually(lambda: locks.status("held-up").waiters == 1, "it waits")
            lock.release()
            assert call.result()
            assert locks.force_release("held-up", reason="a test") == 1
            assert locks.lock("held-up").acquire(timeout=0)
            with tumbler.connect(reader) as reading:
                (holder,) = reading.status("held-up").holders
                assert holder.token == locks.status("held-up").holders[0].token
                assert [state.name for state in reading.status_all()] == ["held-up"]
            assert main(["status", "held-up", "--json", "--url", reader]) == 0
            assert '"token": ' in capsys.readouterr().out


@pytest.mark.asyncio
async def test_asyncio_a_user_that_may_only_read_cannot_hold_grants_releases_or_force_release_up(
    mariadb_server: MariaDBServer,
) -> None:
    url, reader, prefix = _reader_set_up(mariadb_server)
    with _locking_reads(reader, prefix) as ran:
        assert "CALL {p}states('held-up')" in ran
        assert not [statement for statement in ran if "FROM" in statement]
        async with await tumbler.aio.connect(url) as locks, await tumbler.aio.connect(url) as other:
            lock = locks.lock("held-up")
            assert await lock.acquire(timeout=0)
            waiting = other.lock("held-up", fair=True)
            call = asyncio.ensure_future(waiting.acquire(timeout=PATIENCE))

            async def waits() -> bool:
                return (await locks.status("held-up")).waiters == 1

            await aeventually(waits, "it waits")
            await lock.release()
            assert await call
            assert await locks.force_release("held-up", reason="a test") == 1
            assert await locks.lock("held-up").acquire(timeout=0)
            async with await tumbler.aio.connect(reader) as reading:
                (holder,) = (await reading.status("held-up")).holders
                assert holder.token == (await locks.status("held-up")).holders[0].token
                assert [state.name for state in await reading.status_all()] == ["held-up"]


def test_status_says_so_when_the_user_that_made_the_tables_is_gone(
    mariadb_server: MariaDBServer,
) -> None:
    """``states`` runs with the rights of the user that made it: once that user is dropped,
    reading fails with a ConfigurationError, not as if the server were down."""
    prefix = f"d{uuid.uuid4().hex[:8]}_"
    owner = f"owner_{uuid.uuid4().hex[:8]}"
    with mariadb_server.connect() as admin, admin.cursor() as cursor:
        cursor.execute("CREATE USER %s@'127.0.0.1' IDENTIFIED BY 'owner-Pa55'", (owner,))
        cursor.execute(f"GRANT ALL ON `{TUMBLER_DATABASE}`.* TO %s@'127.0.0.1'", (owner,))
        assert (
            main(["init", mariadb_server.url_for(owner, "owner-Pa55") + f"?table_prefix={prefix}"])
            == 0
        )
        cursor.execute("DROP USER %s@'127.0.0.1'", (owner,))
    with tumbler.connect(f"{mariadb_server.url}?table_prefix={prefix}") as locks:
        assert locks.lock("stock").acquire(timeout=0)
        with pytest.raises(ConfigurationError, match="definer"):
            locks.status("stock")


def _reader_set_up(server: MariaDBServer) -> tuple[str, str, str]:
    """The tables of a prefix of its own, made by ``tumbler init``; the lock user's URL (a
    short lock_timeout: a call held up fails soon), the reader's, and the prefix."""
    prefix = f"r{uuid.uuid4().hex[:8]}_"
    url = f"{server.url}?table_prefix={prefix}&lock_timeout=1"
    assert main(["init", url]) == 0
    return url, _grant_reader(server, prefix), prefix


@pytest.mark.timeout(30)
def test_a_grant_waits_for_another_transaction_on_the_name_only_lock_timeout(
    mariadb_server: MariaDBServer,
) -> None:
    prefix = f"w{uuid.uuid4().hex[:8]}_"
    url = f"{mariadb_server.url}?table_prefix={prefix}&lock_timeout=1"
    with tumbler.connect(url) as locks, mariadb_server.connect() as admin:
        admin.autocommit(False)
        with admin.cursor() as cursor:
            # another transaction keeps the name's row locked
            cursor.execute(
                f"INSERT INTO {TUMBLER_DATABASE}.{prefix}names (name) VALUES ('held') "
                "ON DUPLICATE KEY UPDATE name = name"
            )
            asked = time.monotonic()
            with pytest.raises(BackendUnavailable, match="lock_timeout"):
                locks.lock("held").acquire(timeout=0)
            waited = time.monotonic() - asked
            admin.rollback()
        assert 0.9 <= waited < 5.0  # the server's default would be 50 s
        assert locks.lock("held").acquire(timeout=0)


def _status(admin: Any, variable: str) -> int:
    with admin.cursor() as cursor:
        cursor.execute("SHOW GLOBAL STATUS LIKE %s", (variable,))
        (_, value) = cursor.fetchone()
    return int(value)


@pytest.mark.timeout(60)
def test_a_release_that_a_deadlock_rolls_back_is_run_again(
    mariadb_server: MariaDBServer,
) -> None:
    """InnoDB rolls back one transaction of a deadlock, the one that changed least: here the
    release's, against a transaction that holds its grant's row and then asks for the name's
    row, which the release holds. The release is run again and succeeds."""
    prefix = f"d{uuid.uuid4().hex[:8]}_"
    url = f"{mariadb_server.url}?table_prefix={prefix}&lock_timeout=4"
    table = f"{TUMBLER_DATABASE}.{prefix}"
    with (
        tumbler.connect(url) as locks,
        mariadb_server.connect() as other,
        mariadb_server.connect() as admin,
    ):
        backend = locks._backend
        assert backend.try_grant(_request("contested", "a")) is not None
        deadlocks = _status(admin, "Innodb_deadlocks")
        with _heavier_transaction_on_the_grant(other, table) as close_the_cycle:
            release = background(lambda: backend.release("contested", "a"))
            eventually(lambda: _row_lock_waits(admin) == 1, "the release waits for the row")
            close_the_cycle()
        assert release.result()  # released, its grant live
        assert _status(admin, "Innodb_deadlocks") == deadlocks + 1
        assert locks.status("contested").holders == ()
        assert locks.lock("contested").acquire(timeout=0)


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_asyncio_a_release_that_a_deadlock_rolls_back_is_run_again(
    mariadb_server: MariaDBServer,
) -> None:
    prefix = f"d{uuid.uuid4().hex[:8]}_"
    url = f"{mariadb_server.url}?table_prefix={prefix}&lock_timeout=4"
    table = f"{TUMBLER_DATABASE}.{prefix}"
    async with await tumbler.aio.connect(url) as locks:
        backend = locks._backend
        assert await backend.try_grant(_request("contested", "a")) is not None
        with mariadb_server.connect() as other, mariadb_server.connect() as admin:
            deadlocks = _status(admin, "Innodb_deadlocks")
            with _heavier_transaction_on_the_grant(other, table) as close_the_cycle:
                release = asyncio.ensure_future(backend.release("contested", "a"))

                async def release_waits() -> bool:
                    return _row_lock_waits(admin) == 1

                await aeventually(release_waits, "the release waits for the grant's row")
                close_the_cycle()
            assert await release  # released, its grant live
            assert _status(admin, "Innodb_deadlocks") == deadlocks + 1
        assert (await locks.status("contested")).holders == ()
        assert await locks.lock("contested").acquire(timeout=0)


def _row_lock_waits(admin: Any) -> int:
    return _status(admin, "Innodb_row_lock_current_waits")


@contextmanager
def _heavier_transaction_on_the_grant(other: Any, table: str) -> Iterator[Callable[[], None]]:
    """A transaction that holds the grant's row of "contested" and has changed many rows (the
    heavier: InnoDB rolls back the other side of a deadlock); what the block calls closes
    the cycle by asking for the name's row, which a release holds while it waits for the
    grant's. The transaction is rolled back at the end."""
    other.autocommit(False)
    with other.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {table}weight (n INT PRIMARY KEY) ENGINE=InnoDB")
        cursor.execute("START TRANSACTION")
        cursor.executemany(f"INSERT INTO {table}weight VALUES (%s)", [(n,) for n in range(500)])
        cursor.execute(f"SELECT seq FROM {table}entries WHERE name = 'contested' FOR UPDATE")

        def close_the_cycle() -> None:
            cursor.execute(
                f"INSERT INTO {table}names (name) VALUES ('contested') "
                "ON DUPLICATE KEY UPDATE name = name"
            )

        try:
            yield close_the_cycle
        finally:
            other.rollback()


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_grant_given_up_on_is_ended_before_the_clients_next_call(
    mariadb_server: MariaDBServer,
) -> None:
    """The server runs a statement to its end also when its client has hung up. A grant
    cancelled while it waited for the name's row is ended by the client's next call (which
    is how the lock layer's withdrawal follows a cancelled acquire): it never lands."""
    prefix = f"o{uuid.uuid4().hex[:8]}_"
    url = f"{mariadb_server.url}?table_prefix={prefix}&lock_timeout=4"
    table = f"{TUMBLER_DATABASE}.{prefix}"
    async with await tumbler.aio.connect(url) as locks:
        backend = locks._backend
        with mariadb_server.connect() as other, mariadb_server.connect() as admin:
            other.autocommit(False)
            with other.cursor() as cursor:
                # another transaction keeps the name's row locked
                cursor.execute(
                    f"INSERT INTO {table}names (name) VALUES ('orphan') "
                    "ON DUPLICATE KEY UPDATE name = name"
                )
                grant = asyncio.ensure_future(backend.try_grant(_request("orphan", "a")))

                async def waiting() -> bool:
                    return _status(admin, "Innodb_row_lock_current_waits") == 1

                await aeventually(waiting, "the grant waits for the name's row")
                grant.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await grant
                await backend.inspect("other")  # the client's next call
                other.rollback()

            def grant_runs() -> bool:
                with admin.cursor() as probe:
                    probe.execute(
                        "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                        f"WHERE INFO LIKE 'CALL {prefix}grant%%'"
                    )
                    (running,) = probe.fetchone()
                return bool(running)

            eventually(lambda: not grant_runs(), "the given-up grant is over")
            with admin.cursor() as probe:
                probe.execute(f"SELECT COUNT(*) FROM {table}entries WHERE name = 'orphan'")
                assert probe.fetchone() == (0,)


def test_the_demo_oversells_without_the_lock_and_is_exact_with_it(
    mariadb_server: MariaDBServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The seed's stock service on this backend (``tumbler demo --url mysql://...``):
    worker processes lose updates without the lock, and sell exactly the stock with it."""
    url = f"{mariadb_server.url}?table_prefix=demo{uuid.uuid4().hex[:8]}_"
    result = run_demo(url, workers=4, requests=10, stock=20, think=0.02)
    assert "***" in result.url  # the password is not shown
    assert (result.locked.sold, result.locked.final_stock) == (20, 0)
    assert result.locked.exact
    assert not result.unlocked.exact
    code = main(["demo", "--url", url, "--workers", "2", "--requests", "5", "--stock", "5"])
    shown = capsys.readouterr()
    assert code == 0, shown.err
    assert "exact" in shown.out
    assert quote(TUMBLER_PASSWORD, safe="") not in shown.out + shown.err


def test_a_galera_node_is_refused_with_the_reason(galera_node: MariaDBServer) -> None:
    """A node grants on what it has applied: a grant another node certified and this one has
    not applied yet is not seen. The backend refuses a Galera node at connect, and at
    ``tumbler init``, and makes nothing there."""
    with pytest.raises(ConfigurationError, match="Galera") as refused:
        tumbler.connect(galera_node.url)
    assert quote(TUMBLER_PASSWORD, safe="") not in str(refused.value)
    assert main(["init", galera_node.url]) != 0
    with galera_node.connect() as admin, admin.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
            (TUMBLER_DATABASE,),
        )
        assert cursor.fetchone() == (0,)


def test_a_wrong_password_is_refused_without_showing_it(
    mariadb_server: MariaDBServer, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = "not-the-Passw0rd"
    url = mariadb_server.url_for(TUMBLER_USER, wrong)
    with pytest.raises(PermissionDenied) as refused:
        tumbler.connect(url)
    assert wrong not in str(refused.value)
    assert main(["init", url]) == 77
    shown = capsys.readouterr()
    assert wrong not in shown.out + shown.err


def _proxied_url(server: MariaDBServer, proxy: FaultProxy, prefix: str) -> str:
    return (
        server.url.replace(f"{server.host}:{server.port}", f"127.0.0.1:{proxy.port}")
        + f"?table_prefix={prefix}&socket_timeout=1.5&lock_timeout=1&connect_timeout=2"
    )


@pytest.mark.timeout(60)  # the backstop: a call that hangs fails here
def test_every_call_gives_up_when_the_network_drops_replies(
    mariadb_server: MariaDBServer,
) -> None:
    prefix = f"p{uuid.uuid4().hex[:8]}_"
    with FaultProxy((mariadb_server.host, mariadb_server.port)) as proxy:
        locks = tumbler.connect(_proxied_url(mariadb_server, proxy, prefix))
        try:
            every_call_gives_up_when_replies_are_dropped(locks._backend, proxy)
        finally:
            locks.close()


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_asyncio_every_call_gives_up_when_the_network_drops_replies(
    mariadb_server: MariaDBServer,
) -> None:
    prefix = f"a{uuid.uuid4().hex[:8]}_"
    async with FaultProxy((mariadb_server.host, mariadb_server.port)) as proxy:
        locks = await tumbler.aio.connect(_proxied_url(mariadb_server, proxy, prefix))
        try:
            await aevery_call_gives_up_when_replies_are_dropped(locks._backend, proxy)
        finally:
            await locks.close()


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_asyncio_a_call_that_first_ends_one_given_up_on_keeps_its_bound(
    mariadb_server: MariaDBServer,
) -> None:
    """A call first ends the connections calls before it gave up on (KILL): when that
    statement's reply is lost too, the call still raises within ``socket_timeout`` (the
    asyncio driver has no timeout of its own). Before, it waited for ever, and its client's
    close behind it: a torture worker hung so under dropped replies."""
    prefix = f"k{uuid.uuid4().hex[:8]}_"
    async with FaultProxy((mariadb_server.host, mariadb_server.port)) as proxy:
        locks = await tumbler.aio.connect(_proxied_url(mariadb_server, proxy, prefix))
        try:
            backend = locks._backend
            assert (await backend.inspect("killing")).holders == ()  # an idle connection
            given_up = await open_async(parse_url(_proxied_url(mariadb_server, proxy, prefix)))
            try:
                # as a call that gave up on its connection leaves it to be ended
                backend.pool._abandoned.append(await _thread_of(given_up))
                proxy.drop("downstream")
                started = time.monotonic()
                with pytest.raises(BackendUnavailable):
                    await backend.inspect("killing")
                assert time.monotonic() - started < PATIENCE
                proxy.heal()
                # not ended, so ended by the next call
                assert backend.pool._abandoned
                assert (await backend.inspect("killing")).holders == ()
                assert not backend.pool._abandoned
            finally:
                await given_up.close()
        finally:
            await locks.close()


async def _thread_of(backend: Any) -> int:
    """The server's id of a connection of ``backend``'s pool."""
    async with backend.pool.connection() as connection:
        return int(connection.thread_id())


@pytest.mark.timeout(60)
def test_a_listening_connection_that_goes_silent_is_replaced(
    mariadb_server: MariaDBServer,
) -> None:
    """The listener's wait ends within socket_timeout: when the network drops its replies
    it gives the connection up, and listens again once the server can be reached."""
    prefix = f"s{uuid.uuid4().hex[:8]}_"
    with FaultProxy((mariadb_server.host, mariadb_server.port)) as proxy:
        locks = tumbler.connect(_proxied_url(mariadb_server, proxy, prefix))
        try:
            a_silent_listener_is_replaced(locks._backend, proxy)
        finally:
            locks.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_a_url_that_asks_for_tls_refuses_a_server_that_does_not_offer_it(
    mariadb_server: MariaDBServer, tmp_path: Path, flavour: str
) -> None:
    """With ssl_ca the client takes TLS or nothing: a server (or a man in the middle) that
    does not offer TLS is refused before the client says anything, its user name included."""
    ca = make_tls_files(tmp_path / "tls").ca_path
    with FaultProxy((mariadb_server.host, mariadb_server.port)) as proxy:
        url = (
            f"mysql://{TUMBLER_USER}:{quote(TUMBLER_PASSWORD, safe='')}@127.0.0.1:{proxy.port}/"
            f"{TUMBLER_DATABASE}?ssl_ca={ca}&table_prefix=notls_"
        )
        with pytest.raises(ConfigurationError, match="TLS") as refused:
            if flavour == "sync":
                tumbler.connect(url).close()
            else:
                await (await tumbler.aio.connect(url)).close()
        assert refused.value.__cause__ is not None  # the driver's error, kept
        assert proxy.stats().upstream.forwarded == 0


@pytest.fixture(scope="module")
def mariadb_tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    """A MariaDB that takes only TLS, for this module's cases."""
    directory = tmp_path_factory.mktemp("mariadb-tls")
    server = MariaDBServer(directory / "server", tls=make_tls_files(directory / "tls")).start()
    yield server
    server.close()


def _sockets_to(port: int) -> int:
    """How many of this process's TCP sockets are open to ``port`` (Linux's /proc)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # an fd closed meanwhile
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    count = 0
    with open("/proc/self/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                count += 1
    return count


@contextmanager
def _stalled(server: MariaDBServer) -> Iterator[None]:
    """The server's processes stopped (SIGSTOP) for the block: it answers nothing."""
    pids = server.pids()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


#: how long a connect cut short may leave its socket open: a few turns of the event loop, far
#: below the 30 s asyncio waits for a stalled server to answer a TLS goodbye
CLOSED_WITHIN = 5.0


@pytest.mark.asyncio
@pytest.mark.parametrize("tls", [False, True], ids=["clear", "tls"])
async def test_a_connect_cut_short_at_any_point_leaves_no_socket_open(
    request: pytest.FixtureRequest, tls: bool
) -> None:
    """Wherever a connect's time runs out (TCP, the greeting, TLS, the login, the session's
    settings), its socket is closed at once, though the server then stalls: not left to a
    TLS goodbye that the server never answers, nor to the garbage collector (which warns of
    it, or never comes if the event loop ends first)."""
    server: MariaDBServer = request.getfixturevalue(
        "mariadb_tls_server" if tls else "mariadb_server"
    )
    config = parse_config(parse_url(server.url))
    began = time.monotonic()
    await aclose_connection(await aopen_connection(config))
    whole = time.monotonic() - began
    await asyncio.sleep(0)
    baseline = _sockets_to(server.port)
    cut_short = 0
    steps = 40
    for step in range(1, steps + 1):
        limit = whole * 1.5 * step / steps
        try:
            connection = await aopen_connection(config, limit)
        except (asyncio.TimeoutError, pymysql.err.OperationalError):
            cut_short += 1
        else:
            await aclose_connection(connection)
        with _stalled(server):
            closed_by = time.monotonic() + CLOSED_WITHIN
            while _sockets_to(server.port) > baseline:
                assert time.monotonic() < closed_by, (
                    f"a connect cut short at {limit * 1000:.2f} ms left its socket open"
                )
                await asyncio.sleep(0.005)
    assert cut_short > 0


def _forge_hand_off(server: MariaDBServer, prefix: str, waiter: Any, name: str, owner: str) -> int:
    """What a user of the lock's tables can do without holding the lock: leave a wake-up that
    hands ``name`` to ``owner``'s waiter, with the token of the grant someone else holds, and
    ring the waiter's client. Returns the token it forged."""
    stamp = round(waiter.clock.now() * 1e6)
    with server.connect(TUMBLER_DATABASE) as forger, forger.cursor() as cursor:
        cursor.execute(
            f"SELECT token FROM {prefix}entries WHERE name = %s AND token IS NOT NULL", (name,)
        )
        (token,) = cursor.fetchone() or (None,)
        assert token is not None
        cursor.execute(
            f"INSERT INTO {prefix}wakeups (client, message) VALUES (%s, %s)",
            (waiter.wakeups.key, f"={token},{stamp},0:{owner_hash(owner)} {name}"),
        )
        cursor.execute(f"CALL {prefix}ring(%s)", (waiter.wakeups.key,))
    return int(token)


def test_a_forged_hand_off_does_not_grant_the_waiter(mariadb_server: MariaDBServer) -> None:
    """A wake-up is a hint: a grant it carries counts only once the server shows it."""
    prefix = f"f{uuid.uuid4().hex[:8]}_"
    url = f"{mariadb_server.url}?table_prefix={prefix}"
    with tumbler.connect(url) as one, tumbler.connect(url) as two:
        holder, waiter = one._backend, two._backend
        held = holder.try_grant(_request("stock", "a"))
        assert held is not None
        with waiter.watch("stock", "b") as watch:
            assert waiter.try_grant(_request("stock", "b")) is None  # queued
            assert _forge_hand_off(mariadb_server, prefix, waiter, "stock", "b") == held.token
            watch.wait(PATIENCE)
            eventually(lambda: bool(waiter.wakeups.handoffs), "the forged wake-up came")
            assert waiter.try_grant(_request("stock", "b")) is None
        (holding,) = one.status("stock").holders
        assert holding.token == held.token
        assert holder.renew("stock", "a", 30.0) == 30.0


@pytest.mark.asyncio
async def test_asyncio_a_forged_hand_off_does_not_grant_the_waiter(
    mariadb_server: MariaDBServer,
) -> None:
    prefix = f"f{uuid.uuid4().hex[:8]}_"
    url = f"{mariadb_server.url}?table_prefix={prefix}"
    async with await tumbler.aio.connect(url) as one, await tumbler.aio.connect(url) as two:
        holder, waiter = one._backend, two._backend
        held = await holder.try_grant(_request("stock", "a"))
        assert held is not None
        async with waiter.watch("stock", "b") as watch:
            assert await waiter.try_grant(_request("stock", "b")) is None
            assert _forge_hand_off(mariadb_server, prefix, waiter, "stock", "b") == held.token
            await watch.wait(PATIENCE)

            async def delivered() -> bool:
                return bool(waiter.wakeups.handoffs)

            await aeventually(delivered, "the forged wake-up came")
            assert await waiter.try_grant(_request("stock", "b")) is None
        (holding,) = (await one.status("stock")).holders
        assert holding.token == held.token
        assert await holder.renew("stock", "a", 30.0) == 30.0


def _wake_up_rows(server: MariaDBServer, prefix: str) -> int:
    with server.connect(TUMBLER_DATABASE) as admin, admin.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {prefix}wakeups")
        (count,) = cursor.fetchone() or (0,)
    return int(count)


_CLIENTS = 20
_TURNS = 5


def test_clients_that_closed_leave_no_wake_ups_behind(mariadb_server: MariaDBServer) -> None:
    """Clients that took turns on one lock (each release handing it to a waiter of another
    client, and ringing it), then closed: no wake-up row is left, for them or from them."""
    prefix = f"w{uuid.uuid4().hex[:8]}_"
    url = f"{mariadb_server.url}?table_prefix={prefix}"
    clients = [tumbler.connect(url) for _ in range(_CLIENTS)]
    try:

        def take_turns(locks: tumbler.Locks) -> None:
            for _ in range(_TURNS):
                with locks.lock("busy", timeout=PATIENCE):
                    pass

        gather(*(lambda locks=locks: take_turns(locks) for locks in clients))
    finally:
        for locks in clients:
            locks.close()
    assert _wake_up_rows(mariadb_server, prefix) == 0


@pytest.mark.asyncio
async def test_asyncio_clients_that_closed_leave_no_wake_ups_behind(
    mariadb_server: MariaDBServer,
) -> None:
    prefix = f"w{uuid.uuid4().hex[:8]}_"
    url = f"{mariadb_server.url}?table_prefix={prefix}"
    clients = [await tumbler.aio.connect(url) for _ in range(_CLIENTS)]
    try:

        async def take_turns(locks: tumbler.aio.AsyncLocks) -> None:
            for _ in range(_TURNS):
                async with locks.lock("busy", timeout=PATIENCE):
                    pass

        await asyncio.gather(*(take_turns(locks) for locks in clients))
    finally:
        for locks in clients:
            await locks.close()
    assert _wake_up_rows(mariadb_server, prefix) == 0


def _updates(server: MariaDBServer) -> int:
    """The UPDATE statements the server has run (this test's are the only ones meanwhile)."""
    with server.connect() as admin, admin.cursor() as cursor:
        cursor.execute("SHOW GLOBAL STATUS LIKE 'Com_update'")
        row = cursor.fetchone()
    assert row is not None
    return int(row[1])


async def _call(flavour: str, backend: Any, method: str, *args: Any) -> Any:
    result = getattr(backend, method)(*args)
    return await result if flavour == "async" else result


@pytest.mark.asyncio
@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_renew_all_renews_leases_by_the_batch_and_says_which(
    mariadb_server: MariaDBServer, flavour: str
) -> None:
    """More leases than one statement takes, of two ttls, among them a released grant, a
    waiter's entry and an owner with none: renewed a statement per RENEW_ROWS leases of one
    ttl, and each result is that lease's own."""
    url = f"{mariadb_server.url}?table_prefix=b{uuid.uuid4().hex[:8]}_"
    if flavour == "sync":
        locks: Any = tumbler.connect(url)
    else:
        locks = await tumbler.aio.connect(url)
    backend = locks._backend
    try:
        names = [f"batch-{index}" for index in range(RENEW_ROWS * 3 // 2 + 30)]
        for name in names:
            assert await _call(flavour, backend, "try_grant", _request(name, f"{name}-owner"))
        assert await _call(flavour, backend, "release", names[7], f"{names[7]}-owner")
        assert await _call(flavour, backend, "try_grant", _request(names[3], "waiter")) is None
        renewals = [
            Renewal(name, f"{name}-owner", 20.0 if index % 3 else 40.0)
            for index, name in enumerate(names)
        ]
        renewals += [Renewal(names[3], "waiter", 20.0), Renewal("nobody", "nobody", 20.0)]
        updates = _updates(mariadb_server)
        results = await _call(flavour, backend, "renew_all", renewals, 5.0)
        # one statement for the leases of 40 s, two for the more than RENEW_ROWS of 20 s
        assert _updates(mariadb_server) - updates == 3
        expected = [
            None if r.name == names[7] or r.owner in ("waiter", "nobody") else r.ttl
            for r in renewals
        ]
        assert results == expected
        (holder,) = (await _call(flavour, backend, "inspect", names[0])).holders
        assert 30.0 < holder.expires_in <= 40.0
    finally:
        await _call(flavour, locks, "close")


def test_a_hand_off_forced_out_before_the_waiter_took_it_is_not_taken(
    mariadb_server: MariaDBServer,
) -> None:
    """A grant handed over that a forced release removed before the waiter's try: the try
    asks the server, which grants the free lock anew (a new token), not the one handed."""
    url = f"{mariadb_server.url}?table_prefix=s{uuid.uuid4().hex[:8]}_"
    with tumbler.connect(url) as one, tumbler.connect(url) as two:
        holder, waiter = one._backend, two._backend
        assert holder.try_grant(_request("stock", "a")) is not None
        with waiter.watch("stock", "b") as watch:
            assert waiter.try_grant(_request("stock", "b")) is None
            assert holder.release("stock", "a")
            watch.wait(PATIENCE)
            eventually(lambda: bool(waiter.wakeups.handoffs), "the hand-off came")
        (handed,) = one.status("stock").holders
        assert holder.force_release("stock", "test: forced before it was taken") == 1
        grant = waiter.try_grant(_request("stock", "b"))
        assert grant is not None
        assert grant.token > handed.token


@pytest.mark.asyncio
async def test_asyncio_a_hand_off_forced_out_before_the_waiter_took_it_is_not_taken(
    mariadb_server: MariaDBServer,
) -> None:
    url = f"{mariadb_server.url}?table_prefix=s{uuid.uuid4().hex[:8]}_"
    async with await tumbler.aio.connect(url) as one, await tumbler.aio.connect(url) as two:
        holder, waiter = one._backend, two._backend
        assert await holder.try_grant(_request("stock", "a")) is not None
        async with waiter.watch("stock", "b") as watch:
            assert await waiter.try_grant(_request("stock", "b")) is None
            assert await holder.release("stock", "a")
            await watch.wait(PATIENCE)

            async def delivered() -> bool:
                return bool(waiter.wakeups.handoffs)

            await aeventually(delivered, "the hand-off came")
        (handed,) = (await one.status("stock")).holders
        assert await holder.force_release("stock", "test: forced before it was taken") == 1
        grant = await waiter.try_grant(_request("stock", "b"))
        assert grant is not None
        assert grant.token > handed.token


# -- a waiter's entry that runs out between the two transactions of a decision --------------


def _waiting_for_name(admin: Any, prefix: str) -> int:
    """How many statements are under way that take a name's row (each waits: a transaction
    holds it). MariaDB's INNODB_TRX leaves out some transactions that wait for a row: the
    process list has them all."""
    with admin.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND = 'Query' "
            "AND INFO LIKE %s",
            (f"INSERT INTO {prefix}names %",),
        )
        return int(cursor.fetchone()[0])


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_waiters_entry_that_runs_out_before_its_decision_is_written_anew(
    mariadb_server: MariaDBServer, flavour: str
) -> None:
    """As PostgreSQL's case: a request the grant procedure sends back (a semaphore's) is
    decided in a second transaction, and the waiter's entry ran out in between: missing from
    the live line, still in the table, and written anew it broke the by_name key ("Duplicate
    entry ... for key 'by_name'", which 80 clients on MariaDB met once). A transaction that
    holds the name's row keeps the retry waiting, a second one queues behind it and, once
    the procedure is done, ends the entry's lease before the decision goes on."""
    prefix = f"dup_{uuid.uuid4().hex[:8]}_"
    url = f"{mariadb_server.url}?table_prefix={prefix}&lock_timeout=4&socket_timeout=8"
    holder = GrantRequest("crowd", "h", True, 1, True, 30.0, "test")
    waiter = GrantRequest("crowd", "w", True, 1, True, 30.0, "test")
    backend = open_sync(parse_url(url))
    admin = mariadb_server.connect(TUMBLER_DATABASE)
    first = mariadb_server.connect(TUMBLER_DATABASE)
    second = mariadb_server.connect(TUMBLER_DATABASE)
    lock_name = (
        f"INSERT INTO {prefix}names (name) VALUES ('crowd') ON DUPLICATE KEY UPDATE name = name"
    )
    try:
        assert backend.try_grant(holder) is not None
        assert backend.try_grant(waiter) is None  # its entry, in line
        with first.cursor() as cursor:
            cursor.execute("START TRANSACTION")
            cursor.execute(lock_name)

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
            lambda: call.done() or _waiting_for_name(admin, prefix) == 1,
            "the retry waits for the name",
        )
        assert not call.done(), call.result()

        def expire() -> None:
            with second.cursor() as cursor:
                cursor.execute("START TRANSACTION")
                cursor.execute(lock_name)
                cursor.execute(
                    f"UPDATE {prefix}entries SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 "
                    "SECOND WHERE name = 'crowd' AND owner = %s",
                    (owner_hash("w"),),
                )
                cursor.execute("COMMIT")

        expiring = background(expire)
        eventually(lambda: _waiting_for_name(admin, prefix) == 2, "the expiry queues behind it")
        with first.cursor() as cursor:
            cursor.execute("COMMIT")
        expiring.result()
        assert call.result() is None  # in line again, not granted
        with admin.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM {prefix}entries WHERE name = 'crowd'")
            assert cursor.fetchone() == (2,)
    finally:
        for connection in (admin, first, second):
            connection.close()
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
        started = MariaDBServer(tmp_path / "small", max_connections=6).start()
    except (ServerError, OSError) as error:
        server_unavailable(f"cannot start mariadbd: {error}")
    url = f"{started.url}?table_prefix=crowded_"
    filled: list[Any] = []
    try:
        with tumbler.connect(url) as holder:
            holder_lock = holder.lock("busy")
            assert holder_lock.acquire()
            if flavour == "sync":
                waiter = tumbler.connect(url)
            else:
                loop = asyncio.new_event_loop()
                waiter_aio = loop.run_until_complete(tumbler.aio.connect(url))
            # every connection the server allows, taken (the holder's and the waiter's call
            # connections among them)
            config = parse_config(parse_url(url))
            with pytest.raises(pymysql.err.OperationalError, match="Too many connections"):
                while True:
                    filled.append(open_connection(config))
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


# -- a fair waiter killed while it waits -------------------------------------------------------


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_killed_fair_waiter_holds_the_line_up_no_longer_than_a_recheck(
    mariadb_server: MariaDBServer, flavour: str
) -> None:
    """As PostgreSQL's case (``killed_fair_waiter_holds_nothing_up``): the waiter's client is
    gone once nobody holds its listener lock."""
    prefix = f"killed_{uuid.uuid4().hex[:8]}_"
    admin = mariadb_server.connect(TUMBLER_DATABASE)

    def waiters_listeners() -> list[Any]:
        with admin.cursor() as cursor:
            cursor.execute(
                f"SELECT client FROM {prefix}entries WHERE name = 'line' AND token IS NULL "
                "ORDER BY seq"
            )
            return [row[0] for row in cursor.fetchall()]

    def listens(key: Any) -> bool:
        with admin.cursor() as cursor:
            cursor.execute("SELECT IS_USED_LOCK(CONCAT('tumbler-listener-', %s))", (key,))
            return cursor.fetchone()[0] is not None

    try:
        killed_fair_waiter_holds_nothing_up(
            f"{mariadb_server.url}?table_prefix={prefix}", flavour, waiters_listeners, listens
        )
    finally:
        admin.close()


@pytest.mark.parametrize("fair", [True, False], ids=["fair", "unfair"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_hand_off_to_a_waiter_that_died_before_taking_it_holds_nothing_up(
    mariadb_server: MariaDBServer, flavour: str, fair: bool
) -> None:
    """As PostgreSQL's case (``handed_to_the_dead_holds_nothing_up``)."""
    handed_to_the_dead_holds_nothing_up(
        f"{mariadb_server.url}?table_prefix=dead_{uuid.uuid4().hex[:8]}_", flavour, fair
    )


def test_a_waiter_handed_the_lock_keeps_it_till_it_dies_then_the_next_has_it(
    mariadb_server: MariaDBServer,
) -> None:
    """As PostgreSQL's case."""
    handed_to_the_dead_holds_nothing_up(
        f"{mariadb_server.url}?table_prefix=linger_{uuid.uuid4().hex[:8]}_",
        "sync",
        True,
        lingers=_LINGERS,
    )


def waiter_lock_held(server: MariaDBServer, key: int) -> bool:
    """Whether a connection holds the waiter lock of the client whose listener key is ``key``."""
    with server.connect(TUMBLER_DATABASE) as admin, admin.cursor() as cursor:
        cursor.execute("SELECT IS_USED_LOCK(CONCAT('tumbler-waiter-', %s))", (key,))
        return cursor.fetchone()[0] is not None


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_waiter_killed_before_its_client_listens_is_told_dead_too(
    mariadb_server: MariaDBServer, flavour: str
) -> None:
    """As PostgreSQL's case: a waiter's first entry, written before its client listens,
    names the client's key, whose waiter lock the connection that wrote it holds till the
    listener holds its own; a waiter killed in that moment is told dead by the next
    release, its entry deleted and the lock not handed to it."""
    url = f"{mariadb_server.url}?table_prefix=early_{uuid.uuid4().hex[:8]}_"
    request = GrantRequest("stock", "b", False, 1, True, 30.0, "test")

    async def first_try() -> Any:
        waiter = await open_async(parse_url(url))
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
        eventually(
            lambda: not waiter_lock_held(mariadb_server, key),
            "the waiter's connections are gone",
        )
        assert one.status("stock").waiters == 1
        assert holder.release("stock", "a")
        assert one.status("stock").holders == ()  # not handed over
        assert one.status("stock").waiters == 0  # and its entry gone


def test_only_a_waiter_written_before_its_client_listens_takes_the_waiter_lock(
    mariadb_server: MariaDBServer,
) -> None:
    """The waiter lock that says a client lives till its listener does is taken where a
    waiter's entry is written (in ``{p}grant``), not at every try: a grant takes none (it
    cost an acquisition a statement of its own), and a waiter whose client does not listen
    yet holds it while it lives, so that a release hands it the lock rather than taking it
    for dead."""
    url = f"{mariadb_server.url}?table_prefix=claim_{uuid.uuid4().hex[:8]}_"
    request = GrantRequest("stock", "b", False, 1, True, 30.0, "test")

    with tumbler.connect(url) as one:
        holder = one._backend
        granted = holder.watch("stock", "a")  # made before the first try, as the locks do
        assert holder.try_grant(_request("stock", "a")) is not None
        granted.close()
        assert not holder.wakeups.subscribed()
        assert not waiter_lock_held(mariadb_server, holder.wakeups.key)
        waiter = open_sync(parse_url(url))
        try:
            watch = waiter.watch("stock", "b")
            assert waiter.try_grant(request) is None
            assert not waiter.wakeups.subscribed()
            assert waiter_lock_held(mariadb_server, waiter.wakeups.key)
            assert holder.release("stock", "a")
            # handed to the waiter (a grant it has yet to take up), not deleted as dead
            assert [h.token is not None for h in one.status("stock").holders] == [True]
            watch.close()
        finally:
            waiter.close()


# -- max_waiters ---------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_full_line_refuses_a_waiter_decided_in_the_client(
    mariadb_server: MariaDBServer, flavour: str
) -> None:
    full_line_refuses_a_waiter_decided_in_the_client(
        f"{mariadb_server.url}?table_prefix=full_{uuid.uuid4().hex[:8]}_", flavour
    )


def test_max_waiters_defaults_to_ten_thousand_and_is_checked(
    mariadb_server: MariaDBServer,
) -> None:
    assert parse_config(parse_url(mariadb_server.url)).max_waiters == 10_000
    with pytest.raises(InvalidURL, match="max_waiters"):
        parse_config(parse_url(f"{mariadb_server.url}?max_waiters=0"))


#: entries tumbler never writes, each written by hand: a lease that ends past any tumbler
#: grants (at the end of DATETIME's range, where adding to it overflows, or merely years
#: away), numbers out of the range tumbler writes (a grant's lock-delay among them), and a
#: waiter whose terms a release could not hand it the lock on (its client listens, so a
#: release would try)
_UNUSABLE = {
    "holder-in-9999": {"token": 7, "expires_at": "'9999-12-31 23:59:59.999999'"},
    "waiter-in-9999": {"expires_at": "'9999-12-31 23:59:59.999999'"},
    "holder-in-two-years": {"token": 7, "expires_at": "UTC_TIMESTAMP(6) + INTERVAL 2 YEAR"},
    "negative-permits": {"token": 7, "shared": True, "lim": -1},
    "permits-past-the-most": {"token": 7, "shared": True, "lim": 2_000_000},
    "waiter-lease-1e300": {"lease": 1e300, "listening": True},
    "waiter-lease-negative": {"lease": -5.0, "listening": True},
    "waiter-never-written": {"written_at": "NULL", "listening": True},
    "holder-delay-negative": {"token": 7, "lock_delay": -1.0},
    "holder-delay-past-an-hour": {"token": 7, "lock_delay": 3601.0},
    "holder-delay-1e300": {"token": 7, "lock_delay": 1e300},
}


def _write_by_hand(
    server: MariaDBServer, prefix: str, name: str, backend: Any, entry: dict[str, Any]
) -> None:
    """One entry of ``name`` as another program might write it (see :data:`_UNUSABLE`); a
    waiter that says it ``listening`` names the client of ``backend``, which listens."""
    with server.connect(TUMBLER_DATABASE) as admin, admin.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {prefix}entries (name, owner, shared, lim, fair, token, expires_at, "
            "holder, client, lease, stamp, written_at, lock_delay) VALUES (%s, REPEAT('a', 40), "
            f"%s, %s, TRUE, %s, "
            f"{entry.get('expires_at', 'UTC_TIMESTAMP(6) + INTERVAL 20 SECOND')}, "
            f"'by hand', %s, %s, 1, {entry.get('written_at', 'UTC_TIMESTAMP(6)')}, %s)",
            (
                name,
                entry.get("shared", False),
                entry.get("lim", 1),
                entry.get("token"),
                backend.wakeups.key if entry.get("listening") else None,
                entry.get("lease", 30.0),
                entry.get("lock_delay", 0.0),
            ),
        )


def _rows_of(server: MariaDBServer, prefix: str, name: str) -> int:
    with server.connect(TUMBLER_DATABASE) as admin, admin.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {prefix}entries WHERE name = %s", (name,))
        (count,) = cursor.fetchone() or (0,)
    return int(count)


@pytest.mark.parametrize("entry", list(_UNUSABLE))
def test_an_entry_tumbler_did_not_write_blocks_nothing(
    mariadb_server: MariaDBServer, entry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Skipped and counted by ``status``, dropped by the next grant, release or forced
    release, which each go on as if it were not there (nothing overflows)."""
    prefix = f"u{uuid.uuid4().hex[:8]}_"
    url = f"{mariadb_server.url}?table_prefix={prefix}&lock_timeout=1"
    with tumbler.connect(url) as locks:
        backend = locks._backend
        with backend.watch("stock", "w"):  # the client listens
            assert backend.wakeups.subscribed()
            bad = _UNUSABLE[entry]
            _write_by_hand(mariadb_server, prefix, "stock", backend, bad)
            (state,) = locks.status_all()
            assert (state.malformed, state.holders, state.waiters) == (1, (), 0)
            assert main(["status", "stock", "--json", "--url", url]) == 0
            assert '"malformed": 1' in capsys.readouterr().out
            assert main(["status", "stock", "--url", url]) == 0
            assert "1 entries tumbler did not write" in capsys.readouterr().out
            lock = locks.lock("stock", fair=True)
            assert lock.acquire(timeout=0)  # a grant drops it
            assert _rows_of(mariadb_server, prefix, "stock") == 1
            _write_by_hand(mariadb_server, prefix, "stock", backend, bad)
            assert locks.status("stock").malformed == 1
            lock.release()  # a release drops it
            assert _rows_of(mariadb_server, prefix, "stock") == 0
            assert lock.acquire(timeout=0)
            _write_by_hand(mariadb_server, prefix, "stock", backend, bad)
            assert locks.force_release("stock", reason="a test") == 1  # and a forced one
            assert _rows_of(mariadb_server, prefix, "stock") == 0
            _write_by_hand(mariadb_server, prefix, "stock", backend, bad)
            assert locks.force_release("stock", reason="a test") == 0  # nothing live
            assert _rows_of(mariadb_server, prefix, "stock") == 0


@pytest.mark.asyncio
@pytest.mark.parametrize("entry", list(_UNUSABLE))
async def test_asyncio_an_entry_tumbler_did_not_write_blocks_nothing(
    mariadb_server: MariaDBServer, entry: str
) -> None:
    prefix = f"u{uuid.uuid4().hex[:8]}_"
    url = f"{mariadb_server.url}?table_prefix={prefix}&lock_timeout=1"
    async with await tumbler.aio.connect(url) as locks:
        backend = locks._backend
        async with backend.watch("stock", "w"):
            assert backend.wakeups.subscribed()
            bad = _UNUSABLE[entry]
            _write_by_hand(mariadb_server, prefix, "stock", backend, bad)
            (state,) = await locks.status_all()
            assert (state.malformed, state.holders, state.waiters) == (1, (), 0)
            lock = locks.lock("stock", fair=True)
            assert await lock.acquire(timeout=0)
            _write_by_hand(mariadb_server, prefix, "stock", backend, bad)
            assert (await locks.status("stock")).malformed == 1
            await lock.release()
            assert _rows_of(mariadb_server, prefix, "stock") == 0
            assert await lock.acquire(timeout=0)
            _write_by_hand(mariadb_server, prefix, "stock", backend, bad)
            assert await locks.force_release("stock", reason="a test") == 1
            _write_by_hand(mariadb_server, prefix, "stock", backend, bad)
            assert await locks.force_release("stock", reason="a test") == 0
            assert _rows_of(mariadb_server, prefix, "stock") == 0
