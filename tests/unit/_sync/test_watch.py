# Generated from tests/unit/_async/test_watch.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""The watch handshake of the backend kit (``AsyncBaseWatch`` and the hub watch), on a real
backend: ``memory://`` on a ManualClock, whose releases notify its hub. Asyncio source of the
blocking twin in ``tests/unit/_sync/test_watch.py``.

A ManualClock never lets a wait's timeout pass on its own, so a wait below returns only if a
wake-up reached it; a lost wake-up fails the case at ``PATIENCE``.
"""

from __future__ import annotations

import threading

import pytest

from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest
from tumbler.backends.kit import BaseWatch, HubWatch
from tumbler.backends.memory.backend import MemoryBackend, open_sync
from tumbler.errors import BackendUnavailable
from tumbler.testing import ManualClock
from tumbler.testing.conformance.compat import background

NAME = "orders:42"
#: longer than any test runs; the ManualClock never lets it pass anyway
LONG = 3600.0


@pytest.fixture
def backend() -> MemoryBackend:
    return open_sync(parse_url("memory://"), clock=ManualClock())


def request(owner: str) -> GrantRequest:
    return GrantRequest(NAME, owner, shared=False, limit=1, fair=False, ttl=30, holder="test")


class ServerWatch(BaseWatch):
    """A backend's watch that subscribes on its server when entered."""

    def __init__(self, backend: MemoryBackend, fail: bool = False) -> None:
        super().__init__(backend.clock, NAME, backend.hub)
        self.fail = fail
        self.unsubscribed = 0

    def _subscribe(self) -> bool:
        if self.fail:
            raise BackendUnavailable("the server refused the subscription")
        return True

    def _unsubscribe(self) -> None:
        self.unsubscribed += 1


def test_a_release_between_construction_and_entry_is_not_missed(backend):
    assert backend.try_grant(request("holder")) is not None
    watch = HubWatch(backend.clock, NAME, backend.hub)
    assert backend.release(NAME, "holder")  # before entry: the hub must already listen
    with watch:
        assert watch.retry_needed is False  # the hub missed nothing: no retry asked
        background(lambda: watch.wait(LONG)).result()


def test_retry_needed_says_what_entering_subscribed(backend):
    with ServerWatch(backend) as watch:
        assert watch.retry_needed is True


def test_wake_from_another_thread_ends_the_current_wait(backend):
    with HubWatch(backend.clock, NAME, backend.hub) as watch:
        waiting = background(lambda: watch.wait(LONG))
        threading.Thread(target=watch.wake).start()
        waiting.result()


def test_wake_before_a_wait_ends_the_next_wait_once(backend):
    with HubWatch(backend.clock, NAME, backend.hub) as watch:
        watch.wake()
        background(lambda: watch.wait(LONG)).result()
        # the wake-up was taken: the next wait needs a new one
        second = background(lambda: watch.wait(LONG))
        assert not second.done()
        backend.clock.advance(1)
        second.result()


def test_close_is_idempotent_and_needs_no_entry(backend):
    watch = ServerWatch(backend)
    assert backend.hub.subscribers(NAME) == 1
    watch.close()
    watch.close()
    assert backend.hub.subscribers(NAME) == 0
    assert watch.unsubscribed == 1


def test_a_failed_entry_closes_the_watch_and_raises(backend):
    watch = ServerWatch(backend, fail=True)
    with pytest.raises(BackendUnavailable):
        with watch:
            pytest.fail("entered a watch whose subscription failed")
    assert backend.hub.subscribers(NAME) == 0
    assert watch.unsubscribed == 1
    watch.close()
    assert watch.unsubscribed == 1


def test_exit_closes_the_watch(backend):
    with HubWatch(backend.clock, NAME, backend.hub):
        assert backend.hub.subscribers(NAME) == 1
    assert backend.hub.subscribers(NAME) == 0


def test_a_wake_up_from_another_thread_before_the_first_wait_ends_it(backend):
    # the watch makes its event at the first wait: a wake-up before it must be kept
    with HubWatch(backend.clock, NAME, backend.hub) as watch:
        notifier = threading.Thread(target=backend.hub.notify, args=(NAME,))
        notifier.start()
        notifier.join()
        background(lambda: watch.wait(LONG)).result()
