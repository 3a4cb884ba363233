"""etcd: a write the client gave up on that reaches etcd late takes no effect (a grant
request after its acquisition ended, a waiter's move to its waiters' lease after its grant).

A request held by a silent path (a member cut off from its clients, a blackholed switch) may
reach etcd after the client moved on: its attempt went unanswered, the client asked another
member, and the acquisition the write was for may be over by the time it lands. Found by
``tumbler torture --faults member-blackhole`` (issue 29): a grant request that came in after
its owner had released recreated the owner's key on the client's lease, which its renewals kept
alive, and nobody was granted the lock again.

The client reaches the one etcd member of these cases by two paths: a proxy (the first
endpoint, which it tries first) and directly. The proxy holds what the client sends while
it is cut; the client gives up on it after a third of its request time and goes on directly.
etcd often drops a request whose connection closed before it read it (the client closes
its connection when it gives up), so each case delivers, after the heal, what the proxy
held, itself: the same body, on the same member, as etcd does when it reads the request
before it notices the close.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import tumbler
import tumbler.aio
from tumbler.backends.contract import GrantRequest
from tumbler.backends.etcd._sync.gateway import Gateway
from tumbler.backends.etcd.common import ended_key, entry_key, line_key
from tumbler.backends.etcd.http import HTTPFailure, not_sent
from tumbler.backends.etcd.wire import prefix_end
from tumbler.backends.kit.owners import owner_hash
from tumbler.testing.backends.etcd.server import EtcdServer
from tumbler.testing.conformance.compat import aeventually, eventually
from tumbler.torture.proxy import FaultProxy

from .test_etcd import LEASE_TTL, PATIENCE, line_of, prefix, the_prefix

pytestmark = pytest.mark.timeout(120)

#: the client's request time: an attempt on the silent path is given up after a third of it
REQUEST_TIMEOUT = 1.0

Unanswered = list[tuple[str, Any]]


@pytest.fixture
def raw(etcd_server: EtcdServer) -> Iterator[Gateway]:
    """A plain gateway client of the member, straight to it."""
    gateway = Gateway([etcd_server.client_url])
    yield gateway
    gateway.close()


def _two_paths(server: EtcdServer, proxy: FaultProxy) -> str:
    """A URL whose first endpoint is ``proxy`` and whose second is ``server`` itself."""
    return (
        f"etcd://127.0.0.1:{proxy.port},{server.host}:{server.port}{prefix()}"
        f"?lease_ttl={LEASE_TTL}&request_timeout={REQUEST_TIMEOUT:g}"
    )


def _direct(url: str) -> str:
    """``url`` without the proxy: the other clients of a case never take the silent path."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{rest.split(',', 1)[1]}"


@contextlib.contextmanager
def _silent_path(server: EtcdServer) -> Iterator[tuple[FaultProxy, str]]:
    with FaultProxy((server.host, server.port)) as proxy:
        yield proxy, _two_paths(server, proxy)


def _record_unanswered(backend: Any, into: Unanswered) -> None:
    """Note every request of ``backend`` sent through the proxy (endpoint 0) that went
    unanswered: what etcd may yet receive."""
    gateway = backend.gateway
    proxy = gateway.endpoints[0]
    original = gateway._call_once

    if asyncio.iscoroutinefunction(original):

        @functools.wraps(original)
        async def acall(endpoint: str, path: str, body: Any, timeout: float | None) -> Any:
            try:
                return await original(endpoint, path, body, timeout)
            except HTTPFailure as failure:
                if endpoint == proxy and not not_sent(failure):
                    into.append((path, body))
                raise

        gateway._call_once = acall
    else:

        @functools.wraps(original)
        def call(endpoint: str, path: str, body: Any, timeout: float | None) -> Any:
            try:
                return original(endpoint, path, body, timeout)
            except HTTPFailure as failure:
                if endpoint == proxy and not not_sent(failure):
                    into.append((path, body))
                raise

        gateway._call_once = call


def _deliver_late(raw: Any, unanswered: Unanswered) -> None:
    """What the proxy held, as etcd takes it when it reads it before the close."""
    assert unanswered, "no request was held"
    for path, body in unanswered:
        raw.call(path, body)


def _pin_to_proxy(backend: Any) -> None:
    backend.gateway._current = 0


# -- blocking --------------------------------------------------------------------------------


def test_a_grant_request_that_lands_after_its_release_leaves_no_key(
    etcd_server: EtcdServer, raw
) -> None:
    with _silent_path(etcd_server) as (proxy, url):
        locks, other = tumbler.connect(url), tumbler.connect(_direct(url))
        try:
            unanswered: Unanswered = []
            backend = locks._backend
            with locks.lock("late-warm-up"):
                pass  # the client has its lease: the grant below is one transaction
            _record_unanswered(backend, unanswered)
            _pin_to_proxy(backend)
            proxy.cut()
            lock = locks.lock("late-grant")
            assert lock.acquire(timeout=PATIENCE)  # directly, once the proxy kept silent
            lock.release()
            proxy.heal()
            _deliver_late(raw, unanswered)
            assert line_of(raw, url, "late-grant") == []
            assert other.lock("late-grant").acquire(blocking=False)
        finally:
            proxy.heal()
            locks.close()
            other.close()


def test_a_readers_grant_request_that_lands_after_its_release_leaves_no_key(
    etcd_server: EtcdServer, raw
) -> None:
    """A shared entry's key is in the line's other part (``.../s/...``): its end mark is too,
    and a writer is granted once the late request has landed."""
    with _silent_path(etcd_server) as (proxy, url):
        locks, other = tumbler.connect(url), tumbler.connect(_direct(url))
        try:
            unanswered: Unanswered = []
            backend = locks._backend
            with locks.lock("late-warm-up"):
                pass
            _record_unanswered(backend, unanswered)
            _pin_to_proxy(backend)
            proxy.cut()
            reader = locks.rwlock("late-read").read()
            assert reader.acquire(timeout=PATIENCE)
            reader.release()
            # the end is marked in the shared part
            shared = ended_key(the_prefix(url), line_key(the_prefix(url), "late-read") + b"s/")
            assert raw.range(shared, prefix_end(shared))[1]
            proxy.heal()
            _deliver_late(raw, unanswered)
            assert line_of(raw, url, "late-read") == []
            assert other.rwlock("late-read").write().acquire(blocking=False)
        finally:
            proxy.heal()
            locks.close()
            other.close()


def test_a_grant_request_that_lands_after_its_waiter_gave_up_leaves_no_key(
    etcd_server: EtcdServer, raw
) -> None:
    with _silent_path(etcd_server) as (proxy, url):
        locks, holder = tumbler.connect(url), tumbler.connect(_direct(url))
        try:
            unanswered: Unanswered = []
            backend = locks._backend
            with locks.lock("late-warm-up"):
                pass
            held = holder.lock("late-wait")
            assert held.acquire(timeout=PATIENCE)
            _record_unanswered(backend, unanswered)
            _pin_to_proxy(backend)
            proxy.cut()
            assert not locks.lock("late-wait").acquire(timeout=2 * REQUEST_TIMEOUT)
            proxy.heal()
            _deliver_late(raw, unanswered)
            held.release()
            assert line_of(raw, url, "late-wait") == []
            assert holder.lock("late-wait").acquire(blocking=False)
        finally:
            proxy.heal()
            locks.close()
            holder.close()


def test_an_owner_that_asks_again_after_a_single_try_it_was_unsure_of_takes_its_place(
    etcd_server: EtcdServer, raw
) -> None:
    """The mark that ends an acquisition turns away what was sent before it, not what the
    same owner asks afterwards: a segmented lock tries each segment once (its key withdrawn)
    before it queues the same owner for each."""
    with _silent_path(etcd_server) as (proxy, url):
        locks, holder = tumbler.connect(url), tumbler.connect(_direct(url))
        try:
            unanswered: Unanswered = []
            backend = locks._backend
            with locks.lock("late-warm-up"):
                pass
            held = holder.lock("late-again")
            assert held.acquire(timeout=PATIENCE)
            _record_unanswered(backend, unanswered)
            _pin_to_proxy(backend)
            proxy.cut()
            request = GrantRequest("late-again", "owner-1", False, 1, False, 30.0, "test")
            assert backend.try_grant(request._replace(queue=False)) is None
            # the mark is the owner's, whatever the turn of its key
            mine = entry_key(the_prefix(url), "late-again", owner_hash("owner-1"), True, 1)
            assert raw.range(ended_key(the_prefix(url), mine))[1]  # the end is marked
            proxy.heal()
            _deliver_late(raw, unanswered)
            assert len(line_of(raw, url, "late-again")) == 1  # the holder's
            assert backend.try_grant(request) is None  # in line behind the holder
            assert len(line_of(raw, url, "late-again")) == 2
            held.release()
            grant = backend.try_grant(request)
            assert grant is not None
            assert backend.release("late-again", "owner-1") is True
            assert line_of(raw, url, "late-again") == []
        finally:
            proxy.heal()
            locks.close()
            holder.close()


def _hold_the_move_to_the_waiters_lease(backend: Any, proxy: FaultProxy) -> None:
    """Cut the proxy just before ``backend`` sends, through it, the move of a waiter's key
    to its waiters' lease: that move is held, and made again directly."""
    gateway = backend.gateway
    original = gateway._call_once

    def cut_before_the_move(endpoint: str, path: str, body: Any) -> None:
        waiting = backend._waiter_lease
        moving = (
            path == "/v3/kv/txn"
            and waiting is not None
            and any(
                op.get("request_put", {}).get("lease") == str(waiting.id) for op in body["success"]
            )
        )
        if moving and endpoint == gateway.endpoints[0]:
            proxy.cut()  # the proxy runs on a thread of its own: in effect once it returns

    if asyncio.iscoroutinefunction(original):

        async def acall(endpoint: str, path: str, body: Any, timeout: float | None) -> Any:
            cut_before_the_move(endpoint, path, body)
            return await original(endpoint, path, body, timeout)

        gateway._call_once = acall
    else:

        def call(endpoint: str, path: str, body: Any, timeout: float | None) -> Any:
            cut_before_the_move(endpoint, path, body)
            return original(endpoint, path, body, timeout)

        gateway._call_once = call


def test_a_late_move_to_the_waiters_lease_leaves_the_granted_key_on_its_lease(
    etcd_server: EtcdServer, raw
) -> None:
    """A waiter's key goes to the client's short waiters' lease while it waits, and back to
    the client's lease when granted; the first move, held and made again directly, must not
    take the granted key back to the waiters' lease when it lands: that lease ends once
    nobody of the client waits, and the key with it, under a holder that knows nothing."""
    with _silent_path(etcd_server) as (proxy, url):
        locks, holder = tumbler.connect(url), tumbler.connect(_direct(url))
        try:
            unanswered: Unanswered = []
            backend = locks._backend
            held = holder.lock("late-move")
            assert held.acquire(timeout=PATIENCE)
            _record_unanswered(backend, unanswered)
            _hold_the_move_to_the_waiters_lease(backend, proxy)
            _pin_to_proxy(backend)
            outcome: list[tumbler.Hold | None] = []

            def wait() -> None:
                waiting = locks.lock("late-move")
                outcome.append(waiting.hold if waiting.acquire(timeout=60) else None)

            thread = threading.Thread(target=wait)
            thread.start()
            eventually(lambda: bool(unanswered), "the move to the waiters' lease is held")

            def on_waiters_lease() -> bool:
                behind = line_of(raw, url, "late-move")[1:]
                return any(kv["lease"] != backend._lease.id for kv in behind)

            eventually(on_waiters_lease, "the waiter waits on its waiters' lease")
            held.release()
            thread.join(PATIENCE)
            (granted,) = outcome
            assert granted is not None
            proxy.heal()
            _deliver_late(raw, unanswered)
            (entry,) = line_of(raw, url, "late-move")
            assert entry["lease"] == backend._lease.id
            granted.release()
        finally:
            proxy.heal()
            locks.close()
            holder.close()


# -- asyncio ---------------------------------------------------------------------------------


def test_a_grant_request_that_lands_after_its_release_leaves_no_key_asyncio(
    etcd_server: EtcdServer, raw
) -> None:
    async def scenario(proxy: FaultProxy, url: str) -> None:
        locks = await tumbler.aio.connect(url)
        other = await tumbler.aio.connect(_direct(url))
        try:
            unanswered: Unanswered = []
            backend = locks._backend
            async with locks.lock("late-warm-up"):
                pass
            _record_unanswered(backend, unanswered)
            _pin_to_proxy(backend)
            proxy.cut()
            lock = locks.lock("late-grant-aio")
            assert await lock.acquire(timeout=PATIENCE)
            await lock.release()
            proxy.heal()
            _deliver_late(raw, unanswered)
            assert line_of(raw, url, "late-grant-aio") == []
            assert await other.lock("late-grant-aio").acquire(blocking=False)
        finally:
            proxy.heal()
            await locks.close()
            await other.close()

    with _silent_path(etcd_server) as (proxy, url):
        asyncio.run(scenario(proxy, url))


def test_a_readers_grant_request_that_lands_after_its_release_leaves_no_key_asyncio(
    etcd_server: EtcdServer, raw
) -> None:
    async def scenario(proxy: FaultProxy, url: str) -> None:
        locks = await tumbler.aio.connect(url)
        other = await tumbler.aio.connect(_direct(url))
        try:
            unanswered: Unanswered = []
            backend = locks._backend
            async with locks.lock("late-warm-up"):
                pass
            _record_unanswered(backend, unanswered)
            _pin_to_proxy(backend)
            proxy.cut()
            reader = locks.rwlock("late-read-aio").read()
            assert await reader.acquire(timeout=PATIENCE)
            await reader.release()
            proxy.heal()
            _deliver_late(raw, unanswered)
            assert line_of(raw, url, "late-read-aio") == []
            assert await other.rwlock("late-read-aio").write().acquire(blocking=False)
        finally:
            proxy.heal()
            await locks.close()
            await other.close()

    with _silent_path(etcd_server) as (proxy, url):
        asyncio.run(scenario(proxy, url))


def test_a_grant_request_that_lands_after_its_waiter_gave_up_leaves_no_key_asyncio(
    etcd_server: EtcdServer, raw
) -> None:
    async def scenario(proxy: FaultProxy, url: str) -> None:
        locks = await tumbler.aio.connect(url)
        holder = await tumbler.aio.connect(_direct(url))
        try:
            unanswered: Unanswered = []
            backend = locks._backend
            async with locks.lock("late-warm-up"):
                pass
            held = holder.lock("late-wait-aio")
            assert await held.acquire(timeout=PATIENCE)
            _record_unanswered(backend, unanswered)
            _pin_to_proxy(backend)
            proxy.cut()
            assert not await locks.lock("late-wait-aio").acquire(timeout=2 * REQUEST_TIMEOUT)
            proxy.heal()
            _deliver_late(raw, unanswered)
            await held.release()
            assert line_of(raw, url, "late-wait-aio") == []
            assert await holder.lock("late-wait-aio").acquire(blocking=False)
        finally:
            proxy.heal()
            await locks.close()
            await holder.close()

    with _silent_path(etcd_server) as (proxy, url):
        asyncio.run(scenario(proxy, url))


def test_a_late_move_to_the_waiters_lease_leaves_the_granted_key_on_its_lease_asyncio(
    etcd_server: EtcdServer, raw
) -> None:
    async def scenario(proxy: FaultProxy, url: str) -> None:
        locks = await tumbler.aio.connect(url)
        holder = await tumbler.aio.connect(_direct(url))
        try:
            unanswered: Unanswered = []
            backend = locks._backend
            held = holder.lock("late-move-aio")
            assert await held.acquire(timeout=PATIENCE)
            _record_unanswered(backend, unanswered)
            _hold_the_move_to_the_waiters_lease(backend, proxy)
            _pin_to_proxy(backend)

            async def wait() -> tumbler.aio.AsyncHold | None:
                waiting = locks.lock("late-move-aio")
                return waiting.hold if await waiting.acquire(timeout=60) else None

            task = asyncio.ensure_future(wait())

            async def on_waiters_lease() -> bool:
                behind = line_of(raw, url, "late-move-aio")[1:]
                return bool(unanswered) and any(kv["lease"] != backend._lease.id for kv in behind)

            await aeventually(on_waiters_lease, "the waiter waits on its waiters' lease")
            await held.release()
            granted = await asyncio.wait_for(task, PATIENCE)
            assert granted is not None
            proxy.heal()
            _deliver_late(raw, unanswered)
            (entry,) = line_of(raw, url, "late-move-aio")
            assert entry["lease"] == backend._lease.id
            await granted.release()
        finally:
            proxy.heal()
            await locks.close()
            await holder.close()

    with _silent_path(etcd_server) as (proxy, url):
        asyncio.run(scenario(proxy, url))
