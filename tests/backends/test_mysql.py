"""mysql://, mariadb://: what is particular to the MySQL / MariaDB backend, on real MariaDB.

The conformance suite runs every generic lock case on the ``mysql`` and ``mysql-tls``
targets; the procedures are held to the rule in ``test_mysql_statements.py``. Here: tokens
keep increasing across a crash and restart of the server, and a waiter is handed the lock by
the release and takes it without a call.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

import tumbler
from tumbler.backends.contract import GrantRequest
from tumbler.backends.mysql.server import MariaDBServer
from tumbler.testing.conformance.compat import PATIENCE, eventually


def _request(name: str, owner: str) -> GrantRequest:
    return GrantRequest(name, owner, False, 1, False, 30.0, "test")


def test_tokens_keep_increasing_across_a_crash_of_the_server(
    fresh_mariadb_server: MariaDBServer,
) -> None:
    url = fresh_mariadb_server.url
    with tumbler.connect(url) as locks, locks.lock("restart-fenced", ttl=1) as hold:
        before = hold.token
    fresh_mariadb_server.kill()  # a crash: nothing kept that the kernel did not have
    fresh_mariadb_server.start()
    with tumbler.connect(url) as locks, locks.lock("restart-fenced", timeout=PATIENCE) as hold:
        assert hold.token > before


def test_a_waiter_takes_the_grant_its_wake_up_carries_without_a_call(
    mariadb_server: MariaDBServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"{mariadb_server.url}?table_prefix=handoff_"
    with tumbler.connect(url) as one, tumbler.connect(url) as two:
        holder, waiter = one._backend, two._backend
        first = holder.try_grant(_request("stock", "a"))
        assert first is not None
        with waiter.watch("stock", "b") as watch:  # listens: its releases reach it
            assert waiter.try_grant(_request("stock", "b")) is None  # queued
            assert holder.release("stock", "a")
            watch.wait(PATIENCE)
        # granted by the release itself: the waiter has done nothing since it queued
        (handed,) = one.status("stock").holders
        assert handed.token > first.token
        calls = 0
        run = waiter.pool.run

        def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            return run(*args, **kwargs)

        monkeypatch.setattr(waiter.pool, "run", counted)
        grant = waiter.try_grant(_request("stock", "b"))
        assert calls == 0  # taken from the wake-up
        assert grant is not None
        assert grant.token == handed.token
        assert 0 < grant.granted_ttl <= 30.0
        assert waiter.release("stock", "b")
        assert one.status("stock").holders == ()


def test_the_listener_outlives_a_short_socket_timeout(mariadb_server: MariaDBServer) -> None:
    """The listener's sleep ends within socket_timeout (which the blocking driver applies to
    every read, the sleep's too): with a timeout shorter than the re-check interval it keeps
    its connection, rather than losing it at every sleep and missing the rings meanwhile."""
    url = f"{mariadb_server.url}?table_prefix=short_&socket_timeout=0.5&lock_timeout=0.2"
    with tumbler.connect(url) as locks:
        backend = locks._backend
        with backend.watch("short", "w"):  # starts listening
            assert backend.wakeups.subscribed()
            listener = backend.pool.run(_listener_of(backend.wakeups.key))
            assert listener is not None
            started = time.monotonic()
            # the claim is about time: three socket_timeouts must go by
            eventually(lambda: time.monotonic() - started > 1.5, "1.5 s went by")
            assert backend.pool.run(_listener_of(backend.wakeups.key)) == listener
            assert backend.wakeups.subscribed()


def _listener_of(key: int) -> Any:
    def read(connection: Any) -> Any:
        with connection.cursor() as cursor:
            cursor.execute("SELECT IS_USED_LOCK(CONCAT('tumbler-listener-', %s))", (key,))
            row = cursor.fetchone()
        return None if row is None else row[0]

    return read
