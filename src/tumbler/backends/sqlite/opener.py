"""How ``connect`` opens the SQLite backend: its descriptor's ``opener``.

Kept apart from :mod:`.backend`, which the asyncio flavour (:mod:`._asyncio`) imports, so that
nothing the flavours import imports them back. The asyncio flavour is imported when it is
opened: a blocking program never loads asyncio's side of the kit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._url import BackendURL
from .backend import SQLiteBackend, open_sync

if TYPE_CHECKING:
    from ._asyncio import SQLiteAdapter

__all__ = ["open_async", "open_sync"]


async def open_async(url: BackendURL) -> SQLiteAdapter:
    # Opening may wait for another process's write lock: not on the event loop.
    import asyncio

    from ._asyncio import SQLiteAdapter

    backend = await asyncio.to_thread(SQLiteBackend, url)
    return SQLiteAdapter(backend)


if TYPE_CHECKING:
    # mypy checks here that this module has what tumbler.connect calls
    from ..descriptor import BackendOpener
    from . import opener as _this

    _checked: BackendOpener = _this
