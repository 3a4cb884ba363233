"""A stock-deduction WSGI app for a prefork server, with one tumbler client per worker.

    cd examples/gunicorn_recipe
    python stock_app.py --db /tmp/shop/stock.db --stock 100      # make the store
    STOCK_DB=/tmp/shop/stock.db TUMBLER_URL=sqlite:///tmp/shop/locks.db \\
        gunicorn -c gunicorn.conf.py stock_app:application
    curl -X POST http://127.0.0.1:8000/buy        # 200 {"left": 99}, 409 when sold out

gunicorn.conf.py preloads this module in gunicorn's master (``preload_app``) and then forks the
workers. A client made here at import would be the master's, and raise ``ForkedClient`` in
every worker; so the module only keeps a place for the client, and gunicorn.conf.py's hooks
fill it in each worker after the fork (``post_fork``) and close it when the worker exits
(``worker_exit``). docs/frameworks.md has the why, and a lazy alternative for any server.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import Any

import tumbler

#: this worker's client: connect_locks() makes it in the worker, after the fork
_locks: tumbler.Locks | None = None


def connect_locks() -> None:
    """Connect this worker's client (gunicorn.conf.py's ``post_fork``, in the worker)."""
    global _locks
    _locks = tumbler.connect(os.environ.get("TUMBLER_URL"))


def close_locks() -> None:
    """Release what this worker still holds and close its client (``worker_exit``)."""
    if _locks is not None:
        _locks.close()


def locks() -> tumbler.Locks:
    if _locks is None:
        raise RuntimeError("no tumbler client in this process: serve with -c gunicorn.conf.py")
    return _locks


def open_store() -> sqlite3.Connection:
    # a connection per request: the workers are processes, each request opens its own
    return sqlite3.connect(os.environ["STOCK_DB"], timeout=30, isolation_level=None)


def create_store(path: str, quantity: int) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS stock (quantity INTEGER NOT NULL)")
        db.execute("CREATE TABLE IF NOT EXISTS sales (seller TEXT NOT NULL)")
        db.execute("DELETE FROM stock")
        db.execute("DELETE FROM sales")
        db.execute("INSERT INTO stock VALUES (?)", (quantity,))
    db.close()


def sell_one() -> tuple[str, dict[str, object]]:
    """Read the stock, think, write it back minus one: right only one sale at a time."""
    db = open_store()
    try:
        (left,) = db.execute("SELECT quantity FROM stock").fetchone()
        if left <= 0:
            return "409 Conflict", {"error": "sold out"}
        time.sleep(float(os.environ.get("STOCK_THINK", "0.02")))  # a payment call, say
        db.execute("BEGIN IMMEDIATE")
        db.execute("UPDATE stock SET quantity = ?", (left - 1,))
        db.execute("INSERT INTO sales VALUES (?)", (f"pid {os.getpid()}",))
        db.execute("COMMIT")
        return "200 OK", {"left": left - 1}
    finally:
        db.close()


def level() -> dict[str, object]:
    db = open_store()
    try:
        (left,) = db.execute("SELECT quantity FROM stock").fetchone()
        sellers = [seller for (seller,) in db.execute("SELECT DISTINCT seller FROM sales")]
        (sales,) = db.execute("SELECT count(*) FROM sales").fetchone()
        return {"stock": left, "sales": sales, "sellers": sorted(sellers)}
    finally:
        db.close()


StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def application(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """``POST /buy``: 200, 409 when sold out, 503 when the lock was not had in time.
    ``GET /stock``: what is left, and the sales."""
    route = (environ["REQUEST_METHOD"], environ["PATH_INFO"])
    if route == ("POST", "/buy"):
        try:
            with locks().lock("stock", timeout=10):
                status, body = sell_one()
        except tumbler.AcquireTimeout:
            status, body = "503 Service Unavailable", {"error": "busy: try again"}
    elif route == ("GET", "/stock"):
        status, body = "200 OK", level()
    else:
        status, body = "404 Not Found", {"error": "no such resource"}
    data = json.dumps(body).encode() + b"\n"
    start_response(
        status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
    )
    return [data]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Make the stock's store afresh.")
    parser.add_argument("--db", required=True, help="the stock's SQLite file")
    parser.add_argument("--stock", type=int, required=True, help="the items in stock")
    args = parser.parse_args()
    create_store(args.db, args.stock)
