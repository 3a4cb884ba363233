"""A stock-deduction service over HTTP, with a tumbler lock around each sale (blocking code).

Run two instances on one store and one lock backend, as behind a load balancer::

    mkdir -m 700 /tmp/shop
    python examples/stock_service.py --port 8088 --db /tmp/shop/stock.db --stock 100 \\
        --url sqlite:///tmp/shop/locks.db --mode segmented --segments 4
    python examples/stock_service.py --port 8089 --db /tmp/shop/stock.db \\
        --url sqlite:///tmp/shop/locks.db --mode segmented --segments 4
    curl -X POST http://127.0.0.1:8088/buy      # 200 {"segment": 2}, 409 when sold out
    curl http://127.0.0.1:8089/stock            # {"stock": 99, "segments": [...], "sales": 1}

(``--stock`` makes the store afresh: give it to the first instance only.) A sale reads the
stock, thinks (``--think``: a price lookup, a payment call), and writes the stock back minus
one. ``--mode`` says what protects that: ``none`` (concurrent sales read the same stock: lost
updates, and items sold that never were), ``lock`` (one tumbler lock: exact, one sale at a time
across both instances) or ``segmented`` (the stock split into ``--segments`` rows, each with a
segment of a segmented lock: exact, and as many sales at a time as segments).
``tumbler demo --http`` runs this file twice and measures the three modes.

HTTP comes from the standard library's ``ThreadingHTTPServer``, a thread per connection: the
example needs nothing beyond tumbler, and blocking code wants threads anyway. It keeps
connections alive (HTTP/1.1), as a load balancer's upstream connections are.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType

import tumbler
from stock_store import StockStore

log = logging.getLogger("stock_service")


class StockService:
    """Sells one item a call, under the lock that ``mode`` names."""

    def __init__(
        self,
        locks: tumbler.Locks,
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

    def buy(self) -> int | None:
        """Sell one item: the segment it came from, None when all is sold. Raises
        ``TimeoutError`` when the lock could not be had within the timeout."""
        if self.segmented is not None:
            return self._buy_from_a_segment()
        if self.lock is not None:
            with self.lock:
                return self._buy_from_the_first_segment()
        return self._buy_from_the_first_segment()

    def _buy_from_the_first_segment(self) -> int | None:
        found = self.store.first_in_stock()
        if found is None:
            return None
        segment, left = found
        self._sell(segment, left)
        return segment

    def _buy_from_a_segment(self) -> int | None:
        assert self.segmented is not None
        candidates = list(range(self.segmented.segments))
        while candidates:
            if not self.segmented.acquire(timeout=self.timeout, segments=candidates):
                raise TimeoutError("no segment of the stock's lock came free in time")
            hold = self.segmented.hold
            assert hold is not None  # this thread's, taken just now
            assert hold.segment is not None  # a segmented lock's hold names its segment
            try:
                left = self.store.quantity(hold.segment)
                if left > 0:
                    self._sell(hold.segment, left)
                    return hold.segment
            finally:
                hold.release()
            # That segment is sold out: try again among those with stock. Read without a lock,
            # this is only a hint; what decides is the quantity read under the segment's hold.
            candidates = self.store.segments_in_stock()
        return None

    def _sell(self, segment: int, left: int) -> None:
        time.sleep(self.think)  # the price lookup, the payment call: another sale can read now
        self.store.record_sale(segment, left - 1, self.seller)
        log.info("sold 1 from segment %d, %d left there", segment, left - 1)


class StockServer(ThreadingHTTPServer):
    """The service on ``127.0.0.1:port`` (0: any free port; ``server_port`` tells which)."""

    #: a load generator opens its connections all at once
    request_queue_size = 128

    def __init__(self, port: int, service: StockService) -> None:
        super().__init__(("127.0.0.1", port), StockHandler)
        self.service = service


class StockHandler(BaseHTTPRequestHandler):
    """``POST /buy``: 200 and the segment sold from, 409 when sold out, 503 when the lock
    was not had in time. ``GET /stock``: what is left, and the sales."""

    protocol_version = "HTTP/1.1"
    server: StockServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))  # a body means nothing here
        if self.path != "/buy":
            return self._reply(404, {"error": "no such resource"})
        try:
            segment = self.server.service.buy()
        except TimeoutError as error:  # tumbler's AcquireTimeout is one
            return self._reply(503, {"error": str(error)})
        if segment is None:
            return self._reply(409, {"error": "sold out"})
        return self._reply(200, {"segment": segment})

    def do_GET(self) -> None:
        if self.path != "/stock":
            return self._reply(404, {"error": "no such resource"})
        store = self.server.service.store
        levels = store.levels()
        return self._reply(200, {"stock": sum(levels), "segments": levels, "sales": store.sales()})

    def _reply(self, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode() + b"\n"  # a line, for curl
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        log.debug(format, *args)  # the access log: with --verbose


def options(description: str | None = __doc__) -> argparse.ArgumentParser:
    """The command line of the stock service (the asyncio one's too)."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, default=8088, help="0: any free port (default 8088)")
    parser.add_argument("--db", required=True, help="the stock's SQLite file, shared by instances")
    parser.add_argument("--url", help="tumbler's backend (default: $TUMBLER_URL, else sqlite://)")
    parser.add_argument("--mode", choices=["none", "lock", "segmented"], default="lock")
    parser.add_argument("--segments", type=int, default=4, help="stock rows and lock segments")
    parser.add_argument("--stock", type=int, help="make the store afresh with this many items")
    parser.add_argument("--think", type=float, default=0.01, help="seconds between read and write")
    parser.add_argument("--name", default="", help="this instance's name in the sales")
    parser.add_argument("--lock-name", default="stock", help="the lock's name at the backend")
    parser.add_argument("--verbose", action="store_true", help="also log every request")
    return parser


def serve(args: argparse.Namespace) -> None:
    """Serve until SIGTERM or Ctrl-C, then release what is held and exit."""
    store = StockStore(args.db)
    if args.stock is not None:
        store.create(args.stock, args.segments)
    with tumbler.connect(args.url) as locks:
        service = StockService(
            locks,
            store,
            mode=args.mode,
            segments=args.segments,
            think=args.think,
            seller=args.name,
            lock_name=args.lock_name,
        )
        with StockServer(args.port, service) as server:
            print(
                f"serving on http://127.0.0.1:{server.server_port} (mode {args.mode}, "
                f"locks at {locks.url})",
                flush=True,
            )
            server.serve_forever()


def _exit(signum: int, frame: FrameType | None) -> None:
    sys.exit(0)  # unwinds serve(): the server closes, the client releases what it holds


def main(argv: list[str] | None = None) -> None:
    args = options().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(message)s",
        datefmt="%H:%M:%S",
    )
    signal.signal(signal.SIGTERM, _exit)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: as SIGTERM
        serve(args)


if __name__ == "__main__":
    main()
