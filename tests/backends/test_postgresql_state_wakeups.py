"""postgresql://: state watchers woken by the server (``capabilities.state_wakeups``).

A client that watches a name's state keeps a row in ``tumbler_watched``; every change of the
name's entries made by any client (a grant, in the function or decided in the client, a
waiter arriving or leaving, a release, a hand-off, a forced release) notifies the watcher's
channel, and its watch wakes long before the lock layer's quarter-second poll would have
read the change, while a wait with no change runs its course. The take-up of a grant handed
over is no change. Also: from another process; a waiter is not woken by a change that is not
its turn; the watcher's row goes with its client, and one that ran out is told nothing and
swept; a role that may only read watches by polling; a client that polls has no state
wake-ups. ``test_mysql_state_wakeups.py`` holds MySQL / MariaDB to the same cases.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import psycopg
import pytest
from psycopg import sql

import tumbler
import tumbler.aio
from tumbler.backends.contract import GrantRequest
from tumbler.backends.kit._async.sql import POLLING_WAITER_TTL, WATCHED_TTL
from tumbler.backends.postgresql import CAPABILITIES
from tumbler.testing.backends.postgresql.server import TUMBLER_DATABASE, PostgreSQLServer
from tumbler.testing.conformance.compat import (
    PATIENCE,
    BackgroundCall,
    aeventually,
    eventually,
)

_log = logging.getLogger(__name__)

NAME = "watched"
#: how long a wait with no change is given to show that it runs its course
QUIET = 0.5
#: how often the lock layer reads a lock whose backend does not wake its state watchers
POLL = 0.25


class _Wait(Protocol):
    def wait(self, timeout: float) -> None: ...


def _request(owner: str, *, shared: bool = False) -> GrantRequest:
    return GrantRequest(NAME, owner, shared, 0 if shared else 1, False, 30.0, "test")


def quiet(watch: _Wait) -> bool:
    """Whether a wait on ``watch`` with no change runs its whole course."""
    began = time.monotonic()
    watch.wait(QUIET)
    return time.monotonic() - began >= QUIET * 0.9


class Woken:
    """Times each change against the watch's wake-up: the seconds from the change's call to
    the wait's return, which must come long before ``PATIENCE``."""

    def __init__(self, watch: _Wait) -> None:
        self._watch = watch
        self.latencies: dict[str, float] = {}

    def by(self, what: str, change: Callable[[], Any]) -> Any:
        began = time.monotonic()
        result = change()
        self._watch.wait(PATIENCE)
        waited = time.monotonic() - began
        assert waited < PATIENCE, f"{what} woke no state watcher"
        self.latencies[what] = waited
        return result

    def report(self, label: str) -> None:
        figures = ", ".join(f"{what} {1000 * s:.1f} ms" for what, s in self.latencies.items())
        # shown with -s, or in the log of a failing run
        print(f"\n{label}: state watcher woken in {figures} (the poll: {1000 * POLL:.0f} ms)")
        _log.info("%s: %s", label, figures)


def wakes_at_every_change(url: str, label: str) -> dict[str, float]:
    """Each change of the name's entries, made by clients other than the watcher's, wakes
    the watcher's state watch; the take-up of a hand-off does not, nor does nothing."""
    with (
        tumbler.connect(url) as watching,
        tumbler.connect(url) as other,
        tumbler.connect(url) as third,
    ):
        watcher, changer, waiting = watching._backend, other._backend, third._backend
        with watcher.watch_state(NAME) as watch:
            assert quiet(watch)
            woken = Woken(watch)
            assert woken.by("a grant", lambda: changer.try_grant(_request("a"))) is not None
            assert woken.by("a waiter", lambda: changer.try_grant(_request("b"))) is None
            woken.by("a waiter leaving", lambda: changer.release(NAME, "b"))
            with waiting.watch(NAME, "c") as turn:  # a waiter whose client listens
                assert (
                    woken.by("a listening waiter", lambda: waiting.try_grant(_request("c"))) is None
                )
                # a change that is no waiter's turn wakes state watchers only
                woken.by("a waiter behind it", lambda: changer.try_grant(_request("d")))
                assert quiet(turn)
                woken.by("a release that hands over", lambda: changer.release(NAME, "a"))
                turn.wait(PATIENCE)
            assert waiting.try_grant(_request("c")) is not None  # taken up: no change
            assert quiet(watch)
            woken.by("the last waiter leaving", lambda: changer.release(NAME, "d"))
            woken.by("the hand-off's release", lambda: waiting.release(NAME, "c"))
            woken.by("a shared grant", lambda: changer.try_grant(_request("s", shared=True)))
            # the second shared request is decided in the client, on the whole line
            woken.by(
                "a shared grant decided in the client",
                lambda: changer.try_grant(_request("t", shared=True)),
            )
            assert woken.by("a forced release", lambda: changer.force_release(NAME, "test")) == 2
            assert quiet(watch)
            assert watching.status(NAME).holders == ()
    woken.report(label)
    return woken.latencies


async def awakes_at_changes(url: str) -> None:
    """The asyncio flavour: a grant, a release and a forced release by another client."""
    async with await tumbler.aio.connect(url) as watching, await tumbler.aio.connect(url) as other:
        watcher, changer = watching._backend, other._backend
        async with watcher.watch_state(NAME) as watch:
            for what, change in (
                ("a grant", lambda: changer.try_grant(_request("a"))),
                ("a release", lambda: changer.release(NAME, "a")),
                ("a grant", lambda: changer.try_grant(_request("b"))),
                ("a forced release", lambda: changer.force_release(NAME, "test")),
            ):
                began = time.monotonic()
                await change()
                await watch.wait(PATIENCE)
                assert time.monotonic() - began < PATIENCE, f"{what} woke no state watcher"
            began = time.monotonic()
            await watch.wait(QUIET)
            assert time.monotonic() - began >= QUIET * 0.9


#: a client in a process of its own: takes the lock, says so, holds it until told, releases
_OTHER_PROCESS = """
import sys, tumbler
with tumbler.connect(sys.argv[1]) as locks, locks.lock(sys.argv[2], ttl=30, timeout=30):
    print("held", flush=True)
    sys.stdin.readline()
print("released", flush=True)
"""


def wakes_for_another_process(url: str) -> None:
    with (
        tumbler.connect(url) as watching,
        watching._backend.watch_state(NAME) as watch,
        subprocess.Popen(
            [sys.executable, "-c", _OTHER_PROCESS, url, NAME],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as child,
    ):
        assert child.stdin is not None
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "held"
        began = time.monotonic()
        watch.wait(PATIENCE)  # at once, or as soon as the grant's commit reached it
        assert time.monotonic() - began < PATIENCE
        assert len(watching.status(NAME).holders) == 1
        assert quiet(watch)
        child.stdin.write("\n")
        child.stdin.flush()
        began = time.monotonic()
        watch.wait(PATIENCE)
        assert time.monotonic() - began < PATIENCE
        assert child.stdout.readline().strip() == "released"
        assert child.wait(PATIENCE) == 0
        assert watching.status(NAME).holders == ()


def watches_by_polling_when_it_may_not_say_so(url: str, reader_url: str) -> None:
    """A client whose role may only read still watches: its watch wakes every
    ``REFUSED_POLL``, as the lock layer polls where the backend does not wake watchers."""
    with (
        tumbler.connect(reader_url) as reading,
        tumbler.connect(url) as other,
        reading._backend.watch_state(NAME) as watch,
    ):
        assert other._backend.try_grant(_request("a")) is not None
        began = time.monotonic()
        watch.wait(PATIENCE)
        assert time.monotonic() - began < PATIENCE
        assert len(reading.status(NAME).holders) == 1
        # and the lock layer follows the lock through it
        with reading.watch(NAME) as changes:
            states = iter(changes)
            assert len(next(states).holders) == 1
            assert other._backend.release(NAME, "a")
            assert next(states).holders == ()


# -- PostgreSQL ---------------------------------------------------------------------------------


@pytest.fixture
def schema() -> str:
    return f"test_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def url(postgresql_server: PostgreSQLServer, schema: str) -> str:
    return f"{postgresql_server.url}?schema={schema}"


@pytest.fixture
def admin(postgresql_server: PostgreSQLServer) -> Iterator[psycopg.Connection[Any]]:
    with postgresql_server.connect(TUMBLER_DATABASE) as connection:
        yield connection


def _watched(admin: psycopg.Connection[Any], schema: str) -> list[tuple[Any, ...]]:
    """Every row of the watched names: name, channel, seconds left."""
    query = sql.SQL(
        "SELECT name, channel, extract(epoch FROM expires_at - clock_timestamp())::float8 "
        "FROM {}.tumbler_watched ORDER BY name, channel"
    ).format(sql.Identifier(schema))
    return [tuple(row) for row in admin.execute(query).fetchall()]


def test_every_change_by_another_client_wakes_a_state_watcher(url: str) -> None:
    latencies = wakes_at_every_change(url, "PostgreSQL")
    assert len(latencies) == 11


@pytest.mark.asyncio
async def test_every_change_by_another_client_wakes_a_state_watcher_asyncio(url: str) -> None:
    await awakes_at_changes(url)


def test_a_change_made_in_another_process_wakes_a_state_watcher(url: str) -> None:
    wakes_for_another_process(url)


def test_a_watchers_row_lives_with_its_watch_and_goes_with_its_client(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    with tumbler.connect(url) as watching, tumbler.connect(url) as other:
        watcher, changer = watching._backend, other._backend
        assert changer.capabilities.state_wakeups
        with watcher.watch_state(NAME) as watch, watcher.watch_state(NAME) as again:
            ((name, channel, left),) = _watched(admin, schema)  # one per client and name
            assert (name, channel) == (NAME, watcher.channel)
            assert WATCHED_TTL - PATIENCE < left <= WATCHED_TTL
            # a row that ran out is told nothing, and the sweep deletes it
            admin.execute(
                sql.SQL("UPDATE {}.tumbler_watched SET expires_at = clock_timestamp()").format(
                    sql.Identifier(schema)
                )
            )
            assert changer.try_grant(_request("a")) is not None
            assert quiet(watch)
            assert quiet(again)
            changer.pool.run(changer._sweep, idempotent=True)
            assert _watched(admin, schema) == []
            # written again by the next wait once a third of its life has passed
            watch._marked_at -= WATCHED_TTL
            assert quiet(watch)
            assert [row[:2] for row in _watched(admin, schema)] == [(NAME, watcher.channel)]
            assert changer.release(NAME, "a")
            watch.wait(PATIENCE)
        assert len(_watched(admin, schema)) == 1  # a closed watch's row runs out
    assert _watched(admin, schema) == []  # its client's listener deleted it as it stopped


def test_a_role_that_may_only_read_watches_by_polling(
    postgresql_server: PostgreSQLServer, url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    tumbler.connect(url).close()  # the schema is made
    role = f"reader_{uuid.uuid4().hex[:8]}"
    admin.execute(
        sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'reader-Pa55'").format(sql.Identifier(role))
    )
    for statement in (
        "GRANT CONNECT ON DATABASE {db} TO {role}",
        "GRANT USAGE ON SCHEMA {schema} TO {role}",
        "GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}",
    ):
        admin.execute(
            sql.SQL(statement).format(
                db=sql.Identifier(TUMBLER_DATABASE),
                role=sql.Identifier(role),
                schema=sql.Identifier(schema),
            )
        )
    reader_url = f"{postgresql_server.url_for(role, 'reader-Pa55')}?schema={schema}"
    watches_by_polling_when_it_may_not_say_so(url, reader_url)


def polls_its_waits_and_its_state(url: str, polling_url: str) -> None:
    """A client that polls is told nothing by the server: it offers no push or state
    wake-ups, its waiters' entries are short (nothing else ends a dead one), and a waiter of
    it asks again with back-off, not at its re-check interval nor at its entry's refresh
    (both an hour here). Its acquire's timeout outlasts the case's patience: a last try at
    that timeout must not be what lets it in."""
    with tumbler.connect(url) as locks, tumbler.connect(polling_url) as polling:
        offered = polling._backend.capabilities
        assert not offered.push_wakeups
        assert not offered.state_wakeups
        assert offered.waiter_ttl == POLLING_WAITER_TTL
        polling._backend.capabilities = dataclasses.replace(
            offered, recheck_interval=3600.0, waiter_ttl=3600.0
        )
        held = locks.lock(NAME)
        assert held.acquire()

        def take() -> bool:
            with polling.lock(NAME, timeout=2 * PATIENCE):
                return True

        waiting = BackgroundCall(take)
        eventually(lambda: locks.status(NAME).waiters == 1, "the polling waiter is in line")
        held.release()
        assert waiting.result() is True


async def apolls_its_waits_and_its_state(url: str, polling_url: str) -> None:
    """:func:`polls_its_waits_and_its_state` in the asyncio flavour."""
    async with (
        await tumbler.aio.connect(url) as locks,
        await tumbler.aio.connect(polling_url) as polling,
    ):
        offered = polling._backend.capabilities
        assert not offered.push_wakeups
        assert not offered.state_wakeups
        assert offered.waiter_ttl == POLLING_WAITER_TTL
        polling._backend.capabilities = dataclasses.replace(
            offered, recheck_interval=3600.0, waiter_ttl=3600.0
        )
        held = locks.lock(NAME)
        assert await held.acquire()

        async def take() -> bool:
            async with polling.lock(NAME, timeout=2 * PATIENCE):
                return True

        waiting = asyncio.ensure_future(take())
        await aeventually(lambda: _waiters(locks), "the polling waiter is in line")
        await held.release()
        assert await asyncio.wait_for(waiting, PATIENCE) is True


async def _waiters(locks: tumbler.aio.AsyncLocks) -> bool:
    return (await locks.status(NAME)).waiters == 1


def test_a_client_that_polls_polls_its_waits_and_its_state(url: str) -> None:
    assert CAPABILITIES.push_wakeups
    assert CAPABILITIES.state_wakeups
    polls_its_waits_and_its_state(url, f"{url}&wakeups=poll")
    asyncio.run(apolls_its_waits_and_its_state(url, f"{url}&wakeups=poll"))
