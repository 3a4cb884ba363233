"""The Redlock backend's test targets: five plain masters, and three masters that speak only
TLS whose client is an ACL user with the rights the Redis backend needs (the same user and CA
on each).

Each runs for the whole session; a test's URL gets a key prefix of its own.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from tumbler.testing.targets import TestTarget

from .server import RedlockMasters, start_tls_masters

#: the masters of the plain target: five, so that two can be lost and a majority is left
MASTERS = 5


def _prefix() -> str:
    return f"tumbler:test-{uuid.uuid4().hex[:12]}"


class _Running:
    def __init__(self, masters: RedlockMasters) -> None:
        self.masters = masters

    def fresh_url(self) -> str:
        return self.masters.url(_prefix())

    def server_pids(self) -> list[int]:
        return [pid for master in self.masters.masters for pid in master.pids()]

    def close(self) -> None:
        self.masters.close()


def _plain(directory: Path) -> _Running:
    return _Running(RedlockMasters(directory, MASTERS).start())


def _tls_acl(directory: Path) -> _Running:
    return _Running(start_tls_masters(directory, 3))


TARGETS = (
    TestTarget("redlock", _plain),
    TestTarget("redlock-tls", _tls_acl, connection_variant=True),
)
