"""force_release leaves a note for each holder it evicted, where ``evicted`` finds it.

SQLite and memory, both flavours (the asyncio one through the adapter). The note is there for
every owner whose live grant was removed, and for nobody else (a waiter, an owner that released
or whose lease ran out by itself, an owner nobody knows); it lasts at least as long as the
evicted lease had left, and then it goes, so that notes never pile up.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

import tumbler
import tumbler.aio
from tumbler.backends.contract import GrantRequest
from tumbler.backends.kit.boot import boot_time_ns
from tumbler.backends.memory import backend as memory_backend
from tumbler.backends.sqlite import backend as sqlite_backend
from tumbler.testing import ManualClock
from tumbler.testing.conformance.compat import PATIENCE

FLAVOURS = ["sync", "async"]
NOTE = "force-released by ops@build-7 (pid 4242, user ops) at 2026-11-24T10:00:00Z: stuck deploy"


def request(
    name: str, owner: str, ttl: float = 30.0, *, shared: bool = False, limit: int = 1
) -> GrantRequest:
    return GrantRequest(name, owner, shared, limit, False, ttl, "test", True)


async def call(flavour: str, backend: Any, method: str, *args: Any) -> Any:
    result = getattr(backend, method)(*args)
    return await result if flavour == "async" else result


@contextlib.asynccontextmanager
async def backend_of(url: str, flavour: str, **options: Any) -> Any:
    """The backend under a client of ``url``, in the flavour under test."""
    if flavour == "sync":
        with tumbler.connect(url, **options) as locks:
            yield locks._backend
    else:
        async with await tumbler.aio.connect(url, **options) as alocks:
            yield alocks._backend


def sql(path: Path, statement: str, *parameters: Any) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        return db.execute(statement, parameters).fetchall()


@pytest.mark.asyncio
@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("kind", ["sqlite", "memory"])
async def test_a_forced_release_leaves_its_note_for_each_evicted_owner_and_nobody_else(
    tmp_path, kind, flavour
):
    clock = ManualClock() if kind == "memory" else None
    path = tmp_path / "locks.db"
    url = f"memory://{uuid.uuid4().hex}" if kind == "memory" else f"sqlite:///{path}"
    options = {"clock": clock} if clock is not None else {}
    async with backend_of(url, flavour, **options) as backend:
        # a grant whose lease ran out by itself before the forced release
        assert await call(flavour, backend, "try_grant", request("job", "expired", 5.0))
        if clock is not None:
            clock.advance(10)
        else:
            sql(path, "UPDATE tumbler_entries SET expires_at = 0 WHERE owner = 'expired'")
        # two shared holders, one that came and went, and one waiting
        shared = {"shared": True, "limit": 2}
        assert await call(flavour, backend, "try_grant", request("job", "released", **shared))
        assert await call(flavour, backend, "try_grant", request("job", "first", **shared))
        assert await call(flavour, backend, "release", "job", "released")
        assert await call(flavour, backend, "try_grant", request("job", "second", **shared))
        assert await call(flavour, backend, "try_grant", request("job", "waiter", **shared)) is None
        assert await call(flavour, backend, "try_grant", request("other", "bystander"))

        assert await call(flavour, backend, "force_release", "job", NOTE) == 2

        for owner in ("first", "second"):
            assert await call(flavour, backend, "evicted", "job", owner) == NOTE
        for owner in ("waiter", "released", "expired", "nobody-knows-me"):
            assert await call(flavour, backend, "evicted", "job", owner) is None
        # a note is for that name only, and a lock left alone has none
        assert await call(flavour, backend, "evicted", "other", "first") is None
        assert await call(flavour, backend, "evicted", "other", "bystander") is None
        # the waiter stays, and is granted now that the holders are gone
        assert await call(flavour, backend, "try_grant", request("job", "waiter", **shared))
        assert await call(flavour, backend, "evicted", "job", "waiter") is None


@pytest.mark.asyncio
@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_on_memory_the_note_outlives_the_evicted_lease_then_goes(flavour):
    clock = ManualClock()
    url = f"memory://{uuid.uuid4().hex}"
    async with backend_of(url, flavour, clock=clock) as backend:
        assert await call(flavour, backend, "try_grant", request("job", "holder", 30.0))
        clock.advance(10)
        assert await call(flavour, backend, "force_release", "job", NOTE) == 1
        # the lease had 20 s left: the note is kept that long and NOTE_GRACE more
        clock.advance(20 + memory_backend.NOTE_GRACE - 0.001)
        assert await call(flavour, backend, "evicted", "job", "holder") == NOTE
        clock.advance(0.002)
        assert await call(flavour, backend, "evicted", "job", "holder") is None

        # a note nobody asks for is dropped by a later forced release (of any name)
        assert await call(flavour, backend, "try_grant", request("job", "unasked", 30.0))
        assert await call(flavour, backend, "force_release", "job", NOTE) == 1
        clock.advance(30 + memory_backend.NOTE_GRACE)
        assert await call(flavour, backend, "force_release", "elsewhere", "another note") == 0
        blocking = backend if flavour == "sync" else backend.backend
        assert blocking._store.evictions == {}


@pytest.mark.asyncio
@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_on_sqlite_the_note_outlives_the_evicted_lease_then_is_swept(
    tmp_path, flavour, monkeypatch
):
    # a short grace, so that the note's end comes within the test
    monkeypatch.setattr(sqlite_backend, "NOTE_GRACE", 0.1)
    path = tmp_path / "locks.db"
    async with backend_of(f"sqlite:///{path}", flavour) as backend:
        assert await call(flavour, backend, "try_grant", request("job", "holder", 0.5))
        [(lease_end,)] = sql(path, "SELECT expires_at FROM tumbler_entries WHERE owner = 'holder'")
        assert await call(flavour, backend, "force_release", "job", NOTE) == 1
        assert await call(flavour, backend, "evicted", "job", "holder") == NOTE
        # kept until the lease would have ended, and the grace after it
        [(kept_until,)] = sql(path, "SELECT expires_at FROM tumbler_evictions")
        assert kept_until == lease_end + 100_000_000

        # and gone after that: never before (the time is read after the answer came)
        while await call(flavour, backend, "evicted", "job", "holder") is not None:
            assert boot_time_ns() < kept_until + PATIENCE * 1e9, "the note never went"
            await asyncio.sleep(0.005)
        assert boot_time_ns() >= kept_until
        assert sql(path, "SELECT count(*) FROM tumbler_evictions") == [(1,)]
        # expired notes are swept with the grants' rows
        assert await call(flavour, backend, "try_grant", request("later", "someone"))
        assert sql(path, "SELECT count(*) FROM tumbler_evictions") == [(0,)]


@pytest.mark.asyncio
@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_a_file_from_before_the_notes_gets_their_table_at_connect(tmp_path, flavour):
    path = tmp_path / "locks.db"
    url = f"sqlite:///{path}"
    with tumbler.connect(url) as locks:
        assert locks._backend.try_grant(request("job", "holder"))
    # what an older tumbler left: no notes table (and a grant still live)
    sql(path, "DROP TABLE tumbler_evictions")
    async with backend_of(url, flavour) as backend:
        assert await call(flavour, backend, "force_release", "job", NOTE) == 1
        assert await call(flavour, backend, "evicted", "job", "holder") == NOTE


def test_a_new_boot_clears_the_notes_with_the_leases(tmp_path):
    path = tmp_path / "locks.db"
    url = f"sqlite:///{path}"
    with tumbler.connect(url) as locks:
        backend = locks._backend
        assert backend.try_grant(request("job", "holder"))
        assert backend.force_release("job", NOTE) == 1
    sql(path, "UPDATE tumbler_meta SET value = 'an-earlier-boot' WHERE key = 'boot_id'")
    with tumbler.connect(url) as after:
        assert after._backend.evicted("job", "holder") is None
    assert sql(path, "SELECT count(*) FROM tumbler_evictions") == [(0,)]
