# Generated from src/tumbler/testing/conformance/_async/test_lock_delay.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
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
from tumbler._sync.client import Locks
from tumbler._sync.hold import Hold

from ..bad_input import no_backend_call
from ..compat import PATIENCE, Connect, background, eventually

#: the lease of a grant left to run out: long enough for a loaded machine to be granted it
#: well before it ends
LEASE = 1.0
#: a delay the cases wait out
DELAY = 1.5
#: a delay no case waits out: what ends it is a force release
FOR_EVER = 600.0


def lapsed_tokens(locks: Locks, name: str) -> list[int]:
    """The tokens of the name's lapsed grants, once it has no live one."""
    state = locks.status(name)
    return [] if state.holders else [h.token for h in state.lapsed]


def run_out(locks: Locks, name: str, hold: Hold) -> None:
    """Wait until ``hold``'s lease ran out, on its client and then on the backend."""
    assert hold.wait_lost(timeout=PATIENCE)

    def lapsed() -> bool:
        return lapsed_tokens(locks, name) == [hold.token]

    eventually(lapsed, f"the backend shows {name!r}'s grant lapsed")


@pytest.mark.tumbler_requires("lock_delay")
def test_a_grant_that_ran_out_keeps_the_name_for_its_lock_delay(
    connect: Connect,
) -> None:
    holder, waiter = connect(), connect()
    lock = holder.lock("delayed", ttl=LEASE, renew=False, lock_delay=DELAY)
    asked_at = time.monotonic()
    assert lock.acquire()
    hold = lock.hold
    assert hold is not None
    wanted = waiter.lock("delayed")

    def take() -> tuple[Hold | None, float]:
        assert wanted.acquire(timeout=PATIENCE)
        return wanted.hold, time.monotonic()

    pending = background(take)
    run_out(waiter, "delayed", hold)
    taken, granted_at = pending.result()
    assert taken is not None
    assert taken.token > hold.token
    # The grant was made after asked_at and its lease ran LEASE from then on the backend's
    # clock; the waiter's grant came DELAY after that, and its reply later still. The
    # clocks tick alike over seconds: what is left is the backend's rounding of times.
    assert granted_at - asked_at >= LEASE + DELAY - 0.02
    assert lapsed_tokens(waiter, "delayed") == []


@pytest.mark.tumbler_requires("lock_delay")
def test_a_release_ends_a_grant_with_no_delay(connect: Connect) -> None:
    holder, other = connect(), connect()
    lock = holder.lock("released", lock_delay=FOR_EVER)
    assert lock.acquire()
    lock.release()
    state = other.status("released")
    assert state.holders == state.lapsed == ()
    assert other.lock("released").acquire(blocking=False)


@pytest.mark.tumbler_requires("lock_delay")
def test_a_lapsed_grant_stays_until_forced_out_and_its_owner_cannot_revive_it(
    connect: Connect,
) -> None:
    holder, other, operator = connect(), connect(), connect()
    lock = holder.lock("lapsed", ttl=LEASE, renew=False, lock_delay=FOR_EVER)
    assert lock.acquire()
    hold = lock.hold
    assert hold is not None
    run_out(other, "lapsed", hold)
    state = other.status("lapsed")
    assert not state.locked
    (lapsed,) = state.lapsed
    assert lapsed.token == hold.token
    assert not lapsed.shared
    assert FOR_EVER - PATIENCE < lapsed.expires_in <= FOR_EVER
    assert [s.name for s in operator.status_all()] == ["lapsed"]

    with pytest.raises(LockLost):
        lock.release()  # the owner's release leaves the delay in place
    assert lapsed_tokens(other, "lapsed") == [hold.token]
    assert not other.lock("lapsed").acquire(blocking=False)
    assert not holder.lock("lapsed").acquire(blocking=False)  # nor its client's

    assert operator.force_release("lapsed") == 0  # no live grant was removed
    assert (other.status("lapsed")).lapsed == ()
    assert other.lock("lapsed").acquire(blocking=False)


@pytest.mark.tumbler_requires("lock_delay")
def test_a_lost_permit_is_kept_from_others_for_its_lock_delay(
    connect: Connect,
) -> None:
    holder, other, operator = connect(), connect(), connect()
    permits = holder.semaphore("permits", 2, ttl=LEASE, renew=False, lock_delay=FOR_EVER)
    assert permits.acquire()
    hold = permits.hold
    assert hold is not None
    run_out(other, "permits", hold)
    (lapsed,) = (other.status("permits")).lapsed
    assert lapsed.shared

    theirs = other.semaphore("permits", 2)
    assert theirs.acquire(blocking=False)  # the other permit
    assert not theirs.acquire(blocking=False)  # the lost one is kept
    operator.force_release("permits")
    assert theirs.acquire(blocking=False)


@pytest.mark.tumbler_requires("no_lock_delay")
def test_a_lock_delay_is_refused_where_the_backend_keeps_none(
    connect: Connect,
) -> None:
    locks = connect()
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
