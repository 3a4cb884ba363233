"""The deployments the harness can torture: one :class:`BackendSpec` each, declared by the
backends' harnesses (``BackendHarness.torture``), gathered by :func:`deployments`.

A spec says how to start throwaway servers for the backend (with the launchers of its
harness package, ``tumbler.testing.backends.<name>``), which URL the workers use, which
faults apply, which it runs by default, and which properties it does *not* promise under
which fault (with the reason), so that an expected violation is reported as "not promised"
rather than hidden or counted as a failure. A
backend joins by declaring its specs in its harness package; nothing here names a backend.

A :class:`Deployment` is the running servers of one entry: the workers' URL (through a
:class:`~tumbler.torture.faults.ProxyControl` per server where network faults apply), the
harness's own direct URL, and the handles the server faults need (kill and restart
everything, one node, the leader; pause and resume one node). A cluster's members may each
have a proxy of their own (:attr:`Deployment.member_proxies`), for ``member-blackhole``.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .._url import parse_url
from ..backends import known_schemes
from ..errors import TumblerError
from .faults import (
    MEMBER_FAULTS,
    MINORITY_FAULTS,
    PROXY_FAULTS,
    ProxyControl,
    network_faults_missing,
)

__all__ = [
    "WORKER_FAULTS",
    "NETWORK_FAULT_KINDS",
    "BackendSpec",
    "Deployment",
    "OneServerDeployment",
    "QuorumDeployment",
    "Settings",
    "SetupError",
    "default_deployment",
    "deployments",
    "missing_module",
    "program_version",
    "spec_for_url",
    "started",
    "with_netloc",
]

#: how long a dead waiter may hold a line up: at most a second (SQLite's and Redis's bound),
#: and half a second for a busy 2-core machine to run the next waiter
DEAD_WAITER_BOUND = 1.5
#: faults on the clients: every deployment survives them
WORKER_FAULTS = ("kill", "pause", "kill-waiter")
#: faults on the network between the workers and a server (through the fault proxy)
NETWORK_FAULT_KINDS = ("net-delay", "net-cut", "net-drop", "net-blip", "net-reset", "net-isolate")


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
        #: whether every node keeps its own copy of each grant (Redlock's masters), so that a
        #: fault on any of them reaches the hold there is; a minority fault then takes out up
        #: to a minority of the nodes at once
        self.holds_on_every_node = False
        #: a proxy in front of each node (index = node), for ``member-blackhole``: the workers
        #: of its rounds reach every node through its own (:meth:`workers_url`)
        self.member_proxies: list[ProxyControl] = []

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

    def pause_node(self, index: int) -> None:
        """SIGSTOP node ``index``: it keeps its connections and answers nothing."""
        raise SetupError("this deployment has no nodes the harness can pause")

    def resume_node(self, index: int) -> None:
        """SIGCONT node ``index`` after :meth:`pause_node`."""
        raise SetupError("this deployment has no nodes the harness can pause")

    def leader(self) -> int | None:
        """The node that leads now, for backends with one."""
        return None

    def account(self) -> str:
        """What the servers say of themselves now, for a round that could not start: on a
        cluster, each member asked directly and through its own proxy (empty if there is
        nothing more to say than the error)."""
        return ""

    def wait_serving(self, timeout: float) -> str | None:
        """Wait until the servers serve clients again after a fault of theirs: on a cluster
        that elects, until a leader has a quorum. None once they do; past ``timeout`` seconds,
        what the servers were doing. A single server serves once its restart has returned:
        nothing to wait for."""
        return None

    def node_of(self, lock: str) -> int | None:
        """The node that stores ``lock``'s grants now, for backends that shard (else None)."""
        return None

    def node_ports(self) -> list[int]:
        """Each node's client port (index = node), for :meth:`node_serving`."""
        return []

    def node_serving(self, pid: int) -> int | None:
        """The node process ``pid`` (a worker) is connected to, directly or through the node's
        own proxy, if it is connected to one."""
        direct = self.node_ports()
        through = [proxy.port for proxy in self.member_proxies]
        if not direct and not through:
            return None
        try:
            # psutil comes with mirakuru, which starts the servers (it has no type hints)
            psutil: Any = importlib.import_module("psutil")
            connections = psutil.Process(pid).net_connections(kind="tcp")
        except Exception:  # no psutil, or the process is gone: nothing to aim at
            return None
        for connection in connections:
            if not connection.raddr:
                continue
            for ports in (direct, through):
                if connection.raddr.port in ports:
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
        for proxy in {id(proxy): proxy for proxy in self.proxies + self.member_proxies}.values():
            proxy.close()


class QuorumDeployment(Deployment):
    """A cluster that serves while a majority of its members does (a ZooKeeper ensemble, an
    etcd cluster), whose clients each talk to one member, picked at random, and fail over to
    another when it goes: a subclass says how to name every member but one
    (:meth:`url_without`)."""

    def url_without(self, index: int) -> str:
        """The workers' URL with every member but member ``index``."""
        raise NotImplementedError

    def url_through(self, ports: list[int]) -> str:
        """The workers' URL naming ``127.0.0.1:PORT`` for each of ``ports`` (the members'
        proxies) instead of the members."""
        raise NotImplementedError

    def start_member_proxies(self) -> None:
        """A proxy in front of each member, for ``member-blackhole`` (none where the proxy
        is not installed)."""
        if network_faults_missing():
            return
        for port in self.node_ports():
            self.member_proxies.append(ProxyControl.start("127.0.0.1", port))

    def workers_url(self, kinds: Collection[str]) -> str:
        """The followers only, in a round of ``minority`` or ``minority-pause`` faults (with
        ``kill`` or ``pause`` at most): that fault takes out the follower a holder's client is
        on, and a client picks a
        member at random, so with the leader in the URL every worker can sit on the leader
        (one round in 81 with 4 workers; one worker in three on average, more after each
        fault, as clients of the killed follower fail over), out of the fault's reach. The
        leader stays the leader in such a round (a majority remains), so the workers stay on
        followers, failing over to the other one. Faults that can move the leadership get
        every member. A round with ``member-blackhole`` names every member's proxy."""
        if MEMBER_FAULTS.intersection(kinds) and self.member_proxies:
            return self.url_through([proxy.port for proxy in self.member_proxies])
        spared = {*MINORITY_FAULTS, "kill", "pause"}
        if not MINORITY_FAULTS.intersection(kinds) or not set(kinds) <= spared:
            return self.url
        leader = self.leader()
        if leader is None:
            return self.url  # an election is under way: which members follow is not known
        return self.url_without(leader)


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
    #: fault -> what the backend's docs promise users keep through it (``acquire``: no
    #: acquire fails with ``BackendUnavailable``; ``hold``: no hold is lost), checked as
    #: ``unavailable``
    available: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: seconds a waiter killed in its line may hold the next grant up after a release
    dead_waiter_bound: float = DEAD_WAITER_BOUND

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
            elif proxy_missing and PROXY_FAULTS.intersection(kinds):
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


# -- for the backends' own specs ---------------------------------------------------------


def program_version(command: list[str], pattern: str) -> str:
    try:
        output = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    match = re.search(pattern, output.stdout + output.stderr)
    return match.group(1) if match else "unknown"


def missing_module(module: str, install: str) -> str | None:
    """Why ``module`` cannot be imported here (with how to ``install`` it), or None."""
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed ({install})"
    return None


def started(start: Callable[[], Any]) -> Any:
    """Run a launcher's start, turning its errors into :class:`SetupError`."""
    try:
        return start()
    except (OSError, RuntimeError) as error:  # the launchers' ServerError is a RuntimeError
        raise SetupError(str(error)) from error


class OneServerDeployment(Deployment):
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


# -- every backend's ----------------------------------------------------------------------

_deployments: dict[str, BackendSpec] | None = None


def deployments() -> dict[str, BackendSpec]:
    """Every deployment the built-in backends' harnesses declare, by name, in the backends'
    name order."""
    global _deployments
    if _deployments is None:
        from ..testing.harness import builtin_harnesses

        found: dict[str, BackendSpec] = {}
        for harness in builtin_harnesses():
            for spec in harness.torture():
                if not isinstance(spec, BackendSpec) or spec.name in found:
                    raise TypeError(f"{harness.name}: bad or repeated torture spec {spec!r}")
                found[spec.name] = spec
        _deployments = found
    return _deployments


def default_deployment() -> str:
    """The first deployment of the backend that the default URL opens."""
    from ..backends import DEFAULT_URL, descriptor_for
    from ..testing.harness import harness_for

    harness = harness_for(descriptor_for(parse_url(DEFAULT_URL).scheme))
    specs = harness.torture() if harness is not None else ()
    if not specs:
        raise SetupError("the default backend declares no deployment")
    return str(specs[0].name)


# -- an existing server, given by URL ------------------------------------------------------


def _proxied(url: str) -> tuple[str, int] | None:
    """(host, port) when ``url`` names one TCP server a proxy can stand in front of."""
    from ..backends import descriptor_for

    try:
        parsed = parse_url(url)
        single_server = descriptor_for(parsed.scheme).single_server
        return single_server(parsed) if single_server else None
    except TumblerError:
        return None  # connecting reports what is wrong with the URL


def with_netloc(url: str, host: str, port: int) -> str:
    """``url`` with its host and port replaced (credentials, path and options kept)."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{host}:{port}" if userinfo else f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def spec_for_url(url: str) -> BackendSpec:
    """An ad-hoc entry for an existing server: only faults on the clients and, for a single
    Redis or ZooKeeper server, network faults through a proxy the harness puts in front."""
    scheme = urlsplit(url).scheme.lower() or "unknown"
    target = _proxied(url)
    faults = WORKER_FAULTS + (NETWORK_FAULT_KINDS if target else ())

    def start(directory: Path, settings: Settings) -> Deployment:
        if target is None or network_faults_missing():
            return Deployment(url, url)
        host, port = target
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
