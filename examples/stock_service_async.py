"""The stock-deduction service of ``stock_service.py``, written for asyncio (``tumbler.aio``).

Same options, endpoints and modes::

    python examples/stock_service_async.py --port 8088 --db /tmp/shop/stock.db --stock 100 \\
        --url sqlite:///tmp/shop/locks.db --mode segmented --segments 4

A sale's "think" is an ``await``, so one event loop has many sales in flight; the lock still
lets one at a time (one per segment) read and write the stock. SQLite calls are blocking, so
they run in a worker thread (``asyncio.to_thread``).

HTTP is a minimal HTTP/1.1 on the standard library's asyncio streams: a request line, headers
and a ``Content-Length`` body, answered with a JSON body, on a connection kept alive. That is
all a load balancer or a load generator sends here, and it keeps ``tumbler demo --http
--flavour asyncio`` free of any package beyond tumbler. It is not a web server: no chunked
bodies, no pipelining limits, no timeouts on slow clients. A real service would put these
handlers in aiohttp or a Starlette app under uvicorn; the lock code stays as it is.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
from http import HTTPStatus

import tumbler.aio
from stock_service import options
from stock_store import StockStore

log = logging.getLogger("stock_service")


class StockService:
    """Sells one item a call, under the lock that ``mode`` names."""

    def __init__(
        self,
        locks: tumbler.aio.AsyncLocks,
        store: StockStore,
        *,
        mode: str,
        segments: int = 4,
        think: float = 0.01,
        seller: str = "",
        lock_name: str = "stock",
        timeout: float = 30.0,
    ) -> None:
        self.store = store
        self.think = think
        self.seller = seller or f"pid {os.getpid()}"
        self.timeout = timeout
        self.lock = locks.lock(lock_name, timeout=timeout) if mode == "lock" else None
        self.segmented = (
            locks.segmented(lock_name, segments=segments, timeout=timeout)
            if mode == "segmented"
            else None
        )

    async def buy(self) -> int | None:
        """Sell one item: the segment it came from, None when all is sold. Raises
        ``TimeoutError`` when the lock could not be had within the timeout."""
        if self.segmented is not None:
            return await self._buy_from_a_segment()
        if self.lock is not None:
            async with self.lock:
                return await self._buy_from_the_first_segment()
        return await self._buy_from_the_first_segment()

    async def _buy_from_the_first_segment(self) -> int | None:
        found = await asyncio.to_thread(self.store.first_in_stock)
        if found is None:
            return None
        segment, left = found
        await self._sell(segment, left)
        return segment

    async def _buy_from_a_segment(self) -> int | None:
        assert self.segmented is not None
        candidates = list(range(self.segmented.segments))
        while candidates:
            if not await self.segmented.acquire(timeout=self.timeout, segments=candidates):
                raise TimeoutError("no segment of the stock's lock came free in time")
            hold = self.segmented.hold
            assert hold is not None  # this task's, taken just now
            assert hold.segment is not None  # a segmented lock's hold names its segment
            try:
                left = await asyncio.to_thread(self.store.quantity, hold.segment)
                if left > 0:
                    await self._sell(hold.segment, left)
                    return hold.segment
            finally:
                await hold.release()
            # That segment is sold out: try again among those with stock. Read without a lock,
            # this is only a hint; what decides is the quantity read under the segment's hold.
            candidates = await asyncio.to_thread(self.store.segments_in_stock)
        return None

    async def _sell(self, segment: int, left: int) -> None:
        await asyncio.sleep(self.think)  # the price lookup, the payment call
        await asyncio.to_thread(self.store.record_sale, segment, left - 1, self.seller)
        log.info("sold 1 from segment %d, %d left there", segment, left - 1)

    async def answer(self, method: str, path: str) -> tuple[int, dict[str, object]]:
        """``POST /buy`` and ``GET /stock``, as in ``stock_service.py``: status and body."""
        if (method, path) == ("POST", "/buy"):
            try:
                segment = await self.buy()
            except TimeoutError as error:  # tumbler's AcquireTimeout is one
                return 503, {"error": str(error)}
            return (409, {"error": "sold out"}) if segment is None else (200, {"segment": segment})
        if (method, path) == ("GET", "/stock"):
            levels = await asyncio.to_thread(self.store.levels)
            sales = await asyncio.to_thread(self.store.sales)
            return 200, {"stock": sum(levels), "segments": levels, "sales": sales}
        return 404, {"error": "no such resource"}


async def converse(
    service: StockService, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Answer one connection's requests, one after another, until the client closes it."""
    try:
        while request_line := await reader.readline():
            method, path, version = request_line.decode("latin-1").split()
            headers = {}
            while (line := await reader.readline()).strip():
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip().lower()
            await reader.readexactly(int(headers.get("content-length", 0)))
            status, body = await service.answer(method, path)
            log.debug('"%s %s %s" %d', method, path, version, status)
            data = json.dumps(body).encode() + b"\n"  # a line, for curl
            head = (
                f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
            )
            writer.write(head.encode() + data)
            await writer.drain()
            if version != "HTTP/1.1" or headers.get("connection") == "close":
                break
    except (ValueError, ConnectionError, asyncio.IncompleteReadError):
        pass  # a request this server does not understand, or a client gone: hang up
    finally:
        writer.close()


async def serve(args: argparse.Namespace) -> None:
    """Serve until SIGTERM or Ctrl-C, then release what is held and return."""
    store = StockStore(args.db)
    if args.stock is not None:
        store.create(args.stock, args.segments)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with await tumbler.aio.connect(args.url) as locks:
        service = StockService(
            locks,
            store,
            mode=args.mode,
            segments=args.segments,
            think=args.think,
            seller=args.name,
            lock_name=args.lock_name,
        )
        conversations: set[asyncio.Task[None]] = set()

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            conversations.add(task)
            try:
                await converse(service, reader, writer)
            finally:
                conversations.discard(task)

        server = await asyncio.start_server(accept, "127.0.0.1", args.port, backlog=128)
        port = server.sockets[0].getsockname()[1]
        print(
            f"serving on http://127.0.0.1:{port} (mode {args.mode}, locks at {locks.url})",
            flush=True,
        )
        await stop.wait()
        server.close()
        # Sales in flight end here, before the client closes: a cancelled waiter leaves the
        # lock's line, a cancelled holder releases.
        for task in conversations:
            task.cancel()
        await asyncio.gather(*conversations, return_exceptions=True)


def main(argv: list[str] | None = None) -> None:
    args = options(__doc__).parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(message)s",
        datefmt="%H:%M:%S",
    )
    with contextlib.suppress(KeyboardInterrupt):  # a Ctrl-C before the loop's handler is set
        asyncio.run(serve(args))


if __name__ == "__main__":
    main()
