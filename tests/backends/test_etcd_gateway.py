"""The etcd backend's gateway client (``backends.etcd._async.gateway`` and its blocking
twin), on a real etcd: ranges by creation order, a transaction that creates a key with a
lease only if it is absent, leases kept alive and revoked (their keys with them), a watch
from a revision, a login whose token is renewed when etcd stops taking it, a member that
goes away, and none left."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import h11
import httpx
import pytest

from tumbler.backends.etcd._async.gateway import AsyncGateway
from tumbler.backends.etcd._sync.gateway import Gateway
from tumbler.backends.etcd.http import HTTPFailure, aopen_client, apost, not_sent, post
from tumbler.backends.etcd.wire import (
    EtcdError,
    GatewayUnavailable,
    WatchRequest,
    b64,
    prefix_end,
)
from tumbler.testing.backends.etcd.server import (
    TUMBLER_PASSWORD,
    TUMBLER_USER,
    EtcdCluster,
    EtcdServer,
)
from tumbler.testing.conformance.compat import PATIENCE


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    with EtcdServer(tmp_path_factory.mktemp("etcd")) as started:
        yield started


@pytest.fixture
def gateway(server: EtcdServer) -> Iterator[Gateway]:
    opened = Gateway([server.client_url])
    yield opened
    opened.close()


def _create(key: bytes, lease: int) -> tuple[list, list, list]:  # type: ignore[type-arg]
    """A transaction that puts ``key`` with ``lease`` only if it does not exist."""
    return (
        [{"key": b64(key), "target": "CREATE", "create_revision": "0"}],
        [{"request_put": {"key": b64(key), "value": b64("v"), "lease": str(lease)}}],
        [{"request_range": {"key": b64(key)}}],
    )


def test_a_key_made_only_if_absent_and_a_range_by_creation_order(gateway: Gateway) -> None:
    lease, ttl = gateway.grant_lease(30)
    assert ttl == 30
    made, first, _ = gateway.txn(*_create(b"/t/lock/b", lease))
    assert made
    made, _, _ = gateway.txn(*_create(b"/t/lock/a", lease))
    assert made
    again, _, responses = gateway.txn(*_create(b"/t/lock/b", lease))
    assert not again  # it exists: the failure branch read it instead
    assert "response_range" in responses[0]
    _, keys = gateway.range(b"/t/lock/", prefix_end(b"/t/lock/"), by_creation=True)
    assert [kv["key"] for kv in keys] == [b"/t/lock/b", b"/t/lock/a"]
    assert keys[0]["create_revision"] == first
    assert keys[0]["lease"] == lease


def test_a_lease_kept_alive_then_revoked_takes_its_keys_with_it(gateway: Gateway) -> None:
    lease, _ = gateway.grant_lease(30)
    gateway.txn(*_create(b"/t/leased", lease))
    assert lease in gateway.leases()
    assert gateway.keep_alive(lease) == 30
    assert gateway.revoke(lease)
    assert gateway.range(b"/t/leased")[1] == []
    assert gateway.keep_alive(lease) == 0  # gone
    assert not gateway.revoke(lease)
    assert lease not in gateway.leases()


def test_a_watch_sees_the_changes_from_its_revision(gateway: Gateway) -> None:
    lease, _ = gateway.grant_lease(30)
    _, revision, _ = gateway.txn(*_create(b"/t/watched/1", lease))
    gateway.revoke(lease)  # the key is deleted with its lease
    watched = WatchRequest(b"/t/watched/", prefix_end(b"/t/watched/"), revision)
    with gateway.watch([watched]) as stream:
        events = []
        for news in stream.events():
            events += news.events
            if len(events) >= 2:
                break
    assert [(event.key, event.deleted) for event in events] == [
        (b"/t/watched/1", False),
        (b"/t/watched/1", True),
    ]
    assert events[0].create_revision == revision


def test_one_stream_watches_several_keys_and_is_interrupted_from_another_thread(
    gateway: Gateway,
) -> None:
    lease, _ = gateway.grant_lease(30)
    _, first, _ = gateway.txn(*_create(b"/t/several/1", lease))
    gateway.txn(*_create(b"/t/several/2", lease))
    requests = [WatchRequest(b"/t/several/1", None, first + 1), WatchRequest(b"/t/several/2")]
    with gateway.watch(requests) as stream:
        events = stream.events()
        gateway.revoke(lease)  # both keys go, in one revision
        seen: set[bytes] = set()
        while len(seen) < 2:  # each watch reports in a message of its own
            seen |= {event.key for event in next(events).events}
        assert stream.created == 2  # each watch's creation came first
        # a read with nothing to come ends at once when interrupted from elsewhere
        interrupter = threading.Timer(0.05, stream.interrupt)
        interrupter.start()
        with pytest.raises(HTTPFailure):
            next(events)
        interrupter.join()
    assert seen == {b"/t/several/1", b"/t/several/2"}


@pytest.mark.asyncio
async def test_asyncio_a_watch_wakes_on_a_deletion_made_after_it_began(
    server: EtcdServer,
) -> None:
    gateway = AsyncGateway([server.client_url])
    try:
        lease, _ = await gateway.grant_lease(30)
        _, revision, _ = await gateway.txn(*_create(b"/t/ahead", lease))
        async with gateway.watch([WatchRequest(b"/t/ahead", None, revision + 1)]) as stream:
            events = stream.events()
            revoked = asyncio.ensure_future(gateway.revoke(lease))
            created = await asyncio.wait_for(events.__anext__(), 30)
            assert created.created
            assert created.revision >= revision
            batch = (await asyncio.wait_for(events.__anext__(), 30)).events
            await revoked
            # an interrupt ends a read under way in the loop too
            reading = asyncio.ensure_future(events.__anext__())
            await asyncio.sleep(0)
            stream.interrupt()
            with pytest.raises(HTTPFailure):
                await asyncio.wait_for(reading, 30)
        assert [(event.key, event.deleted) for event in batch] == [(b"/t/ahead", True)]
    finally:
        await gateway.close()


def test_a_login_is_renewed_when_etcd_stops_taking_its_token(tmp_path: Path) -> None:
    with EtcdServer(tmp_path / "etcd") as server:
        server.enable_auth()
        gateway = Gateway([server.client_url], credentials=(TUMBLER_USER, TUMBLER_PASSWORD))
        try:
            assert gateway.range(b"/tumbler/x")[1] == []
            gateway._token = "no-longer-valid"
            assert gateway.range(b"/tumbler/x")[1] == []
            with pytest.raises(EtcdError, match="permission denied"):
                gateway.range(b"/elsewhere")
        finally:
            gateway.close()
        wrong = Gateway([server.client_url], credentials=(TUMBLER_USER, "not-the-password"))
        try:
            with pytest.raises(EtcdError) as refused:
                wrong.range(b"/tumbler/x")
            assert "not-the-password" not in str(refused.value)
        finally:
            wrong.close()


def test_calls_go_to_another_member_when_one_goes_away(tmp_path: Path) -> None:
    with EtcdCluster(tmp_path / "cluster") as cluster:
        gateway = Gateway([member.client_url for member in cluster.members])
        try:
            _, before = gateway.range(b"/t/x")
            assert before == []
            cluster.members[gateway._current].kill()
            cluster.leader()  # the others have one (it may have been the leader)
            lease, _ = gateway.grant_lease(30)  # not sent to the dead member: tried elsewhere
            assert lease in gateway.leases()
        finally:
            gateway.close()


def test_no_member_left_is_gateway_unavailable(tmp_path: Path) -> None:
    with EtcdServer(tmp_path / "etcd") as server:
        url = server.client_url
    gateway = Gateway([url], timeout=1.0)
    try:
        with pytest.raises(GatewayUnavailable, match="no member answered"):
            gateway.range(b"/t/x")
    finally:
        gateway.close()


def test_a_gateway_is_usable_from_threads(gateway: Gateway) -> None:
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda: results.append(gateway.range(b"/t/none")[0]))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8


@pytest.mark.asyncio
async def test_a_closed_gateway_makes_no_client_that_nobody_would_close(
    server: EtcdServer,
) -> None:
    gateway = AsyncGateway([server.client_url])
    assert (await gateway.range(b"/t/closed"))[1] == []
    await gateway.close()
    # a call or a watch that comes after the close (a task the close did not wait for) would
    # otherwise open a connection that is never closed
    with pytest.raises(GatewayUnavailable, match="closed"):
        await gateway.range(b"/t/closed")
    with pytest.raises(GatewayUnavailable, match="closed"):
        async with gateway.watch([WatchRequest(b"/t/closed", None, 1)]):
            pytest.fail("a watch opened on a closed gateway")
    assert gateway._clients == {}


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_request_h11_refuses_to_write_is_a_failure_to_send_again(flavour: str) -> None:
    """httpcore lets h11's refusal through when a pooled connection is handed out in a state
    where no request can start (it was: a CI torture worker died of it). The seam gives it
    as httpx maps it elsewhere, a transport failure, and one of a request surely not sent,
    which the gateway sends again on the next member."""

    def refuse(request: httpx.Request) -> httpx.Response:
        raise h11.LocalProtocolError(
            "can't handle event type Request when role=CLIENT and state=DONE"
        )

    transport = httpx.MockTransport(refuse)
    with pytest.raises(HTTPFailure) as failed:
        if flavour == "sync":
            with httpx.Client(transport=transport, base_url="http://127.0.0.1:1") as client:
                post(client, "/v3/kv/range", {"key": "eA=="}, {})
        else:

            async def main() -> None:
                async with httpx.AsyncClient(
                    transport=transport, base_url="http://127.0.0.1:1"
                ) as client:
                    await apost(client, "/v3/kv/range", {"key": "eA=="}, {})

            asyncio.run(main())
    assert isinstance(failed.value, httpx.LocalProtocolError)
    assert not_sent(failed.value)
    assert "state=DONE" in str(failed.value)


@contextlib.contextmanager
def interrupted_amid_h11s_next_cycle() -> Iterator[None]:
    """``KeyboardInterrupt`` in this thread at the first start of h11's next cycle on a
    connection (after a reply is read whole), at the point where the connection's state is
    ready for a request and its writer not yet: where a signal's exception leaves a pooled
    connection that httpcore hands out again."""
    before = sys.gettrace()

    def tracer(frame: FrameType, event: str, arg: Any) -> None:
        caller = frame.f_back
        if (
            event == "call"
            and frame.f_code.co_name == "_respond_to_state_changes"
            and caller is not None
            and caller.f_code.co_name == "start_next_cycle"
        ):
            sys.settrace(before)
            raise KeyboardInterrupt

    sys.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(before)


def test_an_interrupt_amid_a_connections_next_cycle_costs_no_later_request(
    gateway: Gateway,
) -> None:
    """An interrupt can land anywhere in a blocking call (the torture harness's SIGTERM,
    a user's SIGINT): one that lands halfway through h11's start of a connection's next
    cycle leaves httpcore a pooled connection with no writer for the next request (a CI
    torture worker died of h11's failed assertion, in the withdrawal that followed)."""
    key = b"/interrupted"
    gateway.range(key, prefix_end(key))
    with pytest.raises(KeyboardInterrupt), interrupted_amid_h11s_next_cycle():
        gateway.range(key, prefix_end(key))
    assert gateway.range(key, prefix_end(key))[1] == []


@pytest.mark.asyncio
async def test_a_request_cancelled_in_its_tls_handshake_closes_its_connection() -> None:
    """httpcore closes a connection whose TLS handshake fails, not one whose task is
    cancelled during it: the seam closes it then, so that no socket is left open for the
    garbage collector (a ResourceWarning, a file descriptor held meanwhile)."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        silent.settimeout(PATIENCE)
        port = silent.getsockname()[1]
        context = ssl.create_default_context()
        client = aopen_client(f"https://127.0.0.1:{port}", context, 30.0)
        try:
            request = asyncio.ensure_future(client.get("/health"))
            accepted, _ = await asyncio.to_thread(silent.accept)
            with accepted:
                accepted.settimeout(PATIENCE)
                assert await asyncio.to_thread(accepted.recv, 1)  # the ClientHello has come
                request.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await request
                # the client closed its end: the server reads the end of the stream
                while await asyncio.to_thread(accepted.recv, 4096):
                    pass
        finally:
            await client.aclose()
