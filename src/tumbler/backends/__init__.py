"""Backends, found by URL scheme.

``tumbler.connect(url)`` looks the URL's scheme up among the descriptors
(:class:`~tumbler.backends.descriptor.BackendDescriptor`): those registered at run time with
:func:`register`, then the built-in backends (each subpackage of this package with a
``DESCRIPTOR``), then, only for a scheme none of those opens, third-party packages that
declare an entry point in the group ``tumbler.backends`` (``scheme = "package:DESCRIPTOR"``;
``"package.module"``, a module with ``open_sync`` and ``open_async``, is accepted too). Only
the entry point named for the scheme asked for is loaded: another package's broken backend
cannot break a scheme it does not name.
"""

from __future__ import annotations

import importlib
import os
from typing import cast

from .._url import BackendURL, parse_url
from ..errors import BrokenBackend, InvalidArgument, MissingDependency, UnknownScheme
from .contract import Capabilities
from .descriptor import BackendDescriptor, BackendOpener

__all__ = [
    "DEFAULT_URL",
    "URL_VARIABLE",
    "BackendDescriptor",
    "builtin_descriptors",
    "descriptor_for",
    "descriptor_for_client",
    "known_schemes",
    "load_backend",
    "prepare",
    "register",
    "register_backend",
    "resolve_url",
]

#: the environment variable ``connect()`` reads when given no URL
URL_VARIABLE = "TUMBLER_URL"
#: the URL used when neither an argument nor TUMBLER_URL gives one
DEFAULT_URL = "sqlite://"
#: the entry point group third-party backends register in
ENTRY_POINT_GROUP = "tumbler.backends"

_registered: dict[str, BackendDescriptor] = {}
_builtin: dict[str, BackendDescriptor] | None = None
#: the entry points' descriptors loaded so far, by scheme
_entry_points: dict[str, BackendDescriptor] = {}


def register(descriptor: BackendDescriptor) -> None:
    """Make each of ``descriptor.schemes`` open with its backend (ahead of the built-ins)."""
    for scheme in descriptor.schemes:
        _registered[scheme] = descriptor


def register_backend(scheme: str, module: str, extra: str | None = None) -> None:
    """Make ``scheme://`` URLs open with ``module`` (whose driver ``extra`` installs): a
    backend with no descriptor of its own, which then declares no capabilities."""
    register(_bare_descriptor(scheme.lower(), module, extra))


def builtin_descriptors() -> list[BackendDescriptor]:
    """The descriptors of the backends that come with tumbler, in name order."""
    return sorted({id(d): d for d in _builtins().values()}.values(), key=lambda d: d.name)


def _builtins() -> dict[str, BackendDescriptor]:
    global _builtin
    if _builtin is None:
        import pkgutil

        found: dict[str, BackendDescriptor] = {}
        for module in pkgutil.iter_modules(__path__):
            if not module.ispkg or module.name.startswith("_"):
                continue
            package = importlib.import_module(f"{__name__}.{module.name}")
            descriptor = getattr(package, "DESCRIPTOR", None)
            if isinstance(descriptor, BackendDescriptor):
                for scheme in descriptor.schemes:
                    found[scheme] = descriptor
        _builtin = found
    return _builtin


def _third_party(scheme: str) -> BackendDescriptor | None:
    """The backend an installed package registers for ``scheme`` by entry point, if any.

    Read only when a scheme is not otherwise known, since scanning the installed distributions
    costs more than the rest of ``connect``. Raises :class:`~tumbler.errors.BrokenBackend` if
    that entry point does not load, or is not a backend.
    """
    descriptor = _entry_points.get(scheme)
    if descriptor is not None:
        return descriptor
    from importlib.metadata import entry_points

    point = next(
        (p for p in entry_points(group=ENTRY_POINT_GROUP) if p.name.lower() == scheme), None
    )
    if point is None:
        return None
    if ":" not in point.value:
        descriptor = _bare_descriptor(scheme, point.value, None)
    else:
        try:
            loaded = point.load()
        except Exception as error:
            raise BrokenBackend(
                _broken(scheme, point.value, f"{type(error).__name__}: {error}")
            ) from error
        if not isinstance(loaded, BackendDescriptor):
            raise BrokenBackend(_broken(scheme, point.value, f"it is a {type(loaded).__name__}"))
        descriptor = loaded
    _entry_points[scheme] = descriptor
    return descriptor


def _broken(scheme: str, target: str, why: str) -> str:
    return (
        f"the {scheme}:// backend registered by an installed package ({target}) cannot be "
        f"loaded: {why}"
    )


def _third_party_schemes() -> set[str]:
    """The schemes installed packages register (named by their entry points, none loaded)."""
    from importlib.metadata import entry_points

    return {point.name.lower() for point in entry_points(group=ENTRY_POINT_GROUP)}


def _bare_descriptor(scheme: str, module: str, extra: str | None) -> BackendDescriptor:
    # it declares nothing, so it is taken to promise the least
    nothing = Capabilities(push_wakeups=False, durable_fencing=False, server_clock=False)
    return BackendDescriptor(
        name=scheme, schemes=(scheme,), opener=module, capabilities=nothing, extra=extra
    )


def _builtin_named(scheme: str) -> BackendDescriptor | None:
    """The built-in backend in the subpackage named ``scheme``, if there is one and it opens
    ``scheme://``: a URL of a backend's first scheme (``sqlite://``, ``redis://``) is opened
    without importing every other backend's package to read its descriptor."""
    if _builtin is not None or not scheme.isidentifier() or scheme.startswith("_"):
        return None
    package = f"{__name__}.{scheme}"
    try:
        module = importlib.import_module(package)
    except ModuleNotFoundError as error:
        if error.name != package:
            raise  # the package is there and broken: seen as it is, as by the scan
        return None
    descriptor = getattr(module, "DESCRIPTOR", None)
    if isinstance(descriptor, BackendDescriptor) and scheme in descriptor.schemes:
        return descriptor
    return None


def descriptor_for(scheme: str) -> BackendDescriptor:
    """The descriptor of the backend that opens ``scheme://``; UnknownScheme if none does."""
    scheme = scheme.lower()
    descriptor = _registered.get(scheme) or _builtin_named(scheme) or _builtins().get(scheme)
    if descriptor is None:
        descriptor = _third_party(scheme)
    if descriptor is None:
        raise UnknownScheme(scheme, known_schemes())
    return descriptor


def descriptor_for_client(client: object) -> BackendDescriptor:
    """The descriptor of the backend that takes ``client`` (a configured driver client) in
    place of a URL (``BackendDescriptor.clients``: registered backends first, then the
    built-ins); InvalidArgument, naming every class some backend takes, if none does."""
    names = {f"{klass.__module__}.{klass.__qualname__}" for klass in type(client).__mro__}
    descriptors = [*_registered.values(), *builtin_descriptors()]
    for descriptor in descriptors:
        if names.intersection(descriptor.clients):
            return descriptor
    taken = sorted({name for descriptor in descriptors for name in descriptor.clients})
    raise InvalidArgument(
        f"connect takes a URL (a str) or a configured client of one of: {', '.join(taken)}; "
        f"not a {type(client).__module__}.{type(client).__qualname__}"
    )


def known_schemes() -> list[str]:
    """Every scheme some backend opens: registered, built-in and by entry point."""
    return sorted({*_registered, *_builtins(), *_third_party_schemes()})


def resolve_url(url: str | None) -> BackendURL:
    """The URL to use: the argument, else $TUMBLER_URL, else the default SQLite file."""
    if url is None:
        url = os.environ.get(URL_VARIABLE) or DEFAULT_URL
    return parse_url(url)


def prepare(url: str | None) -> tuple[BackendDescriptor, str | None]:
    """Make what the backend at ``url`` (default: as ``connect``) needs before first use,
    idempotently (``BackendDescriptor.prepare``): its descriptor, and a line saying what was
    made or found, or None for a backend that needs nothing made. Raises what ``connect``
    raises."""
    parsed = resolve_url(url)
    descriptor = descriptor_for(parsed.scheme)
    load_backend(parsed)  # a missing driver is MissingDependency, as on connect
    if descriptor.prepare is None:
        return descriptor, None
    return descriptor, descriptor.prepare(parsed)


def load_backend(url: BackendURL) -> BackendOpener:
    """Import the module that opens ``url``'s scheme; MissingDependency names the extra
    to install when the backend's driver is missing."""
    descriptor = descriptor_for(url.scheme)
    try:
        module = importlib.import_module(descriptor.opener)
    except ModuleNotFoundError as error:
        missing = (error.name or "").partition(".")[0]
        extra = descriptor.extra
        if (
            extra is None
            or missing in ("", "tumbler")
            or descriptor.opener.startswith(missing + ".")
        ):
            raise  # not an optional driver: a broken installation, to be seen as it is
        raise MissingDependency(url.scheme, extra, missing) from error
    # what each built-in opener provides is checked by mypy in its package (see its
    # ``_opener_types``); a third party's is trusted here and fails on the first call if wrong
    return cast(BackendOpener, module)
