"""How ``connect`` opens the ZooKeeper backend: its descriptor's ``opener``.

Kept apart from :mod:`.common`, which both flavours import, so that nothing the flavours
import imports them back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._url import BackendURL
from ..kit import astart_or_close, start_or_close
from ._async.backend import AsyncZooKeeperBackend
from ._sync.backend import ZooKeeperBackend
from .clients import config_from_client
from .common import parse_config

if TYPE_CHECKING:
    from ..descriptor import BackendOpener, ClientOpener

__all__ = ["open_async", "open_client_async", "open_client_sync", "open_sync"]


def open_sync(url: BackendURL) -> ZooKeeperBackend:
    backend = ZooKeeperBackend(parse_config(url))
    return start_or_close(backend)


async def open_async(url: BackendURL) -> AsyncZooKeeperBackend:
    backend = AsyncZooKeeperBackend(parse_config(url))
    return await astart_or_close(backend)


def open_client_sync(client: object, **options: object) -> ZooKeeperBackend:
    """The backend on the ensemble a kazoo ``KazooClient`` connects to, in a session of its
    own opened as the client opens its (see :mod:`.clients`); ``options``: the URL's that a
    client does not say (``clients.OPTIONS``)."""
    config = config_from_client(client, **options)
    return start_or_close(ZooKeeperBackend(config))


async def open_client_async(client: object, **options: object) -> AsyncZooKeeperBackend:
    """:func:`open_client_sync` for tumbler's asyncio flavour."""
    config = config_from_client(client, **options)
    return await astart_or_close(AsyncZooKeeperBackend(config))


if TYPE_CHECKING:
    # mypy checks here that this module has what tumbler.connect calls
    from . import opener as _this

    _checked: BackendOpener = _this
    _checked_clients: ClientOpener = _this
