"""The backends the harness can torture: one :class:`BackendSpec` per entry of :data:`BACKENDS`.

An entry says how to start throwaway servers for the backend (with the launchers of
:mod:`tumbler.testing.servers`), which URL the workers use, which faults apply, which it runs
by default, and which properties it does *not* promise under which fault (with the reason),
so that an expected violation is reported as "not promised" rather than hidden or counted
as a failure. Adding a backend is adding an entry.

A :class:`Deployment` is the running servers of one entry: the workers' URL (through a
:class:`~tumbler.torture.faults.ProxyControl` per server where network faults apply), the
harness's own direct URL, and the handles the server faults need (kill and restart
everything, one node, the leader).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import shutil
import subprocess
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..backends import known_schemes
from .check import BELIEF_KINDS
from .faults import NETWORK_FAULTS, ProxyControl, network_faults_missing

__all__ = [
    "BACKENDS",
    "BackendSpec",
    "Deployment",
    "SetupError",
    "spec_for_url",
    "with_netloc",
]


class SetupError(Exception):
    """A backend's servers cannot be started here (not installed, failed to start)."""


@dataclass(frozen=True)
class Settings:
    """What a deployment needs to know of the run: the lease, to size client timeouts."""

    ttl: float


class Deployment:
    """Running servers for one backend entry (or an existing server given by URL)."""

    def __init__(self, url: str, admin_url: str, proxies: list[ProxyControl] | None = None):
        #: what the workers connect to (through the proxies, if any)
        self.url = url
        #: the harness's own connection: direct, never faulted
        self.admin_url = admin_url
        self.proxies: list[ProxyControl] = proxies or []
        #: servers that can be killed one at a time (cluster nodes, ensemble members)
        self.nodes = 0

    def kill_all(self) -> None:
        """SIGKILL every server."""
        raise SetupError("this deployment has no servers the harness can kill")

    def restart_all(self) -> None:
        """Start every killed server again and wait until it serves."""
        raise SetupError("this deployment has no servers the harness can restart")

    def kill_node(self, index: int) -> None:
        raise SetupError("this deployment has no nodes")

    def restart_node(self, index: int) -> None:
        raise SetupError("this deployment has no nodes")

    def leader(self) -> int | None:
        """The node that leads now, for backends with one."""
        return None

    def node_of(self, lock: str) -> int | None:
        """The node that stores ``lock``'s grants now, for backends that shard (else None)."""
        return None

    def node_ports(self) -> list[int]:
        """Each node's client port (index = node), for :meth:`node_serving`."""
        return []

    def node_serving(self, pid: int) -> int | None:
        """The node process ``pid`` (a worker) is connected to, if it is connected to one."""
        ports = self.node_ports()
        if not ports:
            return None
        try:
            # psutil comes with mirakuru, which starts the servers (it has no type hints)
            psutil: Any = importlib.import_module("psutil")
            connections = psutil.Process(pid).net_connections(kind="tcp")
        except Exception:  # no psutil, or the process is gone: nothing to aim at
            return None
        for connection in connections:
            if connection.raddr and connection.raddr.port in ports:
                return ports.index(connection.raddr.port)
        return None

    def workers_url(self, kinds: Collection[str]) -> str:
        """The URL the workers of a round with fault ``kinds`` connect with: :attr:`url`,
        unless where their sessions are decides whether the faults can hit them."""
        return self.url

    def versions(self) -> dict[str, str]:
        """Server software and versions, for the report."""
        return {}

    def isolatable(self) -> tuple[str, int] | None:
        """The address the workers' URL names, when it is the one proxy of the harness's (a
        single server): a proxy of each worker's own can then stand in front of it, for
        ``net-isolate``. None for clusters and ensembles (several addresses in the URL)."""
        if len(self.proxies) == 1:
            return ("127.0.0.1", self.proxies[0].port)
        return None

    def close(self) -> None:
        for proxy in self.proxies:
            proxy.close()


@dataclass(frozen=True)
class BackendSpec:
    """One backend the harness knows: how to run it and what it promises."""

    name: str
    #: one line for the report
    summary: str
    #: the URL scheme whose backend must be installed
    scheme: str
    #: faults that apply to it
    faults: tuple[str, ...]
    #: the faults ``--faults default`` runs
    default_faults: tuple[str, ...]
    #: fault -> {violation kind: why the backend does not promise it under that fault}
    not_promised: Mapping[str, Mapping[str, str]]
    #: what it promises, for the report's promises section
    promise: str
    #: seconds beyond the TTL within which the lock must be granted again after a fault
    recovery_grace: float
    #: starts its servers in a directory: ``start(directory, settings) -> Deployment``
    start: Callable[[Path, Settings], Deployment] = field(repr=False)
    #: why it cannot run here (missing program or module), or None
    missing: Callable[[], str | None] = field(repr=False, default=lambda: None)

    def unavailable(self) -> str | None:
        """Why this backend cannot be tortured here, or None."""
        if self.scheme not in known_schemes():
            return f"the {self.scheme}:// backend is not part of this tumbler"
        return self.missing()

    def applicable(self, faults: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, str]]:
        """The rounds of ``faults`` that apply, and why each other one does not.

        A round is one fault kind, or several joined by ``+`` (injected in turn).
        """
        skipped: dict[str, str] = {}
        chosen: list[str] = []
        proxy_missing = network_faults_missing()
        for fault in faults:
            kinds = fault.split("+")
            foreign = [kind for kind in kinds if kind != "none" and kind not in self.faults]
            if foreign:
                skipped[fault] = f"{', '.join(foreign)} does not apply to {self.name}"
            elif proxy_missing and NETWORK_FAULTS.intersection(kinds):
                skipped[fault] = proxy_missing
            else:
                chosen.append(fault)
        return tuple(chosen), skipped

    def not_promised_under(self, fault: str) -> dict[str, str]:
        """What the backend does not promise in a round of ``fault`` (``a+b``: either's)."""
        kinds: dict[str, str] = {}
        for kind in fault.split("+"):
            kinds.update(self.not_promised.get(kind, {}))
        return kinds


# -- versions ------------------------------------------------------------------------------


def _program_version(command: list[str], pattern: str) -> str:
    try:
        output = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    match = re.search(pattern, output.stdout + output.stderr)
    return match.group(1) if match else "unknown"


def _redis_version() -> str:
    from ..testing.servers.redis import redis_server_binary

    return _program_version([redis_server_binary(), "--version"], r"v=(\S+)")


def _zookeeper_version() -> str:
    # Debian's jar is named after no version; its manifest and the package know it
    version = _program_version(["dpkg-query", "-W", "-f=${Version}", "zookeeper"], r"^(\S+)")
    return version


# -- SQLite --------------------------------------------------------------------------------


class _SQLiteDeployment(Deployment):
    def versions(self) -> dict[str, str]:
        import sqlite3

        return {"sqlite": sqlite3.sqlite_version}


def _start_sqlite(directory: Path, settings: Settings) -> Deployment:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    url = f"sqlite://{directory / 'locks.db'}"
    return _SQLiteDeployment(url, url)


# -- Redis ---------------------------------------------------------------------------------


def _redis_options(ttl: float) -> str:
    # A call must give up well within a lease, so a renewal can be retried before the
    # deadline when a reply is dropped or the server is gone.
    timeout = max(0.2, min(5.0, ttl / 3))
    return f"socket_timeout={timeout:g}&connect_timeout={timeout:g}"


def _missing_redis() -> str | None:
    if importlib.util.find_spec("redis") is None:
        return "redis-py is not installed (pip install 'tumbler[redis]')"
    if importlib.util.find_spec("mirakuru") is None:
        return "mirakuru is not installed (pip install 'tumbler[testing]')"
    if shutil.which("redis-server") is None:
        return "redis-server is not installed"
    return None


class _OneServerDeployment(Deployment):
    """One server the harness started (Redis, ZooKeeper), reached through the proxy if any.

    ``url_at(address)`` is the backend URL for a ``host:port`` address: the workers get the
    proxy's, the harness's own client the server's.
    """

    def __init__(
        self,
        server: Any,
        proxy: ProxyControl | None,
        address: str,
        url_at: Callable[[str], str],
        versions: Callable[[], dict[str, str]],
    ) -> None:
        target = f"127.0.0.1:{proxy.port}" if proxy else address
        super().__init__(url_at(target), url_at(address), [proxy] if proxy else [])
        self.server = server
        self._versions = versions

    def kill_all(self) -> None:
        self.server.kill()

    def restart_all(self) -> None:
        self.server.start()

    def versions(self) -> dict[str, str]:
        return self._versions()

    def close(self) -> None:
        super().close()
        self.server.close()


def _redis_starter(appendonly: bool) -> Callable[[Path, Settings], Deployment]:
    def start(directory: Path, settings: Settings) -> Deployment:
        from ..testing.servers.redis import RedisServer

        extra = ["appendfsync always"] if appendonly else []
        server = RedisServer(directory / "redis", appendonly=appendonly, extra_config=extra)
        _started(server.start)
        proxy = None
        if not network_faults_missing():
            proxy = ProxyControl.start(server.host, server.port)
        options = _redis_options(settings.ttl)
        return _OneServerDeployment(
            server,
            proxy,
            f"{server.host}:{server.port}",
            lambda address: f"redis://{address}/0?{options}",
            lambda: {"redis-server": _redis_version()},
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
        return {"redis-server": _redis_version()}

    def close(self) -> None:
        super().close()
        self.cluster.close()


def _start_redis_cluster(directory: Path, settings: Settings) -> Deployment:
    from ..testing.servers.redis import start_cluster

    cluster = _started(lambda: start_cluster(directory / "cluster"))
    return _RedisClusterDeployment(cluster, settings.ttl)


# -- ZooKeeper -----------------------------------------------------------------------------


def _zookeeper_options(ttl: float) -> str:
    # The session timeout is the lease here (hold.ttl is capped by it): make it the TTL, so a
    # dead holder frees the lock as fast as on the other backends.
    session = max(0.5, ttl)
    request = max(0.2, min(5.0, ttl / 3))
    return f"session_timeout={session:g}&request_timeout={request:g}&connect_timeout=5"


def _missing_zookeeper() -> str | None:
    if importlib.util.find_spec("kazoo") is None:
        return "kazoo is not installed (pip install 'tumbler[zookeeper]')"
    if importlib.util.find_spec("mirakuru") is None:
        return "mirakuru is not installed (pip install 'tumbler[testing]')"
    try:
        from ..testing.servers.zookeeper import java_binary, zookeeper_classpath

        java_binary()
        zookeeper_classpath()
    except ImportError as error:
        return f"the ZooKeeper launcher is missing: {error}"
    except Exception as error:  # the launcher's own "not installed" error
        return str(error)
    return None


def _start_zookeeper(directory: Path, settings: Settings) -> Deployment:
    from ..testing.servers.zookeeper import ZooKeeperServer

    server = ZooKeeperServer(directory / "zookeeper")
    _started(server.start)
    proxy = None
    if not network_faults_missing():
        proxy = ProxyControl.start(server.host, server.port)
    options = _zookeeper_options(settings.ttl)
    return _OneServerDeployment(
        server,
        proxy,
        server.connect_string,
        lambda address: f"zookeeper://{address}/torture?{options}",
        lambda: {"zookeeper": _zookeeper_version()},
    )


class _ZooKeeperEnsembleDeployment(Deployment):
    def __init__(self, ensemble: Any, ttl: float) -> None:
        self._options = _zookeeper_options(ttl)
        url = self._url_at(ensemble.connect_string)
        super().__init__(url, url)
        self.ensemble = ensemble
        self.nodes = len(ensemble.members)

    def _url_at(self, hosts: str) -> str:
        return f"zookeeper://{hosts}/torture?{self._options}"

    def workers_url(self, kinds: Collection[str]) -> str:
        """The followers only, in a round of ``minority`` faults (with ``kill`` or ``pause``
        at most): that fault kills the follower a holder's session is on, and kazoo picks a
        member at random, so with the leader in the URL every worker can sit on the leader
        (one round in 81 with 4 workers; one worker in three on average, more after each
        fault, as clients of the killed follower fail over), out of the fault's reach. The
        leader stays the leader in such a round (a quorum remains), so the workers stay on
        followers, failing over to the other one. Faults that can move the leadership get
        the whole ensemble."""
        if "minority" not in kinds or not set(kinds) <= {"minority", "kill", "pause"}:
            return self.url
        leader = self.leader()
        if leader is None:
            return self.url  # an election is under way: which members follow is not known
        followers = [
            host
            for index, member in enumerate(self.ensemble.members)
            if index != leader
            for host in member.hosts
        ]
        return self._url_at(",".join(followers))

    def kill_all(self) -> None:
        self.ensemble.kill()

    def restart_all(self) -> None:
        self.ensemble.start()

    def kill_node(self, index: int) -> None:
        self.ensemble.kill(index)

    def restart_node(self, index: int) -> None:
        self.ensemble.restart(index)

    def leader(self) -> int | None:
        leader: int | None = self.ensemble.leader()
        return leader

    def node_ports(self) -> list[int]:
        return [int(member.port) for member in self.ensemble.members]

    def versions(self) -> dict[str, str]:
        return {"zookeeper": _zookeeper_version()}

    def close(self) -> None:
        super().close()
        self.ensemble.close()


def _start_zookeeper_ensemble(directory: Path, settings: Settings) -> Deployment:
    from ..testing.servers.zookeeper import ZooKeeperEnsemble

    ensemble = ZooKeeperEnsemble(directory / "ensemble")
    _started(ensemble.start)
    return _ZooKeeperEnsembleDeployment(ensemble, settings.ttl)


def _started(start: Callable[[], Any]) -> Any:
    """Run a launcher's start, turning its errors into :class:`SetupError`."""
    try:
        return start()
    except (OSError, RuntimeError) as error:  # the launchers' ServerError is a RuntimeError
        raise SetupError(str(error)) from error


# -- the table -----------------------------------------------------------------------------

_HOLDER = ("kill", "pause")
_NETWORK = ("net-delay", "net-cut", "net-drop", "net-reset", "net-isolate")

_FORGETS = (
    "restarted without persistence, Redis forgets every grant: a second client is granted the "
    "lock while the first still holds it until its next renewal is refused (fencing tokens "
    "keep increasing, from the server's clock, so the resource still refuses the stale one)"
)

BACKENDS: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec(
            name="sqlite",
            summary="SQLite file (no server)",
            scheme="sqlite",
            faults=_HOLDER,
            default_faults=_HOLDER,
            not_promised={},
            promise="exclusion and increasing tokens between processes of one machine; a "
            "dead holder's lease runs out",
            # waiters poll (up to 50 ms apart), and a busy machine delays them further
            recovery_grace=2.0,
            start=_start_sqlite,
        ),
        BackendSpec(
            name="redis",
            summary="one Redis server, no persistence",
            scheme="redis",
            faults=(*_HOLDER, "restart", *_NETWORK),
            default_faults=(*_HOLDER, "restart", *_NETWORK),
            not_promised={"restart": {kind: _FORGETS for kind in BELIEF_KINDS}},
            promise="exclusion while the server lives; tokens keep increasing across restarts "
            "(server clock); a restart without persistence forgets grants",
            recovery_grace=2.5,
            start=_redis_starter(appendonly=False),
            missing=_missing_redis,
        ),
        BackendSpec(
            name="redis-aof",
            summary="one Redis server, appendonly with appendfsync always",
            scheme="redis",
            faults=(*_HOLDER, "restart"),
            default_faults=("restart",),
            not_promised={},
            promise="exclusion across server crashes: every grant is on disk before it is "
            "acknowledged",
            recovery_grace=2.5,
            start=_redis_starter(appendonly=True),
            missing=_missing_redis,
        ),
        BackendSpec(
            name="redis-cluster",
            summary="Redis Cluster, 3 masters, no replicas, no persistence",
            scheme="redis",
            faults=(*_HOLDER, "minority", "restart"),
            default_faults=(*_HOLDER, "minority"),
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
            missing=_missing_redis,
        ),
        BackendSpec(
            name="zookeeper",
            summary="one ZooKeeper server",
            scheme="zookeeper",
            faults=(*_HOLDER, "restart", *_NETWORK),
            default_faults=(*_HOLDER, "restart", *_NETWORK),
            not_promised={},
            promise="exclusion and increasing tokens (czxid) across crashes and restarts; a "
            "dead holder's session expires",
            recovery_grace=5.0,
            start=_start_zookeeper,
            missing=_missing_zookeeper,
        ),
        BackendSpec(
            name="zookeeper-ensemble",
            summary="ZooKeeper ensemble of 3",
            scheme="zookeeper",
            faults=(*_HOLDER, "minority", "leader", "restart"),
            default_faults=(*_HOLDER, "minority", "leader"),
            not_promised={},
            promise="exclusion while a majority serves, through the loss of any minority "
            "including the leader",
            recovery_grace=8.0,
            start=_start_zookeeper_ensemble,
            missing=_missing_zookeeper,
        ),
    )
}


# -- an existing server, given by URL ------------------------------------------------------


def _proxied(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) when ``url`` names one TCP server a proxy can stand in front of."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "zookeeper") or "," in parts.netloc:
        return None
    if "cluster=true" in parts.query:
        return None
    host = parts.hostname
    try:
        port = parts.port
    except ValueError:
        return None
    if host is None:
        return None
    return parts.scheme, host, port or (6379 if parts.scheme == "redis" else 2181)


def with_netloc(url: str, host: str, port: int) -> str:
    """``url`` with its host and port replaced (credentials, path and options kept)."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{host}:{port}" if userinfo else f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def spec_for_url(url: str) -> BackendSpec:
    """An ad-hoc entry for an existing server: only faults on the clients and, for a single
    Redis or ZooKeeper server, network faults through a proxy the harness puts in front."""
    scheme = urlsplit(url).scheme.lower() or "sqlite"
    target = _proxied(url)
    faults = _HOLDER + (_NETWORK if target else ())

    def start(directory: Path, settings: Settings) -> Deployment:
        if target is None or network_faults_missing():
            return Deployment(url, url)
        _, host, port = target
        proxy = ProxyControl.start(host, port)
        return Deployment(with_netloc(url, "127.0.0.1", proxy.port), url, [proxy])

    return BackendSpec(
        name=f"url-{scheme}",
        summary="an existing server (no server faults)",
        scheme=scheme,
        faults=faults,
        default_faults=faults,
        not_promised={},
        promise="whatever its backend promises",
        recovery_grace=5.0,
        start=start,
    )
