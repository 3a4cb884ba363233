"""The etcd backend's deployments for the torture harness: one member, and a cluster of
three, each member of which the workers of ``member-blackhole`` rounds reach through a fault
proxy of its own."""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path
from typing import Any

from tumbler.backends.etcd.common import MIN_LEASE_TTL
from tumbler.errors import install_command
from tumbler.torture.backends import (
    NETWORK_FAULT_KINDS,
    WORKER_FAULTS,
    BackendSpec,
    Deployment,
    OneServerDeployment,
    QuorumDeployment,
    Settings,
    missing_module,
    program_version,
    started,
)
from tumbler.torture.faults import ProxyControl, network_faults_missing


def _etcd_options(ttl: float) -> str:
    # The lease is what frees a dead holder's locks here (hold.ttl is capped by it): make it
    # the TTL (in etcd's whole seconds), so a dead holder frees the lock about as fast as on
    # the other backends.
    lease = max(MIN_LEASE_TTL, math.ceil(ttl))
    request = max(0.2, min(5.0, ttl / 3))
    return f"lease_ttl={lease}&request_timeout={request:g}&connect_timeout=5"


def _etcd_version() -> str:
    from .server import etcd_program

    return program_version([str(etcd_program()), "--version"], r"etcd Version: (\S+)")


def _missing_etcd() -> str | None:
    missing = missing_module("h11", install_command("etcd")) or missing_module(
        "mirakuru", install_command("testing")
    )
    if missing is not None:
        return missing
    try:
        from .server import etcd_program

        etcd_program()
    except ImportError as error:
        return f"the etcd launcher is missing: {error}"
    except Exception as error:  # the launcher's own "not installed" error
        return str(error)
    return None


def _start_etcd(directory: Path, settings: Settings) -> Deployment:
    from .server import EtcdServer

    server = EtcdServer(directory / "etcd")
    started(server.start)
    proxy = None
    if not network_faults_missing():
        proxy = ProxyControl.start(server.host, server.port)
    options = _etcd_options(settings.ttl)
    return OneServerDeployment(
        server,
        proxy,
        f"{server.host}:{server.port}",
        lambda address: f"etcd://{address}/torture?{options}",
        lambda: {"etcd": _etcd_version()},
    )


class _EtcdClusterDeployment(QuorumDeployment):
    def __init__(self, cluster: Any, ttl: float) -> None:
        self._options = _etcd_options(ttl)
        url = self._url_at(cluster.members)
        super().__init__(url, url)
        self.cluster = cluster
        self.nodes = len(cluster.members)

    def _url_at(self, members: list[Any]) -> str:
        return self._url_of([f"{member.host}:{member.port}" for member in members])

    def _url_of(self, addresses: list[str]) -> str:
        return f"etcd://{','.join(addresses)}/torture?{self._options}"

    def url_without(self, index: int) -> str:
        return self._url_at([m for i, m in enumerate(self.cluster.members) if i != index])

    def url_through(self, ports: list[int]) -> str:
        return self._url_of([f"127.0.0.1:{port}" for port in ports])

    def kill_all(self) -> None:
        for member in self.cluster.members:
            member.kill()

    def restart_all(self) -> None:
        self.cluster.start()

    def kill_node(self, index: int) -> None:
        self.cluster.members[index].kill()

    def restart_node(self, index: int) -> None:
        member = self.cluster.members[index]
        member.stop()
        member.start()

    def pause_node(self, index: int) -> None:
        self._signal(index, signal.SIGSTOP)

    def resume_node(self, index: int) -> None:
        self._signal(index, signal.SIGCONT)

    def _signal(self, index: int, signum: int) -> None:
        pid = self.cluster.members[index].pid
        if pid is not None:
            os.kill(pid, signum)

    def leader(self) -> int | None:
        try:
            leader: int = self.cluster.leader(timeout=1.0)
        except Exception:  # an election is under way
            return None
        return leader

    def wait_serving(self, timeout: float) -> str | None:
        from .server import EtcdServerError

        try:
            self.cluster.leader(timeout=timeout)
        except EtcdServerError as error:
            return str(error)
        return None

    def node_ports(self) -> list[int]:
        return [int(member.port) for member in self.cluster.members]

    def versions(self) -> dict[str, str]:
        return {"etcd": _etcd_version()}

    def close(self) -> None:
        super().close()
        self.cluster.close()


def _start_etcd_cluster(directory: Path, settings: Settings) -> Deployment:
    from .server import EtcdCluster

    cluster = EtcdCluster(directory / "cluster")
    started(cluster.start)
    deployment = _EtcdClusterDeployment(cluster, settings.ttl)
    try:
        deployment.start_member_proxies()
    except BaseException:
        deployment.close()
        raise
    return deployment


#: A dead waiter's entry lives on its client's waiters' lease: it goes when etcd ends that
#: lease, up to a second (the shortest lease these servers grant) after the last keep-alive
#: and up to a sweep of etcd's (every 0.5 s) later; and half a second for a busy 2-core
#: machine, as torture's DEAD_WAITER_BOUND allows every backend. etcd reports a lease's time
#: to live in whole seconds, so no client can end a dead waiter's sooner.
DEAD_WAITER_BOUND = 1.0 + 0.5 + 0.5

DEPLOYMENTS = (
    BackendSpec(
        name="etcd",
        summary="one etcd member",
        scheme="etcd",
        faults=(*WORKER_FAULTS, "restart", *NETWORK_FAULT_KINDS),
        default_faults=(*WORKER_FAULTS, "restart", *NETWORK_FAULT_KINDS),
        not_promised={},
        promise="exclusion and increasing tokens (create revisions) across crashes and "
        "restarts; a dead holder's lease runs out",
        recovery_grace=5.0,
        dead_waiter_bound=DEAD_WAITER_BOUND,
        start=_start_etcd,
        missing=_missing_etcd,
        # a blip well within a lease: no acquire fails, no hold is lost
        available={"net-blip": ("acquire", "hold")},
    ),
    BackendSpec(
        name="etcd-cluster",
        summary="etcd cluster of 3",
        scheme="etcd",
        faults=(
            *WORKER_FAULTS,
            *("minority", "minority-pause", "leader", "leader-pause", "member-blackhole"),
            "restart",
        ),
        default_faults=(
            *WORKER_FAULTS,
            *("minority", "minority-pause", "leader", "leader-pause", "member-blackhole"),
        ),
        not_promised={},
        promise="exclusion while a majority serves, through the loss of any minority "
        "including the leader; while a majority serves (a member crashed, hung or cut off "
        "from the clients) no acquire fails and no hold is lost, and through a leader's loss "
        "no acquire fails",
        recovery_grace=8.0,
        dead_waiter_bound=DEAD_WAITER_BOUND,
        start=_start_etcd_cluster,
        missing=_missing_etcd,
        available={
            "minority": ("acquire", "hold"),
            "minority-pause": ("acquire", "hold"),
            # a request with no answer moves to another member within its budget
            "member-blackhole": ("acquire", "hold"),
            "leader": ("acquire",),
            "leader-pause": ("acquire",),
        },
    ),
)
