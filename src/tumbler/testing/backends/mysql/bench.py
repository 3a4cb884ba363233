"""The bench's view of MySQL / MariaDB: what users lock with today beside tumbler's rows, the
floor, the server's statement counter, and the server the bench starts.

The peers:

- ``mysql-get-lock``, the reference of the ``x peer`` column: ``GET_LOCK(name, timeout)`` and
  ``RELEASE_LOCK(name)`` on one autocommit PyMySQL connection per client. The server queues
  its waiters and wakes one at a release. No lease, no fencing token, the lock lives with
  the connection, and nothing of it is written down: what a raw named lock gives.
- ``tooz-mysql``: tooz's MySQL driver, ``blocking=True``: ``GET_LOCK(name, 0)`` retried with
  a growing pause until it succeeds, on a connection it closes at each release.

The floor (``mysql-floor-sync``, ``mysql-floor-async``): the round trips a lease lock in
MySQL cannot do without, through the same driver on one connection, that exclude nothing:
acquire commits one row, release deletes it, each an autocommit statement whose commit waits
for the redo log to reach the disk (MySQL has no commit that does not wait, per transaction:
``innodb_flush_log_at_trx_commit`` is the server's).

The server's counter (``request_count``) is ``Questions``: the statements the clients sent,
a ``CALL`` one however many it runs inside. It is the server's: the bench's uncontended
rows run one client at a time.

The bench's server is a production one in what times a commit:
``innodb_flush_log_at_trx_commit=1`` and the doublewrite buffer on (the test targets turn
them off, for speed). It logs in a user of the bench's own whose password needs no
percent-encoding (tooz passes the URL's password as written).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tumbler.testing.bench import (
    AsyncContender,
    AsyncSession,
    StoreBench,
    SyncContender,
    SyncSession,
    tooz_session,
)
from tumbler.testing.targets import TestTarget

__all__ = [
    "BENCH",
    "MySQLBench",
    "MySQLFloor",
    "MySQLFloorAsync",
    "MySQLGetLock",
    "ToozMySQL",
]

#: the bench server's user; its password is its name
BENCH_USER = "tumbler_bench"
_FLOOR_TABLE = "tumbler_bench_floor"


def _config(url: str) -> Any:
    from tumbler._url import parse_url
    from tumbler.backends.mysql.common import parse_config

    return parse_config(parse_url(url))


def _connect(url: str) -> Any:
    """A PyMySQL connection to ``url``'s database (its host, user, TLS), autocommit."""
    import pymysql

    config = _config(url)
    return pymysql.connect(database=config.database, autocommit=True, **config.connect_options)


async def _aconnect(url: str) -> Any:
    import aiomysql

    config = _config(url)
    return await aiomysql.connect(db=config.database, autocommit=True, **config.connect_options)


def _query_one(connection: Any, statement: str, arguments: tuple[Any, ...]) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(statement, arguments)
        row = cursor.fetchone()
    return None if row is None else row[0]


class _GetLockSession:
    def __init__(self, connection: Any, lock_name: str, timeout: float) -> None:
        self._connection = connection
        self._lock_name = lock_name
        self._timeout = timeout

    def acquire(self) -> None:
        taken = _query_one(
            self._connection, "SELECT GET_LOCK(%s, %s)", (self._lock_name, self._timeout)
        )
        if taken != 1:
            raise TimeoutError(f"GET_LOCK({self._lock_name!r}) answered {taken!r}")

    def release(self) -> None:
        _query_one(self._connection, "SELECT RELEASE_LOCK(%s)", (self._lock_name,))

    def close(self) -> None:
        self._connection.close()


@dataclass(frozen=True)
class MySQLGetLock(SyncContender):
    """A raw named lock, one PyMySQL connection per client."""

    name: ClassVar[str] = "mysql-get-lock"
    mechanism: ClassVar[str] = (
        "SELECT GET_LOCK(name, timeout) / RELEASE_LOCK(name) on one autocommit PyMySQL "
        "connection; the server queues waiters; no lease, no token, nothing on disk"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("pymysql", "PyMySQL"),)

    def open(self, lock_name: str) -> SyncSession:
        return _GetLockSession(_connect(self.url), lock_name, self.options.timeout)


@dataclass(frozen=True)
class ToozMySQL(SyncContender):
    """tooz's MySQL driver."""

    name: ClassVar[str] = "tooz-mysql"
    mechanism: ClassVar[str] = (
        "tooz get_lock(name).acquire(blocking=True): GET_LOCK(name, 0) retried with a "
        "growing pause; the connection closed at each release, opened again at the acquire"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (
        ("tooz", "tooz"),
        ("pymysql", "PyMySQL"),
    )

    def open(self, lock_name: str) -> SyncSession:
        config = _config(self.url)
        options = config.connect_options
        # tooz reads the user and password from the URL as written, and nothing of its query
        url = (
            f"mysql://{options['user']}:{options['password']}@{options['host']}:"
            f"{options['port']}/{config.database}"
        )
        return tooz_session(url, lock_name)


# -- the floor ------------------------------------------------------------------------------

_FLOOR_MAKE = (
    f"CREATE TABLE IF NOT EXISTS {_FLOOR_TABLE} "
    "(name VARBINARY(255) PRIMARY KEY, owner CHAR(32) NOT NULL) ENGINE=InnoDB"
)
_FLOOR_ACQUIRE = f"INSERT INTO {_FLOOR_TABLE} (name, owner) VALUES (%s, %s)"
_FLOOR_RELEASE = f"DELETE FROM {_FLOOR_TABLE} WHERE name = %s AND owner = %s"


class _FloorSession:
    def __init__(self, connection: Any, lock_name: str) -> None:
        self._connection = connection
        self._row = (lock_name, uuid.uuid4().hex)

    def _run(self, statement: str) -> None:
        with self._connection.cursor() as cursor:
            cursor.execute(statement, self._row)

    def acquire(self) -> None:
        self._run(_FLOOR_ACQUIRE)

    def release(self) -> None:
        self._run(_FLOOR_RELEASE)

    def close(self) -> None:
        self._connection.close()


@dataclass(frozen=True)
class MySQLFloor(SyncContender):
    """The floor's two round trips on one blocking PyMySQL connection."""

    name: ClassVar[str] = "mysql-floor-sync"
    mechanism: ClassVar[str] = (
        "floor: INSERT of one row as acquire, DELETE of it as release, each an autocommit "
        "statement (commit on disk), one round trip each on one PyMySQL connection; "
        "excludes nothing, timed uncontended only"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("pymysql", "PyMySQL"),)
    floor: ClassVar[bool] = True

    def open(self, lock_name: str) -> SyncSession:
        connection = _connect(self.url)
        try:
            with connection.cursor() as cursor:
                cursor.execute(_FLOOR_MAKE)
        except BaseException:
            connection.close()
            raise
        return _FloorSession(connection, lock_name)


class _AsyncFloorSession:
    def __init__(self, connection: Any, lock_name: str) -> None:
        self._connection = connection
        self._row = (lock_name, uuid.uuid4().hex)

    async def _run(self, statement: str) -> None:
        async with self._connection.cursor() as cursor:
            await cursor.execute(statement, self._row)

    async def acquire(self) -> None:
        await self._run(_FLOOR_ACQUIRE)

    async def release(self) -> None:
        await self._run(_FLOOR_RELEASE)

    async def close(self) -> None:
        from tumbler.backends.mysql.common import aclose_connection

        await aclose_connection(self._connection)


@dataclass(frozen=True)
class MySQLFloorAsync(AsyncContender):
    """The same on one aiomysql connection."""

    name: ClassVar[str] = "mysql-floor-async"
    mechanism: ClassVar[str] = "floor: the same on one aiomysql connection"
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("aiomysql", "aiomysql"),)
    floor: ClassVar[bool] = True

    async def open(self, lock_name: str) -> AsyncSession:
        from tumbler.backends.mysql.common import aclose_connection

        connection = await _aconnect(self.url)
        try:
            async with connection.cursor() as cursor:
                await cursor.execute(_FLOOR_MAKE)
        except BaseException:
            await aclose_connection(connection)
            raise
        return _AsyncFloorSession(connection, lock_name)


# -- the server -----------------------------------------------------------------------------


def _read_one(url: str, query: str) -> Any:
    """The last column of ``query``'s first row on a connection of its own; None if the server
    cannot answer it."""
    try:
        connection = _connect(url)
    except Exception:  # the bench goes on without the figure
        return None
    try:
        with connection.cursor() as cursor:
            cursor.execute(query)
            row = cursor.fetchone()
    except Exception:
        return None
    finally:
        connection.close()
    return None if row is None else row[-1]


class _Running:
    def __init__(self, directory: Path) -> None:
        from .server import TUMBLER_DATABASE, MariaDBServer

        self.server = MariaDBServer(
            directory,
            settings={"innodb_flush_log_at_trx_commit": "1", "innodb_doublewrite": "1"},
        ).start()
        try:
            with self.server.connect() as admin, admin.cursor() as cursor:
                for host in (self.server.host, "localhost"):
                    cursor.execute(
                        "CREATE USER %s@%s IDENTIFIED BY %s", (BENCH_USER, host, BENCH_USER)
                    )
                    cursor.execute(
                        f"GRANT ALL PRIVILEGES ON `{TUMBLER_DATABASE}`.* TO %s@%s",
                        (BENCH_USER, host),
                    )
        except BaseException:
            self.server.close()
            raise
        self._urls = 0

    def fresh_url(self) -> str:
        self._urls += 1
        url = self.server.url_for(BENCH_USER, BENCH_USER)
        return url if self._urls == 1 else f"{url}?table_prefix=tumbler_{self._urls}_"

    def close(self) -> None:
        self.server.close()


@dataclass(frozen=True)
class MySQLBench(StoreBench):
    """``GET_LOCK`` and tooz, the floors, ``Questions`` for the server's figures, and the
    server with its commits on disk."""

    def request_count(self, url: str) -> int | None:
        """The statements the server's clients have sent (``Questions``); a reading is one
        such statement, counted by the next."""
        count = _read_one(url, "SHOW GLOBAL STATUS LIKE 'Questions'")
        return None if count is None else int(count)

    def version(self, url: str) -> str | None:
        """``MariaDB 10.11.14``, from ``VERSION()``."""
        shown = _read_one(url, "SELECT VERSION()")
        if shown is None:
            return None
        number, _, kind = str(shown).partition("-")
        return f"{'MariaDB' if 'MariaDB' in kind else 'MySQL'} {number}"


BENCH = MySQLBench(
    peers=(MySQLGetLock, ToozMySQL),
    # mariadb:// is the same backend: one scheme is enough for the peers
    schemes=("mysql", "mariadb"),
    targets=(TestTarget("mysql", _Running),),
    floors=(MySQLFloor, MySQLFloorAsync),
    reference=MySQLGetLock.name,
)
