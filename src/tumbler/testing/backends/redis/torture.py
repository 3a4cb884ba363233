"""The Redis backend's deployments for the torture harness: one server without persistence,
one with every write fsynced, a Redis Cluster of three masters, and one Valkey server without
persistence."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tumbler.errors import install_command
from tumbler.torture.backends import (
    NETWORK_FAULT_KINDS,
    WORKER_FAULTS,
    BackendSpec,
    Deployment,
    OneServerDeployment,
    Settings,
    missing_module,
    program_version,
    started,
)
from tumbler.torture.check import BELIEF_KINDS
from tumbler.torture.faults import ProxyControl, network_faults_missing


def _redis_options(ttl: float) -> str:
    # A call must give up well within a lease, so a renewal can be retried before the
    # deadline when a reply is dropped or the server is gone.
    timeout = max(0.2, min(5.0, ttl / 3))
    return f"socket_timeout={timeout:g}&connect_timeout={timeout:g}"


def _missing_libraries() -> str | None:
    """Why no Redis-compatible server can be started or used here (the driver, the
    launcher's library), or None."""
    return missing_module("redis", install_command("redis")) or missing_module(
        "mirakuru", install_command("testing")
    )


def missing_redis() -> str | None:
    """Why Redis servers cannot be started here (the driver, the launcher, the program), or
    None."""
    missing = _missing_libraries()
    if missing is None and shutil.which("redis-server") is None:
        return "redis-server is not installed"
    return missing


def missing_valkey() -> str | None:
    """Why a Valkey server cannot be started here, or None."""
    from .server import RedisNotInstalled, valkey_server_binary

    missing = _missing_libraries()
    if missing is None:
        try:
            valkey_server_binary()
        except RedisNotInstalled as error:
            return str(error)
    return missing


def redis_version() -> str:
    from .server import redis_server_binary

    return program_version([redis_server_binary(), "--version"], r"v=(\S+)")


def valkey_version() -> str:
    from .server import valkey_server_binary

    return program_version([valkey_server_binary(), "--version"], r"v=(\S+)")


def _redis_starter(
    appendonly: bool, valkey: bool = False
) -> Callable[[Path, Settings], Deployment]:
    def start(directory: Path, settings: Settings) -> Deployment:
        from .server import RedisServer, valkey_server_binary

        extra = ["appendfsync always"] if appendonly else []
        binary = valkey_server_binary() if valkey else None
        server = RedisServer(
            directory / "redis", appendonly=appendonly, extra_config=extra, binary=binary
        )
        started(server.start)
        proxy = None
        if not network_faults_missing():
            proxy = ProxyControl.start(server.host, server.port)
        options = _redis_options(settings.ttl)
        return OneServerDeployment(
            server,
            proxy,
            f"{server.host}:{server.port}",
            lambda address: f"redis://{address}/0?{options}",
            (lambda: {"valkey-server": valkey_version()})
            if valkey
            else (lambda: {"redis-server": redis_version()}),
        )

    return start


class _RedisClusterDeployment(Deployment):
    def __init__(self, cluster: Any, ttl: float) -> None:
        nodes = ",".join(f"{host}:{port}" for host, port in cluster.startup_nodes)
        url = f"redis://{nodes}/0?cluster=true&{_redis_options(ttl)}"
        super().__init__(url, url)
        self.cluster = cluster
        self.nodes = len(cluster.nodes)

    def kill_all(self) -> None:
        for node in self.cluster.nodes:
            node.kill()

    def restart_all(self) -> None:
        for node in self.cluster.nodes:
            if not node.running:
                node.start()
        self.cluster.wait_healthy()

    def kill_node(self, index: int) -> None:
        self.cluster.nodes[index].kill()

    def node_of(self, lock: str) -> int | None:
        # Only the round's lock has live grants (their keys end in ":e" and expire with the
        # lease): the master that has one is the master of its slot.
        for index, node in enumerate(self.cluster.nodes):
            if not node.running:
                continue
            try:
                import redis

                options = {**node.connection_kwargs(), "socket_timeout": 1.0}
                with redis.Redis(**options) as client:
                    if next(iter(client.scan_iter(match="tumbler:{*}:e", count=1000)), None):
                        return index
            except Exception:  # a node that does not answer holds nothing we can find
                continue
        return None

    def restart_node(self, index: int) -> None:
        self.cluster.nodes[index].start()
        self.cluster.wait_healthy()

    def versions(self) -> dict[str, str]:
        return {"redis-server": redis_version()}

    def close(self) -> None:
        super().close()
        self.cluster.close()


def _start_redis_cluster(directory: Path, settings: Settings) -> Deployment:
    from .server import start_cluster

    cluster = started(lambda: start_cluster(directory / "cluster"))
    return _RedisClusterDeployment(cluster, settings.ttl)


# -- the specs -------------------------------------------------------------------------

_FORGETS = (
    "restarted without persistence, Redis forgets every grant: a second client is granted the "
    "lock while the first still holds it until its next renewal is refused (fencing tokens "
    "keep increasing, from the server's clock, so the resource still refuses the stale one)"
)

DEPLOYMENTS = (
    BackendSpec(
        name="redis",
        summary="one Redis server, no persistence",
        scheme="redis",
        faults=(*WORKER_FAULTS, "restart", *NETWORK_FAULT_KINDS),
        default_faults=(*WORKER_FAULTS, "restart", *NETWORK_FAULT_KINDS),
        not_promised={"restart": {kind: _FORGETS for kind in BELIEF_KINDS}},
        promise="exclusion while the server lives; tokens keep increasing across restarts "
        "(server clock); a restart without persistence forgets grants",
        recovery_grace=2.5,
        start=_redis_starter(appendonly=False),
        missing=missing_redis,
        # a blip well within a lease: no acquire fails, no hold is lost
        available={"net-blip": ("acquire", "hold")},
    ),
    BackendSpec(
        name="valkey",
        summary="one Valkey server, no persistence",
        scheme="redis",
        faults=(*WORKER_FAULTS, "restart", *NETWORK_FAULT_KINDS),
        default_faults=(*WORKER_FAULTS, "restart", *NETWORK_FAULT_KINDS),
        not_promised={"restart": {kind: _FORGETS for kind in BELIEF_KINDS}},
        promise="as on Redis: exclusion while the server lives; tokens keep increasing across "
        "restarts (server clock); a restart without persistence forgets grants",
        recovery_grace=2.5,
        start=_redis_starter(appendonly=False, valkey=True),
        missing=missing_valkey,
        available={"net-blip": ("acquire", "hold")},
    ),
    BackendSpec(
        name="redis-aof",
        summary="one Redis server, appendonly with appendfsync always",
        scheme="redis",
        faults=(*WORKER_FAULTS, "restart"),
        default_faults=("restart",),
        not_promised={},
        promise="exclusion across server crashes: every grant is on disk before it is acknowledged",
        recovery_grace=2.5,
        start=_redis_starter(appendonly=True),
        missing=missing_redis,
        # a blip well within a lease: no acquire fails, no hold is lost
        available={"net-blip": ("acquire", "hold")},
    ),
    BackendSpec(
        name="redis-cluster",
        summary="Redis Cluster, 3 masters, no replicas, no persistence",
        scheme="redis",
        faults=(*WORKER_FAULTS, "minority", "restart"),
        default_faults=(*WORKER_FAULTS, "minority"),
        not_promised={
            "minority": {
                kind: "a master restarted without persistence (and without replicas) "
                "forgets the grants in its slots"
                for kind in BELIEF_KINDS
            },
            "restart": {kind: _FORGETS for kind in BELIEF_KINDS},
        },
        promise="exclusion while the master of the lock's slot lives; a master lost "
        "without a replica takes its grants with it",
        # a killed master is noticed after cluster-node-timeout (2 s in the launcher)
        recovery_grace=5.0,
        start=_start_redis_cluster,
        missing=missing_redis,
    ),
)
