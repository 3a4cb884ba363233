"""sqlite:// speed-ups: under asyncio, releases and renewals run on the event loop when nothing
waits for the worker thread, and go to the thread (the loop never waits) when the database is
locked; a release rings the doorbells of the waiters it lets through.

The backend's methods are wrapped only to record which thread ran them.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tumbler.aio
from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest
from tumbler.backends.kit.adapter import WouldBlock
from tumbler.backends.sqlite.backend import DOORBELLS, NOWAIT_UPKEEP, SQLiteBackend, _to_wake
from tumbler.testing.conformance.compat import PATIENCE


class Threads:
    """Which thread ran each recorded call, in order; a condition to wait on them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.changed = threading.Condition()

    def add(self, name: str) -> None:
        with self.changed:
            self.calls.append((name, threading.get_ident()))
            self.changed.notify_all()

    def of(self, name: str) -> list[int]:
        with self.changed:
            return [ident for called, ident in self.calls if called == name]

    async def wait_for_call(self, name: str, count: int) -> None:
        def wait() -> bool:
            with self.changed:
                return self.changed.wait_for(lambda: len(self.of(name)) >= count, PATIENCE)

        assert await asyncio.to_thread(wait), f"{name} was not called {count} times"


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> Threads:
    seen = Threads()
    for name in ("try_grant", "release", "renew"):
        original = getattr(SQLiteBackend, name)

        def recorded(self: SQLiteBackend, *args: Any, _name: str = name, _f: Any = original) -> Any:
            seen.add(_name)
            return _f(self, *args)

        monkeypatch.setattr(SQLiteBackend, name, recorded)
    return seen


@contextlib.contextmanager
def write_locked(path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection holding the database's write lock (as another process would)."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        finally:
            db.execute("ROLLBACK")


@pytest.mark.asyncio
async def test_an_idle_clients_release_and_renewal_run_on_the_loop(tmp_path, threads):
    loop_thread = threading.get_ident()
    async with await tumbler.aio.connect(f"sqlite:///{tmp_path / 'locks.db'}") as locks:
        lock = locks.lock("x", ttl=30)
        assert await lock.acquire(timeout=0)
        assert lock.hold is not None
        await lock.hold.extend()
        await lock.release()
    assert threads.of("try_grant")
    assert loop_thread not in threads.of("try_grant")
    assert threads.of("renew") == [loop_thread]
    assert threads.of("release") == [loop_thread]


@pytest.mark.asyncio
async def test_a_release_goes_to_the_thread_while_the_database_is_locked(tmp_path, threads):
    """The loop's attempt finds the write lock taken and gives up at once (the loop goes on:
    this test's own coroutine runs while the release waits); the thread's attempt waits for
    the lock and releases."""
    path = tmp_path / "locks.db"
    loop_thread = threading.get_ident()
    async with await tumbler.aio.connect(f"sqlite:///{path}") as locks:
        lock = locks.lock("x", ttl=30)
        assert await lock.acquire(timeout=0)
        hold = lock.hold
        assert hold is not None
        with write_locked(path):
            # through the hold: another task is another owner context for the lock
            release = asyncio.create_task(hold.release())
            # the thread's attempt has begun: it waits for the write lock
            await threads.wait_for_call("release", 2)
            assert not release.done()
        await asyncio.wait_for(release, PATIENCE)
        assert not await lock.locked()
    attempts = threads.of("release")
    assert attempts[0] == loop_thread
    assert attempts[1] != loop_thread


@pytest.mark.asyncio
async def test_with_synchronous_full_nothing_runs_on_the_loop(tmp_path, threads):
    url = f"sqlite:///{tmp_path / 'locks.db'}?synchronous=full"
    loop_thread = threading.get_ident()
    async with await tumbler.aio.connect(url) as locks:
        lock = locks.lock("x", ttl=30)
        assert await lock.acquire(timeout=0)
        await lock.release()
    assert threads.of("release")
    assert loop_thread not in threads.of("release")


def request(name: str, owner: str) -> GrantRequest:
    return GrantRequest(name, owner, False, 1, False, 30.0, "test", True)


def test_call_nowait_declines_a_locked_database_having_done_nothing(tmp_path):
    path = tmp_path / "locks.db"
    backend = SQLiteBackend(parse_url(f"sqlite:///{path}"))
    try:
        assert backend.try_grant(request("x", "a")) is not None
        with write_locked(path), pytest.raises(WouldBlock):
            backend.call_nowait(backend.release, "x", "a")
        assert backend.inspect("x").locked
        assert backend.call_nowait(backend.release, "x", "a") is True
        assert not backend.inspect("x").locked
    finally:
        backend.close()


def test_call_nowait_leaves_one_call_in_so_many_to_the_thread(tmp_path):
    """The no-wait connection never checkpoints the WAL: the usual one must get some calls."""
    backend = SQLiteBackend(parse_url(f"sqlite:///{tmp_path / 'locks.db'}"))
    try:
        declined = 0
        for _ in range(2 * NOWAIT_UPKEEP):
            try:
                backend.call_nowait(backend.release, "x", "nobody")
            except WouldBlock:
                declined += 1
        assert declined == 2
    finally:
        backend.close()


# -- doorbells: a release wakes the waiters it lets through, in other processes too ----------

needs_doorbells = pytest.mark.skipif(not DOORBELLS, reason="doorbells are Linux-only")

Row = tuple[str, int, int, int, int, int | None, str | None]


def row(
    owner: str, seq: int, *, shared: bool = False, lim: int = 1, token: int | None = None
) -> Row:
    return (owner, seq, int(shared), lim, 1, token, None if token is not None else f"bell-{owner}")


def test_a_mutex_release_rings_only_the_first_waiter():
    assert _to_wake([row("b", 2), row("c", 3)]) == {"bell-b"}


def test_nobody_is_rung_while_a_holder_stays():
    assert _to_wake([row("a", 1, token=7), row("b", 2)]) == set()


def test_readers_are_rung_up_to_the_first_writer():
    line = [
        row("r1", 2, shared=True, lim=0),
        row("r2", 3, shared=True, lim=0),
        row("w", 4),
        row("r3", 5, shared=True, lim=0),
    ]
    assert _to_wake(line) == {"bell-r1", "bell-r2"}


def test_a_semaphore_rings_as_many_waiters_as_permits_are_free():
    line = [
        row("h", 1, shared=True, lim=2, token=5),
        row("a", 2, shared=True, lim=2),
        row("b", 3, shared=True, lim=2),
    ]
    assert _to_wake(line) == {"bell-a"}


@needs_doorbells
def test_a_release_rings_the_waiting_clients_doorbell(tmp_path):
    url = parse_url(f"sqlite:///{tmp_path / 'locks.db'}")
    holder, waiter = SQLiteBackend(url), SQLiteBackend(url)
    rung = threading.Event()
    try:
        assert holder.try_grant(request("x", "a")) is not None
        assert waiter.try_grant(request("x", "b")) is None  # its entry names its doorbell
        assert waiter.hub is not None
        waiter.hub.subscribe("x", rung.set)
        assert holder.release("x", "a") is True
        assert rung.wait(PATIENCE)
    finally:
        holder.close()
        waiter.close()


@needs_doorbells
@pytest.mark.timeout(10)
def test_a_doorbell_closes_even_when_no_ring_can_reach_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing must not depend on a ring getting through: a full socket buffer drops one."""
    from tumbler.backends.sqlite import backend as sqlite_backend

    def dropped(address: str, payload: bytes) -> None:
        raise BlockingIOError("the doorbell's buffer is full")

    url = parse_url(f"sqlite:///{tmp_path / 'locks.db'}")
    waiter = SQLiteBackend(url)
    holder = SQLiteBackend(url)
    try:
        assert holder.try_grant(request("x", "a")) is not None
        assert waiter.try_grant(request("x", "b")) is None  # its doorbell now listens
    finally:
        monkeypatch.setattr(sqlite_backend, "_ring", dropped)
        holder.close()
        waiter.close()
