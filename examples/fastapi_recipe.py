"""tumbler in a FastAPI app: the stock-deduction service, one sale at a time across instances.

    pip install 'tumbler-locks[redis]' fastapi uvicorn
    TUMBLER_URL=redis://127.0.0.1:6379/0 STOCK_DB=/tmp/shop/stock.db \\
        uvicorn --app-dir examples fastapi_recipe:app --workers 4

- The asyncio client is opened in the app's lifespan and closed at its end: its life is the
  app's, one client per worker process (each uvicorn worker runs its own lifespan), shared by
  every request. It is kept on ``app.state`` and reached through a dependency.
- ``POST /buy`` reads the stock, thinks (a payment call, say), and writes the stock back less
  one, under the lock ``stock``: requests of every instance wait their turn, and none sells
  an item twice. 409 when sold out; 503 when the lock could not be had within its timeout.
- ``POST /restock?items=N`` shows a try with a timeout: it waits for the lock a moment only,
  and answers 503 with Retry-After when someone else holds it.

The stock is an SQLite file, standing for the service's database; reading it and writing it
back are separate transactions, as in a service with work between the read and the write:
that gap is the race the lock closes. tests/frameworks/test_fastapi.py runs this app.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse

import tumbler
import tumbler.aio

#: how long a sale waits for the lock before answering 503
BUY_TIMEOUT = 10.0
#: how long a restock waits for the lock before answering 503: a moment
RESTOCK_TIMEOUT = 0.1


class Stock:
    """The stock count, one row of an SQLite file (the service's database)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def create(self, items: int) -> None:
        """Make the table with ``items`` in stock, unless it is there already."""
        with closing(self._connect()) as db, db:
            db.execute("CREATE TABLE IF NOT EXISTS stock (id INTEGER PRIMARY KEY, quantity INT)")
            db.execute("INSERT OR IGNORE INTO stock VALUES (1, ?)", (items,))

    def _read(self) -> int:
        with closing(self._connect()) as db:
            (quantity,) = db.execute("SELECT quantity FROM stock WHERE id = 1").fetchone()
            return int(quantity)

    def _write(self, quantity: int) -> None:
        with closing(self._connect()) as db, db:
            db.execute("UPDATE stock SET quantity = ? WHERE id = 1", (quantity,))

    # sqlite3 blocks: its calls run in a worker thread, so the event loop serves on meanwhile
    async def read(self) -> int:
        return await asyncio.to_thread(self._read)

    async def write(self, quantity: int) -> None:
        await asyncio.to_thread(self._write, quantity)


async def get_locks(request: Request) -> tumbler.aio.AsyncLocks:
    """The app's lock client (an ``async def``: FastAPI would run a plain one in a thread)."""
    locks: tumbler.aio.AsyncLocks = request.app.state.locks
    return locks


async def get_stock(request: Request) -> Stock:
    stock: Stock = request.app.state.stock
    return stock


Locks = Annotated[tumbler.aio.AsyncLocks, Depends(get_locks)]
StockHere = Annotated[Stock, Depends(get_stock)]


def create_app(
    lock_url: str | None = None,
    stock_path: str = "stock.db",
    *,
    items: int = 100,
    think: float = 0.01,
) -> FastAPI:
    """The service: locks at ``lock_url`` (None: $TUMBLER_URL, else an SQLite file in the user's
    cache directory), the stock in the SQLite file ``stock_path`` (made with ``items`` if
    missing), ``think`` seconds of work between a sale's read and its write."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        stock = Stock(stock_path)
        await asyncio.to_thread(stock.create, items)
        app.state.stock = stock
        # `async with` closes the client when the app shuts down: grants still held are
        # released, waiters end in ClientClosed, the renewals stop
        async with await tumbler.aio.connect(lock_url) as locks:
            app.state.locks = locks
            yield

    app = FastAPI(lifespan=lifespan)

    @app.exception_handler(tumbler.AcquireTimeout)
    async def busy(request: Request, error: tumbler.AcquireTimeout) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=503, headers={"Retry-After": "1"})

    @app.post("/buy")
    async def buy(locks: Locks, stock: StockHere) -> dict[str, int]:
        async with locks.lock("stock", timeout=BUY_TIMEOUT):
            left = await stock.read()
            if left <= 0:
                raise HTTPException(409, "sold out")
            await asyncio.sleep(think)  # the work between the read and the write
            await stock.write(left - 1)
        return {"left": left - 1}

    @app.post("/restock")
    async def restock(
        items: Annotated[int, Query(gt=0)], locks: Locks, stock: StockHere
    ) -> dict[str, int]:
        lock = locks.lock("stock")
        if not await lock.acquire(timeout=RESTOCK_TIMEOUT):
            raise HTTPException(503, "the stock is busy: try again", headers={"Retry-After": "1"})
        try:
            left = await stock.read() + items
            await stock.write(left)
        finally:
            await lock.release()
        return {"left": left}

    return app


app = create_app(os.environ.get("TUMBLER_URL"), os.environ.get("STOCK_DB", "stock.db"))
