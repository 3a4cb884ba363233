"""examples/django_recipe, run by real Django: its ``POST /buy`` under ``locks().lock("stock")``
sells exactly the stock to concurrent buyers (and without the lock oversells), and its
``manage.py restock`` runs one at a time, a second run exiting at once naming the holder.

Each test runs the project as its users do, in processes of its own (``manage.py migrate``,
``runserver``, ``restock``) on a fresh SQLite database, with SQLite or Redis locks.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.frameworks.wsgi import DJANGO_RECIPE, WebServer, environment, start_web_server

if TYPE_CHECKING:
    from tumbler.testing.backends.redis.server import RedisServer

STOCK = 10
BUYERS = 30
#: restock's status when another run holds its lock (EX_TEMPFAIL)
BUSY = 75


@pytest.fixture(params=["sqlite", "redis"])
def lock_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The lock backend the recipe's processes share: an SQLite file, or a real Redis."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'locks.db'}"
    from tumbler.testing.backends.redis.server import flush_redis

    server: RedisServer = request.getfixturevalue("redis_server")
    flush_redis(server)
    return server.url


def manage(
    *args: str, env: dict[str, str], stdin: str = "", timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=DJANGO_RECIPE,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_manage(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=DJANGO_RECIPE,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def shop(tmp_path: Path, lock_url: str) -> dict[str, str]:
    """The environment of a shop with a fresh database holding ``STOCK`` items."""
    env = environment(STOCK_DB=str(tmp_path / "shop.sqlite3"), TUMBLER_URL=lock_url)
    for args, stdin in [(("migrate",), ""), (("restock",), f"{STOCK}\n")]:
        done = manage(*args, env=env, stdin=stdin)
        assert done.returncode == 0, done.stderr
    return env


@pytest.fixture
def runserver(tmp_path: Path) -> Iterator[Callable[..., WebServer]]:
    """Starts ``manage.py runserver`` (threaded: a thread per request) on a free port."""
    servers: list[WebServer] = []

    def start(env: dict[str, str]) -> WebServer:
        return start_web_server(
            [sys.executable, "manage.py", "runserver", "--noreload", "127.0.0.1:{port}"],
            cwd=DJANGO_RECIPE,
            env=env,
            log=tmp_path / "runserver.log",
            started=servers,
        )

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


def test_concurrent_buyers_get_exactly_the_stock(
    shop: dict[str, str], runserver: Callable[..., WebServer]
) -> None:
    server = runserver({**shop, "STOCK_THINK": "0.05"})
    statuses = server.buy_concurrently(BUYERS)
    assert statuses == {200: STOCK, 409: BUYERS - STOCK}, server.log()
    level = server.get("/stock")
    assert (level["stock"], level["sales"]) == (0, STOCK)


@pytest.mark.parametrize("lock_url", ["sqlite"], indirect=True)
def test_without_the_lock_the_same_buyers_oversell(
    shop: dict[str, str], runserver: Callable[..., WebServer]
) -> None:
    # the think is longer than the lock's test's, so that the demonstration cannot fail by
    # the buyers' requests arriving one after another
    server = runserver({**shop, "STOCK_THINK": "0.2", "STOCK_LOCK": "off"})
    statuses = server.buy_concurrently(BUYERS)
    level = server.get("/stock")
    assert statuses[200] > STOCK, (statuses, level)  # sold more than there ever was
    assert level["sales"] == statuses[200]


def test_a_second_restock_exits_at_once_naming_the_run_that_holds_it(
    shop: dict[str, str],
) -> None:
    runs = [start_manage("restock", env=shop) for _ in range(2)]
    waiting = ThreadPoolExecutor(2)
    try:
        # Both started at once: the one that took the lock reads its deliveries from stdin,
        # which stays open, so it holds the lock until the other has given up.
        exits = {waiting.submit(run.wait, 60): run for run in runs}
        done, _ = wait(exits, timeout=60, return_when=FIRST_COMPLETED)
        assert done, "neither restock exited"
        (loser,) = [exits[future] for future in done]
        (winner,) = [run for run in runs if run is not loser]
        out, err = winner.communicate("5\n7\n", timeout=60)
        assert winner.returncode == 0, err
        assert f"restocked: 12 delivered, {STOCK + 12} in stock" in out
        _, refusal = loser.communicate(timeout=60)
        assert loser.returncode == BUSY, refusal
        assert "restock is running already, held by " in refusal
        assert f"pid={winner.pid}" in refusal
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
            run.communicate()
        waiting.shutdown()
    with sqlite3.connect(shop["STOCK_DB"]) as db:
        assert db.execute("SELECT quantity FROM stock_stock").fetchall() == [(STOCK + 12,)]
    db.close()
