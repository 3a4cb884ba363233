"""sqlite://: state watchers (``locks.watch``, elections' ``observe``) are rung by every change
of the name's entries, made by any process: a watcher registers its client's doorbell for the
name (``tumbler_watchers``), and each statement that changes the name's entries returns the
doorbells to ring after its commit. A name nobody watches costs no statement more.

Where a case needs to see the rings themselves it registers a socket of its own as a watcher's
doorbell and reads what arrives: a ring is sent before the call that made the change returns,
so what is not in the socket's buffer then was not sent.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import tumbler.aio
from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest
from tumbler.backends.kit.boot import boot_time_ns
from tumbler.backends.sqlite import CAPABILITIES
from tumbler.backends.sqlite import backend as sqlite_backend
from tumbler.backends.sqlite.backend import DOORBELLS, WATCHER_TTL, SQLiteBackend
from tumbler.testing.conformance.compat import PATIENCE

pytestmark = pytest.mark.skipif(not DOORBELLS, reason="doorbells are Linux-only")

#: how long a wait with nothing to wake it must last: far below the poll interval of 0.25 s
#: would do to show a wake-up came early, this only shows that none came
QUIET = 0.3


def request(name: str, owner: str, *, queue: bool = True) -> GrantRequest:
    return GrantRequest(name, owner, False, 1, False, 30.0, "test", queue=queue)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "locks.db"


@contextlib.contextmanager
def backend_of(path: Path) -> Iterator[SQLiteBackend]:
    backend = SQLiteBackend(parse_url(f"sqlite:///{path}"))
    try:
        yield backend
    finally:
        backend.close()


#: a client in another process: each line of its input is a call on its backend ("grant",
#: "wait" (queue a waiter), "release", "force", then name and owner); it answers each with the
#: monotonic time (system-wide on Linux) just before the call, and the call's result
CHANGER = """
import sys, time
from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest
from tumbler.backends.sqlite.backend import SQLiteBackend

backend = SQLiteBackend(parse_url(sys.argv[1]))
print("ready", flush=True)
for line in sys.stdin:
    call, name, owner = line.split()
    started = time.monotonic()
    if call in ("grant", "wait"):
        result = backend.try_grant(GrantRequest(name, owner, False, 1, False, 30.0, "changer"))
    elif call == "release":
        result = backend.release(name, owner)
    else:
        result = backend.force_release(name, "by the test")
    print(started, result, flush=True)
backend.close()
"""


class Changer:
    """The other process (see ``CHANGER``)."""

    def __init__(self, path: Path) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", CHANGER, f"sqlite:///{path}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._read() == "ready"

    def _read(self) -> str:
        assert self._process.stdout is not None
        return self._process.stdout.readline().strip()

    def call(self, call: str, name: str, owner: str) -> tuple[float, str]:
        """Make the call; when it began (``time.monotonic()``), and its result."""
        assert self._process.stdin is not None
        self._process.stdin.write(f"{call} {name} {owner}\n")
        self._process.stdin.flush()
        started, result = self._read().split(" ", 1)
        return float(started), result

    def close(self) -> None:
        assert self._process.stdin is not None
        assert self._process.stdout is not None
        self._process.stdin.close()
        try:
            assert self._process.wait(PATIENCE) == 0
        finally:
            self._process.stdout.close()


@pytest.fixture
def changer(path: Path) -> Iterator[Changer]:
    with backend_of(path):  # the file exists before the other process opens it
        pass
    other = Changer(path)
    try:
        yield other
    finally:
        other.close()


def test_state_wakeups_are_declared_where_there_are_doorbells() -> None:
    assert CAPABILITIES.state_wakeups is DOORBELLS


def test_changes_by_another_process_wake_a_state_watch(path: Path, changer: Changer) -> None:
    """Every change the other process makes (a grant, a waiter arriving, a release that hands
    nothing over, a waiter leaving, a forced release) wakes the watch at once; with no change
    it waits out its timeout. The latencies (from just before the other process's call to the
    watch's return) are printed beside the poll interval they replace."""
    latencies = []
    with backend_of(path) as watcher, watcher.watch_state("x") as watch:
        started = time.monotonic()
        watch.wait(QUIET)
        assert time.monotonic() - started >= QUIET, "woken with nothing changed"
        for call, owner in [
            ("grant", "a"),
            ("wait", "b"),
            ("release", "b"),  # a waiter leaves
            ("wait", "c"),
            ("force", "-"),  # a's grant goes: c may go, and is rung too
            ("grant", "c"),
            ("release", "c"),
        ]:
            began, _result = changer.call(call, "x", owner)
            watch.wait(PATIENCE)
            woken = time.monotonic()
            assert woken - began < PATIENCE, f"no wake-up for {call} {owner}"
            latencies.append(woken - began)
        started = time.monotonic()
        watch.wait(QUIET)
        assert time.monotonic() - started >= QUIET, "woken with nothing changed"
    print(
        f"\nstate wake-up latency from another process: median "
        f"{statistics.median(latencies) * 1000:.2f} ms, max {max(latencies) * 1000:.2f} ms "
        f"(polling: up to 250 ms)"
    )


def test_a_state_ring_wakes_no_waiter(path: Path, changer: Changer) -> None:
    """A waiter arriving behind this client's waiter wakes the client's state watch, not its
    waiter: nothing changed for that waiter."""
    changer.call("grant", "x", "holder")
    with backend_of(path) as client:
        assert client.try_grant(request("x", "mine")) is None  # waits, its doorbell listening
        with client.watch("x", "mine") as waiting, client.watch_state("x") as watching:
            changer.call("wait", "x", "behind")
            watching.wait(PATIENCE)
            started = time.monotonic()
            waiting.wait(QUIET)
            assert time.monotonic() - started >= QUIET, "the waiter was woken"
            changer.call("release", "x", "holder")  # now the waiter may go: it is rung
            started = time.monotonic()
            waiting.wait(PATIENCE)
            assert time.monotonic() - started < PATIENCE
        assert client.try_grant(request("x", "mine")) is not None


@pytest.mark.asyncio
async def test_an_asyncio_state_watch_is_woken_by_another_process(
    path: Path, changer: Changer
) -> None:
    async with await tumbler.aio.connect(f"sqlite:///{path}") as locks:
        watch = locks._backend.watch_state("x")  # type: ignore[attr-defined]
        async with watch:
            began, _result = changer.call("grant", "x", "a")
            await watch.wait(PATIENCE)
            assert time.monotonic() - began < PATIENCE
            states = locks.watch("x")
            async with states:
                first = await states.__anext__()
                assert [holder.holder for holder in first.holders] == ["changer"]
                changer.call("release", "x", "a")
                second = await states.__anext__()
                assert not second.holders


# -- the rings themselves, at a doorbell of the case's own ------------------------------------


@contextlib.contextmanager
def doorbell() -> Iterator[tuple[str, socket.socket]]:
    """A socket in the abstract namespace, as a client's doorbell: its name, and the socket."""
    address = f"tumbler-test-{secrets.token_hex(8)}"
    bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    bell.bind("\0" + address)
    bell.setblocking(False)
    try:
        yield address, bell
    finally:
        bell.close()


def register(path: Path, name: str, address: str, expires_in: float = WATCHER_TTL) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "INSERT OR REPLACE INTO tumbler_watchers VALUES (?, ?, ?)",
            (name, address, boot_time_ns() + round(expires_in * 1e9)),
        )


def rings(bell: socket.socket) -> list[bytes]:
    """What arrived at ``bell`` so far."""
    found = []
    while True:
        try:
            found.append(bell.recv(65536))
        except BlockingIOError:
            return found


def expire_entries(path: Path, name: str) -> None:
    """Make the name's entries run out (their rows' times moved back)."""
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "UPDATE tumbler_entries SET expires_at = ? WHERE name = ?", (boot_time_ns() - 1, name)
        )


def test_each_change_rings_the_names_watchers_once(path: Path) -> None:
    with backend_of(path) as client, doorbell() as (address, bell):
        register(path, "x", address)
        assert client.try_grant(request("x", "a")) is not None
        assert rings(bell) == [b"\0x"]
        assert client.try_grant(request("x", "a")) is not None  # held already: no change
        assert client.try_grant(request("x", "b")) is None  # a waiter arrives
        assert rings(bell) == [b"\0x"]
        assert client.try_grant(request("x", "b")) is None  # its poll: no change
        assert client.try_grant(request("y", "a")) is not None  # another name
        assert client.renew("x", "a", 30.0) == 30.0  # a lease, not an entry
        assert client.try_grant(request("x", "c", queue=False)) is None  # a try: nothing
        assert rings(bell) == []
        assert client.release("x", "a") is True
        assert rings(bell) == [b"\0x"]
        assert client.release("x", "a") is False  # nothing left to release
        assert rings(bell) == []
        assert client.try_grant(request("x", "b")) is not None  # the waiter's grant
        assert client.force_release("x", "test") == 1
        assert rings(bell) == [b"\0x", b"\0x"]


def test_the_removal_of_expired_entries_rings_their_names_watchers(path: Path) -> None:
    """A grant of the name removes its entries that ran out; a grant of another name sweeps
    them: either rings the name's watchers."""
    with backend_of(path) as client, doorbell() as (address, bell):
        assert client.try_grant(request("x", "a")) is not None
        register(path, "x", address)
        expire_entries(path, "x")
        assert client.try_grant(request("other", "a")) is not None  # sweeps x's grant
        assert rings(bell) == [b"\0x"]
        assert client.try_grant(request("x", "b")) is not None
        assert rings(bell) == [b"\0x"]
        expire_entries(path, "x")
        assert client.try_grant(request("x", "c")) is not None  # removes b's grant, grants c
        assert rings(bell) == [b"\0x"]  # once for the transaction


def test_a_watcher_that_ran_out_is_not_rung_and_goes(path: Path) -> None:
    with backend_of(path) as client, doorbell() as (address, bell):
        register(path, "x", address, expires_in=-1.0)
        assert client.try_grant(request("x", "a")) is not None
        assert client.release("x", "a") is True
        assert rings(bell) == []
        with client.watch_state("other"):  # a registration drops the rows that ran out
            pass
        with contextlib.closing(sqlite3.connect(path)) as db:
            rows = db.execute("SELECT name, wake, expires_at FROM tumbler_watchers").fetchall()
        [(name, wake, expires_at)] = rows
        assert name == "other"
        assert wake != address
        # the watch is gone, and its row lives on for WATCHER_TTL at most
        assert 0 < expires_at - boot_time_ns() <= WATCHER_TTL * 1e9


def test_a_state_watch_registers_again_as_it_waits(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_backend, "WATCHER_TTL", 0.3)  # the row's life ...
    monkeypatch.setattr(
        sqlite_backend.SQLiteStateWatch, "mark_life", 0.3
    )  # ... as the watch knows it
    with backend_of(path) as watcher, watcher.watch_state("x") as watch:

        def expiry() -> int:
            with contextlib.closing(sqlite3.connect(path)) as db:
                return int(db.execute("SELECT expires_at FROM tumbler_watchers").fetchone()[0])

        first = expiry()
        watch.wait(0.15)  # a third of its life passed: the next wait sets it again
        watch.wait(0.0)
        assert expiry() > first


def statements(path: Path, calls: list[tuple[str, str, str]]) -> list[str]:
    """The statements a fresh client runs for ``calls`` ((method, name, owner))."""
    with backend_of(path) as client:
        seen: list[str] = []
        for call, name, owner in calls:
            if call == "grant":
                client.try_grant(request(name, owner))  # its connection made, traced next
                client.release(name, owner)
        for db in client._connections:
            db.set_trace_callback(seen.append)
        for call, name, owner in calls:
            if call == "grant":
                assert client.try_grant(request(name, owner)) is not None
            else:
                assert client.release(name, owner) is True
        return seen


def test_a_pair_costs_no_statement_more_whether_or_not_the_name_is_watched(path: Path) -> None:
    """The watchers come back with the statements that change the entries."""
    pair = [("grant", "x", "a"), ("release", "x", "a")]
    unwatched = statements(path, pair)
    with doorbell() as (address, bell):
        register(path, "x", address)
        watched = statements(path, pair)
        assert rings(bell) == [b"\0x"] * 4  # the warm-up pair's, and the pair's
    assert len(watched) == len(unwatched)
    assert not [sql for sql in unwatched if sql.startswith("SELECT (SELECT group_concat")]


def test_a_file_made_before_watchers_gains_their_table(path: Path) -> None:
    with backend_of(path):
        pass
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("DROP TABLE tumbler_watchers")  # as tumbler made files before
    with backend_of(path) as client, client.watch_state("x"):
        assert client.try_grant(request("x", "a")) is not None
