"""renew_all on SQLite and memory, in both flavours: every due lease in one call.

SQLite renews them in one transaction, bounded by the call's timeout; memory in one pass
under its lock. Either way a lease that ran out, was released, or is only a waiter's entry is
not renewed (nor revived), and the others are.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tumbler
import tumbler.aio
from tumbler import BackendUnavailable
from tumbler.backends.contract import GrantRequest, Renewal
from tumbler.backends.sqlite.backend import SQLiteBackend
from tumbler.testing import ManualClock
from tumbler.testing.conformance.compat import PATIENCE

FLAVOURS = ["sync", "async"]


def request(name: str, owner: str, ttl: float = 30.0) -> GrantRequest:
    return GrantRequest(name, owner, False, 1, False, ttl, "test", True)


class Backends:
    """One backend of a kind, in the flavour under test, with a way to make a lease run out
    without waiting for it."""

    def __init__(self, kind: str, flavour: str, tmp_path: Path) -> None:
        self.kind = kind
        self.flavour = flavour
        self.clock = ManualClock() if kind == "memory" else None
        if kind == "memory":
            self.url = f"memory://{uuid.uuid4().hex}"
        else:
            self.path = tmp_path / "locks.db"
            self.url = f"sqlite:///{self.path}"

    def options(self) -> dict[str, Any]:
        return {"clock": self.clock} if self.clock is not None else {}

    def expire(self, name: str) -> None:
        if self.clock is not None:
            # a manual clock moves for every name: renew the others first (see the caller)
            raise AssertionError("use expire_all on memory")
        with contextlib.closing(sqlite3.connect(self.path)) as db, db:
            db.execute("UPDATE tumbler_entries SET expires_at = 0 WHERE name = ?", (name,))


async def call(flavour: str, backend: Any, method: str, *args: Any) -> Any:
    result = getattr(backend, method)(*args)
    return await result if flavour == "async" else result


@pytest.mark.asyncio
@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("kind", ["sqlite", "memory"])
async def test_renew_all_renews_the_live_grants_and_nothing_else(tmp_path, kind, flavour):
    setup = Backends(kind, flavour, tmp_path)
    if flavour == "sync":
        locks: Any = tumbler.connect(setup.url, **setup.options())
    else:
        locks = await tumbler.aio.connect(setup.url, **setup.options())
    backend = locks._backend
    try:
        for name in ("a", "b", "expired", "released"):
            assert await call(flavour, backend, "try_grant", request(name, f"{name}-owner", 10.0))
        assert await call(flavour, backend, "try_grant", request("a", "a-waiter")) is None
        assert await call(flavour, backend, "release", "released", "released-owner")
        if setup.clock is not None:
            # every lease is 10 s: at 9 s renew all but "expired" for 30 s, then pass 10 s
            setup.clock.advance(9)
            keep = [Renewal(n, f"{n}-owner", 30.0) for n in ("a", "b")]
            assert await call(flavour, backend, "renew_all", keep, 1.0) == [30.0, 30.0]
            setup.clock.advance(2)
        else:
            setup.expire("expired")
        renewals = [
            Renewal("a", "a-owner", 20.0),
            Renewal("expired", "expired-owner", 20.0),
            Renewal("b", "b-owner", 25.0),
            Renewal("released", "released-owner", 20.0),
            Renewal("a", "a-waiter", 20.0),
            Renewal("nobody", "no-owner", 20.0),
        ]
        result = await call(flavour, backend, "renew_all", renewals, 5.0)
        assert result == [20.0, None, 25.0, None, None, None]
        assert await call(flavour, backend, "renew_all", [], 5.0) == []
        state = await call(flavour, backend, "inspect", "b")
        assert 20.0 < state.holders[0].expires_in <= 25.0
        # the expired grant was not revived: anyone may take it now
        assert await call(flavour, backend, "try_grant", request("expired", "someone-else"))
    finally:
        if flavour == "sync":
            locks.close()
        else:
            await locks.close()


def test_sqlite_renews_them_all_in_one_transaction(tmp_path):
    with tumbler.connect(f"sqlite:///{tmp_path / 'locks.db'}") as locks:
        backend = locks._backend
        renewals = [Renewal(f"job-{i}", f"owner-{i}", 30.0) for i in range(50)]
        for renewal in renewals:
            assert backend.try_grant(request(renewal.name, renewal.owner))
        statements: list[str] = []
        backend._connection().set_trace_callback(statements.append)
        try:
            assert backend.renew_all(renewals, 5.0) == [30.0] * 50
        finally:
            backend._connection().set_trace_callback(None)
        transactions = [s for s in statements if s.startswith(("BEGIN", "COMMIT"))]
        assert transactions == ["BEGIN IMMEDIATE", "COMMIT"]


class Blocker:
    """Another process's connection holding the database's write lock."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("BEGIN IMMEDIATE")

    def close(self) -> None:
        self.db.execute("ROLLBACK")
        self.db.close()


class NotedGrants:
    """What :func:`noted_grants_behind_a_blocker` saw of ``SQLiteBackend.try_grant``."""

    def __init__(self) -> None:
        #: the thread of each call, in order
        self.threads: list[str] = []
        #: set once a call runs on the adapter's thread
        self.on_thread = threading.Event()


@contextlib.contextmanager
def noted_grants_behind_a_blocker(path: Path) -> Iterator[NotedGrants]:
    """``SQLiteBackend.try_grant`` noting the thread of each call, while another process's
    connection holds the write lock of the database at ``path`` (released on leaving)."""
    noted = NotedGrants()
    original: Callable[..., Any] = SQLiteBackend.try_grant

    def noting(self: SQLiteBackend, grant_request: GrantRequest) -> Any:
        thread = threading.current_thread().name
        noted.threads.append(thread)
        if thread == "tumbler-backend":
            noted.on_thread.set()
        return original(self, grant_request)

    blocker = Blocker(path)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(SQLiteBackend, "try_grant", noting)
            yield noted
    finally:
        blocker.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_sqlite_renew_all_gives_up_at_its_timeout_not_busy_timeout(tmp_path, flavour):
    """With a long busy_timeout, a renewal that cannot get the write lock still ends with
    BackendUnavailable at its own timeout (it used to wait busy_timeout: a minute here)."""
    path = tmp_path / "locks.db"
    url = f"sqlite:///{path}?busy_timeout=60"
    renewals = [Renewal("job", "owner", 30.0)]
    if flavour == "sync":
        locks: Any = tumbler.connect(url)
    else:
        locks = await tumbler.aio.connect(url)
    try:
        assert await call(flavour, locks._backend, "try_grant", request("job", "owner"))
        blocker = Blocker(path)
        try:
            # asyncio: the adapter's own bound may end the wait first, the same instant
            with pytest.raises(
                BackendUnavailable, match=r"the call's timeout|did not finish within"
            ):
                await call(flavour, locks._backend, "renew_all", renewals, 0.2)
        finally:
            blocker.close()
        assert await call(flavour, locks._backend, "renew_all", renewals, 5.0) == [30.0]
    finally:
        if flavour == "sync":
            locks.close()
        else:
            await locks.close()


@pytest.mark.asyncio
async def test_asyncio_renew_all_gives_up_at_its_timeout_behind_a_stuck_call(tmp_path):
    """The adapter's thread is busy with a poll that waits (up to 30 s) for the write lock: a
    renewal cannot even begin, and still ends with BackendUnavailable at its timeout."""
    path = tmp_path / "locks.db"
    async with await tumbler.aio.connect(f"sqlite:///{path}?busy_timeout=30") as locks:
        adapter = locks._backend
        assert await adapter.try_grant(request("job", "owner"))
        with noted_grants_behind_a_blocker(path) as noted:
            stuck = asyncio.create_task(adapter.try_grant(request("other", "owner-2")))
            # the call is first tried on the loop, refused there (the write lock is taken),
            # and only then runs on the thread, where it waits
            assert await asyncio.to_thread(noted.on_thread.wait, PATIENCE)
            with pytest.raises(BackendUnavailable, match="did not finish within"):
                await adapter.renew_all([Renewal("job", "owner", 30.0)], 0.2)
            assert not stuck.done()
        assert await stuck
        assert await adapter.renew_all([Renewal("job", "owner", 30.0)], 5.0) == [30.0]


@pytest.mark.asyncio
async def test_a_call_the_locked_database_refuses_on_the_loop_runs_again_on_the_thread(tmp_path):
    """Why the stuck-call case waits for the call on the thread: the adapter first tries it on
    the event loop, where the write lock of another process refuses it, and the caller goes
    on before the thread has taken it."""
    path = tmp_path / "locks.db"
    async with await tumbler.aio.connect(f"sqlite:///{path}?busy_timeout=30") as locks:
        adapter = locks._backend
        with noted_grants_behind_a_blocker(path) as noted:
            waiting = asyncio.create_task(adapter.try_grant(request("job", "owner")))
            await asyncio.sleep(0)  # the task's first step: its try on the loop
            assert noted.threads[:1] == [threading.current_thread().name]
        assert await waiting
        assert noted.threads == [threading.current_thread().name, "tumbler-backend"]
