# Generated from src/tumbler/backends/kit/_async/opening.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""Opening a backend that connects after construction: started, or closed before the error.

A backend's constructor opens nothing that can fail on the network; ``start()`` does
(connects, subscribes, checks the server). If ``start()`` fails, or is cancelled, what it had
opened so far (a pool, a reader task, a session and its threads) must not outlive the failed
``connect()``: nobody holds the backend to close it.
"""

from __future__ import annotations

from typing import Protocol, TypeVar


class Startable(Protocol):
    """A backend that is made, then started, and closed whether or not it started."""

    def start(self) -> None: ...

    def close(self) -> None: ...


StartableT = TypeVar("StartableT", bound=Startable)


def start_or_close(backend: StartableT) -> StartableT:
    """Start ``backend`` and return it; if starting raises (cancellation too), close it, then
    let the error go on (an error of the close is chained to it, not put in its place)."""
    try:
        backend.start()
    except BaseException:
        backend.close()
        raise
    return backend
