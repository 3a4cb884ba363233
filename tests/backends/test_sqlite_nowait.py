"""sqlite:// speed-ups: under asyncio, grants, releases and renewals run on the event loop when
nothing waits for the worker thread, and go to the thread (the loop never waits) when the
database is locked, the thread is busy or other tasks poll; a release rings the doorbells of the
waiters it lets through.

The backend's methods are wrapped only to record which thread ran them.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tumbler.aio
from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest
from tumbler.backends.kit.adapter import INLINE_GRANTS, WouldBlock
from tumbler.backends.sqlite import backend as sqlite_backend
from tumbler.backends.sqlite.backend import DOORBELLS, NOWAIT_UPKEEP, SQLiteBackend, _to_wake
from tumbler.testing.conformance.compat import PATIENCE


class Threads:
    """Which thread ran each recorded call (and about which lock), in order; a condition to
    wait on them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.changed = threading.Condition()

    def add(self, name: str, lock_name: str) -> None:
        with self.changed:
            self.calls.append((name, lock_name, threading.get_ident()))
            self.changed.notify_all()

    def of(self, name: str, lock_name: str | None = None) -> list[int]:
        with self.changed:
            return [
                ident
                for called, about, ident in self.calls
                if called == name and lock_name in (None, about)
            ]

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
            first = args[0]
            seen.add(_name, first.name if isinstance(first, GrantRequest) else first)
            return _f(self, *args)

        monkeypatch.setattr(SQLiteBackend, name, recorded)
    original_many = SQLiteBackend.try_grant_many

    def recorded_many(self: SQLiteBackend, requests: Any) -> Any:
        for request in requests:  # a batch of polls: each counts as a try
            seen.add("try_grant", request.name)
        return original_many(self, requests)

    monkeypatch.setattr(SQLiteBackend, "try_grant_many", recorded_many)
    return seen


@pytest.fixture
def no_upkeep(monkeypatch: pytest.MonkeyPatch) -> None:
    """No call is left to the thread for WAL upkeep (one in NOWAIT_UPKEEP): the tests that
    say where each call ran need not count calls."""
    monkeypatch.setattr(sqlite_backend, "NOWAIT_UPKEEP", 1 << 62)


class Submissions:
    """The calls the adapter handed to its worker thread, by function name."""

    def __init__(self, adapter: Any) -> None:
        self.names: list[str] = []
        worker = adapter._worker
        original = worker.submit

        def submit(function: Any, args: Any, *, urgent: bool, keys: Any = ()) -> Any:
            self.names.append(getattr(function, "__name__", repr(function)))
            return original(function, args, urgent=urgent, keys=keys)

        worker.submit = submit


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
async def test_an_idle_clients_grant_release_and_renewal_run_on_the_loop(tmp_path, threads):
    loop_thread = threading.get_ident()
    async with await tumbler.aio.connect(f"sqlite:///{tmp_path / 'locks.db'}") as locks:
        lock = locks.lock("x", ttl=30)
        assert await lock.acquire(timeout=0)
        assert lock.hold is not None
        await lock.hold.extend()
        await lock.release()
    assert threads.of("try_grant") == [loop_thread]
    assert threads.of("renew") == [loop_thread]
    assert threads.of("release") == [loop_thread]


@pytest.mark.asyncio
async def test_uncontended_pairs_never_hop_to_the_thread(tmp_path, threads, no_upkeep):
    async with await tumbler.aio.connect(f"sqlite:///{tmp_path / 'locks.db'}") as locks:
        submitted = Submissions(locks._backend)
        lock = locks.lock("x", ttl=30)
        tokens = []
        for _ in range(20):
            async with lock as hold:
                tokens.append(hold.token)
            # the loop's pass ends between pairs, as it does in a task that awaits anything
            # else: pairs that never let it end are held to INLINE_GRANTS a pass (see below)
            await asyncio.sleep(0)
        assert submitted.names == []
    assert tokens == sorted(set(tokens))  # 20 grants, each a new token
    assert len(threads.of("try_grant")) == len(threads.of("release")) == 20
    assert set(threads.of("try_grant")) == {threading.get_ident()}


@pytest.mark.asyncio
async def test_one_call_in_so_many_goes_to_the_thread_for_upkeep(tmp_path):
    async with await tumbler.aio.connect(f"sqlite:///{tmp_path / 'locks.db'}") as locks:
        submitted = Submissions(locks._backend)
        lock = locks.lock("x", ttl=30)
        for _ in range(NOWAIT_UPKEEP):
            async with lock:
                pass
            await asyncio.sleep(0)  # a pass of the loop per pair, as above
        # 2 * NOWAIT_UPKEEP calls offered: 2 declined, whichever of the two kinds they were
        assert len(submitted.names) == 2
        assert set(submitted.names) <= {"try_grant", "release"}


@pytest.mark.asyncio
async def test_a_grant_goes_to_the_thread_while_the_thread_is_busy(
    tmp_path, monkeypatch, threads, no_upkeep
):
    """A try made while the worker runs an earlier call waits for it there: on the loop it
    could overtake that call (a release of the same key queued behind it, say)."""
    started, proceed = threading.Event(), threading.Event()
    original = SQLiteBackend.force_release

    def held(self: SQLiteBackend, name: str, note: str) -> int:
        started.set()
        assert proceed.wait(PATIENCE)
        return original(self, name, note)

    monkeypatch.setattr(SQLiteBackend, "force_release", held)
    loop_thread = threading.get_ident()
    async with await tumbler.aio.connect(f"sqlite:///{tmp_path / 'locks.db'}") as locks:
        blocker = asyncio.create_task(locks.force_release("elsewhere", reason="a test"))
        assert await asyncio.to_thread(started.wait, PATIENCE)
        acquire = asyncio.create_task(locks.lock("x").acquire(timeout=0))
        await asyncio.sleep(0)  # its try is queued behind the blocker
        assert threads.of("try_grant") == []
        assert not acquire.done()
        proceed.set()
        await blocker
        assert await acquire
    (ran,) = threads.of("try_grant")
    assert ran != loop_thread


@pytest.mark.asyncio
async def test_a_grant_goes_to_the_thread_while_the_database_is_locked(
    tmp_path, threads, no_upkeep
):
    """The loop's try finds another connection's write lock and gives up at once, having
    written nothing; the thread's try waits for the lock and grants."""
    path = tmp_path / "locks.db"
    loop_thread = threading.get_ident()
    async with await tumbler.aio.connect(f"sqlite:///{path}") as locks:
        lock = locks.lock("x", ttl=30)
        with write_locked(path):
            acquire = asyncio.create_task(lock.acquire(timeout=0))
            await threads.wait_for_call("try_grant", 2)  # the thread's try waits
            assert not acquire.done()
        assert await asyncio.wait_for(acquire, PATIENCE)
        # the first token: the loop's try took none
        assert [holder.token for holder in (await locks.status("x")).holders] == [1]
    attempts = threads.of("try_grant")
    assert attempts[0] == loop_thread
    assert attempts[1] != loop_thread


@pytest.mark.asyncio
async def test_a_grant_goes_to_the_thread_while_another_task_polls(tmp_path, threads, no_upkeep):
    """Other tasks' polls keep the thread busy (and are batched there): a try then queues
    with them. The poller's own tries may run on the loop: nobody else's are about."""
    url = f"sqlite:///{tmp_path / 'locks.db'}"
    loop_thread = threading.get_ident()
    async with await tumbler.aio.connect(url) as locks, await tumbler.aio.connect(url) as holder:
        held = holder.lock("x")
        assert await held.acquire(timeout=0)
        adapter = locks._backend
        polled = asyncio.Event()
        original = adapter.try_grant

        async def try_grant(request: GrantRequest) -> Any:
            grant = await original(request)
            if grant is None:
                polled.set()
            return grant

        adapter.try_grant = try_grant
        waiter = asyncio.create_task(locks.lock("x").acquire(timeout=PATIENCE))
        await asyncio.wait_for(polled.wait(), PATIENCE)  # the waiter polls now
        assert await locks.lock("y").acquire(timeout=0)
        await held.release()
        assert await asyncio.wait_for(waiter, PATIENCE)
    assert threads.of("try_grant", "y") != [loop_thread]
    assert len(threads.of("try_grant", "y")) == 1
    # the poller's own tries run on the loop, but for one that came while the thread ran
    # "y" (a try waits for its answer before the next, so only one can)
    tries = threads.of("try_grant", "x")
    assert loop_thread in tries
    assert len([thread for thread in tries if thread != loop_thread]) <= 1


@pytest.mark.asyncio
async def test_a_burst_of_tries_runs_on_the_loop_only_up_to_its_share(tmp_path, threads, no_upkeep):
    """Tasks that all try in one pass of the loop: INLINE_GRANTS of them on the loop, the
    rest on the thread (decided there in batches), all granted."""
    loop_thread = threading.get_ident()
    tasks = 3 * INLINE_GRANTS
    async with await tumbler.aio.connect(f"sqlite:///{tmp_path / 'locks.db'}") as locks:
        granted = await asyncio.gather(
            *(locks.lock(f"burst-{index}").acquire(timeout=0) for index in range(tasks))
        )
        assert all(granted)
    ran = threads.of("try_grant")
    assert ran.count(loop_thread) == INLINE_GRANTS
    assert len(ran) == tasks


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


# -- short pauses: a blocking grant or release does not sleep a millisecond per collision ---


@pytest.mark.parametrize("call", ["try_grant", "release"])
def test_a_blocking_call_takes_short_pauses_before_the_busy_handler(tmp_path, monkeypatch, call):
    """Another connection holds the write lock and lets go during the call's first short
    pause: the call then gets the lock. With ``busy_timeout=0`` SQLite's busy handler would
    have refused at once, so the call got it through the short pauses."""
    path = tmp_path / "locks.db"
    backend = SQLiteBackend(parse_url(f"sqlite:///{path}?busy_timeout=0"))
    pauses: list[float] = []
    try:
        assert backend.try_grant(request("x", "a")) is not None
        with contextlib.ExitStack() as held:
            blocker = held.enter_context(write_locked(path))

            def pause(seconds: float) -> None:
                pauses.append(seconds)
                blocker.execute("ROLLBACK")  # the other connection lets go
                blocker.execute("BEGIN")  # (write_locked's ROLLBACK ends this one)

            monkeypatch.setattr(sqlite_backend, "_pause", pause)
            if call == "try_grant":
                assert backend.try_grant(request("y", "b")) is not None
            else:
                assert backend.release("x", "a") is True
        assert pauses == [sqlite_backend.SHORT_PAUSES[0]]
    finally:
        backend.close()


def test_a_blocking_grant_leaves_the_rest_of_the_wait_to_the_busy_handler(tmp_path, monkeypatch):
    """A write lock held through every short pause: the grant tried once per pause, wrote
    nothing, and then waited in SQLite's busy handler (``busy_timeout``: 0 here, so it is
    refused)."""
    path = tmp_path / "locks.db"
    backend = SQLiteBackend(parse_url(f"sqlite:///{path}?busy_timeout=0"))
    pauses: list[float] = []
    monkeypatch.setattr(sqlite_backend, "_pause", pauses.append)
    try:
        with write_locked(path), pytest.raises(tumbler.BackendUnavailable, match="busy_timeout"):
            backend.try_grant(request("x", "a"))
        assert pauses == list(sqlite_backend.SHORT_PAUSES)
        assert not backend.inspect("x").locked
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
def test_a_client_makes_its_doorbell_when_it_first_waits(tmp_path):
    """A client that only takes free locks has no socket; its first waiter makes one, which
    the release of the lock it waits for rings, and a closed client makes none."""
    url = parse_url(f"sqlite:///{tmp_path / 'locks.db'}")
    holder, waiter = SQLiteBackend(url), SQLiteBackend(url)
    rung = threading.Event()
    try:
        assert holder.try_grant(request("x", "a")) is not None
        assert holder.release("x", "a") is True
        assert holder.try_grant(request("x", "a")) is not None
        assert holder._doorbell is None
        assert waiter._doorbell is None
        assert waiter.try_grant(request("x", "b")) is None
        assert waiter._doorbell is not None
        assert waiter.hub is not None
        waiter.hub.subscribe("x", rung.set)
        assert holder.release("x", "a") is True
        assert rung.wait(PATIENCE)
        assert holder._doorbell is None  # ringing another's doorbell needs none of one's own
    finally:
        holder.close()
        waiter.close()
    assert holder._own_doorbell() is None


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


def test_the_doorbells_sender_is_closed_at_exit() -> None:
    """The process's one socket for ringing doorbells is closed when the process ends, not
    left to the garbage collector (a ResourceWarning at every exit of a process that rang)."""
    program = (
        "from tumbler.backends.sqlite import backend\n"
        "try:\n"
        "    backend._ring('nobody-listens', b'1')\n"
        "except OSError:\n"
        "    pass\n"
    )
    result = subprocess.run(
        [sys.executable, "-X", "dev", "-c", program], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "ResourceWarning" not in result.stderr, result.stderr
