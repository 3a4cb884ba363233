"""The MySQL / MariaDB backend's deployment for the torture harness: one MariaDB server,
waiters woken by a release that interrupts their client's listener."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
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
    # the holder's deadline when a reply is lost or the server is gone.
    timeout = max(0.5, min(5.0, ttl / 3))
    return f"socket_timeout={timeout:g}&lock_timeout={timeout / 2:g}&connect_timeout=1"


def _missing() -> str | None:
    missing = (
        missing_module("pymysql", install_command("mysql"))
        or missing_module("aiomysql", install_command("mysql"))
        or missing_module("mirakuru", install_command("testing"))
    )
    if missing is not None:
        return missing
    try:
        from .server import mariadb_program

        mariadb_program("mariadbd")
    except Exception as error:  # the launcher's own "not installed" error
        return str(error)
    return None


def _version() -> str:
    from .server import mariadb_program

    return program_version([str(mariadb_program("mariadbd")), "--version"], r"Ver (\S+)")


def _url_maker(ttl: float) -> Callable[[str], str]:
    from .server import TUMBLER_DATABASE, TUMBLER_PASSWORD, TUMBLER_USER

    userinfo = f"{quote(TUMBLER_USER, safe='')}:{quote(TUMBLER_PASSWORD, safe='')}"
    options = _options(ttl)
    return lambda address: (
        f"mysql://{userinfo}@{address}/{TUMBLER_DATABASE}?table_prefix=torture_&{options}"
    )


def _start(directory: Path, settings: Settings) -> Deployment:
    from .server import MariaDBServer

    server = MariaDBServer(directory / "mariadb")
    started(server.start)
    proxy = None
    if not network_faults_missing():
        proxy = ProxyControl.start(server.host, server.port)
    return OneServerDeployment(
        server,
        proxy,
        f"{server.host}:{server.port}",
        _url_maker(settings.ttl),
        lambda: {"mariadb": _version()},
    )


DEPLOYMENTS = (
    BackendSpec(
        name="mysql",
        summary="one MariaDB server, waiters woken by a release that interrupts their listener",
        scheme="mysql",
        faults=(*WORKER_FAULTS, "restart", *NETWORK_FAULT_KINDS),
        default_faults=(*WORKER_FAULTS, "restart", *NETWORK_FAULT_KINDS),
        not_promised={},
        promise=(
            "exclusion and increasing tokens (an AUTO_INCREMENT counter) across crashes and "
            "restarts of the server: every grant is committed before it is acknowledged; "
            "leases on the server's clock"
        ),
        recovery_grace=3.0,
        start=_start,
        missing=_missing,
        # a blip well within a lease: no acquire fails, no hold is lost
        available={"net-blip": ("acquire", "hold")},
    ),
)
