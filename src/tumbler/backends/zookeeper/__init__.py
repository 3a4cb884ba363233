"""The ZooKeeper backend (``zookeeper://``, ``zookeepers://``): locks as ephemeral sequential
nodes of a session. Its URL grammar, promises and how a hold is lost are in :mod:`.common`;
the client in :mod:`._async.backend` (and its generated blocking twin).
"""

from __future__ import annotations

from ..contract import Capabilities
from ..descriptor import BackendDescriptor, one_of_hosts, under_path

DEFAULT_PORT = 2181
#: The shortest lease ZooKeeper can keep renewed (``Capabilities.min_ttl``); see
#: :mod:`.common`'s docstring, "The shortest lease".
MIN_TTL = 0.5
#: the ``session_timeout`` a URL gets unless it names one
DEFAULT_SESSION_TIMEOUT = 10.0

CAPABILITIES = Capabilities(
    push_wakeups=True,
    durable_fencing=True,
    server_clock=True,
    session_liveness=True,
    # waiter entries live with the session, not a lease of their own
    waiter_ttl=60.0,
    # watches are delivered once per change within a session; the re-check is a safety net
    recheck_interval=2.0,
    min_ttl=MIN_TTL,
    # a grant lives with the session, so no lease can be longer than the session timeout: this
    # is the default one's; each connection declares the timeout its ensemble negotiated
    max_ttl=DEFAULT_SESSION_TIMEOUT,
    # an ensemble serves clients on any machine that reaches it
    scope="network",
    # a children watch on the lock's node sees every entry made or deleted
    state_wakeups=True,
    line_cap=True,
    # a grant with a lock-delay leaves a tombstone outside the session (common: "Lock-delay")
    lock_delay=True,
)


DESCRIPTOR = BackendDescriptor(
    name="zookeeper",
    schemes=("zookeeper", "zookeepers"),
    opener=f"{__name__}.opener",
    capabilities=CAPABILITIES,
    summary="a ZooKeeper ensemble (or one server)",
    url_form="zookeeper://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/BASE/PATH][?OPTIONS]",
    extra="zookeeper",
    # every node the backend makes is under the URL's path
    isolate=under_path("/tumbler"),
    single_server=one_of_hosts(DEFAULT_PORT),
    clients=("kazoo.client.KazooClient",),
)
