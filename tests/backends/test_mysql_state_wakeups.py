"""mysql://, mariadb://: state watchers woken by the server (``capabilities.state_wakeups``).

The cases of ``test_postgresql_state_wakeups.py``, on MariaDB: a client that watches a name's
state keeps a row in ``{p}watched``; every change of the name's entries by another client or
process leaves the watcher's client a wake-up ``* <name>`` and rings its listener, and its
watch wakes long before the lock layer's quarter-second poll; a wait with no change runs its
course. A user that may only read (EXECUTE on ``{p}states`` alone) watches by polling.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import tumbler
from tumbler.backends.kit._async.sql import WATCHED_TTL
from tumbler.testing.backends.mysql.server import TUMBLER_DATABASE, MariaDBServer
from tumbler.testing.conformance.compat import PATIENCE

from .test_postgresql_state_wakeups import (
    NAME,
    _request,
    apolls_its_waits_and_its_state,
    awakes_at_changes,
    polls_its_waits_and_its_state,
    quiet,
    wakes_at_every_change,
    wakes_for_another_process,
    watches_by_polling_when_it_may_not_say_so,
)


@pytest.fixture
def prefix() -> str:
    return f"w{uuid.uuid4().hex[:8]}_"


@pytest.fixture
def url(mariadb_server: MariaDBServer, prefix: str) -> str:
    return f"{mariadb_server.url}?table_prefix={prefix}"


@pytest.fixture
def admin(mariadb_server: MariaDBServer) -> Iterator[Any]:
    with mariadb_server.connect(TUMBLER_DATABASE) as connection:
        yield connection


def _watched(admin: Any, prefix: str) -> list[tuple[Any, ...]]:
    """Every row of the watched names: name, client, seconds left."""
    with admin.cursor() as cursor:
        cursor.execute(
            "SELECT name, client, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1e6 "
            f"FROM {prefix}watched ORDER BY name, client"
        )
        return [(bytes(name).decode(), int(client), float(left)) for name, client, left in cursor]


def test_every_change_by_another_client_wakes_a_state_watcher(url: str) -> None:
    latencies = wakes_at_every_change(url, "MariaDB")
    assert len(latencies) == 11


@pytest.mark.asyncio
async def test_every_change_by_another_client_wakes_a_state_watcher_asyncio(url: str) -> None:
    await awakes_at_changes(url)


def test_a_change_made_in_another_process_wakes_a_state_watcher(url: str) -> None:
    wakes_for_another_process(url)


def test_a_watchers_row_lives_with_its_watch_and_goes_with_its_client(
    url: str, prefix: str, admin: Any
) -> None:
    with tumbler.connect(url) as watching, tumbler.connect(url) as other:
        watcher, changer = watching._backend, other._backend
        assert changer.capabilities.state_wakeups
        with watcher.watch_state(NAME) as watch, watcher.watch_state(NAME) as again:
            ((name, client, left),) = _watched(admin, prefix)  # one per client and name
            assert (name, client) == (NAME, watcher.wakeups.key)
            assert WATCHED_TTL - PATIENCE < left <= WATCHED_TTL
            # a name only watched keeps no row in {p}names
            with admin.cursor() as cursor:
                assert cursor.execute(f"SELECT 1 FROM {prefix}names") == 0
            # a row that ran out is told nothing, and the sweep deletes it
            with admin.cursor() as cursor:
                cursor.execute(f"UPDATE {prefix}watched SET expires_at = UTC_TIMESTAMP(6)")
            assert changer.try_grant(_request("a")) is not None
            assert quiet(watch)
            assert quiet(again)
            changer.pool.run(changer._sweep, idempotent=True)
            assert _watched(admin, prefix) == []
            # written again by the next wait once a third of its life has passed
            watch._marked_at -= WATCHED_TTL
            assert quiet(watch)
            assert [row[:2] for row in _watched(admin, prefix)] == [(NAME, watcher.wakeups.key)]
            assert changer.release(NAME, "a")
            watch.wait(PATIENCE)
        assert len(_watched(admin, prefix)) == 1  # a closed watch's row runs out
    assert _watched(admin, prefix) == []  # its client's listener deleted it as it stopped
    with admin.cursor() as cursor:
        assert cursor.execute(f"SELECT 1 FROM {prefix}wakeups") == 0  # none left behind


def test_a_user_that_may_only_read_watches_by_polling(
    mariadb_server: MariaDBServer, url: str, prefix: str
) -> None:
    tumbler.connect(url).close()  # the tables are made
    user = f"reader_{uuid.uuid4().hex[:8]}"
    with mariadb_server.connect() as admin, admin.cursor() as cursor:
        cursor.execute("CREATE USER %s@'127.0.0.1' IDENTIFIED BY 'reader-Pa55'", (user,))
        cursor.execute(
            f"GRANT EXECUTE ON PROCEDURE `{TUMBLER_DATABASE}`.`{prefix}states` TO %s@'127.0.0.1'",
            (user,),
        )
    reader_url = mariadb_server.url_for(user, "reader-Pa55") + f"?table_prefix={prefix}"
    watches_by_polling_when_it_may_not_say_so(url, reader_url)


def test_a_client_that_polls_polls_its_waits_and_its_state(url: str) -> None:
    polls_its_waits_and_its_state(url, f"{url}&wakeups=poll")
    asyncio.run(apolls_its_waits_and_its_state(url, f"{url}&wakeups=poll"))


def test_a_name_nobody_watches_tells_no_one(url: str, prefix: str, admin: Any) -> None:
    """A grant and a release of a name nobody watches leave no wake-up (the lookup finds no
    row), and a client that never watched keeps no row."""
    with tumbler.connect(url) as locks, locks.lock(NAME):
        pass
    assert _watched(admin, prefix) == []
    with admin.cursor() as cursor:
        assert cursor.execute(f"SELECT 1 FROM {prefix}wakeups") == 0
