"""tumbler for asyncio: the same API as ``tumbler``, with ``async``/``await``::

    import tumbler.aio
    async with await tumbler.aio.connect() as locks:
        async with locks.lock("orders:42", ttl=30, timeout=5) as hold:
            hold.token

Ownership and re-entrancy are per task. Cancelling a task at any await leaves nothing behind:
a cancelled waiter withdraws from the line, and a cancelled release still completes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from . import _core as core
from . import _observing
from ._async.changes import AsyncStateChanges
from ._async.client import AsyncLocks
from ._async.election import AsyncElection, AsyncLeaderChanges, AsyncLeadership
from ._async.hold import AsyncHold, AsyncMultiHold, AsyncSegmentHold
from ._async.primitives import (
    AsyncLock,
    AsyncMultiLock,
    AsyncReadLock,
    AsyncRLock,
    AsyncRWLock,
    AsyncSegmentedLock,
    AsyncSemaphore,
)
from ._core import DEFAULT_TTL, validate_holder, validate_ttl
from ._observing import checked

if TYPE_CHECKING:
    from .backends.contract import AsyncBackend

__all__ = [
    "AsyncElection",
    "AsyncHold",
    "AsyncLeaderChanges",
    "AsyncLeadership",
    "AsyncSegmentHold",
    "AsyncLock",
    "AsyncLocks",
    "AsyncMultiHold",
    "AsyncMultiLock",
    "AsyncRLock",
    "AsyncRWLock",
    "AsyncReadLock",
    "AsyncSegmentedLock",
    "AsyncSemaphore",
    "AsyncStateChanges",
    "connect",
]


async def connect(
    url: str | object | None = None,
    *,
    default_ttl: core.Seconds = DEFAULT_TTL,
    observers: Iterable[_observing.Observer] = (),
    holder: str | None = None,
    **options: object,
) -> AsyncLocks:
    """Open an asyncio lock client; the arguments are those of ``tumbler.connect``, and a
    client in place of a URL is an asyncio one (``redis.asyncio.Redis``,
    ``redis.asyncio.cluster.RedisCluster``, ``psycopg_pool.AsyncConnectionPool``; a kazoo
    ``KazooClient``, which has one flavour, goes to either)."""
    from ._connect import backend_module, client_module

    default_ttl = validate_ttl(default_ttl)  # before anything is opened or created
    watchers = checked(observers)
    if holder is not None:
        holder = validate_holder(holder)
    backend: AsyncBackend
    if url is None or isinstance(url, str):
        module, parsed = backend_module(url, options)
        backend = await module.open_async(parsed, **options)
    else:
        backend = await client_module(url, options).open_client_async(url, **options)
    try:
        return AsyncLocks(backend, default_ttl=default_ttl, observers=watchers, holder=holder)
    except BaseException:
        await backend.close()
        raise
