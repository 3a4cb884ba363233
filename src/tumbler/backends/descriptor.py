"""What tumbler knows of one backend, said once, in the backend's own package.

A backend package (``tumbler/backends/<name>/``, or a third party's own package) exposes a
:class:`BackendDescriptor` as ``DESCRIPTOR``. Everything that is not the backend itself reads
it rather than naming the backend: ``tumbler.connect`` (by URL scheme), the conformance suite
(the test targets and the declared capabilities), the torture harness (deployments and the
faults each survives), the bench (contenders for the store), ``scripts/servers`` (the system
packages the servers come from) and the docs' backend table.

A descriptor module must stay cheap to import: it is read to find a scheme's backend, before
the backend's driver is needed. So the parts that import drivers, launchers or the harness are
given as callables that import on demand (a module path for the opener, whose ``open_sync``
and ``open_async`` are what ``connect`` calls).

Built-in backends are found by listing the subpackages of ``tumbler.backends``; a third party
registers its descriptor under the entry point group ``tumbler.backends``
(``scheme = "package:DESCRIPTOR"``), or at run time with ``tumbler.backends.register``.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .contract import AsyncBackend, Backend, Capabilities

if TYPE_CHECKING:
    from .._url import BackendURL
    from ..testing.bench import StoreBench

__all__ = [
    "BackendDescriptor",
    "BackendOpener",
    "RunningTarget",
    "ServedTarget",
    "TestTarget",
    "on_demand",
]


def on_demand(module: str, attribute: str) -> Callable[[], Any]:
    """A callable that imports ``module`` when called and returns its ``attribute``: how a
    descriptor names what would be costly to import with it (launchers, the harness)."""

    def load() -> Any:
        return getattr(importlib.import_module(module), attribute)

    load.__qualname__ = f"on_demand({module}:{attribute})"
    return load


def under_path(default: str) -> Callable[[BackendURL, str], str]:
    """An ``isolate`` for a backend whose URL's path is where everything it makes lives (a
    ZooKeeper base node, an etcd key prefix; ``default`` without one): a token's URL has a
    path of its own below it."""

    def isolate(url: BackendURL, token: str) -> str:
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(url.raw)
        base = parts.path.rstrip("/") or default
        return urlunsplit(parts._replace(path=f"{base}/{token}"))

    return isolate


def one_of_hosts(default_port: int) -> Callable[[BackendURL], tuple[str, int] | None]:
    """A ``single_server`` for a backend whose URL lists its servers as ``HOST[:PORT],...``
    (``localhost`` without one): the server, when the URL names just one."""

    def single_server(url: BackendURL) -> tuple[str, int] | None:
        if "," in url.hosts:
            return None
        from .kit.options import host_port

        return host_port(url.hosts or "localhost", url, default_port)

    return single_server


class BackendOpener(Protocol):
    """The module ``BackendDescriptor.opener`` names: what ``connect`` calls.

    Both take the parsed URL and ``connect()``'s keyword arguments (options the signature of
    ``open_sync`` does not accept are refused before the call, with the accepted ones listed).
    """

    @property
    def open_sync(self) -> Callable[..., Backend]: ...

    @property
    def open_async(self) -> Callable[..., Awaitable[AsyncBackend]]: ...


class RunningTarget(Protocol):
    """A test target's servers, started once and shared by the tests of a session. One whose
    store is served by processes of its own is also a :class:`ServedTarget`."""

    def fresh_url(self) -> str:
        """A URL of this target that no other test uses: a new file, key prefix or path, so
        that tests sharing the servers cannot see each other's locks."""

    def close(self) -> None:
        """Stop the servers and remove their files."""


@runtime_checkable
class ServedTarget(Protocol):
    """A running test target whose store is served by processes of its own (not a file, not
    the test process's memory): what the cases that stall the store stop."""

    def server_pids(self) -> list[int]:
        """Every process that serves the store now (each server of a cluster, each process
        of a server that forks): stopping them all (SIGSTOP) stalls the store."""
        ...


@dataclass(frozen=True)
class TestTarget:
    """One way to run a backend for the conformance suite: a server set-up and its URLs.

    ``start(directory)`` starts what the target needs (nothing, for an embedded store) in
    ``directory``, a fresh temporary directory, and raises ``ServerError`` (from
    ``tumbler.testing.servers``) or ``OSError`` when it cannot. A backend usually has one
    target; variants of the same store (TLS with an ACL user, a cluster, a pooler) are targets
    of their own. A variant whose only difference is the connection (TLS, another user) is a
    ``connection_variant``: it runs the cases that exercise the connection, not the locking
    that its plain target runs already.
    """

    __test__ = False  # a test target, not a pytest test class

    #: the name tests and reports show (``redis-cluster``)
    name: str
    start: Callable[[Path], RunningTarget] = field(repr=False)
    #: whether it differs from another target of the backend only by the connection: then only
    #: the conformance cases marked ``tumbler_connection`` run on it
    connection_variant: bool = False


@dataclass(frozen=True)
class BackendDescriptor:
    """One backend, described once. Only ``name``, ``schemes``, ``opener`` and
    ``capabilities`` are required; a backend without servers to start or peers to compare
    leaves the rest empty.
    """

    #: the backend's name in tables and reports (``redis``)
    name: str
    #: the URL schemes it opens, lower case (``redis``, ``rediss``)
    schemes: tuple[str, ...]
    #: the module with ``open_sync`` and ``open_async`` (a :class:`BackendOpener`)
    opener: str
    #: what it promises; the conformance suite runs the cases these allow
    capabilities: Capabilities
    #: one line for tables (``one Redis server or a Redis Cluster``)
    summary: str = ""
    #: the URL grammar, for the docs
    url_form: str = ""
    #: the package extra that installs its driver (``pip install 'tumbler[redis]'``), if any
    extra: str | None = None
    #: the Debian packages its servers come from (``scripts/servers`` installs them)
    system_packages: tuple[str, ...] = ()
    #: the targets the conformance suite runs on (imports the launchers on demand)
    test_targets: Callable[[], Sequence[TestTarget]] = field(default=lambda: (), repr=False)
    #: ``(url, token) -> url``: the same store, with nothing in common with other tokens'
    #: URLs (another file, key prefix, path); lets the suite run against a URL given by hand
    isolate: Callable[[BackendURL, str], str] | None = field(default=None, repr=False)
    #: the torture harness's deployments of it (``tumbler.torture.backends.BackendSpec``
    #: each: typed loosely, since the contract's side may not import the harness)
    torture: Callable[[], Sequence[Any]] = field(default=lambda: (), repr=False)
    #: ``url -> (host, port)`` when the URL names exactly one TCP server, so that the torture
    #: harness can put its fault proxy in front of a server it did not start
    single_server: Callable[[BackendURL], tuple[str, int] | None] | None = field(
        default=None, repr=False
    )
    #: the bench's view of this store: its peers, request counter, version
    bench: Callable[[], StoreBench] | None = field(default=None, repr=False)
    #: ``url -> text``: make what the store needs before its first use (a schema, tables),
    #: idempotently, and say in a line what was made or found; ``tumbler init URL`` runs it,
    #: as a role that may, for applications whose own role may not. None: nothing to make
    #: (a backend that makes its tables on first use may still have it, for that role). Its
    #: errors are tumbler's, as ``connect``'s are; the opener's module is imported first, so
    #: a missing driver is ``MissingDependency``.
    prepare: Callable[[BackendURL], str] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.schemes:
            raise ValueError(f"backend {self.name!r} declares no URL scheme")
        for scheme in self.schemes:
            if scheme != scheme.lower():
                raise ValueError(f"backend {self.name!r}: scheme {scheme!r} is not lower case")
