"""TLS from a URL's ``ssl_*`` options, for the backends whose TLS scheme takes them alike
(``zookeepers://``, ``etcds://``): the CA the server's certificate must chain to, a client
certificate and key, and whether the server's name is checked."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from ..._url import BackendURL
from ...errors import ConfigurationError, InvalidURL
from .options import flag

__all__ = ["TLS_OPTIONS", "TLSConfig", "tls_context", "tls_options"]

#: the options a TLS URL takes (and one in clear refuses)
TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname")


@dataclass(frozen=True)
class TLSConfig:
    """The ``ssl_*`` options of a TLS URL."""

    ca_certs: str | None
    certfile: str | None
    keyfile: str | None
    check_hostname: bool


def tls_options(url: BackendURL, tls_scheme: str, secure_port: str) -> TLSConfig | None:
    """The TLS options of ``url``: a :class:`TLSConfig` for the scheme ``tls_scheme``, None
    for the scheme in clear, which refuses them (``secure_port``: what the TLS scheme
    speaks to, for the message)."""
    if url.scheme != tls_scheme:
        if any(name in url.query for name in TLS_OPTIONS):
            raise InvalidURL(
                f"ssl_* options need a {tls_scheme}:// URL ({secure_port})",
                backend=url.redacted,
            )
        return None
    tls = TLSConfig(
        ca_certs=url.query.get("ssl_ca_certs") or None,
        certfile=url.query.get("ssl_certfile") or None,
        keyfile=url.query.get("ssl_keyfile") or None,
        check_hostname=url.option("ssl_check_hostname", flag, True),
    )
    if tls.keyfile is not None and tls.certfile is None:
        raise InvalidURL(
            "ssl_keyfile needs ssl_certfile: the certificate it is the key of",
            backend=url.redacted,
        )
    return tls


def tls_context(tls: TLSConfig, url: str) -> ssl.SSLContext:
    """The client's TLS context, made once: the server's certificate must chain to
    ``ssl_ca_certs`` (the system's CAs without it) and, unless ``ssl_check_hostname=false``,
    name the host as the URL writes it.

    Unusable files are refused here (``ConfigurationError``, ``url`` redacted), before
    connecting: met at a connection attempt they would be retried until the connect timeout,
    which reads as "the servers are down" rather than "fix the URL".
    """
    for option, path in (
        ("ssl_ca_certs", tls.ca_certs),
        ("ssl_certfile", tls.certfile),
        ("ssl_keyfile", tls.keyfile),
    ):
        if path is not None and not Path(path).is_file():
            raise ConfigurationError(f"{option}: {path} is not a file", backend=url)
    try:
        context = ssl.create_default_context(cafile=tls.ca_certs)
    except (ssl.SSLError, OSError, ValueError) as error:
        raise ConfigurationError(
            f"ssl_ca_certs: {tls.ca_certs} holds no usable CA certificate: {error}",
            backend=url,
        ) from None
    context.check_hostname = tls.check_hostname
    if tls.certfile is not None:
        try:
            context.load_cert_chain(tls.certfile, tls.keyfile)
        except (ssl.SSLError, OSError, ValueError) as error:
            files = tls.certfile if tls.keyfile is None else f"{tls.certfile} and {tls.keyfile}"
            raise ConfigurationError(
                f"ssl_certfile: {files} hold no usable certificate and private key: {error}",
                backend=url,
            ) from None
    return context
