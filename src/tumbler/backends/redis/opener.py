"""How ``connect`` opens the Redis backend: its descriptor's ``opener``.

Kept apart from :mod:`.common`, which both flavours import, so that nothing the flavours
import imports them back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._url import BackendURL
from ..kit import astart_or_close, start_or_close
from ._async.backend import AsyncRedisBackend
from ._sync.backend import RedisBackend
from .clients import config_from_client
from .common import parse_config

if TYPE_CHECKING:
    from ..descriptor import BackendOpener, ClientOpener

__all__ = ["open_async", "open_client_async", "open_client_sync", "open_sync"]


def open_sync(url: BackendURL) -> RedisBackend:
    config = parse_config(url)
    backend = RedisBackend(config)
    return start_or_close(backend)


async def open_async(url: BackendURL) -> AsyncRedisBackend:
    config = parse_config(url)
    backend = AsyncRedisBackend(config)
    return await astart_or_close(backend)


def open_client_sync(client: object, **options: object) -> RedisBackend:
    """The backend on the servers a blocking ``redis.Redis`` (Sentinel-managed too) or
    ``RedisCluster`` connects to, over connections of its own made as the client makes its
    (see :mod:`.clients`); ``options``: the URL's that a client does not say
    (``clients.OPTIONS``)."""
    config = config_from_client(client, asyncio=False, **options)
    return start_or_close(RedisBackend(config))


async def open_client_async(client: object, **options: object) -> AsyncRedisBackend:
    """:func:`open_client_sync` for tumbler's asyncio flavour."""
    config = config_from_client(client, asyncio=True, **options)
    return await astart_or_close(AsyncRedisBackend(config))


if TYPE_CHECKING:
    # mypy checks here that this module has what tumbler.connect calls
    from . import opener as _this

    _checked: BackendOpener = _this
    _checked_clients: ClientOpener = _this
