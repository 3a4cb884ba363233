"""The Redlock backend's deployment for the torture harness: five independent masters without
persistence, each behind a fault proxy of its own.

The workers reach the masters directly, except in rounds of network faults, where their URL
names the proxies (one per master, all faulted at once: the whole network between the clients
and the masters), and of ``member-blackhole``, which blackholes one master's proxy. Server
faults: ``minority`` SIGKILLs up to two masters and restarts them empty, ``minority-pause``
SIGSTOPs up to two past the lease, ``rolling-loss`` SIGKILLs three masters one after another
within a lease, each restarted empty at once, ``restart`` kills every master at once. The
URL's ``restart_delay`` (how long a master that comes back empty stays out of grants, and the
longest lease the backend grants) is a little more than the round's lease, so that a
restarted master is back in the vote before the next fault.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from tumbler.backends.redis.common import DEFAULT_PREFIX
from tumbler.backends.redlock.lua import master_keys
from tumbler.torture.backends import (
    WORKER_FAULTS,
    BackendSpec,
    Deployment,
    Settings,
    started,
)
from tumbler.torture.check import BELIEF_KINDS
from tumbler.torture.faults import ProxyControl, network_faults_missing

from ..redis.torture import missing_redis, redis_version

#: the masters of the deployment: two can be lost, three decide
MASTERS = 5
#: how long past its restart delay a restarted master may take to serve again (the workers'
#: next grant marks it)
SERVING_PATIENCE = 5.0
#: the network faults that apply: ``net-isolate`` needs one address in the workers' URL
NETWORK_FAULTS = ("net-delay", "net-cut", "net-drop", "net-blip", "net-reset")


def _restart_delay(ttl: float) -> float:
    return ttl + 0.5


def _redlock_options(ttl: float) -> str:
    # A call gives up well within a lease (as on one Redis server); a master has up to a tenth
    # of the lease to answer a fanned-out call, so a busy 2-core machine is not a dead master;
    # a master restarted empty is back in the vote once a lease and a little have passed.
    timeout = max(0.2, min(5.0, ttl / 3))
    node_timeout = max(0.05, min(0.5, ttl / 10))
    restart_delay = _restart_delay(ttl)
    return (
        f"socket_timeout={timeout:g}&connect_timeout={timeout:g}"
        f"&node_timeout={node_timeout:g}&restart_delay={restart_delay:g}"
    )


class _RedlockDeployment(Deployment):
    def __init__(self, masters: Any, proxies: list[ProxyControl], ttl: float) -> None:
        options = _redlock_options(ttl)
        self.restart_delay = _restart_delay(ttl)
        direct = f"redlock://{masters.hosts}?{options}"
        through = ",".join(f"127.0.0.1:{proxy.port}" for proxy in proxies)
        super().__init__(f"redlock://{through}?{options}" if proxies else direct, direct, proxies)
        self.masters = masters
        self.nodes = len(masters.masters)
        self.holds_on_every_node = True
        self.member_proxies = proxies

    def workers_url(self, kinds: Collection[str]) -> str:
        # the proxies cost every call a hop through the harness's process: only rounds that
        # fault the network need them
        if any(kind.startswith("net-") or kind == "member-blackhole" for kind in kinds):
            return self.url
        return self.admin_url

    def kill_all(self) -> None:
        for index in range(self.nodes):
            self.masters.kill(index)

    def restart_all(self) -> None:
        self.masters.start()

    def kill_node(self, index: int) -> None:
        self.masters.kill(index)

    def restart_node(self, index: int) -> None:
        # A master restarted empty is out of the vote until the clients mark it and its
        # restart delay passes: the outage lasts until it serves again, which the workers'
        # grants bring about (each marks a master it meets without its marker).
        self.masters.restart(index)
        client = self.masters.client(index)
        marker = master_keys(DEFAULT_PREFIX)[0]
        give_up = time.monotonic() + self.restart_delay + SERVING_PATIENCE
        while time.monotonic() < give_up:
            seconds, micros = client.time()
            serving_from = client.get(marker)
            if serving_from is not None and int(serving_from) <= seconds * 1000 + micros // 1000:
                return
            time.sleep(0.02)  # the clients' grants mark it: nothing here to wait on

    def pause_node(self, index: int) -> None:
        self.masters.pause(index)

    def resume_node(self, index: int) -> None:
        self.masters.resume(index)

    def versions(self) -> dict[str, str]:
        return {"redis-server": redis_version()}

    def close(self) -> None:
        super().close()
        self.masters.close()


def _start_redlock(directory: Path, settings: Settings) -> Deployment:
    from .server import RedlockMasters

    masters = RedlockMasters(directory / "masters", MASTERS)
    started(masters.start)
    proxies: list[ProxyControl] = []
    try:
        if not network_faults_missing():
            for master in masters.masters:
                proxies.append(ProxyControl.start(master.host, master.port))
    except BaseException:
        for proxy in proxies:
            proxy.close()
        masters.close()
        raise
    return _RedlockDeployment(masters, proxies, settings.ttl)


_MAJORITY_LOST = (
    "every master killed at once and restarted empty is the loss of all of them, beyond the "
    "minority Redlock survives: with no master left that remembers, the deployment looks new "
    "and nothing tells the forgotten grants, so a second client is granted the lock while the "
    "first still holds it until its next renewal is refused (the tokens then come from the "
    "clients' clocks, above the forgotten ones, so the resource still refuses the stale one)"
)

DEPLOYMENTS = (
    BackendSpec(
        name="redlock",
        summary=f"Redlock over {MASTERS} independent Redis masters, no persistence",
        scheme="redlock",
        faults=(
            *WORKER_FAULTS,
            "minority",
            "minority-pause",
            "rolling-loss",
            "member-blackhole",
            "restart",
            *NETWORK_FAULTS,
        ),
        default_faults=(
            *WORKER_FAULTS,
            "minority",
            "minority-pause",
            "rolling-loss",
            "member-blackhole",
            *NETWORK_FAULTS,
        ),
        not_promised={
            "restart": {kind: _MAJORITY_LOST for kind in BELIEF_KINDS},
        },
        promise="exclusion while a majority of the masters answers: through the crash "
        "(restarted empty, kept out for restart_delay) or the hang of any two of five, and "
        "through three of five restarted empty one after another; while a majority answers, "
        "no acquire fails (a master crashed, hung or cut off from the clients)",
        # a master restarted empty stays out of grants for restart_delay (TTL + 0.5 s); the
        # waiters' wake-ups do not survive its connections
        recovery_grace=5.0,
        start=_start_redlock,
        missing=missing_redis,
        # A quorum answers throughout: no acquire fails. A hold granted by a bare quorum (the
        # other masters left out after a failure) is lost if one of its masters is before a
        # renewal grants it on the others, visibly: not promised here.
        available={
            "net-blip": ("acquire", "hold"),
            "minority": ("acquire",),
            "minority-pause": ("acquire",),
            "member-blackhole": ("acquire",),
        },
    ),
)
