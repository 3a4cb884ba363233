# Generated from tests/unit/_async/test_opening.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""The kit's start-or-close open helper (asyncio source of ``tests/unit/_sync/test_opening.py``).

What it is given is anything with ``start()`` and ``close()`` (``AsyncStartable``); the Redis
and ZooKeeper openers use it, and their own tests open real servers and unreachable ports.
"""

from __future__ import annotations

import pytest

from tumbler.backends.kit._sync.opening import start_or_close
from tumbler.errors import BackendUnavailable


class Interrupted(BaseException):
    """Not an Exception: as a cancellation or a KeyboardInterrupt during start is not."""


class Opened:
    """Records the calls the helper makes."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self.calls.append("close")


def test_a_started_backend_is_returned_open():
    opened = Opened()
    assert start_or_close(opened) is opened
    assert opened.calls == ["start"]


@pytest.mark.parametrize("error", [BackendUnavailable("refused"), Interrupted()])
def test_a_failed_start_closes_what_it_opened_and_raises(error):
    opened = Opened(error)
    with pytest.raises(type(error)) as raised:
        start_or_close(opened)
    assert raised.value is error
    assert opened.calls == ["start", "close"]
