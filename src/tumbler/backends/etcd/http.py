"""The one seam between the etcd backend and its HTTP client (httpx): every request the
gateway client makes goes through these functions, in both flavours, so that another
maintained client can take httpx's place here alone.

``aopen_client``/``open_client`` make a client for one member's base URL; ``apost``/``post``
send one JSON request and return the status and the decoded reply; ``astream_lines`` /
``stream_lines`` open a long request (a watch) whose body is one or more JSON messages and
whose reply is read line by line, and close it when the block ends (the gateway cannot cancel
a watch: closing its connection does); ``interrupt`` ends such a read from any thread;
``aclose_client``/``close_client`` close a client. A streaming body is sent whole, padded so
that the gateway reads all of it (:data:`UNREAD_BODY`). The generator of the blocking twin
renames each ``a`` name to the other (tools/generate_sync.py reads ``SYNC_RENAMES``).
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import h11
import httpcore
import httpx

__all__ = [
    "HTTPFailure",
    "aclose_client",
    "aopen_client",
    "apost",
    "astream_lines",
    "LineStream",
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

#: what the client raises when a member cannot be reached or stops answering
HTTPFailure = httpx.HTTPError


def not_sent(failure: Exception) -> bool:
    """Whether a request that failed with ``failure`` surely did not reach the member: its
    connection could not be made, or the HTTP/1.1 layer refused to write the request (h11
    checks each part before it writes a byte of it)."""
    return isinstance(failure, (httpx.ConnectError, httpx.ConnectTimeout, httpx.LocalProtocolError))


@contextlib.contextmanager
def _broken_connections() -> Iterator[None]:
    """A pooled connection that h11 cannot write a request on, as ``httpx.LocalProtocolError``
    (a request surely not sent, on a connection httpcore has dropped by then), not as a bug.

    httpcore hands such a connection out when an interrupt (SIGINT, a signal handler's
    exception) landed in the middle of its bookkeeping after the connection's last reply:
    before h11 began its next cycle it refuses the request (``h11.LocalProtocolError``;
    encode/httpx#2834), and halfway through that cycle's start it has no writer for it and
    fails an assertion. Either way nothing of the request was written: h11 checks the event
    before it writes a byte."""
    try:
        yield
    except h11.LocalProtocolError as refusal:
        raise httpx.LocalProtocolError(str(refusal)) from refusal
    except AssertionError as broken:
        if not _raised_by_h11(broken):
            raise
        raise httpx.LocalProtocolError(f"the connection was left unusable: {broken!r}") from broken


def _raised_by_h11(error: BaseException) -> bool:
    frame = error.__traceback__
    if frame is None:
        return False
    while frame.tb_next is not None:
        frame = frame.tb_next
    return str(frame.tb_frame.f_globals.get("__name__", "")).startswith("h11.")


def _options(base_url: str, tls: ssl.SSLContext | None, timeout: float) -> dict[str, Any]:
    options: dict[str, Any] = {"base_url": base_url, "timeout": timeout}
    if tls is not None:
        options["verify"] = tls
    return options


class _ClosedWhenCancelled(httpcore.AsyncNetworkStream):
    """A connection whose TLS handshake, cancelled, closes it: httpcore closes it when the
    handshake fails but not when the task is cancelled meanwhile, and the socket would be
    left open for the garbage collector to find."""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            return await self._stream.start_tls(ssl_context, server_hostname, timeout)
        except BaseException:
            await self._stream.aclose()
            raise

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _ClosingBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, its connections :class:`_ClosedWhenCancelled`."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend) -> None:
        self._backend = backend

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        return _ClosedWhenCancelled(await self._backend.connect_tcp(*args, **kwargs))

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        return _ClosedWhenCancelled(await self._backend.connect_unix_socket(*args, **kwargs))

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def aopen_client(base_url: str, tls: ssl.SSLContext | None, timeout: float) -> Any:
    """An asyncio client for one member (``http[s]://HOST:PORT``); requests time out after
    ``timeout`` seconds without progress."""
    client = httpx.AsyncClient(**_options(base_url, tls, timeout))
    # httpx takes no network backend: its pool's is wrapped, for the connections it makes
    transport: Any = client._transport
    pool = transport._pool
    pool._network_backend = _ClosingBackend(pool._network_backend)
    return client


def open_client(base_url: str, tls: ssl.SSLContext | None, timeout: float) -> Any:
    """The blocking twin of :func:`aopen_client`."""
    return httpx.Client(**_options(base_url, tls, timeout))


def _decoded(reply: httpx.Response) -> tuple[int, Any]:
    try:
        return reply.status_code, reply.json()
    except ValueError:
        return reply.status_code, {"message": reply.text}


def _timeout(client: Any, timeout: float | None) -> Any:
    return client.timeout if timeout is None else httpx.Timeout(timeout)


async def apost(
    client: Any, path: str, body: Any, headers: dict[str, str], timeout: float | None = None
) -> tuple[int, Any]:
    """POST ``body`` as JSON to ``path``; the HTTP status and the decoded JSON reply.
    ``timeout``: this request's bound, if not the client's."""
    with _broken_connections():
        reply = await client.post(
            path, json=body, headers=headers, timeout=_timeout(client, timeout)
        )
    return _decoded(reply)


def post(
    client: Any, path: str, body: Any, headers: dict[str, str], timeout: float | None = None
) -> tuple[int, Any]:
    """The blocking twin of :func:`apost`."""
    with _broken_connections():
        reply = client.post(path, json=body, headers=headers, timeout=_timeout(client, timeout))
    return _decoded(reply)


class LineStream:
    """A long reply to read (a watch), made before its request is sent, so that
    :func:`interrupt` ends it at any point from then on: before its connection is made, while
    the reply's head is awaited, or while its lines are read. ``lines`` is set once the head
    has come."""

    def __init__(self) -> None:
        self.lines: Any = None
        self._network: Any = None
        self._interrupted = False
        self._lock = threading.Lock()

    def _connected(self, network: Any) -> None:
        with self._lock:
            self._network = network
            interrupted = self._interrupted
        if interrupted:
            _shut_down(network)


def interrupt(stream: LineStream) -> None:
    """End ``stream`` now, from any thread: its socket is shut down, so the read under way
    (or the next, or the connection about to be made) fails at once. Never blocks."""
    with stream._lock:
        stream._interrupted = True
        network = stream._network
    if network is not None:
        _shut_down(network)


def _shut_down(network: Any) -> None:
    sock = network.get_extra_info("socket")
    if sock is None:
        return
    with contextlib.suppress(OSError):
        if isinstance(sock, ssl.SSLSocket):
            # the plain socket's call: an SSLSocket's own would unwrap it under the feet of
            # the reading thread
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        else:
            sock.shutdown(socket.SHUT_RDWR)  # also asyncio's view of its transport's socket


#: the connection events of httpcore's "trace" extension whose result is the connection
_CONNECTED = ("connection.connect_tcp.complete", "connection.start_tls.complete")


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


_JSON = {"Content-Type": "application/json"}


def _stream_options(
    client: Any, bodies: Sequence[Any], headers: dict[str, str], trace: Any
) -> dict[str, Any]:
    """What both flavours' streaming calls send: the messages, no read timeout, and the
    ``trace`` that hands the connection to its :class:`LineStream`."""
    return {
        "content": _messages(bodies),
        "headers": {**headers, **_JSON},
        "timeout": httpx.Timeout(client.timeout.connect, read=None),
        "extensions": {"trace": trace},
    }


def _refused(path: str, reply: httpx.Response) -> httpx.HTTPStatusError:
    return httpx.HTTPStatusError(
        f"{path}: {reply.status_code} {reply.text}", request=reply.request, response=reply
    )


@contextlib.asynccontextmanager
async def astream_lines(
    client: Any, path: str, bodies: Sequence[Any], headers: dict[str, str], stream: LineStream
) -> AsyncIterator[LineStream]:
    """POST ``bodies`` (JSON messages, one after the other) to ``path`` and yield ``stream``
    with the reply's lines as they come, without a read timeout (a watch waits as long as
    nothing changes); the request ends with the block."""

    async def trace(event: str, info: dict[str, Any]) -> None:
        if event in _CONNECTED:
            stream._connected(info["return_value"])

    options = _stream_options(client, bodies, headers, trace)
    with _broken_connections():
        async with client.stream("POST", path, **options) as reply:
            if reply.status_code != 200:
                await reply.aread()
                raise _refused(path, reply)
            stream.lines = reply.aiter_lines()
            yield stream


@contextlib.contextmanager
def stream_lines(
    client: Any, path: str, bodies: Sequence[Any], headers: dict[str, str], stream: LineStream
) -> Iterator[LineStream]:
    """The blocking twin of :func:`astream_lines`."""

    def trace(event: str, info: dict[str, Any]) -> None:
        if event in _CONNECTED:
            stream._connected(info["return_value"])

    options = _stream_options(client, bodies, headers, trace)
    with _broken_connections(), client.stream("POST", path, **options) as reply:
        if reply.status_code != 200:
            reply.read()
            raise _refused(path, reply)
        stream.lines = reply.iter_lines()
        yield stream


async def aclose_client(client: Any) -> None:
    await client.aclose()


def close_client(client: Any) -> None:
    client.close()
