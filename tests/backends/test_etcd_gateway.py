"""The etcd backend's gateway client (``backends.etcd._async.gateway`` and its blocking
twin), on a real etcd: ranges by creation order, a transaction that creates a key with a
lease only if it is absent, leases kept alive and revoked (their keys with them), a watch
from a revision, a login whose token is renewed when etcd stops taking it, a member that
goes away, and none left; and the HTTP seam under it (``backends.etcd.http``): its pool,
its bounds, what its failures say, TLS, streams and their interrupts."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import ssl
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from tumbler.backends.etcd._async.gateway import AsyncGateway
from tumbler.backends.etcd._sync.gateway import Gateway
from tumbler.backends.etcd.http import (
    IDLE_CONNECTIONS,
    HTTPFailure,
    LineStream,
    StreamRefused,
    _Lines,
    aclose_client,
    aopen_client,
    apost,
    astream_lines,
    close_client,
    not_sent,
    open_client,
    post,
    stream_lines,
)
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
from tumbler.torture.proxy import FaultProxy


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


# -- the HTTP seam (backends.etcd.http) ------------------------------------------------------


def _in_flavour(flavour: str, call: Callable[[Any], Any], url: str, **options: Any) -> Any:
    """``call(client)`` (blocking) or ``await call(client)`` (asyncio, in a loop of its own)
    on a new client of ``url``, closed after."""
    tls = options.pop("tls", None)
    timeout = options.pop("timeout", 30.0)
    if flavour == "sync":
        client = open_client(url, tls, timeout)
        try:
            return call(client)
        finally:
            close_client(client)

    async def main() -> Any:
        client = aopen_client(url, tls, timeout)
        try:
            return await call(client)
        finally:
            await aclose_client(client)

    return asyncio.run(main())


def _range(flavour: str, client: Any, **options: Any) -> Any:
    """A read of one key on ``client``, in ``flavour`` (a coroutine in asyncio's)."""
    send = post if flavour == "sync" else apost
    return send(client, "/v3/kv/range", {"key": b64("/t/seam")}, {}, **options)


FLAVOURS = pytest.mark.parametrize("flavour", ["sync", "asyncio"])


@FLAVOURS
def test_a_request_h11_refuses_to_write_is_a_failure_to_send_and_costs_no_later_request(
    server: EtcdServer, flavour: str
) -> None:
    """h11 checks each part of a request before it writes a byte of it: a request it refuses
    (a token with a line break, say) is a transport failure of a request surely not sent,
    which the gateway sends again on the next member, and leaves nothing behind that a later
    request would meet."""
    bad = {"Authorization": "token\r\nX-Smuggled: 1"}

    def sync(client: Any) -> Any:
        with pytest.raises(HTTPFailure) as failed:
            post(client, "/v3/kv/range", {"key": b64("/t/seam")}, bad)
        return failed.value, post(client, "/v3/kv/range", {"key": b64("/t/seam")}, {})

    async def asyncio_(client: Any) -> Any:
        with pytest.raises(HTTPFailure) as failed:
            await apost(client, "/v3/kv/range", {"key": b64("/t/seam")}, bad)
        return failed.value, await apost(client, "/v3/kv/range", {"key": b64("/t/seam")}, {})

    failure, (status, _) = _in_flavour(
        flavour, sync if flavour == "sync" else asyncio_, server.client_url
    )
    assert not_sent(failure)
    assert "h11" in str(failure)
    assert status == 200


@FLAVOURS
def test_a_refused_connection_is_a_request_not_sent(flavour: str) -> None:
    with socket.socket() as bound:  # the port is taken, and nothing listens on it
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        with pytest.raises(HTTPFailure) as failed:
            _in_flavour(flavour, lambda client: _range(flavour, client), url)
    assert not_sent(failed.value)
    assert isinstance(failed.value.__cause__, ConnectionRefusedError)


@FLAVOURS
def test_a_reply_that_never_comes_is_a_lost_reply_within_the_requests_own_bound(
    server: EtcdServer, flavour: str
) -> None:
    """The member reads the request (the proxy passes it on) and its reply is held: the call's
    own timeout bounds the wait for it, not the client's, and the request may have been
    acted on."""
    with FaultProxy((server.host, server.port)) as proxy:
        url = f"http://127.0.0.1:{proxy.port}"

        def held(client: Any) -> Any:
            proxy.blackhole("downstream")
            return _range(flavour, client, timeout=0.5)

        began = time.monotonic()
        with pytest.raises(HTTPFailure) as failed:
            _in_flavour(flavour, held, url, timeout=PATIENCE)
        took = time.monotonic() - began
    assert not not_sent(failed.value)
    assert 0.5 <= took < PATIENCE / 3


@FLAVOURS
def test_an_idle_connection_the_member_closed_is_dropped_and_the_call_is_not_a_lost_reply(
    fresh_etcd_server: EtcdServer, flavour: str
) -> None:
    """A member that restarts closes its clients' idle connections. A call that wrote its
    request on one would find the reply lost, and a call that cannot be sent again after a
    lost reply (here: one not marked idempotent) would fail: the pool drops such a
    connection before a request takes it, and the request goes on a new one."""
    server = fresh_etcd_server
    lost: list[None] = []
    key = {"key": b64("/t/restarted")}
    if flavour == "sync":
        gateway = Gateway([server.client_url])
        try:
            gateway.call("/v3/kv/range", key)
            server.restart()
            gateway.call("/v3/kv/range", key, unanswered=lambda: lost.append(None))
        finally:
            gateway.close()
    else:

        async def main() -> None:
            gateway = AsyncGateway([server.client_url])
            try:
                await gateway.call("/v3/kv/range", key)
                await asyncio.to_thread(server.restart)
                await gateway.call("/v3/kv/range", key, unanswered=lambda: lost.append(None))
            finally:
                await gateway.close()

        asyncio.run(main())
    assert lost == []


def test_a_pool_keeps_its_connection_from_one_request_to_the_next_over_tls(
    etcd_tls_server: EtcdServer,
) -> None:
    server = etcd_tls_server
    context = ssl.create_default_context(cafile=str(server.ca_path))
    context.load_cert_chain(server.client_cert_path, server.client_key_path)
    login = {"name": TUMBLER_USER, "password": TUMBLER_PASSWORD}

    def sync(client: Any) -> list[Any]:
        replies = []
        for _ in range(3):
            replies.append(post(client, "/v3/auth/authenticate", login, {}))
            assert len(client._idle) == 1
        socket_ = client._idle[0].sock
        assert isinstance(socket_, ssl.SSLSocket)
        assert post(client, "/v3/auth/authenticate", login, {})[0] == 200
        assert client._idle[0].sock is socket_  # the same connection, taken again
        return replies

    async def asyncio_(client: Any) -> list[Any]:
        replies = []
        for _ in range(3):
            replies.append(await apost(client, "/v3/auth/authenticate", login, {}))
            assert len(client._idle) == 1
        writer = client._idle[0].writer
        assert writer.get_extra_info("ssl_object") is not None
        assert (await apost(client, "/v3/auth/authenticate", login, {}))[0] == 200
        assert client._idle[0].writer is writer
        return replies

    for flavour, call in (("sync", sync), ("asyncio", asyncio_)):
        replies = _in_flavour(flavour, call, server.client_url, tls=context)
        assert [status for status, _ in replies] == [200] * 3
        assert all(reply["token"] for _, reply in replies)


@FLAVOURS
def test_a_member_whose_certificate_the_client_cannot_check_is_not_sent_to(
    etcd_tls_server: EtcdServer, flavour: str
) -> None:
    """Without a context of its own, an ``https://`` client checks the member's certificate
    against the system's CAs, which did not sign the test CA's: the handshake fails."""
    with pytest.raises(HTTPFailure) as failed:
        _in_flavour(flavour, lambda client: _range(flavour, client), etcd_tls_server.client_url)
    assert not_sent(failed.value)
    assert isinstance(failed.value.__cause__, ssl.SSLCertVerificationError)


@FLAVOURS
def test_a_stream_interrupted_before_it_opens_fails_to_open(
    server: EtcdServer, flavour: str
) -> None:
    watched = [WatchRequest(b"/t/never", None, 1)]
    if flavour == "sync":
        gateway = Gateway([server.client_url])
        try:
            stream = gateway.watch_stream()
            stream.interrupt()
            with pytest.raises(HTTPFailure), stream.open(watched):
                pytest.fail("an interrupted stream opened")
        finally:
            gateway.close()
        return

    async def main() -> None:
        gateway = AsyncGateway([server.client_url])
        try:
            stream = gateway.watch_stream()
            stream.interrupt()
            with pytest.raises(HTTPFailure):
                async with stream.open(watched):
                    pytest.fail("an interrupted stream opened")
        finally:
            await gateway.close()

    asyncio.run(main())


@pytest.mark.asyncio
async def test_asyncio_a_stream_reading_its_lines_ends_when_another_thread_interrupts_it(
    server: EtcdServer,
) -> None:
    gateway = AsyncGateway([server.client_url])
    try:
        async with gateway.watch([WatchRequest(b"/t/quiet", None, 1)]) as stream:
            events = stream.events()
            assert (await asyncio.wait_for(events.__anext__(), PATIENCE)).created
            reading = asyncio.ensure_future(events.__anext__())
            await asyncio.sleep(0)  # the read has begun, and waits for the next line
            assert not reading.done()
            await asyncio.to_thread(stream.interrupt)
            with pytest.raises(HTTPFailure):
                await asyncio.wait_for(reading, PATIENCE)
    finally:
        await gateway.close()


def test_lines_are_cut_wherever_the_chunks_end() -> None:
    """A watch's reply is chunked: a line may span chunks, and a chunk may hold several."""
    lines = _Lines()
    assert lines.feed(b'{"a":') == []
    assert lines.feed(b' 1}\n{"b": 2}\r\n{"c"') == ['{"a": 1}', '{"b": 2}']
    assert lines.feed(b": 3}\n") == ['{"c": 3}']
    assert lines.feed("é".encode()[:1]) == []
    assert lines.feed("é".encode()[1:] + b"\n") == ["é"]
    assert lines.feed(b"tail") == []
    assert lines.end() == ["tail"]


@contextlib.contextmanager
def interrupted_amid_h11s_next_cycle(
    error: type[BaseException] = KeyboardInterrupt,
) -> Iterator[None]:
    """``error`` raised in this thread at the first start of h11's next cycle on a connection
    (after a reply is read whole), at the point where the connection's state is ready for a
    request and its writer not yet: where a signal's exception (``KeyboardInterrupt``) or a
    task's cancellation can land."""
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
            raise error

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
    cycle leaves a connection with no writer for a next request (a CI torture worker died of
    h11's failed assertion, in the withdrawal that followed, when a pool took it back)."""
    key = b"/interrupted"
    gateway.range(key, prefix_end(key))
    with pytest.raises(KeyboardInterrupt), interrupted_amid_h11s_next_cycle(KeyboardInterrupt):
        gateway.range(key, prefix_end(key))
    assert gateway.range(key, prefix_end(key))[1] == []


@FLAVOURS
def test_a_connection_left_amid_its_next_cycle_is_closed_not_taken_again(
    server: EtcdServer, flavour: str
) -> None:
    """The connection a ``KeyboardInterrupt`` (blocking) or a cancellation (asyncio) left
    halfway through h11's start of its next cycle is closed, never pooled."""
    error = KeyboardInterrupt if flavour == "sync" else asyncio.CancelledError

    def sync(client: Any) -> None:
        assert _range(flavour, client)[0] == 200
        (connection,) = client._idle
        with pytest.raises(error), interrupted_amid_h11s_next_cycle(error):
            _range(flavour, client)
        assert client._idle == []
        assert connection.sock.fileno() == -1
        assert _range(flavour, client)[0] == 200
        assert client._idle[0] is not connection

    async def asyncio_(client: Any) -> None:
        assert (await _range(flavour, client))[0] == 200
        (connection,) = client._idle
        with pytest.raises(error), interrupted_amid_h11s_next_cycle(error):
            await _range(flavour, client)
        assert client._idle == []
        assert connection.writer.transport.is_closing()
        assert (await _range(flavour, client))[0] == 200
        assert client._idle[0] is not connection

    _in_flavour(flavour, sync if flavour == "sync" else asyncio_, server.client_url)


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.asyncio
async def test_a_request_cancelled_before_its_reply_closes_its_connection(tls: bool) -> None:
    """A request cancelled in its TLS handshake, or while it awaits its reply, closes its
    connection: no socket is left open for the garbage collector (a ResourceWarning, a file
    descriptor held meanwhile)."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        silent.settimeout(PATIENCE)
        port = silent.getsockname()[1]
        scheme = "https" if tls else "http"
        client = aopen_client(f"{scheme}://127.0.0.1:{port}", ssl.create_default_context(), 30.0)
        try:
            request = asyncio.ensure_future(apost(client, "/v3/kv/range", {}, {}))
            accepted, _ = await asyncio.to_thread(silent.accept)
            with accepted:
                accepted.settimeout(PATIENCE)
                # the ClientHello, or the request, has come
                assert await asyncio.to_thread(accepted.recv, 1)
                request.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await request
                # the client closed its end: the server reads the end of the stream
                while await asyncio.to_thread(accepted.recv, 4096):
                    pass
        finally:
            await aclose_client(client)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


@FLAVOURS
def test_a_stream_the_member_refuses_says_its_path_status_and_text(
    server: EtcdServer, flavour: str
) -> None:
    stream = LineStream()
    path = "/v3/no-such-stream"
    if flavour == "sync":
        client = open_client(server.client_url, None, 30.0)
        try:
            with (
                pytest.raises(StreamRefused) as refused,
                stream_lines(client, path, [{}], {}, stream),
            ):
                pytest.fail("a refused stream opened")
        finally:
            close_client(client)
    else:

        async def main() -> None:
            client = aopen_client(server.client_url, None, 30.0)
            try:
                async with astream_lines(client, path, [{}], {}, stream):
                    pytest.fail("a refused stream opened")
            finally:
                await aclose_client(client)

        with pytest.raises(StreamRefused) as refused:
            asyncio.run(main())
    assert isinstance(refused.value, HTTPFailure)
    assert (refused.value.path, refused.value.status) == (path, 404)
    assert refused.value.text
    assert path in str(refused.value)


def test_the_idle_connections_a_client_keeps_are_bounded(server: EtcdServer) -> None:
    """More connections than the pool keeps, all back at once: the rest are closed."""
    client = open_client(server.client_url, None, 30.0)
    try:
        deadline = time.monotonic() + PATIENCE
        taken = [client.checkout(deadline) for _ in range(IDLE_CONNECTIONS + 3)]
        for connection in taken:
            client.checkin(connection)
        assert client._idle == taken[:IDLE_CONNECTIONS]
        assert all(connection.sock.fileno() == -1 for connection in taken[IDLE_CONNECTIONS:])
        assert post(client, "/v3/kv/range", {"key": b64("/t/seam")}, {})[0] == 200
    finally:
        close_client(client)
    assert all(connection.sock.fileno() == -1 for connection in taken)


def _reply(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


@FLAVOURS
def test_a_connection_whose_member_sent_more_than_its_reply_is_not_taken_again(
    flavour: str,
) -> None:
    """A member (or a proxy) that sends bytes past a reply, here a second reply nobody asked
    for, in the same read: h11 keeps them as the start of the next reply, which the next
    request on that connection would take for its own. The connection is closed, and the
    next request goes on a new one."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(PATIENCE)
        port = listener.getsockname()[1]
        answered: list[int] = []

        def serve() -> None:
            for number in (1, 2):
                accepted, _ = listener.accept()
                with accepted:
                    accepted.settimeout(PATIENCE)
                    received = b""
                    while not received.endswith(b"{}"):  # the request's body, "{}"
                        received += accepted.recv(4096)
                    extra = _reply(b'{"stale":true}') if number == 1 else b""
                    accepted.sendall(_reply(b'{"n":%d}' % number) + extra)
                    answered.append(number)
                    # the client closes the first connection, the second at its own close
                    while accepted.recv(4096):
                        pass

        serving = threading.Thread(target=serve, daemon=True)
        serving.start()

        def sync(client: Any) -> list[Any]:
            replies = [post(client, "/v3/kv/range", {}, {}) for _ in range(2)]
            assert len(client._idle) == 1  # the second request's connection
            return replies

        async def asyncio_(client: Any) -> list[Any]:
            return [await apost(client, "/v3/kv/range", {}, {}) for _ in range(2)]

        replies = _in_flavour(
            flavour, sync if flavour == "sync" else asyncio_, f"http://127.0.0.1:{port}"
        )
        serving.join(PATIENCE)
    assert replies == [(200, {"n": 1}), (200, {"n": 2})]
    assert answered == [1, 2]


@FLAVOURS
def test_a_stream_whose_client_closes_while_it_opens_is_closed_not_kept(
    server: EtcdServer, flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client's close shuts its open streams down; a stream still being opened then is
    not among them yet: it fails once open, its connection closed, rather than wait for lines
    on a client nobody will close again."""
    opened: list[Any] = []
    watch = [{"create_request": {"key": b64("/t/closing")}}]
    if flavour == "sync":
        client = open_client(server.client_url, None, 30.0)
        connect = client.connect

        def closing(deadline: float, stream: Any = None) -> Any:
            connection = connect(deadline, stream)
            opened.append(connection)
            client.close()
            return connection

        monkeypatch.setattr(client, "connect", closing)
        with (
            pytest.raises(HTTPFailure, match="closed"),
            stream_lines(client, "/v3/watch", watch, {}, LineStream()),
        ):
            pass
        (connection,) = opened
        assert connection.sock.fileno() == -1
        assert client._streams == set()
        return

    async def main() -> None:
        client = aopen_client(server.client_url, None, 30.0)
        connect = client.connect

        async def closing(*args: Any, **kwargs: Any) -> Any:
            connection = await connect(*args, **kwargs)
            opened.append(connection)
            await client.close()
            return connection

        monkeypatch.setattr(client, "connect", closing)
        with pytest.raises(HTTPFailure, match="closed"):
            async with astream_lines(client, "/v3/watch", watch, {}, LineStream()):
                pass
        (connection,) = opened
        assert connection.writer.transport.is_closing()
        assert client._streams == set()

    asyncio.run(main())
