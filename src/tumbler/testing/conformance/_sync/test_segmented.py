# Generated from src/tumbler/testing/conformance/_async/test_segmented.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""The segmented lock, as every backend must keep it (asyncio source of the blocking twin).

A segmented lock of K segments is K mutexes named ``NAME#i/K``: one holder per segment, each
hold on the segment it got, with that segment's fencing token; a waiter queues on every
segment it may take at once and takes the first one freed.
"""

from __future__ import annotations

import pytest

from tumbler import AcquireTimeout, ClientClosed, InvalidLockName
from tumbler._sync.client import Locks
from tumbler._sync.hold import SegmentHold
from tumbler._sync.primitives import SegmentedLock

from ..compat import Connect, background, eventually, gather


def take_every_segment(lock: SegmentedLock) -> list[SegmentHold]:
    """Acquire each segment of ``lock`` (one task may hold several); the holds."""
    holds = []
    for _ in range(lock.segments):
        assert lock.acquire(timeout=0)
        assert lock.hold is not None
        holds.append(lock.hold)
    return holds


def waiters_on(locks: Locks, lock: SegmentedLock) -> list[int]:
    return [(locks.status(name)).waiters for name in lock.segment_names]


def test_a_segmented_lock_admits_one_holder_per_segment(connect: Connect) -> None:
    first, second = connect(), connect()
    lock = first.segmented("stock", 3)
    assert lock.segment_names == ("stock#0/3", "stock#1/3", "stock#2/3")
    assert not lock.locked()
    holds = take_every_segment(lock)
    assert {hold.segment for hold in holds} == {0, 1, 2}
    for hold in holds:
        assert hold.segment is not None
        assert hold.name == lock.segment_names[hold.segment]
        state = second.status(hold.name)
        assert [holder.token for holder in state.holders] == [hold.token]
    assert lock.locked()
    other = second.segmented("stock", 3)
    assert not other.acquire(timeout=0)
    assert not lock.acquire(timeout=0)  # a holder's own segments are taken too
    freed = holds[1]
    freed.release()
    assert not lock.locked()
    assert other.acquire(timeout=0)
    assert other.hold is not None
    assert other.hold.segment == freed.segment
    assert other.hold.token > freed.token
    assert second.status_all() != []
    other.release()
    for hold in (holds[0], holds[2]):
        hold.release()
    assert second.status_all() == []


def test_a_waiter_queues_on_every_segment_and_takes_the_first_freed(
    connect: Connect,
) -> None:
    holder, waiter = connect(), connect()
    held = holder.segmented("counter", 3)
    holds = take_every_segment(held)
    wanted = waiter.segmented("counter", 3)

    def take() -> SegmentHold | None:
        assert wanted.acquire(timeout=20)
        return wanted.hold

    pending = background(take)

    def queued_on_all() -> bool:
        return waiters_on(holder, held) == [1, 1, 1]

    eventually(queued_on_all, "the waiter is in line for every segment")
    freed = next(hold for hold in holds if hold.segment == 2)
    freed.release()
    taken = pending.result()
    assert taken.held
    assert taken.segment == 2
    assert taken.token > freed.token
    # it left the other segments' lines as it took this one
    assert waiters_on(holder, held) == [0, 0, 0]
    assert [len((holder.status(name)).holders) for name in held.segment_names] == [1, 1, 1]


def test_an_acquire_takes_only_the_segments_it_may(connect: Connect) -> None:
    first, second = connect(), connect()
    lock = first.segmented("quota", 4)
    assert lock.acquire(segments=[2])
    assert lock.hold is not None
    assert lock.hold.segment == 2
    other = second.segmented("quota", 4)
    assert not other.acquire(timeout=0, segments=[2])
    assert not other.acquire(timeout=0.2, segments=[2])
    assert second.status_all() != []
    assert (second.status("quota#2/4")).waiters == 0
    assert other.acquire(timeout=0, segments=(2, 3))
    assert other.hold is not None
    assert other.hold.segment == 3
    other.release()
    lock.release()


def test_a_timed_out_waiter_leaves_no_entry_on_any_segment(connect: Connect) -> None:
    holder, waiter = connect(), connect()
    held = holder.segmented("busy", 2)
    take_every_segment(held)
    assert not waiter.segmented("busy", 2).acquire(timeout=0.3)
    with pytest.raises(AcquireTimeout) as caught:
        with waiter.segmented("busy", 2, timeout=0.1):
            pytest.fail("entered a segmented lock whose every segment is held elsewhere")
    assert caught.value.lock_name == "busy"
    assert waiters_on(holder, held) == [0, 0]


def test_segments_exclude_under_concurrency(connect: Connect) -> None:
    clients = [connect() for _ in range(4)]
    inside: dict[int, int] = {0: 0, 1: 0}
    most_inside = 0
    tokens: dict[int, list[int]] = {0: [], 1: []}

    def worker(locks: Locks) -> None:
        nonlocal most_inside
        lock = locks.segmented("shards", 2)
        for _ in range(8):
            with lock as hold:
                assert hold.segment is not None
                inside[hold.segment] += 1
                most_inside = max(most_inside, *inside.values())
                tokens[hold.segment].append(hold.token)
                inside[hold.segment] -= 1

    gather(*[lambda c=c: worker(c) for c in clients])
    assert most_inside == 1
    assert len(tokens[0]) + len(tokens[1]) == 32
    for granted in tokens.values():
        assert granted == sorted(granted)
        assert len(set(granted)) == len(granted)


def test_acquisitions_spread_over_the_segments(connect: Connect) -> None:
    locks = connect()
    lock = locks.segmented("spread", 4)
    taken = set()
    for _ in range(30):
        with lock as hold:
            taken.add(hold.segment)
    # each acquire starts at a random segment: 30 on the same one has odds of 4 in 4**30
    assert len(taken) > 1


def test_a_name_without_room_for_the_segment_suffix_is_refused(
    connect: Connect,
) -> None:
    locks = connect()
    name = "x" * 252  # 255 bytes at most: "#3/4" makes 256
    with locks.lock(name, timeout=0) as hold:
        assert hold.held
    with pytest.raises(InvalidLockName, match="at most 255 UTF-8 bytes"):
        locks.segmented(name, 4)
    assert locks.status_all() == []


def test_close_ends_a_segmented_wait_and_leaves_no_entry(connect: Connect) -> None:
    holder, waiter = connect(), connect()
    held = holder.segmented("closing", 2)
    take_every_segment(held)
    wanted = waiter.segmented("closing", 2)

    def take() -> bool:
        return wanted.acquire(timeout=20)

    pending = background(take)

    def queued_on_all() -> bool:
        return waiters_on(holder, held) == [1, 1]

    eventually(queued_on_all, "the waiter is in line for both segments")
    waiter.close()
    with pytest.raises(ClientClosed):
        pending.result()
    assert waiters_on(holder, held) == [0, 0]
