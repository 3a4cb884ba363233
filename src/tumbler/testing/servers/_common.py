"""What every throwaway server launcher shares: the loopback address, free ports, errors, URLs,
reading the end of a log, and running a server that refuses root as its package's account."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

__all__ = [
    "LOOPBACK",
    "Launcher",
    "PortTaken",
    "ServerError",
    "ServerNotInstalled",
    "TLSFiles",
    "TLSServerFiles",
    "as_account",
    "chown_to",
    "database_url",
    "free_port",
    "make_tls_files",
    "run_as",
    "run_dir",
    "tail",
]

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class TLSFiles:
    """PEM files made by :func:`make_tls_files`: a CA, a server and a client certificate."""

    ca_path: Path
    server_cert_path: Path
    server_key_path: Path
    client_cert_path: Path
    client_key_path: Path


def make_tls_files(
    directory: str | Path, server_names: tuple[str, ...] = (LOOPBACK, "localhost")
) -> TLSFiles:
    """Make a throw-away CA and certificates with trustme, as PEM files in ``directory``.

    The server certificate names ``server_names``: by default ``127.0.0.1`` (an IP SAN) and
    ``localhost``, so clients can check the hostname when they connect to the loopback
    address. The client certificate is for servers started with ``tls-auth-clients yes``.
    """
    import trustme  # only TLS servers need it

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="tumbler tests")
    server = ca.issue_cert(*server_names)
    client = ca.issue_cert("tumbler-client.test")
    files = TLSFiles(
        ca_path=directory / "ca.pem",
        server_cert_path=directory / "server.pem",
        server_key_path=directory / "server-key.pem",
        client_cert_path=directory / "client.pem",
        client_key_path=directory / "client-key.pem",
    )
    ca.cert_pem.write_to_path(str(files.ca_path))
    for leaf, cert_path, key_path in (
        (server, files.server_cert_path, files.server_key_path),
        (client, files.client_cert_path, files.client_key_path),
    ):
        cert_path.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        key_path.touch(mode=0o600)
        leaf.private_key_pem.write_to_path(str(key_path))
    return files


class _CertificateFiles(Protocol):
    @property
    def ca_path(self) -> Path: ...
    @property
    def client_cert_path(self) -> Path: ...
    @property
    def client_key_path(self) -> Path: ...


class TLSServerFiles:
    """The certificate files a client of a TLS server needs, for launchers whose
    ``_tls_files()`` gives them (and raises the launcher's error for a server in clear)."""

    def _tls_files(self) -> _CertificateFiles:
        raise NotImplementedError

    @property
    def ca_path(self) -> Path:
        """The CA that signed the server's certificate (TLS servers only)."""
        return self._tls_files().ca_path

    @property
    def client_cert_path(self) -> Path:
        """A client certificate of that CA, for servers that ask for one."""
        return self._tls_files().client_cert_path

    @property
    def client_key_path(self) -> Path:
        return self._tls_files().client_key_path


_Launched = TypeVar("_Launched", bound="Launcher")


class PortTaken(Exception):
    """A launcher's server could not bind a port it was given (another program took it since
    :func:`free_port`): the launcher tries again with new ones."""


class Launcher:
    """What every launcher shares: its work directory (a temporary one of its own when none
    is given: removed by :meth:`close`, or at exit if the launcher is never closed), and use
    as a context manager (``with Launcher(...) as server``: started, then closed)."""

    dir: Path

    def _use_directory(self, workdir: str | Path | None, prefix: str) -> None:
        self._owns_dir = workdir is None
        if workdir is None:
            self.dir = Path(tempfile.mkdtemp(prefix=prefix))
            self._remove_dir = weakref.finalize(self, shutil.rmtree, self.dir, ignore_errors=True)
        else:
            self.dir = Path(workdir).resolve()
            self.dir.mkdir(parents=True, exist_ok=True)

    def _discard_directory(self) -> None:
        """Remove the work directory if the launcher made it."""
        if self._owns_dir:
            self._remove_dir()

    def start(self: _Launched) -> _Launched:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Launched) -> _Launched:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def database_url(
    scheme: str, host: str, port: int, user: str, password: str | None, database: str
) -> str:
    """``scheme://user:password@host:port/database`` (no ``:password`` without one), the user,
    password and database percent-encoded: a password may hold ``@``, ``:``, ``/`` or ``#``,
    which would end its part of the URL."""
    userinfo = quote(user, safe="")
    if password is not None:
        userinfo += ":" + quote(password, safe="")
    return f"{scheme}://{userinfo}@{host}:{port}/{quote(database, safe='')}"


_LOG_TAIL_LINES = 25


class ServerError(RuntimeError):
    """A throwaway test server could not be found, started or set up; the message says why.

    The base of each launcher's own error class, so a fixture can catch every launcher's
    failures at once.
    """


class ServerNotInstalled(ServerError):
    """A program the server needs is not installed (``scripts/servers`` installs them)."""


_ports_lock = threading.Lock()
_ports_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback TCP port that is free now and that this process has not handed out before.

    The port is only free, not reserved: another program may take it before the server binds
    it, which is why the launchers retry with new ports when a bind fails. The kernel hands
    out even ports to ``bind(port 0)`` and odd ones to outgoing connections, so client sockets
    seldom collide with these. Raises :class:`ServerError` if no new port turns up.
    """
    with _ports_lock:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.bind((LOOPBACK, 0))
                port: int = probe.getsockname()[1]
            if port not in _ports_handed_out:
                _ports_handed_out.add(port)
                return port
    raise ServerError("found no free loopback port in 100 tries")


def tail(path: Path, offset: int = 0, lines: int = _LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file from byte ``offset`` on ("" if unreadable), for
    error messages: a server that failed usually said why at the end of its log."""
    try:
        with path.open("rb") as file:
            file.seek(offset)
            data = file.read()
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


# -- servers that refuse to run as root ------------------------------------------------------


def run_as(name: str, error: type[ServerError], program: str) -> pwd.struct_passwd | None:
    """The account to run a server that refuses root as: the account ``name`` (which the
    server's Debian package makes) when we are root, else None (ourselves). Raises ``error``
    when we are root and there is no such account."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise error(
            f"{program} does not run as root, and there is no {name} user to run it as"
        ) from None


def run_dir(
    owner: object, account: pwd.struct_passwd | None, own: Path, prefix: str
) -> tuple[Path, weakref.finalize[Any, Any] | None]:
    """Where a server run as ``account`` keeps its files, and what removes that directory:
    ``own`` (the launcher's directory, removed with it) when it runs as us, else a directory
    of the account's own, outside any root-only parent, removed when ``owner`` goes."""
    if account is None:
        return own, None
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    os.chown(directory, account.pw_uid, account.pw_gid)
    return directory, weakref.finalize(owner, shutil.rmtree, directory, ignore_errors=True)


def as_account(account: pwd.struct_passwd | None) -> dict[str, Any]:
    """``subprocess`` keyword arguments that run a program as ``account`` (none for ourselves):
    its user and group, and none of our supplementary groups (root's among them)."""
    if account is None:
        return {}
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def chown_to(path: Path, account: pwd.struct_passwd | None) -> None:
    """Give ``path`` (which we wrote) to ``account``, so a server run as it can read it."""
    if account is not None:
        os.chown(path, account.pw_uid, account.pw_gid)
