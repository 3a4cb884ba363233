"""postgresql:// through PgBouncer in transaction mode (``pooler=transaction``).

The conformance suite runs every generic lock case on the ``postgresql-pgbouncer`` target.
Here, what is particular to a pooler: with one server connection shared by every client, a
tumbler client leaves nothing on it for the next (no session setting, no prepared statement)
while its own transactions still run with its bounds; a URL without ``pooler=transaction``
is told what to add; a restart of the server behind the pooler. A real ``postgres`` and a
real ``pgbouncer`` from Debian's packages, one each per module.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import tumbler
from tumbler import ConfigurationError
from tumbler._url import parse_url
from tumbler.backends.postgresql.opener import open_sync
from tumbler.testing.backends.postgresql.server import (
    TUMBLER_DATABASE,
    TUMBLER_PASSWORD,
    TUMBLER_USER,
    PgBouncerServer,
    PostgreSQLServer,
)
from tumbler.testing.conformance.plugin import server_unavailable
from tumbler.testing.servers import ServerError

from .test_postgresql import held_across_restart


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgBouncerServer]:
    """A server, and PgBouncer before it with ONE server connection: every transaction of
    every client runs on the same server session, so what one leaves there the next sees."""
    directory: Path = tmp_path_factory.mktemp("pgbouncer")
    try:
        server = PostgreSQLServer(directory / "server").start()
    except (ServerError, OSError) as error:
        server_unavailable(f"cannot start postgres: {error}")
    try:
        pooler = PgBouncerServer(server, directory / "pgbouncer", pool_size=1).start()
    except (ServerError, OSError) as error:
        server.close()
        server_unavailable(f"cannot start pgbouncer: {error}")
    yield pooler
    pooler.close()
    server.close()


@pytest.fixture
def url(servers: PgBouncerServer) -> str:
    return f"{servers.url}&schema=test_{uuid.uuid4().hex[:12]}"


def through_pooler(servers: PgBouncerServer) -> psycopg.Connection[Any]:
    """Another client of the pooler (a plain psycopg one), on the same one server session."""
    return psycopg.connect(
        host=servers.host,
        port=servers.port,
        user=TUMBLER_USER,
        password=TUMBLER_PASSWORD,
        dbname=TUMBLER_DATABASE,
        prepare_threshold=None,
        autocommit=True,
    )


def test_a_client_leaves_no_session_state_on_the_shared_server_connection(
    servers: PgBouncerServer, url: str
) -> None:
    with tumbler.connect(url) as locks:
        # psycopg prepares a statement run 5 times (its default prepare_threshold): more
        for _ in range(12):
            with locks.lock("orders"):
                pass
        assert locks.status("orders").holders == ()
    with through_pooler(servers) as other:
        settings = other.execute(
            "SELECT current_setting('statement_timeout'), current_setting('lock_timeout'), "
            "(SELECT count(*) FROM pg_prepared_statements)"
        ).fetchone()
    # the server's defaults: no bound is left for the next client, no statement prepared
    assert settings == ("0", "0", 0)


def test_each_transaction_runs_with_the_clients_bounds(url: str) -> None:
    backend = open_sync(parse_url(f"{url}&statement_timeout=3&lock_timeout=1.5"))
    try:
        with backend.pool.connection() as connection:
            with connection.pipeline(), backend.transaction(connection):
                cursor = connection.execute(
                    "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')"
                )
            assert cursor.fetchone() == ("3s", "1500ms")
            outside = connection.execute("SELECT current_setting('statement_timeout')")
            assert outside.fetchone() == ("0",)  # set for that transaction only
    finally:
        backend.close()


def test_a_call_keeps_no_server_connection_once_it_ends(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psycopg ends a pipeline with a Sync, then a Flush to fetch the replies. A Flush that
    reaches PgBouncer (transaction pooling) after the Sync's ReadyForQuery ended the
    transaction starts, for PgBouncer, another one: it gives that client a server
    connection, which no reply ever releases, and keeps it so while the client stays idle.
    With one server connection, every other client then waited until its query_wait_timeout
    (the flaky restart case below, on a busy machine: a client descheduled between its two
    sends). Here psycopg waits before it sends the Flush, long enough for the replies to
    come back first; the clients' calls end their transactions on their own round trip."""
    fetch = psycopg.Pipeline._fetch_gen

    def late_flush(pipeline: Any, *, flush: bool) -> Generator[Any, Any, None]:
        if flush and pipeline.result_queue:
            time.sleep(0.2)  # the fault: a client that is not scheduled in between
        yield from fetch(pipeline, flush=flush)

    monkeypatch.setattr(psycopg.Pipeline, "_fetch_gen", late_flush)
    with tumbler.connect(url) as first, tumbler.connect(url) as second:
        for _ in range(3):
            assert first.status("idle").holders == ()
            assert second.status("idle").holders == ()


def test_a_url_without_the_pooler_option_is_told_to_add_it(servers: PgBouncerServer) -> None:
    # a direct connection sets its bounds as startup options, which PgBouncer refuses
    direct = servers.url.replace("?pooler=transaction", "?wakeups=poll")
    with pytest.raises(ConfigurationError, match="pooler=transaction") as refused:
        tumbler.connect(direct)
    assert TUMBLER_PASSWORD not in str(refused.value)


def test_a_restart_of_the_server_behind_the_pooler_while_a_lock_is_held_and_polled_for(
    servers: PgBouncerServer, url: str
) -> None:
    def settled(holder: tumbler.Locks, token: int) -> None:
        # A read is tried again until the pooler serves: for server_login_retry after a
        # failed login to the restarting server PgBouncer refuses every transaction, and a
        # release then would raise BackendUnavailable (its second try could not tell "I
        # released it" from "nothing to release")
        assert holder.status("restarted").holders[0].token == token

    # a fast shutdown closes every server connection; the pooler keeps its clients'; the
    # waiter, polling, finds the lock free once it is released
    held_across_restart(url, servers.upstream.restart, settled)
