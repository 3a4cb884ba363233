"""The one seam between the etcd backend and its HTTP client (httpx): every request the
gateway client makes goes through these functions, in both flavours, so that another
maintained client can take httpx's place here alone.

``aopen_client``/``open_client`` make a client for one member's base URL; ``apost``/``post``
send one JSON request and return the status and the decoded reply; ``astream_lines`` /
``stream_lines`` open a long request (a watch) whose reply is read line by line, and close it
when the block ends (the gateway cannot cancel a watch: closing its connection does);
``aclose_client``/``close_client`` close a client. The generator of the blocking twin renames
each ``a`` name to the other (tools/generate_sync.py).
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

__all__ = [
    "HTTPFailure",
    "aclose_client",
    "aopen_client",
    "apost",
    "astream_lines",
    "close_client",
    "not_sent",
    "open_client",
    "post",
    "stream_lines",
]

#: what the client raises when a member cannot be reached or stops answering
HTTPFailure = httpx.HTTPError


def not_sent(failure: Exception) -> bool:
    """Whether a request that failed with ``failure`` surely did not reach the member (its
    connection could not be made)."""
    return isinstance(failure, (httpx.ConnectError, httpx.ConnectTimeout))


def _options(base_url: str, tls: ssl.SSLContext | None, timeout: float) -> dict[str, Any]:
    options: dict[str, Any] = {"base_url": base_url, "timeout": timeout}
    if tls is not None:
        options["verify"] = tls
    return options


def aopen_client(base_url: str, tls: ssl.SSLContext | None, timeout: float) -> Any:
    """An asyncio client for one member (``http[s]://HOST:PORT``); requests time out after
    ``timeout`` seconds without progress."""
    return httpx.AsyncClient(**_options(base_url, tls, timeout))


def open_client(base_url: str, tls: ssl.SSLContext | None, timeout: float) -> Any:
    """The blocking twin of :func:`aopen_client`."""
    return httpx.Client(**_options(base_url, tls, timeout))


def _decoded(reply: httpx.Response) -> tuple[int, Any]:
    try:
        return reply.status_code, reply.json()
    except ValueError:
        return reply.status_code, {"message": reply.text}


async def apost(client: Any, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    """POST ``body`` as JSON to ``path``; the HTTP status and the decoded JSON reply."""
    return _decoded(await client.post(path, json=body, headers=headers))


def post(client: Any, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    """The blocking twin of :func:`apost`."""
    return _decoded(client.post(path, json=body, headers=headers))


@contextlib.asynccontextmanager
async def astream_lines(
    client: Any, path: str, body: Any, headers: dict[str, str]
) -> AsyncIterator[AsyncIterator[str]]:
    """POST ``body`` to ``path`` and yield the reply's lines as they come, without a read
    timeout (a watch waits as long as nothing changes); the request ends with the block."""
    timeout = httpx.Timeout(client.timeout.connect, read=None)
    async with client.stream("POST", path, json=body, headers=headers, timeout=timeout) as reply:
        if reply.status_code != 200:
            await reply.aread()
            raise httpx.HTTPStatusError(
                f"{path}: {reply.status_code} {reply.text}", request=reply.request, response=reply
            )
        yield reply.aiter_lines()


@contextlib.contextmanager
def stream_lines(
    client: Any, path: str, body: Any, headers: dict[str, str]
) -> Iterator[Iterator[str]]:
    """The blocking twin of :func:`astream_lines`."""
    timeout = httpx.Timeout(client.timeout.connect, read=None)
    with client.stream("POST", path, json=body, headers=headers, timeout=timeout) as reply:
        if reply.status_code != 200:
            reply.read()
            raise httpx.HTTPStatusError(
                f"{path}: {reply.status_code} {reply.text}", request=reply.request, response=reply
            )
        yield reply.iter_lines()


async def aclose_client(client: Any) -> None:
    await client.aclose()


def close_client(client: Any) -> None:
    client.close()
