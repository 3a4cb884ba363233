"""The etcd backend's URL grammar and configuration (the backend itself is under way).

URL
    ``etcd://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/PREFIX][?OPTIONS]``, or
    ``etcds://`` for TLS to the members' client port (``ssl_ca_certs``, ``ssl_certfile``,
    ``ssl_keyfile``, ``ssl_check_hostname``, as ``zookeepers://`` takes them). Without a host,
    ``localhost:2379``; the port defaults to 2379. Every lock key lives under ``PREFIX``
    (default ``/tumbler``), which an operator's role for the user can be limited to. With a
    user, the client logs in and sends its token with each request.

Options
    ``lease_ttl`` (10 s, whole seconds, at least 2): the client's one lease, which every entry
    it makes is attached to, kept alive at a third of it; ``connect_timeout`` (5 s): how long
    a client tries the members before it gives up; ``request_timeout`` (5 s): how long one
    request waits for its reply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..._url import BackendURL
from ...errors import InvalidURL
from ..kit.options import host_port, seconds
from ..kit.tls import TLS_OPTIONS, TLSConfig, tls_options

__all__ = [
    "DEFAULT_LEASE_TTL",
    "DEFAULT_PORT",
    "DEFAULT_PREFIX",
    "MIN_LEASE_TTL",
    "TLS_SCHEME",
    "EtcdConfig",
    "parse_config",
]

DEFAULT_PORT = 2379
DEFAULT_PREFIX = "/tumbler"
DEFAULT_LEASE_TTL = 10
#: etcd refuses leases shorter than its election timeout allows; 2 s is safe with defaults
MIN_LEASE_TTL = 2
TLS_SCHEME = "etcds"

_OPTIONS = ("lease_ttl", "connect_timeout", "request_timeout")


@dataclass(frozen=True)
class EtcdConfig:
    """A parsed ``etcd://`` URL: what both flavours need to connect."""

    url: str  # redacted
    #: every member's client URL, ``http[s]://HOST:PORT``
    endpoints: tuple[str, ...]
    #: the prefix every lock key is under, as bytes, ending in ``/``
    prefix: bytes
    lease_ttl: int
    connect_timeout: float
    request_timeout: float
    #: (user, password) to log in with (never log this)
    credentials: tuple[str, str] | None = field(repr=False)
    #: how to speak TLS to the members; None: in clear
    tls: TLSConfig | None = None


def _lease_ttl(text: str) -> int:
    value = seconds(text)
    if value < MIN_LEASE_TTL:
        raise ValueError(f"expected at least {MIN_LEASE_TTL} s, the shortest lease etcd keeps")
    return math.ceil(value)


def _prefix(url: BackendURL) -> bytes:
    prefix = "/" + url.path.strip("/") if url.path.strip("/") else DEFAULT_PREFIX
    if any(part in ("", ".", "..") for part in prefix.split("/")[1:]):
        raise InvalidURL(f"bad prefix {prefix!r}", backend=url.redacted)
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in prefix):
        raise InvalidURL("the prefix has control characters", backend=url.redacted)
    return (prefix + "/").encode()


def parse_config(url: BackendURL) -> EtcdConfig:
    """Read an ``etcd://`` or ``etcds://`` URL; InvalidURL (without the password) for a
    bad one."""
    url.allow_options(_OPTIONS + TLS_OPTIONS)
    tls = tls_options(url, TLS_SCHEME, "the members' client port, in TLS")
    hosts = [host_port(part, url, DEFAULT_PORT) for part in url.hosts.split(",") if part]
    if not hosts:
        hosts = [("localhost", DEFAULT_PORT)]
    scheme = "https" if tls is not None else "http"
    endpoints = tuple(
        f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
        for host, port in hosts
    )
    if url.password is not None and not url.username:
        raise InvalidURL("a password needs a user name: USER:PASSWORD@", backend=url.redacted)
    credentials = None if url.username is None else (url.username, url.password or "")
    return EtcdConfig(
        url=url.redacted,
        endpoints=endpoints,
        prefix=_prefix(url),
        lease_ttl=url.option("lease_ttl", _lease_ttl, DEFAULT_LEASE_TTL),
        connect_timeout=url.option("connect_timeout", seconds, 5.0),
        request_timeout=url.option("request_timeout", seconds, 5.0),
        credentials=credentials,
        tls=tls,
    )
