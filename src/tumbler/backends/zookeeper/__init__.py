"""The ZooKeeper backend (``zookeeper://``, ``zookeepers://``): locks as ephemeral sequential
nodes of a session. Its URL grammar, promises and how a hold is lost are in :mod:`.common`;
the client in :mod:`._async.backend` (and its generated blocking twin).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..contract import Capabilities
from ..descriptor import BackendDescriptor, on_demand, one_of_hosts, under_path

if TYPE_CHECKING:
    from ..descriptor import BackendOpener

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
    line_cap=True,
)


DESCRIPTOR = BackendDescriptor(
    name="zookeeper",
    schemes=("zookeeper", "zookeepers"),
    opener=f"{__name__}.common",
    capabilities=CAPABILITIES,
    summary="a ZooKeeper ensemble (or one server)",
    url_form="zookeeper://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/BASE/PATH][?OPTIONS]",
    extra="zookeeper",
    # its hard dependency default-jre brings the JVM, so --no-install-recommends still gets
    # one, and libzookeeper-java brings slf4j-simple, which the launcher logs with
    system_packages=("zookeeper",),
    test_targets=on_demand(f"{__name__}.testing", "TARGETS"),
    # every node the backend makes is under the URL's path
    isolate=under_path("/tumbler"),
    torture=on_demand(f"{__name__}.torture", "DEPLOYMENTS"),
    single_server=one_of_hosts(DEFAULT_PORT),
    bench=on_demand(f"{__name__}.bench", "BENCH"),
)

if TYPE_CHECKING:
    from . import common as _opener

    _checked: BackendOpener = _opener
