"""The kit's LockStateBuilder: ``inspect``'s picture of one name from its live entries; and
``states_of``, the pictures of several names from the rows a store read."""

from __future__ import annotations

from decimal import Decimal

from tumbler.backends.contract import HolderInfo, LockState
from tumbler.backends.kit import LockStateBuilder
from tumbler.backends.kit.state import states_of


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


def test_rows_of_several_names_become_a_state_each_in_the_order_the_names_come() -> None:
    """As PostgreSQL and MySQL read them: ``(name, shared, lim, token, expires_in, holder)``;
    MySQL gives a name as bytes, its flags as numbers and its seconds as a decimal."""
    rows = [
        (b"b", 1, 2, 7, Decimal("2.5"), "x"),
        (b"b", 1, 2, None, Decimal("1"), "y"),
        ("a", False, 1, 3, 4.0, "z"),
        ("a", False, 1, 5, None, ""),  # not written by tumbler: counted, nothing else
    ]
    assert states_of(rows) == [
        LockState("b", (HolderInfo(7, True, 2.5, "x"),), 1, 2),
        LockState("a", (HolderInfo(3, False, 4.0, "z"),), 0, None, 1),
    ]
    assert states_of([]) == []
