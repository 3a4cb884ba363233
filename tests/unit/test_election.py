"""What an election reads of its lock: the leader, and the changes of leadership an observer
is given, over scripted readings of the lock (no backend involved)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

from tumbler import Leader, LeaderChanges, LockState, StateChanges
from tumbler.backends.contract import HolderInfo


def reading(*holders: tuple[int, str], shared: bool = False, waiters: int = 0) -> LockState:
    return LockState(
        "elected",
        tuple(HolderInfo(token, shared, 10.0, value) for token, value in holders),
        waiters,
    )


class Scripted:
    """Stands for a lock's state changes: the readings given, then the end."""

    def __init__(self, readings: list[LockState]) -> None:
        self._readings: Iterator[LockState] = iter(readings)
        self.closed = False

    def __next__(self) -> LockState:
        return next(self._readings)

    def close(self) -> None:
        self.closed = True


def test_the_leader_is_the_exclusive_holder() -> None:
    assert Leader.of(reading((7, "node-a"))) == Leader("node-a", 7)
    assert Leader.of(reading()) is None
    # shared holders lead nothing (the name was used as a read lock or semaphore)
    assert Leader.of(reading((3, "r1"), (4, "r2"), shared=True)) is None


def test_an_observer_is_given_each_change_of_leader_and_never_an_older_term() -> None:
    source = Scripted(
        [
            reading(),
            reading((5, "node-a")),
            reading((5, "node-a"), waiters=1),  # a candidate came: no change of leader
            reading((3, "node-z")),  # a member behind the others: an older term
            reading(),
            reading((7, "node-b")),
            reading((5, "node-a")),  # behind again
            reading((7, "node-b"), waiters=2),
        ]
    )
    changes = LeaderChanges(cast(StateChanges, source))
    assert list(changes) == [None, Leader("node-a", 5), None, Leader("node-b", 7)]
    changes.close()
    assert source.closed


def test_a_reading_differs_by_its_entries_not_the_time_left_on_leases() -> None:
    one = reading((5, "node-a"))
    later = LockState("elected", (HolderInfo(5, False, 2.5, "node-a"),), 0)
    assert one.same_entries(later)
    assert not one.same_entries(reading((6, "node-a")))
    assert not one.same_entries(reading((5, "node-a"), waiters=1))
    assert not one.same_entries(reading((5, "node-b")))
