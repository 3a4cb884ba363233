"""The one seam between the etcd backend and HTTP: a small HTTP/1.1 client of its own, h11
(the protocol's state machine, which does no I/O) over the standard library's I/O, blocking
sockets for one flavour and asyncio streams for the other. Every request the gateway client
makes goes through these functions.

``aopen_client``/``open_client`` make a client for one member's base URL; ``apost``/``post``
send one JSON request and return the status and the decoded reply; ``astream_lines`` /
``stream_lines`` open a long request (a watch) whose body is one or more JSON messages and
whose reply is read line by line, and close it when the block ends (the gateway cannot cancel
a watch: closing its connection does); ``interrupt`` ends such a read from any thread;
``aclose_client``/``close_client`` close a client. A streaming body is sent whole, padded so
that the gateway reads all of it (:data:`UNREAD_BODY`). The generator of the blocking twin
renames each ``a`` name to the other (tools/generate_sync.py reads ``SYNC_RENAMES``).

Connections
    A client keeps a few idle keep-alive connections to its member (:data:`IDLE_CONNECTIONS`;
    a blocking client is shared by threads, an asyncio one belongs to its event loop). A
    connection goes back to them only after a whole request and its whole reply, once h11
    has begun its next cycle; a request that fails or is interrupted on the way (any
    exception, ``KeyboardInterrupt`` and cancellation included) closes its connection.
    Before a request reuses an idle connection, one the member has closed, or on which it
    sent something nobody asked for, is dropped: so a request that fails on a reused
    connection has met a member that failed then, not a connection that was dead already.
    A stream has a connection of its own, never reused.

Failures
    Every failure to get a whole reply is :class:`HTTPFailure` (the member refused or reset
    the connection or closed it, the time ran out, TLS failed, the reply broke HTTP/1.1 or
    was cut short), the cause kept. Its ``not_sent`` (:func:`not_sent`) says the request
    surely did not reach the member: the connection could not be made (refused, its connect
    or TLS handshake failed or ran out of time), or h11 refused to write the request, or
    nothing of it was written. Any other failure may have let the member act on it: the
    reply is lost, not the request.

Bounds
    A request's timeout (the call's, or the client's) bounds all of it: connecting, the TLS
    handshake, writing, and reading the whole reply. A stream's connection and the head of
    its reply are bounded by the client's timeout; its lines are not (a watch waits as long
    as nothing changes).
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import h11

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "AsyncClient",
    "Client",
    "HTTPFailure",
    "IDLE_CONNECTIONS",
    "LineStream",
    "StreamRefused",
    "aclose_client",
    "aopen_client",
    "apost",
    "astream_lines",
    "close_client",
    "interrupt",
    "not_sent",
    "open_client",
    "post",
    "stream_lines",
]

#: each seam's blocking twin, for the generator of the ``_sync`` code
SYNC_RENAMES = {
    "aopen_client": "open_client",
    "apost": "post",
    "astream_lines": "stream_lines",
    "aclose_client": "close_client",
}

#: the most idle connections a client keeps for the requests to come: as many as requests
#: that usually run at once on one member from one process (a lock's calls, its renewals)
IDLE_CONNECTIONS = 8

#: the most bytes read from a connection at once
_CHUNK = 65536

_T = TypeVar("_T")


class HTTPFailure(Exception):
    """A request that got no whole reply. ``not_sent``: it surely did not reach the member
    (its connection could not be made, or nothing of it was written that the member could
    read)."""

    def __init__(self, message: str, *, not_sent: bool = False) -> None:
        super().__init__(message)
        self.not_sent = not_sent


class StreamRefused(HTTPFailure):
    """A streaming call that the member answered with another status than 200."""

    def __init__(self, path: str, status: int, text: str) -> None:
        super().__init__(f"{path}: {status} {text}")
        self.path = path
        self.status = status
        self.text = text


def not_sent(failure: Exception) -> bool:
    """Whether a request that failed with ``failure`` surely did not reach the member: its
    connection could not be made, or h11 refused to write it, or nothing of it was
    written."""
    return isinstance(failure, HTTPFailure) and failure.not_sent


#: the most plaintext one TLS record carries
_TLS_RECORD = 16384


def _left(deadline: float) -> float:
    """The seconds left before ``deadline``; ``TimeoutError`` once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


# -- what both flavours share ---------------------------------------------------------------

_default_tls: ssl.SSLContext | None = None
_default_tls_made = threading.Lock()


def _verifying() -> ssl.SSLContext:
    """The system's default TLS context, made once: loading the CA certificates costs
    milliseconds."""
    global _default_tls
    with _default_tls_made:
        if _default_tls is None:
            _default_tls = ssl.create_default_context()
        return _default_tls


class _Member:
    """Where a client's requests go: one member's address and its TLS context (None: plain
    HTTP)."""

    def __init__(self, base_url: str, tls: ssl.SSLContext | None) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http:// or https:// URL with a host: {base_url!r}")
        secure = parts.scheme == "https"
        self.url = base_url
        self.host = parts.hostname
        self.port = parts.port or (443 if secure else 80)
        self.authority = parts.netloc
        self.tls = (tls if tls is not None else _verifying()) if secure else None

    def request(self, path: str, headers: dict[str, str], payload: bytes) -> h11.Request:
        """The head of a POST of ``payload`` (JSON) to ``path``; ``HTTPFailure`` (not sent)
        if h11 refuses it (a header it cannot write, a newline in a token, say)."""
        try:
            return h11.Request(
                method="POST",
                target=path,
                headers=[
                    ("Host", self.authority),
                    ("Content-Type", "application/json"),
                    ("Content-Length", str(len(payload))),
                    *headers.items(),
                ],
            )
        except h11.LocalProtocolError as refusal:
            raise HTTPFailure(
                f"{path}: h11 refused the request: {refusal}", not_sent=True
            ) from refusal


def _wire(protocol: h11.Connection, request: h11.Request, payload: bytes) -> bytes:
    """The bytes of ``request`` and its ``payload``, from h11 (which checks each event before
    it gives a byte of it): ``HTTPFailure`` (not sent) if it refuses one."""
    try:
        parts = [
            protocol.send(request),
            protocol.send(h11.Data(data=payload)),
            protocol.send(h11.EndOfMessage()),
        ]
    except h11.LocalProtocolError as refusal:
        raise HTTPFailure(
            f"h11 refused to write the request: {refusal}", not_sent=True
        ) from refusal
    return b"".join(part for part in parts if part is not None)


def _next_cycle(protocol: h11.Connection) -> bool:
    """Start the connection's next request/response cycle if both sides are done with this
    one (a reply that asked to close the connection is not) and the member sent nothing past
    its reply (h11 would keep those bytes as the start of the next one: another request would
    read them as its reply); whether it could be."""
    if (
        protocol.our_state is h11.DONE
        and protocol.their_state is h11.DONE
        and protocol.trailing_data == (b"", False)
    ):
        protocol.start_next_cycle()
        return True
    return False


class _Reply:
    """A reply read whole: its status and its body, taking h11's events one by one."""

    __slots__ = ("body", "status")

    def __init__(self) -> None:
        self.status = 0
        self.body: list[bytes] = []

    def take(self, event: object) -> bool:
        """Take ``event``; whether the reply is whole."""
        if isinstance(event, h11.Response):
            self.status = event.status_code
        elif isinstance(event, h11.Data):
            self.body.append(event.data)
        elif isinstance(event, h11.EndOfMessage):
            return True
        elif isinstance(event, h11.ConnectionClosed):
            raise HTTPFailure("the member closed the connection before its whole reply")
        return False

    def text(self) -> str:
        return b"".join(self.body).decode("utf-8", "replace")

    def decoded(self) -> tuple[int, Any]:
        """The status, and the body's JSON (a body that is not JSON: ``{"message": text}``)."""
        data = b"".join(self.body)
        try:
            return self.status, json.loads(data)
        except ValueError:
            return self.status, {"message": data.decode("utf-8", "replace")}


class _Lines:
    """A reply's body cut into lines as its chunks come: a line may span chunks, and a
    chunk may hold several."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        # the chunks of the line not ended yet, joined once it ends: a long line costs its
        # length, not its length times its chunks
        self._pending: list[bytes] = []

    def feed(self, data: bytes) -> list[str]:
        if b"\n" not in data:
            self._pending.append(data)
            return []
        first, *whole, rest = data.split(b"\n")
        self._pending.append(first)
        lines = [b"".join(self._pending), *whole]
        self._pending = [rest] if rest else []
        return [line.rstrip(b"\r").decode("utf-8", "replace") for line in lines]

    def end(self) -> list[str]:
        rest, self._pending = b"".join(self._pending), []
        return [rest.decode("utf-8", "replace")] if rest else []


class LineStream:
    """A long reply to read (a watch), made before its request is sent, so that
    :func:`interrupt` ends it at any point from then on: before its connection is made, while
    its TLS handshake or the reply's head is awaited, or while its lines are read. ``lines``
    is set once the head has come: an iterator of the reply's lines (an async one in the
    asyncio flavour), which fails with :class:`HTTPFailure` when the stream is interrupted
    or its connection fails."""

    def __init__(self) -> None:
        self.lines: Any = None
        self._socket: socket.socket | None = None
        self._interrupted = False
        self._lock = threading.Lock()

    def _connected(self, sock: socket.socket) -> None:
        with self._lock:
            self._socket = sock
            interrupted = self._interrupted
        if interrupted:
            _shut_down(sock)


def interrupt(stream: LineStream) -> None:
    """End ``stream`` now, from any thread: its socket is shut down, so the read under way
    (or the next, or the connection about to be made) fails at once. Never blocks."""
    with stream._lock:
        stream._interrupted = True
        sock = stream._socket
    if sock is not None:
        _shut_down(sock)


def _shut_down(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        # the plain socket's call: an SSLSocket's own would unwrap it under the feet of the
        # reading thread
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


#: how much of a streaming call's body must be left unread when the gateway first answers:
#: Go's HTTP/1 server (etcd's gateway) then discards a shorter rest of the request body
#: unread, so the watches asked for in it are never made (maxPostHandlerReadBytes, 256 KiB),
#: but leaves a longer one for the handler to read; 64 KiB more than that limit covers what
#: the gateway has read ahead by then (a few KiB)
UNREAD_BODY = 320 * 1024


def _messages(bodies: Sequence[Any]) -> bytes:
    # the gateway reads a streaming call's body as a sequence of JSON messages, with any
    # whitespace between them: the padding keeps the messages after the first from being
    # discarded once the first is answered (a body of one message has none to lose)
    text = "\n".join(json.dumps(body) for body in bodies).encode()
    if len(bodies) < 2:
        return text
    return text + b" " * max(0, UNREAD_BODY - len(text))


def _payload(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


# -- blocking --------------------------------------------------------------------------------


def _open_socket(host: str, port: int, deadline: float) -> socket.socket:
    """A TCP connection to the first of ``host``'s addresses that takes one before
    ``deadline``: each address tries for the time left, not for a timeout of its own (a
    host with two addresses that drop the connect would take twice the request's bound)."""
    failed: OSError | None = None
    for family, kind, protocol, _, address in socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM
    ):
        sock = socket.socket(family, kind, protocol)
        try:
            sock.settimeout(_left(deadline))
            sock.connect(address)
        except OSError as error:
            sock.close()
            failed = error
            if isinstance(error, TimeoutError):
                break  # the time is up for every address
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise failed or OSError(f"{host} has no address")


class _Connection:
    """One connection of a blocking client: its socket and h11's view of it."""

    __slots__ = ("protocol", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.protocol = h11.Connection(h11.CLIENT)

    def usable(self) -> bool:
        """Whether an idle connection can carry a request: open, and with nothing to read
        (an end of stream: the member closed it; bytes: something nobody asked for)."""
        sock = self.sock
        if sock.fileno() < 0:
            return False
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return False
        try:
            sock.settimeout(0)
            # the plain socket's call, which an SSLSocket refuses flags for: any byte waiting
            # (a TLS record or an end of stream) is unexpected on an idle connection
            socket.socket.recv(sock, 1, socket.MSG_PEEK)
        except BlockingIOError:
            return True
        except OSError:
            return False
        return False

    def send(self, request: h11.Request, payload: bytes, deadline: float) -> None:
        data = _wire(self.protocol, request, payload)
        view = memoryview(data)
        # TLS: one record a send, which reaches the member's reader whole or not at all (one
        # send of more may fail having written records)
        piece = _TLS_RECORD if isinstance(self.sock, ssl.SSLSocket) else len(data)
        written = 0
        try:
            while written < len(data):
                self.sock.settimeout(_left(deadline))
                written += self.sock.send(view[written : written + piece])
        except OSError as error:
            # a send that fails has handed the member nothing it can read: so has the request
            # if it was the first
            raise HTTPFailure(f"writing the request: {error!r}", not_sent=not written) from error

    def event(self, deadline: float | None) -> object:
        """h11's next event of the reply, read as it needs (until ``deadline``; without one,
        for as long as it takes)."""
        protocol = self.protocol
        try:
            while True:
                event = protocol.next_event()
                if event is not h11.NEED_DATA:
                    return event
                if deadline is not None:
                    self.sock.settimeout(_left(deadline))
                protocol.receive_data(self.sock.recv(_CHUNK))
        except (OSError, h11.ProtocolError) as error:
            raise HTTPFailure(f"reading the reply: {error!r}") from error

    def reply(self, deadline: float) -> _Reply:
        reply = _Reply()
        while not reply.take(self.event(deadline)):
            pass
        return reply

    def head(self, deadline: float) -> _Reply:
        """The reply with its status, its body not read yet."""
        reply = _Reply()
        while not reply.status:
            if reply.take(self.event(deadline)):
                raise HTTPFailure("the reply ended before its head")
        return reply

    def lines(self) -> Iterator[str]:
        lines = _Lines()
        while True:
            event = self.event(None)
            if isinstance(event, h11.Data):
                yield from lines.feed(event.data)
            elif isinstance(event, h11.EndOfMessage):
                yield from lines.end()
                return
            elif isinstance(event, h11.ConnectionClosed):
                raise HTTPFailure("the member closed the stream")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class Client:
    """A blocking client of one member: its idle connections (shared by threads) and its
    open streams."""

    def __init__(self, base_url: str, tls: ssl.SSLContext | None, timeout: float) -> None:
        self.member = _Member(base_url, tls)
        self.timeout = timeout
        self._idle: list[_Connection] = []
        self._streams: set[_Connection] = set()
        self._lock = threading.Lock()
        self._closed = False

    def connect(self, deadline: float, stream: LineStream | None = None) -> _Connection:
        """A new connection (TLS done); ``HTTPFailure`` (not sent) if it cannot be made."""
        member = self.member
        try:
            sock = _open_socket(member.host, member.port, deadline)
        except OSError as error:
            raise HTTPFailure(f"connecting to {member.url}: {error!r}", not_sent=True) from error
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if member.tls is not None:
                sock = member.tls.wrap_socket(
                    sock, server_hostname=member.host, do_handshake_on_connect=False
                )
            if stream is not None:
                stream._connected(sock)  # an interrupt from now on ends the handshake too
            if isinstance(sock, ssl.SSLSocket):
                sock.settimeout(_left(deadline))
                sock.do_handshake()
        except OSError as error:
            sock.close()
            raise HTTPFailure(
                f"connecting to {member.url} (TLS): {error!r}", not_sent=True
            ) from error
        except BaseException:
            sock.close()
            raise
        return _Connection(sock)

    def checkout(self, deadline: float) -> _Connection:
        """An idle connection still usable, else a new one."""
        while True:
            with self._lock:
                if self._closed:
                    raise HTTPFailure("the client is closed", not_sent=True)
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self.connect(deadline)
            if connection.usable():
                return connection
            connection.close()

    def checkin(self, connection: _Connection) -> None:
        """Keep ``connection`` (its cycle done and the next begun) for a next request."""
        with self._lock:
            if not self._closed and len(self._idle) < IDLE_CONNECTIONS:
                self._idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            streams = list(self._streams)
        for connection in idle:
            connection.close()
        for connection in streams:
            # shut down, not closed: another thread may be reading it, and closes it itself
            _shut_down(connection.sock)


def open_client(base_url: str, tls: ssl.SSLContext | None, timeout: float) -> Client:
    """A blocking client for one member (``http[s]://HOST:PORT``); a request takes at most
    ``timeout`` seconds unless the call says otherwise. ``tls``: for ``https://``, the
    context to use (None: the system's CA certificates)."""
    return Client(base_url, tls, timeout)


def post(
    client: Client, path: str, body: Any, headers: dict[str, str], timeout: float | None = None
) -> tuple[int, Any]:
    """The blocking twin of :func:`apost`."""
    deadline = time.monotonic() + (client.timeout if timeout is None else timeout)
    payload = _payload(body)
    request = client.member.request(path, headers, payload)
    connection = client.checkout(deadline)
    try:
        connection.send(request, payload, deadline)
        reply = connection.reply(deadline)
        kept = _next_cycle(connection.protocol)
    except BaseException:
        connection.close()
        raise
    # outside: an interrupt amid the check-in must not close a connection that another
    # thread may have taken from the pool already (one that lands before leaves it to the
    # garbage collector, closed)
    if kept:
        client.checkin(connection)
    else:
        connection.close()
    return reply.decoded()


@contextlib.contextmanager
def stream_lines(
    client: Client, path: str, bodies: Sequence[Any], headers: dict[str, str], stream: LineStream
) -> Iterator[LineStream]:
    """The blocking twin of :func:`astream_lines`."""
    deadline = time.monotonic() + client.timeout
    payload = _messages(bodies)
    request = client.member.request(path, headers, payload)
    if client._closed:
        raise HTTPFailure("the client is closed", not_sent=True)
    connection = client.connect(deadline, stream)
    with client._lock:
        # a close while the connection was made has not seen it: it is not kept
        closed = client._closed
        if not closed:
            client._streams.add(connection)
    if closed:
        connection.close()
        raise HTTPFailure("the client is closed", not_sent=True)
    try:
        connection.send(request, payload, deadline)
        head = connection.head(deadline)
        if head.status != 200:
            raise StreamRefused(path, head.status, connection.reply(deadline).text())
        connection.sock.settimeout(None)
        stream.lines = connection.lines()
        yield stream
    finally:
        with client._lock:
            client._streams.discard(connection)
        connection.close()


def close_client(client: Client) -> None:
    client.close()


# -- asyncio ---------------------------------------------------------------------------------


class _AsyncConnection:
    """One connection of an asyncio client: its streams and h11's view of it."""

    __slots__ = ("protocol", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.protocol = h11.Connection(h11.CLIENT)

    def usable(self) -> bool:
        """Whether an idle connection can carry a request: open, and with nothing read (an
        end of stream: the member closed it; bytes: something nobody asked for)."""
        reader = self.reader
        # bytes the event loop has read for the stream already: no public way to ask; were
        # the private buffer gone, no connection would be taken again (a new one a request)
        buffered = getattr(reader, "_buffer", None)
        return not (
            self.writer.transport.is_closing()
            or reader.at_eof()
            or reader.exception() is not None
            or buffered is None
            or len(buffered) > 0
        )

    async def send(self, request: h11.Request, payload: bytes, progress: _Progress) -> None:
        data = _wire(self.protocol, request, payload)
        # the transport may hand some of it to the kernel at once, and tells nothing of it
        progress.written = True
        try:
            self.writer.write(data)
            await self.writer.drain()
        except OSError as error:
            raise HTTPFailure(f"writing the request: {error!r}") from error

    async def event(self) -> object:
        protocol = self.protocol
        try:
            while True:
                event = protocol.next_event()
                if event is not h11.NEED_DATA:
                    return event
                protocol.receive_data(await self.reader.read(_CHUNK))
        except (OSError, h11.ProtocolError) as error:
            raise HTTPFailure(f"reading the reply: {error!r}") from error

    async def reply(self) -> _Reply:
        reply = _Reply()
        while not reply.take(await self.event()):
            pass
        return reply

    async def head(self) -> _Reply:
        reply = _Reply()
        while not reply.status:
            if reply.take(await self.event()):
                raise HTTPFailure("the reply ended before its head")
        return reply

    async def lines(self) -> AsyncIterator[str]:
        lines = _Lines()
        while True:
            event = await self.event()
            if isinstance(event, h11.Data):
                for line in lines.feed(event.data):
                    yield line
            elif isinstance(event, h11.EndOfMessage):
                for line in lines.end():
                    yield line
                return
            elif isinstance(event, h11.ConnectionClosed):
                raise HTTPFailure("the member closed the stream")

    def close(self) -> None:
        """Close at once (no TLS goodbye): the event loop closes the socket at its next
        turn."""
        self.writer.transport.abort()


class _Progress:
    """How far a request has gone, for what its running out of time means."""

    __slots__ = ("written",)

    def __init__(self) -> None:
        self.written = False


async def _within(seconds: float, call: Coroutine[Any, Any, _T], progress: _Progress) -> _T:
    """``call``'s result, cancelled after ``seconds`` (``HTTPFailure``, not sent unless
    something of the request was written): ``call`` closes its connection when cancelled."""
    import asyncio

    try:
        if sys.version_info >= (3, 11):
            async with asyncio.timeout(seconds):
                return await call
        return await asyncio.wait_for(call, seconds)
    except asyncio.TimeoutError as error:
        # asyncio's own before Python 3.11, the builtin since
        raise HTTPFailure(
            f"no whole reply within {seconds:g} s", not_sent=not progress.written
        ) from error


async def _asocket(host: str, port: int) -> socket.socket:
    """A socket connected to ``host``, owned by the caller (closed here on failure)."""
    import asyncio

    loop = asyncio.get_running_loop()
    try:
        # an address needs no resolver (the loop's runs in a thread of its executor)
        addresses = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
        )
    except socket.gaierror:
        addresses = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    failure: OSError | None = None
    for family, kind, proto, _, address in addresses:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
        except OSError as error:
            sock.close()
            failure = error
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise failure if failure is not None else OSError(f"no address for {host}")


class AsyncClient:
    """An asyncio client of one member: its idle connections and its open streams, all of
    its event loop."""

    def __init__(self, base_url: str, tls: ssl.SSLContext | None, timeout: float) -> None:
        self.member = _Member(base_url, tls)
        self.timeout = timeout
        self._idle: list[_AsyncConnection] = []
        self._streams: set[_AsyncConnection] = set()
        self._closed = False

    async def connect(self, stream: LineStream | None = None) -> _AsyncConnection:
        """A new connection (TLS done); ``HTTPFailure`` (not sent) if it cannot be made."""
        import asyncio

        member = self.member
        try:
            sock = await _asocket(member.host, member.port)
        except OSError as error:
            raise HTTPFailure(f"connecting to {member.url}: {error!r}", not_sent=True) from error
        try:
            if stream is not None:
                stream._connected(sock)  # an interrupt from now on ends the handshake too
            if member.tls is None:
                reader, writer = await asyncio.open_connection(sock=sock, limit=_CHUNK)
            else:
                reader, writer = await asyncio.open_connection(
                    sock=sock, limit=_CHUNK, ssl=member.tls, server_hostname=member.host
                )
        except OSError as error:
            sock.close()
            raise HTTPFailure(
                f"connecting to {member.url} (TLS): {error!r}", not_sent=True
            ) from error
        except BaseException:
            # asyncio closes its transport when its handshake is cancelled: the socket is
            # closed here as well, whatever stage it was at
            sock.close()
            raise
        return _AsyncConnection(reader, writer)

    async def checkout(self) -> _AsyncConnection:
        """An idle connection still usable, else a new one."""
        while self._idle:
            connection = self._idle.pop()
            if connection.usable():
                return connection
            connection.close()
        if self._closed:
            raise HTTPFailure("the client is closed", not_sent=True)
        return await self.connect()

    def checkin(self, connection: _AsyncConnection) -> None:
        if not self._closed and len(self._idle) < IDLE_CONNECTIONS:
            self._idle.append(connection)
        else:
            connection.close()

    async def close(self) -> None:
        import asyncio

        self._closed = True
        idle, self._idle = self._idle, []
        for connection in [*idle, *self._streams]:
            connection.close()
        # the loop closes the aborted transports' sockets at its next turn: let it
        await asyncio.sleep(0)


def aopen_client(base_url: str, tls: ssl.SSLContext | None, timeout: float) -> AsyncClient:
    """An asyncio client for one member (``http[s]://HOST:PORT``); a request takes at most
    ``timeout`` seconds unless the call says otherwise. ``tls``: for ``https://``, the
    context to use (None: the system's CA certificates)."""
    return AsyncClient(base_url, tls, timeout)


async def _apost(
    client: AsyncClient, request: h11.Request, payload: bytes, progress: _Progress
) -> _Reply:
    connection = await client.checkout()
    try:
        await connection.send(request, payload, progress)
        reply = await connection.reply()
        if _next_cycle(connection.protocol):
            client.checkin(connection)  # kept inside: see post()
        else:
            connection.close()
    except BaseException:
        connection.close()
        raise
    return reply


async def apost(
    client: AsyncClient,
    path: str,
    body: Any,
    headers: dict[str, str],
    timeout: float | None = None,
) -> tuple[int, Any]:
    """POST ``body`` as JSON to ``path``; the HTTP status and the decoded JSON reply (a reply
    that is not JSON: ``{"message": its text}``). ``timeout``: this request's bound, if not
    the client's. :class:`HTTPFailure` if no whole reply came."""
    payload = _payload(body)
    request = client.member.request(path, headers, payload)
    progress = _Progress()
    seconds = client.timeout if timeout is None else timeout
    reply = await _within(seconds, _apost(client, request, payload, progress), progress)
    return reply.decoded()


async def _astream(
    client: AsyncClient,
    path: str,
    request: h11.Request,
    payload: bytes,
    stream: LineStream,
    progress: _Progress,
) -> _AsyncConnection:
    """A streaming call's connection, its request sent and its reply's head read (200)."""
    connection = await client.connect(stream)
    try:
        await connection.send(request, payload, progress)
        head = await connection.head()
        if head.status != 200:
            raise StreamRefused(path, head.status, (await connection.reply()).text())
    except BaseException:
        connection.close()
        raise
    return connection


@contextlib.asynccontextmanager
async def astream_lines(
    client: AsyncClient,
    path: str,
    bodies: Sequence[Any],
    headers: dict[str, str],
    stream: LineStream,
) -> AsyncIterator[LineStream]:
    """POST ``bodies`` (JSON messages, one after the other) to ``path`` and yield ``stream``
    with the reply's lines as they come, without a read timeout (a watch waits as long as
    nothing changes); the request ends with the block, its connection closed.
    :class:`StreamRefused` if the member answers with another status than 200."""
    payload = _messages(bodies)
    request = client.member.request(path, headers, payload)
    if client._closed:
        raise HTTPFailure("the client is closed", not_sent=True)
    progress = _Progress()
    connection = await _within(
        client.timeout, _astream(client, path, request, payload, stream, progress), progress
    )
    if client._closed:  # closed while the stream opened, unseen by the close
        connection.close()
        raise HTTPFailure("the client is closed")
    client._streams.add(connection)
    try:
        stream.lines = connection.lines()
        yield stream
    finally:
        client._streams.discard(connection)
        connection.close()


async def aclose_client(client: AsyncClient) -> None:
    await client.close()
