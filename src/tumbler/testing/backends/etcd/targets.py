"""The etcd backend's test targets: one member, and one that speaks only TLS (client
certificates) with authentication on, its URLs logging in as a user whose role may use only
the ``/tumbler/`` prefix.

Each runs for the whole session; a test's URL gets a prefix of its own under ``/tumbler``.
The lease is short, so that a killed holder's entries go within seconds.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from tumbler.testing.servers._common import make_tls_files
from tumbler.testing.targets import TestTarget

from .server import EtcdServer

#: the lease_ttl of the targets' URLs: a killed holder's entries go after this long
LEASE_TTL = 3


class _Running:
    def __init__(self, server: EtcdServer) -> None:
        self.server = server

    def fresh_url(self) -> str:
        parts = urlsplit(self.server.url)
        prefix = f"{parts.path}/test-{uuid.uuid4().hex[:12]}"
        query = "&".join(filter(None, [parts.query, f"lease_ttl={LEASE_TTL}"]))
        return urlunsplit(parts._replace(path=prefix, query=query))

    def server_pids(self) -> list[int]:
        return self.server.pids()

    def close(self) -> None:
        self.server.close()


def _plain(directory: Path) -> _Running:
    server = EtcdServer(directory)
    server.start()
    return _Running(server)


def _tls(directory: Path) -> _Running:
    tls = make_tls_files(directory / "tls")
    server = EtcdServer(directory / "server", tls=tls)
    server.start()
    server.enable_auth()
    return _Running(server)


TARGETS = (
    TestTarget("etcd", _plain),
    TestTarget("etcd-tls", _tls, connection_variant=True),
)
