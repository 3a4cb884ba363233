"""The Redlock backend (``redlock://``, ``redlocks://``): one lock over N independent Redis
masters, held while a majority of them grant it. Its URL grammar, the algorithm, how fencing
tokens stay increasing, what it promises and what it cannot are in :mod:`.common`; the client
in :mod:`._async.backend` (and its generated blocking twin), which speaks to each master with
the Redis backend's scripts.
"""

from __future__ import annotations

from ..contract import Capabilities
from ..descriptor import BackendDescriptor
from ..redis import isolate_under_prefix

DEFAULT_PORT = 6379

CAPABILITIES = Capabilities(
    push_wakeups=True,
    # a master restarted without persistence forgets its sequences; the next tokens come from
    # the clients' clocks (see .common)
    durable_fencing=False,
    # each master times its leases on its own clock; the client allows for their drift
    server_clock=True,
    # Each master keeps a waiter's entry alive through its re-checks (every third of it). A
    # master sees a waiter's death only once it has dropped the waiter's connections, which
    # a release in the moment after the death comes before: the line then waits for the dead
    # waiter's entries to run out, so they live 1 s, not a single server's 3 s.
    waiter_ttl=1.0,
    recheck_interval=1.0,
    min_ttl=1.0,
    scope="network",
    line_cap=True,
    # each master keeps a lapsed grant as one Redis server does, and one that a quorum keeps
    # refuses every grant a quorum would have to make
    lock_delay=True,
    # while a client watches a lock's state, every master publishes its changes there, as
    # one Redis server does; a watcher hears a majority of them (see .common)
    state_wakeups=True,
)


DESCRIPTOR = BackendDescriptor(
    name="redlock",
    schemes=("redlock", "redlocks"),
    opener=f"{__name__}.opener",
    capabilities=CAPABILITIES,
    summary="Redlock: a majority of N independent Redis masters (7.0 or newer)",
    url_form="redlock://[[USER]:PASSWORD@]HOST:PORT,HOST:PORT,HOST:PORT[,...][/DB][?OPTIONS]",
    extra="redis",
    isolate=isolate_under_prefix,
)
