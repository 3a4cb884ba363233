# Generated from src/tumbler/testing/conformance/_async/test_election.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
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
from tumbler._sync.changes import StateChanges
from tumbler._sync.client import Locks
from tumbler._sync.election import LeaderChanges
from tumbler._sync.hold import Hold

from ..compat import PATIENCE, Connect, background, eventually

T = TypeVar("T")


def follow(changes: StateChanges | LeaderChanges, until: Callable[[Any], bool]) -> list[Any]:
    """What ``changes`` yields, up to the first item ``until`` accepts."""
    seen = []
    with changes:
        for change in changes:
            seen.append(change)
            if until(change):
                return seen
    raise AssertionError("the changes ended")


def test_one_candidate_leads_at_a_time_in_the_order_they_came(
    connect: Connect,
) -> None:
    one, two, three = connect(), connect(), connect()
    election = one.election("election-order")
    assert election.leader() is None
    first = election.campaign("node-1")
    assert (first.value, first.held) == ("node-1", True)
    assert two.election("election-order").leader() == Leader("node-1", first.term)
    # the leader is the lock's holder, as operators read it
    (holder,) = (three.status("election-order")).holders
    assert (holder.holder, holder.token) == ("node-1", first.term)
    with pytest.raises(AcquireTimeout):
        two.election("election-order").campaign("node-2", timeout=0)

    second = background(lambda: two.election("election-order").campaign("node-2"))
    eventually(lambda: _waiters(three, "election-order", 1), "the second candidate waits in line")
    third = background(lambda: three.election("election-order").campaign("node-3"))
    eventually(lambda: _waiters(three, "election-order", 2), "the third candidate waits in line")
    assert not second.done()
    first.resign()
    assert not first.held
    leadership = second.result()
    assert leadership.value == "node-2"
    assert leadership.term > first.term
    assert election.leader() == Leader("node-2", leadership.term)
    assert not third.done()
    with leadership:
        pass
    last = third.result()
    assert last.term > leadership.term
    last.resign()
    assert election.leader() is None


def _waiters(locks: Locks, name: str, count: int) -> bool:
    return (locks.status(name)).waiters == count


def test_an_observer_sees_each_leader_in_turn(connect: Connect) -> None:
    observer, candidate = connect(), connect()
    election = candidate.election("election-observed")
    seen: list[Leader | None] = []

    def record(leader: Leader | None) -> bool:
        seen.append(leader)
        return leader is not None and leader.value == "node-b"

    watching = background(lambda: follow(observer.election("election-observed").observe(), record))
    eventually(lambda: _any(seen), "the observer reads who leads")
    first = election.campaign("node-a")
    eventually(lambda: _any(seen[1:]), "the observer sees the first leader")
    first.resign()
    second = election.campaign("node-b")
    assert watching.result() == seen
    assert seen[0] is None  # nobody led when it began
    leaders = [leader for leader in seen if leader is not None]
    assert leaders == [Leader("node-a", first.term), Leader("node-b", second.term)]
    second.resign()


def _any(items: list[T]) -> bool:
    return bool(items)


@pytest.mark.tumbler_requires("state_wakeups")
def test_a_watch_is_told_of_each_change_by_the_backend(connect: Connect) -> None:
    """With the watcher's own re-reads an hour apart, only the backend's wake-ups tell it of
    the grant, the waiter, the hand-off and the last release."""
    watcher, holder, waiter = connect(), connect(), connect()
    backend = watcher._backend
    backend.capabilities = dataclasses.replace(backend.capabilities, recheck_interval=3600.0)
    states: list[tuple[int, ...]] = []  # each state's tokens, then its waiters

    def record(state: LockState) -> bool:
        states.append((*(held.token for held in state.holders), state.waiters))
        return len(states) > 1 and states[-1] == (0,)

    watching = background(lambda: follow(watcher.watch("watched"), record))
    eventually(lambda: _any(states), "the watcher reads the lock")
    lock = holder.lock("watched", ttl=60)
    assert lock.acquire()
    first = lock.hold
    assert first is not None
    eventually(lambda: _any(states[1:]), "the watcher sees the grant")
    queued = background(lambda: _take(waiter, "watched"))
    eventually(lambda: _shown(states, (first.token, 1)), "the watcher sees the waiter behind it")
    first.release()
    second = queued.result()
    eventually(lambda: _shown(states, (second.token, 0)), "the watcher sees the hand-off")
    second.release()
    assert len(watching.result()) == len(states)
    assert states[0] == (0,)
    assert states[1] == (first.token, 0)
    assert states[2] == (first.token, 1)
    assert states[-2:] == [(second.token, 0), (0,)]
    assert second.token > first.token


def _take(locks: Locks, name: str) -> Hold:
    lock = locks.lock(name)
    assert lock.acquire(timeout=PATIENCE)
    assert lock.hold is not None
    return lock.hold


def _shown(states: list[tuple[int, ...]], state: tuple[int, ...]) -> bool:
    return state in states
