"""A psycopg pool the application configured already (``psycopg_pool.ConnectionPool``,
``AsyncConnectionPool`` and their null twins), read into the configuration a URL would give.

tumbler does not borrow the pool's connections: it keeps one listening for wake-ups for as
long as it lives, sets its own timeouts on its sessions, and must not wait behind the
application's queries for a renewal. So it copies what says where and how to connect: the
pool's connection string and its libpq keyword arguments (server, database, user, password
or passfile, service, TLS and its files, ``target_session_attrs``...), and makes connections
of its own with them. Its own settings stay its own: the timeouts, keepalives and
``application_name`` (``tumbler``, for operators) of a URL without them, and the session
settings it sends itself (so a pool's ``options`` is not copied). The pool stays the
application's: tumbler never closes it.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import quote, urlencode

from ...errors import InvalidArgument
from ..kit.options import parsed_with_options
from .common import _OPTIONS as URL_OPTIONS
from .common import PostgreSQLConfig, parse_config

#: what tumbler's own options for a pool are (those of a URL that the pool does not say)
OPTIONS = tuple(
    name
    for name in URL_OPTIONS
    if name not in ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout", "host")
)
#: what tumbler sets on its connections whatever the pool says: its timeouts and keepalives
#: (a call must give up in time), and the name operators see
_TUMBLER_OWN = (
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "application_name",
)


def config_from_pool(pool: object, *, asyncio: bool, **options: object) -> PostgreSQLConfig:
    """The configuration of tumbler's connections to the server ``pool`` connects to, as it
    connects; ``options`` as a URL's (``schema``, ``max_connections``...). Raises
    ``InvalidArgument`` for a pool of the other flavour or a bad option."""
    kind = f"{type(pool).__module__}.{type(pool).__qualname__}"
    is_asyncio = type(pool).__name__.startswith("Async")
    if is_asyncio != asyncio:
        raise InvalidArgument(
            f"{kind} is an {'asyncio' if is_asyncio else 'blocking'} pool: give it to "
            f"{'tumbler.aio.connect' if is_asyncio else 'tumbler.connect'}"
        )
    from psycopg import pq
    from psycopg.conninfo import conninfo_to_dict

    keywords = {default.keyword.decode() for default in pq.Conninfo.get_defaults()}
    given: dict[str, Any] = getattr(pool, "kwargs", None) or {}
    # the pool's keyword arguments that are libpq's (not psycopg's: row_factory, autocommit)
    libpq = {name: value for name, value in given.items() if name in keywords}
    params = {
        name: value
        for name, value in conninfo_to_dict(getattr(pool, "conninfo", ""), **libpq).items()
        if value is not None and name != "options"
    }
    config = _parsed(kind, params, options)
    connect_options = dict(params)
    for name in _TUMBLER_OWN:
        if name in config.connect_options:
            connect_options[name] = config.connect_options[name]
    connect_options.setdefault("connect_timeout", config.connect_options["connect_timeout"])
    return dataclasses.replace(config, connect_options=connect_options)


def _parsed(kind: str, params: dict[str, Any], options: dict[str, object]) -> PostgreSQLConfig:
    """What a URL naming the pool's server, database and user and carrying ``options`` would
    configure: the options are checked as a URL's are, and the URL (without the password)
    names the backend in messages."""
    host = str(params.get("host") or "")
    netloc = ""
    query = ""
    if host.startswith("/"):  # a Unix socket directory
        query = "?" + urlencode({"host": host})
    elif host:
        port = params.get("port")
        netloc = f"[{host}]" if ":" in host else host
        if port:
            netloc += f":{port}"
    user = params.get("user")
    if user:
        netloc = f"{quote(str(user), safe='')}@{netloc}"
    database = quote(str(params.get("dbname") or ""), safe="")
    url = f"postgresql://{netloc}/{database}{query}"
    return parsed_with_options(url, options, OPTIONS, kind, parse_config)
