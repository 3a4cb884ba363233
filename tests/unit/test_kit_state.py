"""The kit's LockStateBuilder: ``inspect``'s picture of one name from its live entries."""

from __future__ import annotations

from tumbler.backends.contract import HolderInfo, LockState
from tumbler.backends.kit import LockStateBuilder


def test_grants_are_holders_in_order_and_waiters_are_counted() -> None:
    state = LockStateBuilder("orders:42")
    state.add(token=7, shared=True, limit=3, expires_in=2.5, holder="a")
    state.add(token=None, shared=True, limit=3, expires_in=1.0, holder="b")
    state.add(token=9, shared=True, limit=3, expires_in=4.0, holder="c")
    assert state.build() == LockState(
        "orders:42", (HolderInfo(7, True, 2.5, "a"), HolderInfo(9, True, 4.0, "c")), 1, 3
    )


def test_the_limit_is_reported_only_when_the_shared_entries_agree_on_one() -> None:
    nothing = LockStateBuilder("n")
    assert nothing.build() == LockState("n", (), 0, None)
    exclusive = LockStateBuilder("n")
    exclusive.add(token=1, shared=False, limit=1, expires_in=1.0, holder="a")
    assert exclusive.limit is None
    readers = LockStateBuilder("n")
    readers.add(token=1, shared=True, limit=0, expires_in=1.0, holder="a")
    assert readers.limit == 0
    readers.add(token=None, shared=True, limit=2, expires_in=1.0, holder="b")
    assert readers.limit is None
