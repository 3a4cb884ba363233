"""The PostgreSQL backend (``postgresql://``, ``postgres://``): lease rows timed on the server's
clock, waiters and state watchers woken by ``LISTEN``/``NOTIFY``. Its URL grammar, promises
and caveats are in :mod:`.common`; the tables and statements in :mod:`.statements`; the
client in :mod:`._async.backend` (and its generated blocking twin).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlencode

from ..contract import Capabilities
from ..descriptor import BackendDescriptor, call_on_demand, one_of_hosts

if TYPE_CHECKING:
    from ..._url import BackendURL

CAPABILITIES = Capabilities(
    push_wakeups=True,
    # tokens come from a sequence, which never goes back, also across a crash and restart
    durable_fencing=True,
    server_clock=True,
    # A waiter's entry is refreshed by its re-check, once a second: 3 s lets two re-checks go
    # missing (a paused or busy client) before a live waiter loses its place, and bounds how
    # long the entry of a waiter that died unseen holds up a fair line.
    waiter_ttl=3.0,
    recheck_interval=1.0,
    # with ?wakeups=poll: each poll is two short transactions on the server
    poll_base=0.005,
    poll_cap=0.1,
    # Leases are timed in microseconds on the server; the limit is the renewal, which comes
    # at a third of the lease and must get through a round trip, the client's own delays and,
    # after a failed try, a second one, within the rest.
    min_ttl=1.0,
    scope="network",
    line_cap=True,
    # a grant's row keeps its lock-delay, and outlives its lease by it (statements.py)
    lock_delay=True,
    # the changes of a watched name's entries notify its watchers' clients (statements.py,
    # "State watchers"); not with ?wakeups=poll (the kit's SQL base: polling())
    state_wakeups=True,
)

DEFAULT_PORT = 5432


def _isolate(url: BackendURL, token: str) -> str:
    # every table the backend uses is in the schema
    query = dict(url.query)
    query["schema"] = f"{query.get('schema', 'tumbler')}_{token}"[:63]
    return f"{url.raw.partition('?')[0]}?{urlencode(query)}"


DESCRIPTOR = BackendDescriptor(
    name="postgresql",
    schemes=("postgresql", "postgres"),
    opener=f"{__name__}.opener",
    capabilities=CAPABILITIES,
    summary="a PostgreSQL database (11 or newer): lease rows on the server's clock",
    url_form="postgresql://[USER[:PASSWORD]@]HOST[:PORT][/DBNAME][?OPTIONS]",
    extra="postgresql",
    isolate=_isolate,
    single_server=one_of_hosts(DEFAULT_PORT, default_host=None, host_options=("host",)),
    prepare=call_on_demand(f"{__name__}.opener", "prepare"),
    clients=(
        "psycopg_pool.pool.ConnectionPool",
        "psycopg_pool.pool_async.AsyncConnectionPool",
    ),
)
