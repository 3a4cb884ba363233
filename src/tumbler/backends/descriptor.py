"""What tumbler knows of one backend, said once, in the backend's own package.

A backend package (``tumbler/backends/<name>/``, or a third party's own package) exposes a
:class:`BackendDescriptor` as ``DESCRIPTOR``. Everything that is not the backend itself reads
it rather than naming the backend: ``tumbler.connect`` (by URL scheme), ``tumbler init``
(``prepare``), the conformance suite (the declared capabilities, ``isolate``), the torture
harness (``single_server``) and the docs' backend table. It describes what runs in
production only: how tests, the bench and the torture harness run the backend is its harness
(:class:`tumbler.testing.harness.BackendHarness`), which names the descriptor; the descriptor
names none of it.

A descriptor module must stay cheap to import: it is read to find a scheme's backend, before
the backend's driver is needed. So it imports no module of its own package: it names them
(a module path for the opener, whose ``open_sync`` and ``open_async`` are what ``connect``
calls; :func:`call_on_demand` for a function of a module that imports the driver), and the
package's modules import the descriptor's constants, never the other way round.

Built-in backends are found by listing the subpackages of ``tumbler.backends``; a third party
registers its descriptor under the entry point group ``tumbler.backends``
(``scheme = "package:DESCRIPTOR"``), or at run time with ``tumbler.backends.register``.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .contract import AsyncBackend, Backend, Capabilities

if TYPE_CHECKING:
    from .._url import BackendURL

__all__ = [
    "BackendDescriptor",
    "BackendOpener",
    "call_on_demand",
    "on_demand",
]


def on_demand(module: str, attribute: str) -> Callable[[], Any]:
    """A callable that imports ``module`` when called and returns its ``attribute``: how a
    descriptor or a harness names what would be costly to import with it (drivers,
    launchers, the torture harness)."""

    def load() -> Any:
        return getattr(importlib.import_module(module), attribute)

    load.__qualname__ = f"on_demand({module}:{attribute})"
    return load


def call_on_demand(module: str, attribute: str) -> Callable[..., Any]:
    """A callable that imports ``module`` when called and calls its ``attribute`` with the
    arguments: how a descriptor gives a function (``prepare``, ``isolate``) that lives in a
    module importing the driver, or importing the descriptor's package back."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), attribute)(*args, **kwargs)

    call.__qualname__ = f"call_on_demand({module}:{attribute})"
    return call


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


def one_of_hosts(
    default_port: int, *, default_host: str | None = "localhost", host_options: Sequence[str] = ()
) -> Callable[[BackendURL], tuple[str, int] | None]:
    """A ``single_server`` for a backend whose URL lists its servers as ``HOST[:PORT],...``
    (``default_host`` without one; None: the driver's own default, which names no server):
    the server, when the URL names just one and none of ``host_options`` (query options that
    name servers too) is given."""

    def single_server(url: BackendURL) -> tuple[str, int] | None:
        host = url.hosts or default_host
        if host is None or "," in host or any(option in url.query for option in host_options):
            return None
        from .kit.options import host_port

        return host_port(host, url, default_port)

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


class ClientOpener(Protocol):
    """What the opener module of a backend that declares ``BackendDescriptor.clients`` also
    has: ``connect`` calls these with the application's client in place of a URL.

    Both take the client and ``connect()``'s keyword arguments (refused with
    InvalidArgument, naming those taken, if ``open_client_sync``'s signature does not take
    them; one that takes ``**options`` refuses what it does not know itself, as the
    built-in ones do). The client stays the caller's: closing the backend does not close it.
    """

    @property
    def open_client_sync(self) -> Callable[..., Backend]: ...

    @property
    def open_client_async(self) -> Callable[..., Awaitable[AsyncBackend]]: ...


@dataclass(frozen=True)
class BackendDescriptor:
    """One backend, described once. Only ``name``, ``schemes``, ``opener`` and
    ``capabilities`` are required.
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
    #: the extra of tumbler's distribution that installs its driver, if any (``redis``: what
    #: ``MissingDependency`` tells to install, ``pip install 'tumbler-locks[redis]'``)
    extra: str | None = None
    #: ``(url, token) -> url``: the same store, with nothing in common with other tokens'
    #: URLs (another file, key prefix, path); lets the suite run against a URL given by hand
    isolate: Callable[[BackendURL, str], str] | None = field(default=None, repr=False)
    #: ``url -> (host, port)`` when the URL names exactly one TCP server, so that the torture
    #: harness can put its fault proxy in front of a server it did not start
    single_server: Callable[[BackendURL], tuple[str, int] | None] | None = field(
        default=None, repr=False
    )
    #: ``url -> text``: make what the store needs before its first use (a schema, tables),
    #: idempotently, and say in a line what was made or found; ``tumbler init URL`` runs it,
    #: as a role that may, for applications whose own role may not. None: nothing to make
    #: (a backend that makes its tables on first use may still have it, for that role). Its
    #: errors are tumbler's, as ``connect``'s are; the opener's module is imported first, so
    #: a missing driver is ``MissingDependency``.
    prepare: Callable[[BackendURL], str] | None = field(default=None, repr=False)
    #: the classes of configured clients ``connect`` takes in place of a URL, by module and
    #: name (``redis.client.Redis``), matched against a client's class and its bases without
    #: importing the driver; the opener then also is a :class:`ClientOpener`
    clients: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.schemes:
            raise ValueError(f"backend {self.name!r} declares no URL scheme")
        for scheme in self.schemes:
            if scheme != scheme.lower():
                raise ValueError(f"backend {self.name!r}: scheme {scheme!r} is not lower case")
