"""The PostgreSQL backend's test targets: one server in clear, one that takes only TLS
(``sslmode=verify-full`` against the tests' own CA), and one server behind PgBouncer in
transaction mode (``pooler=transaction``: no session state, waiters poll).

Each runs for the whole session; the tests' URLs log in as the password role ``tumbler``,
each with a schema of its own.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from tumbler.testing.servers._common import make_tls_files
from tumbler.testing.targets import TestTarget

from .server import PgBouncerServer, PostgreSQLServer


def _schema() -> str:
    return f"test_{uuid.uuid4().hex[:12]}"


class _Running:
    def __init__(self, server: PostgreSQLServer, pooler: PgBouncerServer | None = None) -> None:
        self.server = server
        self.pooler = pooler

    def fresh_url(self) -> str:
        url = self.server.url if self.pooler is None else self.pooler.url
        separator = "&" if "?" in url else "?"
        return f"{url}{separator}schema={_schema()}"

    def server_pids(self) -> list[int]:
        # the postmaster and the process it forked for each connection
        pooler = [] if self.pooler is None else self.pooler.pids()
        return [*self.server.pids(), *pooler]

    def close(self) -> None:
        if self.pooler is not None:
            self.pooler.close()
        self.server.close()


def _plain(directory: Path) -> _Running:
    return _Running(PostgreSQLServer(directory).start())


def _tls(directory: Path) -> _Running:
    tls = make_tls_files(directory / "tls")
    return _Running(PostgreSQLServer(directory / "server", tls=tls).start())


def _pgbouncer(directory: Path) -> _Running:
    server = PostgreSQLServer(directory / "server").start()
    try:
        pooler = PgBouncerServer(server, directory / "pgbouncer").start()
    except BaseException:
        server.close()
        raise
    return _Running(server, pooler)


TARGETS = (
    TestTarget("postgresql", _plain),
    TestTarget("postgresql-tls", _tls, connection_variant=True),
    # no session outlives a transaction, and waiters poll: every case, processes included
    TestTarget("postgresql-pgbouncer", _pgbouncer),
)
