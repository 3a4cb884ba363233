"""The ZooKeeper backend's test targets: one standalone server, and one that speaks only TLS
(client certificates, and digest credentials over it, so every node the clients make is
theirs alone and every node they use is checked to be).

Each runs for the whole session; a test's URL gets a base path of its own. The session timeout
is short, so that a killed holder's entry goes within seconds.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable
from pathlib import Path

from tumbler.testing.servers._common import make_tls_files
from tumbler.testing.targets import TestTarget

from .server import ZooKeeperServer

#: the session timeout of the targets' URLs: a killed holder's entry goes after this long
SESSION_TIMEOUT = 3.0


def _base() -> str:
    return f"/tumbler-test-{uuid.uuid4().hex[:12]}"


class _Running:
    def __init__(self, server: ZooKeeperServer, url: Callable[[str], str]) -> None:
        self.server = server
        self._url = url

    def fresh_url(self) -> str:
        return self._url(_base())

    def server_pids(self) -> list[int]:
        return self.server.pids()

    def close(self) -> None:
        self.server.close()


def _plain(directory: Path) -> _Running:
    server = ZooKeeperServer(directory).start()
    return _Running(
        server, lambda base: f"{server.url_for(base)}?session_timeout={SESSION_TIMEOUT}"
    )


def _tls(directory: Path) -> _Running:
    tls = make_tls_files(directory / "tls")
    server = ZooKeeperServer(directory / "server", tls=tls).start()
    user = f"tumbler:{secrets.token_urlsafe(12)}"

    def url(base: str) -> str:
        return (
            f"{server.scheme}://{user}@{server.connect_string}{base}"
            f"?session_timeout={SESSION_TIMEOUT}&ssl_ca_certs={server.ca_path}"
            f"&ssl_certfile={server.client_cert_path}&ssl_keyfile={server.client_key_path}"
        )

    return _Running(server, url)


TARGETS = (
    TestTarget("zookeeper", _plain),
    TestTarget("zookeeper-tls", _tls, connection_variant=True),
)
