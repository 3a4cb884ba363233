"""Building ``inspect``'s :class:`~tumbler.backends.contract.LockState` from stored entries.

Every backend that stores entries with leases reports them alike: the grants as holders with
the seconds left on their leases, the waiters as a count, and the shared limit when the live
shared entries agree on one. :class:`LockStateBuilder` says that once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..contract import HolderInfo, LockState


class LockStateBuilder:
    """Collects one lock name's live entries, then builds its ``LockState``.

    Holders are reported in the order their entries are added; waiters only counted.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._holders: list[HolderInfo] = []
        self._lapsed: list[HolderInfo] = []
        self._waiters = 0
        self._limits: set[int] = set()
        #: entries the backend could not read (see ``LockState.malformed``)
        self.malformed = 0

    def add(
        self,
        *,
        token: int | None,
        shared: bool,
        limit: int,
        expires_in: float,
        holder: str,
        session: bool = False,
        lapsed: bool = False,
    ) -> None:
        """One live entry: a grant (``token`` set) or a waiter (``token`` None).

        ``expires_in`` is the seconds left on the entry's lease; for a grant that lives with
        its holder's session (``session``), how long it would outlive a dead holder (the
        session timeout): see :class:`~tumbler.backends.contract.HolderInfo`. A ``lapsed``
        grant (kept for its lock-delay) has the delay left as its ``expires_in``.
        """
        if shared:
            self._limits.add(limit)
        if token is None:
            self._waiters += 1
        elif lapsed:
            self._lapsed.append(HolderInfo(token, shared, expires_in, holder, session))
        else:
            self._holders.append(HolderInfo(token, shared, expires_in, holder, session))

    @property
    def holders(self) -> tuple[HolderInfo, ...]:
        return tuple(self._holders)

    @property
    def waiters(self) -> int:
        return self._waiters

    @property
    def limit(self) -> int | None:
        """The shared entries' limit, if they agree on one (None if none or several)."""
        return next(iter(self._limits)) if len(self._limits) == 1 else None

    def build(self) -> LockState:
        return LockState(
            self.name,
            self.holders,
            self.waiters,
            self.limit,
            lapsed=tuple(self._lapsed),
            malformed=self.malformed,
        )


def states_of(rows: Iterable[Sequence[Any]]) -> list[LockState]:
    """The ``LockState`` of each name among ``rows``, the live entries a store read: ``(name,
    shared, lim, token, expires_in, holder[, lock_delay])``, in the order the names first
    come. A row whose ``expires_in`` is None is one the store could not read as an entry (not
    written by tumbler): counted as malformed, nothing else. A name may come as bytes (its
    UTF-8).

    ``lock_delay`` (seconds, 0 if left out): the part of ``expires_in`` that comes after the
    entry's lease, for a store that keeps a grant's row its lock-delay longer than its lease
    (see the contract's "Lock-delay"). A grant with less than that left is lapsed, the rest
    of ``expires_in`` its delay left; any other entry has ``expires_in - lock_delay`` left
    on its lease. One reading of the store's clock thus tells both."""
    builders: dict[str, LockStateBuilder] = {}
    for name, shared, lim, token, expires_in, holder, *rest in rows:
        text = name.decode() if isinstance(name, bytes) else name
        builder = builders.get(text)
        if builder is None:
            builder = builders[text] = LockStateBuilder(text)
        if expires_in is None:
            builder.malformed += 1
            continue
        left = float(expires_in)
        lease_left = left - float(rest[0]) if rest else left
        lapsed = token is not None and lease_left <= 0
        builder.add(
            token=token,
            shared=bool(shared),
            limit=lim,
            expires_in=left if lapsed else lease_left,
            holder=holder,
            lapsed=lapsed,
        )
    return [builder.build() for builder in builders.values()]
