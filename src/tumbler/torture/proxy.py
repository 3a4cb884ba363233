"""A TCP fault proxy: delay, cut, drop, corrupt and reset the traffic of one upstream server.

``tc netem`` is not available on the machines tumbler is tested on, so faults between a lock
client and its server come from this proxy. It listens on a free ``127.0.0.1`` port and
forwards every connection it accepts to one upstream ``(host, port)``; point the client at
:attr:`FaultProxy.port` instead of the server's::

    with FaultProxy(("127.0.0.1", redis_port)) as proxy:
        locks = tumbler.connect(f"redis://127.0.0.1:{proxy.port}/0")
        proxy.cut()                # silent partition: bytes are held, connections stay open
        ...
        proxy.heal()               # held bytes flow again, like TCP retransmitting them

Directions
    ``upstream`` is client to server (requests), ``downstream`` server to client (replies).
    Each has its own fault, switchable at any time, from any thread, while connections are
    open; a fault applies to every byte that has not left the proxy yet, including bytes
    read before it was set (they are "in flight").

Faults (see the classes for details)
    :class:`Pass` forward at once. :class:`Delay` forward ``ms`` (plus or minus ``jitter_ms``)
    after the bytes arrived, keeping their order. :class:`Blackhole` hold the bytes and
    forward nothing: a silent partition; the connection stays open and the held bytes (and a
    close) are delivered late when the direction leaves blackhole. :class:`Drop` discard the
    bytes for good: ``drop("downstream")`` is the "lost reply" (the server did the work, the
    client never hears). :class:`Corrupt` flip bits in one byte of every chunk.
    :class:`Reset` RST every open connection (``SO_LINGER`` 0, then close) and every new one
    while it is set; it concerns whole connections, whichever direction it is set on.

    :meth:`FaultProxy.cut` is blackhole both ways, :meth:`FaultProxy.heal` undoes every fault.
    :meth:`FaultProxy.refuse_new` turns new connections away (RST after accept, or a closed
    listening socket: ``ECONNREFUSED``) while open ones carry on. :meth:`FaultProxy.stats`
    counts connections and bytes per direction, for reports.

Running it
    :meth:`FaultProxy.start` runs the proxy's asyncio loop in a daemon thread of its own, for
    blocking code (the torture harness, blocking tests); ``with FaultProxy(...) as proxy``
    starts and stops it. Inside asyncio code, ``async with FaultProxy(...)`` (or
    :meth:`FaultProxy.astart`) runs it on the running loop instead: the same object either
    way. Setters called from another thread wait until the change is in effect (RSTs sent,
    listening socket closed); called from the proxy's own loop they apply at once and the
    sockets close at the loop's next turn.

What a userspace proxy cannot do
    The client's TCP handshake is with the proxy, so a connect "succeeds" even during a
    blackhole (only its requests hang), and a partition looks to the kernel like an idle
    peer, not lost packets: keepalives and retransmission timers never fire. Chunk
    boundaries are whatever ``recv`` returned, not protocol messages.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import enum
import functools
import math
import random
import socket
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, NamedTuple, TypeAlias, TypeVar

from .._logs import logger
from ..errors import InvalidArgument, TumblerError

__all__ = [
    "BLACKHOLE",
    "CORRUPT",
    "DROP",
    "PASS",
    "RESET",
    "Blackhole",
    "Corrupt",
    "Delay",
    "Direction",
    "DirectionLike",
    "Drop",
    "Fault",
    "FaultProxy",
    "FlowStats",
    "Pass",
    "ProxyError",
    "ProxyStats",
    "Reset",
]

_log = logger("tumbler.torture.proxy")

_T = TypeVar("_T")

#: bytes asked of one ``recv``; also the StreamReader buffer limit
_CHUNK = 64 * 1024
#: chunks a direction of one connection may hold (delayed or blackholed) before the proxy
#: stops reading and TCP flow control pushes back on the sender: 1 MiB per direction
_QUEUE_CHUNKS = 16
#: how long the proxy tries to reach the upstream for a new connection
_CONNECT_TIMEOUT = 10.0
_BACKLOG = 1024
#: ``struct linger`` with l_onoff=1, l_linger=0: close() sends RST and discards unsent data
_LINGER_RST = struct.pack("ii", 1, 0)


class ProxyError(TumblerError, RuntimeError):
    """The proxy was used in a state that does not allow it (not started, started twice)."""


class Direction(str, enum.Enum):
    """Which way the bytes go. ``BOTH`` is only for setting a fault."""

    UPSTREAM = "upstream"
    """Client to server: requests."""
    DOWNSTREAM = "downstream"
    """Server to client: replies."""
    BOTH = "both"


DirectionLike: TypeAlias = Direction | Literal["upstream", "downstream", "both"]
_FLOWS = (Direction.UPSTREAM, Direction.DOWNSTREAM)


def _directions(direction: DirectionLike) -> tuple[Direction, ...]:
    try:
        chosen = Direction(direction)
    except (ValueError, TypeError):
        raise InvalidArgument(
            f"direction must be 'upstream', 'downstream' or 'both', not {direction!r}"
        ) from None
    return _FLOWS if chosen is Direction.BOTH else (chosen,)


# -- faults ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """What a direction does to the bytes that pass through it (base class)."""


@dataclass(frozen=True)
class Pass(Fault):
    """Forward bytes as soon as they arrive (after any that are still delayed or held)."""


@dataclass(frozen=True)
class Delay(Fault):
    """Forward each chunk ``ms`` milliseconds after it arrived, plus or minus ``jitter_ms``.

    Each chunk's delay is drawn uniformly from ``[ms - jitter_ms, ms + jitter_ms]`` (at least
    0) when it arrives. Bytes of one connection keep their order: a chunk never overtakes the
    one before it, so a short draw behind a long one waits for it. Changing the delay, or
    leaving delay, re-times the chunks still waiting. Reading goes on meanwhile, so this adds
    latency without limiting throughput (up to 1 MiB per direction and connection in flight).
    """

    ms: float
    jitter_ms: float = 0.0

    def __post_init__(self) -> None:
        for field, value in (("ms", self.ms), ("jitter_ms", self.jitter_ms)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidArgument(f"Delay {field} must be a number, not {value!r}")
            if not math.isfinite(value) or value < 0:
                raise InvalidArgument(f"Delay {field} must be finite and >= 0, not {value!r}")

    def seconds(self, draw: float) -> float:
        """The delay in seconds for a chunk whose jitter draw (in ``[-1, 1]``) is ``draw``."""
        return max(0.0, self.ms + draw * self.jitter_ms) / 1000.0


@dataclass(frozen=True)
class Blackhole(Fault):
    """Hold every byte and forward nothing: a silent partition.

    Connections stay open and new ones are accepted (and connected upstream), so neither side
    learns anything until its own timeout. Held bytes, and a close that came after them, are
    delivered in order when the direction leaves blackhole, as TCP would retransmit them after
    a partition heals: a request sent during a cut can reach the server late. Once 1 MiB is
    held per direction and connection the proxy stops reading and the sender's socket buffer
    fills. To model a partition long enough for TCP to give up, call
    :meth:`FaultProxy.reset_connections` before healing.
    """


@dataclass(frozen=True)
class Drop(Fault):
    """Discard every byte for good (counted in ``dropped``); a close still passes.

    ``drop("downstream")`` is the lost reply: requests reach the server and are executed, their
    replies vanish, and the client sees only its own timeout.
    """


@dataclass(frozen=True)
class Corrupt(Fault):
    """Forward every chunk with the bits of one byte in it flipped (random position and mask).

    The length is unchanged; ``corrupted`` counts the altered bytes. Chunks are what ``recv``
    returned, so how many protocol messages get hit depends on the traffic.
    """


@dataclass(frozen=True)
class Reset(Fault):
    """RST every open connection at once, and every new connection while set.

    A connection-wide fault: setting it on either direction resets whole connections (both the
    client's and the upstream socket get RST: ``SO_LINGER`` 0, then close). New connections
    are accepted and reset at once until neither direction is ``Reset``: the client's first
    read fails with ``ECONNRESET`` (on loopback the RST can even beat ``connect`` returning,
    which then fails with it).
    """


PASS = Pass()
BLACKHOLE = Blackhole()
DROP = Drop()
CORRUPT = Corrupt()
RESET = Reset()


# -- statistics ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlowStats:
    """Bytes of one direction, over every connection since the proxy was made."""

    forwarded: int = 0
    """Written to the receiving side (corrupted bytes included)."""
    dropped: int = 0
    """Discarded by :class:`Drop`."""
    corrupted: int = 0
    """Altered by :class:`Corrupt` (and forwarded)."""
    pending: int = 0
    """Read but not yet forwarded or dropped: delayed or held, now."""
    discarded: int = 0
    """Still pending when their connection was reset or the proxy stopped."""


@dataclass(frozen=True)
class ProxyStats:
    """A snapshot of the proxy's counters (:meth:`FaultProxy.stats`)."""

    accepted: int = 0
    """Connections accepted and forwarded upstream (or attempted)."""
    refused: int = 0
    """Connections reset right after accept (:meth:`FaultProxy.refuse_new` ``"rst"`` or
    :class:`Reset`); a closed listening socket refuses in the kernel, uncounted."""
    reset: int = 0
    """Open connections reset by :meth:`FaultProxy.reset_connections` or :class:`Reset`."""
    upstream_failed: int = 0
    """Accepted connections reset because the upstream could not be reached."""
    open: int = 0
    """Connections open now."""
    upstream: FlowStats = dataclasses.field(default_factory=FlowStats)
    """Client to server (requests)."""
    downstream: FlowStats = dataclasses.field(default_factory=FlowStats)
    """Server to client (replies)."""


@dataclass
class _Counters:
    forwarded: int = 0
    dropped: int = 0
    corrupted: int = 0
    pending: int = 0
    discarded: int = 0


# -- one connection --------------------------------------------------------------------------


class _Chunk(NamedTuple):
    arrived: float  # loop time
    draw: float  # jitter draw in [-1, 1]
    data: bytes  # b"": the sender closed its side


def _linger_rst(sock: socket.socket | None) -> None:
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)


class _Flow:
    """One direction of one connection: a reader that queues chunks as they arrive, and a
    deliverer that applies the direction's current fault to each as it leaves."""

    def __init__(
        self,
        proxy: FaultProxy,
        direction: Direction,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
    ) -> None:
        self.proxy = proxy
        self.direction = direction
        self.source = source
        self.sink = sink
        self.counters = proxy._counters[direction]
        self.queue: asyncio.Queue[_Chunk] = asyncio.Queue(_QUEUE_CHUNKS)
        # set when the fault changes or a delay is up: the deliverer then looks again
        self.wake = asyncio.Event()
        self.pending = 0

    async def read(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            data = await self.source.read(_CHUNK)
            chunk = _Chunk(loop.time(), self.proxy._random.uniform(-1.0, 1.0), data)
            self.pending += len(data)
            self.counters.pending += len(data)
            await self.queue.put(chunk)
            if not data:
                return

    async def deliver(self) -> None:
        while True:
            chunk = await self.queue.get()
            fault = await self._gate(chunk)
            size = len(chunk.data)
            self.pending -= size
            self.counters.pending -= size
            if not chunk.data:
                # half-close, as the sender did: the other direction may still carry replies
                if self.sink.can_write_eof():
                    self.sink.write_eof()
                return
            data = chunk.data
            if isinstance(fault, Drop):
                self.counters.dropped += size
                continue
            if isinstance(fault, Corrupt):
                altered = bytearray(data)
                altered[self.proxy._random.randrange(size)] ^= self.proxy._random.randrange(1, 256)
                data = bytes(altered)
                self.counters.corrupted += 1
            self.counters.forwarded += size
            self.sink.write(data)
            await self.sink.drain()

    async def _gate(self, chunk: _Chunk) -> Fault:
        """Wait until the fault lets ``chunk`` leave; the fault it leaves under."""
        loop = asyncio.get_running_loop()
        while True:
            self.wake.clear()
            fault = self.proxy._faults[self.direction]
            if isinstance(fault, Delay):
                left = chunk.arrived + fault.seconds(chunk.draw) - loop.time()
                if left <= 0:
                    return fault
                timer = loop.call_later(left, self.wake.set)
                try:
                    await self.wake.wait()
                finally:
                    timer.cancel()
            elif isinstance(fault, (Blackhole, Reset)):
                await self.wake.wait()
            else:
                return fault


class _Connection:
    """A client connection and its upstream twin, served by one task."""

    def __init__(self, client_sock: socket.socket) -> None:
        self.client_sock = client_sock
        self.upstream_sock: socket.socket | None = None
        self.writers: list[asyncio.StreamWriter] = []
        self.flows: list[_Flow] = []
        self.finished = asyncio.Event()
        # connecting: the task is cancelled to end it; pumping: `finished` ends it;
        # closing: too late to interrupt, only the way it closes (RST or not) can change
        self.phase: Literal["connecting", "pumping", "closing"] = "connecting"
        self.rst = False
        self.aborting = False
        self.task: asyncio.Task[None] | None = None

    def mark_rst(self) -> None:
        """Make the connection end with RST on both sockets, whenever it ends."""
        self.rst = True
        _linger_rst(self.client_sock)
        _linger_rst(self.upstream_sock)

    def abort(self, *, rst: bool) -> None:
        """End the connection now; with ``rst`` both of its sockets send RST."""
        if rst:
            self.mark_rst()
        if self.aborting:
            return
        self.aborting = True
        if self.phase == "connecting" and self.task is not None:
            self.task.cancel()
        else:
            self.finished.set()


# -- the proxy -------------------------------------------------------------------------------


class FaultProxy:
    """A TCP proxy from a free local port to ``upstream``, with switchable faults per direction.

    ``upstream`` is the server's ``(host, port)``. The proxy listens on ``host`` (default
    ``127.0.0.1``) and ``port`` (default 0: a free port, see :attr:`port` once started).
    ``seed`` makes jitter draws and corruption repeatable. Every direction starts at
    :data:`PASS`. A proxy runs once: :meth:`start` (or :meth:`astart`), then :meth:`stop` (or
    :meth:`aclose`); stopping closes every connection at once and discards bytes in flight.
    """

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int | None = None,
    ) -> None:
        try:
            upstream_host, upstream_port = upstream
        except (TypeError, ValueError):
            raise InvalidArgument(f"upstream must be (host, port), not {upstream!r}") from None
        if not isinstance(upstream_host, str) or not upstream_host:
            raise InvalidArgument(f"upstream host must be a host name or address: {upstream!r}")
        if (
            isinstance(upstream_port, bool)
            or not isinstance(upstream_port, int)
            or not 0 < upstream_port < 65536
        ):
            raise InvalidArgument(f"upstream port must be 1..65535, not {upstream_port!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
            raise InvalidArgument(f"port must be 0..65535, not {port!r}")
        self._upstream = (upstream_host, upstream_port)
        self._host = host
        self._port = port
        self._random = random.Random(seed)
        self._faults: dict[Direction, Fault] = {d: PASS for d in _FLOWS}
        self._refusing: Literal["rst", "close"] | None = None
        self._counters = {d: _Counters() for d in _FLOWS}
        self._accepted = 0
        self._refused = 0
        self._reset = 0
        self._upstream_failed = 0
        self._connections: set[_Connection] = set()
        self._listener: socket.socket | None = None
        self._listening = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._thread: threading.Thread | None = None
        self._stop_requested: asyncio.Event | None = None
        self._state: Literal["new", "running", "stopped"] = "new"

    # -- addresses -----------------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` clients connect to (known once started)."""
        if self._state == "new":
            raise ProxyError("the proxy has no address until it is started")
        return (self._host, self._port)

    @property
    def port(self) -> int:
        """The port clients connect to (known once started)."""
        return self.address[1]

    @property
    def upstream_address(self) -> tuple[str, int]:
        """The server's ``(host, port)`` every connection is forwarded to."""
        return self._upstream

    @property
    def running(self) -> bool:
        """True between start and stop."""
        return self._state == "running"

    # -- faults --------------------------------------------------------------------------

    @property
    def upstream_fault(self) -> Fault:
        """The fault on requests (client to server)."""
        return self._faults[Direction.UPSTREAM]

    @property
    def downstream_fault(self) -> Fault:
        """The fault on replies (server to client)."""
        return self._faults[Direction.DOWNSTREAM]

    def set_fault(self, fault: Fault, direction: DirectionLike = Direction.BOTH) -> None:
        """Apply ``fault`` to ``direction`` (``"upstream"``, ``"downstream"`` or ``"both"``).

        It applies to bytes still in the proxy too. Setting :data:`RESET` resets the open
        connections before this returns (when called from another thread than the proxy's).
        """
        if not isinstance(fault, Fault) or type(fault) is Fault:
            raise InvalidArgument(f"fault must be Pass, Delay, Blackhole, Drop, ..., not {fault!r}")
        directions = _directions(direction)
        self._call(lambda: self._apply_fault(fault, directions))

    def delay(
        self, ms: float, jitter_ms: float = 0.0, direction: DirectionLike = Direction.BOTH
    ) -> None:
        """``set_fault(Delay(ms, jitter_ms), direction)``."""
        self.set_fault(Delay(ms, jitter_ms), direction)

    def blackhole(self, direction: DirectionLike = Direction.BOTH) -> None:
        """``set_fault(BLACKHOLE, direction)``: hold bytes, forward nothing."""
        self.set_fault(BLACKHOLE, direction)

    def drop(self, direction: DirectionLike = Direction.DOWNSTREAM) -> None:
        """``set_fault(DROP, direction)``; by default the replies: "lost reply"."""
        self.set_fault(DROP, direction)

    def corrupt(self, direction: DirectionLike = Direction.DOWNSTREAM) -> None:
        """``set_fault(CORRUPT, direction)``; by default the replies."""
        self.set_fault(CORRUPT, direction)

    def cut(self) -> None:
        """A silent partition: blackhole both ways (open connections stay open)."""
        self.set_fault(BLACKHOLE, Direction.BOTH)

    def heal(self) -> None:
        """Undo every fault: pass both ways (held bytes flow) and accept new connections."""

        def apply() -> None:
            self._apply_fault(PASS, _FLOWS)
            self._apply_allow()

        self._call(apply)

    def reset_connections(self) -> int:
        """RST every open connection now (both sides); how many there were.

        One-shot: faults stay as they are and new connections are accepted.
        """
        return self._call(self._apply_reset)

    def refuse_new(self, how: Literal["rst", "close"] = "rst") -> None:
        """Turn new connections away until :meth:`allow_new` or :meth:`heal`.

        ``"rst"``: accept and reset at once (the client's first read, or already its
        ``connect``, fails with ``ECONNRESET``). ``"close"``: close the listening socket and
        keep the port bound without listening, so connects fail with ``ECONNREFUSED``
        (connections waiting in the accept backlog are reset by the kernel). Open connections
        carry on.
        """
        if how not in ("rst", "close"):
            raise InvalidArgument(f"refuse_new how must be 'rst' or 'close', not {how!r}")
        self._call(lambda: self._apply_refuse(how))

    def allow_new(self) -> None:
        """Accept new connections again (on the same port)."""
        self._call(self._apply_allow)

    @property
    def refusing(self) -> Literal["rst", "close"] | None:
        """How new connections are turned away now (:meth:`refuse_new`), or None."""
        return self._refusing

    def stats(self) -> ProxyStats:
        """A consistent snapshot of the counters."""
        return self._call(self._snapshot)

    # -- lifecycle: blocking -------------------------------------------------------------

    def start(self) -> FaultProxy:
        """Start serving in a daemon thread running an asyncio loop of the proxy's own."""
        self._check_new()
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._thread_main,
            args=(ready, failure),
            name=f"tumbler-fault-proxy->{self._upstream[0]}:{self._upstream[1]}",
            daemon=True,
        )
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            raise failure[0]
        return self

    def stop(self) -> None:
        """Close every connection and the listening socket, and end the thread. Idempotent."""
        thread, loop, stop_requested = self._thread, self._loop, self._stop_requested
        if thread is None:
            if self._state == "running":
                raise ProxyError("this proxy runs on an asyncio loop: use aclose()")
            self._state = "stopped"
            return
        if loop is not None and stop_requested is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already ended
                loop.call_soon_threadsafe(stop_requested.set)
        thread.join()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _thread_main(self, ready: threading.Event, failure: list[BaseException]) -> None:
        async def main() -> None:
            try:
                await self.astart()
                self._stop_requested = asyncio.Event()
            except BaseException as error:
                failure.append(error)
                return
            finally:
                ready.set()
            await self._stop_requested.wait()
            await self.aclose()

        # asyncio.run also cancels stray tasks and shuts the default executor down (used if
        # the upstream host is a name to resolve): nothing outlives the thread
        asyncio.run(main())

    # -- lifecycle: asyncio --------------------------------------------------------------

    async def astart(self) -> FaultProxy:
        """Start serving on the running asyncio loop (instead of a thread of its own)."""
        self._check_new()
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        try:
            self._listener = self._bind(self._port)
            self._port = self._listener.getsockname()[1]
            if self._refusing != "close":
                self._listen()
        except BaseException:
            self._close_listener()
            self._loop = None
            raise
        self._state = "running"
        _log.debug("fault proxy %s:%s -> %s:%s", self._host, self._port, *self._upstream)
        return self

    async def aclose(self) -> None:
        """Close every connection and the listening socket. Idempotent."""
        if self._state != "running":
            self._state = "stopped"
            return
        self._close_listener()
        connections = list(self._connections)
        for connection in connections:
            connection.abort(rst=False)
        await self._settle()
        self._state = "stopped"
        self._loop = None
        self._loop_thread = None

    async def __aenter__(self) -> FaultProxy:
        return await self.astart()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _check_new(self) -> None:
        if self._state != "new":
            raise ProxyError(f"a proxy runs once; this one is {self._state}")

    # -- running things on the loop ------------------------------------------------------

    def _call(self, apply: Callable[[], _T]) -> _T:
        """Run ``apply`` on the proxy's loop; from another thread, wait until the sockets it
        closed are closed. Before start and after stop there is nothing to race with."""
        loop = self._loop
        if loop is None or threading.get_ident() == self._loop_thread:
            return apply()

        async def on_loop() -> _T:
            result = apply()
            await self._settle()
            return result

        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def relay(task: asyncio.Task[_T]) -> None:
            if task.cancelled():  # the loop is shutting down
                future.set_exception(concurrent.futures.CancelledError())
            elif (error := task.exception()) is not None:
                future.set_exception(error)
            else:
                future.set_result(task.result())

        def kick() -> None:
            # the coroutine is made here, on the loop: if the loop ends before this runs,
            # no coroutine is left never awaited
            if future.set_running_or_notify_cancel():
                loop.create_task(on_loop()).add_done_callback(relay)

        try:
            loop.call_soon_threadsafe(kick)
        except RuntimeError:  # the loop is closed: the proxy has stopped
            return apply()
        while True:
            try:
                return future.result(timeout=0.1)
            except concurrent.futures.TimeoutError:
                if loop.is_closed() and not future.done():
                    # stop() won the race: apply to the stopped proxy
                    future.cancel()
                    return apply()
            except concurrent.futures.CancelledError:
                return apply()

    async def _settle(self) -> None:
        """Wait until every connection being aborted has closed its sockets."""
        tasks: list[asyncio.Task[None]] = [
            c.task for c in self._connections if c.aborting and c.task is not None
        ]
        if tasks:
            await asyncio.wait(tasks)

    # -- state changes (on the loop thread) ----------------------------------------------

    def _apply_fault(self, fault: Fault, directions: Iterable[Direction]) -> None:
        directions = tuple(directions)
        for direction in directions:
            self._faults[direction] = fault
        if isinstance(fault, Reset):
            self._apply_reset()
            return
        for connection in self._connections:
            for flow in connection.flows:
                if flow.direction in directions:
                    flow.wake.set()

    def _apply_reset(self) -> int:
        connections = [c for c in self._connections if not c.aborting]
        for connection in connections:
            connection.abort(rst=True)
        self._reset += len(connections)
        return len(connections)

    def _apply_refuse(self, how: Literal["rst", "close"]) -> None:
        self._refusing = how
        if how == "close" and self._listening:
            self._close_listener()
            # keep the port ours (bound, not listening: the kernel refuses connects)
            self._listener = self._bind(self._port)
        elif how == "rst":
            self._ensure_listening()

    def _apply_allow(self) -> None:
        self._refusing = None
        self._ensure_listening()

    def _ensure_listening(self) -> None:
        if self._state == "running" and not self._listening:
            if self._listener is None:
                self._listener = self._bind(self._port)
            self._listen()

    def _snapshot(self) -> ProxyStats:
        flows = {d: FlowStats(**dataclasses.asdict(self._counters[d])) for d in _FLOWS}
        return ProxyStats(
            accepted=self._accepted,
            refused=self._refused,
            reset=self._reset,
            upstream_failed=self._upstream_failed,
            open=len(self._connections),
            upstream=flows[Direction.UPSTREAM],
            downstream=flows[Direction.DOWNSTREAM],
        )

    # -- listening -----------------------------------------------------------------------

    def _bind(self, port: int) -> socket.socket:
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            # rebinding the port of a listener closed by refuse_new("close") while its
            # accepted connections are still open needs SO_REUSEADDR
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._host, port))
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return sock

    def _listen(self) -> None:
        assert self._listener is not None
        assert self._loop is not None
        self._listener.listen(_BACKLOG)
        self._loop.add_reader(self._listener.fileno(), self._on_acceptable)
        self._listening = True

    def _close_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is None:
            return
        if self._listening and self._loop is not None:
            # unregister before closing, so the fd number is never watched after reuse
            self._loop.remove_reader(listener.fileno())
        self._listening = False
        listener.close()

    def _on_acceptable(self) -> None:
        if self._listener is None or self._loop is None:
            return
        # a bounded batch: a connection storm must not starve the flows
        for _ in range(64):
            try:
                sock, _peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # EMFILE and the like: leave it in the backlog
                _log.warning("fault proxy cannot accept: %s", error)
                return
            refusing = self._refusing is not None or any(
                isinstance(f, Reset) for f in self._faults.values()
            )
            if refusing:
                _linger_rst(sock)
                sock.close()
                self._refused += 1
                continue
            self._accepted += 1
            connection = _Connection(sock)
            self._connections.add(connection)
            connection.task = self._loop.create_task(self._serve(connection))
            connection.task.add_done_callback(functools.partial(self._forget, connection))

    def _forget(self, connection: _Connection, _task: asyncio.Task[None]) -> None:
        # A task cancelled before its first step never runs its finally: close here too. The
        # transports own the sockets once made, and have closed them by now (a second close
        # of a Python socket object does nothing).
        connection.client_sock.close()
        for flow in connection.flows:
            self._counters[flow.direction].pending -= flow.pending
            self._counters[flow.direction].discarded += flow.pending
            flow.pending = 0
        self._connections.discard(connection)

    # -- serving one connection ----------------------------------------------------------

    async def _serve(self, connection: _Connection) -> None:
        tasks: list[asyncio.Task[None]] = []
        try:
            client_reader, client_writer = await asyncio.open_connection(
                sock=connection.client_sock, limit=_CHUNK
            )
            connection.writers.append(client_writer)
            try:
                upstream_reader, upstream_writer = await asyncio.wait_for(
                    asyncio.open_connection(*self._upstream, limit=_CHUNK), _CONNECT_TIMEOUT
                )
            except (OSError, asyncio.TimeoutError) as error:
                _log.info("fault proxy cannot reach %s:%s: %s", *self._upstream, error)
                self._upstream_failed += 1
                connection.mark_rst()
                return
            connection.writers.append(upstream_writer)
            connection.upstream_sock = upstream_writer.get_extra_info("socket")
            connection.flows = [
                _Flow(self, Direction.UPSTREAM, client_reader, upstream_writer),
                _Flow(self, Direction.DOWNSTREAM, upstream_reader, client_writer),
            ]
            delivered: list[asyncio.Task[None]] = []

            def delivered_one(task: asyncio.Task[None]) -> None:
                if task.cancelled():
                    return
                if task.exception() is None and all(t.done() for t in delivered):
                    connection.finished.set()

            for flow in connection.flows:
                reader = asyncio.create_task(flow.read())
                deliverer = asyncio.create_task(flow.deliver())
                delivered.append(deliverer)
                tasks += (reader, deliverer)
            for task in tasks:
                task.add_done_callback(self._pump_failed(connection))
            for task in delivered:
                task.add_done_callback(delivered_one)
            connection.phase = "pumping"
            if connection.aborting:  # aborted while connecting, after the last cancel point
                connection.finished.set()
            await connection.finished.wait()
        finally:
            connection.phase = "closing"
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks)
            await self._close(connection)

    @staticmethod
    def _pump_failed(connection: _Connection) -> Callable[[asyncio.Task[None]], None]:
        def check(task: asyncio.Task[None]) -> None:
            if task.cancelled():
                return
            error = task.exception()
            if error is None:
                return
            # a peer reset, or a write to a peer gone: pass the reset on to the other side
            if not isinstance(error, OSError):
                _log.error("fault proxy connection failed", exc_info=error)
            connection.abort(rst=True)

        return check

    async def _close(self, connection: _Connection) -> None:
        if connection.rst:
            _linger_rst(connection.client_sock)
            _linger_rst(connection.upstream_sock)
        for writer in connection.writers:
            if connection.rst or connection.aborting:
                writer.transport.abort()
            else:
                writer.close()
        for writer in connection.writers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), _CONNECT_TIMEOUT)
            # a graceful close whose peer would not take the last bytes
            writer.transport.abort()

    def __repr__(self) -> str:
        where = f"{self._host}:{self._port}" if self._state != "new" else "(not started)"
        return (
            f"<FaultProxy {where} -> {self._upstream[0]}:{self._upstream[1]} {self._state}"
            f" up={self.upstream_fault!r} down={self.downstream_fault!r}>"
        )
