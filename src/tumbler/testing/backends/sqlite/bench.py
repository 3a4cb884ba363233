"""The SQLite backend as the bench sees it: the floor (the least a lock in the same file can
cost), and a "version" that says which SQLite library and which file system the file is on
(tmpfs and ext4 time differently).

``sqlite-floor`` is no library: a lock made of nothing but SQLite's write lock and one row, on
one ``sqlite3`` connection per session with the backend's settings (WAL, ``synchronous``
NORMAL): ``BEGIN IMMEDIATE; INSERT OR IGNORE; COMMIT`` to acquire, ``BEGIN IMMEDIATE; DELETE;
COMMIT`` to release, a waiter polling every millisecond. No lease, token, fairness or
wake-up: tumbler's rows beside it show what those cost.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import uuid
from dataclasses import dataclass
from typing import ClassVar

from tumbler._url import parse_url
from tumbler.backends.sqlite.backend import filesystem_type, resolve_path
from tumbler.testing.bench import StoreBench, SyncContender, SyncSession

#: how often a floor waiter tries again
FLOOR_POLL = 0.001


class _FloorSession:
    def __init__(self, db: sqlite3.Connection, name: str, timeout: float) -> None:
        self._db = db
        self._name = name
        self._owner = uuid.uuid4().hex
        self._timeout = timeout

    def _round(self, statement: str) -> int:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            changed = db.execute(statement, (self._name, self._owner)).rowcount
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return changed

    def acquire(self) -> None:
        deadline = time.monotonic() + self._timeout
        insert = "INSERT OR IGNORE INTO tumbler_bench_floor (name, owner) VALUES (?, ?)"
        while self._round(insert) != 1:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no grant of {self._name!r} within {self._timeout} s")
            time.sleep(FLOOR_POLL)

    def release(self) -> None:
        self._round("DELETE FROM tumbler_bench_floor WHERE name = ? AND owner = ?")

    def close(self) -> None:
        self._db.close()


@dataclass(frozen=True)
class SQLiteFloor(SyncContender):
    """The floor: SQLite's write lock and one row per held lock, nothing else."""

    name: ClassVar[str] = "sqlite-floor"
    mechanism: ClassVar[str] = (
        "the floor, no library: BEGIN IMMEDIATE; INSERT OR IGNORE; COMMIT to acquire, "
        "BEGIN IMMEDIATE; DELETE; COMMIT to release, on one sqlite3 connection in the same "
        "file (WAL, synchronous NORMAL); no lease, token, fairness or wake-up"
    )
    floor: ClassVar[bool] = True

    def open(self, lock_name: str) -> SyncSession:
        path, _ = resolve_path(parse_url(self.url))
        db = sqlite3.connect(path, timeout=self.options.timeout, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS tumbler_bench_floor "
                "(name TEXT PRIMARY KEY, owner TEXT NOT NULL) WITHOUT ROWID"
            )
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.close()
            raise
        return _FloorSession(db, lock_name, self.options.timeout)


@dataclass(frozen=True)
class SQLiteBench(StoreBench):
    def version(self, url: str) -> str | None:
        """``SQLite 3.40.1 on ext4``: the library, and the file system of the URL's file."""
        shown = f"SQLite {sqlite3.sqlite_version}"
        path = parse_url(url).path
        if not path:
            return shown
        try:
            with open("/proc/self/mountinfo", encoding="utf-8") as file:
                mountinfo = file.read()
        except OSError:
            return shown
        directory = os.path.dirname(os.path.abspath(os.path.expanduser(path)))
        where = filesystem_type(directory, mountinfo)
        return f"{shown} on {where}" if where else shown


BENCH = SQLiteBench(floors=(SQLiteFloor,), schemes=("sqlite",))
