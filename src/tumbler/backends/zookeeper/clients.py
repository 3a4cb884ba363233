"""A kazoo ``KazooClient`` the application configured already, read into the configuration a
URL would give.

tumbler does not share the client's session: a lock's hold lives and dies with the session
it was taken in, and tumbler must decide itself when that session is lost, reconnect for as
long as it lives, and never have kazoo retry a call (the lock logic decides what a lost
reply means); an application's own use of its client (its retries, its listeners, a
``stop()``) would otherwise end or hold up tumbler's holds. So it copies what says where and
how to connect: the ensemble's servers, the client's chroot (tumbler's nodes go under it),
its digest credentials (its ACLs follow from them, as a URL's user's do), its TLS settings
and its session timeout; and opens a session of its own with them, either flavour. The
client stays the application's: tumbler never stops or closes it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from ...errors import InvalidArgument
from ..kit.options import host_list, parsed_with_options
from .common import DEFAULT_BASE, TLS_SCHEME, ZooKeeperConfig, parse_config

#: tumbler's own options for a client (those of a URL that the client does not say); ``base``
#: is the path of tumbler's nodes under the client's chroot (the URL's path otherwise)
OPTIONS = ("base", "connect_timeout", "request_timeout", "max_waiters")


def config_from_client(client: Any, **options: object) -> ZooKeeperConfig:
    """The configuration of tumbler's session with the ensemble ``client`` connects to, as it
    connects; ``options`` as a URL's. Raises ``InvalidArgument`` for what tumbler cannot copy
    (credentials other than a digest, unverified or password-protected TLS) or a bad option.
    """
    kind = f"{type(client).__module__}.{type(client).__qualname__}"
    digests = [credential for scheme, credential in client.auth_data if scheme == "digest"]
    others = sorted({scheme for scheme, _credential in client.auth_data} - {"digest"})
    if others or len(digests) > 1:
        raise InvalidArgument(
            f"{kind} authenticates with {', '.join(others) or 'several digests'}: tumbler "
            "authenticates with one digest (USER:PASSWORD) only"
        )
    # kazoo keeps the session timeout it was given (in ms) only there
    query: dict[str, str] = {"session_timeout": str(client._session_timeout / 1000)}
    if client.use_ssl:
        if not client.verify_certs:
            raise InvalidArgument(
                f"{kind} does not verify the servers' certificates; tumbler always does"
            )
        if client.keyfile_password:
            raise InvalidArgument(
                f"{kind}'s key file has a password, which tumbler cannot take: give it a key "
                "file without one"
            )
        for name, value in (
            ("ssl_ca_certs", client.ca),
            ("ssl_certfile", client.certfile),
            ("ssl_keyfile", client.keyfile),
        ):
            if value:
                query[name] = str(value)
    options = dict(options)
    base = str(options.pop("base", DEFAULT_BASE))
    if not base.startswith("/"):
        raise InvalidArgument(f"base must be an absolute path, not {base!r}")
    userinfo = ""
    if digests:
        user, _, password = digests[0].partition(":")
        userinfo = f"{quote(user, safe='')}:{quote(password, safe='')}@"
    scheme = TLS_SCHEME if client.use_ssl else "zookeeper"
    path = (client.chroot or "") + base
    url = f"{scheme}://{userinfo}{host_list(client.hosts)}{quote(path)}?{urlencode(query)}"
    return parsed_with_options(url, options, OPTIONS, kind, parse_config)
