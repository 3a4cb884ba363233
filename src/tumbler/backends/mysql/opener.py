"""How ``connect`` opens the MySQL / MariaDB backend: its descriptor's
``opener``, and ``prepare``, which ``tumbler init`` runs.

Kept apart from :mod:`.common`, which both flavours import, so that nothing the flavours
import imports them back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._url import BackendURL
from ..kit import astart_or_close, start_or_close
from ._async.backend import AsyncMySQLBackend
from ._sync.backend import MySQLBackend
from .common import parse_config

if TYPE_CHECKING:
    from ..descriptor import BackendOpener

__all__ = ["open_async", "open_sync", "prepare"]


def prepare(url: BackendURL) -> str:
    """``tumbler init URL``: make the tables and procedures of the URL's prefix if they are
    missing (what a client also does on first use; clients and ``init`` racing to do it take
    turns), and say which."""
    backend = MySQLBackend(parse_config(url))
    try:
        made = backend.prepare()
    finally:
        backend.close()
    what = f"the tables and procedures {backend.config.prefix}* in {backend.config.database}"
    if made:
        return f"made {what}"
    return f"{what} are there already: nothing to make"


def open_sync(url: BackendURL) -> MySQLBackend:
    return start_or_close(MySQLBackend(parse_config(url)))


async def open_async(url: BackendURL) -> AsyncMySQLBackend:
    return await astart_or_close(AsyncMySQLBackend(parse_config(url)))


if TYPE_CHECKING:
    # mypy checks here that this module has what tumbler.connect calls
    from . import opener as _this

    _checked: BackendOpener = _this
