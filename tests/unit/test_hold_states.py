"""A hold's life as one state: the transition table (pure), and a real hold walking it.

The table is checked edge by edge and by random walks (a lost hold never comes back, a release
is the end); then holds of a ``memory://`` client on a manual clock are driven through their
states in both flavours, the state read beside what the public API says of the hold.
"""

from __future__ import annotations

import itertools
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tumbler
import tumbler.aio
from tumbler import _core as core
from tumbler._async import hold as async_hold
from tumbler._sync import hold as sync_hold
from tumbler.testing import ManualClock

FLAVOURS = [pytest.param(async_hold, id="asyncio"), pytest.param(sync_hold, id="sync")]
TTL = 30.0
#: past the client's deadline for a hold of TTL, before the backend's lease ends (the client
#: gives a hold up 1% + 25 ms early)
CLIENT_GAVE_UP = TTL - 0.1


def test_the_table_names_every_state_and_the_release_ends_it() -> None:
    states = set(core.HoldState)
    assert set(core.TRANSITIONS) == states
    assert all(targets <= states for targets in core.TRANSITIONS.values())
    assert core.TRANSITIONS[core.RELEASED] == frozenset()
    # every state can end, and the end is the release
    for state in states - {core.RELEASED}:
        assert core.RELEASED in core.TRANSITIONS[state]


def test_a_change_along_no_edge_is_refused_as_a_bug() -> None:
    for current, wanted in itertools.product(core.HoldState, repeat=2):
        if wanted in core.TRANSITIONS[current]:
            assert core.transition(current, wanted) is wanted
        else:
            with pytest.raises(core.IllegalTransition) as raised:
                core.transition(current, wanted)
            assert isinstance(raised.value, AssertionError)  # a bug, not the caller's input
            assert current.value in str(raised.value)
            assert wanted.value in str(raised.value)


def test_only_in_doubt_comes_back_to_held() -> None:
    back = {state for state, targets in core.TRANSITIONS.items() if core.HELD in targets}
    assert back == {core.IN_DOUBT}


@given(wanted=st.lists(st.integers(min_value=0, max_value=5), max_size=30))
def test_random_walks_never_revive_a_lost_or_released_hold(
    wanted: list[int],
) -> None:
    states = list(core.HoldState)
    state = core.HELD
    lost = release_begun = False
    for index in wanted:
        target = states[index]
        try:
            state = core.transition(state, target)
        except core.IllegalTransition:
            continue
        lost = lost or state in {core.LOST, core.GIVEN_BACK}
        release_begun = release_begun or state in {core.RELEASING, core.RELEASED}
        if lost:
            assert state not in core.UNLOST  # a hold reported lost never comes back
        if release_begun:
            assert state not in core.GRANTED  # nor does a released one
    assert state in states


# ---------------------------------------------------------------------------------------------
# A real hold walking the table


def url() -> str:
    return f"memory://hold-states-{uuid.uuid4().hex}"


def test_a_hold_is_held_then_released() -> None:
    with tumbler.connect(url(), clock=ManualClock()) as locks:
        lock = locks.lock("job", ttl=TTL)
        with lock as hold:
            assert hold._state is sync_hold.HELD
            assert hold.held
        assert hold._state is sync_hold.RELEASED
        assert not hold.held
        assert not hold.lost


@pytest.mark.asyncio
async def test_a_hold_is_held_then_released_asyncio() -> None:
    async with await tumbler.aio.connect(url(), clock=ManualClock()) as locks:
        lock = locks.lock("job", ttl=TTL)
        async with lock as hold:
            assert hold._state is async_hold.HELD
            assert hold.held
        assert hold._state is async_hold.RELEASED
        assert not hold.held
        assert not hold.lost


def test_a_hold_in_doubt_is_confirmed_by_the_next_renewal() -> None:
    clock = ManualClock()
    with tumbler.connect(url(), clock=clock) as locks:
        lock = locks.lock("job", ttl=TTL)
        assert lock.acquire()
        hold = lock.hold
        assert hold is not None
        hold._doubt()  # as when the backend's connection drops
        assert hold._state is sync_hold.IN_DOUBT
        assert hold.in_doubt
        assert not hold.held
        assert not hold.lost
        with pytest.raises(tumbler.HoldInDoubt):
            hold.check()
        clock.advance(TTL / 3)
        locks.settle()
        assert hold._state is sync_hold.HELD
        assert hold.held
        lock.release()
        assert hold._state is sync_hold.RELEASED


@pytest.mark.asyncio
async def test_a_hold_in_doubt_is_confirmed_by_the_next_renewal_asyncio() -> None:
    clock = ManualClock()
    async with await tumbler.aio.connect(url(), clock=clock) as locks:
        lock = locks.lock("job", ttl=TTL)
        assert await lock.acquire()
        hold = lock.hold
        assert hold is not None
        hold._doubt()  # as when the backend's connection drops
        assert hold._state is async_hold.IN_DOUBT
        assert hold.in_doubt
        assert not hold.held
        assert not hold.lost
        with pytest.raises(tumbler.HoldInDoubt):
            hold.check()
        clock.advance(TTL / 3)
        await locks.settle()
        assert hold._state is async_hold.HELD
        assert hold.held
        await lock.release()
        assert hold._state is async_hold.RELEASED


def test_gives_up_in_counts_down_through_doubt_and_is_0_once_lost() -> None:
    clock = ManualClock()
    with tumbler.connect(url(), clock=clock) as locks:
        lock = locks.lock("job", ttl=TTL, renew=False)
        assert lock.acquire()
        hold = lock.hold
        assert hold is not None
        assert hold.gives_up_in == hold.expires_in > TTL - 1
        clock.advance(10.0)
        hold._doubt()  # as when the backend's connection drops
        # expires_in says the hold cannot be counted on; gives_up_in says how long it has
        # left to be confirmed
        assert hold.expires_in == 0.0
        assert hold.gives_up_in == pytest.approx(TTL - core.drift_margin(TTL) - 10.0)
        clock.advance(CLIENT_GAVE_UP - 10.0)
        assert hold.lost
        assert hold.gives_up_in == 0.0
        with pytest.raises(tumbler.LockLost):
            lock.release()
        assert hold.gives_up_in == 0.0


@pytest.mark.asyncio
async def test_gives_up_in_is_0_once_released_asyncio() -> None:
    async with await tumbler.aio.connect(url(), clock=ManualClock()) as locks:
        lock = locks.lock("job", ttl=TTL)
        async with lock as hold:
            assert hold.gives_up_in == hold.expires_in > TTL - 1
        assert hold.gives_up_in == 0.0


def test_a_lease_run_out_is_lost_given_back_then_released() -> None:
    clock = ManualClock()
    with tumbler.connect(url(), clock=clock) as locks:
        lock = locks.lock("job", ttl=TTL, renew=False)
        assert lock.acquire()
        hold = lock.hold
        assert hold is not None
        clock.advance(CLIENT_GAVE_UP)
        assert hold.lost  # by the clock alone, before anyone records it
        assert len(locks.status("job").holders) == 1  # the backend's lease has not run out
        locks.settle()
        assert hold._state is sync_hold.GIVEN_BACK
        assert locks.status("job").holders == ()  # the renewal worker gave the grant back
        with pytest.raises(tumbler.LockLost):
            lock.release()
        assert hold._state is sync_hold.RELEASED
        assert hold.lost


@pytest.mark.asyncio
async def test_a_lease_run_out_is_lost_given_back_then_released_asyncio() -> None:
    clock = ManualClock()
    async with await tumbler.aio.connect(url(), clock=clock) as locks:
        lock = locks.lock("job", ttl=TTL, renew=False)
        assert await lock.acquire()
        hold = lock.hold
        assert hold is not None
        clock.advance(CLIENT_GAVE_UP)
        assert hold.lost  # by the clock alone, before anyone records it
        assert len((await locks.status("job")).holders) == 1  # nor the backend's lease
        await locks.settle()
        assert hold._state is async_hold.GIVEN_BACK
        assert (await locks.status("job")).holders == ()  # the grant was given back
        with pytest.raises(tumbler.LockLost):
            await lock.release()
        assert hold._state is async_hold.RELEASED
        assert hold.lost


def test_close_loses_and_releases_what_is_held() -> None:
    locks = tumbler.connect(url(), clock=ManualClock())
    lock = locks.lock("job", ttl=TTL)
    assert lock.acquire()
    hold = lock.hold
    assert hold is not None
    locks.close()
    assert hold._state is sync_hold.RELEASED
    assert hold.lost_reason == "the client was closed"


@pytest.mark.asyncio
async def test_close_loses_and_releases_what_is_held_asyncio() -> None:
    locks = await tumbler.aio.connect(url(), clock=ManualClock())
    lock = locks.lock("job", ttl=TTL)
    assert await lock.acquire()
    hold = lock.hold
    assert hold is not None
    await locks.close()
    assert hold._state is async_hold.RELEASED
    assert hold.lost_reason == "the client was closed"


@pytest.mark.parametrize("late", [1, 2])
def test_a_grant_whose_reply_came_after_its_lease_is_given_back_and_asked_again(
    late: int,
) -> None:
    """A reply that comes after the lease it grants ran out (a store slow for a round trip)
    is given back, and the request made again at once: a try without waiting is refused a
    lock nobody holds only when the replies keep coming late."""
    clock = ManualClock()
    with tumbler.connect(url(), clock=clock) as locks:
        backend = locks._backend
        try_grant = backend.try_grant
        tries: list[bool] = []

        def slow(request: object) -> object:
            grant = try_grant(request)
            tries.append(grant is not None)
            if len(tries) <= late:
                clock.advance(TTL)  # the reply comes as the lease runs out
            return grant

        backend.try_grant = slow
        lock = locks.lock("job", ttl=TTL)
        assert lock.acquire(blocking=False) is (late < 2)
        assert tries == [True, True]
        holders = locks.status("job").holders
        assert len(holders) == (1 if late < 2 else 0)
        if late < 2:
            assert lock.hold is not None
            assert [h.token for h in holders] == [lock.hold.token]
            lock.release()


@pytest.mark.asyncio
@pytest.mark.parametrize("late", [1, 2])
async def test_a_grant_whose_reply_came_after_its_lease_is_given_back_and_asked_again_asyncio(
    late: int,
) -> None:
    clock = ManualClock()
    async with await tumbler.aio.connect(url(), clock=clock) as locks:
        backend = locks._backend
        try_grant = backend.try_grant
        tries: list[bool] = []

        async def slow(request: object) -> object:
            grant = await try_grant(request)
            tries.append(grant is not None)
            if len(tries) <= late:
                clock.advance(TTL)  # the reply comes as the lease runs out
            return grant

        backend.try_grant = slow
        lock = locks.lock("job", ttl=TTL)
        assert await lock.acquire(blocking=False) is (late < 2)
        assert tries == [True, True]
        holders = (await locks.status("job")).holders
        assert len(holders) == (1 if late < 2 else 0)
        if late < 2:
            assert lock.hold is not None
            assert [h.token for h in holders] == [lock.hold.token]
            await lock.release()
