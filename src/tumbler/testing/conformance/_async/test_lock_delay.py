"""Lock-delay (``lock_delay=``), as every backend that declares ``capabilities.lock_delay``
must keep it, and its refusal where a backend declares none (asyncio source of the blocking
twin).

A grant made with a lock-delay that ends other than by a release stays, lapsed, for that long
after: nobody is granted the name meanwhile, its owner cannot renew or release it, ``status``
shows it, and a force release ends it. A release ends a grant with no delay.
"""

from __future__ import annotations

import time

import pytest

from tumbler import InvalidLockDelay, LockLost
from tumbler._async.client import AsyncLocks
from tumbler._async.hold import AsyncHold

from ..bad_input import no_backend_call
from ..compat import PATIENCE, AsyncConnect, abackground, aeventually

pytestmark = pytest.mark.asyncio  # async-only

#: the lease of a grant left to run out: long enough for a loaded machine to be granted it
#: well before it ends
LEASE = 1.0
#: a delay the cases wait out
DELAY = 1.5
#: a delay no case waits out: what ends it is a force release
FOR_EVER = 600.0


async def lapsed_tokens(locks: AsyncLocks, name: str) -> list[int]:
    """The tokens of the name's lapsed grants, once it has no live one."""
    state = await locks.status(name)
    return [] if state.holders else [h.token for h in state.lapsed]


async def run_out(locks: AsyncLocks, name: str, hold: AsyncHold) -> None:
    """Wait until ``hold``'s lease ran out, on its client and then on the backend."""
    assert await hold.wait_lost(timeout=PATIENCE)

    async def lapsed() -> bool:
        return await lapsed_tokens(locks, name) == [hold.token]

    await aeventually(lapsed, f"the backend shows {name!r}'s grant lapsed")


@pytest.mark.tumbler_requires("lock_delay")
async def test_a_grant_that_ran_out_keeps_the_name_for_its_lock_delay(
    aconnect: AsyncConnect,
) -> None:
    holder, waiter = await aconnect(), await aconnect()
    lock = holder.lock("delayed", ttl=LEASE, renew=False, lock_delay=DELAY)
    asked_at = time.monotonic()
    assert await lock.acquire()
    hold = lock.hold
    assert hold is not None
    wanted = waiter.lock("delayed")

    async def take() -> tuple[AsyncHold | None, float]:
        assert await wanted.acquire(timeout=PATIENCE)
        return wanted.hold, time.monotonic()

    pending = abackground(take)
    await run_out(waiter, "delayed", hold)
    taken, granted_at = await pending.result()
    assert taken is not None
    assert taken.token > hold.token
    # The grant was made after asked_at and its lease ran LEASE from then on the backend's
    # clock; the waiter's grant came DELAY after that, and its reply later still. The
    # clocks tick alike over seconds: what is left is the backend's rounding of times.
    assert granted_at - asked_at >= LEASE + DELAY - 0.02
    assert await lapsed_tokens(waiter, "delayed") == []


@pytest.mark.tumbler_requires("lock_delay")
async def test_a_release_ends_a_grant_with_no_delay(aconnect: AsyncConnect) -> None:
    holder, other = await aconnect(), await aconnect()
    lock = holder.lock("released", lock_delay=FOR_EVER)
    assert await lock.acquire()
    await lock.release()
    state = await other.status("released")
    assert state.holders == state.lapsed == ()
    assert await other.lock("released").acquire(blocking=False)


@pytest.mark.tumbler_requires("lock_delay")
async def test_a_lapsed_grant_stays_until_forced_out_and_its_owner_cannot_revive_it(
    aconnect: AsyncConnect,
) -> None:
    holder, other, operator = await aconnect(), await aconnect(), await aconnect()
    lock = holder.lock("lapsed", ttl=LEASE, renew=False, lock_delay=FOR_EVER)
    assert await lock.acquire()
    hold = lock.hold
    assert hold is not None
    await run_out(other, "lapsed", hold)
    state = await other.status("lapsed")
    assert not state.locked
    (lapsed,) = state.lapsed
    assert lapsed.token == hold.token
    assert not lapsed.shared
    assert FOR_EVER - PATIENCE < lapsed.expires_in <= FOR_EVER
    assert [s.name for s in await operator.status_all()] == ["lapsed"]

    with pytest.raises(LockLost):
        await lock.release()  # the owner's release leaves the delay in place
    assert await lapsed_tokens(other, "lapsed") == [hold.token]
    assert not await other.lock("lapsed").acquire(blocking=False)
    assert not await holder.lock("lapsed").acquire(blocking=False)  # nor its client's

    assert await operator.force_release("lapsed") == 0  # no live grant was removed
    assert (await other.status("lapsed")).lapsed == ()
    assert await other.lock("lapsed").acquire(blocking=False)


@pytest.mark.tumbler_requires("lock_delay")
async def test_a_lost_permit_is_kept_from_others_for_its_lock_delay(
    aconnect: AsyncConnect,
) -> None:
    holder, other, operator = await aconnect(), await aconnect(), await aconnect()
    permits = holder.semaphore("permits", 2, ttl=LEASE, renew=False, lock_delay=FOR_EVER)
    assert await permits.acquire()
    hold = permits.hold
    assert hold is not None
    await run_out(other, "permits", hold)
    (lapsed,) = (await other.status("permits")).lapsed
    assert lapsed.shared

    theirs = other.semaphore("permits", 2)
    assert await theirs.acquire(blocking=False)  # the other permit
    assert not await theirs.acquire(blocking=False)  # the lost one is kept
    await operator.force_release("permits")
    assert await theirs.acquire(blocking=False)


@pytest.mark.tumbler_requires("no_lock_delay")
async def test_a_lock_delay_is_refused_where_the_backend_keeps_none(
    aconnect: AsyncConnect,
) -> None:
    locks = await aconnect()
    assert not locks.capabilities.lock_delay
    with no_backend_call(locks):
        for make in (
            lambda: locks.lock("x", lock_delay=1),
            lambda: locks.semaphore("x", 2, lock_delay=1),
            lambda: locks.multi(["x", "y"], lock_delay=1),
            lambda: locks.election("x", lock_delay=1),
        ):
            with pytest.raises(InvalidLockDelay, match="does not keep a lock-delay"):
                make()
    assert locks.lock("x", lock_delay=0).lock_delay == 0
