"""The stock service demo over HTTP, and the example services it runs.

The demo's runs start real processes (two instances of an example service per run) on real
backends: an SQLite file, and a redis-server from the fixtures. Throughput is printed by the
demo, never asserted here.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from tumbler import demo_http
from tumbler.demo import DemoError
from tumbler.demo_http import HttpDemoResult, HttpRunResult, examples_directory, run_http_demo
from tumbler.testing.backends.redis.server import RedisServer

from .conftest import Spawn, read_line, run_tumbler

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_small_demo(url: str, flavour: str) -> HttpDemoResult:
    """30 requests for a stock of 20 from 10 clients at once, 20 ms between each sale's read
    and write: without a lock the first ten sales all read before any writes, so updates are
    lost for sure, and the lost ones leave stock for more than 20 sales."""
    return run_http_demo(
        url, flavour=flavour, requests=30, concurrency=10, stock=20, segments=4, think=0.02
    )


def assert_the_locks_make_it_exact(result: HttpDemoResult) -> None:
    for run in (result.locked, result.segmented):
        assert run.locked
        assert (run.requests, run.sold, run.final_stock) == (30, 20, 0)
        assert (run.oversold, run.lost_updates, run.failed) == (0, 0, 0)
        assert (run.answered_sold, run.answered_sold_out) == (20, 10)
        assert run.exact
    assert (result.locked.mode, result.segmented.mode) == ("lock", "segmented")
    assert result.segmented.segments == 4
    assert result.ok

    unlocked = result.unlocked
    assert (unlocked.mode, unlocked.locked, unlocked.requests) == ("none", False, 30)
    assert unlocked.lost_updates > 0
    assert unlocked.oversold > 0
    assert not unlocked.exact
    assert unlocked.answered_sold == unlocked.sold  # the store counted every sale it answered


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_on_sqlite_the_locks_make_the_sales_exact_and_no_lock_oversells(
    flavour: str, tmp_path: Path
) -> None:
    url = f"sqlite://{(tmp_path / 'locks.db').as_posix()}"
    result = run_small_demo(url, flavour)
    assert (result.url, result.flavour) == (url, flavour)
    assert_the_locks_make_it_exact(result)


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_on_redis_the_locks_make_the_sales_exact_and_no_lock_oversells(
    flavour: str, redis_server: RedisServer
) -> None:
    url = f"{redis_server.url}?prefix=tumbler:demo-{uuid.uuid4().hex[:12]}"
    result = run_small_demo(url, flavour)
    assert result.url.startswith("redis://")
    assert_the_locks_make_it_exact(result)


def test_fewer_requests_than_stock_sell_every_request() -> None:
    # The default backend: an SQLite file in the demo's own temporary directory.
    result = run_http_demo(requests=6, concurrency=3, stock=10, segments=3, think=0.0)
    for run in (result.locked, result.segmented):
        assert (run.sold, run.final_stock, run.answered_sold_out) == (6, 4, 0)
        assert run.exact
    assert result.url.startswith("sqlite://")


@pytest.mark.parametrize(
    ("sold", "final_stock", "answers", "exact"),
    [
        (10, 0, (10, 10, 0), True),  # right
        (10, 0, (10, 9, 1), False),  # one request got no answer
        (10, 0, (9, 11, 0), False),  # a sale answered "sold out"
        (12, 0, (12, 8, 0), False),  # sold items that never were
    ],
)
def test_a_run_is_exact_when_the_store_and_the_answers_agree(
    sold: int, final_stock: int, answers: tuple[int, int, int], exact: bool
) -> None:
    answered_sold, answered_sold_out, failed = answers
    run = HttpRunResult(
        locked=True,
        workers=4,
        requests=20,
        initial_stock=10,
        sold=sold,
        final_stock=final_stock,
        seconds=0.5,
        mode="segmented",
        segments=4,
        answered_sold=answered_sold,
        answered_sold_out=answered_sold_out,
        failed=failed,
    )
    assert run.exact is exact
    assert run.throughput == 40
    assert run.label == "segmented lock (4)"


@pytest.mark.parametrize(
    "arguments",
    [
        {"requests": 0},
        {"concurrency": 0},
        {"segments": 0},
        {"stock": -1},
        {"think": 11},
        {"flavour": "trio"},
        {"url": "memory://demo"},
    ],
)
def test_run_http_demo_refuses_what_cannot_make_a_demo(arguments: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - several messages, one kind of refusal
        run_http_demo(**arguments)  # type: ignore[arg-type]


def test_the_examples_are_found_in_the_package_first_then_in_the_source_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # this checkout (an editable install): the repository's own examples/
    assert examples_directory() == EXAMPLES
    # a wheel: a copy of examples/ in tumbler/_examples
    package = tmp_path / "site-packages" / "tumbler"
    (package / "_examples").mkdir(parents=True)
    (package / "_examples" / "stock_store.py").touch()
    monkeypatch.setattr(demo_http, "__file__", str(package / "demo_http.py"))
    assert examples_directory() == package / "_examples"
    # neither
    (package / "_examples" / "stock_store.py").unlink()
    with pytest.raises(DemoError, match="missing"):
        examples_directory()


# -- the command ---------------------------------------------------------------------------------


def test_demo_http_command(env: dict[str, str]) -> None:
    arguments = ["--requests", "30", "--concurrency", "10", "--stock", "20", "--think", "0.02"]
    result = run_tumbler("demo", "--http", *arguments, env=env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "serving on http://127.0.0.1:" in out  # the instances' output
    for heading in ("run", "sold", "left", "oversold", "lost", "req/s"):
        assert heading in out
    for label in ("one lock", "segmented lock (4)"):
        [row] = [line.strip() for line in out.splitlines() if line.strip().startswith(label)]
        # requests, sold, stock left, oversold, lost updates
        assert row.removeprefix(label).split()[:5] == ["30", "20", "0", "0", "0"]
    assert "exactly right" in out


def test_demo_http_quiet_leaves_out_the_instances_output(env: dict[str, str]) -> None:
    arguments = ["--requests", "10", "--concurrency", "5", "--stock", "5", "--think", "0"]
    result = run_tumbler("demo", "--http", "--quiet", *arguments, env=env)
    assert result.returncode == 0, result.stderr
    assert "serving on" not in result.stdout
    assert not [line for line in result.stdout.splitlines() if " | " in line]
    assert "exactly right" in result.stdout


@pytest.mark.parametrize(
    ("arguments", "wrong"),
    [
        (["--http", "--workers", "2"], "--workers"),
        (["--segments", "2"], "--segments"),
        (["--flavour", "asyncio"], "--flavour"),
        (["--quiet"], "--quiet"),
        (["--http", "--url", "memory://x"], "inside one process"),
    ],
)
def test_demo_http_command_refuses_options_that_do_not_fit(
    env: dict[str, str], arguments: list[str], wrong: str
) -> None:
    result = run_tumbler("demo", *arguments, env=env)
    assert result.returncode == 64
    assert wrong in result.stderr


@pytest.mark.parametrize(
    ("signals", "status"),
    [
        pytest.param([signal.SIGINT], 130, id="ctrl-c"),
        # the second one comes while the first one's clean-up runs, and must not cut it short
        pytest.param([signal.SIGINT, signal.SIGINT], 130, id="ctrl-c-twice"),
        pytest.param([signal.SIGTERM], 143, id="sigterm"),
    ],
)
def test_a_signal_stops_the_instances_and_removes_the_temporary_files(
    spawn: Spawn, env: dict[str, str], tmp_path: Path, signals: list[int], status: int
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env["TMPDIR"] = str(scratch)
    # Without a lock a sale takes 0.2 s and the stock lasts for hundreds: the first run
    # sells for a minute, so the signal comes while its instances serve.
    arguments = ["--requests", "1200", "--concurrency", "4", "--think", "0.2"]
    demo = spawn("demo", "--http", *arguments, stdout=subprocess.PIPE, env=env)
    while "sold 1" not in read_line(demo):
        pass
    instances = psutil.Process(demo.pid).children()
    try:
        assert len(instances) == 2
        assert list(scratch.iterdir())  # the demo's temporary directory

        for signum in signals:
            demo.send_signal(signum)

        assert demo.wait(30) == status
        _, running = psutil.wait_procs(instances, timeout=30)
        assert running == []
        assert list(scratch.iterdir()) == []
    finally:
        for instance in instances:  # a failure must leave none behind either
            with contextlib.suppress(psutil.NoSuchProcess):
                instance.kill()


# -- the examples as scripts ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["lock", "segmented"])
@pytest.mark.parametrize("script", ["stock_service.py", "stock_service_async.py"])
def test_an_example_serves_its_stock_as_a_script(
    spawn: Spawn, url: str, tmp_path: Path, script: str, mode: str
) -> None:
    argv = [str(EXAMPLES / script), "--port", "0", "--url", url, "--mode", mode]
    argv += ["--db", str(tmp_path / "stock.db"), "--stock", "5", "--segments", "2"]
    service = subprocess.Popen(
        [sys.executable, *argv], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    try:
        line = read_line(service)
        assert f"mode {mode}" in line
        port = int(line.split("127.0.0.1:")[1].split()[0])
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

        def ask(method: str, path: str) -> tuple[int, object]:
            connection.request(method, path)
            with connection.getresponse() as response:
                return response.status, json.loads(response.read())

        sold = [ask("POST", "/buy") for _ in range(5)]
        assert [status for status, _ in sold] == [200] * 5
        assert sorted(body["segment"] for _, body in sold) == [0, 0, 0, 1, 1]  # type: ignore[index]
        assert ask("POST", "/buy") == (409, {"error": "sold out"})
        assert ask("GET", "/stock") == (200, {"stock": 0, "segments": [0, 0], "sales": 5})
        assert ask("GET", "/nothing")[0] == 404
        connection.close()

        service.send_signal(signal.SIGTERM)
        assert service.wait(30) == 0
    finally:
        if service.poll() is None:
            service.kill()
        service.wait()
        assert service.stdout is not None
        service.stdout.close()
