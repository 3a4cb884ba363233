"""redlock://: state watchers (``locks.watch``, elections' ``observe``) hear every change of a
lock that another client makes: each master publishes the lock's changes while the watcher's
marker lives there, and the watcher's client listens to a majority of the masters at least
(five redis-server processes started by ``RedlockMasters``). A lock nobody watches publishes
nothing.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import tumbler.aio
from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest
from tumbler.backends.redis._sync.backend import WATCHED_MS
from tumbler.backends.redis.lua import Keys
from tumbler.backends.redlock import CAPABILITIES
from tumbler.backends.redlock import lua as redlock_lua
from tumbler.backends.redlock._sync.backend import RedlockBackend
from tumbler.backends.redlock.opener import open_sync
from tumbler.errors import BackendUnavailable
from tumbler.testing.backends.redlock.server import RedlockMasters
from tumbler.testing.conformance.compat import PATIENCE

#: how long a wait with nothing to wake it must last (it only shows that none came)
QUIET = 0.3


@pytest.fixture
def masters(tmp_path: Any) -> Iterator[RedlockMasters]:
    with RedlockMasters(tmp_path / "masters", 5) as started:
        yield started


@pytest.fixture
def prefix() -> str:
    return f"tumbler:test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def clients(masters: RedlockMasters, prefix: str) -> Iterator[list[RedlockBackend]]:
    """Two clients of the masters: each its own connections, pub/sub ones included."""
    opened = [open_sync(parse_url(masters.url(prefix))) for _ in range(2)]
    yield opened
    for client in opened:
        client.close()


def request(name: str, owner: str, *, queue: bool = True) -> GrantRequest:
    return GrantRequest(name, owner, False, 1, False, 10.0, holder="case", queue=queue)


def publishes(masters: RedlockMasters) -> list[int]:
    """How many PUBLISH commands each master has run (those of its scripts included)."""
    found = []
    for index in range(5):
        stats = masters.client(index).info("commandstats")
        found.append(int(stats.get("cmdstat_publish", {}).get("calls", 0)))
    return found


def test_state_wakeups_are_declared() -> None:
    assert CAPABILITIES.state_wakeups


def test_changes_by_another_client_wake_a_state_watch(clients: list[RedlockBackend]) -> None:
    """A grant, a waiter arriving, a waiter leaving, a release handing over, a force release
    and the last release, each made by another client, wake the watch at once; with no change
    it waits its time out. The latencies (from just before the other client's call to the
    watch's return) are printed beside the poll interval they replace."""
    watcher, other = clients
    latencies = []
    with watcher.watch_state("x") as watch:
        started = time.monotonic()
        watch.wait(QUIET)
        assert time.monotonic() - started >= QUIET, "woken with nothing changed"
        for change in [
            lambda: other.try_grant(request("x", "a")),
            lambda: other.try_grant(request("x", "b")),  # queues on every master
            lambda: other.release("x", "b"),  # leaves the line
            lambda: other.try_grant(request("x", "c")),
            lambda: other.release("x", "a"),
            lambda: other.try_grant(request("x", "c")),
            lambda: other.force_release("x", "by the case"),
        ]:
            began = time.monotonic()
            change()
            watch.wait(PATIENCE)
            woken = time.monotonic()
            assert woken - began < PATIENCE
            latencies.append(woken - began)
            # every master published it: take the other messages before the next change
            time.sleep(0.05)
            watch.wait(0)
        started = time.monotonic()
        watch.wait(QUIET)
        assert time.monotonic() - started >= QUIET, "woken with nothing changed"
    print(
        f"\nstate wake-up latency from another client: median "
        f"{statistics.median(latencies) * 1000:.2f} ms, max {max(latencies) * 1000:.2f} ms "
        f"(polling: up to 250 ms)"
    )


def test_a_state_message_wakes_no_waiter(clients: list[RedlockBackend]) -> None:
    watcher, other = clients
    assert other.try_grant(request("x", "holder")) is not None
    with watcher.watch("x", "mine") as waiting, watcher.watch_state("x") as watching:
        assert watcher.try_grant(request("x", "mine")) is None
        time.sleep(0.1)
        watching.wait(0)  # the watcher's own waiter arriving
        waiting.wait(0)
        other.try_grant(request("x", "behind"))
        watching.wait(PATIENCE)
        started = time.monotonic()
        waiting.wait(QUIET)
        assert time.monotonic() - started >= QUIET, "the waiter was woken"


def test_the_marker_is_set_on_every_master_and_runs_out(
    masters: RedlockMasters, prefix: str, clients: list[RedlockBackend]
) -> None:
    watcher, _other = clients
    marker = Keys(prefix).watched("x")
    with watcher.watch_state("x"):
        for index in range(5):
            assert 0 < masters.client(index).pttl(marker) <= WATCHED_MS
    # the watch is gone; its markers live on for WATCHED_MS at most, then publishing stops


def test_a_lock_nobody_watches_publishes_nothing(
    masters: RedlockMasters, clients: list[RedlockBackend]
) -> None:
    """No master publishes a change of a lock without its watchers' marker (the grant script
    once took the master's own marker for it, and published every grant)."""
    _watcher, other = clients
    assert other.try_grant(request("warm-up", "a")) is not None  # scripts loaded, masters marked
    assert other.release("warm-up", "a")
    before = publishes(masters)
    for _ in range(3):
        assert other.try_grant(request("x", "a")) is not None
        assert other.try_grant(request("x", "b")) is None
        assert other.release("x", "b") is False
        assert other.release("x", "a") is True
    assert other.force_release("x", "by the case") == 0
    assert publishes(masters) == before


def test_a_watch_enters_and_is_woken_with_a_minority_of_masters_down(
    masters: RedlockMasters, clients: list[RedlockBackend]
) -> None:
    watcher, other = clients
    masters.kill(0)
    masters.kill(1)
    with watcher.watch_state("x") as watch:
        assert other.try_grant(request("x", "a")) is not None
        started = time.monotonic()
        watch.wait(PATIENCE)
        assert time.monotonic() - started < PATIENCE


def test_a_watch_needs_a_majority_of_masters(
    masters: RedlockMasters, clients: list[RedlockBackend]
) -> None:
    watcher, _other = clients
    for index in (0, 1, 2):
        masters.kill(index)
    with (
        pytest.raises(BackendUnavailable, match="2 of 5 Redis masters could be subscribed"),
        watcher.watch_state("x"),
    ):
        pass


def test_a_grant_given_back_into_line_is_published(
    masters: RedlockMasters, prefix: str, clients: list[RedlockBackend]
) -> None:
    """REQUEUE (a grant without its quorum goes back in line) changes the master's line."""
    watcher, other = clients
    with watcher.watch_state("x") as watch:
        assert other.try_grant(request("x", "a")) is not None
        time.sleep(0.05)
        watch.wait(0)
        client = masters.client(0)
        keys = Keys(prefix)
        requeue = client.register_script(redlock_lua.REQUEUE)
        args = ["a", 1000, "", keys.client_channel_prefix(), "x"]
        assert requeue(keys=[*keys.lock_keys("x"), keys.watched("x")], args=args) == 1
        started = time.monotonic()
        watch.wait(PATIENCE)
        assert time.monotonic() - started < PATIENCE


@pytest.mark.asyncio
async def test_an_asyncio_watcher_follows_another_clients_changes(
    masters: RedlockMasters, prefix: str, clients: list[RedlockBackend]
) -> None:
    _watcher, other = clients
    locks = await tumbler.aio.connect(masters.url(prefix))
    async with locks, locks.watch("x") as states:
        first = await states.__anext__()
        assert not first.holders
        # recheck_interval is 1 s: the grant is seen well before it, by a message
        began = time.monotonic()
        await asyncio.to_thread(other.try_grant, request("x", "a"))
        second = await asyncio.wait_for(states.__anext__(), PATIENCE)
        print(f"\nasyncio watcher: the grant seen after {time.monotonic() - began:.4f} s")
        assert [holder.holder for holder in second.holders] == ["case"]


def test_a_raised_token_is_published(
    masters: RedlockMasters, prefix: str, clients: list[RedlockBackend]
) -> None:
    """RAISE_TOKEN (a master that drew less takes the grant's token) changes the holder a
    quorum shows: a watcher that read the lock between the grant and the raise must hear of
    it (its re-reads may be far apart)."""
    watcher, other = clients
    with watcher.watch_state("x") as watch:
        grant = other.try_grant(request("x", "a"))
        assert grant is not None
        time.sleep(0.05)
        watch.wait(0)  # the grant's messages, taken
        keys = Keys(prefix)
        raise_token = masters.client(0).register_script(redlock_lua.RAISE_TOKEN)
        floor = f"{prefix}:token-floor"  # any key: the raise only keeps the greater there
        lock_keys = [*keys.lock_keys("x"), floor, keys.watched("x")]
        assert raise_token(keys=lock_keys, args=["a", grant.token + 1000]) == 1
        started = time.monotonic()
        watch.wait(PATIENCE)
        assert time.monotonic() - started < PATIENCE
