"""Several locks taken as one (``locks.multi()``), as every backend must keep it (asyncio
source of the blocking twin).

A multi-lock is a mutex per name, taken in one order every caller shares: all of them or
none, each with its own fencing token, lost as a whole when any part is.
"""

from __future__ import annotations

import pytest

from tumbler import AcquireTimeout, LockLost
from tumbler._async.client import AsyncLocks
from tumbler._async.hold import AsyncMultiHold

from ..compat import PATIENCE, AsyncConnect, agather

pytestmark = pytest.mark.asyncio  # async-only

#: long enough that the renewal which learns of a force-release (every third of it) comes
#: well before the lease could run out on a loaded machine
LEASE = 3.0


async def holders(locks: AsyncLocks, names: tuple[str, ...]) -> dict[str, list[int]]:
    return {name: [h.token for h in (await locks.status(name)).holders] for name in names}


async def test_a_multi_lock_takes_every_name_or_none(aconnect: AsyncConnect) -> None:
    mine, other = await aconnect(), await aconnect()
    blocker = other.lock("multi-b")
    assert await blocker.acquire()
    multi = mine.multi(["multi-c", "multi-a", "multi-b"])
    assert multi.names == ("multi-a", "multi-b", "multi-c")  # the order every caller takes

    assert not await multi.acquire(timeout=0.2)
    assert multi.hold is None
    # what it took before it met the held name went back
    assert await holders(other, ("multi-a", "multi-c")) == {"multi-a": [], "multi-c": []}
    with pytest.raises(AcquireTimeout):
        async with mine.multi(["multi-b", "multi-a"], timeout=0):
            pass
    assert (await other.status("multi-a")).holders == ()

    await blocker.release()
    async with multi as hold:
        assert hold.held
        assert hold.names == multi.names
        assert await holders(other, multi.names) == {
            name: [token] for name, token in hold.tokens.items()
        }
    assert not hold.held
    assert await holders(other, multi.names) == {name: [] for name in multi.names}


async def test_each_name_of_a_multi_lock_keeps_its_own_tokens_increasing(
    aconnect: AsyncConnect,
) -> None:
    locks = await aconnect()
    single = locks.lock("tokens-b")
    assert await single.acquire()
    first = single.hold
    assert first is not None
    await single.release()
    async with locks.multi(["tokens-a", "tokens-b"]) as hold:
        assert hold.tokens["tokens-b"] > first.token
        again = hold.tokens
    async with locks.multi(["tokens-b", "tokens-a"]) as hold:
        assert all(hold.tokens[name] > again[name] for name in again)


async def test_multi_locks_over_one_set_in_opposite_orders_never_wait_for_each_other(
    aconnect: AsyncConnect,
) -> None:
    """Taken in the order given, each caller would soon hold the name the other waits for,
    and both would wait until their timeouts."""
    one, two = await aconnect(), await aconnect()

    async def take(locks: AsyncLocks, names: list[str]) -> int:
        for _ in range(10):
            async with locks.multi(names, timeout=PATIENCE):
                pass
        return 10

    assert await agather(
        lambda: take(one, ["cross-x", "cross-y"]), lambda: take(two, ["cross-y", "cross-x"])
    ) == [10, 10]


async def test_a_multi_hold_is_lost_as_a_whole_when_one_name_is_lost(
    aconnect: AsyncConnect,
) -> None:
    holder, operator = await aconnect(), await aconnect()
    multi = holder.multi(["whole-a", "whole-b"], ttl=LEASE)
    assert await multi.acquire()
    hold = multi.hold
    assert hold is not None
    told: list[AsyncMultiHold] = []
    hold.on_lost(told.append)

    assert await operator.force_release("whole-b") == 1
    assert await hold.wait_lost(timeout=PATIENCE)
    assert told == [hold]
    assert hold.lost
    assert not hold.held
    assert hold.lost_reason is not None
    assert hold.lost_reason.startswith("lock 'whole-b'")
    with pytest.raises(LockLost):
        await multi.release()
    # the name that was not lost went back with it
    assert (await operator.status("whole-a")).holders == ()


async def test_a_multi_hold_released_in_its_block_is_released_once(aconnect: AsyncConnect) -> None:
    holder, operator = await aconnect(), await aconnect()
    multi = holder.multi(["inside-a", "inside-b"], ttl=LEASE)
    async with multi as hold:
        await hold.release()
        assert not hold.held
        assert await holders(operator, hold.names) == {name: [] for name in hold.names}
    # a loss inside the block is told once: by the release that met it, not again at its end
    async with multi as hold:
        assert await operator.force_release("inside-a") == 1
        assert await hold.wait_lost(timeout=PATIENCE)
        with pytest.raises(LockLost, match="inside-a"):
            await hold.release()
    assert (await operator.status("inside-b")).holders == ()
