"""Each backend's driver errors as tumbler's: every error its translator tells apart, fed as
the driver raises it (the driver's own exception classes, made here), comes out as the same
tumbler error class with the same message, the lock and the backend named, and the driver's
error as its cause."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import NamedTuple

import psycopg
import psycopg.errors
import pymysql
import pytest
from kazoo import exceptions as kazoo_errors
from kazoo.handlers.threading import KazooTimeoutError
from redis import exceptions as redis_errors

from tumbler import (
    BackendUnavailable,
    ConfigurationError,
    OutOfConnections,
    PermissionDenied,
    PermitsMismatch,
    TooManyWaiters,
    TumblerError,
)
from tumbler._url import parse_url
from tumbler.backends.etcd import common as etcd_common
from tumbler.backends.etcd.wire import EtcdError, GatewayUnavailable
from tumbler.backends.mysql import common as mysql_common
from tumbler.backends.postgresql import common as postgresql_common
from tumbler.backends.redis import common as redis_common
from tumbler.backends.sqlite.backend import SQLiteBackend, _Busy
from tumbler.backends.zookeeper import common as zookeeper_common

LOCK = "orders:42"


class Row(NamedTuple):
    """One driver error and what it must become."""

    error: BaseException
    kind: type[BaseException]
    #: text the message must hold
    says: tuple[str, ...]
    #: whether the error names the lock (a few are about the backend alone)
    names_lock: bool = True


def row_ids(rows: dict[str, Row]) -> list[str]:
    return list(rows)


def caused(error: BaseException, cause: BaseException) -> BaseException:
    error.__cause__ = cause
    return error


def check(
    translating: Callable[[], AbstractContextManager[object]], row: Row, url: str
) -> BaseException:
    """What ``row.error`` becomes when raised inside ``translating()``."""
    with pytest.raises(row.kind) as caught, translating():
        raise row.error
    error = caught.value
    assert type(error) is row.kind, f"{type(error).__name__}: {error}"
    assert error.__cause__ is row.error
    if isinstance(error, TumblerError):
        for part in row.says:
            assert part in error.message, error.message
        assert error.backend == url
        assert error.lock_name == (LOCK if row.names_lock else None)
    return error


# --------------------------------------------------------------------------------------------
# Redis

REDIS_URL = "redis://tumbler@127.0.0.1:6379/0"

REDIS: dict[str, Row] = {
    "a-script-names-the-command-it-may-not-run": Row(
        redis_errors.NoPermissionError("PEXPIRETIME: no permissions to run 'pexpiretime'"),
        PermissionDenied,
        (
            "the Redis user may not run PEXPIRETIME (its ACL needs +pexpiretime): "
            "no permissions to run 'pexpiretime'",
        ),
    ),
    "a-script-names-a-subcommand": Row(
        redis_errors.NoPermissionError("SCRIPT|LOAD: no permissions"),
        PermissionDenied,
        ("the Redis user may not run SCRIPT|LOAD (its ACL needs +script|load): no permissions",),
    ),
    "the-server-refuses-a-command": Row(
        redis_errors.NoPermissionError("this user has no permissions to run the 'info' command"),
        PermissionDenied,
        (
            "the Redis user lacks a permission tumbler needs: this user has no permissions "
            "to run the 'info' command",
        ),
    ),
    "lowercase-before-the-colon-is-no-command": Row(
        redis_errors.NoPermissionError("user: has no permissions"),
        PermissionDenied,
        ("the Redis user lacks a permission tumbler needs: user: has no permissions",),
    ),
    "wrong-credentials": Row(
        redis_errors.AuthenticationError("invalid username-password pair"),
        PermissionDenied,
        ("Redis refused the credentials: invalid username-password pair",),
    ),
    "no-such-database": Row(
        redis_errors.ResponseError("DB index is out of range"),
        ConfigurationError,
        ("the Redis server has fewer databases: DB index is out of range",),
        names_lock=False,
    ),
    "the-line-is-full": Row(
        redis_errors.ResponseError("TOO_MANY_WAITERS 17"),
        TooManyWaiters,
        ("17 waiters are queued for the lock already", "max_waiters"),
    ),
    "a-semaphore-of-other-permits": Row(
        redis_errors.ResponseError("PERMITS_MISMATCH 3"),
        PermitsMismatch,
        ("the lock is in use as a semaphore of 3 permits",),
    ),
    "a-read-lock-asked-as-a-semaphore": Row(
        redis_errors.ResponseError("PERMITS_MISMATCH 0"),
        PermitsMismatch,
        ("the lock is in use as a read lock",),
    ),
    **{
        f"refused-{word.split()[0].lower()}": Row(
            redis_errors.ResponseError(f"{word} and more"),
            PermissionDenied,
            (f"Redis refused: {word} and more",),
        )
        for word in ("NOPERM", "NOAUTH", "WRONGPASS", "The user executing the script can't")
    },
    "any-other-reply-error": Row(
        redis_errors.ResponseError("WRONGTYPE Operation against a key"),
        BackendUnavailable,
        ("Redis error: WRONGTYPE Operation against a key",),
    ),
    "a-subclass-of-reply-error": Row(
        redis_errors.ReadOnlyError("You can't write against a read only replica."),
        BackendUnavailable,
        ("Redis error: You can't write against a read only replica.",),
    ),
    "every-connection-busy": Row(
        redis_errors.ConnectionError(redis_common.NO_CONNECTION),
        BackendUnavailable,
        ("every connection of this client to Redis stayed busy for socket_timeout", "max_"),
    ),
    "connection-refused": Row(
        redis_errors.ConnectionError("Error 111 connecting"),
        BackendUnavailable,
        ("cannot reach Redis: Error 111 connecting",),
    ),
    "timeout": Row(
        redis_errors.TimeoutError("Timeout reading from socket"),
        BackendUnavailable,
        ("cannot reach Redis: Timeout reading from socket",),
    ),
    "os-error": Row(
        ConnectionResetError(104, "Connection reset by peer"),
        BackendUnavailable,
        ("cannot reach Redis: [Errno 104] Connection reset by peer",),
    ),
    "not-a-cluster": Row(
        redis_errors.RedisClusterException("Cluster mode is not enabled on this node"),
        ConfigurationError,
        ("the Redis server is not a cluster node: drop cluster=true from the URL",),
        names_lock=False,
    ),
    "a-cluster-start-failed-for-a-reason": Row(
        caused(
            redis_errors.RedisClusterException("Redis Cluster cannot be connected"),
            redis_errors.AuthenticationError("invalid username-password pair"),
        ),
        PermissionDenied,
        ("Redis refused the credentials: invalid username-password pair",),
    ),
    "a-cluster-start-failed-on-the-network": Row(
        caused(
            redis_errors.RedisClusterException("Redis Cluster cannot be connected"),
            ConnectionRefusedError(111, "Connection refused"),
        ),
        BackendUnavailable,
        ("cannot reach Redis: [Errno 111] Connection refused",),
    ),
    "a-cluster-start-failed-for-no-reason-given": Row(
        redis_errors.RedisClusterException("Redis Cluster cannot be connected"),
        BackendUnavailable,
        ("Redis Cluster: Redis Cluster cannot be connected",),
    ),
    "any-other-redis-error": Row(
        redis_errors.DataError("Invalid input"),
        BackendUnavailable,
        ("Redis error: Invalid input",),
    ),
}


@pytest.mark.parametrize("row", list(REDIS.values()), ids=row_ids(REDIS))
def test_redis_translates_each_driver_error(row: Row) -> None:
    error = check(lambda: redis_common.translate_errors(REDIS_URL, LOCK), row, REDIS_URL)
    again = redis_common.tumbler_error(row.error, REDIS_URL, LOCK)  # type: ignore[arg-type]
    assert type(again) is type(error)
    assert again.message == error.message  # type: ignore[attr-defined]


def test_redis_lets_other_errors_through() -> None:
    with pytest.raises(KeyError), redis_common.translate_errors(REDIS_URL, LOCK):
        raise KeyError("a bug, not the server")


# --------------------------------------------------------------------------------------------
# PostgreSQL

PG_URL = "postgresql://tumbler@127.0.0.1:5432/locks"


def pg(sqlstate: str, text: str) -> psycopg.Error:
    return psycopg.errors.lookup(sqlstate)(text)


POSTGRESQL: dict[str, Row] = {
    "insufficient-privilege": Row(
        pg("42501", "permission denied for table tumbler_locks"),
        PermissionDenied,
        ("PostgreSQL refused: permission denied for table tumbler_locks",),
    ),
    "invalid-authorization-class": Row(
        pg("28P01", "password authentication failed"),
        PermissionDenied,
        ("PostgreSQL refused: password authentication failed",),
    ),
    "libpq-refuses-the-password": Row(
        psycopg.OperationalError(
            'connection failed: FATAL:  password authentication failed for user "bob"\n'
        ),
        PermissionDenied,
        (
            "PostgreSQL refused: connection failed: FATAL:  password authentication failed for "
            'user "bob"',
        ),
    ),
    "no-such-role": Row(
        psycopg.OperationalError('FATAL:  role "nobody" does not exist'),
        PermissionDenied,
        ('PostgreSQL refused: FATAL:  role "nobody" does not exist',),
    ),
    "pgbouncer-refuses-the-password": Row(
        pg("08P01", "SASL authentication failed"),
        PermissionDenied,
        ("PostgreSQL refused: SASL authentication failed",),
    ),
    "a-pooler-refuses-startup-options": Row(
        psycopg.OperationalError("unsupported startup parameter: options"),
        ConfigurationError,
        (
            "PostgreSQL: unsupported startup parameter: options (is this a pooler in "
            "transaction mode? add pooler=transaction to the URL)",
        ),
    ),
    "no-such-database": Row(
        pg("3D000", 'database "nope" does not exist'),
        ConfigurationError,
        ('PostgreSQL: database "nope" does not exist',),
    ),
    "no-such-schema": Row(
        pg("3F000", 'schema "nope" does not exist'),
        ConfigurationError,
        ('PostgreSQL: schema "nope" does not exist',),
    ),
    "libpq-says-no-such-database": Row(
        psycopg.OperationalError('FATAL:  database "nope" does not exist'),
        ConfigurationError,
        ('PostgreSQL: FATAL:  database "nope" does not exist',),
    ),
    "too-many-connections": Row(
        pg("53300", "sorry, too many clients already"),
        OutOfConnections,
        (
            "PostgreSQL refused a connection: it has as many as it allows",
            postgresql_common.CONNECTIONS_ADVICE,
            "sorry, too many clients already",
        ),
    ),
    "libpq-says-the-slots-are-reserved": Row(
        psycopg.OperationalError("remaining connection slots are reserved for superusers"),
        OutOfConnections,
        ("PostgreSQL refused a connection", "remaining connection slots are reserved"),
    ),
    "pgbouncer-is-full": Row(
        pg("08P01", "no more connections allowed (max_client_conn)"),
        OutOfConnections,
        ("PostgreSQL refused a connection", "no more connections allowed"),
    ),
    "statement-timeout": Row(
        pg("57014", "canceling statement due to statement timeout"),
        BackendUnavailable,
        (
            "PostgreSQL cancelled a statement that ran past statement_timeout: canceling "
            "statement due to statement timeout",
        ),
    ),
    "lock-timeout": Row(
        pg("55P03", "canceling statement due to lock timeout"),
        BackendUnavailable,
        ("another client held the lock's name past lock_timeout: canceling statement",),
    ),
    "any-other-error": Row(
        pg("40001", "could not serialize access"),
        BackendUnavailable,
        ("PostgreSQL: could not serialize access",),
    ),
    "a-protocol-error-that-is-no-refusal": Row(
        pg("08P01", "invalid message format"),
        BackendUnavailable,
        ("PostgreSQL: invalid message format",),
    ),
    "no-reply": Row(
        postgresql_common.NoReply("no reply from PostgreSQL within 5 s"),
        BackendUnavailable,
        ("PostgreSQL: no reply from PostgreSQL within 5 s",),
    ),
    "os-error": Row(
        ConnectionRefusedError(111, "Connection refused"),
        BackendUnavailable,
        ("cannot reach PostgreSQL: [Errno 111] Connection refused",),
    ),
}


@pytest.mark.parametrize("row", list(POSTGRESQL.values()), ids=row_ids(POSTGRESQL))
def test_postgresql_translates_each_driver_error(row: Row) -> None:
    error = check(lambda: postgresql_common.translate_errors(PG_URL, LOCK), row, PG_URL)
    if isinstance(row.error, psycopg.Error):
        again = postgresql_common.tumbler_error(row.error, PG_URL, LOCK)
        assert type(again) is type(error)
        assert again.message == error.message  # type: ignore[attr-defined]


def test_postgresql_lets_other_errors_through() -> None:
    with pytest.raises(KeyError), postgresql_common.translate_errors(PG_URL, LOCK):
        raise KeyError("a bug, not the server")


# --------------------------------------------------------------------------------------------
# MySQL

MYSQL_URL = "mysql://tumbler@127.0.0.1:3306/locks"


def my(code: int, text: str) -> pymysql.Error:
    return pymysql.err.OperationalError(code, text)


MYSQL: dict[str, Row] = {
    **{
        f"refused-{code}": Row(
            my(code, "Access denied for user 'tumbler'"),
            PermissionDenied,
            ("MySQL refused: Access denied for user 'tumbler'",),
        )
        for code in (1044, 1045, 1142, 1143, 1227, 1370, 1698)
    },
    **{
        f"misconfigured-{code}": Row(
            my(code, "Unknown database 'nope'"),
            ConfigurationError,
            ("MySQL: Unknown database 'nope'",),
        )
        for code in (1049, 1146, 1449, 3159)
    },
    **{
        f"no-room-{code}": Row(
            my(code, "Too many connections"),
            OutOfConnections,
            (
                "MySQL refused a connection: it has as many as it allows (its max_connections, "
                "or the account's max_user_connections)",
                "two more to listen for releases: Too many connections",
            ),
        )
        for code in (1040, 1203)
    },
    "no-tls": Row(
        my(2026, "SSL connection error"),
        ConfigurationError,
        ("the MySQL server does not offer TLS, which the URL asks for (ssl_ca)",),
    ),
    "lock-wait-timeout": Row(
        my(1205, "Lock wait timeout exceeded"),
        BackendUnavailable,
        ("another client held the lock's name past lock_timeout: Lock wait timeout exceeded",),
    ),
    "any-other-error": Row(
        my(1213, "Deadlock found"),
        BackendUnavailable,
        ("MySQL: Deadlock found",),
    ),
    "an-error-of-another-class": Row(
        pymysql.err.InternalError(1100, "Table was not locked"),
        BackendUnavailable,
        ("MySQL: Table was not locked",),
    ),
    "an-error-without-a-code": Row(
        pymysql.err.InterfaceError("(0, '')"),
        BackendUnavailable,
        ("MySQL: (0, '')",),
    ),
    "no-reply": Row(
        mysql_common.NoReply(2013, "no reply from MySQL within 5 s (socket_timeout)"),
        BackendUnavailable,
        ("MySQL: no reply from MySQL within 5 s (socket_timeout)",),
    ),
    "os-error": Row(
        ConnectionRefusedError(111, "Connection refused"),
        BackendUnavailable,
        ("cannot reach MySQL: [Errno 111] Connection refused",),
    ),
}


@pytest.mark.parametrize("row", list(MYSQL.values()), ids=row_ids(MYSQL))
def test_mysql_translates_each_driver_error(row: Row) -> None:
    error = check(lambda: mysql_common.translate_errors(MYSQL_URL, LOCK), row, MYSQL_URL)
    if isinstance(row.error, pymysql.Error):
        again = mysql_common.tumbler_error(row.error, MYSQL_URL, LOCK)
        assert type(again) is type(error)
        assert again.message == error.message  # type: ignore[attr-defined]


def test_mysql_lets_other_errors_through() -> None:
    with pytest.raises(KeyError), mysql_common.translate_errors(MYSQL_URL, LOCK):
        raise KeyError("a bug, not the server")


# --------------------------------------------------------------------------------------------
# etcd

ETCD_URL = "etcd://tumbler@127.0.0.1:2379"

ETCD: dict[str, Row] = {
    "no-member-answered": Row(
        GatewayUnavailable("no etcd member answered"),
        BackendUnavailable,
        ("cannot reach etcd: no etcd member answered",),
    ),
    "no-credentials-given": Row(
        EtcdError(3, "etcdserver: user name is empty"),
        PermissionDenied,
        (
            "etcd refused access (etcdserver: user name is empty): the cluster has "
            "authentication on and the URL gives no credentials (USER:PASSWORD@)",
        ),
    ),
    "permission-denied": Row(
        EtcdError(7, "etcdserver: permission denied"),
        PermissionDenied,
        (
            "etcd refused access (etcdserver: permission denied): the URL's user lacks rights "
            "on the prefix, or gave wrong credentials",
        ),
    ),
    "unauthenticated": Row(
        EtcdError(16, "etcdserver: invalid auth token"),
        PermissionDenied,
        ("etcd refused access (etcdserver: invalid auth token): the URL's user lacks rights",),
    ),
    "wrong-password": Row(
        EtcdError(3, "etcdserver: authentication failed, invalid user ID or password"),
        PermissionDenied,
        ("etcd refused access (etcdserver: authentication failed", "gave wrong credentials"),
    ),
    "another-invalid-argument": Row(
        EtcdError(3, "etcdserver: key is not provided"),
        BackendUnavailable,
        ("etcd error: etcdserver: key is not provided (code 3)",),
    ),
    "lease-not-found": Row(
        EtcdError(5, "etcdserver: requested lease not found"),
        BackendUnavailable,
        ("etcd error: etcdserver: requested lease not found (code 5)",),
    ),
}


@pytest.mark.parametrize("row", list(ETCD.values()), ids=row_ids(ETCD))
def test_etcd_translates_each_gateway_error(row: Row) -> None:
    check(lambda: etcd_common.translate_errors(ETCD_URL, LOCK), row, ETCD_URL)


def test_etcd_lets_other_errors_through() -> None:
    with pytest.raises(KeyError), etcd_common.translate_errors(ETCD_URL, LOCK):
        raise KeyError("a bug, not the server")


# --------------------------------------------------------------------------------------------
# ZooKeeper

ZK_URL = "zookeeper://127.0.0.1:2181/tumbler"
ZK_REFUSED = "the URL's user lacks rights on the lock nodes, or gave wrong credentials"

ZOOKEEPER: dict[str, Row] = {
    "no-auth": Row(
        kazoo_errors.NoAuthError(),
        PermissionDenied,
        (f"ZooKeeper refused access (NoAuthError): {ZK_REFUSED}",),
    ),
    "auth-failed": Row(
        kazoo_errors.AuthFailedError(),
        PermissionDenied,
        (f"ZooKeeper refused access (AuthFailedError): {ZK_REFUSED}",),
    ),
    "timeout": Row(
        KazooTimeoutError("Connection time-out"),
        BackendUnavailable,
        ("cannot reach ZooKeeper: KazooTimeoutError Connection time-out",),
    ),
    "connection-loss-without-text": Row(
        kazoo_errors.ConnectionLoss(),
        BackendUnavailable,
        ("cannot reach ZooKeeper: ConnectionLoss",),
    ),
    "session-expired": Row(
        kazoo_errors.SessionExpiredError(),
        BackendUnavailable,
        ("cannot reach ZooKeeper: SessionExpiredError",),
    ),
    "stopped": Row(
        kazoo_errors.ZookeeperStoppedError("closed"),
        BackendUnavailable,
        ("the ZooKeeper client is closed",),
    ),
    "any-other-error": Row(
        kazoo_errors.BadVersionError("stale"),
        BackendUnavailable,
        ("ZooKeeper error: BadVersionError stale",),
    ),
}


@pytest.mark.parametrize("row", list(ZOOKEEPER.values()), ids=row_ids(ZOOKEEPER))
def test_zookeeper_translates_each_driver_error(row: Row) -> None:
    error = check(lambda: zookeeper_common.translate_errors(ZK_URL, LOCK), row, ZK_URL)
    assert isinstance(error, TumblerError)
    assert not error.message.endswith(" ")  # a kazoo error without text adds no blank


def test_zookeeper_lets_other_errors_through() -> None:
    with pytest.raises(KeyError), zookeeper_common.translate_errors(ZK_URL, LOCK):
        raise KeyError("a bug, not the server")


# --------------------------------------------------------------------------------------------
# SQLite: what its errors mean depends on the file and the call, so a real backend sits
# behind each row


@pytest.fixture
def sqlite_backend(tmp_path: Path) -> Iterator[SQLiteBackend]:
    backend = SQLiteBackend(parse_url(f"sqlite:///{tmp_path / 'locks.db'}?busy_timeout=2"))
    yield backend
    backend.close()


@contextlib.contextmanager
def no_waiting(backend: SQLiteBackend) -> Iterator[None]:
    """Inside ``call_nowait``: the no-wait connection's calls."""
    backend._local.nowait = True
    try:
        yield
    finally:
        backend._local.nowait = False


SQLITE: dict[str, Row] = {
    "locked": Row(
        sqlite3.OperationalError("database is locked"),
        BackendUnavailable,
        ("the database stayed locked by another process for more than 2.0 s (busy_timeout)",),
        names_lock=False,
    ),
    "busy": Row(
        sqlite3.OperationalError("database is busy"),
        BackendUnavailable,
        ("the database stayed locked by another process for more than 2.0 s (busy_timeout)",),
        names_lock=False,
    ),
    "read-only": Row(
        sqlite3.OperationalError("attempt to write a readonly database"),
        PermissionDenied,
        ("no permission to use ", "locks.db: attempt to write a readonly database"),
        names_lock=False,
    ),
    "any-other-operational-error": Row(
        sqlite3.OperationalError("disk I/O error"),
        BackendUnavailable,
        ("SQLite error: disk I/O error",),
        names_lock=False,
    ),
    "not-a-database": Row(
        sqlite3.DatabaseError("file is not a database"),
        ConfigurationError,
        ("locks.db is not a usable tumbler database: file is not a database",),
        names_lock=False,
    ),
    "corrupt": Row(
        sqlite3.IntegrityError("UNIQUE constraint failed"),
        ConfigurationError,
        ("locks.db is not a usable tumbler database: UNIQUE constraint failed",),
        names_lock=False,
    ),
}


@pytest.mark.parametrize("row", list(SQLITE.values()), ids=row_ids(SQLITE))
def test_sqlite_translates_each_driver_error(row: Row, sqlite_backend: SQLiteBackend) -> None:
    check(sqlite_backend._errors, row, sqlite_backend.url)


def test_sqlite_names_the_calls_own_wait(sqlite_backend: SQLiteBackend) -> None:
    row = Row(
        sqlite3.OperationalError("database is locked"),
        BackendUnavailable,
        (
            "the database stayed locked by another process for more than 0.25 s (the call's "
            "timeout)",
        ),
        names_lock=False,
    )
    check(lambda: sqlite_backend._errors(0.25), row, sqlite_backend.url)


@pytest.mark.parametrize("message", ["database is locked", "database table is busy"])
def test_sqlite_a_no_wait_call_that_finds_the_database_locked_is_busy(
    sqlite_backend: SQLiteBackend, message: str
) -> None:
    row = Row(sqlite3.OperationalError(message), _Busy, ())
    with no_waiting(sqlite_backend):
        check(sqlite_backend._errors, row, sqlite_backend.url)


def test_sqlite_an_error_in_a_directory_that_is_gone_is_configuration(
    tmp_path: Path,
) -> None:
    place = tmp_path / "place"
    place.mkdir()
    backend = SQLiteBackend(parse_url(f"sqlite:///{place / 'locks.db'}"))
    backend.close()
    shutil.rmtree(place)
    row = Row(
        sqlite3.OperationalError("unable to open database file"),
        ConfigurationError,
        (f"cannot use {backend.path}: {backend.path.parent} is not an existing directory",),
        names_lock=False,
    )
    check(backend._errors, row, backend.url)


def test_sqlite_an_unopenable_file_is_not_permission_when_it_may_be_used(
    sqlite_backend: SQLiteBackend,
) -> None:
    # the directory and the file are there and usable: no permission problem to name
    row = Row(
        sqlite3.OperationalError("unable to open database file"),
        BackendUnavailable,
        ("SQLite error: unable to open database file",),
        names_lock=False,
    )
    check(sqlite_backend._errors, row, sqlite_backend.url)


def test_sqlite_lets_other_errors_through(sqlite_backend: SQLiteBackend) -> None:
    with pytest.raises(KeyError), sqlite_backend._errors():
        raise KeyError("a bug, not the file")
