"""The PostgreSQL backend's test targets: one server in clear, and one that takes only TLS
(``sslmode=verify-full`` against the tests' own CA).

Each runs for the whole session; the tests' URLs log in as the password role ``tumbler``,
each with a schema of its own.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from ...testing.servers._common import make_tls_files
from ..descriptor import TestTarget
from .server import PostgreSQLServer


def _schema() -> str:
    return f"test_{uuid.uuid4().hex[:12]}"


class _Running:
    def __init__(self, server: PostgreSQLServer) -> None:
        self.server = server

    def fresh_url(self) -> str:
        separator = "&" if "?" in self.server.url else "?"
        return f"{self.server.url}{separator}schema={_schema()}"

    def close(self) -> None:
        self.server.close()


def _plain(directory: Path) -> _Running:
    return _Running(PostgreSQLServer(directory).start())


def _tls(directory: Path) -> _Running:
    tls = make_tls_files(directory / "tls")
    return _Running(PostgreSQLServer(directory / "server", tls=tls).start())


TARGETS = (
    TestTarget("postgresql", _plain),
    # the same locking as "postgresql" over another connection: the cases that start other
    # processes need not run on it again
    TestTarget("postgresql-tls", _tls, processes=False),
)
