"""``states_of`` with a lock-delay column: a store that keeps a grant's row its lock-delay past
its lease (PostgreSQL, MySQL) gives each row's time left with the delay in it, and the delay;
the grants with less than their delay left are lapsed."""

from __future__ import annotations

from decimal import Decimal

from tumbler.backends.contract import HolderInfo, LockState
from tumbler.backends.kit.state import states_of


def test_a_grant_with_less_than_its_delay_left_is_lapsed_with_the_rest_of_it() -> None:
    rows = [
        ("x", False, 1, 7, 40.0, "live", 10.0),  # 30 s of lease, then 10 s of delay
        ("x", False, 1, 8, 4.0, "lapsed", 10.0),  # its lease ended 6 s ago
        ("x", False, 1, None, 2.0, "waiter", 0.0),
        ("y", True, 2, 9, Decimal("3.5"), "mysql", 3.5),  # its lease ends this very moment
        ("y", True, 2, 10, 1.0, "nodelay", 0.0),
    ]
    assert states_of(rows) == [
        LockState(
            "x",
            (HolderInfo(7, False, 30.0, "live"),),
            1,
            None,
            lapsed=(HolderInfo(8, False, 4.0, "lapsed"),),
        ),
        LockState(
            "y",
            (HolderInfo(10, True, 1.0, "nodelay"),),
            0,
            2,
            lapsed=(HolderInfo(9, True, 3.5, "mysql"),),
        ),
    ]


def test_rows_without_the_column_have_no_delay_and_unreadable_ones_stay_malformed() -> None:
    rows = [
        ("x", False, 1, 7, 2.0, "six columns"),
        ("x", False, 1, 8, None, "by hand", 600.0),
    ]
    assert states_of(rows) == [
        LockState("x", (HolderInfo(7, False, 2.0, "six columns"),), 0, None, malformed=1)
    ]
