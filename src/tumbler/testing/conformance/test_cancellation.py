"""asyncio cancellation: a task cancelled at any await leaves nothing behind in the backend.

redis-py #3847 left a lock stuck when release() was cancelled; tumbler's release runs to its
end anyway, and a cancelled acquire withdraws its waiter entry (or a grant whose reply the
cancellation cut off).
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from tumbler.aio import AsyncLocks

from .compat import AsyncConnect, aeventually

pytestmark = [pytest.mark.tumbler_connection, pytest.mark.asyncio]


async def nothing_left(locks: AsyncLocks) -> bool:
    return await locks.status_all() == []


@pytest.mark.parametrize("fair", [False, True])
async def test_a_cancelled_waiter_leaves_no_entry(aconnect: AsyncConnect, fair: bool) -> None:
    holder, waiter = await aconnect(), await aconnect()
    assert await holder.lock("busy", fair=fair).acquire()
    task = asyncio.ensure_future(waiter.lock("busy", fair=fair).acquire(timeout=30))

    async def queued() -> bool:
        return (await holder.status("busy")).waiters == 1

    await aeventually(queued, "the waiter is in line")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    async def withdrawn() -> bool:
        return (await holder.status("busy")).waiters == 0

    await aeventually(withdrawn, "the cancelled waiter is gone")
    assert len((await holder.status("busy")).holders) == 1


async def test_a_cancelled_segmented_waiter_leaves_no_entry_on_any_segment(
    aconnect: AsyncConnect,
) -> None:
    holder, waiter = await aconnect(), await aconnect()
    held = holder.segmented("busy", 2)
    for _ in range(2):
        assert await held.acquire()
    task = asyncio.ensure_future(waiter.segmented("busy", 2).acquire(timeout=30))

    async def waiters() -> list[int]:
        return [(await holder.status(name)).waiters for name in held.segment_names]

    async def queued() -> bool:
        return await waiters() == [1, 1]

    await aeventually(queued, "the waiter is in line for both segments")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    async def withdrawn() -> bool:
        return await waiters() == [0, 0]

    await aeventually(withdrawn, "the cancelled waiter is gone from both lines")


async def test_a_cancelled_release_still_releases(aconnect: AsyncConnect) -> None:
    holder, other = await aconnect(), await aconnect()
    lock = holder.lock("release-me")
    assert await lock.acquire()
    # a new task is another owner context: it releases through the hold, the capability
    assert lock.hold is not None
    task = asyncio.ensure_future(lock.hold.release())
    await asyncio.sleep(0)  # let the release start, then cancel it mid-flight
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task

    async def free() -> bool:
        return not await other.lock("release-me").locked()

    await aeventually(free, "the lock is released")

    # the shielded release finishes in the background: the backend may answer others first
    async def forgotten() -> bool:
        return lock.hold is None

    await aeventually(forgotten, "the released hold is forgotten")


#: after how many loop iterations a use is cancelled: from before its first await to past its
#: release, every third
STEPS = range(0, 60, 3)


async def test_cancelled_at_any_point_of_a_use_leaves_nothing(aconnect: AsyncConnect) -> None:
    """Cancel a wait-acquire-use-release after each of ``STEPS`` loop iterations, wherever it
    is then: waiting in line, granted but not yet returned, inside the block, or releasing.
    The same clients go through every point, so nothing a cancelled use left in its client
    may hold up the next either."""
    locks, observer, contender = await aconnect(), await aconnect(), await aconnect()

    async def empty() -> bool:
        return await nothing_left(observer)

    for steps in STEPS:
        name = f"contended-{steps}"
        held = contender.lock(name)
        assert await held.acquire(), steps

        async def use(name: str = name) -> None:
            async with locks.lock(name, timeout=30):
                await asyncio.sleep(0)

        task = asyncio.ensure_future(use())
        for step in range(steps):
            if step == steps // 2:
                await held.release()
            await asyncio.sleep(0)
        if held.hold is not None:
            await held.release()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await aeventually(empty, f"no entry is left of the use cancelled after {steps} steps")
        after = observer.lock(name)
        assert await after.acquire(blocking=False), steps
        await after.release()
