"""Real PostgreSQL servers for the PostgreSQL backend's tests and for bench/.

:class:`PostgreSQLServer` is one ``postgres`` process from Debian's ``postgresql`` package, in
a cluster that ``initdb`` makes in a temporary directory, on a free ``127.0.0.1`` port, with
its Unix socket inside that directory. It can be killed (SIGKILL, as in a crash) and started
again on the same port and data, and stopped (a *fast* shutdown: clients are disconnected,
which is what a restart in production does to them).

The cluster is made for tests: no fsync, no full-page writes (a crash of the process loses
nothing the kernel has; only a power cut would). Authentication: the
superuser ``postgres`` is trusted on loopback and the socket (the tests' admin), every other
role must give its password (``scram-sha-256``). The first start makes the role ``tumbler``
(with :data:`TUMBLER_PASSWORD`, which has URL-special characters) and the database
``tumbler`` it owns, where the tests' schemas go. Given ``tls``, the server also speaks TLS
(``sslmode=verify-full`` works against ``127.0.0.1`` with :attr:`ca_path`) and refuses
password logins in clear.

PostgreSQL refuses to run as root: a launcher run by root runs ``initdb`` and ``postgres`` as
the ``postgres`` user (Debian's package makes it), with the data directory in a directory of
that user's own. Plain library code: no pytest; it needs psycopg (the ``testing`` extra) for
its readiness probe and set-up. The programs are found in ``$TUMBLER_POSTGRESQL_BIN``, else
Debian's newest ``/usr/lib/postgresql/<version>/bin``, else on ``PATH``; ``scripts/servers``
installs them.

:class:`PgBouncerServer` is Debian's ``pgbouncer`` in transaction mode in front of such a
server, on a free ``127.0.0.1`` port of its own: the target of ``pooler=transaction`` URLs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import sql

from tumbler.testing.servers._common import (
    LOOPBACK,
    ServerError,
    ServerNotInstalled,
    TLSFiles,
    TLSServerFiles,
    as_account,
    chown_to,
    database_url,
    run_as,
    run_dir,
)
from tumbler.testing.servers.process import ProcessLauncher

__all__ = [
    "ADMIN_USER",
    "STARTUP_TIMEOUT",
    "TUMBLER_DATABASE",
    "TUMBLER_PASSWORD",
    "TUMBLER_USER",
    "PostgreSQLNotInstalled",
    "PostgreSQLServer",
    "PostgreSQLServerError",
    "PgBouncerNotInstalled",
    "PgBouncerServer",
    "postgresql_bin_dir",
]

#: seconds a server gets to accept a query (initdb's own time not counted)
STARTUP_TIMEOUT = 30.0
#: the trusted superuser, for the tests' own checks and for making roles
ADMIN_USER = "postgres"
#: the role the tests' URLs use, and the database it owns
TUMBLER_USER = "tumbler"
TUMBLER_DATABASE = "tumbler"
#: has characters that must be percent-encoded in a URL's userinfo (and ones that would end it)
TUMBLER_PASSWORD = "p@ss:w/rd%?#"

_BIN_ENV = "TUMBLER_POSTGRESQL_BIN"
_DEBIAN = Path("/usr/lib/postgresql")


class PostgreSQLServerError(ServerError):
    """A test PostgreSQL server could not be found, started or set up; the message says why."""


class PostgreSQLNotInstalled(PostgreSQLServerError, ServerNotInstalled):
    """``initdb`` or ``postgres`` is not installed (``scripts/servers`` installs them)."""


def postgresql_bin_dir() -> Path:
    """The directory of ``initdb`` and ``postgres``: ``$TUMBLER_POSTGRESQL_BIN``, else Debian's
    newest ``/usr/lib/postgresql/<version>/bin``, else the directory of ``postgres`` on PATH."""
    configured = os.environ.get(_BIN_ENV)
    if configured:
        directory = Path(configured)
        if not (directory / "postgres").is_file():
            raise PostgreSQLNotInstalled(f"${_BIN_ENV}={configured!r} has no postgres program")
        return directory
    if _DEBIAN.is_dir():
        versions = sorted(
            (path for path in _DEBIAN.iterdir() if (path / "bin" / "postgres").is_file()),
            key=lambda path: int(path.name) if path.name.isdigit() else 0,
        )
        if versions:
            return versions[-1] / "bin"
    found = shutil.which("postgres")
    if found is None:
        raise PostgreSQLNotInstalled(
            f"postgres is not installed (install it with scripts/servers, or set ${_BIN_ENV})"
        )
    return Path(found).parent


class PostgreSQLServer(ProcessLauncher, TLSServerFiles):
    """One ``postgres`` process on a free ``127.0.0.1`` port, its cluster in a directory of
    its own.

    Nothing runs until :meth:`start`; ``with PostgreSQLServer() as server:`` starts it and,
    on exit, :meth:`close` s it. :meth:`stop` (a fast shutdown) and :meth:`kill` (SIGKILL) end
    the process and keep the data, port and directory, so :meth:`start` brings the same
    server back with its data. ``workdir`` is where the log goes (and the data, unless run by
    root); without one the server makes a temporary directory and removes it on
    :meth:`close`. ``tls``: the files of :func:`~tumbler.testing.servers.make_tls_files`;
    the server then takes TLS and refuses password logins without it. ``settings``: server
    settings over the test cluster's (``{"fsync": "on"}`` for a server that syncs its WAL as
    a production one does).
    """

    error = PostgreSQLServerError
    program = "postgres"
    poll_interval = 0.05
    ready_errors = (psycopg.Error,)

    def __init__(
        self,
        workdir: str | Path | None = None,
        *,
        port: int | None = None,
        tls: TLSFiles | None = None,
        max_connections: int = 300,
        settings: Mapping[str, str] | None = None,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        self.host = LOOPBACK
        self.port = port or 0
        self.tls = tls
        self.max_connections = max_connections
        self.settings = dict(settings or {})
        self.startup_timeout = startup_timeout
        self._use_directory(workdir, "tumbler-postgresql-")
        self._account = run_as("postgres", PostgreSQLServerError, "PostgreSQL")
        self.run_dir, self._remove_run_dir = run_dir(
            self, self._account, self.dir, "tumbler-postgresql-data-"
        )
        self.data_dir = self.run_dir / "data"
        #: the directory of the server's Unix socket
        self.socket_dir = self.run_dir
        self.config_path = self.data_dir / "postgresql.conf"
        self.log_path = self.dir / "postgresql.log"
        self._set_up = False

    # -- addresses -------------------------------------------------------------------------

    def url_for(
        self,
        user: str = TUMBLER_USER,
        password: str | None = TUMBLER_PASSWORD,
        database: str = TUMBLER_DATABASE,
    ) -> str:
        """A ``postgresql://`` URL of this server for ``user`` (name and password
        percent-encoded); ``sslmode=verify-full`` with the CA on a TLS server."""
        url = database_url("postgresql", self.host, self.port, user, password, database)
        if self.tls is not None:
            url += f"?sslmode=verify-full&sslrootcert={quote(str(self.tls.ca_path))}"
        return url

    @property
    def url(self) -> str:
        """The URL of the ``tumbler`` role's database, with its password."""
        return self.url_for()

    def _tls_files(self) -> TLSFiles:
        if self.tls is None:
            raise PostgreSQLServerError("this server does not use TLS")
        return self.tls

    def connect(self, database: str = "postgres", **options: Any) -> psycopg.Connection[Any]:
        """A psycopg connection as the superuser (through the socket), autocommit; the
        caller closes it."""
        settings: dict[str, Any] = {"connect_timeout": 5, **options}
        return psycopg.connect(
            host=str(self.socket_dir),
            port=self.port,
            user=ADMIN_USER,
            dbname=database,
            autocommit=True,
            **settings,
        )

    # -- files -----------------------------------------------------------------------------

    def _initdb(self) -> None:
        initdb = postgresql_bin_dir() / "initdb"
        command = [
            str(initdb),
            "--pgdata",
            str(self.data_dir),
            "--username",
            ADMIN_USER,
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--encoding=UTF8",
            "--no-locale",
            "--no-sync",
        ]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,
            **as_account(self._account),
        )
        if done.returncode != 0:
            raise PostgreSQLServerError(
                f"initdb failed with code {done.returncode}:\n{done.stdout}{done.stderr}"
            )

    def _write_files(self) -> None:
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        hba = [
            "local all all trust",
            f"host all {ADMIN_USER} {self.host}/32 trust",
        ]
        if self.tls is None:
            hba.append(f"host all all {self.host}/32 scram-sha-256")
        else:
            hba.append(f"hostssl all all {self.host}/32 scram-sha-256")
            hba.append(f"hostnossl all all {self.host}/32 reject")
            # the server reads its key as its own account, and refuses one others may read
            for name, source in (
                ("server.crt", self.tls.server_cert_path),
                ("server.key", self.tls.server_key_path),
            ):
                target = self.run_dir / name
                shutil.copyfile(source, target)
                target.chmod(0o600)
                chown_to(target, self._account)
        hba_path = self.data_dir / "pg_hba.conf"
        hba_path.write_text("\n".join(hba) + "\n")
        chown_to(hba_path, self._account)

    # -- lifecycle -------------------------------------------------------------------------

    def _command(self) -> list[str]:
        settings = {
            "port": str(self.port),
            "listen_addresses": self.host,
            "unix_socket_directories": str(self.socket_dir),
            "max_connections": str(self.max_connections),
            # a test server: what a crash of the process keeps is what the kernel has (a
            # commit still writes its WAL before it returns: synchronous_commit=off would lose
            # the last commits to a SIGKILL, token sequence advances with them)
            "fsync": "off",
            "full_page_writes": "off",
            "shared_buffers": "32MB",
            "log_min_messages": "warning",
            "log_connections": "off",
            **self.settings,
        }
        if self.tls is not None:
            settings.update(
                ssl="on",
                ssl_cert_file=str(self.run_dir / "server.crt"),
                ssl_key_file=str(self.run_dir / "server.key"),
            )
        command = [str(postgresql_bin_dir() / "postgres"), "-D", str(self.data_dir)]
        for key, value in settings.items():
            command += ["-c", f"{key}={value}"]
        return command

    def _executor_options(self) -> dict[str, Any]:
        # SIGINT is PostgreSQL's fast shutdown; its SIGTERM waits for every client to leave
        return {"stop_signal": signal.SIGINT, "popen_kwargs": as_account(self._account)}

    def _ready(self) -> bool:
        # a query, not an open port: a server in recovery accepts connections but refuses
        try:
            with self.connect(connect_timeout=2) as probe:
                probe.execute("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    def start(self) -> PostgreSQLServer:
        """Start the server (``initdb`` first, the first time) and wait until it serves; the
        first start also makes the ``tumbler`` role and database."""
        super().start()
        if not self._set_up:
            self._make_roles()
            self._set_up = True
        return self

    def _make_roles(self) -> None:
        with self.connect() as admin:
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(TUMBLER_USER), sql.Literal(TUMBLER_PASSWORD)
                )
            )
            admin.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(TUMBLER_DATABASE), sql.Identifier(TUMBLER_USER)
                )
            )

    def close(self) -> None:
        """Stop the process and remove its directories. The server cannot be started again."""
        self.stop()
        if self._remove_run_dir is not None:
            self._remove_run_dir()
        self._discard_directory()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<PostgreSQLServer {self.host}:{self.port} {state} in {self.dir}>"


# -- PgBouncer -------------------------------------------------------------------------------


class PgBouncerNotInstalled(PostgreSQLServerError, ServerNotInstalled):
    """``pgbouncer`` is not installed (``scripts/servers`` installs it)."""


def _auth_line(user: str, password: str) -> str:
    # PgBouncer's auth_file: both fields in double quotes, a quote inside one doubled
    def quoted(text: str) -> str:
        return '"' + text.replace('"', '""') + '"'

    return f"{quoted(user)} {quoted(password)}\n"


class PgBouncerServer(ProcessLauncher):
    """Debian's ``pgbouncer`` with ``pool_mode = transaction`` in front of ``upstream``, on a
    free ``127.0.0.1`` port, every database of the upstream reachable through it.

    It authenticates the ``tumbler`` role with SCRAM against an auth file that has its
    password (which it also logs in to the server with), so the tests' URLs are the upstream's
    with this port (:meth:`url_for`). The server's superuser is not let through. Like
    PostgreSQL, PgBouncer refuses to run as root: a launcher run by root runs it as the
    ``postgres`` user. It reconnects to a restarted upstream by itself, after
    ``server_login_retry`` (0.1 s here, 15 s by default).
    """

    error = PostgreSQLServerError
    program = "pgbouncer"
    poll_interval = 0.05
    ready_errors = (psycopg.Error,)

    def __init__(
        self,
        upstream: PostgreSQLServer,
        workdir: str | Path | None = None,
        *,
        port: int | None = None,
        pool_size: int = 40,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        self.upstream = upstream
        self.host = LOOPBACK
        self.port = port or 0
        self.pool_size = pool_size
        self.startup_timeout = startup_timeout
        self._use_directory(workdir, "tumbler-pgbouncer-")
        self._account = run_as("postgres", PostgreSQLServerError, "PgBouncer")
        self.run_dir, self._remove_run_dir = run_dir(
            self, self._account, self.dir, "tumbler-pgbouncer-run-"
        )
        self.config_path = self.run_dir / "pgbouncer.ini"
        self.auth_path = self.run_dir / "userlist.txt"
        self.log_path = self.dir / "pgbouncer.log"

    def url_for(
        self,
        user: str = TUMBLER_USER,
        password: str | None = TUMBLER_PASSWORD,
        database: str = TUMBLER_DATABASE,
    ) -> str:
        """The upstream's URL for ``user``, through this pooler, with ``pooler=transaction``."""
        url = database_url("postgresql", self.host, self.port, user, password, database)
        return url + "?pooler=transaction"

    @property
    def url(self) -> str:
        """The URL of the ``tumbler`` role's database through this pooler."""
        return self.url_for()

    def _command(self) -> list[str]:
        program = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(program).is_file():
            raise PgBouncerNotInstalled(
                "pgbouncer is not installed (install it with scripts/servers)"
            )
        return [program, str(self.config_path)]

    def _write_files(self) -> None:
        upstream = self.upstream
        settings = {
            "listen_addr": self.host,
            "listen_port": str(self.port),
            "unix_socket_dir": "",
            "auth_type": "scram-sha-256",
            "auth_file": str(self.auth_path),
            "pool_mode": "transaction",
            "max_client_conn": "2000",
            "default_pool_size": str(self.pool_size),
            # a restarted upstream is tried again at once, not after the default 15 s, and a
            # client whose query waits for an upstream that does not come gets an error soon
            "server_login_retry": "0.1",
            "server_connect_timeout": "5",
            "query_wait_timeout": "10",
            "log_connections": "0",
            "log_disconnections": "0",
            "logfile": "",
        }
        lines = [
            "[databases]",
            f"* = host={upstream.host} port={upstream.port}",
            "[pgbouncer]",
            *(f"{key} = {value}" for key, value in settings.items()),
        ]
        for path, text in (
            (self.config_path, "\n".join(lines) + "\n"),
            (self.auth_path, _auth_line(TUMBLER_USER, TUMBLER_PASSWORD)),
        ):
            path.write_text(text)
            path.chmod(0o600)
            chown_to(path, self._account)

    def _executor_options(self) -> dict[str, Any]:
        # SIGINT is PgBouncer's "safe shutdown" (waits for clients); SIGTERM ends it at once
        return {"popen_kwargs": as_account(self._account)}

    def _ready(self) -> bool:
        try:
            with psycopg.connect(
                host=self.host,
                port=self.port,
                user=TUMBLER_USER,
                password=TUMBLER_PASSWORD,
                dbname=TUMBLER_DATABASE,
                connect_timeout=2,
                prepare_threshold=None,
                autocommit=True,
            ) as probe:
                probe.execute("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    def close(self) -> None:
        """Stop the process and remove its directories (the upstream is left as it is)."""
        self.stop()
        if self._remove_run_dir is not None:
            self._remove_run_dir()
        self._discard_directory()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<PgBouncerServer {self.host}:{self.port} {state} before {self.upstream!r}>"
