"""Fencing at the resource: a holder paused past its lease cannot write after a newer holder.

Two workers share one lock and one SQLite database. The first takes the lock with a short
lease and pauses (a GC pause, SIGSTOP, a blocked event loop: here it waits until its lease has
run out); the second takes the lock and writes; then the first wakes and writes too, late.
The database's fence refuses that write with ``StaleToken``, and its transaction rolls back.

    python examples/fencing.py [DIRECTORY]     # the database goes there (default: a temp dir)
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from pathlib import Path

import tumbler
from tumbler.fencing import sqlite as fencing

LOCK = "account:7"


def debit(db: sqlite3.Connection, token: int, who: str) -> None:
    """Take 10 from account 7, fenced with ``token``."""
    with db:  # one transaction: the fence and the write commit together or not at all
        fencing.fence(db, LOCK, token)
        db.execute("UPDATE accounts SET balance = balance - 10, last = ? WHERE id = 7", (who,))


def main(directory: Path) -> None:
    db = sqlite3.connect(directory / "accounts.db", timeout=10)
    fencing.create_table(db)
    with db:
        db.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INT, last TEXT)")
        db.execute("INSERT INTO accounts VALUES (7, 100, NULL)")

    # two workers: two clients of one in-process store (on servers: two processes, one URL)
    url = "memory://fencing"
    with tumbler.connect(url) as first, tumbler.connect(url) as second:
        try:
            with first.lock(LOCK, ttl=0.5, renew=False) as paused:
                print(f"first worker: holds {LOCK} with token {paused.token}, and pauses")
                paused.wait_lost()  # the pause outlasts the lease
                with second.lock(LOCK, timeout=5) as newer:
                    debit(db, newer.token, "second")
                    print(f"second worker: holds it with token {newer.token}, debited 10")
                try:
                    debit(db, paused.token, "first")
                    print("first worker: late write accepted (this must not happen)")
                except tumbler.StaleToken as refused:
                    print(f"first worker wakes, writes, and is refused: {refused}")
        except tumbler.LockLost:
            print("first worker: its with block ends in LockLost, as it should")

    balance, last = db.execute("SELECT balance, last FROM accounts WHERE id = 7").fetchone()
    print(f"account 7: balance {balance}, last debited by the {last} worker")
    db.close()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as scratch:
            main(Path(scratch))
