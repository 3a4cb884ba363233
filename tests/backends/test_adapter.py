"""The asyncio adapter over SQLite: renewals and releases go before queued polls, and calls of
one owner keep their order (a cancelled waiter's clean-up runs after its own try_grant).

The SQLite backend is real; its methods are wrapped only to record, on the adapter's worker
thread, the order in which calls ran (and, for a few, to hold the worker at a known point).
"""

from __future__ import annotations

import asyncio
import collections
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tumbler.aio
from tumbler.backends.contract import GrantRequest, Renewal
from tumbler.backends.sqlite.backend import SQLiteBackend
from tumbler.errors import BackendUnavailable
from tumbler.testing.conformance.compat import PATIENCE

pytestmark = pytest.mark.asyncio

WAITERS = 800


class Log:
    """What ran on the worker thread (and what the loop submitted), in order."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str, object]] = []
        self._counts: collections.Counter[tuple[str, str]] = collections.Counter()
        #: requests polled (a batch counts its requests)
        self.polled = 0
        self._changed = threading.Condition()

    def add(self, event: str, kind: str, key: object) -> None:
        with self._changed:
            self.entries.append((event, kind, key))
            self._counts[event, kind] += 1
            if isinstance(key, int):
                self.polled += key
            self._changed.notify_all()

    def count(self, event: str, kinds: tuple[str, ...]) -> int:
        return sum(self._counts[event, kind] for kind in kinds)

    async def wait_for(self, predicate: Callable[[], bool], what: str) -> None:
        def wait() -> bool:
            with self._changed:
                return self._changed.wait_for(predicate, PATIENCE)

        assert await asyncio.to_thread(wait), f"timed out waiting until {what}"


def record_worker_calls(monkeypatch: pytest.MonkeyPatch, log: Log) -> None:
    """Wrap the backend's methods (on the class, before the adapter looks them up)."""

    def wrap(name: str, key: Callable[..., object]) -> None:
        original = getattr(SQLiteBackend, name, None)
        if original is None:
            return

        def recorded(self: SQLiteBackend, *args: Any) -> Any:
            log.add("ran", name, key(*args))
            return original(self, *args)

        monkeypatch.setattr(SQLiteBackend, name, recorded)

    wrap("try_grant", lambda request: 1)
    wrap("try_grant_many", lambda requests: len(requests))
    wrap("renew", lambda name, owner, ttl: ((name, owner),))
    wrap("renew_all", lambda renewals, timeout: tuple((r.name, r.owner) for r in renewals))
    wrap("release", lambda name, owner: ((name, owner),))


POLLS = ("try_grant", "try_grant_many")


def record_queueing(adapter: Any, log: Log) -> None:
    """Note when an urgent call is in the worker's queue (logged as ``submit`` returns) and
    when the worker begins it, both by the call's future: a call that never runs (its caller
    gave up, or a renewal's bound ran out while it was queued) must not be matched with a
    later call about the same holds."""
    worker = adapter._worker
    submit, run_one = worker.submit, worker._run_one

    def queued(function: Any, args: Any, *, urgent: bool, keys: Any = ()) -> Any:
        future = submit(function, args, urgent=urgent, keys=keys)
        if urgent:
            log.add("queued", "urgent", future)
        return future

    def began(call: Any) -> Any:
        log.add("began", "", call.future)
        return run_one(call)

    worker.submit = queued
    worker._run_one = began


def polls_passed(log: Log) -> Iterator[tuple[str, object, int]]:
    """For each urgent call that ran on the worker: the backend method it ran and that
    method's holds, and how many poll calls (a batch counts once) started after it was queued
    and before it began."""
    entries = list(log.entries)
    began = [index for index, (event, _, _) in enumerate(entries) if event == "began"]
    starts = {id(entries[index][2]): index for index in began}
    for at, (event, _, future) in enumerate(entries):
        start = starts.get(id(future)) if event == "queued" else None
        if start is None:
            continue
        # what it ran is logged before the worker begins its next call (only the loop's
        # queueing can come between); nothing, if its bound ran out in the queue
        end = next((index for index in began if index > start), len(entries))
        kind, key = next(
            ((k, key) for e, k, key in entries[start + 1 : end] if e == "ran"), ("expired", None)
        )
        polls = sum(1 for e, k, _ in entries[at + 1 : start] if e == "ran" and k in POLLS)
        yield kind, key, polls


@pytest.fixture
def fsync_free_dir(tmp_path: Path) -> Iterator[Path]:
    """A private directory in memory-backed storage (/dev/shm) where the machine has it, else
    ``tmp_path``. The 800 waiters' polls grow the WAL fast, and the worker thread's commit that
    crosses SQLite's threshold checkpoints it, two fsyncs: on a disk that other tests keep busy
    one took 0.4 s, which a 1 s lease with its renewal queued behind did not survive (shown
    with ``strace -e inject=fdatasync:delay_enter=400000``). The case is about the order of
    calls on the thread, not about the disk."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    directory = Path(tempfile.mkdtemp(dir=shm, prefix="tumbler-adapter-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def test_renewals_and_releases_do_not_wait_behind_many_polls(fsync_free_dir, monkeypatch):
    """800 tasks of one client poll 800 held locks; an idle holder with a 3 s lease on the
    same client keeps it, and no poll starts between a renewal or release being queued and its
    start (only the one poll call already running then, if any, goes first).

    The order is what the adapter promises, and is checked call by call (``late``). The lease
    is the user's view of it, and is no shorter than the pauses this CPU-bound case (800
    tasks) gets beside a full run's other workers: a 1 s lease was lost there with every
    renewal in order, and a 2 s one beside a torture soak (load average 14).

    The names differ because a client's waiters on one lock queue inside the client, behind
    a single poller; another client holds them."""
    log = Log()
    record_worker_calls(monkeypatch, log)
    url = f"sqlite:///{fsync_free_dir / 'locks.db'}"
    names = [f"busy-{index}" for index in range(WAITERS)]
    async with await tumbler.aio.connect(url) as locks, await tumbler.aio.connect(url) as blocker:
        for name in names:
            assert await blocker.lock(name).acquire(timeout=0)
        polled_before = log.polled  # the blocker's own grants
        record_queueing(locks._backend, log)
        idle = locks.lock("idle", ttl=3.0)
        assert await idle.acquire(timeout=PATIENCE)
        hold = idle.hold
        hold.on_lost(lambda _: log.add("lost", "", None))
        busy = locks.lock("busy")
        assert await busy.acquire(timeout=PATIENCE)
        busy_owner = busy.hold._request.owner
        waiters = [asyncio.create_task(locks.lock(name).acquire(timeout=None)) for name in names]
        # every waiter has polled at least twice: the queue is full of polls
        await log.wait_for(lambda: log.polled >= polled_before + 2 * WAITERS, "the waiters poll")
        renewals = ("renew", "renew_all")
        renewed = log.count("ran", renewals)
        # two leases' worth of renewals (every ttl/3) while they poll
        await log.wait_for(
            lambda: log.count("ran", renewals) >= renewed + 6 or log.count("lost", ("",)) > 0,
            "renewals ran or the hold was lost",
        )
        assert hold.held
        assert not hold.lost
        await busy.release()
        assert hold.held
        assert not hold.lost
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        await idle.release()
    passed = list(polls_passed(log))
    assert any(kind == "release" and key == (("busy", busy_owner),) for kind, key, _ in passed)
    assert sum(1 for kind, _, _ in passed if kind in renewals) >= 6
    late = [(kind, count) for kind, _, count in passed if count > 0]
    assert not late, f"urgent calls waited behind polls: {late}"


async def test_the_order_check_matches_each_urgent_call_with_its_own_start(tmp_path, monkeypatch):
    """The check above must not pair a renewal that never began (its bound ran out in the
    queue) with the next call about the same hold: a poll that ran between the two would be
    counted against the renewal, which the worker never ran."""
    log = Log()
    record_worker_calls(monkeypatch, log)
    gates = [threading.Event(), threading.Event()]
    entered = [threading.Event(), threading.Event()]
    original = SQLiteBackend.force_release

    def held(self: SQLiteBackend, name: str, note: str) -> int:
        index = int(name)
        entered[index].set()
        assert gates[index].wait(PATIENCE)
        return original(self, name, note)

    monkeypatch.setattr(SQLiteBackend, "force_release", held)
    async with await tumbler.aio.connect(f"sqlite:///{tmp_path / 'locks.db'}") as locks:
        adapter = locks._backend
        record_queueing(adapter, log)
        assert await adapter.try_grant(request("x", "a")) is not None
        # the worker busy: what follows queues behind it
        first = asyncio.create_task(adapter.force_release("0", "a test"))
        assert await asyncio.to_thread(entered[0].wait, PATIENCE)
        with pytest.raises(BackendUnavailable):
            await adapter.renew_all([Renewal("x", "a", 30.0)], timeout=0.05)
        poll = asyncio.create_task(adapter.try_grant(request("y", "b")))
        await asyncio.sleep(0)  # queued
        gates[0].set()
        await first
        assert await poll is not None
        second = asyncio.create_task(adapter.force_release("1", "a test"))
        assert await asyncio.to_thread(entered[1].wait, PATIENCE)
        release = asyncio.create_task(adapter.release("x", "a"))
        await asyncio.sleep(0)  # queued
        gates[1].set()
        await second
        assert await release is True
    assert log.count("queued", ("urgent",)) == 2
    assert log.count("ran", ("try_grant",)) == 2
    assert list(polls_passed(log)) == [("release", (("x", "a"),), 0)]


@pytest.fixture
def hold_worker(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """``force_release`` holds the worker thread until ``proceed`` is set: the calls made
    meanwhile queue up behind it."""
    started, proceed = threading.Event(), threading.Event()
    original = SQLiteBackend.force_release

    def held(self: SQLiteBackend, name: str, note: str) -> int:
        started.set()
        assert proceed.wait(PATIENCE)
        return original(self, name, note)

    monkeypatch.setattr(SQLiteBackend, "force_release", held)
    return started, proceed


def request(name: str, owner: str) -> GrantRequest:
    return GrantRequest(name, owner, False, 1, False, 30.0, "test", True)


async def test_a_release_passes_other_owners_polls_but_not_its_owners(tmp_path, hold_worker):
    started, proceed = hold_worker
    async with await tumbler.aio.connect(f"sqlite:///{tmp_path / 'locks.db'}") as locks:
        adapter = locks._backend
        blocker = asyncio.create_task(adapter.force_release("elsewhere", "a test"))
        assert await asyncio.to_thread(started.wait, PATIENCE)
        # queued behind the blocker, in this order
        mine = asyncio.create_task(adapter.try_grant(request("x", "a")))
        theirs = asyncio.create_task(adapter.try_grant(request("x", "b")))
        await asyncio.sleep(0)  # both submitted
        release = asyncio.create_task(adapter.release("x", "a"))
        await asyncio.sleep(0)
        proceed.set()
        await blocker
        # a's try_grant ran before a's release (promoted with it), and b's after: b got it
        assert (await mine) is not None
        assert await release is True
        assert (await theirs) is not None


@pytest.mark.parametrize("where", ["queued", "running"])
async def test_a_cancelled_waiters_grant_does_not_survive(tmp_path, monkeypatch, where):
    """A task cancelled while its try_grant is queued on the worker (it never runs) or running
    there (it grants): either way the clean-up release comes after it, and the lock ends up
    free. The worker is kept busy when the try is made, so that the try goes to it and not
    inline on the loop (see the inline case below)."""
    blocking, unblock = threading.Event(), threading.Event()
    started, proceed = threading.Event(), threading.Event()
    loop_thread = threading.get_ident()
    original_force = SQLiteBackend.force_release

    def held_force(self: SQLiteBackend, name: str, note: str) -> int:
        blocking.set()
        assert unblock.wait(PATIENCE)
        return original_force(self, name, note)

    monkeypatch.setattr(SQLiteBackend, "force_release", held_force)
    if where == "running":
        original = SQLiteBackend.try_grant

        def held(self: SQLiteBackend, grant_request: GrantRequest) -> Any:
            if grant_request.name == "victim" and not started.is_set():
                assert threading.get_ident() != loop_thread, "the try ran inline"
                started.set()
                assert proceed.wait(PATIENCE)
            return original(self, grant_request)

        monkeypatch.setattr(SQLiteBackend, "try_grant", held)
    url = f"sqlite:///{tmp_path / 'locks.db'}"
    async with await tumbler.aio.connect(url) as locks:
        adapter = locks._backend
        releases = asyncio.Event()
        original_release = adapter.release

        async def release(name: str, owner: str) -> bool:
            releases.set()
            return await original_release(name, owner)

        adapter.release = release
        blocker = asyncio.create_task(adapter.force_release("elsewhere", "a test"))
        assert await asyncio.to_thread(blocking.wait, PATIENCE)
        acquire = asyncio.create_task(locks.lock("victim").acquire(timeout=0))
        await asyncio.sleep(0)  # its try_grant is queued behind the blocker
        if where == "running":
            unblock.set()
            assert await asyncio.to_thread(started.wait, PATIENCE)
        acquire.cancel()
        await asyncio.wait_for(releases.wait(), PATIENCE)  # the clean-up is submitted
        unblock.set()
        proceed.set()
        with pytest.raises(asyncio.CancelledError):
            await acquire
        await blocker
        assert (await locks.status("victim")).holders == ()
        async with await tumbler.aio.connect(url) as other:
            assert await other.lock("victim").acquire(timeout=0)


async def test_a_grant_made_inline_is_withdrawn_when_its_task_is_cancelled_meanwhile(
    tmp_path, monkeypatch
):
    """A try_grant on the loop cannot be interrupted; a cancellation that arrives while it
    runs (here: requested from inside it) is seen at the task's next step, and the grant it
    made is released by the lock logic's clean-up, as for a try on the worker."""
    loop_thread = threading.get_ident()
    original = SQLiteBackend.try_grant
    granted: list[tuple[int, object]] = []

    def cancelled_meanwhile(self: SQLiteBackend, grant_request: GrantRequest) -> Any:
        grant = original(self, grant_request)
        if grant_request.name == "victim" and not granted:  # the cancelled task's try
            granted.append((threading.get_ident(), grant))
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
        return grant

    monkeypatch.setattr(SQLiteBackend, "try_grant", cancelled_meanwhile)
    url = f"sqlite:///{tmp_path / 'locks.db'}"
    async with await tumbler.aio.connect(url) as locks:
        lock = locks.lock("victim")
        acquire = asyncio.create_task(lock.acquire(timeout=PATIENCE))
        with pytest.raises(asyncio.CancelledError):
            await acquire
        ((ran_on, grant),) = granted
        assert ran_on == loop_thread
        assert grant is not None  # it did grant, inline
        assert (await locks.status("victim")).holders == ()
        async with await tumbler.aio.connect(url) as other:
            assert await other.lock("victim").acquire(timeout=0)


async def test_a_release_queued_on_the_worker_is_not_overtaken_by_a_later_inline_grant(
    tmp_path, hold_worker
):
    """Owner a's release waits on the busy worker; a's next try of the same lock must run
    after it (on the worker too). Run inline, it would find a's grant still there (held:
    the same grant back), and the release would then remove the grant a was told it has."""
    started, proceed = hold_worker
    async with await tumbler.aio.connect(f"sqlite:///{tmp_path / 'locks.db'}") as locks:
        adapter = locks._backend
        first = await adapter.try_grant(request("x", "a"))
        assert first is not None
        blocker = asyncio.create_task(adapter.force_release("elsewhere", "a test"))
        assert await asyncio.to_thread(started.wait, PATIENCE)
        release = asyncio.create_task(adapter.release("x", "a"))
        await asyncio.sleep(0)  # queued on the worker
        again = asyncio.create_task(adapter.try_grant(request("x", "a")))
        await asyncio.sleep(0)
        assert not again.done()  # it waits for the worker, behind the release
        proceed.set()
        await blocker
        assert await release is True
        second = await again
        assert second is not None
        assert second.token > first.token  # a new grant, after the release
        assert [holder.token for holder in (await adapter.inspect("x")).holders] == [second.token]
