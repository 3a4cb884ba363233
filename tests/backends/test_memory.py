"""memory:// on a ManualClock: time-dependent behaviour tested without sleeping."""

from __future__ import annotations

import threading
import uuid

import pytest

import tumbler
import tumbler.aio
from tumbler import ConfigurationError, InvalidURL, LockLost
from tumbler import _core as core
from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest
from tumbler.backends.memory.backend import open_sync
from tumbler.testing import ManualClock
from tumbler.testing.conformance.compat import eventually


@pytest.fixture
def url() -> str:
    return f"memory://{uuid.uuid4().hex}"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def test_a_lease_runs_out_only_when_the_clock_says_so(url, clock):
    with tumbler.connect(url, clock=clock) as locks, tumbler.connect(url, clock=clock) as other:
        lost = []
        lock = locks.lock("job", ttl=30, renew=False)
        assert lock.acquire()
        hold = lock.hold
        hold.on_lost(lost.append)
        clock.advance(29)
        locks.settle()
        assert hold.held
        assert not other.lock("job").acquire(blocking=False)
        clock.advance(1)
        locks.settle()
        assert hold.lost
        assert lost == [hold]
        assert other.lock("job").acquire(blocking=False)
        with pytest.raises(LockLost):
            lock.release()


def test_renewal_follows_the_clock(url, clock):
    with tumbler.connect(url, clock=clock) as locks, tumbler.connect(url, clock=clock) as other:
        lock = locks.lock("job", ttl=30)
        assert lock.acquire()
        token = lock.hold.token
        for _ in range(30):  # 300 s of clock time, in steps the renewal keeps up with
            clock.advance(10)
            locks.settle()
        assert lock.hold.held
        assert lock.hold.token == token
        assert not other.lock("job").acquire(blocking=False)
        [holder] = other.status("job").holders
        assert 20 < holder.expires_in <= 30
        lock.release()


def test_a_jump_past_the_lease_loses_the_hold(url, clock):
    """A paused holder (the clock jumped past its lease before it could renew) is lost."""
    with tumbler.connect(url, clock=clock) as locks, tumbler.connect(url, clock=clock) as other:
        lock = locks.lock("job", ttl=30)
        assert lock.acquire()
        clock.advance(31)
        assert lock.hold.lost  # at once, before any worker ran
        assert other.lock("job").acquire(blocking=False)
        locks.settle()
        with pytest.raises(LockLost):
            lock.release()


def test_acquire_timeouts_follow_the_clock(url, clock):
    with tumbler.connect(url, clock=clock) as locks, tumbler.connect(url, clock=clock) as other:
        assert locks.lock("busy").acquire()
        result: list[bool] = []
        waiter = threading.Thread(
            target=lambda: result.append(other.lock("busy").acquire(timeout=5))
        )
        waiter.start()
        eventually(lambda: locks.status("busy").waiters == 1, "the waiter is in line")
        clock.advance(4)
        waiter.join(0.2)
        assert waiter.is_alive()  # 4 s of clock time is not 5
        clock.advance(1)
        waiter.join(30)
        assert result == [False]


def test_stores_are_shared_by_name_and_separate_otherwise(clock):
    name = uuid.uuid4().hex
    with tumbler.connect(f"memory://{name}") as a, tumbler.connect(f"memory://{name}") as b:
        assert a.lock("x").acquire()
        assert not b.lock("x").acquire(blocking=False)
        with tumbler.connect(f"memory://{name}-other") as c:
            assert c.lock("x").acquire(blocking=False)


def test_every_client_of_a_store_uses_one_clock(url, clock):
    with tumbler.connect(url, clock=clock), pytest.raises(ConfigurationError):
        tumbler.connect(url, clock=ManualClock())


def test_memory_urls_take_no_path_or_options():
    with pytest.raises(InvalidURL):
        tumbler.connect("memory://store/path")
    with pytest.raises(InvalidURL):
        tumbler.connect("memory://store?x=1")


def test_wait_lost_timeouts_follow_the_clock(url, clock):
    with tumbler.connect(url, clock=clock) as locks:
        lock = locks.lock("job", ttl=30, renew=False)
        assert lock.acquire()
        hold = lock.hold
        listening = len(clock._listeners)
        result: list[bool] = []
        watcher = threading.Thread(target=lambda: result.append(hold.wait_lost(timeout=5)))
        watcher.start()
        eventually(lambda: len(clock._listeners) > listening, "the watcher waits on the clock")
        clock.advance(4)
        watcher.join(0.2)
        assert watcher.is_alive()  # 4 s of clock time is not 5 (a move of the clock used to end it)
        clock.advance(6)  # past 5 s even from a start after the first move (listeners are shared)
        watcher.join(30)
        assert result == [False]
        assert hold.held
        clock.advance(20)
        assert hold.wait_lost(timeout=0)
        with pytest.raises(LockLost):
            lock.release()


@pytest.mark.asyncio
async def test_capabilities_scope_and_the_shortest_lease_follow_the_clock(url, clock):
    """One process's locks; any lease on a ManualClock (the test moves time), and a real
    floor on the real clock, where a renewal worker can be scheduled late."""
    with tumbler.connect(url, clock=clock) as manual:
        assert manual.capabilities.scope == "process"
        assert manual.capabilities.min_ttl == core.MIN_TTL
    async with await tumbler.aio.connect(url, clock=clock) as amanual:
        assert amanual.capabilities.min_ttl == core.MIN_TTL
    real_url = f"memory://{uuid.uuid4().hex}"
    with tumbler.connect(real_url) as real:
        assert real.capabilities.scope == "process"
        assert real.capabilities.min_ttl == 0.2
    async with await tumbler.aio.connect(real_url) as areal:
        assert areal.capabilities.min_ttl == 0.2


class _TickingClock(ManualClock):
    """A clock that moves a little at every reading, as a real one does between two reads."""

    def now(self) -> float:
        reading = super().now()
        self.advance(0.001)
        return reading


def test_status_reads_every_entry_at_one_instant(url):
    """A grant whose lease ends between two readings of the clock is told as live or as gone,
    never as a lapsed grant it cannot be (it has no lock-delay)."""
    clock = _TickingClock()
    backend = open_sync(parse_url(url), clock=clock)
    request = GrantRequest("ticking", "owner", False, 1, False, ttl=1.0, holder="h")
    assert backend.try_grant(request) is not None  # read at 0: the lease ends at 1.0
    reading = clock.now()  # the clock stands 1 ms after it
    clock.advance(0.9995 - reading - 0.001)  # the next reading is 0.9995, the one after 1.0005
    state = backend.inspect("ticking")
    assert (len(state.holders), state.lapsed) == (1, ())
