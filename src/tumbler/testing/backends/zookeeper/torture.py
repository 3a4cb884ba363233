"""The ZooKeeper backend's deployments for the torture harness: one server, and an ensemble
of three, each member of which the workers of ``member-blackhole`` rounds reach through a fault
proxy of its own."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

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

#: how long one probe of the ensemble's service waits for its session
SESSION_PROBE = 2.0


def _zookeeper_options(ttl: float) -> str:
    # The session timeout is the lease here (hold.ttl is capped by it): make it the TTL, so a
    # dead holder frees the lock as fast as on the other backends.
    session = max(0.5, ttl)
    request = max(0.2, min(5.0, ttl / 3))
    return f"session_timeout={session:g}&request_timeout={request:g}&connect_timeout=5"


def _zookeeper_version() -> str:
    # Debian's jar is named after no version; its manifest and the package know it
    return program_version(["dpkg-query", "-W", "-f=${Version}", "zookeeper"], r"^(\S+)")


def _missing_zookeeper() -> str | None:
    missing = missing_module("kazoo", install_command("zookeeper")) or missing_module(
        "mirakuru", install_command("testing")
    )
    if missing is not None:
        return missing
    try:
        from .server import java_binary, zookeeper_classpath

        java_binary()
        zookeeper_classpath()
    except ImportError as error:
        return f"the ZooKeeper launcher is missing: {error}"
    except Exception as error:  # the launcher's own "not installed" error
        return str(error)
    return None


def _start_zookeeper(directory: Path, settings: Settings) -> Deployment:
    from .server import ZooKeeperServer

    server = ZooKeeperServer(directory / "zookeeper")
    started(server.start)
    proxy = None
    if not network_faults_missing():
        proxy = ProxyControl.start(server.host, server.port)
    options = _zookeeper_options(settings.ttl)
    return OneServerDeployment(
        server,
        proxy,
        server.connect_string,
        lambda address: f"zookeeper://{address}/torture?{options}",
        lambda: {"zookeeper": _zookeeper_version()},
    )


class _ZooKeeperEnsembleDeployment(QuorumDeployment):
    def __init__(self, ensemble: Any, ttl: float) -> None:
        self._options = _zookeeper_options(ttl)
        url = self._url_at(ensemble.connect_string)
        super().__init__(url, url)
        self.ensemble = ensemble
        self.nodes = len(ensemble.members)

    def _url_at(self, hosts: str) -> str:
        return f"zookeeper://{hosts}/torture?{self._options}"

    def url_without(self, index: int) -> str:
        members = self.ensemble.members
        return self._url_at(
            ",".join(h for i, m in enumerate(members) if i != index for h in m.hosts)
        )

    def url_through(self, ports: list[int]) -> str:
        return self._url_at(",".join(f"127.0.0.1:{port}" for port in ports))

    def kill_all(self) -> None:
        self.ensemble.kill()

    def restart_all(self) -> None:
        self.ensemble.start()

    def kill_node(self, index: int) -> None:
        self.ensemble.kill(index)

    def restart_node(self, index: int) -> None:
        self.ensemble.restart(index)

    def pause_node(self, index: int) -> None:
        self.ensemble.pause(index)

    def resume_node(self, index: int) -> None:
        self.ensemble.resume(index)

    def leader(self) -> int | None:
        leader: int | None = self.ensemble.leader()
        return leader

    def account(self) -> str:
        from .server import four_letter_word

        def mode(port: int) -> str:
            started = time.monotonic()
            try:
                answer = four_letter_word("127.0.0.1", port, "srvr", timeout=2.0)
            except OSError as error:
                return f"no answer ({error or type(error).__name__})"
            took = time.monotonic() - started
            found = [line for line in answer.splitlines() if line.startswith("Mode:")]
            return f"{found[0] if found else answer.strip()[:60]!r} in {took:.2f} s"

        def session(port: int) -> str:
            # srvr is answered by the connection's own thread; a session is a transaction
            # that a quorum commits, which is what the workers wait for
            from kazoo.client import KazooClient

            client = KazooClient(hosts=f"127.0.0.1:{port}", timeout=10.0)
            started = time.monotonic()
            try:
                client.start(timeout=2.0)
            except Exception as error:
                return f"no session in {time.monotonic() - started:.2f} s ({error})"
            else:
                return f"a session in {time.monotonic() - started:.2f} s"
            finally:
                client.stop()
                client.close()

        parts = []
        for index, member in enumerate(self.ensemble.members):
            port = int(member.port)
            part = f"node {index}: {mode(port)}, {session(port)}"
            if index < len(self.member_proxies):
                proxy = self.member_proxies[index]
                stats = proxy.stats()
                part += (
                    f", through its proxy {mode(proxy.port)}, {session(proxy.port)} "
                    f"({stats.accepted} accepted, "
                    f"{stats.open} open, {stats.upstream_failed} could not reach it)"
                )
            parts.append(part)
        return "; ".join(parts)

    def wait_serving(self, timeout: float) -> str | None:
        """A leader with a quorum by the members' own word (``srvr``), then a new session
        made: a transaction the quorum commits, which is what the workers wait for. The two
        differ: ZooKeeper 3.8.0's leader that resumes while its followers elect may take
        them back and then commit nothing until the next election (ZOOKEEPER-4785, fixed in
        3.8.5 and 3.9.2), every member still saying it leads or follows."""
        from kazoo.client import KazooClient

        from .server import ZooKeeperServerError

        deadline = time.monotonic() + timeout
        try:
            self.ensemble.wait_for_quorum(timeout)
        except ZooKeeperServerError as error:
            return str(error)
        last = "no session tried"
        while (left := deadline - time.monotonic()) > 0:
            client = KazooClient(hosts=self.ensemble.connect_string, timeout=10.0)
            try:
                client.start(timeout=min(left, SESSION_PROBE))
            except Exception as error:
                last = f"{type(error).__name__}: {error}"
            else:
                return None
            finally:
                client.stop()
                client.close()
        return (
            f"a leader and a quorum by their own word, but no session made in {timeout:g} s "
            f"({last})"
        )

    def node_ports(self) -> list[int]:
        return [int(member.port) for member in self.ensemble.members]

    def versions(self) -> dict[str, str]:
        return {"zookeeper": _zookeeper_version()}

    def close(self) -> None:
        super().close()
        self.ensemble.close()


def _start_zookeeper_ensemble(directory: Path, settings: Settings) -> Deployment:
    from .server import ZooKeeperEnsemble

    ensemble = ZooKeeperEnsemble(directory / "ensemble")
    started(ensemble.start)
    deployment = _ZooKeeperEnsembleDeployment(ensemble, settings.ttl)
    try:
        deployment.start_member_proxies()
    except BaseException:
        deployment.close()
        raise
    return deployment


# -- the specs -------------------------------------------------------------------------

DEPLOYMENTS = (
    BackendSpec(
        name="zookeeper",
        summary="one ZooKeeper server",
        scheme="zookeeper",
        faults=(*WORKER_FAULTS, "restart", *NETWORK_FAULT_KINDS),
        default_faults=(*WORKER_FAULTS, "restart", *NETWORK_FAULT_KINDS),
        not_promised={},
        promise="exclusion and increasing tokens (czxid) across crashes and restarts; a "
        "dead holder's session expires",
        recovery_grace=5.0,
        start=_start_zookeeper,
        missing=_missing_zookeeper,
        # a blip well within a lease: no acquire fails, no hold is lost
        available={"net-blip": ("acquire", "hold")},
    ),
    BackendSpec(
        name="zookeeper-ensemble",
        summary="ZooKeeper ensemble of 3",
        scheme="zookeeper",
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
        "including the leader; with a follower lost no acquire fails and no hold is lost, "
        "with a member hung or cut off from the clients, or the leader lost, no acquire fails "
        "(a hold whose session cannot move within its lease is lost, visibly)",
        recovery_grace=8.0,
        start=_start_zookeeper_ensemble,
        missing=_missing_zookeeper,
        # A member that hangs, or that the network cuts off from its clients, is noticed by
        # the client only when a read runs out (2/3 of the session timeout), leaving a third
        # of it to move the session: at the harness's leases a hold may then run out,
        # visibly; waiters keep waiting.
        available={
            "minority": ("acquire", "hold"),
            "minority-pause": ("acquire",),
            "member-blackhole": ("acquire",),
            "leader": ("acquire",),
            "leader-pause": ("acquire",),
        },
    ),
)
