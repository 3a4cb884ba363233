"""Fixtures the backends' own tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from tumbler.testing.backends.zookeeper.server import ZooKeeperServer


@pytest.fixture
def raw(zookeeper_server: ZooKeeperServer) -> Iterator[KazooClient]:
    """A plain kazoo client of the suite's ZooKeeper, to look at and change the nodes as
    another program would."""
    client = KazooClient(hosts=zookeeper_server.connect_string)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()
