"""URL pieces that several backends parse alike: flags, durations, host lists; and the
options ``connect`` takes beside a configured client, parsed as a URL's."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar
from urllib.parse import urlencode

from ..._url import BackendURL, parse_url
from ...errors import InvalidArgument, InvalidURL, TooManyWaiters

ConfigT = TypeVar("ConfigT")


def flag(text: str) -> bool:
    """A boolean URL option: 1/true/yes/on or 0/false/no/off."""
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


#: the longest duration an option may give: longer is a unit mistake, and overflows timers
MAX_SECONDS = 365 * 24 * 3600.0


def seconds(text: str) -> float:
    """A positive duration in seconds, at most a year."""
    value = float(text)
    if not 0 < value <= MAX_SECONDS:
        raise ValueError(f"expected a number of seconds above 0 and at most {MAX_SECONDS:.0f}")
    return value


#: ``max_waiters`` when the URL does not say: the most waiters one lock queues. Each waiter
#: re-checks about once a second, so 10,000 waiters on one lock are 10,000 tries a second.
DEFAULT_MAX_WAITERS = 10_000
#: the most ``max_waiters`` may be
MAX_WAITERS = 1_000_000


def waiter_count(text: str) -> int:
    """``max_waiters``: a whole number of waiters, 1 to MAX_WAITERS."""
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_WAITERS:
        raise ValueError(f"expected a whole number of waiters from 1 to {MAX_WAITERS}")
    return int(text)


def line_full(limit: int, lock_name: str | None, backend: str) -> TooManyWaiters:
    """The error of an acquire that would queue behind ``limit`` waiters, ``max_waiters``."""
    return TooManyWaiters(
        f"{limit} waiters are queued for the lock already, the most it takes "
        "(max_waiters in the URL)",
        lock_name=lock_name,
        backend=backend,
    )


def host_port(text: str, url: BackendURL, default_port: int) -> tuple[str, int]:
    """One ``host[:port]`` or ``[IPv6][:port]`` of a URL's host list."""
    host, port = text, str(default_port)
    if text.startswith("["):  # [IPv6]:port
        host, _, rest = text[1:].partition("]")
        if rest.startswith(":"):
            port = rest[1:]
        elif rest:
            raise InvalidURL(f"bad host {text!r}", backend=url.redacted)
    elif ":" in text:
        host, _, port = text.rpartition(":")
        if ":" in host:
            raise InvalidURL(
                f"an IPv6 address needs brackets: [{host}]:{port}", backend=url.redacted
            )
    if not host:
        raise InvalidURL("the URL names no host", backend=url.redacted)
    if not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise InvalidURL(f"bad port {port!r}: 1 to 65535", backend=url.redacted)
    return host, int(port)


def address(host: str, port: int) -> str:
    """``host:port`` as a URL writes it: ``[IPv6]:port`` for an IPv6 address (the inverse of
    :func:`host_port`)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def host_list(hosts: Iterable[tuple[str, int]]) -> str:
    """A URL's comma-separated host list of ``hosts``."""
    return ",".join(address(host, port) for host, port in hosts)


def parsed_with_options(
    url: str,
    options: Mapping[str, object],
    accepted: Sequence[str],
    what: str,
    parse: Callable[[BackendURL], ConfigT],
) -> ConfigT:
    """What ``parse`` makes of ``url`` (naming a configured client's servers) with
    ``options``, connect's keyword arguments beside the client, added to its query: they are
    checked as a URL's options are. ``InvalidArgument`` (``what``: the client, for the
    message) for an option not in ``accepted``, or a bad value."""
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise InvalidArgument(
            f"{what} does not take the option(s) {', '.join(unknown)}; "
            f"it takes: {', '.join(accepted)}"
        )
    query = urlencode({name: str(value) for name, value in options.items()})
    if query:
        url += ("&" if "?" in url else "?") + query
    try:
        return parse(parse_url(url))
    except InvalidURL as error:
        raise InvalidArgument(error.message, backend=error.backend) from None
