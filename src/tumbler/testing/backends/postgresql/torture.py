"""The PostgreSQL backend's deployments for the torture harness: one server, and the same
behind PgBouncer in transaction mode (``pooler=transaction``: waiters poll)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tumbler.errors import install_command
from tumbler.torture.backends import (
    NETWORK_FAULT_KINDS,
    WORKER_FAULTS,
    BackendSpec,
    Deployment,
    OneServerDeployment,
    Settings,
    missing_module,
    program_version,
    started,
)
from tumbler.torture.faults import ProxyControl, network_faults_missing


def _options(ttl: float) -> str:
    # A call must give up well within a lease, so that a renewal can be tried again before
    # the holder's deadline when a reply is lost or the server is gone: on the server's side
    # (statement_timeout) and on the client's (socket_timeout: a network that drops replies);
    # libpq's connect timeout is whole seconds.
    timeout = max(0.5, min(5.0, ttl / 3))
    return (
        f"statement_timeout={timeout:g}&socket_timeout={timeout:g}"
        f"&lock_timeout={timeout / 2:g}&connect_timeout=1"
    )


def _missing() -> str | None:
    missing = missing_module("psycopg", install_command("postgresql")) or missing_module(
        "mirakuru", install_command("testing")
    )
    if missing is not None:
        return missing
    try:
        from .server import postgresql_bin_dir

        postgresql_bin_dir()
    except Exception as error:  # the launcher's own "not installed" error
        return str(error)
    return None


def _missing_pgbouncer() -> str | None:
    missing = _missing()
    if missing is None and shutil.which("pgbouncer") is None:
        return "pgbouncer is not installed"
    return missing


def _postgres_version() -> str:
    from .server import postgresql_bin_dir

    return program_version([str(postgresql_bin_dir() / "postgres"), "--version"], r"(\d+\.\d+)")


def _pgbouncer_version() -> str:
    return program_version(["pgbouncer", "--version"], r"PgBouncer (\S+)")


def _url_maker(ttl: float, pooled: bool) -> Callable[[str], str]:
    from .server import TUMBLER_DATABASE, TUMBLER_PASSWORD, TUMBLER_USER

    userinfo = f"{quote(TUMBLER_USER, safe='')}:{quote(TUMBLER_PASSWORD, safe='')}"
    options = _options(ttl) + ("&pooler=transaction" if pooled else "")
    return lambda address: (
        f"postgresql://{userinfo}@{address}/{TUMBLER_DATABASE}?schema=torture&{options}"
    )


def _start(directory: Path, settings: Settings) -> Deployment:
    from .server import PostgreSQLServer

    server = PostgreSQLServer(directory / "postgresql")
    started(server.start)
    proxy = None
    if not network_faults_missing():
        proxy = ProxyControl.start(server.host, server.port)
    return OneServerDeployment(
        server,
        proxy,
        f"{server.host}:{server.port}",
        _url_maker(settings.ttl, pooled=False),
        lambda: {"postgres": _postgres_version()},
    )


class _PooledDeployment(OneServerDeployment):
    """The server behind PgBouncer: the workers reach PgBouncer (through the proxy), the
    server faults kill and restart PostgreSQL behind it, and PgBouncer stays up."""

    def __init__(self, server: Any, pooler: Any, proxy: ProxyControl | None, ttl: float):
        super().__init__(
            server,
            proxy,
            f"{pooler.host}:{pooler.port}",
            _url_maker(ttl, pooled=True),
            lambda: {"postgres": _postgres_version(), "pgbouncer": _pgbouncer_version()},
        )
        self.pooler = pooler

    def close(self) -> None:
        self.pooler.close()
        super().close()


def _start_pooled(directory: Path, settings: Settings) -> Deployment:
    from .server import PgBouncerServer, PostgreSQLServer

    server = PostgreSQLServer(directory / "postgresql")
    started(server.start)
    try:
        pooler = started(PgBouncerServer(server, directory / "pgbouncer").start)
        proxy = None
        if not network_faults_missing():
            proxy = ProxyControl.start(pooler.host, pooler.port)
    except BaseException:
        server.close()
        raise
    return _PooledDeployment(server, pooler, proxy, settings.ttl)


_PROMISE = (
    "exclusion and increasing tokens (a sequence) across crashes and restarts of the "
    "server: every grant is committed before it is acknowledged; leases on the server's clock"
)

DEPLOYMENTS = (
    BackendSpec(
        name="postgresql",
        summary="one PostgreSQL server, waiters woken by LISTEN/NOTIFY",
        scheme="postgresql",
        faults=(*WORKER_FAULTS, "restart", *NETWORK_FAULT_KINDS),
        default_faults=(*WORKER_FAULTS, "restart", *NETWORK_FAULT_KINDS),
        not_promised={},
        promise=_PROMISE,
        recovery_grace=3.0,
        start=_start,
        missing=_missing,
        # a blip well within a lease: no acquire fails, no hold is lost
        available={"net-blip": ("acquire", "hold")},
    ),
    BackendSpec(
        name="postgresql-pgbouncer",
        summary="one PostgreSQL server behind PgBouncer in transaction mode, waiters polling",
        scheme="postgresql",
        faults=(*WORKER_FAULTS, "restart", *NETWORK_FAULT_KINDS),
        default_faults=(*WORKER_FAULTS, "restart", *NETWORK_FAULT_KINDS),
        not_promised={},
        promise=_PROMISE + "; behind the pooler, no session outlives a transaction",
        recovery_grace=3.0,
        start=_start_pooled,
        missing=_missing_pgbouncer,
        # a blip well within a lease: no acquire fails, no hold is lost
        available={"net-blip": ("acquire", "hold")},
    ),
)
