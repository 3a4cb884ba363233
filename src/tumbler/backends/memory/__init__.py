"""The in-process backend (``memory://``), for unit tests: the backend is in :mod:`.backend`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..contract import Capabilities
from ..descriptor import BackendDescriptor

if TYPE_CHECKING:
    from ..._url import BackendURL

CAPABILITIES = Capabilities(
    push_wakeups=True,
    durable_fencing=False,
    server_clock=True,
    waiter_ttl=5.0,
    # Releases wake waiters at once; an expiry wakes nobody, and a re-check costs microseconds
    # here, so waiters look again often.
    recheck_interval=0.05,
    # A renewal here costs microseconds, so what a lease must cover is the renewal worker
    # being late: it renews at ttl/3, and the client gives the hold up at about ttl, which
    # leaves 2/3 of the lease (0.13 s at 0.2 s) for a thread or event loop that a loaded
    # machine schedules late (GIL hand-offs come every 5 ms; other processes' bursts take
    # tens of ms). On a ManualClock the test moves time itself, so any lease will do.
    min_ttl=0.2,
    scope="process",
    state_wakeups=True,
    line_cap=True,
    lock_delay=True,
)


def _isolate(url: BackendURL, token: str) -> str:
    return f"memory://{url.hosts}-{token}"


DESCRIPTOR = BackendDescriptor(
    name="memory",
    schemes=("memory",),
    opener=f"{__name__}.backend",
    capabilities=CAPABILITIES,
    summary="one process's memory, for tests (with tumbler.testing.ManualClock)",
    url_form="memory://[STORE]",
    isolate=_isolate,
)
