"""ZooKeeper renewals: one round trip for every lease of a client, in both flavours.

``renew_all`` confirms the session with one probe sent after the call began (shared by
concurrent callers, never one sent before they began) and learns of deleted entries from
deletion watches, reading only entries that have none yet (a grant's first renewal sets it)
or whose watch kazoo dropped with a broken connection.
Round trips are counted by the server (the ``stat`` four-letter word: packets received per
connection) or, through a fault proxy, at kazoo's request queue.

Every case runs against a real ZooKeeper started by the fixtures in tests/servers.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import tumbler
import tumbler.aio
from tumbler.backends.contract import GrantRequest, Renewal
from tumbler.errors import BackendUnavailable
from tumbler.testing.backends.zookeeper.server import ZooKeeperServer
from tumbler.testing.conformance.compat import aeventually, eventually
from tumbler.torture.proxy import FaultProxy

#: long, so that kazoo's heartbeats (every third of it) seldom fall into a counted window
SESSION = 20.0
HOLDS = 100


def base_path() -> str:
    return f"/tumbler-renewal-{uuid.uuid4().hex[:12]}"


def request(name: str) -> GrantRequest:
    return GrantRequest(name, secrets.token_urlsafe(18), False, 1, False, SESSION, "test")


def packets_received(server: ZooKeeperServer, backend: Any) -> int:
    """How many packets the server has received on the backend's connection."""
    port = backend._client._connection._socket.getsockname()[1]
    for line in server.command("stat").splitlines():
        match = re.match(r"\s*/127\.0\.0\.1:(\d+)\[\d+\]\(.*\brecved=(\d+)", line)
        if match and int(match[1]) == port:
            return int(match[2])
    raise AssertionError(f"the server has no connection from port {port}")


class Requests:
    """Counts the requests a kazoo client queues, and records when probes are sent/answered."""

    def __init__(self, backend: Any) -> None:
        self.client = backend._client
        self.base = backend.config.base
        self.count = 0
        self.events: list[str] = []
        self.lock = threading.Lock()
        call, exists_async = self.client._call, self.client.exists_async

        def counted_call(*args: Any) -> Any:
            with self.lock:
                self.count += 1
            return call(*args)

        def spied_exists(path: str, watch: Any = None) -> Any:
            result = exists_async(path, watch=watch)
            if path == self.base and watch is None:  # a session probe
                with self.lock:
                    number = sum(event.startswith("sent") for event in self.events) + 1
                    self.events.append(f"sent {number}")
                # linked before the probe's own callback: recorded before its callers wake
                result.rawlink(lambda _: self.record(f"answered {number}"))
            return result

        self.client._call = counted_call
        self.client.exists_async = spied_exists
        #: renewals that have been given a probe to wait for
        self.callers = 0
        after_now = backend._probe.after_now

        def counted_after_now() -> Any:
            result = after_now()
            with self.lock:
                self.callers += 1  # counted once it has its probe
            return result

        backend._probe.after_now = counted_after_now

    def record(self, event: str) -> None:
        with self.lock:
            self.events.append(event)

    def probes(self) -> int:
        with self.lock:
            return sum(event.startswith("sent") for event in self.events)


@pytest.fixture
def url(zookeeper_server: ZooKeeperServer) -> str:
    return f"{zookeeper_server.url_for(base_path())}?session_timeout={SESSION:g}"


@pytest.fixture
def locks(url: str) -> Iterator[tumbler.Locks]:
    client = tumbler.connect(url)
    yield client
    client.close()


@pytest.fixture
def proxied(zookeeper_server: ZooKeeperServer) -> Iterator[tuple[FaultProxy, str]]:
    with FaultProxy((zookeeper_server.host, zookeeper_server.port)) as proxy:
        yield (
            proxy,
            (
                f"zookeeper://127.0.0.1:{proxy.port}{base_path()}"
                f"?session_timeout={SESSION:g}&request_timeout=30"
            ),
        )


def grant_all(backend: Any, count: int) -> list[Renewal]:
    renewals = []
    for number in range(count):
        wanted = request(f"lease-{number}")
        assert backend.try_grant(wanted) is not None
        renewals.append(Renewal(wanted.name, wanted.owner, SESSION))
    return renewals


async def agrant_all(backend: Any, count: int) -> list[Renewal]:
    renewals = []
    for number in range(count):
        wanted = request(f"lease-{number}")
        assert await backend.try_grant(wanted) is not None
        renewals.append(Renewal(wanted.name, wanted.owner, SESSION))
    return renewals


# -- one round trip ------------------------------------------------------------------------


def test_renewing_every_lease_is_one_round_trip(locks, zookeeper_server) -> None:
    backend = locks._backend
    renewals = grant_all(backend, HOLDS)
    before = packets_received(zookeeper_server, backend)
    # the first renewal of a grant reads its entry and watches it, in the probe's round trip
    assert backend.renew_all(renewals, 5.0) == [SESSION] * HOLDS
    assert packets_received(zookeeper_server, backend) - before <= 1 + HOLDS + 1
    before = packets_received(zookeeper_server, backend)
    assert backend.renew_all(renewals, 5.0) == [SESSION] * HOLDS
    # one probe (and perhaps one of kazoo's heartbeats), not a read per lease
    assert packets_received(zookeeper_server, backend) - before <= 2
    assert backend.renew(renewals[0].name, renewals[0].owner, 1.0) == 1.0


@pytest.mark.asyncio
async def test_asyncio_renewing_every_lease_is_one_round_trip(url, zookeeper_server) -> None:
    locks = await tumbler.aio.connect(url)
    try:
        backend = locks._backend
        renewals = await agrant_all(backend, HOLDS)
        before = packets_received(zookeeper_server, backend)
        assert await backend.renew_all(renewals, 5.0) == [SESSION] * HOLDS
        assert packets_received(zookeeper_server, backend) - before <= 1 + HOLDS + 1
        before = packets_received(zookeeper_server, backend)
        assert await backend.renew_all(renewals, 5.0) == [SESSION] * HOLDS
        assert packets_received(zookeeper_server, backend) - before <= 2
    finally:
        await locks.close()


def test_a_force_released_entry_is_refused_at_once(locks, url) -> None:
    """The deletion reaches the holder as a watch event ahead of the probe's answer: a renewal
    that begins after a force_release returned never confirms the released grant."""
    operator = tumbler.connect(url)
    try:
        backend = locks._backend
        kept = grant_all(backend, 1)[0]
        for number in range(20):
            wanted = request(f"released-{number}")
            assert backend.try_grant(wanted) is not None
            released = Renewal(wanted.name, wanted.owner, SESSION)
            assert backend.renew_all([released, kept], 5.0) == [SESSION, SESSION]
            assert operator.force_release(wanted.name) == 1
            assert backend.renew_all([released, kept], 5.0) == [None, SESSION]
    finally:
        operator.close()


# -- probes: shared, never one sent before the caller began ---------------------------------


def test_a_renewal_never_counts_a_probe_sent_before_it_began(proxied) -> None:
    proxy, url = proxied
    locks = tumbler.connect(url)
    try:
        backend = locks._backend
        renewals = grant_all(backend, 3)
        requests = Requests(backend)
        proxy.blackhole("downstream")  # answers are held until heal()
        results: dict[str, list[float | None]] = {}

        def renew(who: str) -> None:
            results[who] = backend.renew_all(renewals, 30.0)
            requests.record(f"{who} returned")

        first = threading.Thread(target=renew, args=("first",))
        first.start()
        eventually(lambda: requests.probes() == 1, "the first probe is sent")
        later = [threading.Thread(target=renew, args=(f"later-{n}",)) for n in range(2)]
        for thread in later:
            thread.start()
        # both wait for a probe of their own, which waits for the first probe's answer
        eventually(lambda: requests.callers == 3, "the later callers wait")
        assert requests.probes() == 1
        proxy.heal()
        for thread in (first, *later):
            thread.join(timeout=30)
        assert results == {who: [SESSION] * 3 for who in ("first", "later-0", "later-1")}
        events = requests.events
        assert events.index("answered 1") < events.index("first returned")
        for who in ("later-0", "later-1"):
            # not woken by the answer to the probe sent before they called
            assert events.index("answered 2") < events.index(f"{who} returned")
        assert requests.probes() == 2
    finally:
        locks.close()


@pytest.mark.asyncio
async def test_asyncio_a_renewal_never_counts_a_probe_sent_before_it_began(
    zookeeper_server,
) -> None:
    upstream = (zookeeper_server.host, zookeeper_server.port)
    async with FaultProxy(upstream) as proxy:
        url = f"zookeeper://127.0.0.1:{proxy.port}{base_path()}?session_timeout={SESSION:g}"
        locks = await tumbler.aio.connect(url)
        try:
            backend = locks._backend
            renewals = await agrant_all(backend, 3)
            requests = Requests(backend)
            proxy.blackhole("downstream")  # on this loop: at once

            async def renew(who: str) -> list[float | None]:
                results: list[float | None] = await backend.renew_all(renewals, 30.0)
                requests.record(f"{who} returned")
                return results

            first = asyncio.create_task(renew("first"))

            async def sent() -> bool:
                return requests.probes() == 1

            async def waiting() -> bool:
                return requests.callers == 3

            await aeventually(sent, "the first probe is sent")
            later = [asyncio.create_task(renew(f"later-{n}")) for n in range(2)]
            await aeventually(waiting, "the later callers wait")
            assert requests.probes() == 1
            proxy.heal()
            assert await asyncio.gather(first, *later) == [[SESSION] * 3] * 3
            events = requests.events
            for who in ("later-0", "later-1"):
                assert events.index("answered 2") < events.index(f"{who} returned")
            assert requests.probes() == 2
        finally:
            await locks.close()


# -- bounded by the timeout ----------------------------------------------------------------


def test_a_renewal_gives_up_when_its_timeout_passes(proxied) -> None:
    proxy, url = proxied  # request_timeout=30: only the call's own timeout can end it early
    locks = tumbler.connect(url)
    try:
        backend = locks._backend
        renewals = grant_all(backend, 3)
        proxy.blackhole("downstream")
        began = time.monotonic()
        with pytest.raises(BackendUnavailable):
            backend.renew_all(renewals, 0.5)
        # its timeout, not the request timeout nor kazoo's noticing the silence (13 s)
        assert time.monotonic() - began < 5
        proxy.heal()
        assert backend.renew_all(renewals, 30.0) == [SESSION] * 3
    finally:
        locks.close()


@pytest.mark.asyncio
async def test_asyncio_a_renewal_gives_up_when_its_timeout_passes(zookeeper_server) -> None:
    upstream = (zookeeper_server.host, zookeeper_server.port)
    async with FaultProxy(upstream) as proxy:
        url = (
            f"zookeeper://127.0.0.1:{proxy.port}{base_path()}"
            f"?session_timeout={SESSION:g}&request_timeout=30"
        )
        locks = await tumbler.aio.connect(url)
        try:
            backend = locks._backend
            renewals = await agrant_all(backend, 3)
            proxy.blackhole("downstream")  # on this loop: at once
            began = time.monotonic()
            with pytest.raises(BackendUnavailable):
                await backend.renew_all(renewals, 0.5)
            assert time.monotonic() - began < 5
            proxy.heal()
            assert await backend.renew_all(renewals, 30.0) == [SESSION] * 3
        finally:
            await locks.close()


# -- a broken connection drops the watches ---------------------------------------------------


def test_after_a_reconnection_entries_are_read_once_and_watched_again(proxied, raw) -> None:
    proxy, url = proxied
    locks = tumbler.connect(url)
    try:
        backend = locks._backend
        renewals = grant_all(backend, 5)
        assert backend.renew_all(renewals, 5.0) == [SESSION] * 5
        proxy.refuse_new()
        proxy.reset_connections()
        eventually(lambda: not backend._client.connected, "the connection is down")
        # deleted while the client could not hear of it: its watch went with the connection
        gone = backend._entries[(renewals[0].name, renewals[0].owner)]
        raw.delete(f"{backend._lock_path(renewals[0].name)}/{gone.node}")
        proxy.allow_new()
        eventually(lambda: backend._client.connected, "the session is back")
        requests = Requests(backend)
        assert backend.renew_all(renewals, 10.0) == [None] + [SESSION] * 4
        assert requests.count == 1 + 5  # the probe, and a read of each unwatched entry
        requests.count = 0
        assert backend.renew_all(renewals[1:], 10.0) == [SESSION] * 4
        assert requests.count == 1  # watched again: the probe alone
    finally:
        locks.close()


def test_a_semaphore_entry_touched_after_its_watch_was_set_is_still_watched(
    locks, url, raw
) -> None:
    """A semaphore entry granted after waiting is touched (its data set) for the waiter behind
    it, and another program may touch an entry too; a touch fires the deletion watch with
    CHANGED, and the watch must be set again, so that a later deletion is still refused at the
    next renewal."""
    other = tumbler.connect(url)
    try:
        backend = locks._backend
        first = GrantRequest("sem", secrets.token_urlsafe(18), True, 1, False, SESSION, "a")
        assert other._backend.try_grant(first) is not None
        waiting = GrantRequest("sem", secrets.token_urlsafe(18), True, 1, False, SESSION, "b")
        assert backend.try_grant(waiting) is None  # in line
        assert other._backend.release(first.name, first.owner)
        assert backend.try_grant(waiting) is not None  # granted after waiting: touched
        renewal = Renewal(waiting.name, waiting.owner, SESSION)
        entry = backend._entries[(waiting.name, waiting.owner)]
        assert backend.renew_all([renewal], 5.0) == [SESSION]  # the first renewal watches it
        assert entry.watched
        raw.set(entry.path, b"touched")
        eventually(lambda: entry.epoch == 1 and entry.watched, "the watch is set again")
        assert backend.renew_all([renewal], 5.0) == [SESSION]
        assert other.force_release("sem") == 1
        assert backend.renew_all([renewal], 5.0) == [None]
    finally:
        other.close()
