"""Opening a backend by URL or from a configured client: the one path ``tumbler.connect`` and
``tumbler.aio.connect`` share."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any, cast

from ._url import BackendURL
from .backends import descriptor_for_client, load_backend, resolve_url
from .backends.descriptor import BackendOpener, ClientOpener
from .errors import BrokenBackend, InvalidArgument


def backend_module(url: str | None, options: dict[str, object]) -> tuple[BackendOpener, BackendURL]:
    """The backend module for ``url`` and the parsed URL; refuses options it does not take."""
    parsed = resolve_url(url)
    module = load_backend(parsed)
    _check_options(module.open_sync, parsed, options, f"{parsed.scheme}://", parsed.redacted)
    return module, parsed


def client_module(client: object, options: dict[str, object]) -> ClientOpener:
    """The opener of the backend that takes the configured ``client`` in place of a URL;
    refuses options its signature does not take. The client's driver is imported already:
    the caller made the client with it."""
    descriptor = descriptor_for_client(client)
    module = importlib.import_module(descriptor.opener)
    if not hasattr(module, "open_client_sync") or not hasattr(module, "open_client_async"):
        raise BrokenBackend(
            f"the {descriptor.name} backend declares clients it takes, but its opener "
            f"({descriptor.opener}) has no open_client_sync and open_client_async"
        )
    opener = cast(ClientOpener, module)
    _check_options(opener.open_client_sync, client, options, f"a {descriptor.name} client", None)
    return opener


def _check_options(
    opener: Callable[..., Any],
    target: object,
    options: dict[str, object],
    what: str,
    backend: str | None,
) -> None:
    try:
        inspect.signature(opener).bind(target, **options)
    except TypeError:
        accepted = [
            name
            for name, parameter in inspect.signature(opener).parameters.items()
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY
        ]
        raise InvalidArgument(
            f"{what} does not take the option(s) {', '.join(sorted(options))}; "
            f"it takes: {', '.join(accepted) or 'none'}",
            backend=backend,
        ) from None
