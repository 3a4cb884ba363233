"""sqlite://: what is particular to the SQLite backend (files, crashes, reboots, clean-up)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import tumbler
import tumbler.aio
from tumbler import BackendUnavailable, ConfigurationError, InvalidURL
from tumbler.backends.kit.boot import boot_time_ns
from tumbler.testing.conformance.compat import PATIENCE, BackgroundCall, eventually
from tumbler.testing.conformance.test_processes import WORKER


def url_of(path: Path, query: str = "") -> str:
    return f"sqlite:///{path}" + (f"?{query}" if query else "")


def rows(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        return int(db.execute("SELECT count(*) FROM tumbler_entries").fetchone()[0])


def live_rows(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        query = "SELECT count(*) FROM tumbler_entries WHERE expires_at > ?"
        return int(db.execute(query, (boot_time_ns(),)).fetchone()[0])


def test_the_file_is_in_wal_mode(tmp_path):
    path = tmp_path / "locks.db"
    with tumbler.connect(url_of(path)):
        pass
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_switch_to_wal_waits_for_a_writer_that_came_after_it_read(tmp_path, monkeypatch):
    # Switching a new file to WAL reads its header, then writes it. Another connection that
    # takes the write lock between the two makes SQLite answer busy at once, without its busy
    # handler (waiting there could deadlock): four processes opening one new file met this in
    # CI. The hook below lets a writer in at that moment; the switch must wait its turn.
    path = tmp_path / "locks.db"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    ended = threading.Timer(0.3, writer.execute, ("COMMIT",))
    connect = sqlite3.connect

    def connect_and_let_a_writer_in(*args: object, **kwargs: object) -> sqlite3.Connection:
        db = connect(*args, **kwargs)  # type: ignore[arg-type]

        def on_statement(sql: str) -> None:
            if "journal_mode = WAL" in sql and ended.ident is None:
                writer.execute("BEGIN IMMEDIATE")
                ended.start()

        db.set_trace_callback(on_statement)
        return db

    monkeypatch.setattr(
        "tumbler.backends.sqlite.backend.sqlite3.connect", connect_and_let_a_writer_in
    )
    try:
        with tumbler.connect(url_of(path)) as locks:
            assert ended.ident is not None, "the writer came in"
            assert locks.lock("x").acquire(timeout=0)
    finally:
        if ended.ident is not None:
            ended.join()
        writer.close()
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_fencing_tokens_survive_closing_every_client(tmp_path):
    url = url_of(tmp_path / "locks.db")
    with tumbler.connect(url) as locks, locks.lock("x") as hold:
        first = hold.token
    with tumbler.connect(url) as locks, locks.lock("x") as hold:
        assert hold.token > first


def test_a_new_boot_voids_leases_and_jumps_the_tokens(tmp_path):
    path = tmp_path / "locks.db"
    url = url_of(path)
    holder = tumbler.connect(url)
    assert holder.lock("held-at-reboot").acquire()
    token = holder.lock("other").acquire() and holder.status("other").holders[0].token
    # what a reboot leaves: the file, from a boot that is over
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE tumbler_meta SET value = 'an-earlier-boot' WHERE key = 'boot_id'")
    with tumbler.connect(url) as after:
        assert after.status_all() == []
        with after.lock("held-at-reboot") as hold:
            assert hold.token > token
            assert hold.token >= 2**32
    holder.close()


def test_rows_of_released_and_expired_locks_do_not_pile_up(tmp_path):
    path = tmp_path / "locks.db"
    url = url_of(path)
    with tumbler.connect(url) as locks:
        for index in range(3000):
            with locks.lock(f"job-{index}"):
                pass
        assert rows(path) == 0
    # expired grants of names nobody asks for again are swept by later grants
    script = (
        "import os, tumbler\n"
        f"locks = tumbler.connect({url!r})\n"
        "for i in range(200):\n"
        "    assert locks.lock(f'abandoned-{i}', ttl=1.0, renew=False).acquire()\n"
        "os._exit(0)\n"  # exit without releasing: like a crash
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    # All 200 left behind, unless taking them outlasted the 1 s lease (a loaded machine):
    # then the script's own later grants swept the first, as what follows checks for all.
    assert 0 < rows(path) <= 200
    eventually(lambda: live_rows(path) == 0, "the abandoned leases have run out")
    with tumbler.connect(url) as locks:
        for index in range(40):
            with locks.lock(f"later-{index}"):
                pass
    assert rows(path) == 0


def test_a_database_held_busy_gives_backend_unavailable(tmp_path):
    path = tmp_path / "locks.db"
    url = url_of(path, "busy_timeout=0.2")
    with tumbler.connect(url) as locks:
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(BackendUnavailable) as caught:
                locks.lock("x").acquire(timeout=0)
            assert "busy_timeout" in str(caught.value)
            assert isinstance(caught.value, ConnectionError)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert locks.status_all() == []
        assert locks.lock("x").acquire(timeout=0)


def test_a_transaction_abandoned_as_it_began_is_rolled_back_by_the_next(tmp_path):
    # A signal handler that raises as BEGIN returns ends contextlib's __enter__ before the with
    # block, leaving the transaction open on the thread's connection: in CI, `tumbler run` got
    # SIGINT while waiting and could not withdraw its waiter entry.
    path = tmp_path / "locks.db"
    with tumbler.connect(url_of(path)) as locks:
        lock = locks.lock("job")
        assert lock.acquire(timeout=0)
        abandoned = locks._backend._transaction()
        abandoned.__enter__()  # what that exception leaves behind
        lock.release()
        assert locks.status_all() == []
        del abandoned  # closed late, it must not roll back what came after
        assert live_rows(path) == 0
        assert locks.lock("job").acquire(timeout=0)


def test_a_file_that_is_not_a_database_is_a_configuration_error(tmp_path):
    path = tmp_path / "locks.db"
    path.write_bytes(b"this is not an SQLite database, it is a text file" * 100)
    with pytest.raises(ConfigurationError):
        tumbler.connect(url_of(path))


@pytest.mark.parametrize("parent", ["no/such/dir", "a-file"])
def test_a_parent_that_is_not_a_directory_is_a_configuration_error(tmp_path, parent):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ConfigurationError, match="not an existing directory"):
        tumbler.connect(url_of(tmp_path / parent / "locks.db"))


@pytest.mark.skipif(not hasattr(os, "setuid"), reason="needs POSIX users")
def test_an_unwritable_file_is_permission_denied(tmp_path):
    """Run as another user (tests often run as root, where file modes are not enforced)."""
    path = tmp_path / "locks.db"
    with tumbler.connect(url_of(path)):
        pass
    os.chmod(tmp_path, 0o755)
    os.chmod(path, 0o644)
    script = (
        # what it uses is imported as root: this Python's own files may be root's alone
        "import json, logging, os, socket, sys, tumbler, tumbler.backends.sqlite.backend\n"
        "import tumbler._api\n"
        "if os.getuid() == 0:\n"
        "    os.setgid(65534); os.setuid(65534)\n"
        "try:\n"
        f"    tumbler.connect({url_of(path)!r}).lock('x').acquire()\n"
        "except tumbler.PermissionDenied as error:\n"
        "    print('denied', error)\n"
        "    sys.exit(0)\n"
        "sys.exit(1)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///:memory:",
        "sqlite://:memory:",
        "sqlite:file::memory:?cache=shared",
        "sqlite://host/x.db",
    ],
)
def test_urls_that_cannot_exclude_are_refused(url):
    with pytest.raises(InvalidURL):
        tumbler.connect(url)


@pytest.mark.parametrize(
    "query", ["busy_timeout=-1", "busy_timeout=soon", "synchronous=off", "typo=1"]
)
def test_bad_options_are_refused(tmp_path, query):
    with pytest.raises(InvalidURL):
        tumbler.connect(url_of(tmp_path / "locks.db", query))
    assert not (tmp_path / "locks.db").exists()


def test_a_relative_path_is_resolved_at_connect(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with tumbler.connect("sqlite:relative.db") as locks:
        assert locks.lock("x").acquire()
    monkeypatch.chdir(tmp_path.parent)
    assert (tmp_path / "relative.db").exists()


#: how long a fair waiter killed in line may hold up the next one: its entry's lease
#: (capabilities.waiter_ttl, 1 s) plus a second for polls and a loaded machine (it was 5 s)
DEAD_WAITER_BOUND = 2.0


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_killed_fair_waiter_holds_the_line_up_briefly(tmp_path, flavour):
    url = url_of(tmp_path / "locks.db")
    with tumbler.connect(url) as locks:
        first = locks.lock("line", fair=True)
        assert first.acquire()
        never = str(tmp_path / "never")
        victim = subprocess.Popen(
            [sys.executable, WORKER, "hold", url, "line", never, "30", flavour, "--fair"]
        )
        try:
            eventually(lambda: locks.status("line").waiters == 1, "the victim waits in line")
            if flavour == "sync":
                with tumbler.connect(url) as others:
                    # behind the victim in the line
                    call = BackgroundCall(
                        lambda: (
                            others.lock("line", fair=True).acquire(timeout=PATIENCE)
                            and time.monotonic()
                        )
                    )
                    granted_after = _kill_and_release(locks, first, victim, call)
            else:

                async def wait_in_line() -> float:
                    async with await tumbler.aio.connect(url) as others:
                        assert await others.lock("line", fair=True).acquire(timeout=PATIENCE)
                        return time.monotonic()

                call = BackgroundCall(lambda: asyncio.run(wait_in_line()))
                granted_after = _kill_and_release(locks, first, victim, call)
        finally:
            if victim.poll() is None:
                victim.kill()
            victim.wait()
    assert granted_after < DEAD_WAITER_BOUND
    assert not (tmp_path / "never").exists()


def _kill_and_release(
    locks: tumbler.Locks, first: tumbler.Lock, victim: subprocess.Popen[bytes], call: BackgroundCall
) -> float:
    """With the live waiter in line behind the victim: SIGKILL the victim, release, and
    return how long after the kill the live waiter was granted the lock (``call`` returns
    when, on the monotonic clock)."""
    eventually(lambda: locks.status("line").waiters == 2, "the live waiter waits behind it")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    killed_at = time.monotonic()
    first.release()
    granted_at = call.result()
    assert isinstance(granted_at, float)
    return granted_at - killed_at


@pytest.mark.asyncio
async def test_capabilities_say_host_scope_half_a_second_leases_and_short_waiter_leases(
    tmp_path,
):
    url = url_of(tmp_path / "locks.db")
    with tumbler.connect(url) as locks:
        sync = locks.capabilities
    async with await tumbler.aio.connect(url) as alocks:
        assert alocks.capabilities == sync
    assert sync.scope == "host"
    assert sync.min_ttl == 0.5
    # a dead waiter's entry holds up a fair line for this long (see the killed-waiter test)
    assert sync.waiter_ttl == 1.0


@pytest.mark.parametrize("waiting", [1, 7, 8, 9, 20])
def test_a_batch_of_polls_on_one_name_decides_each_owner(tmp_path, waiting):
    """The asyncio client's batch reads a name's line once for all its owners: a few as
    parameters, more as one JSON array; each decides as alone."""
    from tumbler._url import parse_url
    from tumbler.backends.contract import GrantRequest
    from tumbler.backends.sqlite.backend import SQLiteBackend

    def asked(owner: str) -> GrantRequest:
        return GrantRequest(
            name="x", owner=owner, ttl=30.0, shared=False, limit=1, fair=True, holder="case"
        )

    backend = SQLiteBackend(parse_url(url_of(tmp_path / "locks.db")))
    try:
        holder = backend.try_grant(asked("holder"))
        assert holder is not None
        owners = [f"w{index}" for index in range(waiting)]
        assert backend.try_grant_many([asked(owner) for owner in owners]) == [None] * waiting
        assert backend.release("x", "holder")
        # the first waiter in a fair line, asked last, is granted; the others wait behind it
        polls = backend.try_grant_many([asked(owner) for owner in reversed(owners)])
        assert [grant is not None for grant in polls] == [False] * (waiting - 1) + [True]
    finally:
        backend.close()
