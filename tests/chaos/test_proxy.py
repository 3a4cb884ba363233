"""The fault proxy (tumbler.torture.proxy) against real servers: redis-server and an echo server.

Each fault is shown by what a real client sees through the proxy: latency, a timeout, a reply
that never comes although the server did the work, a reset, a refused connect. Then a tumbler
client loses its hold in a partition and acquires again after it heals.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from types import TracebackType

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import tumbler
from tumbler.errors import InvalidArgument, LockLost
from tumbler.testing.backends.redis.server import RedisServer
from tumbler.testing.conformance.compat import PATIENCE, eventually
from tumbler.testing.servers import free_port
from tumbler.torture.proxy import (
    BLACKHOLE,
    PASS,
    RESET,
    Delay,
    Direction,
    FaultProxy,
    ProxyError,
)

# seconds a redis-py call through the proxy waits for its reply: a fault must outlast it, a
# loaded machine must not
REDIS_TIMEOUT = 1.0
# seconds a tumbler client waits for Redis: short, so that a cut hold is found lost soon
TUMBLER_TIMEOUT = 0.3
# seconds of silence that show nothing is coming through
QUIET = 0.3


class EchoServer:
    """A plain asyncio echo server on a free loopback port, in a thread of its own.

    It closes a connection when the client closes its side.
    """

    def __init__(self) -> None:
        self.port = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._echo, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()

    async def _echo(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass  # the proxy passed a reset on: that is what some tests do
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def __enter__(self) -> EchoServer:
        self._thread.start()
        assert self._ready.wait(PATIENCE)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._loop is not None
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(PATIENCE)


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoServer]:
    with EchoServer() as server:
        yield server


@pytest.fixture
def echo_proxy(echo: EchoServer) -> Iterator[FaultProxy]:
    with FaultProxy(echo.address, seed=7) as proxy:
        yield proxy


@pytest.fixture
def redis_proxy(redis_server: RedisServer) -> Iterator[FaultProxy]:
    with FaultProxy((redis_server.host, redis_server.port), seed=7) as proxy:
        yield proxy


@pytest.fixture
def admin(redis_server: RedisServer) -> redis.Redis:
    """A client straight to the server, around the proxy."""
    return redis_server.client()


def client_through(proxy: FaultProxy, **options: object) -> redis.Redis:
    """A redis-py client through the proxy that neither retries nor waits long."""
    settings: dict[str, object] = {
        "socket_timeout": REDIS_TIMEOUT,
        "socket_connect_timeout": PATIENCE,
        "retry": Retry(NoBackoff(), 0),
    }
    settings.update(options)
    return redis.Redis(host="127.0.0.1", port=proxy.port, **settings)  # type: ignore[arg-type]


def connect(proxy: FaultProxy) -> socket.socket:
    return socket.create_connection(proxy.address, timeout=PATIENCE)


def assert_new_connection_reset(proxy: FaultProxy) -> None:
    """A new connection is reset: accepted, then RST (which on loopback can beat the
    client's own ``connect`` back to it)."""
    with pytest.raises(ConnectionResetError), connect(proxy) as sock:
        sock.recv(1)


def receive(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise AssertionError(f"connection closed after {len(data)} of {size} bytes")
        data += chunk
    return data


def round_trip(client: redis.Redis) -> float:
    started = time.monotonic()
    assert client.ping()
    return time.monotonic() - started


def key() -> str:
    return f"chaos:{secrets.token_hex(6)}"


def tcp_sockets() -> set[tuple[int, int]]:
    """``(local port, remote port)`` of every TCP socket this process has open.

    /proc/net/tcp is read in pieces while other processes open and close sockets, so one read
    can repeat or miss a row: rows are keyed by inode, and three reads are merged.
    """
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own fd is gone by now
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    found: dict[str, tuple[int, int]] = {}
    for _ in range(3):
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as rows:
                next(rows)
                for row in rows:
                    fields = row.split()
                    if fields[9] in inodes:
                        local, remote = (int(a.rsplit(":", 1)[1], 16) for a in fields[1:3])
                        found[fields[9]] = (local, remote)
    return set(found.values())


def proxy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tumbler-fault-proxy")]


# -- pass, counters, half-close ------------------------------------------------------------


def test_pass_forwards_both_ways_and_counts_bytes(echo: EchoServer, echo_proxy: FaultProxy) -> None:
    assert echo_proxy.address == ("127.0.0.1", echo_proxy.port)
    assert echo_proxy.upstream_address == echo.address
    payload = secrets.token_bytes(200_000)
    with connect(echo_proxy) as sock:
        sock.sendall(payload)
        assert receive(sock, len(payload)) == payload
        stats = echo_proxy.stats()
        assert stats.accepted == 1
        assert stats.open == 1
        assert stats.upstream.forwarded == len(payload)
        assert stats.downstream.forwarded == len(payload)
        assert stats.upstream.pending == stats.downstream.pending == 0
        # a half-close reaches the server, which closes; its close comes back as EOF
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1) == b""
    eventually(lambda: echo_proxy.stats().open == 0, "the proxy closed the connection")


# -- delay -------------------------------------------------------------------------------


def test_delay_adds_latency_per_direction(redis_proxy: FaultProxy) -> None:
    with client_through(redis_proxy, socket_timeout=PATIENCE) as client:
        round_trip(client)  # connected
        redis_proxy.delay(150, direction="upstream")
        assert redis_proxy.upstream_fault == Delay(150)
        assert redis_proxy.downstream_fault == PASS
        assert round_trip(client) >= 0.150
        redis_proxy.delay(150, direction=Direction.DOWNSTREAM)
        both = round_trip(client)
        assert both >= 0.300
        redis_proxy.heal()
        assert round_trip(client) < both


def test_delay_with_jitter_keeps_the_byte_order(echo_proxy: FaultProxy) -> None:
    # chunks drawn 0..60 ms each way: independent timers would reorder them
    echo_proxy.delay(30, jitter_ms=30)
    messages = [b"%05d;" % n for n in range(150)]

    def read_by_proxy() -> int:
        upstream = echo_proxy.stats().upstream
        return upstream.forwarded + upstream.pending

    with connect(echo_proxy) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent = 0
        for message in messages:
            sock.sendall(message)
            sent += len(message)
            # every message its own chunk: wait until the proxy has read it
            eventually(lambda: read_by_proxy() >= sent, "the proxy read the message")  # noqa: B023
        assert receive(sock, sent) == b"".join(messages)


# -- blackhole ---------------------------------------------------------------------------


def test_blackhole_times_out_and_heal_delivers_the_held_request(
    redis_proxy: FaultProxy, admin: redis.Redis
) -> None:
    name = key()
    with client_through(redis_proxy) as client:
        round_trip(client)
        redis_proxy.cut()
        assert redis_proxy.upstream_fault == redis_proxy.downstream_fault == BLACKHOLE
        with pytest.raises(redis.TimeoutError):
            client.set(name, "sent during the cut")
        stats = redis_proxy.stats()
        assert stats.upstream.pending > 0  # held, not lost
        assert stats.upstream.dropped == 0
        assert admin.get(name) is None
        redis_proxy.heal()
        # the same client works again (redis-py reconnects after the timeout)
        assert client.ping()
    # and the held request reaches the server late, as TCP would retransmit it
    eventually(lambda: admin.get(name) == b"sent during the cut", "the held SET arrived")


def test_blackhole_holds_pubsub_messages_until_heal(
    redis_proxy: FaultProxy, admin: redis.Redis
) -> None:
    channel = key()
    with client_through(redis_proxy, socket_timeout=None) as client:
        pubsub = client.pubsub()
        with contextlib.closing(pubsub):
            pubsub.subscribe(channel)
            # The server's confirmation is read before the cut: held with the message, it
            # would come first after the heal, and be the one message read.
            confirmation = pubsub.get_message(timeout=PATIENCE)
            assert confirmation is not None
            assert confirmation["type"] == "subscribe"
            redis_proxy.blackhole("downstream")
            assert admin.publish(channel, "held") == 1
            eventually(lambda: redis_proxy.stats().downstream.pending > 0, "the message is held")
            assert pubsub.get_message(timeout=QUIET) is None
            redis_proxy.heal()
            message = pubsub.get_message(timeout=PATIENCE)
            assert message is not None
            assert (message["type"], message["data"]) == ("message", b"held")


def test_a_held_subscribe_confirmation_comes_before_the_held_message(
    redis_proxy: FaultProxy, admin: redis.Redis
) -> None:
    first, channel = key(), key()
    with client_through(redis_proxy, socket_timeout=None) as client:
        pubsub = client.pubsub()
        with contextlib.closing(pubsub):
            # a connection made before the cut: redis-py waits for replies while it connects
            pubsub.subscribe(first)
            assert pubsub.get_message(timeout=PATIENCE) is not None
            redis_proxy.blackhole("downstream")
            pubsub.subscribe(channel)
            eventually(lambda: admin.pubsub_numsub(channel)[0][1] == 1, "subscribed")
            assert admin.publish(channel, "held") == 1
            redis_proxy.heal()
            received = [pubsub.get_message(timeout=PATIENCE) for _ in range(2)]
            assert [(m["type"], m["data"]) for m in received if m is not None] == [
                ("subscribe", 2),
                ("message", b"held"),
            ]


# -- drop --------------------------------------------------------------------------------


def test_dropped_reply_after_the_server_did_the_work(
    redis_proxy: FaultProxy, admin: redis.Redis
) -> None:
    name = key()
    with client_through(redis_proxy) as client:
        round_trip(client)
        redis_proxy.drop()  # replies: the "lost reply"
        with pytest.raises(redis.TimeoutError):
            client.set(name, "done")
        assert admin.get(name) == b"done"  # done long before the client gave up
        assert redis_proxy.stats().downstream.dropped == len(b"+OK\r\n")
        redis_proxy.heal()
        assert client.get(name) == b"done"


def test_dropped_request_never_reaches_the_server(
    redis_proxy: FaultProxy, admin: redis.Redis
) -> None:
    name = key()
    with client_through(redis_proxy) as client:
        round_trip(client)
        redis_proxy.drop("upstream")
        with pytest.raises(redis.TimeoutError):
            client.set(name, "lost")
        stats = redis_proxy.stats()
        assert stats.upstream.dropped > len(name)
        assert stats.upstream.pending == 0
        redis_proxy.heal()
        assert client.ping()
    assert admin.get(name) is None


# -- corrupt -----------------------------------------------------------------------------


def test_corrupt_flips_one_byte_per_chunk(echo_proxy: FaultProxy) -> None:
    echo_proxy.corrupt()
    payload = b"x" * 4096
    with connect(echo_proxy) as sock:
        sock.sendall(payload)
        echoed = receive(sock, len(payload))
    stats = echo_proxy.stats()
    changed = sum(a != b for a, b in zip(payload, echoed, strict=True))
    assert changed >= 1
    assert changed == stats.downstream.corrupted
    assert stats.upstream.corrupted == 0


# -- reset and refusing ------------------------------------------------------------------


def test_reset_fault_resets_open_and_new_connections(echo_proxy: FaultProxy) -> None:
    with connect(echo_proxy) as sock:
        sock.sendall(b"ping")
        assert receive(sock, 4) == b"ping"
        echo_proxy.set_fault(RESET)
        with pytest.raises(ConnectionResetError):
            sock.recv(1)
    # while set, new connections are accepted and reset at once
    assert_new_connection_reset(echo_proxy)
    stats = echo_proxy.stats()
    assert (stats.reset, stats.refused, stats.accepted) == (1, 1, 1)
    echo_proxy.heal()
    with connect(echo_proxy) as sock:
        sock.sendall(b"back")
        assert receive(sock, 4) == b"back"


def test_reset_gives_a_redis_client_a_connection_error(redis_proxy: FaultProxy) -> None:
    with client_through(redis_proxy) as client:
        round_trip(client)
        redis_proxy.set_fault(RESET, "downstream")
        with pytest.raises(redis.ConnectionError):
            client.ping()
        redis_proxy.heal()
        assert client.ping()


def test_reset_connections_is_one_shot(echo_proxy: FaultProxy) -> None:
    with connect(echo_proxy) as first, connect(echo_proxy) as second:
        for sock in (first, second):
            sock.sendall(b"hi")
            assert receive(sock, 2) == b"hi"
        assert echo_proxy.reset_connections() == 2
        for sock in (first, second):
            with pytest.raises(ConnectionResetError):
                sock.recv(1)
    with connect(echo_proxy) as sock:
        sock.sendall(b"new")
        assert receive(sock, 3) == b"new"


def test_refuse_new_connections(echo_proxy: FaultProxy) -> None:
    with connect(echo_proxy) as old:
        old.sendall(b"a")
        assert receive(old, 1) == b"a"

        echo_proxy.refuse_new("close")
        assert echo_proxy.refusing == "close"
        with pytest.raises(ConnectionRefusedError):
            connect(echo_proxy)
        old.sendall(b"b")  # open connections carry on
        assert receive(old, 1) == b"b"

        echo_proxy.refuse_new("rst")
        assert_new_connection_reset(echo_proxy)
        assert echo_proxy.stats().refused == 1

        echo_proxy.allow_new()  # the same port again
        with connect(echo_proxy) as sock:
            sock.sendall(b"c")
            assert receive(sock, 1) == b"c"


def test_unreachable_upstream_resets_the_client() -> None:
    with FaultProxy(("127.0.0.1", free_port())) as proxy:
        assert_new_connection_reset(proxy)
        assert proxy.stats().upstream_failed == 1


# -- many connections, threads, shutdown ---------------------------------------------------


def test_many_connections_and_a_clean_stop(echo: EchoServer) -> None:
    proxy = FaultProxy(echo.address).start()
    assert len(proxy_threads()) == 1

    def sockets_of_the_proxy() -> set[tuple[int, int]]:
        # its listener and accepted sockets on its port, its upstream ones to the echo port
        return {s for s in tcp_sockets() if s[0] == proxy.port or s[1] == echo.port}

    clients = [connect(proxy) for _ in range(200)]
    try:
        for n, sock in enumerate(clients):
            sock.sendall(b"%04d" % n)
        for n, sock in enumerate(clients):
            assert receive(sock, 4) == b"%04d" % n
        stats = proxy.stats()
        assert stats.accepted == stats.open == 200
        assert len(sockets_of_the_proxy()) == 1 + 2 * 200
        # leave bytes held in the proxy: stopping discards them
        proxy.cut()
        for sock in clients[:10]:
            sock.sendall(b"held")
        eventually(lambda: proxy.stats().upstream.pending == 40, "the proxy holds 40 bytes")
        proxy.stop()
        assert not proxy_threads()
        assert sockets_of_the_proxy() == set()
        stats = proxy.stats()
        assert (stats.open, stats.upstream.pending, stats.upstream.discarded) == (0, 0, 40)
        for sock in clients:
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(1) == b""
    finally:
        for sock in clients:
            sock.close()
    gc.collect()  # an unclosed socket would warn now (an error under filterwarnings)
    with pytest.raises(ConnectionRefusedError):
        connect(proxy)


def test_setters_from_many_threads_while_traffic_flows(
    redis_proxy: FaultProxy, admin: redis.Redis
) -> None:
    counter = key()
    done = threading.Event()
    errors: list[BaseException] = []

    def toggle() -> None:
        try:
            while not done.is_set():
                redis_proxy.delay(2, jitter_ms=2)
                redis_proxy.stats()
                redis_proxy.set_fault(PASS, "upstream")
                redis_proxy.heal()
        except BaseException as error:
            errors.append(error)

    def count() -> None:
        try:
            for _ in range(50):
                client.incr(counter)
        except BaseException as error:
            errors.append(error)

    with client_through(redis_proxy, socket_timeout=PATIENCE, max_connections=16) as client:
        togglers = [threading.Thread(target=toggle) for _ in range(2)]
        counters = [threading.Thread(target=count) for _ in range(8)]
        for thread in togglers + counters:
            thread.start()
        for thread in counters:
            thread.join(PATIENCE)
        done.set()
        for thread in togglers:
            thread.join(PATIENCE)
    assert not errors
    assert admin.get(counter) == b"400"
    assert redis_proxy.stats().accepted >= 2  # a pool of connections, used at once


# -- input and lifecycle -----------------------------------------------------------------


def test_bad_arguments_are_refused() -> None:
    proxy = FaultProxy(("127.0.0.1", 6379))
    with pytest.raises(InvalidArgument):
        Delay(-1)
    with pytest.raises(InvalidArgument):
        Delay(10, jitter_ms=float("nan"))
    with pytest.raises(InvalidArgument):
        proxy.blackhole("sideways")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        proxy.refuse_new("later")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        FaultProxy(("127.0.0.1", 0))
    with pytest.raises(InvalidArgument):
        FaultProxy("127.0.0.1:6379")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        proxy.set_fault("blackhole")  # type: ignore[arg-type]
    assert proxy.upstream_fault == PASS  # nothing changed
    with pytest.raises(ProxyError):
        _ = proxy.port
    proxy.start()
    proxy.stop()
    proxy.stop()  # idempotent
    with pytest.raises(ProxyError):
        proxy.start()


@pytest.mark.asyncio
async def test_runs_on_the_callers_asyncio_loop() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.closing(writer):
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()

    threads = threading.active_count()
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    async with server, FaultProxy(("127.0.0.1", server.sockets[0].getsockname()[1])) as proxy:
        assert threading.active_count() == threads  # no thread of its own
        reader, writer = await asyncio.open_connection(*proxy.address)
        with contextlib.closing(writer):
            proxy.delay(100, direction="downstream")
            started = time.monotonic()
            writer.write(b"hello")
            assert await reader.readexactly(5) == b"hello"
            assert time.monotonic() - started >= 0.100
            proxy.set_fault(RESET)
            with pytest.raises(ConnectionResetError):
                await reader.read(1)


# -- a tumbler client through the proxy --------------------------------------------------

TTL = 2.0


def tumbler_url(proxy: FaultProxy) -> str:
    return (
        f"redis://127.0.0.1:{proxy.port}/0?prefix=chaos{secrets.token_hex(4)}"
        f"&socket_timeout={TUMBLER_TIMEOUT}&connect_timeout={TUMBLER_TIMEOUT}"
    )


def test_tumbler_hold_is_lost_in_a_partition_and_reacquired_after_heal(
    redis_proxy: FaultProxy,
) -> None:
    with tumbler.connect(tumbler_url(redis_proxy)) as locks:
        lock = locks.lock("partitioned", ttl=TTL)
        assert lock.acquire(timeout=PATIENCE)
        hold = lock.hold
        assert hold is not None
        assert hold.held
        redis_proxy.cut()
        cut_at = time.monotonic()
        # Within its TTL, plus the socket timeout of a renewal still waiting for its reply
        # when the lease runs out; the next test shows wait_lost returns at the deadline.
        assert hold.wait_lost(timeout=TTL + TUMBLER_TIMEOUT)
        assert time.monotonic() - cut_at <= TTL + TUMBLER_TIMEOUT
        assert hold.lost
        assert not hold.held
        assert redis_proxy.stats().upstream.pending > 0  # the renewals are held in the proxy

        redis_proxy.heal()
        again = locks.lock("partitioned", ttl=TTL)
        # renewals held during the cut arrive late: if one beats the server's expiry it
        # extends the old lease once more
        assert again.acquire(timeout=3 * TTL)
        assert again.hold is not None
        assert again.hold.token > hold.token
        again.release()


def test_tumbler_loss_is_reported_by_the_local_deadline(redis_proxy: FaultProxy) -> None:
    with tumbler.connect(tumbler_url(redis_proxy)) as locks:
        lock = locks.lock("partitioned", ttl=TTL)
        assert lock.acquire(timeout=PATIENCE)
        hold = lock.hold
        assert hold is not None
        redis_proxy.cut()
        deadline = time.monotonic() + hold.expires_in
        # 50 ms for scheduling: the lag seen is up to TUMBLER_TIMEOUT
        assert hold.wait_lost(timeout=deadline - time.monotonic() + 0.05)


def test_releasing_a_hold_lost_unnoticed_raises_lock_lost_and_tells_on_lost(
    redis_proxy: FaultProxy,
) -> None:
    """The holder's process was paused past its lease while the renewal worker is stuck in a
    call to an unreachable server: its release must still report the loss (LockLost and the
    on_lost callbacks), not the connection error of the release itself."""
    slow = TTL * 2  # each call waits this long for the cut server
    url = f"{tumbler_url(redis_proxy)}".replace(
        f"socket_timeout={TUMBLER_TIMEOUT}", f"socket_timeout={slow}"
    )
    with tumbler.connect(url) as locks:
        lock = locks.lock("paused", ttl=TTL)
        assert lock.acquire(timeout=PATIENCE)
        hold = lock.hold
        assert hold is not None
        lost: list[tumbler.Hold] = []
        hold.on_lost(lost.append)
        redis_proxy.cut()
        # the renewal at a third of the lease now waits `slow` seconds; the lease ends first
        eventually(lambda: hold.lost, "the lease ran out")
        with pytest.raises(LockLost):
            lock.release()
        assert lost == [hold]
        redis_proxy.heal()
