"""The MySQL / MariaDB backend (``mysql://``, ``mariadb://``): lease rows timed on the
server's clock, waiters and state watchers woken by a change that interrupts their client's
listener. Its URL grammar, promises and caveats are in :mod:`.common`; the tables and
procedures in :mod:`.statements`; the client in :mod:`._async.backend` (and its generated
blocking twin).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from ..contract import Capabilities
from ..descriptor import BackendDescriptor, call_on_demand, one_of_hosts

if TYPE_CHECKING:
    from ..._url import BackendURL

CAPABILITIES = Capabilities(
    push_wakeups=True,
    # tokens come from an AUTO_INCREMENT counter, which never goes back (kept in the redo log)
    durable_fencing=True,
    server_clock=True,
    # as PostgreSQL's: a waiter's entry is refreshed by its re-check, once a second
    waiter_ttl=3.0,
    recheck_interval=1.0,
    # with ?wakeups=poll: each poll is a procedure call on the server
    poll_base=0.005,
    poll_cap=0.1,
    min_ttl=1.0,
    scope="network",
    line_cap=True,
    # a grant's row keeps its lock-delay, and outlives its lease by it (statements.py)
    lock_delay=True,
    # the changes of a watched name's entries wake its watchers' clients as a release wakes
    # a waiter's (statements.py, "State watchers"); not with ?wakeups=poll
    state_wakeups=True,
)

DEFAULT_PORT = 3306


def _isolate(url: BackendURL, token: str) -> str:
    # every table and procedure the backend uses is named with the prefix
    query = dict(url.query)
    digest = hashlib.sha1(token.encode()).hexdigest()[:12]
    query["table_prefix"] = f"{query.get('table_prefix', 'tumbler_')}{digest}_"[:40]
    return f"{url.raw.partition('?')[0]}?{urlencode(query)}"


DESCRIPTOR = BackendDescriptor(
    name="mysql",
    schemes=("mysql", "mariadb"),
    opener=f"{__name__}.opener",
    capabilities=CAPABILITIES,
    summary="a MariaDB 10.6+ database (MySQL 8.0.29+ untested): lease rows on the server's clock",
    url_form="mysql://[USER[:PASSWORD]@]HOST[:PORT]/DATABASE[?OPTIONS]",
    extra="mysql",
    isolate=_isolate,
    single_server=one_of_hosts(DEFAULT_PORT, default_host=None),
    prepare=call_on_demand(f"{__name__}.opener", "prepare"),
)
