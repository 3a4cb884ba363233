"""The MySQL / MariaDB backend's test targets: one MariaDB in clear, and one that takes only
TLS (``require_secure_transport``, the tests' own CA). Each runs for the whole session; the
tests' URLs log in as the user ``tumbler``, each with a table prefix of its own."""

from __future__ import annotations

import uuid
from pathlib import Path

from tumbler.testing.servers._common import make_tls_files
from tumbler.testing.targets import TestTarget

from .server import MariaDBServer


class _Running:
    def __init__(self, server: MariaDBServer) -> None:
        self.server = server

    def fresh_url(self) -> str:
        url = self.server.url
        separator = "&" if "?" in url else "?"
        return f"{url}{separator}table_prefix=t{uuid.uuid4().hex[:12]}_"

    def server_pids(self) -> list[int]:
        return self.server.pids()

    def close(self) -> None:
        self.server.close()


def _plain(directory: Path) -> _Running:
    return _Running(MariaDBServer(directory).start())


def _tls(directory: Path) -> _Running:
    tls = make_tls_files(directory / "tls")
    return _Running(MariaDBServer(directory / "server", tls=tls).start())


TARGETS = (
    TestTarget("mysql", _plain),
    TestTarget("mysql-tls", _tls, connection_variant=True),
)
