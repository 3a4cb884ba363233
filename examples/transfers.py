"""Transfers between accounts under ``locks.multi``: both accounts or neither, never a deadlock.

Threads move money between four accounts of one SQLite database, many of them in opposite
directions at once (A to B while B to A). Each transfer reads both balances, thinks, and
writes both back, under ``locks.multi([payer, payee])``: the names are taken in one order
whatever order they are given in, so two transfers over the same pair never each hold the
account the other waits for. Each write is fenced with its own account's token. At the end
the money is all there, and every transfer was made.

    python examples/transfers.py [DIRECTORY] [--url URL]   # the database goes there

With ``--one-at-a-time``, each transfer takes its two accounts one after the other, in the
order given, as code without ``multi`` would: opposite transfers then wait for each other
until their timeouts, and the example says how many gave up.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import tumbler
from tumbler.fencing import sqlite as fencing

ACCOUNTS = ["account:1", "account:2", "account:3", "account:4"]
OPENING_BALANCE = 1000
TRANSFERS = 40
#: how long a transfer waits for its accounts
PATIENCE = 5.0


def open_books(path: Path) -> None:
    db = sqlite3.connect(path)
    fencing.create_table(db)
    with db:
        db.execute("CREATE TABLE accounts (name TEXT PRIMARY KEY, balance INT)")
        db.executemany(
            "INSERT INTO accounts VALUES (?, ?)", [(name, OPENING_BALANCE) for name in ACCOUNTS]
        )
    db.close()


def transfer(path: Path, tokens: dict[str, int], payer: str, payee: str, amount: int) -> None:
    """Move ``amount`` from ``payer`` to ``payee``: read, think, write, each account fenced."""
    db = sqlite3.connect(path, timeout=30)
    try:
        (paying,) = db.execute("SELECT balance FROM accounts WHERE name = ?", (payer,)).fetchone()
        (paid,) = db.execute("SELECT balance FROM accounts WHERE name = ?", (payee,)).fetchone()
        time.sleep(0.005)  # a fraud check, say: the gap the lock closes
        with db:
            fencing.fence(db, payer, tokens[payer])
            fencing.fence(db, payee, tokens[payee])
            db.execute("UPDATE accounts SET balance = ? WHERE name = ?", (paying - amount, payer))
            db.execute("UPDATE accounts SET balance = ? WHERE name = ?", (paid + amount, payee))
    finally:
        db.close()


def run(directory: Path, url: str, one_at_a_time: bool) -> tuple[int, int]:
    """The transfers; how many were made and how many gave up waiting."""
    path = directory / "books.db"
    open_books(path)
    rng = random.Random(7)
    pairs = [tuple(rng.sample(ACCOUNTS, 2)) for _ in range(TRANSFERS)]
    made = gave_up = 0
    count = threading.Lock()
    with tumbler.connect(url) as locks:

        def one(payer: str, payee: str) -> None:
            nonlocal made, gave_up
            if one_at_a_time:
                done = by_hand(locks, path, payer, payee)
            else:
                try:
                    with locks.multi([payer, payee], timeout=PATIENCE) as hold:
                        transfer(path, dict(hold.tokens), payer, payee, 10)
                    done = True
                except tumbler.AcquireTimeout:
                    done = False
            with count:
                made, gave_up = made + done, gave_up + (not done)

        with ThreadPoolExecutor(max_workers=8) as pool:
            for payer, payee in pairs:
                pool.submit(one, payer, payee)
    return made, gave_up


def by_hand(locks: tumbler.Locks, path: Path, payer: str, payee: str) -> bool:
    """The transfer with its accounts taken one after the other, in the order given."""
    first, second = locks.lock(payer), locks.lock(payee)
    if not first.acquire(timeout=PATIENCE / 10):
        return False
    try:
        if not second.acquire(timeout=PATIENCE / 10):
            return False
        try:
            held, also = first.hold, second.hold
            assert held is not None
            assert also is not None
            transfer(path, {payer: held.token, payee: also.token}, payer, payee, 10)
            return True
        finally:
            second.release()
    finally:
        first.release()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path)
    parser.add_argument("--url", default="memory://transfers")
    parser.add_argument("--one-at-a-time", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.directory or Path(scratch)
        made, gave_up = run(directory, args.url, args.one_at_a_time)
        db = sqlite3.connect(directory / "books.db")
        (total,) = db.execute("SELECT SUM(balance) FROM accounts").fetchone()
        db.close()
    print(f"{made} of {TRANSFERS} transfers made, {gave_up} gave up waiting")
    print(f"money in the books: {total} of {OPENING_BALANCE * len(ACCOUNTS)}")


if __name__ == "__main__":
    main()
