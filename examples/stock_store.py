"""The stock that both instances of the stock service share: an SQLite file.

The stock is split into segments, one row each (table ``stock``), and every sale is a row of
``sales``, inserted in the transaction that writes the stock back: however the writes to the
stock race, the sales are counted exactly. A service that sells under one lock, or none, takes
from the first segment that has stock; under a segmented lock, from the segment its hold
names.

Reading the stock and writing it back are separate transactions, as in a service that reads a
row, calls a payment API and writes back: that gap is the race a lock has to close.
(``SET quantity = quantity - 1`` would hide it, but no real service's work between the read
and the write fits in one SQL statement.)
"""

from __future__ import annotations

import sqlite3
from contextlib import closing

__all__ = ["StockStore"]


class StockStore:
    """The stock kept in the SQLite file at ``path`` (made by :meth:`create`)."""

    #: seconds a statement waits for another writer's transaction before giving up
    busy_timeout = 30.0

    def __init__(self, path: str) -> None:
        self.path = path

    def _connect(self) -> sqlite3.Connection:
        # A connection per call: the services call from many threads, and opening an SQLite
        # file costs some tens of microseconds.
        db = sqlite3.connect(self.path, timeout=self.busy_timeout)
        # A commit waits for no fsync (with the write-ahead log, a power cut may lose the last
        # sales but never breaks the file): writers hold the write lock for microseconds, not
        # for a disk's flush, so that a run measures the locks rather than the disk.
        db.execute("PRAGMA synchronous = NORMAL")
        return db

    def create(self, items: int, segments: int = 1) -> None:
        """Make the store afresh: ``items`` split as evenly as can be over ``segments`` rows,
        and no sales."""
        if segments < 1 or items < 0:
            raise ValueError("a store needs at least one segment and a stock >= 0")
        share, extra = divmod(items, segments)
        rows = [(segment, share + (segment < extra)) for segment in range(segments)]
        with closing(self._connect()) as db, db:
            db.execute("PRAGMA journal_mode = WAL")  # readers never wait for a writer
            db.execute("DROP TABLE IF EXISTS stock")
            db.execute("DROP TABLE IF EXISTS sales")
            db.execute("CREATE TABLE stock (segment INTEGER PRIMARY KEY, quantity INTEGER)")
            db.execute("CREATE TABLE sales (segment INTEGER, seller TEXT)")
            db.executemany("INSERT INTO stock VALUES (?, ?)", rows)

    def levels(self) -> list[int]:
        """The quantity left in each segment, in segment order."""
        with closing(self._connect()) as db:
            return [row[0] for row in db.execute("SELECT quantity FROM stock ORDER BY segment")]

    def sales(self) -> int:
        """Sales recorded so far (exact: one row each)."""
        with closing(self._connect()) as db:
            return int(db.execute("SELECT count(*) FROM sales").fetchone()[0])

    def segments_in_stock(self) -> list[int]:
        """The segments that have stock left."""
        with closing(self._connect()) as db:
            rows = db.execute("SELECT segment FROM stock WHERE quantity > 0 ORDER BY segment")
            return [row[0] for row in rows]

    def first_in_stock(self) -> tuple[int, int] | None:
        """The first segment that has stock, and its quantity; None when all is sold."""
        with closing(self._connect()) as db:
            row = db.execute(
                "SELECT segment, quantity FROM stock WHERE quantity > 0 ORDER BY segment LIMIT 1"
            ).fetchone()
            return None if row is None else (int(row[0]), int(row[1]))

    def quantity(self, segment: int) -> int:
        """The quantity left in ``segment``."""
        with closing(self._connect()) as db:
            row = db.execute("SELECT quantity FROM stock WHERE segment = ?", (segment,)).fetchone()
            if row is None:
                raise LookupError(f"the store has no segment {segment}")
            return int(row[0])

    def record_sale(self, segment: int, left: int, seller: str) -> None:
        """Write ``left`` back as ``segment``'s quantity and record one sale, in one
        transaction."""
        with closing(self._connect()) as db, db:
            db.execute("UPDATE stock SET quantity = ? WHERE segment = ?", (left, segment))
            db.execute("INSERT INTO sales VALUES (?, ?)", (segment, seller))
