"""The bench's view of PostgreSQL: what users lock with today beside tumbler's rows, the floor,
the server's statement counter, and the server the bench starts.

The peers:

- ``pg-advisory-lock``, the reference of the ``x peer`` column: ``pg_advisory_lock`` and
  ``pg_advisory_unlock`` on one autocommit psycopg connection per client, the key
  ``hashtext(name)``. The server queues its waiters and wakes the next at an unlock. No
  lease, no fencing token, and the lock lives with the session: what a raw advisory lock
  gives, and why it breaks behind a transaction-mode pooler.
- ``tooz-postgresql``: tooz's PostgreSQL driver, ``blocking=True`` (its lock takes no
  timeout); it opens a psycopg2 connection for each acquire and closes it at the release.

The floor (``pg-floor-sync``, ``pg-floor-async``): the round trips a lease lock in PostgreSQL
cannot do without, through psycopg on one connection, that exclude nothing: acquire commits
one row (a durable commit: a grant forgotten by a crashed server would let a second holder
in), release deletes it in a transaction that does not wait for its commit to reach the disk
(a release a crash forgets only delays the next grant to the end of its lease).

The server's counter (``request_count``) is the number of statements it has run,
``pg_stat_statements``' calls summed, ``BEGIN`` and ``COMMIT`` included: the bench's server
loads that module; on another server the column is left out. Its figures are per statement,
not per round trip: tumbler pipelines a transaction's statements into one.

The bench's server is a production one in what times a commit: ``fsync`` and full-page
writes on (the test targets turn them off, for speed). It logs in a role of the bench's own
whose password needs no percent-encoding (tooz passes the URL's password as written).
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
    "PostgreSQLAdvisoryLock",
    "PostgreSQLBench",
    "PostgreSQLFloor",
    "PostgreSQLFloorAsync",
    "ToozPostgreSQL",
]

#: the bench server's role; its password is its name
BENCH_ROLE = "tumbler_bench"
_FLOOR_TABLE = "tumbler_bench_floor"


def _config(url: str) -> Any:
    from tumbler._url import parse_url
    from tumbler.backends.postgresql.common import parse_config

    return parse_config(parse_url(url))


def _connect_options(url: str, timeout: float) -> dict[str, Any]:
    """psycopg's connection arguments for ``url`` (its host, role, TLS), autocommit, a lock
    waited for at most ``timeout``."""
    options = dict(_config(url).connect_options)
    options["options"] = f"-c lock_timeout={round(timeout * 1000)}"
    return {"autocommit": True, **options}


class _AdvisorySession:
    def __init__(self, connection: Any, lock_name: str) -> None:
        self._connection = connection
        self._lock_name = lock_name

    def acquire(self) -> None:
        self._connection.execute("SELECT pg_advisory_lock(hashtext(%s))", (self._lock_name,))

    def release(self) -> None:
        self._connection.execute("SELECT pg_advisory_unlock(hashtext(%s))", (self._lock_name,))

    def close(self) -> None:
        self._connection.close()


@dataclass(frozen=True)
class PostgreSQLAdvisoryLock(SyncContender):
    """A raw session advisory lock, one psycopg connection per client."""

    name: ClassVar[str] = "pg-advisory-lock"
    mechanism: ClassVar[str] = (
        "SELECT pg_advisory_lock(hashtext(name)) / pg_advisory_unlock on one autocommit "
        "psycopg connection; the server queues waiters; no lease, no token"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("psycopg", "psycopg"),)

    def open(self, lock_name: str) -> SyncSession:
        import psycopg

        connection = psycopg.connect(**_connect_options(self.url, self.options.timeout))
        return _AdvisorySession(connection, lock_name)


@dataclass(frozen=True)
class ToozPostgreSQL(SyncContender):
    """tooz's PostgreSQL driver."""

    name: ClassVar[str] = "tooz-postgresql"
    mechanism: ClassVar[str] = (
        "tooz get_lock(name).acquire(blocking=True): a new psycopg2 connection per acquire, "
        "pg_advisory_lock on it, closed at the release"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (
        ("tooz", "tooz"),
        ("psycopg2", "psycopg2-binary"),
    )

    def open(self, lock_name: str) -> SyncSession:
        config = _config(self.url)
        options = config.connect_options
        # tooz reads the role and password from the URL as written, and nothing of its query
        url = (
            f"postgresql://{options['user']}:{options['password']}@{options['host']}:"
            f"{options['port']}/{options['dbname']}"
        )
        return tooz_session(url, lock_name)


# -- the floor ------------------------------------------------------------------------------

_FLOOR_MAKE = (
    f"CREATE TABLE IF NOT EXISTS {_FLOOR_TABLE} (name text PRIMARY KEY, owner text NOT NULL)"
)
_FLOOR_ACQUIRE = f"INSERT INTO {_FLOOR_TABLE} (name, owner) VALUES (%s, %s)"
_FLOOR_RELEASE = f"DELETE FROM {_FLOOR_TABLE} WHERE name = %s AND owner = %s"
#: the release's transaction, sent in one round trip (psycopg's transaction() would add some)
_FLOOR_RELEASE_BATCH = ("BEGIN", "SET LOCAL synchronous_commit = off", _FLOOR_RELEASE, "COMMIT")


class _FloorSession:
    def __init__(self, connection: Any, lock_name: str) -> None:
        self._connection = connection
        self._row = (lock_name, uuid.uuid4().hex)

    def acquire(self) -> None:
        self._connection.execute(_FLOOR_ACQUIRE, self._row)

    def release(self) -> None:
        connection = self._connection
        with connection.pipeline():
            for statement in _FLOOR_RELEASE_BATCH:
                connection.execute(statement, self._row if statement is _FLOOR_RELEASE else None)

    def close(self) -> None:
        self._connection.close()


@dataclass(frozen=True)
class PostgreSQLFloor(SyncContender):
    """The floor's two round trips on one blocking psycopg connection."""

    name: ClassVar[str] = "pg-floor-sync"
    mechanism: ClassVar[str] = (
        "floor: INSERT of one row (durable commit) as acquire, DELETE of it (commit not "
        "waited for) as release, one round trip each on one psycopg connection; excludes "
        "nothing, timed uncontended only"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("psycopg", "psycopg"),)
    floor: ClassVar[bool] = True

    def open(self, lock_name: str) -> SyncSession:
        import psycopg

        connection = psycopg.connect(**_connect_options(self.url, self.options.timeout))
        try:
            connection.execute(_FLOOR_MAKE)
        except BaseException:
            connection.close()
            raise
        return _FloorSession(connection, lock_name)


class _AsyncFloorSession:
    def __init__(self, connection: Any, lock_name: str) -> None:
        self._connection = connection
        self._row = (lock_name, uuid.uuid4().hex)

    async def acquire(self) -> None:
        await self._connection.execute(_FLOOR_ACQUIRE, self._row)

    async def release(self) -> None:
        connection = self._connection
        async with connection.pipeline():
            for statement in _FLOOR_RELEASE_BATCH:
                row = self._row if statement is _FLOOR_RELEASE else None
                await connection.execute(statement, row)

    async def close(self) -> None:
        await self._connection.close()


@dataclass(frozen=True)
class PostgreSQLFloorAsync(AsyncContender):
    """The same on psycopg's asyncio connection."""

    name: ClassVar[str] = "pg-floor-async"
    mechanism: ClassVar[str] = "floor: the same on one psycopg AsyncConnection"
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("psycopg", "psycopg"),)
    floor: ClassVar[bool] = True

    async def open(self, lock_name: str) -> AsyncSession:
        import psycopg

        options = _connect_options(self.url, self.options.timeout)
        connection = await psycopg.AsyncConnection.connect(**options)
        try:
            await connection.execute(_FLOOR_MAKE)
        except BaseException:
            await connection.close()
            raise
        return _AsyncFloorSession(connection, lock_name)


# -- the server -----------------------------------------------------------------------------

_STATEMENTS_RUN = (
    "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements "
    "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


def _read_one(url: str, query: str) -> Any:
    """The first column of ``query``'s first row on a connection of its own; None if the
    server cannot answer it (down, or the view missing)."""
    try:
        import psycopg

        with psycopg.connect(**_connect_options(url, 5.0)) as connection:
            row = connection.execute(query).fetchone()
    except Exception:  # the bench goes on without the figure
        return None
    return None if row is None else row[0]


class _Running:
    def __init__(self, directory: Path) -> None:
        from psycopg import sql

        from .server import TUMBLER_DATABASE, PostgreSQLServer

        self.server = PostgreSQLServer(
            directory,
            settings={
                "fsync": "on",
                "full_page_writes": "on",
                "shared_preload_libraries": "pg_stat_statements",
                "pg_stat_statements.track_utility": "on",
            },
        ).start()
        try:
            with self.server.connect(TUMBLER_DATABASE) as admin:
                admin.execute("CREATE EXTENSION pg_stat_statements")
                role = sql.Identifier(BENCH_ROLE)
                admin.execute(
                    sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                        role, sql.Literal(BENCH_ROLE)
                    )
                )
                admin.execute(
                    sql.SQL("GRANT ALL ON DATABASE {} TO {}").format(
                        sql.Identifier(TUMBLER_DATABASE), role
                    )
                )
                admin.execute(sql.SQL("GRANT ALL ON SCHEMA public TO {}").format(role))
        except BaseException:
            self.server.close()
            raise
        self._urls = 0

    def fresh_url(self) -> str:
        self._urls += 1
        url = self.server.url_for(BENCH_ROLE, BENCH_ROLE)
        return url if self._urls == 1 else f"{url}?schema=tumbler_{self._urls}"

    def close(self) -> None:
        self.server.close()


@dataclass(frozen=True)
class PostgreSQLBench(StoreBench):
    """The advisory lock and tooz, the floors, ``pg_stat_statements`` for the server's
    figures, and the server with its commits on disk."""

    def request_count(self, url: str) -> int | None:
        """The statements the URL's database has run (``pg_stat_statements``); None where the
        module is not loaded. A reading is one such statement, counted by the next."""
        count = _read_one(url, _STATEMENTS_RUN)
        return None if count is None else int(count)

    def version(self, url: str) -> str | None:
        """``PostgreSQL 15.18``, from ``server_version``."""
        shown = _read_one(url, "SHOW server_version")
        return None if shown is None else f"PostgreSQL {str(shown).split()[0]}"


BENCH = PostgreSQLBench(
    peers=(PostgreSQLAdvisoryLock, ToozPostgreSQL),
    # postgres:// is the same backend: one scheme is enough for the peers
    schemes=("postgresql", "postgres"),
    targets=(TestTarget("postgresql", _Running),),
    floors=(PostgreSQLFloor, PostgreSQLFloorAsync),
    reference=PostgreSQLAdvisoryLock.name,
)
