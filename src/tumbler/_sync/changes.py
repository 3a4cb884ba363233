# Generated from src/tumbler/_async/changes.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""Following a lock's state as it changes (``locks.watch(name)``), what leader elections
observe their leader by.

A state watcher reads the lock (``inspect``, as ``status`` does) and then waits on a watch of
the backend's that wakes at every change of the name's entries (``watch_state``, where the
backend declares ``state_wakeups``), or on a poller. It reads again at each wake-up, when the
first lease it read runs out (a store that removes what ran out without telling anyone), and
after the backend's re-check interval in any case; it yields a state only when its entries
differ from the last one yielded.
"""

from __future__ import annotations

import weakref
from types import TracebackType
from typing import TYPE_CHECKING

from ..backends.contract import Capabilities, LockState, Watch

if TYPE_CHECKING:
    from .client import Locks

#: how often a state watcher reads its lock on a backend that does not tell it of changes
STATE_POLL_INTERVAL = 0.25
#: how long after a lease's end, by the backend's last reading, a state watcher reads again:
#: the reading's own age, and the time between the backend's clock and the client's
EXPIRY_MARGIN = 0.05


class StateChanges:
    """The state of one lock now, then at each change of its entries (``locks.watch()``):
    a grant, a release, a waiter arriving or leaving, an expiry, a forced release. The time
    left on leases alone is no change.

    ``async for state in changes`` (``for`` in the blocking flavour); ``close()``, or leaving
    ``async with``, stops watching, and ends the iteration. Woken by the backend where it
    tells of changes (``capabilities.state_wakeups``; an expiry the store does not announce
    is read when the lease ends), else by reading every quarter second; changes that come
    and go while the caller is busy elsewhere are seen as one. Raises ``ClientClosed`` when
    the client closes.
    """

    def __init__(self, locks: Locks, name: str, watch: Watch) -> None:
        #: the lock watched (canonical NFC form)
        self.name = name
        self._locks = locks
        self._watch = watch
        self._caps: Capabilities = locks.capabilities
        self._last: LockState | None = None
        self._entered = False
        self._closed = False
        # a watcher dropped unclosed (an iteration left with break) stops watching when
        # collected, as a generator would
        self._forget = weakref.finalize(self, locks._forget_watch, watch)

    def __iter__(self) -> StateChanges:
        return self

    def __next__(self) -> LockState:
        if self._closed:
            raise StopIteration
        watch = self._watch
        last = self._last
        if not self._entered:
            try:
                watch.__enter__()
            except BaseException:
                self.close()
                raise
            self._entered = True
        while True:
            if last is not None:
                watch.wait(_pause(last, self._caps))
                if self._closed:
                    raise StopIteration
            state = self._locks.status(self.name)
            if last is None or not state.same_entries(last):
                self._last = state
                return state
            last = state

    def close(self) -> None:
        """Stop watching (again is harmless): a wait under way ends, and so does the
        iteration."""
        if self._closed:
            return
        self._closed = True
        self._watch.wake()
        self._forget()

    def __enter__(self) -> StateChanges:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def _pause(state: LockState, caps: Capabilities) -> float:
    """How long a state watcher may wait for a wake-up before it reads ``state``'s lock again:
    until the first of its leases (one that counts down) or lock-delays runs out, and no
    longer than the backend's re-check interval, or the poll interval without wake-ups. A
    woken watcher never re-checks more often than a poller would: the re-check interval is
    set for waiters, who must not miss a turn (SQLite's is 0.1 s, memory's 0.05 s)."""
    if caps.state_wakeups:
        pause = max(caps.recheck_interval, STATE_POLL_INTERVAL)
    else:
        pause = STATE_POLL_INTERVAL
    for holder in state.holders:
        if not holder.session:
            pause = min(pause, max(holder.expires_in, 0.0) + EXPIRY_MARGIN)
    for lapsed in state.lapsed:
        pause = min(pause, max(lapsed.expires_in, 0.0) + EXPIRY_MARGIN)
    return pause
