"""Lock metrics for Prometheus: tumbler's OpenTelemetry observer, exported on /metrics.

    pip install 'tumbler-locks[otel]' opentelemetry-sdk opentelemetry-exporter-prometheus
    python examples/otel_prometheus.py --port 9464
    curl -s http://127.0.0.1:9464/metrics | grep '^tumbler_'

A few worker threads take turns on a few locks of one client (``--url``, ``memory://`` by
default), each holding its lock a moment (``--hold``) and giving up on a wait longer than
``--timeout``, so that every kind of figure moves: grants, timeouts, waiters, acquire and hold
durations, renewals (with ``--ttl`` short enough). ``--spans`` prints the spans too (the
console exporter; in production an OTLP exporter sends them to a tracing backend).

The application sets OpenTelemetry up (an SDK ``MeterProvider`` with a
``PrometheusMetricReader``); tumbler only records into it: ``tumbler.otel`` needs the
``opentelemetry-api`` package alone. The metrics server listens on 127.0.0.1 only, unless
``--host`` says otherwise. ``--operations N`` stops the workers after N acquisitions in all
(the server stays up until Ctrl-C or SIGTERM), for a look at figures that no longer move.
Prometheus names the metrics with underscores and their unit: ``tumbler.lock.acquire.duration``
is ``tumbler_lock_acquire_duration_seconds``, ``tumbler.lock.grants`` is
``tumbler_lock_grants_total``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import random
import signal
import sys
import threading
from types import FrameType

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.trace import NoOpTracerProvider
from prometheus_client import start_http_server

import tumbler
from tumbler.otel import OpenTelemetryObserver


def options() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", default="memory://otel-example", help="the lock backend")
    parser.add_argument("--host", default="127.0.0.1", help="where /metrics listens")
    parser.add_argument("--port", type=int, default=9464, help="0: a free port (printed)")
    parser.add_argument("--workers", type=int, default=4, help="threads taking the locks")
    parser.add_argument("--locks", type=int, default=2, help="how many lock names they share")
    parser.add_argument("--hold", type=float, default=0.02, help="seconds each holds its lock")
    parser.add_argument("--timeout", type=float, default=0.05, help="seconds a worker waits")
    parser.add_argument("--ttl", type=float, default=30.0, help="the locks' lease")
    parser.add_argument("--operations", type=int, help="stop the workers after N acquisitions")
    parser.add_argument(
        "--lock-names", action="store_true", help="label the metrics with the lock names"
    )
    parser.add_argument("--spans", action="store_true", help="print every span")
    return parser


class Work:
    """The workers' shared count of acquisitions, and the signal to stop."""

    def __init__(self, limit: int | None) -> None:
        self.stop = threading.Event()
        self._limit = limit
        self._count = itertools.count(1)
        self._guard = threading.Lock()

    def take_turn(self) -> bool:
        """Whether another acquisition may start (False once ``limit`` were)."""
        if self.stop.is_set():
            return False
        with self._guard:
            number = next(self._count)
        if self._limit is not None and number >= self._limit:
            self.stop.set()
        return self._limit is None or number <= self._limit


def worker(locks: tumbler.Locks, names: list[str], args: argparse.Namespace, work: Work) -> None:
    rng = random.Random()
    while work.take_turn():
        lock = locks.lock(rng.choice(names), ttl=args.ttl)
        try:
            if lock.acquire(timeout=args.timeout):
                try:
                    work.stop.wait(args.hold)  # the work done under the lock
                finally:
                    lock.release()
        except tumbler.TumblerError as error:  # counted by the observer too
            print(f"{lock.name}: {error}", file=sys.stderr)


def _exit(signum: int, frame: FrameType | None) -> None:
    sys.exit(0)


def main(argv: list[str] | None = None) -> None:
    args = options().parse_args(argv)
    signal.signal(signal.SIGTERM, _exit)
    meters = MeterProvider(metric_readers=[PrometheusMetricReader()])
    if args.spans:
        tracers = TracerProvider()
        tracers.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        observer = OpenTelemetryObserver(
            meter_provider=meters, tracer_provider=tracers, lock_names=args.lock_names
        )
    else:
        observer = OpenTelemetryObserver(
            meter_provider=meters,
            tracer_provider=NoOpTracerProvider(),
            lock_names=args.lock_names,
        )
    server, _ = start_http_server(args.port, addr=args.host)
    print(f"metrics on http://{args.host}:{server.server_port}/metrics", flush=True)
    work = Work(args.operations)
    names = [f"example-{index}" for index in range(args.locks)]
    try:
        with tumbler.connect(args.url, observers=[observer]) as locks:
            workers = [
                threading.Thread(target=worker, args=(locks, names, args, work), daemon=True)
                for _ in range(args.workers)
            ]
            for thread in workers:
                thread.start()
            try:
                for thread in workers:
                    thread.join()
            finally:
                work.stop.set()
            print(f"done: {args.operations} acquisitions", flush=True)
            threading.Event().wait()  # serve /metrics until Ctrl-C or SIGTERM
    finally:
        server.shutdown()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
