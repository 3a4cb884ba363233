"""ZooKeeper's uncontended pair: at most three requests, counted by the server, in both
flavours; and what the pair no longer pays for (a deletion watch set at the grant) is paid
by the grant's first renewal, which still refuses an entry deleted before it.

Requests are counted by the server (the ``stat`` four-letter word: packets received on the
backend's connection). The sessions are long (``SESSION``), so kazoo's heartbeats, sent only
after a third of it without a request, fall into no counted window but perhaps one.

Every case runs against a real ZooKeeper started by the fixtures in tests/servers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

import tumbler
import tumbler.aio
from tumbler.backends.contract import GrantRequest, Renewal
from tumbler.testing.backends.zookeeper.server import ZooKeeperServer

from .test_zookeeper_renewal import SESSION, packets_received, request

PAIRS = 20
#: create (ephemeral sequential), one read of the line, delete
PAIR_REQUESTS = 3


def base_path() -> str:
    return f"/tumbler-speed-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def url(zookeeper_server: ZooKeeperServer) -> str:
    return f"{zookeeper_server.url_for(base_path())}?session_timeout={SESSION:g}"


@pytest.fixture
def locks(url: str) -> Iterator[tumbler.Locks]:
    client = tumbler.connect(url)
    yield client
    client.close()


def entry_path(backend: Any, wanted: GrantRequest) -> str:
    return backend._entries[(wanted.name, wanted.owner)].path  # type: ignore[no-any-return]


# -- the pair ------------------------------------------------------------------------------


def test_an_uncontended_pair_is_three_requests(locks, zookeeper_server) -> None:
    lock = locks.lock("pair")
    assert lock.acquire()  # the first pair makes the lock node: not counted
    lock.release()
    before = packets_received(zookeeper_server, locks._backend)
    for _ in range(PAIRS):
        assert lock.acquire()
        assert lock.hold is not None
        assert lock.hold.token > 0
        lock.release()
    sent = packets_received(zookeeper_server, locks._backend) - before
    # perhaps one heartbeat besides
    assert sent <= PAIRS * PAIR_REQUESTS + 1, f"{sent / PAIRS:.2f} requests a pair"


@pytest.mark.asyncio
async def test_asyncio_an_uncontended_pair_is_three_requests(url, zookeeper_server) -> None:
    locks = await tumbler.aio.connect(url)
    try:
        lock = locks.lock("pair")
        assert await lock.acquire()
        await lock.release()
        before = packets_received(zookeeper_server, locks._backend)
        for _ in range(PAIRS):
            assert await lock.acquire()
            assert lock.hold is not None
            assert lock.hold.token > 0
            await lock.release()
        sent = packets_received(zookeeper_server, locks._backend) - before
        assert sent <= PAIRS * PAIR_REQUESTS + 1, f"{sent / PAIRS:.2f} requests a pair"
    finally:
        await locks.close()


# -- the first renewal reads, and watches -----------------------------------------------------


def test_a_first_renewal_reads_the_entry_in_the_probes_round_trip(locks, zookeeper_server) -> None:
    backend = locks._backend
    wanted = request("first-renewal")
    assert backend.try_grant(wanted) is not None
    entry = backend._entries[(wanted.name, wanted.owner)]
    assert not entry.watched  # no watch was set at the grant
    renewal = Renewal(wanted.name, wanted.owner, SESSION)
    before = packets_received(zookeeper_server, backend)
    assert backend.renew_all([renewal], 5.0) == [SESSION]
    # the probe and the read that sets the watch (and perhaps one heartbeat)
    assert packets_received(zookeeper_server, backend) - before <= 2 + 1
    assert entry.watched
    before = packets_received(zookeeper_server, backend)
    assert backend.renew_all([renewal], 5.0) == [SESSION]
    assert packets_received(zookeeper_server, backend) - before <= 1 + 1  # the probe alone
    assert backend.release(wanted.name, wanted.owner)


@pytest.mark.parametrize("how", ["force_release", "deleted by another program"])
def test_a_hold_deleted_before_its_first_renewal_is_refused_by_it(
    locks, url, raw: KazooClient, how: str
) -> None:
    operator = tumbler.connect(url)
    try:
        backend = locks._backend
        kept = request("kept")
        assert backend.try_grant(kept) is not None
        wanted = request("never-renewed")
        assert backend.try_grant(wanted) is not None
        if how == "force_release":
            assert operator.force_release(wanted.name) == 1
        else:
            raw.delete(entry_path(backend, wanted))
        renewals = [Renewal(wanted.name, wanted.owner, SESSION), Renewal(kept.name, kept.owner, 9)]
        assert backend.renew_all(renewals, 5.0) == [None, 9]
        assert backend.renew(wanted.name, wanted.owner, SESSION) is None  # and stays refused
        assert not backend.release(wanted.name, wanted.owner)
    finally:
        operator.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["force_release", "deleted by another program"])
async def test_asyncio_a_hold_deleted_before_its_first_renewal_is_refused_by_it(
    url, raw: KazooClient, how: str
) -> None:
    locks = await tumbler.aio.connect(url)
    operator = await tumbler.aio.connect(url)
    try:
        backend = locks._backend
        kept = request("kept")
        assert await backend.try_grant(kept) is not None
        wanted = request("never-renewed")
        assert await backend.try_grant(wanted) is not None
        if how == "force_release":
            assert await operator.force_release(wanted.name) == 1
        else:
            raw.delete(entry_path(backend, wanted))
        renewals = [Renewal(wanted.name, wanted.owner, SESSION), Renewal(kept.name, kept.owner, 9)]
        assert await backend.renew_all(renewals, 5.0) == [None, 9]
        assert await backend.renew(wanted.name, wanted.owner, SESSION) is None
        assert not await backend.release(wanted.name, wanted.owner)
    finally:
        await operator.close()
        await locks.close()


def test_a_force_released_hold_that_never_renewed_is_lost(locks, url) -> None:
    """Through the lock layer: the holder's own renewal worker finds it gone."""
    operator = tumbler.connect(url)
    try:
        lock = locks.lock("lost-unrenewed", ttl=3)
        assert lock.acquire()
        hold = lock.hold
        assert hold is not None
        assert operator.force_release("lost-unrenewed") == 1
        assert hold.wait_lost(timeout=20)
        assert hold.lost_reason is not None
        assert "force-released" in hold.lost_reason
    finally:
        operator.close()
