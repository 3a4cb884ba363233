"""Headless Chromium, driven over its DevTools pipe, for tests/docs.

Chromium's own stderr logs every console message at one level, an error like a log line, and
not a resource that failed to load; its DevTools protocol tells them apart. With
``--remote-debugging-pipe`` it reads commands on fd 3 and writes replies and events on fd 4,
each a JSON text ended by a NUL byte: no port, no driver package.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import unquote, urlsplit

# how long one command, or a page's load, may take before the test fails
REPLY_TIMEOUT = 60.0

# every href of the rendered page, resolved by the browser (after the theme's scripts ran)
LINKS = "Array.from(document.querySelectorAll('a[href]'), a => a.href)"


@dataclass
class PageReport:
    url: str
    errors: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)


class Browser:
    """One headless Chromium; ``open(page)`` loads a file in a new tab and reports on it."""

    def __init__(self, binary: str, profile: Path) -> None:
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()
        self._process = subprocess.Popen(
            [
                "/bin/bash",  # dash redirects no descriptor above 9
                "-c",
                f'exec "$@" 3<&{commands_read} 4>&{replies_write}',
                "bash",
                binary,
                "--headless=new",
                "--no-sandbox",  # tests run as root in CI, where the sandbox refuses to start
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            pass_fds=(commands_read, replies_write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(commands_read)
        os.close(replies_write)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._replies, selectors.EVENT_READ)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Browser:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._process.poll() is None:
            try:
                self._send("Browser.close")
            except (OSError, RuntimeError, TimeoutError):
                self._process.kill()
            try:
                self._process.wait(timeout=REPLY_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._selector.close()
        os.close(self._commands)
        os.close(self._replies)

    def open(self, page: Path) -> PageReport:
        """Load ``page`` (a file) in a new tab, wait for its load event, and report the errors
        it made (console errors, uncaught exceptions and rejections, failed loads) and the
        links it has."""
        url = page.resolve().as_uri()
        target = self._send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self._send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        try:
            for domain in ("Runtime", "Log", "Page"):
                self._send(f"{domain}.enable", session=session)
            self._events.clear()
            navigated = self._send("Page.navigate", {"url": url}, session=session)
            report = PageReport(url)
            if "errorText" in navigated:
                report.errors.append(f"navigation: {navigated['errorText']}")
                return report
            self._wait_for("Page.loadEventFired", session)
            # The reply comes after every event the page sent before it: what the page's
            # scripts reported while loading is in self._events by then.
            evaluated = self._send(
                "Runtime.evaluate", {"expression": LINKS, "returnByValue": True}, session=session
            )
            report.links = list(evaluated["result"]["value"])
            report.errors = [
                error for event in self._events if (error := _error(event, session)) is not None
            ]
            return report
        finally:
            self._send("Target.closeTarget", {"targetId": target})

    def _send(
        self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None
    ) -> dict[str, Any]:
        self._next_id += 1
        command: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            command["sessionId"] = session
        message = json.dumps(command).encode() + b"\0"
        while message:
            message = message[os.write(self._commands, message) :]
        deadline = time.monotonic() + REPLY_TIMEOUT
        while True:
            reply = self._receive(deadline, method)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply["result"]
                return result
            if "method" in reply:
                self._events.append(reply)

    def _wait_for(self, method: str, session: str) -> None:
        deadline = time.monotonic() + REPLY_TIMEOUT
        if any(e["method"] == method and e.get("sessionId") == session for e in self._events):
            return
        while True:
            event = self._receive(deadline, method)
            if "method" in event:
                self._events.append(event)
                if event["method"] == method and event.get("sessionId") == session:
                    return

    def _receive(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not self._selector.select(left):
                raise TimeoutError(f"chromium: no {waiting_for} within {REPLY_TIMEOUT} s")
            chunk = os.read(self._replies, 1 << 16)
            if not chunk:
                raise RuntimeError(f"chromium exited (status {self._process.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        parsed: dict[str, Any] = json.loads(message)
        return parsed


def _error(event: dict[str, Any], session: str) -> str | None:
    """The error an event of the page reports, if it is one."""
    if event.get("sessionId") != session:
        return None
    params = event["params"]
    if event["method"] == "Runtime.exceptionThrown":
        details = params["exceptionDetails"]
        thrown = details.get("exception", {}).get("description") or details.get("text", "")
        return f"uncaught: {thrown}"
    if event["method"] == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
        said = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
        return f"console.{params['type']}: {said}"
    if event["method"] == "Log.entryAdded" and params["entry"]["level"] == "error":
        entry = params["entry"]
        return f"{entry['source']}: {entry['text']} {entry.get('url', '')}".strip()
    return None


class _Anchors(HTMLParser):
    """The ids (and the names of <a> elements) a page has: where a #fragment may point."""

    def __init__(self) -> None:
        super().__init__()
        self.found: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is not None and (name == "id" or (tag == "a" and name == "name")):
                self.found.add(value)


def _anchors(page: Path, known: dict[Path, set[str]]) -> set[str]:
    if page not in known:
        parser = _Anchors()
        parser.feed(page.read_text(encoding="utf-8"))
        known[page] = parser.found
    return known[page]


def broken_links(site: Path, links: list[str]) -> list[str]:
    """The links into ``site`` (file: URLs) whose file, or whose #fragment in it, does not
    exist, and the file: links that leave the site; other schemes are not the site's."""
    root = site.resolve()
    known: dict[Path, set[str]] = {}
    broken = []
    for link in links:
        parts = urlsplit(link)
        if parts.scheme != "file":
            continue
        target = Path(unquote(parts.path))
        if target.is_dir():
            target = target / "index.html"
        missing = not target.is_relative_to(root) or not target.is_file()
        if missing or (parts.fragment and unquote(parts.fragment) not in _anchors(target, known)):
            broken.append(link)
    return broken
