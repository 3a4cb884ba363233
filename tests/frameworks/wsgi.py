"""Helpers of the WSGI recipes' tests: a web server as a real process, and concurrent buyers."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tumbler.testing.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
DJANGO_RECIPE = ROOT / "examples" / "django_recipe"
GUNICORN_RECIPE = ROOT / "examples" / "gunicorn_recipe"
#: the seconds a request may take; a sale under a busy lock waits for the others
REQUEST_TIMEOUT = 60.0
#: what gunicorn and runserver say when the free port was taken before they bound it
PORT_IN_USE = ("Connection in use", "That port is already in use")


def environment(**variables: str) -> dict[str, str]:
    """The environment of a recipe's process: this tree's tumbler, no bytecode left in
    examples/ (it is packaged), and ``variables``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TUMBLER_", "STOCK_"))}
    env.update(PYTHONPATH=str(ROOT / "src"), PYTHONDONTWRITEBYTECODE="1", **variables)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


def start_web_server(
    argv: list[str], *, cwd: Path, env: dict[str, str], log: Path, started: list[WebServer]
) -> WebServer:
    """A web server listening on a free port (a new one if another program took the first),
    appended to ``started`` (for the caller to stop) as soon as it runs."""
    for _ in range(3):
        server = WebServer(argv, cwd=cwd, env=env, log=log)
        started.append(server)
        if server.wait_listening():
            return server
        started.remove(server)  # it has exited
    pytest.fail(f"three free ports were taken before the server bound them:\n{server.log()}")


class WebServer:
    """A web server started as ``argv`` in a session of its own, its output in ``log``; ``{port}``
    in ``argv`` is a free port's number."""

    def __init__(self, argv: list[str], *, cwd: Path, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log_path = log
        with log.open("wb") as output:
            self.process = subprocess.Popen(
                [part.format(port=self.port) for part in argv],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its workers too can be found, and ended, by its id
            )

    def wait_listening(self, timeout: float = 60.0) -> bool:
        """True once the port accepts connections (requests then wait for a worker); False if
        the server exited because another program took the port first."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                if any(words in self.log() for words in PORT_IN_USE):
                    return False
                pytest.fail(f"the server exited with {self.process.returncode}:\n{self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the server did not listen within {timeout} s:\n{self.log()}")
                time.sleep(0.05)

    def stop(self) -> int:
        """SIGTERM, and wait for the exit (SIGKILL to its session if it will not); its status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode

    def log(self) -> str:
        return self._log_path.read_text(errors="replace")

    def get(self, path: str) -> dict[str, object]:
        status, body = request("GET", self.url + path)
        assert status == 200, body
        return body

    def buy_concurrently(self, buyers: int) -> Counter[int]:
        """``buyers`` threads each POST /buy at once; how many got each status."""
        start = threading.Barrier(buyers)

        def buy(_: int) -> int:
            start.wait(timeout=REQUEST_TIMEOUT)
            return request("POST", self.url + "/buy")[0]

        with ThreadPoolExecutor(buyers) as pool:
            return Counter(pool.map(buy, range(buyers)))


def request(method: str, url: str) -> tuple[int, dict[str, object]]:
    """The status and JSON body of one request (a body that is no JSON: under "text")."""
    data = b"" if method == "POST" else None
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, data=data, method=method), timeout=REQUEST_TIMEOUT
        ) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode()
    try:
        body = json.loads(text)
    except ValueError:
        body = {"text": text}
    return status, body


def gunicorn_argv(app: str, *options: str) -> list[str]:
    """Real gunicorn, with 2 sync workers, on 127.0.0.1 (the port: WebServer's)."""
    return [
        sys.executable,
        "-m",
        "gunicorn",
        "--bind=127.0.0.1:{port}",
        "--workers=2",
        "--worker-class=sync",
        *options,
        app,
    ]


def booted_workers(log: str) -> list[int]:
    """The pids of the workers gunicorn says it booted."""
    return [int(pid) for pid in re.findall(r"Booting worker with pid: (\d+)", log)]
