"""Leader election (``locks.election()``) and watching a lock (``locks.watch()``), as every
backend must keep them (asyncio source of the blocking twin).

An election is a fair mutex whose holder is the leader: one leader at a time, each term (the
grant's fencing token) greater than the last, candidates leading in the order they came, and
the leader readable by anyone. A watch yields a lock's state at each change of its entries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from tumbler import AcquireTimeout, Leader, LockState
from tumbler._async.changes import AsyncStateChanges
from tumbler._async.client import AsyncLocks
from tumbler._async.election import AsyncLeaderChanges
from tumbler._async.hold import AsyncHold

from ..compat import PATIENCE, AsyncConnect, abackground, aeventually

pytestmark = pytest.mark.asyncio  # async-only

T = TypeVar("T")


async def follow(
    changes: AsyncStateChanges | AsyncLeaderChanges, until: Callable[[Any], bool]
) -> list[Any]:
    """What ``changes`` yields, up to the first item ``until`` accepts."""
    seen = []
    async with changes:
        async for change in changes:
            seen.append(change)
            if until(change):
                return seen
    raise AssertionError("the changes ended")


async def test_one_candidate_leads_at_a_time_in_the_order_they_came(
    aconnect: AsyncConnect,
) -> None:
    one, two, three = await aconnect(), await aconnect(), await aconnect()
    election = one.election("election-order")
    assert await election.leader() is None
    first = await election.campaign("node-1")
    assert (first.value, first.held) == ("node-1", True)
    assert await two.election("election-order").leader() == Leader("node-1", first.term)
    # the leader is the lock's holder, as operators read it
    (holder,) = (await three.status("election-order")).holders
    assert (holder.holder, holder.token) == ("node-1", first.term)
    with pytest.raises(AcquireTimeout):
        await two.election("election-order").campaign("node-2", timeout=0)

    second = abackground(lambda: two.election("election-order").campaign("node-2"))
    await aeventually(
        lambda: _waiters(three, "election-order", 1), "the second candidate waits in line"
    )
    third = abackground(lambda: three.election("election-order").campaign("node-3"))
    await aeventually(
        lambda: _waiters(three, "election-order", 2), "the third candidate waits in line"
    )
    assert not second.done()
    await first.resign()
    assert not first.held
    leadership = await second.result()
    assert leadership.value == "node-2"
    assert leadership.term > first.term
    assert await election.leader() == Leader("node-2", leadership.term)
    assert not third.done()
    async with leadership:
        pass
    last = await third.result()
    assert last.term > leadership.term
    await last.resign()
    assert await election.leader() is None


async def _waiters(locks: AsyncLocks, name: str, count: int) -> bool:
    return (await locks.status(name)).waiters == count


async def test_an_observer_sees_each_leader_in_turn(aconnect: AsyncConnect) -> None:
    observer, candidate = await aconnect(), await aconnect()
    election = candidate.election("election-observed")
    seen: list[Leader | None] = []

    def record(leader: Leader | None) -> bool:
        seen.append(leader)
        return leader is not None and leader.value == "node-b"

    watching = abackground(lambda: follow(observer.election("election-observed").observe(), record))
    await aeventually(lambda: _any(seen), "the observer reads who leads")
    first = await election.campaign("node-a")
    await aeventually(lambda: _any(seen[1:]), "the observer sees the first leader")
    await first.resign()
    second = await election.campaign("node-b")
    assert await watching.result() == seen
    assert seen[0] is None  # nobody led when it began
    leaders = [leader for leader in seen if leader is not None]
    assert leaders == [Leader("node-a", first.term), Leader("node-b", second.term)]
    await second.resign()


async def _any(items: list[T]) -> bool:
    return bool(items)


@pytest.mark.tumbler_requires("state_wakeups")
async def test_a_watch_is_told_of_each_change_by_the_backend(aconnect: AsyncConnect) -> None:
    """With the watcher's own re-reads an hour apart, only the backend's wake-ups tell it of
    the grant, the waiter, the hand-off and the last release."""
    watcher, holder, waiter = await aconnect(), await aconnect(), await aconnect()
    backend = watcher._backend
    backend.capabilities = dataclasses.replace(backend.capabilities, recheck_interval=3600.0)
    states: list[tuple[int, ...]] = []  # each state's tokens, then its waiters

    def record(state: LockState) -> bool:
        states.append((*(held.token for held in state.holders), state.waiters))
        return len(states) > 1 and states[-1] == (0,)

    watching = abackground(lambda: follow(watcher.watch("watched"), record))
    await aeventually(lambda: _any(states), "the watcher reads the lock")
    lock = holder.lock("watched", ttl=60)
    assert await lock.acquire()
    first = lock.hold
    assert first is not None
    await aeventually(lambda: _any(states[1:]), "the watcher sees the grant")
    queued = abackground(lambda: _take(waiter, "watched"))
    await aeventually(
        lambda: _shown(states, (first.token, 1)), "the watcher sees the waiter behind it"
    )
    await first.release()
    second = await queued.result()
    await aeventually(lambda: _shown(states, (second.token, 0)), "the watcher sees the hand-off")
    await second.release()
    assert len(await watching.result()) == len(states)
    assert states[0] == (0,)
    assert states[1] == (first.token, 0)
    assert states[2] == (first.token, 1)
    assert states[-2:] == [(second.token, 0), (0,)]
    assert second.token > first.token


async def _take(locks: AsyncLocks, name: str) -> AsyncHold:
    lock = locks.lock(name)
    assert await lock.acquire(timeout=PATIENCE)
    assert lock.hold is not None
    return lock.hold


async def _shown(states: list[tuple[int, ...]], state: tuple[int, ...]) -> bool:
    return state in states
