"""What one release and one grant cost on PostgreSQL and MySQL, by the length of the line.

    python bench/sql_line_cost.py [--waiters 0,1000,5000] [--repeat 30] [--store both]

For each N, the line of one lock name is written by hand (an admin connection): a reader
holds the lock, and N fair writers wait behind it (their entries live for the whole run, and
their clients are not listening, as a line that holds up the lock). Then, through the
backend's own calls (``try_grant``, ``release``), measured one call at a time:

- release: a second reader, written as a grant just before, releases. The lock stays held
  (the first reader), so nothing is handed over: the release reads the line to find the
  waiters it lets through (none: the first writer still waits);
- grant (mutex): a single try of a writer, refused (the server answers it alone);
- grant (read): a single try of a fair reader, which waits behind the writers (the client
  decides it on the line the server sends back);
- new waiter: a writer's first try that queues (its entry added: where the line is capped,
  after the waiters are counted).

Printed as the median and the maximum in milliseconds. Throwaway servers on free loopback
ports (Debian's postgres and mariadbd). Nothing is asserted (see bench/README.md). To compare
two versions of tumbler, run it with ``PYTHONPATH`` naming the other's ``src``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest
from tumbler.backends.kit.owners import owner_hash

NAME = "crowded"
#: the listener key of the waiters' client
LISTENER = 42


def _request(owner: str, shared: bool, queue: bool = False) -> GrantRequest:
    return GrantRequest(NAME, owner, shared, 0 if shared else 1, True, 30.0, "bench", queue)


@contextlib.contextmanager
def _postgresql(directory: Path) -> Iterator[Callable[[int, int], dict[str, str]]]:
    from psycopg import sql

    from tumbler.backends.postgresql.opener import open_sync
    from tumbler.testing.backends.postgresql.server import TUMBLER_DATABASE, PostgreSQLServer

    with PostgreSQLServer(directory / "postgresql") as server:
        admin = server.connect(TUMBLER_DATABASE)
        # the waiters' client holds its listener key, as a listening client does
        admin.execute("SELECT pg_advisory_lock_shared(0, %s)", (LISTENER,))

        def measure(waiters: int, repeat: int) -> dict[str, str]:
            schema = f"bench_{uuid.uuid4().hex[:8]}"
            backend = open_sync(parse_url(f"{server.url}?schema={schema}"))
            insert = sql.SQL(
                "INSERT INTO {} (name, owner, shared, lim, fair, token, expires_at, holder, "
                "client, listener, lease, stamp, written_at) SELECT %s, %s || CASE WHEN %s = 1 "
                "THEN '' ELSE i::text END, %s, %s, true, "
                "%s, clock_timestamp() + interval '1 hour', 'bench', %s, %s, 30, 0, now() "
                "FROM generate_series(1, %s) AS i"
            ).format(sql.Identifier(schema, "tumbler_entries"))
            try:
                admin.execute(insert, (NAME, "holder", 1, True, 0, 1, None, None, 1))
                admin.execute(
                    insert, (NAME, "writer", waiters, False, 1, None, "nobody", LISTENER, waiters)
                )
                admin.execute("ANALYZE")
                return _figures(
                    backend,
                    repeat,
                    lambda i: admin.execute(
                        insert, (NAME, owner_hash(f"r{i}"), 1, True, 0, 1000 + i, None, None, 1)
                    ),
                )
            finally:
                backend.close()

        try:
            yield measure
        finally:
            admin.close()


@contextlib.contextmanager
def _mysql(directory: Path) -> Iterator[Callable[[int, int], dict[str, str]]]:
    from tumbler.backends.mysql.opener import open_sync
    from tumbler.testing.backends.mysql.server import TUMBLER_DATABASE, MariaDBServer

    with MariaDBServer(directory / "mariadb") as server:
        admin: Any = server.connect(TUMBLER_DATABASE)
        with admin.cursor() as cursor:  # the waiters' client listens
            cursor.execute("SELECT GET_LOCK(CONCAT('tumbler-listener-', %s), 0)", (LISTENER,))

        def measure(waiters: int, repeat: int) -> dict[str, str]:
            prefix = f"bench_{uuid.uuid4().hex[:8]}_"
            backend = open_sync(parse_url(f"{server.url}?table_prefix={prefix}"))
            insert = (
                f"INSERT INTO {prefix}entries (name, owner, shared, lim, fair, token, expires_at, "
                "holder, client, lease, stamp, written_at) VALUES (%s, %s, %s, %s, TRUE, %s, "
                "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, 'bench', %s, 30, 0, UTC_TIMESTAMP(6))"
            )
            try:
                with admin.cursor() as cursor:
                    cursor.execute(insert, (NAME, "h" * 40, True, 0, 1, None))
                    rows = [(NAME, f"{i:040d}", False, 1, None, LISTENER) for i in range(waiters)]
                    for start in range(0, len(rows), 1000):
                        cursor.executemany(insert, rows[start : start + 1000])
                    cursor.execute(f"ANALYZE TABLE {prefix}entries")
                    cursor.fetchall()

                def add_reader(i: int) -> None:
                    with admin.cursor() as cursor:
                        cursor.execute(insert, (NAME, owner_hash(f"r{i}"), True, 0, 1000 + i, None))

                return _figures(backend, repeat, add_reader)
            finally:
                backend.close()

        try:
            yield measure
        finally:
            admin.close()


def _figures(backend: Any, repeat: int, add_reader: Callable[[int], object]) -> dict[str, str]:
    """The medians of one line length: a release that frees a reader's grant (its entry
    ``r<i>`` put in by ``add_reader(i)``, leaving the line as it was), a mutex's and a
    reader's grant attempt, a new waiter's."""
    releases = []
    for i in range(repeat):
        add_reader(i)
        start = time.perf_counter()
        assert backend.release(NAME, f"r{i}")
        releases.append((time.perf_counter() - start) * 1000)
    return {
        "release": _summary(releases),
        "grant (mutex)": _summary(
            _calls(lambda i: backend.try_grant(_request(f"w{i}", False)), repeat)
        ),
        "grant (read)": _summary(
            _calls(lambda i: backend.try_grant(_request(f"q{i}", True)), repeat)
        ),
        "new waiter": _summary(
            _calls(lambda i: backend.try_grant(_request(f"n{i}", False, True)), repeat)
        ),
    }


def _calls(call: Callable[[int], object], repeat: int) -> list[float]:
    times = []
    for i in range(repeat):
        start = time.perf_counter()
        call(i)
        times.append((time.perf_counter() - start) * 1000)
    return times


def _summary(times: list[float]) -> str:
    return f"{statistics.median(times):8.2f} {max(times):8.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--waiters", default="0,1000,5000")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--store", choices=("postgresql", "mysql", "both"), default="both")
    options = parser.parse_args()
    counts = [int(text) for text in options.waiters.split(",")]
    stores = {"postgresql": _postgresql, "mysql": _mysql}
    chosen = list(stores) if options.store == "both" else [options.store]
    with tempfile.TemporaryDirectory(prefix="tumbler-bench-") as directory:
        for store in chosen:
            with stores[store](Path(directory)) as measure:
                print(f"\n{store}: milliseconds per call (median, max), by waiters in line")
                print(f"{'call':<15}" + "".join(f"{n:>18,}" for n in counts))
                results = [measure(n, options.repeat) for n in counts]
                for call in results[0]:
                    print(f"{call:<15}" + "".join(f"{r[call]:>18}" for r in results))


if __name__ == "__main__":
    main()
