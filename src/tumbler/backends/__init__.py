"""Backends, found by URL scheme.

``tumbler.connect(url)`` looks the URL's scheme up here: the built-in backends below, then
those registered with ``register_backend``, then third-party packages that declare an entry
point in the group ``tumbler.backends`` (``scheme = "package.module"``). A backend module
provides ``open_sync(url, **options)`` and ``open_async(url, **options)`` returning objects
that satisfy ``tumbler.backends.contract.Backend`` and ``AsyncBackend``.
"""

from __future__ import annotations

import importlib
import os
from importlib.metadata import entry_points
from types import ModuleType

from .._url import BackendURL, parse_url
from ..errors import MissingDependency, UnknownScheme

#: the environment variable ``connect()`` reads when given no URL
URL_VARIABLE = "TUMBLER_URL"
#: the URL used when neither an argument nor TUMBLER_URL gives one
DEFAULT_URL = "sqlite://"

# scheme -> (module, the extra that installs its driver, or None)
_registry: dict[str, tuple[str, str | None]] = {
    "sqlite": ("tumbler.backends.sqlite", None),
    "memory": ("tumbler.backends.memory", None),
    "redis": ("tumbler.backends.redis", "redis"),
    "rediss": ("tumbler.backends.redis", "redis"),
    "redis+unix": ("tumbler.backends.redis", "redis"),
    "zookeeper": ("tumbler.backends.zookeeper", "zookeeper"),
    "zookeepers": ("tumbler.backends.zookeeper", "zookeeper"),
}


def register_backend(scheme: str, module: str, extra: str | None = None) -> None:
    """Make ``scheme://`` URLs open with ``module`` (whose driver ``extra`` installs)."""
    _registry[scheme.lower()] = (module, extra)


def _entry_point_backends() -> dict[str, tuple[str, str | None]]:
    found: dict[str, tuple[str, str | None]] = {}
    for point in entry_points(group="tumbler.backends"):
        found[point.name.lower()] = (point.value, None)
    return found


def known_schemes() -> list[str]:
    return sorted({*_registry, *_entry_point_backends()})


def resolve_url(url: str | None) -> BackendURL:
    """The URL to use: the argument, else $TUMBLER_URL, else the default SQLite file."""
    if url is None:
        url = os.environ.get(URL_VARIABLE) or DEFAULT_URL
    return parse_url(url)


def load_backend(url: BackendURL) -> ModuleType:
    """Import the module that handles ``url``'s scheme."""
    entry = _registry.get(url.scheme) or _entry_point_backends().get(url.scheme)
    if entry is None:
        raise UnknownScheme(url.scheme, known_schemes())
    module_name, extra = entry
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = (error.name or "").partition(".")[0]
        if extra is None or missing in ("", "tumbler") or module_name.startswith(missing + "."):
            raise  # not an optional driver: a broken installation, to be seen as it is
        raise MissingDependency(url.scheme, extra, missing) from error
