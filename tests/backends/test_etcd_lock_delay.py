"""etcd lock-delay: a grant made with one leaves a tombstone on no lease beside its entry
(``.../x/~#<turn>.<owner hash>``), which outlives the client's lease its entry lives on.

The risk proper to this backend: etcd deletes a dead holder's entry itself when its client's
lease ends, so without the tombstone the next holder would start at once. These cases end a
holder's lease from outside (no release) and check the delay follows and is timed by a lease
of its own (etcd deletes the tombstone when it ends), that a release leaves nothing behind,
that a grant without a lock-delay writes no tombstone, and that a malformed tombstone is
treated like any malformed key of a line.

Every case runs against a real etcd started by the fixtures in tests/servers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tumbler
from tumbler._url import parse_url
from tumbler.backends.etcd._sync.gateway import Gateway
from tumbler.backends.etcd.common import TOMB, line_key, parse_config
from tumbler.backends.etcd.wire import prefix_end, put
from tumbler.testing.backends.etcd.server import EtcdServer
from tumbler.testing.conformance.compat import background, eventually

from .test_etcd import url_of

PATIENCE = 30.0
#: a delay the cases wait out
DELAY = 2.0


@pytest.fixture
def url(etcd_server: EtcdServer) -> str:
    return url_of(etcd_server)


@pytest.fixture
def raw(etcd_server: EtcdServer) -> Iterator[Gateway]:
    gateway = Gateway([etcd_server.client_url])
    yield gateway
    gateway.close()


@pytest.fixture
def connect(url: str) -> Iterator[Callable[[], tumbler.Locks]]:
    clients: list[tumbler.Locks] = []

    def make() -> tumbler.Locks:
        client = tumbler.connect(url)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def line_of(raw: Gateway, url: str, name: str) -> list[dict[str, Any]]:
    key = line_key(parse_config(parse_url(url)).prefix, name)
    return raw.range(key, prefix_end(key))[1]


def tombs_of(raw: Gateway, url: str, name: str) -> list[dict[str, Any]]:
    return [kv for kv in line_of(raw, url, name) if kv["key"].rsplit(b"/", 1)[1].startswith(TOMB)]


def test_a_holder_whose_lease_ends_keeps_the_name_for_its_lock_delay(
    connect: Callable, url: str, raw: Gateway
) -> None:
    holder, waiter = connect(), connect()
    lock = holder.lock("expiring", lock_delay=DELAY)
    assert lock.acquire()
    hold = lock.hold
    (tomb,) = tombs_of(raw, url, "expiring")
    assert tomb["lease"] == 0  # on no lease: it outlives the client's
    wanted = waiter.lock("expiring")

    def take() -> tuple[int, float]:
        assert wanted.acquire(timeout=PATIENCE)
        return wanted.hold.token, time.monotonic()

    pending = background(take)
    # as etcd does when the client is gone: its lease, and its keys with it, end
    assert raw.revoke(holder._backend._lease.id)
    ended_at = time.monotonic()

    def lapsed() -> bool:
        state = waiter.status("expiring")
        return not state.holders and [h.token for h in state.lapsed] == [hold.token]

    eventually(lapsed, "the holder's grant is shown lapsed")
    # noticed: attached to a lease of its delay, which etcd times
    eventually(lambda: tombs_of(raw, url, "expiring")[0]["lease"] != 0, "the delay's lease")
    token, granted_at = pending.result()
    assert granted_at - ended_at >= DELAY - 0.05
    assert token > hold.token
    # etcd deleted the tombstone with the delay's lease
    assert tombs_of(raw, url, "expiring") == []
    assert waiter.status("expiring").lapsed == ()


def test_a_release_deletes_the_tombstone_with_the_entry(
    connect: Callable, url: str, raw: Gateway
) -> None:
    locks = connect()
    lock = locks.lock("released", lock_delay=60)
    assert lock.acquire()
    (tomb,) = tombs_of(raw, url, "released")
    record = json.loads(tomb["value"])
    assert (record["lock_delay"], record["token"]) == (60, lock.hold.token)
    assert len(line_of(raw, url, "released")) == 2  # the entry and its tombstone
    lock.release()
    assert line_of(raw, url, "released") == []
    assert connect().lock("released").acquire(blocking=False)


def test_a_grant_without_a_lock_delay_makes_no_tombstone(
    connect: Callable, url: str, raw: Gateway
) -> None:
    lock = connect().lock("plain")
    assert lock.acquire()
    assert len(line_of(raw, url, "plain")) == 1  # its entry alone
    lock.release()


def test_a_malformed_tombstone_blocks_nothing_is_counted_and_force_released(
    connect: Callable, url: str, raw: Gateway
) -> None:
    key = line_key(parse_config(parse_url(url)).prefix, "foreign") + b"x/" + TOMB + b"#0.ab"
    raw.txn([], [put(key, b"not a tombstone", 0)], [])
    locks = connect()
    assert locks.status("foreign").malformed == 1
    lock = locks.lock("foreign")
    assert lock.acquire(blocking=False)
    lock.release()
    assert locks.force_release("foreign") == 0
    assert line_of(raw, url, "foreign") == []


def test_a_lapsed_grant_is_listed_and_a_force_release_ends_it(
    connect: Callable, url: str, raw: Gateway
) -> None:
    holder, other = connect(), connect()
    lock = holder.lock("forced", lock_delay=60)
    assert lock.acquire()
    hold = lock.hold
    assert raw.revoke(holder._backend._lease.id)
    eventually(lambda: other.status("forced").lapsed != (), "the grant lapsed")
    (state,) = other.status_all()
    assert state.name == "forced"
    assert not state.holders
    (lapsed,) = state.lapsed
    assert lapsed.token == hold.token
    assert 0 < lapsed.expires_in <= 60
    assert not other.lock("forced").acquire(blocking=False)
    assert other.force_release("forced") == 0  # a lapsed grant is not counted
    assert line_of(raw, url, "forced") == []
    assert other.lock("forced").acquire(blocking=False)
