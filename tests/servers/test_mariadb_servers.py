"""Tests of the MariaDB test-server tooling itself: the ``tumbler`` user and its URL, a crash and
an orderly restart keeping the data and the port, the directories a server leaves behind, TLS,
and a missing server program."""

from __future__ import annotations

import os
import pwd
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import psutil
import pymysql
import pytest
import trustme
from pymysql.connections import Connection
from pymysql.cursors import Cursor

from tests.servers.fixtures import server_unavailable
from tumbler.testing.backends.mysql.server import (
    ADMIN_USER,
    TUMBLER_DATABASE,
    TUMBLER_PASSWORD,
    TUMBLER_USER,
    MariaDBNotInstalled,
    MariaDBServer,
    MariaDBServerError,
)
from tumbler.testing.servers import ServerError, ServerNotInstalled, make_tls_files

pytest_plugins = ["tests.servers.fixtures"]

#: the URL of every plain server, but for its port
PLAIN_URL = "mysql://tumbler:p%40ss%3Aw%2Frd%25%3F%23@127.0.0.1:{port}/tumbler"
GRANTS = "CREATE TABLE grants (name VARCHAR(64) PRIMARY KEY, token BIGINT NOT NULL)"


def started(server: MariaDBServer) -> MariaDBServer:
    """``server``, started; one that cannot start skips the test here, and fails it in CI."""
    try:
        return server.start()
    except ServerError as error:
        server.close()
        server_unavailable(f"cannot start mariadbd: {error}")


def client_for(url: str, **options: Any) -> Connection[Cursor]:
    """A PyMySQL connection over TCP as the user of ``url``, with its password (both
    percent-decoded), to its database, autocommit; with verified TLS (the certificate must
    name the host) when the URL gives an ``ssl_ca``."""
    parts = urlsplit(url)
    assert parts.scheme == "mysql"
    assert parts.hostname is not None
    assert parts.username is not None
    assert parts.password is not None
    query = parse_qs(parts.query)
    if "ssl_ca" in query:
        options = {"ssl_ca": query["ssl_ca"][0], "ssl_verify_identity": True, **options}
    return pymysql.connect(
        host=parts.hostname,
        port=parts.port or 3306,
        user=unquote(parts.username),
        password=unquote(parts.password),
        database=unquote(parts.path.removeprefix("/")),
        autocommit=True,
        connect_timeout=5,
        **options,
    )


def fetch_one(client: Connection[Cursor], query: str) -> tuple[Any, ...]:
    with client.cursor() as cursor:
        cursor.execute(query)
        row = cursor.fetchone()
    assert row is not None
    return row


def server_account() -> str:
    """The account the servers run as: ``mysql`` when the tests run as root, else ours."""
    return "mysql" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name


# -- one shared server ---------------------------------------------------------------------


def test_the_tumbler_user_connects_with_the_urls_credentials(mariadb_server: MariaDBServer) -> None:
    server = mariadb_server
    assert server.url == PLAIN_URL.format(port=server.port)
    assert server.url_for() == server.url
    assert unquote(urlsplit(server.url).password or "") == TUMBLER_PASSWORD
    table = f"t_{uuid.uuid4().hex}"
    with client_for(server.url) as client, client.cursor() as cursor:
        cursor.execute("SELECT CURRENT_USER(), DATABASE()")
        assert cursor.fetchone() == (f"{TUMBLER_USER}@127.0.0.1", TUMBLER_DATABASE)
        cursor.execute(f"CREATE TABLE {table} (name VARCHAR(64) PRIMARY KEY, token BIGINT)")
        cursor.execute(f"INSERT INTO {table} VALUES (%s, %s)", ("granted", 1))
        cursor.execute(f"SELECT token FROM {table} WHERE name = %s", ("granted",))
        assert cursor.fetchone() == (1,)
        cursor.execute(f"DROP TABLE {table}")


def test_the_superuser_is_reached_through_the_socket_only(mariadb_server: MariaDBServer) -> None:
    server = mariadb_server
    with server.connect() as admin, admin.cursor() as cursor:
        cursor.execute("SELECT CURRENT_USER()")
        assert cursor.fetchone() == (f"{ADMIN_USER}@localhost",)
        cursor.execute(
            "SELECT user, host FROM mysql.user WHERE user IN (%s, %s) ORDER BY user, host",
            (ADMIN_USER, TUMBLER_USER),
        )
        assert cursor.fetchall() == (
            (ADMIN_USER, "localhost"),
            (TUMBLER_USER, "127.0.0.1"),
            (TUMBLER_USER, "localhost"),
        )
    with pytest.raises(pymysql.OperationalError, match="Access denied"):
        pymysql.connect(host=server.host, port=server.port, user=ADMIN_USER, connect_timeout=5)


def test_the_server_is_configured_for_tests(mariadb_server: MariaDBServer) -> None:
    server = mariadb_server
    with server.connect() as admin:
        settings = fetch_one(
            admin,
            "SELECT @@bind_address, @@port, @@socket, @@pid_file, @@tmpdir, @@skip_name_resolve,"
            " @@max_connections, @@log_bin, @@innodb_flush_log_at_trx_commit,"
            " @@innodb_doublewrite, @@character_set_server, @@have_ssl",
        )
        datadir = Path(fetch_one(admin, "SELECT @@datadir")[0])
    assert settings == (
        "127.0.0.1",
        server.port,
        str(server.socket_path),
        str(server.pid_path),
        str(server.tmp_dir),
        1,
        300,
        0,
        2,
        0,
        "utf8mb4",
        "DISABLED",
    )
    assert datadir == server.data_dir
    assert psutil.Process(server.pid).username() == server_account()
    # the whole log since the start: other tests of the session's server add lines to it
    assert "ready for connections" in server.log_tail(lines=1_000_000)
    assert repr(server) == f"<MariaDBServer 127.0.0.1:{server.port} running in {server.dir}>"


# -- servers of a test's own ---------------------------------------------------------------


def test_kill_then_start_keeps_a_committed_row_and_the_port(
    fresh_mariadb_server: MariaDBServer,
) -> None:
    server = fresh_mariadb_server
    port, pid = server.port, server.pid
    with client_for(server.url) as client, client.cursor() as cursor:
        cursor.execute(GRANTS)
        cursor.execute("INSERT INTO grants VALUES ('a', 7)")  # autocommit: committed on return
    server.kill()
    assert not server.running
    # a crash: the server had no shutdown to log
    assert "Shutdown complete" not in server.log_tail(lines=1000)
    with pytest.raises(pymysql.OperationalError):
        client_for(server.url)
    server.start()
    assert (server.port, server.running) == (port, True)
    assert server.pid != pid
    with client_for(server.url) as client:
        assert fetch_one(client, "SELECT token FROM grants WHERE name = 'a'") == (7,)


def test_stop_then_start_keeps_a_committed_row_and_the_port(
    fresh_mariadb_server: MariaDBServer,
) -> None:
    server = fresh_mariadb_server
    port, pid = server.port, server.pid
    with client_for(server.url) as client, client.cursor() as cursor:
        cursor.execute(GRANTS)
        cursor.execute("INSERT INTO grants VALUES ('a', 7)")
    server.stop()
    assert not server.running
    # an orderly shutdown: the server says it finished one
    assert "Shutdown complete" in server.log_tail()
    server.start()
    assert (server.port, server.running) == (port, True)
    assert server.pid != pid
    with client_for(server.url) as client:
        assert fetch_one(client, "SELECT token FROM grants WHERE name = 'a'") == (7,)


def test_close_removes_the_directories() -> None:
    server = started(MariaDBServer())
    directories = [server.dir, server.run_dir, server.data_dir, server.socket_dir, server.tmp_dir]
    assert all(directory.is_dir() for directory in directories)
    # the data is in a directory of the server's account (outside ours, when that is root's)
    assert server.run_dir.owner() == server_account()
    server.close()
    assert not server.running
    assert [directory for directory in directories if directory.exists()] == []


def test_settings_replace_the_test_servers_options(tmp_path: Path) -> None:
    durable = {"innodb_flush_log_at_trx_commit": "1", "innodb-doublewrite": "1"}
    server = started(MariaDBServer(tmp_path, settings={**durable, "max_connections": "20"}))
    try:
        with server.connect() as admin:
            assert fetch_one(
                admin,
                "SELECT @@innodb_flush_log_at_trx_commit, @@innodb_doublewrite, @@max_connections",
            ) == (1, 1, 20)
    finally:
        server.close()


def test_a_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    server = MariaDBServer(tmp_path, settings={"no_such_option": "1"})
    try:
        with pytest.raises(
            MariaDBServerError, match=r"(?s)did not come up.*unknown variable 'no-such-option=1'"
        ):
            server.start()
        assert not server.running
    finally:
        server.close()


def test_a_missing_mariadbd_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("TUMBLER_MARIADB_BIN", str(empty))
    server = MariaDBServer(tmp_path / "server")
    try:
        with pytest.raises(
            MariaDBNotInstalled, match=r"TUMBLER_MARIADB_BIN.* no mariadbd"
        ) as error:
            server.start()
        assert isinstance(error.value, ServerNotInstalled)
        assert not server.running
    finally:
        server.close()


# -- TLS -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    workdir = tmp_path_factory.mktemp("mariadb-tls")
    server = started(MariaDBServer(workdir / "server", tls=make_tls_files(workdir / "tls")))
    yield server
    server.close()


def test_tls_url_names_the_ca(tls_server: MariaDBServer) -> None:
    plain = PLAIN_URL.format(port=tls_server.port)
    assert tls_server.url == f"{plain}?ssl_ca={quote(str(tls_server.ca_path))}"


def test_tls_server_refuses_plain_tcp_and_accepts_verified_tls(tls_server: MariaDBServer) -> None:
    # the same user and password both times, so only the missing TLS can be what is refused
    with pytest.raises(pymysql.OperationalError):
        client_for(tls_server.url_for().partition("?")[0], ssl_disabled=True)
    # PyMySQL checks the chain against the CA alone, and that the certificate names 127.0.0.1
    with client_for(tls_server.url) as client:
        assert client.ctx is not None
        assert client.ctx.check_hostname
        _, version = fetch_one(client, "SHOW SESSION STATUS LIKE 'Ssl_version'")
        assert version.startswith("TLSv1.")
        assert fetch_one(client, "SELECT CURRENT_USER()") == (f"{TUMBLER_USER}@127.0.0.1",)


def test_tls_server_is_not_trusted_without_its_ca(
    tls_server: MariaDBServer, tmp_path: Path
) -> None:
    stranger = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(stranger))
    with pytest.raises(pymysql.OperationalError, match="CERTIFICATE_VERIFY_FAILED"):
        client_for(tls_server.url, ssl_ca=str(stranger))
