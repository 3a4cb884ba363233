"""The bench's view of ZooKeeper: kazoo's own ``Lock`` recipe beside tumbler's rows, and the
server the bench starts.

The bench's ZooKeeper fsyncs every transaction (``forceSync=yes``), as a production server
does: a grant's create is fsynced, and that dominates every figure. The test targets leave it
off, for speed, so the bench starts its own under the target's name. kazoo is imported in
``open()``, inside the bench's workers: importing this module does not need it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ...testing.bench import StoreBench, SyncContender, SyncSession, TimeoutLockSession
from ..descriptor import TestTarget

__all__ = ["BENCH", "KazooLock", "ZooKeeperBench"]


@dataclass(frozen=True)
class KazooLock(SyncContender):
    """kazoo's own ``Lock`` recipe on the same ensemble as tumbler's rows."""

    name: ClassVar[str] = "kazoo-Lock"
    mechanism: ClassVar[str] = (
        "kazoo client.Lock(path): ephemeral sequential node, watch on the predecessor "
        "(its own node names: not shared with tumbler's locks)"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("kazoo", "kazoo"),)

    def open(self, lock_name: str) -> SyncSession:
        from kazoo.client import KazooClient

        from ..._url import parse_url
        from .common import parse_config

        config = parse_config(parse_url(self.url))
        client = KazooClient(hosts=config.connect_string, timeout=config.session_timeout)
        client.start(timeout=config.connect_timeout)
        lock = client.Lock(f"{config.base}/kazoo-{lock_name}")

        def close() -> None:
            client.stop()
            client.close()

        return TimeoutLockSession(lock, lock_name, self.options.timeout, close)


class _Running:
    def __init__(self, directory: Path) -> None:
        from .server import ZooKeeperServer

        self.server = ZooKeeperServer(directory, force_sync=True).start()
        self._urls = 0

    def fresh_url(self) -> str:
        self._urls += 1
        return self.server.url_for("/bench" if self._urls == 1 else f"/bench-{self._urls}")

    def close(self) -> None:
        self.server.close()


@dataclass(frozen=True)
class ZooKeeperBench(StoreBench):
    """kazoo's ``Lock``, and the fsynced server."""

    def lease_url(self, url: str, ttl: float) -> str:
        """``url`` with a session timeout of ``ttl``: a holder's nodes go with its session."""
        return f"{url}{'&' if '?' in url else '?'}session_timeout={ttl:g}"


BENCH = ZooKeeperBench(
    peers=(KazooLock,),
    # zookeepers:// needs the TLS files the peer is not given
    schemes=("zookeeper",),
    targets=(TestTarget("zookeeper", _Running),),
)
