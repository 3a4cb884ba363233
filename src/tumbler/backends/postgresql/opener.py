"""How ``connect`` opens the PostgreSQL backend: its descriptor's
``opener``, and ``prepare``, which ``tumbler init`` runs.

Kept apart from :mod:`.common`, which both flavours import, so that nothing the flavours
import imports them back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._url import BackendURL
from ..kit import astart_or_close, start_or_close
from ._async.backend import AsyncPostgreSQLBackend
from ._sync.backend import PostgreSQLBackend
from .clients import config_from_pool
from .common import parse_config

if TYPE_CHECKING:
    from ..descriptor import BackendOpener, ClientOpener

__all__ = ["open_async", "open_client_async", "open_client_sync", "open_sync", "prepare"]


def prepare(url: BackendURL) -> str:
    """``tumbler init URL``: make the URL's schema, its tables, its token sequence and its
    functions if they are missing (what a client also does on first use; clients and
    ``init`` racing to do it take turns), and say which."""
    backend = PostgreSQLBackend(parse_config(url))
    try:
        made = backend.prepare()
    finally:
        backend.close()
    what = (
        f"{backend.sql.entries}, {backend.sql.evictions}, {backend.sql.names}, the sequence "
        f"{backend.sql.tokens} and the functions"
    )
    if made:
        return f"made {what}"
    return f"{what} are there already: nothing to make"


def open_sync(url: BackendURL) -> PostgreSQLBackend:
    return start_or_close(PostgreSQLBackend(parse_config(url)))


async def open_async(url: BackendURL) -> AsyncPostgreSQLBackend:
    return await astart_or_close(AsyncPostgreSQLBackend(parse_config(url)))


def open_client_sync(client: object, **options: object) -> PostgreSQLBackend:
    """The backend on the server a blocking psycopg ``ConnectionPool`` connects to, over
    connections of its own made as the pool makes its (see :mod:`.clients`); ``options``:
    the URL's that a pool does not say (``clients.OPTIONS``)."""
    config = config_from_pool(client, asyncio=False, **options)
    return start_or_close(PostgreSQLBackend(config))


async def open_client_async(client: object, **options: object) -> AsyncPostgreSQLBackend:
    """:func:`open_client_sync` for tumbler's asyncio flavour."""
    config = config_from_pool(client, asyncio=True, **options)
    return await astart_or_close(AsyncPostgreSQLBackend(config))


if TYPE_CHECKING:
    # mypy checks here that this module has what tumbler.connect calls
    from . import opener as _this

    _checked: BackendOpener = _this
    _checked_clients: ClientOpener = _this
