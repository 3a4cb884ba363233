"""The fenced resource: a shared counter in a process of its own that checks fencing tokens.

Workers do a read-modify-write on it under the lock: ``read(token)`` returns the counter,
``write(token, base, value)`` stores ``value`` (``base + 1``). Read and write are separate
requests, so the counter is *not* atomic by itself: two holders that overlap lose an update
unless the resource's fencing check refuses one of them.

Why a separate process on a Unix socket (and not, say, an SQLite file the workers write):

* a worker stopped with SIGSTOP holds nothing here (no file lock, no open transaction that
  would stall everyone else), and its delayed request still arrives when it is resumed: the
  stale write really happens, late, as a GC pause would make it happen;
* one process decides, in one total order, and stamps each decision with
  ``time.monotonic_ns()`` under its own lock: the log is the resource's ground truth, complete
  even when workers are killed, and directly comparable with the workers' stamps;
* the harness never faults it, so what it records is not itself subject to the faults.

The fencing check (Kleppmann's "the storage server remembers the highest token it has seen and
rejects requests with a lower one"; Redisson's fenced lock uses the same ``>=``), in three
modes:

``on`` (default)
    every exclusive request (a mutex's, a read/write lock's write side), read or write, is
    accepted iff its token is at least the highest token accepted so far; every shared request
    (a read side's, a semaphore permit's) iff its token is at least the highest token accepted
    from an *exclusive* grant. Shared holders overlap legitimately, so one maximum over them
    would refuse a reader whose token is below a concurrent reader's; what must be refused is
    a stale request coming after an exclusive holder's. A semaphore has only shared grants:
    nothing is fenced there (N holders cannot be fenced by one number; the checker counts the
    holders at the resource instead, see :mod:`tumbler.torture.check`).

    Fencing the read matters: with only writes fenced, a paused holder A that read the
    counter before its pause can still write *after* B read it but *before* B wrote (A's
    token is still the highest accepted), and B's write then overwrites A's: a lost update
    with every write "correctly" fenced.
``writes``
    only writes are fenced (the minimal check; shows the gap above under pauses).
``off``
    nothing is refused; each decision records whether ``on`` would have refused it. The
    control experiment: with faults that pause holders, the checker must find violations.

Each decision is one JSON line in the log: ``op`` (``read``/``write``), ``t``, ``lock``,
``token``, ``acq``, ``client``, ``accepted``, ``would_refuse``, ``max_before`` (the highest
token accepted before it, or null), ``bound`` (what its token was checked against: for a
shared request the highest exclusive token, else ``max_before``), ``value_before`` (the
counter before), ``base`` and ``value`` (writes: what the writer read and wants to store),
``shared`` (a shared grant's request), and, as the worker sent them, ``held`` (what
``hold.held`` said just before it sent the request) and ``probe`` (the request of a holder
that knows it lost its hold). At shutdown one ``final`` line has each lock's counter and
highest token.

Run as ``python -m tumbler.torture.resource SOCKET LOG [--fencing on|writes|off]``; it
serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import socketserver
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from .history import Event, HistoryWriter

__all__ = ["FENCING_MODES", "Decision", "FencedCounter", "ResourceClient", "ResourceServer"]

FencingMode = Literal["on", "writes", "off"]
FENCING_MODES: tuple[FencingMode, ...] = ("on", "writes", "off")


@dataclass(frozen=True)
class Decision:
    """What the resource did with one request."""

    accepted: bool
    #: the counter after the request (unchanged if refused, and for reads)
    value: int
    #: the highest token accepted before this request
    max_before: int | None
    #: what the request's token was checked against: ``max_before`` for an exclusive
    #: request, the highest exclusive token for a shared one
    bound: int | None = None


@dataclass
class _LockState:
    counter: int = 0
    #: the highest token accepted, from any grant
    max_token: int | None = None
    #: the highest token accepted from an exclusive grant (what shared requests are fenced by)
    max_exclusive: int | None = None


@dataclass
class FencedCounter:
    """The resource's state and its fencing rule, without I/O (the server serializes calls)."""

    fencing: FencingMode = "on"
    _locks: dict[str, _LockState] = field(default_factory=dict)

    def _state(self, lock: str) -> _LockState:
        return self._locks.setdefault(lock, _LockState())

    @staticmethod
    def _bound(state: _LockState, shared: bool) -> int | None:
        return state.max_exclusive if shared else state.max_token

    @classmethod
    def _fresh(cls, state: _LockState, token: int, shared: bool) -> bool:
        bound = cls._bound(state, shared)
        return bound is None or token >= bound

    @staticmethod
    def _seen(state: _LockState, token: int, shared: bool) -> None:
        state.max_token = token if state.max_token is None else max(state.max_token, token)
        if not shared:
            best = state.max_exclusive
            state.max_exclusive = token if best is None else max(best, token)

    def read(self, lock: str, token: int, *, shared: bool = False) -> tuple[Decision, bool]:
        """A fenced read; returns the decision and whether mode ``on`` would refuse it."""
        state = self._state(lock)
        fresh = self._fresh(state, token, shared)
        accepted = fresh or self.fencing != "on"
        before, bound = state.max_token, self._bound(state, shared)
        if accepted and self.fencing != "writes":
            self._seen(state, token, shared)
        return Decision(accepted, state.counter, before, bound), not fresh

    def write(
        self, lock: str, token: int, value: int, *, shared: bool = False
    ) -> tuple[Decision, bool]:
        """A fenced write of ``value``; returns the decision and whether ``on`` would refuse."""
        state = self._state(lock)
        fresh = self._fresh(state, token, shared)
        accepted = fresh or self.fencing == "off"
        before, bound = state.max_token, self._bound(state, shared)
        if accepted:
            state.counter = value
            self._seen(state, token, shared)
        return Decision(accepted, state.counter, before, bound), not fresh

    def counter(self, lock: str) -> int:
        return self._state(lock).counter

    def snapshot(self) -> dict[str, dict[str, int | None]]:
        return {
            name: {"counter": state.counter, "max_token": state.max_token}
            for name, state in self._locks.items()
        }


class _Handler(socketserver.StreamRequestHandler):
    server: ResourceServer

    def handle(self) -> None:
        # A killed worker's connection just ends; a half-sent request is never decided.
        for line in self.rfile:
            try:
                request = json.loads(line)
                reply = self.server.decide(request)
            except (ValueError, KeyError, TypeError) as error:
                reply = {"error": f"bad request: {error}"}
            try:
                self.wfile.write((json.dumps(reply) + "\n").encode())
                self.wfile.flush()
            except OSError:
                return


class ResourceServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The resource on a Unix socket: one thread per connection, decisions under one lock."""

    daemon_threads = True

    def __init__(self, socket_path: str | Path, log_path: str | Path, fencing: FencingMode):
        self.counter = FencedCounter(fencing)
        self.log = HistoryWriter(log_path)
        self._decide_guard = threading.Lock()
        super().__init__(str(socket_path), _Handler)

    def decide(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        if op == "ping":
            return {"ok": True}
        lock = str(request["lock"])
        token = int(request["token"])
        shared = bool(request.get("shared", False))
        with self._decide_guard:
            value_before = self.counter.counter(lock)
            if op == "read":
                decision, would_refuse = self.counter.read(lock, token, shared=shared)
                extra: dict[str, Any] = {}
            elif op == "write":
                base, value = int(request["base"]), int(request["value"])
                decision, would_refuse = self.counter.write(lock, token, value, shared=shared)
                extra = {"base": base, "value": value}
            else:
                return {"error": f"unknown op {op!r}"}
            record: Event = {
                "op": op,
                "t": time.monotonic_ns(),
                "lock": lock,
                "token": token,
                "acq": request.get("acq"),
                "client": request.get("client"),
                "accepted": decision.accepted,
                "would_refuse": would_refuse,
                "max_before": decision.max_before,
                "bound": decision.bound,
                "value_before": value_before,
                "shared": shared,
                "held": request.get("held"),
                "probe": bool(request.get("probe", False)),
                **extra,
            }
            # logged before the reply leaves: a decision the worker saw is always on record
            self.log.write_record(record)
        return {"ok": decision.accepted, "value": decision.value, "max": decision.max_before}

    def server_close(self) -> None:
        super().server_close()
        with self._decide_guard:
            self.log.write_record(
                {"op": "final", "t": time.monotonic_ns(), "locks": self.counter.snapshot()}
            )
            self.log.close()


class ResourceError(Exception):
    """The resource could not be reached or answered nonsense."""


class ResourceClient:
    """A worker's connection to the resource (one request at a time)."""

    def __init__(self, socket_path: str | Path, *, client: str, timeout: float = 30.0) -> None:
        self.client = client
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(str(socket_path))
        except OSError as error:
            self._sock.close()
            raise ResourceError(f"cannot reach the resource at {socket_path}: {error}") from error
        self._file = self._sock.makefile("rwb")

    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            self._file.write((json.dumps(request) + "\n").encode())
            self._file.flush()
            line = self._file.readline()
        except OSError as error:
            raise ResourceError(f"resource request failed: {error}") from error
        if not line:
            raise ResourceError("the resource closed the connection")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise ResourceError(str(reply["error"]))
        return reply

    def ping(self) -> None:
        self._call({"op": "ping"})

    def read(self, lock: str, token: int, acq: str, **context: object) -> tuple[bool, int]:
        """A fenced read: (accepted, counter). ``context``: ``shared``, ``held``, ``probe``
        (logged with the decision; ``shared`` also chooses the fencing rule)."""
        reply = self._call(
            {
                "op": "read",
                "lock": lock,
                "token": token,
                "acq": acq,
                "client": self.client,
                **context,
            }
        )
        return bool(reply["ok"]), int(reply["value"])

    def write(
        self, lock: str, token: int, acq: str, base: int, value: int, **context: object
    ) -> bool:
        """A fenced write of ``value`` (read as ``base``); True if accepted."""
        reply = self._call(
            {
                "op": "write",
                "lock": lock,
                "token": token,
                "acq": acq,
                "client": self.client,
                "base": base,
                "value": value,
                **context,
            }
        )
        return bool(reply["ok"])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
        self._sock.close()


def serve(socket_path: str | Path, log_path: str | Path, fencing: FencingMode) -> None:
    """Serve until SIGTERM or SIGINT; the log ends with the ``final`` line."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)
    server = ResourceServer(socket_path, log_path, fencing)

    def stop(signum: int, frame: FrameType | None) -> None:
        # shutdown() waits for serve_forever() to return: call it from another thread
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever(poll_interval=0.05)
    finally:
        server.server_close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tumbler.torture.resource")
    parser.add_argument("socket")
    parser.add_argument("log")
    parser.add_argument("--fencing", choices=FENCING_MODES, default="on")
    args = parser.parse_args(argv)
    serve(args.socket, args.log, args.fencing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
