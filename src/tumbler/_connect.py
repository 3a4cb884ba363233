"""Opening a backend by URL: the one path ``tumbler.connect`` and ``tumbler.aio.connect`` share."""

from __future__ import annotations

import inspect

from ._url import BackendURL
from .backends import load_backend, resolve_url
from .backends.descriptor import BackendOpener
from .errors import InvalidArgument


def backend_module(url: str | None, options: dict[str, object]) -> tuple[BackendOpener, BackendURL]:
    """The backend module for ``url`` and the parsed URL; refuses options it does not take."""
    parsed = resolve_url(url)
    module = load_backend(parsed)
    try:
        inspect.signature(module.open_sync).bind(parsed, **options)
    except TypeError:
        accepted = [
            name
            for name, parameter in inspect.signature(module.open_sync).parameters.items()
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY
        ]
        raise InvalidArgument(
            f"{parsed.scheme}:// does not take the option(s) {', '.join(sorted(options))}; "
            f"it takes: {', '.join(accepted) or 'none'}",
            backend=parsed.redacted,
        ) from None
    return module, parsed
