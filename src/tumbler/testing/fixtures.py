"""pytest fixtures for testing code that uses tumbler: a client of an in-memory backend of the
test's own, on a clock that moves only when the test moves it.

Registered with pytest by tumbler's entry point (``pytest11``), so a project that installs
tumbler has them without a ``conftest.py``::

    def test_the_report_job_runs_once(tumbler_locks, tumbler_clock):
        assert tumbler_locks.lock("report").acquire()
        tumbler_clock.advance(31)  # past the lease: 30 s by default
        tumbler_locks.settle()     # the renewals and expiry checks due have run

``tumbler_connect()`` makes more clients of the same backend and clock (another worker);
``tumbler_url`` is their URL, for code that connects by itself (pass ``clock=tumbler_clock``).
A wait for a lock follows the clock too: a thread waiting with ``timeout=5`` waits until the
test has advanced the clock by 5 seconds, so advance it once the wait has begun
(``tumbler.testing.wait_until``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

import tumbler

from .._clock import ManualClock

__all__ = ["tumbler_clock", "tumbler_connect", "tumbler_locks", "tumbler_url"]


@pytest.fixture
def tumbler_clock() -> ManualClock:
    """The test's clock: it stands still until ``tumbler_clock.advance(seconds)``."""
    return ManualClock()


@pytest.fixture
def tumbler_url() -> str:
    """A ``memory://`` URL of the test's own: its locks are shared by the clients of this
    process that name it, and by no other test."""
    return f"memory://tumbler-test-{uuid.uuid4().hex}"


@pytest.fixture
def tumbler_connect(
    tumbler_url: str, tumbler_clock: ManualClock
) -> Iterator[Callable[[], tumbler.Locks]]:
    """Makes clients of the test's backend on the test's clock; each is closed after the
    test."""
    clients: list[tumbler.Locks] = []

    def connect() -> tumbler.Locks:
        client = tumbler.connect(tumbler_url, clock=tumbler_clock)
        clients.append(client)
        return client

    yield connect
    for client in clients:
        client.close()


@pytest.fixture
def tumbler_locks(tumbler_connect: Callable[[], tumbler.Locks]) -> tumbler.Locks:
    """A client of the test's backend on the test's clock, closed after the test."""
    return tumbler_connect()
