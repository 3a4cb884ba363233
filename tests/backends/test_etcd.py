"""etcd backend cases beyond the contract suite: the key layout and its lease, herd-free
wake-ups on one watch stream per client, a lease lost (every hold with it, and nothing of
its waiters', which live on the waiters' lease), a waiter whose
lease ran out while it waited (etcd's own mutex reported a grant then), a killed waiter that
leaves the line with the waiters' short lease, withdrawals whose
reply was lost, no key and no lease left behind by a close, a crash or a cancelled acquire,
a blocking acquire interrupted amid its HTTP connection's bookkeeping,
authentication, and a 3-member cluster whose leader is killed while a lock is held and waited
for, whose member in use stops answering (both flavours), or whose leader hangs past the
lease and comes back to revoke it (both flavours), with the rule that times a lease by the
answers of its own raft term, a lone member that hangs past the lease, and a member cut off
from its client.

Every case runs against a real etcd started by the fixtures in tests/servers.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tumbler
import tumbler.aio
import tumbler.testing.conformance as conformance
from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest
from tumbler.backends.etcd import http as etcd_http
from tumbler.backends.etcd import wire as etcd_wire
from tumbler.backends.etcd._sync.backend import KeyWatches, _Lease
from tumbler.backends.etcd._sync.gateway import Gateway, LeaseAnswer
from tumbler.backends.etcd.common import line_key, parse_config
from tumbler.backends.etcd.wire import WatchEvent, prefix_end
from tumbler.backends.kit.owners import owner_hash
from tumbler.errors import BackendUnavailable, ClientClosed, PermissionDenied
from tumbler.testing.backends.etcd.server import TUMBLER_USER, EtcdCluster, EtcdServer
from tumbler.testing.conformance.compat import aeventually, eventually
from tumbler.torture.proxy import FaultProxy

from .herd import count_wakeups, queued
from .test_etcd_gateway import interrupted_amid_h11s_next_cycle
from .test_postgresql import every_call_gives_up_when_replies_are_dropped

PATIENCE = 30.0
#: the lease of the cases' clients: a dead one's keys go this long after its last keep-alive
LEASE_TTL = 3


def prefix() -> str:
    return f"/tumbler/test-{uuid.uuid4().hex[:12]}"


def url_of(server: EtcdServer | EtcdCluster, options: str = "") -> str:
    query = f"lease_ttl={LEASE_TTL}" + (f"&{options}" if options else "")
    return f"{server.url.rsplit('/', 1)[0]}{prefix()}?{query}"


@pytest.fixture
def url(etcd_server: EtcdServer) -> str:
    return url_of(etcd_server)


@pytest.fixture
def connect(url: str) -> Iterator[Callable[..., tumbler.Locks]]:
    clients: list[tumbler.Locks] = []

    def make(target: str = url) -> tumbler.Locks:
        client = tumbler.connect(target)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def raw(etcd_server: EtcdServer) -> Iterator[Gateway]:
    """A plain gateway client of the suite's etcd, to look at and change keys as another
    program would."""
    gateway = Gateway([etcd_server.client_url])
    yield gateway
    gateway.close()


def the_prefix(url: str) -> bytes:
    return parse_config(parse_url(url)).prefix


def line_of(raw: Gateway, url: str, name: str) -> list[dict[str, Any]]:
    key = line_key(the_prefix(url), name)
    return raw.range(key, prefix_end(key), by_creation=True)[1]


def waits_on_the_waiters_lease(raw: Gateway, waiter: tumbler.Locks, name: str) -> bool:
    """Whether ``waiter``'s client has moved an entry of ``name``'s line onto its waiters'
    lease: that lease is granted before the move is sent, so its being there says less."""
    lease = waiter._backend._waiter_lease
    return lease is not None and any(
        int(kv["lease"]) == lease.id for kv in line_of(raw, waiter.url, name)
    )


def held(lock: tumbler.Lock) -> tumbler.Hold:
    assert lock.acquire(timeout=PATIENCE)
    hold = lock.hold
    assert hold is not None
    return hold


def leases_of(raw: Gateway) -> set[int]:
    return set(raw.leases())


# -- the key layout --------------------------------------------------------------------------


def test_an_entry_is_a_key_of_the_line_on_the_clients_lease(connect, url, raw) -> None:
    before = leases_of(raw)
    locks = connect()
    # a client takes its lease when it connects: an acquire's first write is its entry
    (lease,) = leases_of(raw) - before
    with locks.lock("layout/a b") as hold:
        (entry,) = line_of(raw, url, "layout/a b")
        # one name's line is never inside another's: the name is encoded whole
        assert entry["key"].startswith(the_prefix(url) + b"lock/layout%2Fa%20b/")
        assert hold.token == entry["create_revision"]
        assert entry["lease"] == lease
        assert json.loads(entry["value"])["kind"] == "lock"
        with locks.semaphore("layout-sem", 3):
            (permit,) = line_of(raw, url, "layout-sem")
            assert json.loads(permit["value"])["permits"] == 3
            assert permit["lease"] == entry["lease"]  # one lease per client
    assert line_of(raw, url, "layout/a b") == []
    locks.close()
    assert leases_of(raw) == before  # revoked at close


def test_an_acquires_first_write_is_its_entry_in_line(connect) -> None:
    """A fair lock serves its line in the order of the entries: an acquire that first took
    or kept alive its client's lease would enter behind acquires that began after it. The
    client takes its lease when it connects, and an entry goes in on the lease as it is while
    a third of it is left; the grant is timed from a keep-alive all the same."""
    locks = connect()
    gateway = locks._backend.gateway
    paths: list[str] = []
    original = gateway.call

    def recording(path, *args, **kwargs):
        paths.append(path)
        return original(path, *args, **kwargs)

    gateway.call = recording
    with locks.lock("first-write"):
        assert paths == ["/v3/kv/txn"]
    # half the lease gone since it was last kept alive, as far as the client knows
    locks._backend._lease.expires = time.monotonic() + LEASE_TTL / 2
    paths.clear()
    with locks.lock("first-write") as hold:
        assert paths == ["/v3/kv/txn", "/v3/lease/keepalive"]
        assert LEASE_TTL * 2 / 3 < hold.ttl <= LEASE_TTL


@pytest.mark.asyncio
async def test_an_acquires_first_write_is_its_entry_in_line_asyncio(url) -> None:
    """The case above, through the asyncio flavour's backend."""
    async with await tumbler.aio.connect(url) as locks:
        gateway = locks._backend.gateway
        paths: list[str] = []
        original = gateway.call

        async def recording(path, *args, **kwargs):
            paths.append(path)
            return await original(path, *args, **kwargs)

        gateway.call = recording
        async with locks.lock("first-write"):
            assert paths == ["/v3/kv/txn"]
        locks._backend._lease.expires = time.monotonic() + LEASE_TTL / 2
        paths.clear()
        async with locks.lock("first-write") as hold:
            assert paths == ["/v3/kv/txn", "/v3/lease/keepalive"]
            assert LEASE_TTL * 2 / 3 < hold.ttl <= LEASE_TTL


def test_tokens_are_create_revisions_and_keep_rising(connect) -> None:
    one, other = connect(), connect()
    tokens = []
    for client in (one, other, one):
        with client.lock("rising") as hold:
            tokens.append(hold.token)
    assert tokens == sorted(set(tokens))


# -- waking waiters --------------------------------------------------------------------------


def test_a_release_wakes_only_the_next_waiter(connect) -> None:
    holder = connect()
    lock = holder.lock("herd")
    assert lock.acquire()
    waiters = [connect() for _ in range(4)]
    woken = count_wakeups(waiters)
    with queued(holder, waiters, "herd", PATIENCE) as line:
        for client in waiters:
            # its watch is made, and the waiter, woken once to read its line again (its read
            # was older than the watch), waits on it
            watches = client._backend.watches
            eventually(lambda w=watches: w._created and w._interests, "the waiter watches")
        # The wake-up of a watch's creation may reach the hub after its waiter registered
        # again (it read its line anew meanwhile): what a release does is counted by what
        # the streams deliver, which nothing but a change of a watched key adds to.
        delivered = [client._backend.watches.events_received for client in waiters]
        lock.release()
        assert line.first_granted.wait(PATIENCE)
        # the next in line was woken; nobody behind it was told of anything
        eventually(lambda: woken[0] >= 1, "the next in line was woken")
        news = [
            client._backend.watches.events_received - before
            for client, before in zip(waiters, delivered, strict=True)
        ]
        assert news[1:] == [0, 0, 0]
    assert line.order == [0, 1, 2, 3]


def test_one_stream_carries_every_waiter_of_a_client(connect) -> None:
    holders = connect()
    held = [holders.lock(f"many-{index}") for index in range(3)]
    for lock in held:
        assert lock.acquire()
    waiting = connect()
    granted: list[int] = []

    def wait(index: int) -> None:
        mine = waiting.lock(f"many-{index}")
        assert mine.acquire(timeout=PATIENCE)
        granted.append(index)
        mine.release()

    threads = [threading.Thread(target=wait, args=(index,)) for index in range(3)]
    for thread in threads:
        thread.start()
    eventually(
        lambda: all(holders.status(f"many-{index}").waiters == 1 for index in range(3)),
        "three waiters in line",
    )
    watches = waiting._backend.watches
    eventually(lambda: len(watches._streamed) == 3, "one stream watches the three keys")
    for lock in reversed(held):
        lock.release()
    for thread in threads:
        thread.join(timeout=PATIENCE)
    assert sorted(granted) == [0, 1, 2]


# -- the lease -------------------------------------------------------------------------------


def test_a_lease_revoked_from_outside_loses_every_hold_at_once(connect, raw) -> None:
    locks = connect()
    lost: list[str] = []
    holds = []
    for name in ("lease-a", "lease-b"):
        hold = held(locks.lock(name, ttl=LEASE_TTL))
        hold.on_lost(lambda hold: lost.append(hold.name))
        holds.append(hold)
    lease = locks._backend._lease.id
    assert raw.revoke(lease)  # an operator's revoke, or a lease that ran out unheard
    # the next renewal (a third into the lease) finds it gone: both holds go, not one
    for hold in holds:
        assert hold.wait_lost(timeout=PATIENCE)
    assert sorted(lost) == ["lease-a", "lease-b"]
    # the client goes on with a new lease
    with locks.lock("lease-a") as again:
        assert again.token > holds[0].token
    assert locks._backend._lease.id != lease


def test_a_waiter_whose_lease_ran_out_never_reports_a_grant(connect, raw) -> None:
    """etcd-io/etcd#11456: etcd's own mutex reported a grant to a waiter whose key had gone
    with its lease. Here the waiter takes a new place at the end of the line."""
    holder, waiter = connect(), connect()
    hold = held(holder.lock("expired-waiter"))
    result: list[tumbler.Hold] = []

    def wait() -> None:
        mine = waiter.lock("expired-waiter")
        if mine.acquire(timeout=PATIENCE):
            result.append(mine.hold)

    thread = threading.Thread(target=wait)
    thread.start()
    eventually(lambda: holder.status("expired-waiter").waiters == 1, "the waiter is in line")
    eventually(
        lambda: waits_on_the_waiters_lease(raw, waiter, "expired-waiter"),
        "the waiter's entry is moved",
    )
    lease = waiter._backend._waiter_lease.id
    assert raw.revoke(lease)  # its key goes: a DELETE on nobody's watch
    # its client finds the lease gone and queues again, behind the holder, on a new one
    eventually(
        lambda: (
            waiter._backend._waiter_lease not in (None,)
            and waiter._backend._waiter_lease.id != lease
            and holder.status("expired-waiter").waiters
        ),
        "the waiter queues again on a new lease",
    )
    assert not result
    assert hold.held
    hold.release()
    thread.join(timeout=PATIENCE)
    assert result
    assert result[0].token > hold.token
    result[0].release()


@pytest.mark.parametrize("fair", [False, True])
def test_a_waiter_keeps_its_place_when_its_clients_lease_is_lost(connect, raw, fair) -> None:
    """A waiter's entry lives on the waiters' lease, not the client's: the client's losing
    its own lease takes nothing from the line, and the waiter, which its client still knows
    by that entry, is the next granted. A client that forgot it would queue again behind its
    own entry, which no acquire of its owns any more and which its next waiters keep alive:
    the line would stall behind it."""
    holder, waiter = connect(), connect()
    hold = held(holder.lock("kept-place", fair=fair))
    result: list[tumbler.Hold] = []

    def wait() -> None:
        mine = waiter.lock("kept-place", fair=fair)
        if mine.acquire(timeout=PATIENCE):
            result.append(mine.hold)

    thread = threading.Thread(target=wait)
    thread.start()
    eventually(
        lambda: waits_on_the_waiters_lease(raw, waiter, "kept-place"), "the waiter's entry is moved"
    )
    own = waiter._backend._lease.id
    # an operator's revoke (or it ran out unheard already: a client that only waits keeps
    # its lease alive only now and then)
    raw.revoke(own)
    before = [kv["key"] for kv in line_of(raw, holder.url, "kept-place")]
    assert len(before) == 2  # the holder's entry and the waiter's, on the waiters' lease
    hold.release()
    thread.join(timeout=PATIENCE)
    assert result, "the waiter was never granted"
    assert result[0].token > hold.token
    # granted on its own entry, moved to the client's new lease: none other was made
    assert [kv["key"] for kv in line_of(raw, holder.url, "kept-place")] == before[1:]
    assert waiter._backend._lease.id != own
    result[0].release()
    assert line_of(raw, holder.url, "kept-place") == []


# -- nothing left behind -----------------------------------------------------------------------


def test_a_release_whose_reply_is_lost_is_completed_by_the_next_call(
    etcd_server: EtcdServer, raw
) -> None:
    with FaultProxy((etcd_server.host, etcd_server.port)) as proxy:
        base = url_of(etcd_server, "request_timeout=1")
        proxied = base.replace(f":{etcd_server.port}/", f":{proxy.port}/")
        holder, other = tumbler.connect(proxied), tumbler.connect(base)
        try:
            hold = held(holder.lock("lost-release"))
            proxy.drop("both")  # the release never reaches etcd: the key stays
            with pytest.raises(BackendUnavailable):
                hold.release()
            proxy.heal()
            assert not other.lock("lost-release").acquire(blocking=False)
            # the holder's next call of any kind deletes it first
            with holder.lock("something else"):
                pass
            assert other.lock("lost-release").acquire(timeout=PATIENCE)
        finally:
            holder.close()
            other.close()


def test_a_withdrawal_that_did_not_get_through_outlives_the_clients_lease(
    connect, url, raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A waiter's entry whose withdrawal did not get through is deleted at the client's next
    call, even when the client's lease was lost meanwhile: it is on the waiters' lease, which
    the client's other waiters keep alive, and would hold its line up for as long."""
    holder, waiter = connect(), connect()
    held(holder.lock("orphaned"))
    other = held(holder.lock("still-waited-for"))
    backend = waiter._backend
    kept: list[bool] = []
    # a waiter of the client that stays: it keeps the waiters' lease alive
    staying = threading.Thread(
        target=lambda: kept.append(waiter.lock("still-waited-for").acquire(timeout=PATIENCE))
    )
    staying.start()
    results: list[bool] = []
    refused: list[bytes] = []

    def on_the_waiters_lease() -> int:
        waiting = backend._waiter_lease
        entries = list(backend._entries.values())
        return sum(1 for e in entries if waiting is not None and e.lease == waiting.id)

    real_end = backend._end
    orphaned_line = line_key(the_prefix(url), "orphaned")

    def unheard(key: bytes, guard: tuple[str, int], timeout: float | None = None) -> bool:
        if key.startswith(orphaned_line) and not refused:
            refused.append(key)
            # the request, or its reply, lost on the way
            raise etcd_wire.GatewayUnavailable("no member answered (the case's)")
        return real_end(key, guard, timeout)

    monkeypatch.setattr(backend, "_end", unheard)
    leaving = threading.Thread(
        target=lambda: results.append(waiter.lock("orphaned").acquire(timeout=2))
    )
    leaving.start()
    eventually(lambda: on_the_waiters_lease() == 2, "both waiters' entries are in line")
    leaving.join(PATIENCE)
    assert results == [False]
    assert refused
    assert refused[0] in backend._orphans
    lease = backend._lease
    assert lease is not None
    # an operator's revoke (or it ran out already: a client that only waits keeps its lease
    # alive only now and then), and what the call that finds it gone does
    raw.revoke(lease.id)
    backend._lease_lost(lease)
    with waiter.lock("anything else"):
        pass  # the client's next call
    assert len(line_of(raw, url, "orphaned")) == 1  # the holder's entry alone
    other.release()
    staying.join(PATIENCE)
    assert kept == [True]


def test_a_fair_waiter_keeps_its_place_while_its_answers_come_late(
    etcd_server: EtcdServer,
) -> None:
    """etcd answers a keep-alive only once it has applied what it committed: on a slow disk
    its answers come late. A fair waiter whose every answer comes 0.35 s late (a delay on its
    path, a third of the test server's waiters' lease and more) keeps that lease, so its
    place: the waiter behind it, on a quick path, does not pass it."""
    with FaultProxy((etcd_server.host, etcd_server.port)) as proxy:
        base = url_of(etcd_server)
        slow_url = base.replace(f":{etcd_server.port}/", f":{proxy.port}/")
        holder, slow, quick = (
            tumbler.connect(base),
            tumbler.connect(slow_url),
            tumbler.connect(base),
        )
        order: list[str] = []

        def take(locks: tumbler.Locks, who: str) -> None:
            with locks.lock("line", fair=True, timeout=PATIENCE):
                order.append(who)

        def waiting(count: int) -> Callable[[], bool]:
            return lambda: holder.status("line").waiters == count

        try:
            first = holder.lock("line", fair=True)
            assert first.acquire()
            proxy.delay(350, direction="downstream")
            slow_waits = threading.Thread(target=take, args=(slow, "slow"))
            slow_waits.start()
            eventually(waiting(1), "the slow waiter is in line")
            quick_waits = threading.Thread(target=take, args=(quick, "quick"))
            quick_waits.start()
            eventually(waiting(2), "the quick waiter is in line behind it")
            # the time is the case: several of the slow waiter's keep-alives, each answered late
            time.sleep(3 * slow._backend._waiter_ttl)
            first.release()
            slow_waits.join(PATIENCE)
            quick_waits.join(PATIENCE)
            assert order == ["slow", "quick"]
        finally:
            proxy.heal()
            for client in (holder, slow, quick):
                client.close()


def test_a_waiter_keeps_its_place_while_the_move_to_the_waiters_lease_is_answered_late(
    etcd_server: EtcdServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The waiters' lease is kept alive from its grant on, also while the first waiter's move
    onto it waits for its answer: a move answered later than the lease's TTL (a slow disk, a
    stalled client) finds the lease, and the waiter its place, still there."""
    url = url_of(etcd_server)
    holder, slow, quick = tumbler.connect(url), tumbler.connect(url), tumbler.connect(url)
    backend = slow._backend
    real_move = backend._move

    def answered_late(entry: Any, value: bytes, lease: int) -> bool:
        moved = real_move(entry, value, lease)
        # etcd has moved the key; its answer comes after the lease's TTL and etcd's sweep
        time.sleep(backend._waiter_ttl + 1.0)
        return moved

    order: list[str] = []

    def take(locks: tumbler.Locks, who: str) -> None:
        with locks.lock("line", fair=True, timeout=PATIENCE):
            order.append(who)

    try:
        first = holder.lock("line", fair=True)
        assert first.acquire()
        monkeypatch.setattr(backend, "_move", answered_late)
        slow_waits = threading.Thread(target=take, args=(slow, "slow"))
        slow_waits.start()
        eventually(lambda: holder.status("line").waiters == 1, "the slow waiter is in line")
        quick_waits = threading.Thread(target=take, args=(quick, "quick"))
        quick_waits.start()
        eventually(lambda: holder.status("line").waiters == 2, "the quick waiter is behind it")
        eventually(
            lambda: any(e.lease == backend._waiter_lease.id for e in backend._entries.values()),
            "the move's answer came",
        )
        first.release()
        slow_waits.join(PATIENCE)
        quick_waits.join(PATIENCE)
        assert order == ["slow", "quick"]
    finally:
        for client in (holder, slow, quick):
            client.close()


def test_a_stalled_client_whose_answers_come_late_keeps_its_waiters_lease(
    etcd_server: EtcdServer,
) -> None:
    """A client that stalled past its own count of the waiters' lease (which etcd kept alive:
    it renews a lease when the keep-alive comes) takes a keep-alive answered late as the
    lease's renewal, whatever the count said: it does not give its waiters' places up."""
    with FaultProxy((etcd_server.host, etcd_server.port)) as proxy:
        base = url_of(etcd_server)
        holder = tumbler.connect(base)
        slow = tumbler.connect(base.replace(f":{etcd_server.port}/", f":{proxy.port}/"))
        backend = slow._backend
        outcome: list[bool] = []
        try:
            first = holder.lock("line")
            assert first.acquire()
            proxy.delay(350, direction="downstream")
            waits = threading.Thread(
                target=lambda: outcome.append(slow.lock("line").acquire(timeout=PATIENCE))
            )
            waits.start()
            eventually(
                lambda: backend._keeper is not None and backend._waiter_lease is not None,
                "the waiter's lease is kept alive",
            )
            lease = backend._waiter_lease
            assert lease is not None
            # what a stall leaves: the client's count ran out while etcd kept the lease
            lease.expires = time.monotonic() - 0.1
            eventually(lambda: lease.expires > time.monotonic(), "a late answer renews the count")
            assert backend._waiter_lease is lease
            first.release()
            waits.join(PATIENCE)
            assert outcome == [True]
        finally:
            proxy.heal()
            holder.close()
            slow.close()


@pytest.mark.timeout(60)  # the backstop: a call that hangs fails here
def test_every_call_gives_up_when_the_network_drops_replies(etcd_server: EtcdServer) -> None:
    with FaultProxy((etcd_server.host, etcd_server.port)) as proxy:
        base = url_of(etcd_server, "request_timeout=1")
        locks = tumbler.connect(base.replace(f":{etcd_server.port}/", f":{proxy.port}/"))
        try:
            every_call_gives_up_when_replies_are_dropped(locks._backend, proxy)
        finally:
            locks.close()


def test_close_crash_and_cancelled_acquire_leave_no_key_and_no_lease(
    etcd_server: EtcdServer, raw
) -> None:
    url = url_of(etcd_server)
    before = leases_of(raw)
    everything = the_prefix(url)

    def keys() -> list[dict[str, Any]]:
        return raw.range(everything, prefix_end(everything))[1]

    # a clean close, with a hold and a waiter still there
    holder, waiter = tumbler.connect(url), tumbler.connect(url)
    holder.lock("left").acquire()
    ended: list[BaseException] = []

    def wait() -> None:
        try:
            waiter.lock("left").acquire(timeout=PATIENCE)
        except ClientClosed as error:
            ended.append(error)

    pending = threading.Thread(target=wait)
    pending.start()
    eventually(lambda: holder.status("left").waiters == 1, "a waiter in line")
    waiter.close()
    pending.join(timeout=PATIENCE)
    assert ended  # the close ended its wait
    holder.close()
    assert keys() == []
    assert leases_of(raw) == before

    # a cancelled acquire (asyncio)
    async def cancelled() -> None:
        async with (
            await tumbler.aio.connect(url) as one,
            await tumbler.aio.connect(url) as two,
            one.lock("cancelled"),
        ):
            task = asyncio.ensure_future(two.lock("cancelled").acquire())

            async def waiting() -> bool:
                return (await one.status("cancelled")).waiters == 1

            await aeventually(waiting, "the acquire waits in line")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert (await one.status("cancelled")).waiters == 0

    asyncio.run(cancelled())
    assert keys() == []
    assert leases_of(raw) == before

    # a crash: the process dies holding; its lease runs out on the server
    script = (
        "import os, tumbler\n"
        f"tumbler.connect({url!r}).lock('crashed').acquire()\n"
        "print('held', flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    crashed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert crashed.stdout == "held\n"
    assert len(leases_of(raw) - before) == 1
    eventually(lambda: not keys() and leases_of(raw) == before, "the dead client's lease ran out")


def test_an_acquire_interrupted_amid_its_connections_bookkeeping_is_withdrawn(connect) -> None:
    """A blocking acquire interrupted (SIGINT, or a signal handler's exception) right after
    its entry's reply, where the interrupt leaves the pooled connection unusable: the
    withdrawal that follows still gets through, the interrupt reaches the caller, and the
    client goes on. (asyncio's cancellation comes only at an await, never inside the HTTP
    client's bookkeeping.)"""
    holder, waiter = connect(), connect()
    held(waiter.lock("warm")).release()  # the client's lease and connections are made
    hold = held(holder.lock("interrupted"))
    with pytest.raises(KeyboardInterrupt), interrupted_amid_h11s_next_cycle():
        waiter.lock("interrupted").acquire(timeout=PATIENCE)
    assert holder.status("interrupted").waiters == 0
    hold.release()
    held(waiter.lock("interrupted")).release()


# -- authentication --------------------------------------------------------------------------


def test_a_user_confined_to_its_prefix_and_a_wrong_password_are_refused(
    fresh_etcd_server: EtcdServer,
) -> None:
    server = fresh_etcd_server
    server.enable_auth()
    with tumbler.connect(url_of(server)) as locks, locks.lock("auth"):
        pass
    outside = url_of(server).replace("/tumbler/test-", "/elsewhere/test-")
    with pytest.raises(PermissionDenied):
        tumbler.connect(outside)
    userinfo = f"{TUMBLER_USER}:not-the-password@"
    wrong = f"etcd://{userinfo}{server.host}:{server.port}{prefix()}"
    with pytest.raises(PermissionDenied) as refused:
        tumbler.connect(wrong)
    assert "not-the-password" not in str(refused.value)
    # no credentials at all, against a cluster with authentication on
    anonymous = f"etcd://{server.host}:{server.port}{prefix()}"
    with pytest.raises(PermissionDenied, match="credentials"):
        tumbler.connect(anonymous)


# -- a 3-member cluster ----------------------------------------------------------------------


def test_killing_the_leader_keeps_the_lock_exclusive_and_waiters_go_on(
    etcd_cluster: EtcdCluster,
) -> None:
    cluster = etcd_cluster
    url = url_of(cluster).replace(f"lease_ttl={LEASE_TTL}", "lease_ttl=10")
    holder, waiter, checker = (tumbler.connect(url) for _ in range(3))
    try:
        lock = holder.lock("election", ttl=10)
        assert lock.acquire()
        hold = lock.hold
        result: list[tumbler.Hold] = []

        def wait() -> None:
            mine = waiter.lock("election")
            if mine.acquire(timeout=60):
                result.append(mine.hold)

        thread = threading.Thread(target=wait)
        thread.start()
        eventually(lambda: checker.status("election").waiters == 1, "the waiter is in line")
        leader = cluster.leader()
        cluster.members[leader].kill()
        assert cluster.leader() != leader
        # exclusive throughout: the hold is renewed through the new leader; the waiter waits
        renewed = time.monotonic()
        eventually(lambda: hold.expires_in > 10 - (time.monotonic() - renewed) - 4, "renewed")
        assert hold.held
        assert not result
        assert not checker.lock("election").acquire(blocking=False)
        token = hold.token
        lock.release()
        thread.join(timeout=60)
        assert result
        assert result[0].token > token
        result[0].release()
        # the killed member comes back and the cluster serves on
        cluster.members[leader].start()
        assert checker.lock("election").acquire(timeout=PATIENCE)
    finally:
        for client in (holder, waiter, checker):
            client.close()


def test_a_member_cut_off_from_its_client_loses_the_holds_on_time_and_leaks_nothing(
    etcd_server: EtcdServer, raw
) -> None:
    with FaultProxy((etcd_server.host, etcd_server.port)) as proxy:
        base = url_of(etcd_server, "request_timeout=0.5")
        before = leases_of(raw)
        locks = tumbler.connect(base.replace(f":{etcd_server.port}/", f":{proxy.port}/"))
        try:
            hold = held(locks.lock("cut-off", ttl=LEASE_TTL))
            proxy.cut()
            assert hold.wait_lost(timeout=PATIENCE)
            # given up at the client's own deadline, before etcd may end the lease (it was
            # last kept alive before the cut), not when a later call found it ended
            assert hold.lost_reason == "the lease ran out before a renewal succeeded"
            other = tumbler.connect(base)
            try:
                # etcd ends the lease: the key goes and another client takes the lock
                assert other.lock("cut-off").acquire(timeout=PATIENCE)
            finally:
                other.close()
            eventually(lambda: leases_of(raw) == before, "the cut-off client's lease ran out")
        finally:
            proxy.heal()
            locks.close()
        assert leases_of(raw) == before


def test_grant_request_is_idempotent_after_a_lost_reply(connect) -> None:
    """A retry of a grant whose reply was lost finds the key the first attempt made."""
    backend = connect()._backend
    request = GrantRequest("idempotent", "owner-1", False, 1, False, 30.0, "test")
    first = backend.try_grant(request)
    again = backend.try_grant(request)
    assert first is not None
    assert again is not None
    assert again.token == first.token
    assert owner_hash("owner-1") in repr(backend._entries[("idempotent", "owner-1")].key)
    assert backend.release("idempotent", "owner-1") is True


def test_a_watch_reader_that_comes_to_its_idle_wait_after_the_close_returns(connect) -> None:
    """The client's close sets the flag an idle reader waits on; a reader that clears that
    flag afterwards, on its way to the wait, must not wait for ever (found by tumbler
    torture: a worker's close hung until it was killed)."""
    watches = connect()._backend.watches
    watches.close()  # nothing to interrupt yet: no reader runs
    done = threading.Event()

    def listen() -> None:
        watches._listen()
        done.set()

    threading.Thread(target=listen, daemon=True).start()
    assert done.wait(PATIENCE)


def test_a_waiter_whose_read_is_older_than_its_watch_is_woken_to_read_again(connect) -> None:
    """A watch sees the changes after the revision etcd made it at: a waiter that read its
    line before that might have missed a change in between, and must not wait on it."""
    backend = connect()._backend
    watches = KeyWatches(backend)
    watches.close()  # no stream runs: the case hands the watch's news in itself
    woken: list[str] = []
    for tag in ("before", "after", "late"):
        backend.hub.subscribe("ahead", lambda tag=tag: woken.append(tag), tag)
    key = b"/the-key-ahead"
    watches.add("ahead", "before", key, None, 9)
    watches.add("ahead", "after", key, None, 12)
    watches._watch_created((key, None, True), 10)
    assert woken == ["before"]  # read at 9: revision 10 may have changed the key unseen
    watches.add("ahead", "late", key, None, 9)  # comes with a read older than the watch
    assert woken == ["before", "late"]
    watches._deliver([key])  # the key changes: the waiter that read at 12 goes
    assert woken == ["before", "late", "after"]
    assert watches._interests == {}


def test_force_release_evicts_more_readers_than_one_transaction_takes(connect, url, raw) -> None:
    """etcd takes at most 128 operations per transaction, two per evicted holder: the
    readers go in batches, and the writer waiting behind them, let through by the first
    batches, is not evicted."""
    readers = connect()
    count = 70
    reads = [readers.rwlock("many-readers").read() for _ in range(count)]
    for read in reads:
        assert read.acquire(timeout=PATIENCE)
    writer = connect()
    waiting = threading.Thread(
        target=lambda: writer.rwlock("many-readers").write().acquire(timeout=PATIENCE)
    )
    waiting.start()
    eventually(lambda: readers.status("many-readers").waiters == 1, "the writer waits")
    assert readers.force_release("many-readers") == count
    waiting.join(timeout=PATIENCE)
    (holder,) = readers.status("many-readers").holders
    assert not holder.shared  # the writer holds it now, and was not evicted
    assert len(line_of(raw, url, "many-readers")) == 1


def test_a_waiter_that_registers_after_the_stream_told_of_its_change_reads_again(
    connect,
) -> None:
    """The stream can tell of a change between a waiter's read and its registration (the
    read's reply and the event race): the waiter must not then wait for a change already
    told (found by the bench: asyncio hand-offs that waited for the 2 s re-check)."""
    backend = connect()._backend
    watches = KeyWatches(backend)
    watches.close()  # no stream runs: the case hands the watch's news in itself
    woken: list[str] = []
    for tag in ("raced", "after"):
        backend.hub.subscribe("ahead", lambda tag=tag: woken.append(tag), tag)
    key = b"/the-key-ahead"
    watches._streamed = [(key, None, True)]
    watches._watch_created((key, None, True), 10)
    watches._told([WatchEvent(key, deleted=True, revision=12, create_revision=5, value=b"")])
    watches.add("ahead", "raced", key, None, 11)  # read at 11, before the deletion at 12
    assert woken == ["raced"]
    watches.add("ahead", "after", key, None, 12)  # read after it: waits for the next change
    assert woken == ["raced"]
    assert list(watches._interests) == [(key, None, True)]


def _streamed_on(locks: Any, member: int) -> bool | None:
    """Whether the client's watch stream is open on ``member`` (None: no stream)."""
    stream = locks._backend.watches._stream
    return None if stream is None or stream.member is None else stream.member == member


def _pin(backend: Any, member: int) -> None:
    """Make ``backend``'s next calls start on ``member`` (clients start on a random one)."""
    backend.gateway._current = member


def test_a_silent_member_costs_neither_a_hold_nor_a_waiter(etcd_cluster: EtcdCluster) -> None:
    """A member that takes requests and never answers (SIGSTOP: a hung process, a blackhole)
    while the other two serve: a renewal and a waiter's grant sent to it go on to another
    member within their budget, in both flavours. The lease (3 s) is shorter than the
    request timeout (5 s): a renewal that waited for its whole budget on the silent member
    would lose the hold."""
    cluster = etcd_cluster
    leader = cluster.leader()
    silent = next(index for index in range(len(cluster.members)) if index != leader)
    serving = next(index for index in range(len(cluster.members)) if index not in (silent,))
    url = url_of(cluster)
    pid = cluster.members[silent].pid
    assert pid is not None

    def blocking() -> None:
        holder, waiter, checker = (tumbler.connect(url) for _ in range(3))
        try:
            for client in (holder, waiter):
                _pin(client._backend, silent)
            _pin(checker._backend, serving)
            hold = held(holder.lock("silent", ttl=LEASE_TTL))
            outcome: list[object] = []

            def wait() -> None:
                mine = waiter.lock("silent")
                try:
                    outcome.append(mine.acquire(timeout=60) and mine.hold)
                except BackendUnavailable as error:
                    outcome.append(error)

            thread = threading.Thread(target=wait)
            thread.start()
            eventually(lambda: checker.status("silent").waiters == 1, "the waiter is in line")
            watches = waiter._backend.watches
            eventually(lambda: _every_watch_made(watches, 1), "the waiter watches")
            os.kill(pid, signal.SIGSTOP)
            try:
                before = hold._deadline
                # renewed through a serving member before its deadline (and the waiter's
                # re-checks, every lease/3, meanwhile reach one too)
                eventually(lambda: hold.lost or hold._deadline > before + 0.5, "renewed")
                assert not hold.lost, hold.lost_reason
                # the waiter's watch stream leaves the member its re-checks found silent
                eventually(lambda: _streamed_on(waiter, silent) is False, "the stream moved")
                hold.release()
                thread.join(timeout=PATIENCE)
                (granted,) = outcome
                assert isinstance(granted, tumbler.Hold), granted
                granted.release()
            finally:
                os.kill(pid, signal.SIGCONT)
        finally:
            for client in (holder, waiter, checker):
                client.close()

    async def asynchronous() -> None:
        holder, waiter, checker = [await tumbler.aio.connect(url) for _ in range(3)]
        try:
            for client in (holder, waiter):
                _pin(client._backend, silent)
            _pin(checker._backend, serving)
            lock = holder.lock("silent-aio", ttl=LEASE_TTL)
            assert await lock.acquire(timeout=PATIENCE)
            hold = lock.hold
            assert hold is not None

            async def wait() -> tumbler.aio.AsyncHold | None:
                waiting = waiter.lock("silent-aio")
                return waiting.hold if await waiting.acquire(timeout=60) else None

            task = asyncio.ensure_future(wait())

            async def in_line() -> bool:
                return (await checker.status("silent-aio")).waiters == 1

            await aeventually(in_line, "the waiter is in line")

            async def watching() -> bool:
                return _every_watch_made(waiter._backend.watches, 1)

            await aeventually(watching, "the waiter watches")
            os.kill(pid, signal.SIGSTOP)
            try:
                before = hold._deadline

                async def renewed() -> bool:
                    return hold.lost or hold._deadline > before + 0.5

                await aeventually(renewed, "renewed")
                assert not hold.lost, hold.lost_reason

                async def moved() -> bool:
                    return _streamed_on(waiter, silent) is False

                await aeventually(moved, "the stream moved")
                await hold.release()
                granted = await asyncio.wait_for(task, PATIENCE)
                assert granted is not None
                await granted.release()
            finally:
                os.kill(pid, signal.SIGCONT)
        finally:
            for client in (holder, waiter, checker):
                await client.close()

    blocking()
    asyncio.run(asynchronous())


def test_a_lease_is_timed_by_the_answers_of_its_own_raft_term() -> None:
    """Only the leader of the lease's term counted the keep-alives that timed it: an answer
    of a later term extends nothing and dooms the lease (a deposed leader may still end it
    when its own count runs out), one of a term older than the client has seen counts for
    nothing (a deposed leader, or a member, not yet told of the election)."""
    lease = _Lease(1, expires=10.0, term=4)
    lease.confirm(9.0, LeaseAnswer(1, 2, 4), latest=4)
    assert (lease.expires, lease.doomed) == (11.0, False)
    lease.confirm(10.0, LeaseAnswer(1, 2, 3), latest=4)  # a deposed leader's answer
    assert (lease.expires, lease.doomed) == (11.0, False)
    lease.confirm(10.5, LeaseAnswer(1, 2, 4), latest=5)  # another member saw term 5
    assert (lease.expires, lease.doomed) == (11.0, True)
    later = _Lease(2, expires=10.0, term=4)
    later.confirm(9.5, LeaseAnswer(2, 2, 5), latest=5)
    assert (later.expires, later.doomed) == (10.0, True)


def _stand_in_revoke(cluster: EtcdCluster, deposed: int, lease: int) -> None:
    """Revoke ``lease`` through the members but ``deposed``, as the revocation a deposed
    leader proposes is applied: etcd before 3.4.31 / 3.5.13 forwards it to the new leader when
    the deposed one has stepped down before its lessor's next sweep, and drops it otherwise,
    whichever of its goroutines runs first after SIGCONT. Done here, it is done every time."""
    members = [m.client_url for i, m in enumerate(cluster.members) if i != deposed]
    gateway = Gateway(members)
    try:
        gateway.revoke(lease)
    finally:
        gateway.close()


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_deposed_leader_that_comes_back_takes_no_hold_away_unannounced(
    etcd_cluster: EtcdCluster, flavour: str
) -> None:
    """The leader hangs (SIGSTOP) longer than the lease, while the holder renews through the
    new leader; then it comes back. Only a leader counts a lease (keep-alives are not
    replicated): the deposed one still counts the holder's lease from the last keep-alive it
    answered, before it hung, finds it run out and revokes it, deleting the holder's key
    however long the new leader kept the lease alive. The holder must not be holding a key
    on that lease by then: its first renewal answered in the new term moves its keys to a
    lease of the new leader, so the revocation takes nothing and the hold goes on."""
    cluster = etcd_cluster
    url = url_of(cluster)
    deposed = cluster.leader()
    pid = cluster.members[deposed].pid
    assert pid is not None
    name = f"deposed-{flavour}"

    def outlast_the_deposed_leader(stopped: float, renewed: Callable[[], bool]) -> None:
        # the fault's length: the deposed leader's count of the lease runs out meanwhile
        eventually(renewed, "renewed through the new leader")
        time.sleep(max(0.0, stopped + LEASE_TTL + 0.2 - time.monotonic()))

    def blocking() -> None:
        holder, other = tumbler.connect(url), tumbler.connect(url)
        try:
            hold = held(holder.lock(name, ttl=LEASE_TTL))
            lease = holder._backend._lease.id
            os.kill(pid, signal.SIGSTOP)
            stopped = time.monotonic()
            try:
                assert cluster.leader() != deposed
                outlast_the_deposed_leader(
                    stopped, lambda: hold.lost or hold._deadline > stopped + LEASE_TTL
                )
            finally:
                os.kill(pid, signal.SIGCONT)
            _stand_in_revoke(cluster, deposed, lease)
            assert not other.lock(name).acquire(blocking=False)
            assert hold.held, hold.lost_reason
            token = hold.token
            hold.release()
            with other.lock(name) as after:
                assert after.token > token
        finally:
            for client in (holder, other):
                client.close()

    async def asynchronous() -> None:
        holder, other = await tumbler.aio.connect(url), await tumbler.aio.connect(url)
        try:
            lock = holder.lock(name, ttl=LEASE_TTL)
            assert await lock.acquire(timeout=PATIENCE)
            hold = lock.hold
            assert hold is not None
            lease = holder._backend._lease.id
            os.kill(pid, signal.SIGSTOP)
            stopped = time.monotonic()
            try:
                assert await asyncio.to_thread(cluster.leader) != deposed

                async def renewed() -> bool:
                    return hold.lost or hold._deadline > stopped + LEASE_TTL

                await aeventually(renewed, "renewed through the new leader")
                await asyncio.sleep(max(0.0, stopped + LEASE_TTL + 0.2 - time.monotonic()))
            finally:
                os.kill(pid, signal.SIGCONT)
            await asyncio.to_thread(_stand_in_revoke, cluster, deposed, lease)
            assert not await other.lock(name).acquire(blocking=False)
            assert hold.held, hold.lost_reason
            token = hold.token
            await hold.release()
            async with other.lock(name) as after:
                assert after.token > token
        finally:
            for client in (holder, other):
                await client.close()

    if flavour == "sync":
        blocking()
    else:
        asyncio.run(asynchronous())


def test_a_lone_member_that_hangs_past_the_lease_ends_the_hold_after_its_holder_knows(
    etcd_server: EtcdServer,
) -> None:
    """One member is its own leader: hung (SIGSTOP) past the lease, it ends the lease when it
    comes back, as it should; the holder, which could not renew meanwhile, has been told by
    its deadline, before any other client can be granted the lock."""
    url = url_of(etcd_server, "request_timeout=0.5")
    pid = etcd_server.pid
    assert pid is not None
    holder, other = tumbler.connect(url), tumbler.connect(url)
    try:
        hold = held(holder.lock("lone-hang", ttl=LEASE_TTL))
        told: list[float] = []
        hold.on_lost(lambda _hold: told.append(time.monotonic()))
        os.kill(pid, signal.SIGSTOP)
        try:
            assert hold.wait_lost(timeout=PATIENCE)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert other.lock("lone-hang").acquire(timeout=PATIENCE)
        granted = time.monotonic()
        assert told
        assert told[0] < granted
    finally:
        for client in (holder, other):
            client.close()


#: the waiters of one client in the cases of many watches: the gateway makes all of a
#: stream's watches only some of the time at this size (and more rarely the more there are)
MANY = 100


def _register_many(watches: Any, prefix: bytes, rounds: int) -> Iterator[None]:
    """Register ``MANY`` waiters a round, each on a key of its own (which need not exist: a
    watch waits for its creation too), with a read no watch is newer than; yields after
    each round for the caller to wait until the client's stream watches every key."""
    for round_ in range(rounds):
        for index in range(MANY):
            key = prefix + f"many/{round_}/{index}".encode()
            watches.add("many", f"waiter-{round_}-{index}", key, None, 2**62)
        yield


def _every_watch_made(watches: Any, count: int) -> bool:
    with watches._lock:
        streamed = list(watches._streamed)
        created = dict(watches._created)
    return len(streamed) == count and all(slot in created for slot in streamed)


def test_every_watch_of_a_stream_is_made(connect, url) -> None:
    """The gateway makes only some of a stream's watches (measured raw: 49 of 100), and says
    so only of those it made: those it did not are asked for again until etcd made all."""
    watches = connect()._backend.watches
    for done, _ in enumerate(_register_many(watches, the_prefix(url), rounds=5), start=1):
        eventually(lambda n=done: _every_watch_made(watches, n * MANY), f"{done * MANY} made")


@pytest.mark.asyncio
async def test_every_watch_of_a_stream_is_made_asyncio(url) -> None:
    async with await tumbler.aio.connect(url) as locks:
        watches = locks._backend.watches
        for done, _ in enumerate(_register_many(watches, the_prefix(url), rounds=5), start=1):

            async def made(n: int = done) -> bool:
                return _every_watch_made(watches, n * MANY)

            await aeventually(made, f"{done * MANY} made")


def test_the_watches_etcd_did_not_make_are_asked_for_again(
    connect, url, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the padding, the gateway reads only the first part of a stream's body (how
    much depends on timing, measured raw: 49 of 100 watches) and makes only the watches it
    read. Here it reads the first half of every new stream's body, and the whole of a stream
    that asks again (one that does not make them all could not end the case): every watch
    made is then the stream's watchdog's doing, once per round."""
    re_asked = threading.local()
    real_listen, real_messages = KeyWatches._listen, etcd_http._messages

    def listen(self: KeyWatches) -> None:
        re_asked.value = bool(self._unmade)
        real_listen(self)

    def messages(bodies: list[Any]) -> bytes:
        if not getattr(re_asked, "value", False):
            bodies = bodies[: (len(bodies) + 1) // 2]
        return real_messages(bodies)

    monkeypatch.setattr(KeyWatches, "_listen", listen)
    monkeypatch.setattr(etcd_http, "_messages", messages)
    watches = connect()._backend.watches
    for done, _ in enumerate(_register_many(watches, the_prefix(url), rounds=5), start=1):
        eventually(lambda n=done: _every_watch_made(watches, n * MANY), f"{done * MANY} made")


WORKER = str(Path(conformance.__file__).with_name("worker.py"))


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_killed_waiter_leaves_the_line_with_the_waiters_lease(
    etcd_server: EtcdServer, raw: Gateway, tmp_path: Path, flavour: str
) -> None:
    """A waiter's entry lives with its client's short waiters' lease, not the client's lease
    (10 s here, kept alive by its re-checks: it would hold the line up for 6.7 to 10 s after
    the kill): the line moves on once etcd ends the waiters' lease (its TTL, etcd's floor, 1 s
    on these servers and 2 s with etcd's defaults, and etcd's sweep of ended leases, every
    0.5 s), well within half the client's lease."""
    url = url_of(etcd_server).replace(f"lease_ttl={LEASE_TTL}", "lease_ttl=10")
    marker = tmp_path / "never"
    before = leases_of(raw)
    with tumbler.connect(url) as locks, tumbler.connect(url) as behind:
        first = locks.lock("killed-waiter", fair=True)
        assert first.acquire()
        dead = subprocess.Popen(
            [sys.executable, WORKER, "hold", url, "killed-waiter", str(marker), "30", flavour]
        )
        try:
            eventually(lambda: locks.status("killed-waiter").waiters == 1, "the child waits")
            # its entry moves to the waiters' lease once it is in line
            eventually(
                lambda: _granted_ttl(locks, _line(locks, "killed-waiter")[-1]["lease"]) < 10,
                "the child's entry is on the waiters' lease",
            )
        finally:
            dead.kill()
            dead.wait()
        first.release()
        assert behind.lock("killed-waiter", fair=True).acquire(timeout=10 / 2)
    assert not marker.exists()
    # the dead client's own lease would outlive the case, and trip the next one's count
    for lease in leases_of(raw) - before:
        raw.revoke(lease)


def _line(locks: tumbler.Locks, name: str) -> list[dict[str, Any]]:
    backend = locks._backend
    key = line_key(backend.config.prefix, name)
    return backend.gateway.range(key, prefix_end(key), by_creation=True)[1]


def _granted_ttl(locks: tumbler.Locks, lease: int) -> int:
    reply = locks._backend.gateway.call("/v3/lease/timetolive", {"ID": lease})
    return int(reply.get("grantedTTL", 0))
