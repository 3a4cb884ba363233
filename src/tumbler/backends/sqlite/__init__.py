"""The SQLite backend (``sqlite://``): locks in a file, for the processes of one machine.

The backend itself, its URL grammar and what it promises are in :mod:`.backend`.
"""

from __future__ import annotations

import sys

from ..contract import Capabilities
from ..descriptor import BackendDescriptor, call_on_demand

CAPABILITIES = Capabilities(
    # A release rings the doorbell (a datagram socket in Linux's abstract namespace) of each
    # client whose waiter the grant rule now lets through; elsewhere waiters only poll.
    push_wakeups=sys.platform.startswith("linux"),
    # The safety net under the rings: a lease that ran out by itself, a releaser of an older
    # tumbler and a ring lost to a full socket buffer ring nobody, and cost a waiter this long.
    recheck_interval=0.1,
    durable_fencing=True,
    server_clock=True,
    # Every poll (at most recheck_interval = 100 ms apart with rings, poll_cap = 50 ms without,
    # plus the time it queues) refreshes a waiter's entry, so 1 s is 10 polls' worth: a live
    # waiter keeps its place through a stall of most of a second (a loaded machine, a blocked
    # event loop, an asyncio client's polls queued behind a thousand others). One stalled
    # longer loses only its place in a fair line: its next poll joins at the back (nothing
    # else is lost). A waiter that died blocks a fair line for at most this long after its
    # last poll.
    waiter_ttl=1.0,
    poll_base=0.002,
    poll_cap=0.05,
    # A renewal is one short transaction (well under 1 ms), but it may wait for another
    # process's write lock, and a WAL checkpoint fsyncs the file while it holds it (tens of
    # ms on a busy disk, see bench/many_leases_sqlite.py). Renewals come at ttl/3 and the
    # client gives the hold up at about ttl: at 0.5 s, 0.33 s is left for such waits.
    min_ttl=0.5,
    scope="host",
    line_cap=True,
    # a grant's row keeps its lock-delay, and outlives its lease by it (backend.py)
    lock_delay=True,
    # Every change of a name's entries rings the doorbells its state watchers registered
    # (backend.py, "Waking state watchers"); without doorbells a watcher polls: nothing could
    # tell it of another process's change sooner.
    state_wakeups=sys.platform.startswith("linux"),
)


DESCRIPTOR = BackendDescriptor(
    name="sqlite",
    schemes=("sqlite",),
    opener=f"{__name__}.opener",
    capabilities=CAPABILITIES,
    summary="an SQLite file: the processes of one machine, no server",
    url_form="sqlite:///path/locks.db",
    isolate=call_on_demand(f"{__name__}.backend", "isolate"),
)
