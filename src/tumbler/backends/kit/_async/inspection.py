"""``inspect_all`` for a backend that can list its lock names and inspect each one.

A key-value or tree store (Redis keys, ZooKeeper children, etcd prefixes) has no query that
reads every lock at once; what it can do is list the names that may have entries, then read
each. The listing may include names whose entries have all run out since (or were never lock
entries): those are read too, found empty, and left out, so that ``inspect_all`` reports only
names with a holder or a waiter, as the contract says.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...contract import LockState


class AsyncInspectEachName:
    """Mixin: ``inspect_all()`` from ``lock_names()`` and ``inspect(name)``.

    A backend whose store reads every lock in one query (an SQL table) should write its own
    ``inspect_all`` instead: one read is both faster and a consistent picture, where this is
    one read per name, each consistent only with itself.
    """

    async def lock_names(self) -> Iterable[str]:
        """Every name that may have live entries (a superset is fine; order does not matter)."""
        raise NotImplementedError

    async def inspect(self, name: str) -> LockState:
        raise NotImplementedError

    async def inspect_all(self) -> list[LockState]:
        """The state of every lock name with a holder, a waiter or a lapsed grant (which
        closes its name as a holder does), sorted by name."""
        states = []
        for name in sorted(set(await self.lock_names())):
            state = await self.inspect(name)
            if state.holders or state.waiters or state.lapsed:
                states.append(state)
        return states
