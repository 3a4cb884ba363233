"""Real MariaDB servers for the MySQL / MariaDB backend's tests and for bench/.

:class:`MariaDBServer` is one ``mariadbd`` process from Debian's ``mariadb-server`` package,
with a data directory that ``mariadb-install-db`` makes in a temporary directory, on a free
``127.0.0.1`` port, with its Unix socket and pid file in a directory of its own beside the
data, and another for its temporary files. What it logs (its error log) goes to
``mariadb.log`` in the launcher's directory. It can be killed (SIGKILL, as in a crash) and
started again on the same port and data, and stopped (SIGTERM: MariaDB's orderly shutdown,
which disconnects its clients).

Both programs run with ``--no-defaults``: no ``/etc/mysql`` file of the machine's can change
the test server, every option is on the command line. The server is made for tests: a commit
writes InnoDB's redo log to the kernel but does not sync it
(``innodb_flush_log_at_trx_commit=2``), and pages are written without the doublewrite
buffer, so a crash of the process loses nothing the kernel has; only a power cut would.
``settings`` turn that back (``{"innodb_flush_log_at_trx_commit": "1",
"innodb_doublewrite": "1"}`` for a server as durable as a production one).

Authentication: the superuser ``root`` has no password and is reached through the Unix socket
only (the tests' admin: :meth:`MariaDBServer.connect`). The first start makes the user
``tumbler``, at ``127.0.0.1`` and at ``localhost``, with :data:`TUMBLER_PASSWORD` (which has
URL-special characters), and the database ``tumbler`` on which it has every privilege, where
the tests' tables go. Given ``tls``, the server also speaks TLS (a client can check the
certificate and that it names ``127.0.0.1``, with :attr:`~MariaDBServer.ca_path`) and refuses
TCP clients without it (``require_secure_transport``; the socket stays open to the admin).

MariaDB refuses to run as root unless told which user to become: a launcher run by root runs
``mariadb-install-db`` and ``mariadbd`` as the ``mysql`` user (Debian's package makes it),
with the data in a directory of that user's own. Plain library code: no pytest; it needs
PyMySQL (the ``testing`` extra) for its readiness probe and set-up. The programs are found in
``$TUMBLER_MARIADB_BIN``, else in ``/usr/sbin`` and ``/usr/bin`` (Debian's places), else on
``PATH``; ``scripts/servers`` installs them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pymysql
from pymysql.connections import Connection
from pymysql.constants import CR
from pymysql.cursors import Cursor

from tumbler.testing.servers._common import (
    LOOPBACK,
    ServerError,
    ServerNotInstalled,
    TLSFiles,
    TLSServerFiles,
    as_account,
    chown_to,
    database_url,
    free_port,
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
    "MariaDBNotInstalled",
    "MariaDBServer",
    "MariaDBServerError",
    "mariadb_program",
]

#: seconds a server gets to answer a query (``mariadb-install-db``'s own time not counted)
STARTUP_TIMEOUT = 30.0
#: the superuser, without a password, through the socket only: the tests' own checks and set-up
ADMIN_USER = "root"
#: the user the tests' URLs use, and the database it has every privilege on
TUMBLER_USER = "tumbler"
TUMBLER_DATABASE = "tumbler"
#: has characters that must be percent-encoded in a URL's userinfo (and ones that would end it)
TUMBLER_PASSWORD = "p@ss:w/rd%?#"

_BIN_ENV = "TUMBLER_MARIADB_BIN"
_DEBIAN = (Path("/usr/sbin"), Path("/usr/bin"))
#: Galera's replication library (Debian's galera-4 package), for a node of a cluster
_GALERA_PROVIDER = "/usr/lib/galera/libgalera_smm.so"
_GALERA_ENV = "TUMBLER_GALERA_PROVIDER"
#: the account Debian's package makes, which the server runs as when we are root
_ACCOUNT = "mysql"


class MariaDBServerError(ServerError):
    """A test MariaDB server could not be found, started or set up; the message says why."""


class MariaDBNotInstalled(MariaDBServerError, ServerNotInstalled):
    """``mariadbd`` or ``mariadb-install-db`` is not installed (``scripts/servers`` installs
    them)."""


def mariadb_program(name: str) -> Path:
    """The program ``name`` (``mariadbd`` or ``mariadb-install-db``): in
    ``$TUMBLER_MARIADB_BIN`` when it is set (and nowhere else), else in ``/usr/sbin`` or
    ``/usr/bin``, else on ``PATH``; raises :class:`MariaDBNotInstalled` where it is not."""
    configured = os.environ.get(_BIN_ENV)
    if configured:
        program = Path(configured) / name
        if not program.is_file():
            raise MariaDBNotInstalled(f"${_BIN_ENV}={configured!r} has no {name} program")
        return program
    for directory in _DEBIAN:
        if (directory / name).is_file():
            return directory / name
    found = shutil.which(name)
    if found is None:
        raise MariaDBNotInstalled(
            f"{name} is not installed (install it with scripts/servers, or set ${_BIN_ENV})"
        )
    return Path(found)


class MariaDBServer(ProcessLauncher, TLSServerFiles):
    """One ``mariadbd`` process on a free ``127.0.0.1`` port, its data in a directory of its
    own.

    Nothing runs until :meth:`start`; ``with MariaDBServer() as server:`` starts it and, on
    exit, :meth:`close` s it. :meth:`stop` (SIGTERM, an orderly shutdown) and :meth:`kill`
    (SIGKILL) end the process and keep the data, port and directories, so :meth:`start` brings
    the same server back with its data. ``workdir`` is where the log goes (and the data,
    unless run by root); without one the server makes a temporary directory and removes it on
    :meth:`close`. ``tls``: the files of :func:`~tumbler.testing.servers.make_tls_files`; the
    server then takes TLS and refuses TCP clients without it. ``galera``: the server is a
    Galera cluster of one node (``wsrep_on``), bootstrapped at each start. ``settings``:
    server options (``mariadbd``'s names, with ``_`` or ``-``) over the test server's or
    beside them.
    """

    error = MariaDBServerError
    program = "mariadbd"
    poll_interval = 0.05
    ready_errors = (pymysql.Error,)

    def __init__(
        self,
        workdir: str | Path | None = None,
        *,
        port: int | None = None,
        tls: TLSFiles | None = None,
        max_connections: int = 300,
        settings: Mapping[str, str] | None = None,
        startup_timeout: float = STARTUP_TIMEOUT,
        galera: bool = False,
    ) -> None:
        self.host = LOOPBACK
        self.port = port or 0
        self.tls = tls
        self.max_connections = max_connections
        # one spelling, so that a setting replaces the test server's option of the same name
        self.settings = {_option_name(name): value for name, value in (settings or {}).items()}
        self.galera = galera
        self.startup_timeout = startup_timeout
        self._use_directory(workdir, "tumbler-mariadb-")
        self._account = run_as(_ACCOUNT, MariaDBServerError, "MariaDB")
        self.run_dir, self._remove_run_dir = run_dir(
            self, self._account, self.dir, "tumbler-mariadb-data-"
        )
        self.data_dir = self.run_dir / "data"
        #: the directory of the server's Unix socket and pid file
        self.socket_dir = self.run_dir / "run"
        self.socket_path = self.socket_dir / "mariadb.sock"
        self.pid_path = self.socket_dir / "mariadb.pid"
        #: the server's temporary files (of its own: not shared with other servers in /tmp)
        self.tmp_dir = self.run_dir / "tmp"
        # no configuration file (every option is on the command line): errors name the data
        self.config_path = self.data_dir
        self.log_path = self.dir / "mariadb.log"
        self._set_up = False

    # -- addresses -------------------------------------------------------------------------

    def url_for(
        self,
        user: str = TUMBLER_USER,
        password: str | None = TUMBLER_PASSWORD,
        database: str = TUMBLER_DATABASE,
    ) -> str:
        """A ``mysql://`` URL of this server for ``user`` (name and password percent-encoded);
        on a TLS server, ``ssl_ca`` names the CA that signed its certificate."""
        url = database_url("mysql", self.host, self.port, user, password, database)
        if self.tls is not None:
            url += f"?ssl_ca={quote(str(self.tls.ca_path))}"
        return url

    @property
    def url(self) -> str:
        """The URL of the ``tumbler`` user's database, with its password."""
        return self.url_for()

    def _tls_files(self) -> TLSFiles:
        if self.tls is None:
            raise MariaDBServerError("this server does not use TLS")
        return self.tls

    def connect(self, database: str | None = None, **options: Any) -> Connection[Cursor]:
        """A PyMySQL connection as the superuser (through the socket), autocommit; the caller
        closes it."""
        # the socket is secure transport already: no TLS inside it, on a TLS server either
        settings: dict[str, Any] = {"connect_timeout": 5, "ssl_disabled": True, **options}
        connection = pymysql.connect(
            unix_socket=str(self.socket_path),
            user=ADMIN_USER,
            database=database,
            autocommit=True,
            defer_connect=True,
            **settings,
        )
        # PyMySQL leaves its socket open (a ResourceWarning, an error in the tests) when it
        # cannot connect it, as while the server is down or starting: connected here, the
        # socket is closed on that failure, and by PyMySQL on any later one
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(settings["connect_timeout"])
            sock.connect(str(self.socket_path))
        except OSError as error:
            sock.close()
            raise pymysql.OperationalError(
                CR.CR_CONNECTION_ERROR, f"cannot connect to {self.socket_path}: {error}"
            ) from error
        connection.connect(sock)
        return connection

    # -- files -----------------------------------------------------------------------------

    def _install_db(self) -> None:
        command = [
            str(mariadb_program("mariadb-install-db")),
            "--no-defaults",
            f"--datadir={self.data_dir}",
            # root without a password (not unix_socket, which admits only the OS user root,
            # and so not a launcher run by anyone else); connect() reaches it by the socket
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            # the grant tables get no entries by host name: the server resolves no names
            "--skip-name-resolve",
            # passed on to the mariadbd that bootstraps the tables
            f"--tmpdir={self.tmp_dir}",
        ]
        # the server it bootstraps the grant tables with is the one that will serve them
        environment = {**os.environ, "MYSQLD_BOOTSTRAP": str(mariadb_program("mariadbd"))}
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,
            cwd=self.run_dir,
            env=environment,
            **as_account(self._account),
        )
        if done.returncode != 0:
            # half a data directory would pass for a whole one at the next start
            shutil.rmtree(self.data_dir, ignore_errors=True)
            raise MariaDBServerError(
                f"mariadb-install-db failed with code {done.returncode}:\n"
                f"{done.stdout}{done.stderr}"
            )

    def _write_files(self) -> None:
        for directory in (self.socket_dir, self.tmp_dir):
            directory.mkdir(exist_ok=True)
            chown_to(directory, self._account)
        if not (self.data_dir / "mysql").is_dir():
            self._install_db()
        if self.tls is not None:
            # the server reads them as its own account, which cannot read the originals in a
            # directory only root may enter (nor, for the key, a file only root may read)
            for name, source in (
                ("server.crt", self.tls.server_cert_path),
                ("server.key", self.tls.server_key_path),
                ("ca.crt", self.tls.ca_path),
            ):
                target = self.run_dir / name
                shutil.copyfile(source, target)
                target.chmod(0o600)
                chown_to(target, self._account)

    # -- lifecycle -------------------------------------------------------------------------

    def _command(self) -> list[str]:
        options = {
            "datadir": str(self.data_dir),
            "socket": str(self.socket_path),
            "pid_file": str(self.pid_path),
            "tmpdir": str(self.tmp_dir),
            "port": str(self.port),
            "bind_address": self.host,
            "skip_name_resolve": "ON",
            "max_connections": str(self.max_connections),
            # Debian's own configuration says utf8mb4; without it (--no-defaults) it is latin1
            "character_set_server": "utf8mb4",
            "innodb_buffer_pool_size": "32M",
            # a test server: what a crash of the process keeps is what the kernel has (a
            # commit still writes its redo log before it returns, only without a sync)
            "innodb_flush_log_at_trx_commit": "2",
            "innodb_doublewrite": "0",
        }
        if self.galera:
            options.update(_galera_options(self.host))
        if self.tls is not None:
            options.update(
                ssl_cert=str(self.run_dir / "server.crt"),
                ssl_key=str(self.run_dir / "server.key"),
                ssl_ca=str(self.run_dir / "ca.crt"),
                require_secure_transport="ON",
            )
        options.update(self.settings)
        # --no-defaults must come first; the binary log is off (as by default: said here so
        # that a log_bin setting, which comes after, turns it on)
        command = [str(mariadb_program("mariadbd")), "--no-defaults", "--skip-log-bin"]
        command += [f"--{name.replace('_', '-')}={value}" for name, value in options.items()]
        return command

    def _executor_options(self) -> dict[str, Any]:
        # SIGTERM (mirakuru's default stop signal) is mariadbd's orderly shutdown
        return {"popen_kwargs": as_account(self._account)}

    def _ready(self) -> bool:
        # a query, not an open port: the server opens its socket before InnoDB's recovery ends
        try:
            with self.connect(connect_timeout=2) as probe, probe.cursor() as cursor:
                if not self.galera:
                    cursor.execute("SELECT 1")
                    return True
                # a Galera node answers SELECT 1 before it serves tables (error 1047, "WSREP
                # has not yet prepared node for application use"): until wsrep_ready is ON
                cursor.execute("SHOW STATUS LIKE 'wsrep_ready'")
                row = cursor.fetchone()
        except pymysql.OperationalError:
            return False
        return row is not None and str(row[1]).upper() == "ON"

    def start(self) -> MariaDBServer:
        """Start the server (``mariadb-install-db`` first, the first time) and wait until it
        serves; the first start also makes the ``tumbler`` user and database."""
        super().start()
        if not self._set_up:
            self._make_users()
            self._set_up = True
        return self

    def _make_users(self) -> None:
        with self.connect() as admin, admin.cursor() as cursor:
            # the superuser is reached through the socket only: no password-less root on TCP
            cursor.execute(
                "SELECT host FROM mysql.user WHERE user = %s AND host <> 'localhost'",
                (ADMIN_USER,),
            )
            for (host,) in cursor.fetchall():
                cursor.execute("DROP USER %s@%s", (ADMIN_USER, host))
            cursor.execute(f"CREATE DATABASE `{TUMBLER_DATABASE}`")
            # 127.0.0.1 for TCP clients, localhost for the socket's
            for host in (self.host, "localhost"):
                cursor.execute(
                    "CREATE USER %s@%s IDENTIFIED BY %s", (TUMBLER_USER, host, TUMBLER_PASSWORD)
                )
                cursor.execute(
                    f"GRANT ALL PRIVILEGES ON `{TUMBLER_DATABASE}`.* TO %s@%s",
                    (TUMBLER_USER, host),
                )

    def close(self) -> None:
        """Stop the process and remove its directories. The server cannot be started again."""
        self.stop()
        if self._remove_run_dir is not None:
            self._remove_run_dir()
        self._discard_directory()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<MariaDBServer {self.host}:{self.port} {state} in {self.dir}>"


def _galera_options(host: str) -> dict[str, str]:
    """A Galera cluster of this one node, bootstrapped at its start, its group
    communication and state transfer on free loopback ports."""
    provider = Path(os.environ.get(_GALERA_ENV, _GALERA_PROVIDER))
    if not provider.is_file():
        raise MariaDBNotInstalled(
            f"the Galera provider {provider} is not installed (Debian's galera-4; or set "
            f"${_GALERA_ENV})"
        )
    return {
        "wsrep_on": "ON",
        "wsrep_provider": str(provider),
        "wsrep_cluster_address": "gcomm://",  # no other node: a new cluster
        "wsrep_node_address": host,
        "wsrep_provider_options": (
            f"gmcast.listen_addr=tcp://{host}:{free_port()};ist.recv_addr={host}:{free_port()}"
        ),
        "binlog_format": "ROW",
        "innodb_autoinc_lock_mode": "2",
    }


def _option_name(name: str) -> str:
    """``mariadbd`` takes an option with ``-`` or ``_`` alike; the launcher keys them by ``_``."""
    return name.replace("-", "_")
