"""The prefork pattern under real gunicorn (``python -m gunicorn``, 2 sync workers, --preload):
a tumbler client made at import is the master's, and raises ``ForkedClient`` in the workers;
a client per worker (examples/gunicorn_recipe's post_fork hook, or examples/django_recipe's
lazy ``locks()``) sells exactly the stock to concurrent buyers. Every test stops gunicorn
with SIGTERM and checks that it and its workers are gone.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.frameworks.wsgi import (
    DJANGO_RECIPE,
    GUNICORN_RECIPE,
    WebServer,
    booted_workers,
    environment,
    gunicorn_argv,
    request,
    start_web_server,
)
from tests.processes import process_gone

STOCK = 10
BUYERS = 30

# The mistake the recipes avoid: a module-level client. Under --preload gunicorn imports this
# in its master, then forks the workers.
CLIENT_AT_IMPORT = """
import os

import tumbler

locks = tumbler.connect(os.environ["TUMBLER_URL"])


def application(environ, start_response):
    with locks.lock("stock", timeout=10):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"sold\\n"]
"""


@pytest.fixture
def gunicorn(tmp_path: Path) -> Iterator[Callable[..., WebServer]]:
    """Starts gunicorn; at the end stops it (SIGTERM), and checks that nothing is left."""
    servers: list[WebServer] = []
    # gunicorn 25.1 on opens a control socket in $XDG_RUNTIME_DIR, else in ~/.gunicorn: one
    # of the test's own (short: a socket's path is at most 107 bytes)
    runtime = tempfile.mkdtemp(prefix="gunicorn-")

    def start(argv: list[str], *, cwd: Path, env: dict[str, str]) -> WebServer:
        env = {**env, "XDG_RUNTIME_DIR": runtime}
        log = tmp_path / f"gunicorn-{len(servers)}.log"
        return start_web_server(argv, cwd=cwd, env=env, log=log, started=servers)

    try:
        yield start
    finally:
        statuses = [server.stop() for server in servers]
        shutil.rmtree(runtime)
    for server, status in zip(servers, statuses, strict=True):
        log = server.log()
        assert status == 0, log
        workers = booted_workers(log)
        assert workers, log
        assert [pid for pid in workers if not process_gone(pid)] == []


def sqlite_locks(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'locks.db'}"


@pytest.mark.parametrize("preload", [True, False], ids=["preload", "no-preload"])
def test_a_client_made_at_import_raises_forked_client_in_workers_forked_after_it(
    tmp_path: Path, gunicorn: Callable[..., WebServer], preload: bool
) -> None:
    (tmp_path / "client_at_import.py").write_text(CLIENT_AT_IMPORT)
    options = ["--preload"] if preload else []
    server = gunicorn(
        gunicorn_argv("client_at_import:application", *options),
        cwd=tmp_path,
        env=environment(TUMBLER_URL=sqlite_locks(tmp_path)),
    )
    status, body = request("POST", server.url + "/")
    if preload:
        # the master made the client, the worker that took the request inherited it
        assert status == 500, body
        assert "tumbler.errors.ForkedClient: this client was made in a parent process" in (
            server.log()
        )
    else:
        # each worker imported the module itself, after its fork: a client of its own
        assert (status, body) == (200, {"text": "sold\n"})
        assert "ForkedClient" not in server.log()


def test_the_recipe_with_a_client_per_worker_sells_exactly_the_stock(
    tmp_path: Path, gunicorn: Callable[..., WebServer]
) -> None:
    store = tmp_path / "stock.db"
    subprocess.run(
        [sys.executable, "stock_app.py", f"--db={store}", f"--stock={STOCK}"],
        cwd=GUNICORN_RECIPE,
        env=environment(),
        check=True,
        timeout=60,
    )
    # gunicorn.conf.py preloads the app; the command line's options override its bind, workers
    server = gunicorn(
        gunicorn_argv("stock_app:application", "--config=gunicorn.conf.py"),
        cwd=GUNICORN_RECIPE,
        env=environment(
            TUMBLER_URL=sqlite_locks(tmp_path), STOCK_DB=str(store), STOCK_THINK="0.05"
        ),
    )
    statuses = server.buy_concurrently(BUYERS)
    assert statuses == {200: STOCK, 409: BUYERS - STOCK}, server.log()
    level = server.get("/stock")
    assert (level["stock"], level["sales"]) == (0, STOCK)
    assert "ForkedClient" not in server.log()


def test_the_django_recipe_under_gunicorn_preload_sells_exactly_the_stock(
    tmp_path: Path, gunicorn: Callable[..., WebServer]
) -> None:
    env = environment(
        STOCK_DB=str(tmp_path / "shop.sqlite3"),
        TUMBLER_URL=sqlite_locks(tmp_path),
        STOCK_THINK="0.05",
    )
    for args, stdin in [(("migrate",), ""), (("restock",), f"{STOCK}\n")]:
        subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=DJANGO_RECIPE,
            env=env,
            input=stdin,
            text=True,
            capture_output=True,
            check=True,
            timeout=60,
        )
    server = gunicorn(gunicorn_argv("shop.wsgi", "--preload"), cwd=DJANGO_RECIPE, env=env)
    statuses = server.buy_concurrently(BUYERS)
    assert statuses == {200: STOCK, 409: BUYERS - STOCK}, server.log()
    level = server.get("/stock")
    assert (level["stock"], level["sales"]) == (0, STOCK)
    assert "ForkedClient" not in server.log()
