"""The segmented lock, as every backend must keep it (asyncio source of the blocking twin).

A segmented lock of K segments is K mutexes named ``NAME#i/K``: one holder per segment, each
hold on the segment it got, with that segment's fencing token; a waiter queues on every
segment it may take at once and takes the first one freed.
"""

from __future__ import annotations

import pytest

from tumbler import AcquireTimeout, ClientClosed, InvalidLockName
from tumbler._async.client import AsyncLocks
from tumbler._async.hold import AsyncSegmentHold
from tumbler._async.primitives import AsyncSegmentedLock

from ..compat import AsyncConnect, abackground, aeventually, agather

pytestmark = pytest.mark.asyncio  # async-only


async def take_every_segment(lock: AsyncSegmentedLock) -> list[AsyncSegmentHold]:
    """Acquire each segment of ``lock`` (one task may hold several); the holds."""
    holds = []
    for _ in range(lock.segments):
        assert await lock.acquire(timeout=0)
        assert lock.hold is not None
        holds.append(lock.hold)
    return holds


async def waiters_on(locks: AsyncLocks, lock: AsyncSegmentedLock) -> list[int]:
    return [(await locks.status(name)).waiters for name in lock.segment_names]


async def test_a_segmented_lock_admits_one_holder_per_segment(aconnect: AsyncConnect) -> None:
    first, second = await aconnect(), await aconnect()
    lock = first.segmented("stock", 3)
    assert lock.segment_names == ("stock#0/3", "stock#1/3", "stock#2/3")
    assert not await lock.locked()
    holds = await take_every_segment(lock)
    assert {hold.segment for hold in holds} == {0, 1, 2}
    for hold in holds:
        assert hold.segment is not None
        assert hold.name == lock.segment_names[hold.segment]
        state = await second.status(hold.name)
        assert [holder.token for holder in state.holders] == [hold.token]
    assert await lock.locked()
    other = second.segmented("stock", 3)
    assert not await other.acquire(timeout=0)
    assert not await lock.acquire(timeout=0)  # a holder's own segments are taken too
    freed = holds[1]
    await freed.release()
    assert not await lock.locked()
    assert await other.acquire(timeout=0)
    assert other.hold is not None
    assert other.hold.segment == freed.segment
    assert other.hold.token > freed.token
    assert await second.status_all() != []
    await other.release()
    for hold in (holds[0], holds[2]):
        await hold.release()
    assert await second.status_all() == []


async def test_a_waiter_queues_on_every_segment_and_takes_the_first_freed(
    aconnect: AsyncConnect,
) -> None:
    holder, waiter = await aconnect(), await aconnect()
    held = holder.segmented("counter", 3)
    holds = await take_every_segment(held)
    wanted = waiter.segmented("counter", 3)

    async def take() -> AsyncSegmentHold | None:
        assert await wanted.acquire(timeout=20)
        return wanted.hold

    pending = abackground(take)

    async def queued_on_all() -> bool:
        return await waiters_on(holder, held) == [1, 1, 1]

    await aeventually(queued_on_all, "the waiter is in line for every segment")
    freed = next(hold for hold in holds if hold.segment == 2)
    await freed.release()
    taken = await pending.result()
    assert taken.held
    assert taken.segment == 2
    assert taken.token > freed.token
    # it left the other segments' lines as it took this one
    assert await waiters_on(holder, held) == [0, 0, 0]
    assert [len((await holder.status(name)).holders) for name in held.segment_names] == [1, 1, 1]


async def test_an_acquire_takes_only_the_segments_it_may(aconnect: AsyncConnect) -> None:
    first, second = await aconnect(), await aconnect()
    lock = first.segmented("quota", 4)
    assert await lock.acquire(segments=[2])
    assert lock.hold is not None
    assert lock.hold.segment == 2
    other = second.segmented("quota", 4)
    assert not await other.acquire(timeout=0, segments=[2])
    assert not await other.acquire(timeout=0.2, segments=[2])
    assert await second.status_all() != []
    assert (await second.status("quota#2/4")).waiters == 0
    assert await other.acquire(timeout=0, segments=(2, 3))
    assert other.hold is not None
    assert other.hold.segment == 3
    await other.release()
    await lock.release()


async def test_a_timed_out_waiter_leaves_no_entry_on_any_segment(aconnect: AsyncConnect) -> None:
    holder, waiter = await aconnect(), await aconnect()
    held = holder.segmented("busy", 2)
    await take_every_segment(held)
    assert not await waiter.segmented("busy", 2).acquire(timeout=0.3)
    with pytest.raises(AcquireTimeout) as caught:
        async with waiter.segmented("busy", 2, timeout=0.1):
            pytest.fail("entered a segmented lock whose every segment is held elsewhere")
    assert caught.value.lock_name == "busy"
    assert await waiters_on(holder, held) == [0, 0]


async def test_segments_exclude_under_concurrency(aconnect: AsyncConnect) -> None:
    clients = [await aconnect() for _ in range(4)]
    inside: dict[int, int] = {0: 0, 1: 0}
    most_inside = 0
    tokens: dict[int, list[int]] = {0: [], 1: []}

    async def worker(locks: AsyncLocks) -> None:
        nonlocal most_inside
        lock = locks.segmented("shards", 2)
        for _ in range(8):
            async with lock as hold:
                assert hold.segment is not None
                inside[hold.segment] += 1
                most_inside = max(most_inside, *inside.values())
                tokens[hold.segment].append(hold.token)
                inside[hold.segment] -= 1

    await agather(*[lambda c=c: worker(c) for c in clients])
    assert most_inside == 1
    assert len(tokens[0]) + len(tokens[1]) == 32
    for granted in tokens.values():
        assert granted == sorted(granted)
        assert len(set(granted)) == len(granted)


async def test_acquisitions_spread_over_the_segments(aconnect: AsyncConnect) -> None:
    locks = await aconnect()
    lock = locks.segmented("spread", 4)
    taken = set()
    for _ in range(30):
        async with lock as hold:
            taken.add(hold.segment)
    # each acquire starts at a random segment: 30 on the same one has odds of 4 in 4**30
    assert len(taken) > 1


async def test_a_name_without_room_for_the_segment_suffix_is_refused(
    aconnect: AsyncConnect,
) -> None:
    locks = await aconnect()
    name = "x" * 252  # 255 bytes at most: "#3/4" makes 256
    async with locks.lock(name, timeout=0) as hold:
        assert hold.held
    with pytest.raises(InvalidLockName, match="at most 255 UTF-8 bytes"):
        locks.segmented(name, 4)
    assert await locks.status_all() == []


async def test_close_ends_a_segmented_wait_and_leaves_no_entry(aconnect: AsyncConnect) -> None:
    holder, waiter = await aconnect(), await aconnect()
    held = holder.segmented("closing", 2)
    await take_every_segment(held)
    wanted = waiter.segmented("closing", 2)

    async def take() -> bool:
        return await wanted.acquire(timeout=20)

    pending = abackground(take)

    async def queued_on_all() -> bool:
        return await waiters_on(holder, held) == [1, 1]

    await aeventually(queued_on_all, "the waiter is in line for both segments")
    await waiter.close()
    with pytest.raises(ClientClosed):
        await pending.result()
    assert await waiters_on(holder, held) == [0, 0]
