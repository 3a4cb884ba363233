"""Building ``inspect``'s :class:`~tumbler.backends.contract.LockState` from stored entries.

Every backend that stores entries with leases reports them alike: the grants as holders with
the seconds left on their leases, the waiters as a count, and the shared limit when the live
shared entries agree on one. :class:`LockStateBuilder` says that once.
"""

from __future__ import annotations

from ..contract import HolderInfo, LockState


class LockStateBuilder:
    """Collects one lock name's live entries, then builds its ``LockState``.

    Holders are reported in the order their entries are added; waiters only counted.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._holders: list[HolderInfo] = []
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
    ) -> None:
        """One live entry: a grant (``token`` set) or a waiter (``token`` None).

        ``expires_in`` is the seconds left on the entry's lease; for a grant that lives with
        its holder's session (``session``), how long it would outlive a dead holder (the
        session timeout): see :class:`~tumbler.backends.contract.HolderInfo`.
        """
        if shared:
            self._limits.add(limit)
        if token is None:
            self._waiters += 1
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
        return LockState(self.name, self.holders, self.waiters, self.limit, self.malformed)
