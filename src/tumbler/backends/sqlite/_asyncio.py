"""The SQLite backend's asyncio flavour: the kit's adapter (its calls on a thread of its own),
with the state watches that register the client's doorbell (see ``backend.py``, "Waking
state watchers"). Imported by ``opener.open_async`` only: the blocking flavour never loads
asyncio's side of the kit.
"""

from __future__ import annotations

from ..contract import STATE_TAG
from ..kit import AsyncMarkedWatch
from ..kit.adapter import AsyncAdapter
from .backend import WATCHER_TTL, SQLiteBackend


class AsyncSQLiteStateWatch(AsyncMarkedWatch):
    """:class:`~.backend.SQLiteStateWatch` for asyncio: it registers through the adapter's
    thread."""

    mark_life = WATCHER_TTL

    def __init__(self, adapter: SQLiteAdapter, name: str) -> None:
        super().__init__(adapter.clock, name, adapter.sqlite.hub, STATE_TAG)
        self._adapter = adapter

    async def _set_mark(self) -> None:
        await self._adapter.follow_state(self.name)


class SQLiteAdapter(AsyncAdapter):
    """``AsyncAdapter`` over :class:`~.backend.SQLiteBackend`, whose state watches register."""

    def __init__(self, backend: SQLiteBackend) -> None:
        super().__init__(backend, in_thread=True, hub=backend.hub)
        self.sqlite = backend

    # the kit's is a watch of the hub alone, which this one is not (it registers on entry)
    def watch_state(self, name: str) -> AsyncSQLiteStateWatch:  # type: ignore[override]
        return AsyncSQLiteStateWatch(self, name)

    async def follow_state(self, name: str) -> None:
        """:meth:`SQLiteBackend.follow_state`, on the adapter's thread."""
        await self._call(self.sqlite.follow_state, name)
