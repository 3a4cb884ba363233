"""The Redis backend (``redis://``, ``rediss://``, ``redis+unix://``): one server or a Redis
Cluster. Its URL grammar, promises and caveats are in :mod:`.common`; the Lua scripts and key
layout in :mod:`.lua`; the client in :mod:`._async.backend` (and its generated blocking twin).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from ..contract import Capabilities
from ..descriptor import BackendDescriptor

if TYPE_CHECKING:
    from ..._url import BackendURL

CAPABILITIES = Capabilities(
    push_wakeups=True,
    durable_fencing=False,
    server_clock=True,
    # A waiter's entry is refreshed by its re-check, once a second: 3 s lets two re-checks go
    # missing (a paused or busy client) before a live waiter loses its place, and bounds how
    # long the entry of a waiter that died unseen (a vanished host) holds up a fair line. A
    # waiter whose process dies is seen at once: a release's wake-up reaches nobody. One that
    # dies just before a release still listens: the grant the release hands it, or the cut
    # entry of a fair waiter it wakes, lasts a second (common.HAND_OFF_CONFIRM_MS).
    waiter_ttl=3.0,
    recheck_interval=1.0,
    # Leases are timed in milliseconds on the server, so precision is not the limit: the
    # renewal is. It comes at a third of the lease and must reach the server within the rest,
    # through one round trip, the client's scheduling delays (GIL, event loop, GC: tens of
    # milliseconds on a loaded machine) and, after a failed try, a second one. A second
    # leaves 667 ms for that; shorter leases would be lost to an ordinary hiccup.
    min_ttl=1.0,
    scope="network",
    # a lock whose state is watched has its changes published (see lua, "watched")
    state_wakeups=True,
    line_cap=True,
    # a grant's entry keeps its lock-delay, and the scripts keep it lapsed (see lua, ":e")
    lock_delay=True,
)

#: Redis Cluster: a release cannot see that a waiter died (PUBLISH counts the subscribers of
#: one node), so a dead waiter's entry ends only by running out; entries live 1 s, refreshed
#: by re-checks every third of that (the lock layer's), so a dead waiter holds a fair line up
#: for a second at most, and a live one keeps its place through a stall of two re-checks.
CLUSTER_CAPABILITIES = dataclasses.replace(CAPABILITIES, waiter_ttl=1.0)

DEFAULT_PORT = 6379


def isolate_under_prefix(url: BackendURL, token: str) -> str:
    # every key the backend writes is under the prefix
    query = dict(url.query)
    query["prefix"] = f"{query.get('prefix', 'tumbler')}:{token}"
    return f"{url.raw.partition('?')[0]}?{urlencode(query)}"


def _single_server(url: BackendURL) -> tuple[str, int] | None:
    from ..kit.options import flag, host_port

    if url.scheme == "redis+unix" or "," in url.hosts or flag(url.query.get("cluster", "no")):
        return None

    return host_port(url.hosts or "localhost", url, DEFAULT_PORT)


DESCRIPTOR = BackendDescriptor(
    name="redis",
    schemes=("redis", "rediss", "redis+unix"),
    opener=f"{__name__}.opener",
    capabilities=CAPABILITIES,
    summary="one Redis server (7.0 or newer) or a Redis Cluster",
    url_form="redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?OPTIONS]",
    extra="redis",
    clients=(
        "redis.client.Redis",
        "redis.asyncio.client.Redis",
        "redis.cluster.RedisCluster",
        "redis.asyncio.cluster.RedisCluster",
    ),
    isolate=isolate_under_prefix,
    single_server=_single_server,
)
