"""ZooKeeper lock-delay: a grant made with one leaves a persistent tombstone in the lock node,
beside its line (``BASE/<name>/~lapsed-<entry's sequence>``), which outlives the session its
entry lives with.

The risk proper to this backend: the ensemble deletes a dead holder's entry itself when its
session ends, so without the tombstone the next holder would start at once. These cases end a
holder's session from outside (no release) and check the delay follows, that a release leaves
nothing behind, that a grant without a lock-delay writes no tombstone, that a tombstone tumbler
did not write blocks nothing and is cleared, that tombstones get the user's ACL, and that
Curator's and kazoo's recipes, which sort every child of a lock node, put them after every
entry.

Every case runs against a real ZooKeeper started by the fixtures in tests/servers.
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

import tumbler
import tumbler.aio
from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest
from tumbler.backends.zookeeper.common import (
    TOMB_PREFIX,
    encode_name,
    parse_children,
    parse_config,
    parse_tombs,
    tomb_node,
)
from tumbler.testing.backends.zookeeper.server import ZooKeeperServer
from tumbler.testing.conformance.compat import background, eventually

PATIENCE = 30.0
#: a delay the cases wait out
DELAY = 2.0


@pytest.fixture
def url(zookeeper_server: ZooKeeperServer) -> str:
    return f"{zookeeper_server.url_for(f'/tumbler-test-{uuid.uuid4().hex[:12]}')}?session_timeout=3"


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


def lock_node(url: str, name: str) -> str:
    return f"{parse_config(parse_url(url)).base}/{encode_name(name)}"


def expire_session(locks: tumbler.Locks | tumbler.aio.AsyncLocks, server_hosts: str) -> None:
    """End a client's session from outside, as the ensemble does when it times out: a second
    connection with the same session id and password closes it."""
    session_id, password = locks._backend._client.client_id
    twin = KazooClient(hosts=server_hosts, client_id=(session_id, password))
    twin.start(timeout=10)
    twin.stop()
    twin.close()


def children(raw: KazooClient, path: str) -> list[str]:
    return raw.get_children(path) if raw.exists(path) else []


def tombs(raw: KazooClient, url: str, name: str) -> list[str]:
    return [node for node in children(raw, lock_node(url, name)) if node.startswith(TOMB_PREFIX)]


def test_a_holder_whose_session_ends_keeps_the_name_for_its_lock_delay(
    connect, url, raw, zookeeper_server
) -> None:
    holder, waiter = connect(), connect()
    lock = holder.lock("expiring", ttl=30, lock_delay=DELAY)
    assert lock.acquire()
    hold = lock.hold
    (tomb,) = tombs(raw, url, "expiring")
    wanted = waiter.lock("expiring")

    def take() -> tuple[int, float]:
        assert wanted.acquire(timeout=PATIENCE)
        return wanted.hold.token, time.monotonic()

    pending = background(take)
    expire_session(holder, zookeeper_server.connect_string)
    # the ensemble deleted the entry with the session: no release, so the delay follows
    ended_at = time.monotonic()
    assert hold.wait_lost(timeout=PATIENCE)

    def lapsed() -> bool:
        state = waiter.status("expiring")
        return not state.holders and [h.token for h in state.lapsed] == [hold.token]

    eventually(lapsed, "the holder's grant is shown lapsed")
    token, granted_at = pending.result()
    assert granted_at - ended_at >= DELAY - 0.05
    assert token > hold.token
    # the tombstone went with the delay's end; only the waiter's own grant is left
    assert tomb not in tombs(raw, url, "expiring")
    assert waiter.status("expiring").lapsed == ()


@pytest.mark.asyncio
async def test_asyncio_a_holder_whose_session_ends_keeps_the_name_for_its_lock_delay(
    url, zookeeper_server
) -> None:
    holder, other = await tumbler.aio.connect(url), await tumbler.aio.connect(url)
    try:
        lock = holder.lock("expiring-async", ttl=30, lock_delay=DELAY)
        assert await lock.acquire()
        hold = lock.hold
        expire_session(holder, zookeeper_server.connect_string)
        ended_at = time.monotonic()
        assert await hold.wait_lost(timeout=PATIENCE)
        wanted = other.lock("expiring-async")
        assert not await wanted.acquire(blocking=False)  # its own try notices, and stamps
        assert await wanted.acquire(timeout=PATIENCE)
        assert time.monotonic() - ended_at >= DELAY - 0.05
    finally:
        await holder.close()
        await other.close()


def test_a_tombstone_is_persistent_and_a_release_deletes_it_with_the_entry(
    connect, url, raw
) -> None:
    locks = connect()
    lock = locks.lock("tombstone", lock_delay=60)
    assert lock.acquire()
    path = lock_node(url, "tombstone")
    (entry,) = parse_children(raw.get_children(path))
    (tomb,) = tombs(raw, url, "tombstone")
    assert tomb == tomb_node(entry.seq)  # named by the sequence of the entry it stands for
    data, stat = raw.get(f"{path}/{tomb}")
    assert stat.ephemeralOwner == 0  # not the session's: it outlives it
    record = json.loads(data)
    assert (record["entry"], record["lock_delay"], record["token"], record["lapsed"]) == (
        entry.node,
        60,
        lock.hold.token,
        False,
    )
    assert sorted(raw.get_children(path)) == sorted([entry.node, tomb])
    lock.release()
    assert children(raw, path) == []
    assert connect().lock("tombstone").acquire(blocking=False)


def test_a_grant_without_a_lock_delay_makes_no_tombstone(connect, url, raw) -> None:
    lock = connect().lock("plain")
    assert lock.acquire()
    assert len(raw.get_children(lock_node(url, "plain"))) == 1  # its entry alone
    lock.release()


def test_a_tombstone_tumbler_did_not_write_blocks_nothing_and_is_cleared(connect, url, raw) -> None:
    stray = f"{lock_node(url, 'foreign')}/{tomb_node(7)}"
    raw.create(stray, b"not a tombstone", makepath=True)
    locks = connect()
    assert locks.status("foreign").lapsed == ()
    assert locks.lock("foreign").acquire(blocking=False)
    assert not raw.exists(stray)


def test_a_stamped_tombstone_whose_delay_ended_is_cleared_by_the_next_grant(
    connect, url, raw
) -> None:
    stale = f"{lock_node(url, 'ended')}/{tomb_node(3)}"
    entry = f"_c_{'1' * 32}-lock-0000000003"
    record = {
        "entry": entry,
        "holder": "gone",
        "lock_delay": 0.5,
        "token": 1,
        "ttl": 0.0,
        "lapsed": True,
    }
    raw.create(stale, json.dumps(record).encode(), makepath=True)
    locks = connect()
    lock = locks.lock("ended")
    # granted once the half second from the stamp (the node's mtime) has passed
    assert lock.acquire(timeout=PATIENCE)
    assert not raw.exists(stale)


def test_a_tombstone_whose_entry_is_another_blocks_nothing(connect, url, raw) -> None:
    """A tombstone speaks for the entry of its own sequence number, and no other."""
    stray = f"{lock_node(url, 'mismatch')}/{tomb_node(4)}"
    record = {
        "entry": f"_c_{'2' * 32}-lock-0000000009",
        "holder": "gone",
        "lock_delay": 60,
        "token": 1,
        "ttl": 0.0,
        "lapsed": True,
    }
    raw.create(stray, json.dumps(record).encode(), makepath=True)
    assert connect().lock("mismatch").acquire(blocking=False)
    assert not raw.exists(stray)


def test_a_lapsed_grant_is_shown_and_counted_and_a_force_release_ends_it(
    connect, url, raw, zookeeper_server
) -> None:
    holder, other = connect(), connect()
    lock = holder.lock("forced", ttl=30, lock_delay=60)
    assert lock.acquire()
    hold = lock.hold
    expire_session(holder, zookeeper_server.connect_string)
    assert hold.wait_lost(timeout=PATIENCE)
    # the lock node lives on with the tombstone alone: the name is still listed
    (state,) = other.status_all()
    assert state.name == "forced"
    assert not state.holders
    (lapsed,) = state.lapsed
    assert lapsed.token == hold.token
    assert 0 < lapsed.expires_in <= 60
    assert not other.lock("forced").acquire(blocking=False)
    assert other.force_release("forced") == 0  # a lapsed grant is not counted
    assert tombs(raw, url, "forced") == []
    assert other.lock("forced").acquire(blocking=False)


def test_tombstones_get_the_users_acl(zookeeper_server: ZooKeeperServer) -> None:
    user, password = "app", "acl-Pa55word"
    base = f"/tumbler-test-{uuid.uuid4().hex[:12]}"
    url = f"zookeeper://{user}:{password}@{zookeeper_server.connect_string}{base}?session_timeout=3"
    locks = tumbler.connect(url)
    # the super user, who may read what only the user may
    operator = KazooClient(
        hosts=zookeeper_server.connect_string, auth_data=[zookeeper_server.super_auth]
    )
    operator.start(timeout=20)
    try:
        lock = locks.lock("guarded", lock_delay=60)
        assert lock.acquire()
        (tomb,) = tombs(operator, url, "guarded")
        acls, _stat = operator.get_acls(f"{lock_node(url, 'guarded')}/{tomb}")
        assert acls == [make_digest_acl(user, password, all=True)]
        lock.release()
    finally:
        operator.stop()
        operator.close()
        locks.close()


def curator_sort_key(node: str, lock_name: str) -> str:
    """Curator's ``StandardLockInternalsDriver.fixForSorting``: what follows the last
    ``lock_name`` in the node's name, or the whole name."""
    index = node.rfind(lock_name)
    return node[index + len(lock_name) :] if index >= 0 else node


def kazoo_sort_key(node: str) -> str:
    """kazoo's ``Lock._get_sorted_children``: what follows its kinds' names, else "~"."""
    for kind in ("__lock__", "__rlock__"):
        index = node.find(kind)
        if index != -1:
            return node[index + len(kind) :]
    return "~"


@pytest.mark.parametrize("seq", [0, 7, 2**31 - 1, -(2**31)])
def test_other_recipes_sort_a_tombstone_after_every_entry(seq: int) -> None:
    tomb = tomb_node(seq)
    assert parse_children([tomb]) == []  # never in tumbler's line
    assert parse_tombs([tomb]) == [(tomb, seq)]
    entries = [f"_c_{'3' * 32}-lock-{n:010d}" for n in (0, 12, 2**31 - 1, -(2**31))]
    entries += [f"_c_{'3' * 32}-__READ__{n:010d}" for n in (5, 2**31 - 1)]
    entries += [f"x-__WRIT__{n:010d}" for n in (6, -(2**31))]
    for kind in ("lock-", "__READ__", "__WRIT__"):
        assert all(curator_sort_key(tomb, kind) > curator_sort_key(e, kind) for e in entries)
    assert all(kazoo_sort_key(tomb) >= kazoo_sort_key(f"x__lock__{n:010d}") for n in (1, 99))


def test_a_hold_given_up_is_lapsed_with_its_delay_from_then(connect, url, raw) -> None:
    """``lapse`` (what the lock layer calls for a hold it gives up while its session lives):
    the entry goes and the tombstone is stamped in one transaction, so the name stays closed
    although nobody's session ended."""
    backend = connect()._backend
    wanted = GrantRequest(
        "given-up", secrets.token_urlsafe(18), False, 1, False, 3.0, "test", lock_delay=DELAY
    )
    grant = backend.try_grant(wanted)
    assert grant is not None
    (tomb,) = tombs(raw, url, "given-up")
    backend.lapse(wanted.name, wanted.owner)
    path = lock_node(url, "given-up")
    assert raw.get_children(path) == [tomb]  # the entry went; its tombstone stays
    assert json.loads(raw.get(f"{path}/{tomb}")[0])["lapsed"] is True
    assert backend.renew(wanted.name, wanted.owner, 3.0) is None
    assert not backend.release(wanted.name, wanted.owner)
    other = connect()
    (lapsed,) = other.status("given-up").lapsed
    assert lapsed.token == grant.token
    assert 0 < lapsed.expires_in <= DELAY
    began = time.monotonic()
    assert other.lock("given-up").acquire(timeout=PATIENCE)
    assert time.monotonic() - began >= lapsed.expires_in - 0.25
