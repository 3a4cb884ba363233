"""Real etcd servers for the etcd backend's tests and for bench/.

:class:`EtcdServer` is one ``etcd`` process from Debian's ``etcd-server`` package: a cluster
of one member, its data in a directory of its own, its client and peer ports free
``127.0.0.1`` ports. :class:`EtcdCluster` is three (or any odd number of) members that form
one cluster, each a process of its own that can be killed (SIGKILL, as in a crash), stopped
(SIGTERM) and started again on the same ports and data, so that the cluster's leader can be
taken away while clients hold locks.

Given ``tls``, every member speaks TLS to its clients, with a certificate that names
``127.0.0.1``, and takes only clients with a certificate of the same CA
(``--client-cert-auth``: a client without one fails at the TLS handshake), unless
``client_certificates`` is false; the members speak to each other in clear, on loopback.
:meth:`EtcdServer.enable_auth` turns etcd's authentication on: a ``root`` user, and a user
``tumbler`` whose role may read and write only the keys under one prefix (what the backend's
documentation asks an operator to set up).

Everything the launcher asks of a member goes through etcd's JSON gateway (``/v3/...``) with
httpx, as the backend's own client does. Plain library code: no pytest; it needs mirakuru and
httpx (the ``testing`` extra). The program is ``$TUMBLER_ETCD_BIN/etcd`` when that is set,
else ``/usr/bin/etcd`` (Debian's place), else ``etcd`` on ``PATH``; ``scripts/servers``
installs it.
"""

from __future__ import annotations

import base64
import os
import shutil
import ssl
import time
import uuid
from pathlib import Path
from typing import Any, TypeVar

import httpx

from tumbler.testing.servers._common import (
    LOOPBACK,
    Launcher,
    ServerError,
    ServerNotInstalled,
    TLSFiles,
    TLSServerFiles,
    free_port,
)
from tumbler.testing.servers.process import ProcessLauncher

__all__ = [
    "ROOT_PASSWORD",
    "STARTUP_TIMEOUT",
    "TUMBLER_PASSWORD",
    "TUMBLER_PREFIX",
    "TUMBLER_USER",
    "EtcdCluster",
    "EtcdMember",
    "EtcdNotInstalled",
    "EtcdServer",
    "EtcdServerError",
    "etcd_program",
]

#: seconds a member gets to serve after its process starts (a cluster: after the last one)
STARTUP_TIMEOUT = 30.0
#: the user the tests' URLs log in as once authentication is on, its password, and the
#: prefix its role may read and write
TUMBLER_USER = "tumbler"
#: has characters that must be percent-encoded in a URL's userinfo (and ones that would end it)
TUMBLER_PASSWORD = "p@ss:w/rd%?#"
TUMBLER_PREFIX = "/tumbler/"
#: the superuser's password (auth on only)
ROOT_PASSWORD = "root-Passw0rd"

_BIN_ENV = "TUMBLER_ETCD_BIN"
_DEBIAN = Path("/usr/bin")
#: how long one readiness probe or set-up request may take
_PROBE_TIMEOUT = 2.0


_Member = TypeVar("_Member", bound="EtcdMember")


class EtcdServerError(ServerError):
    """A test etcd server could not be found, started or set up; the message says why."""


class EtcdNotInstalled(EtcdServerError, ServerNotInstalled):
    """``etcd`` is not installed (``scripts/servers`` installs Debian's ``etcd-server``)."""


def etcd_program() -> Path:
    """The ``etcd`` program: in ``$TUMBLER_ETCD_BIN`` when it is set (and nowhere else), else
    ``/usr/bin/etcd``, else on ``PATH``; raises :class:`EtcdNotInstalled` where it is not."""
    configured = os.environ.get(_BIN_ENV)
    if configured:
        program = Path(configured) / "etcd"
        if not program.is_file():
            raise EtcdNotInstalled(f"${_BIN_ENV}={configured!r} has no etcd program")
        return program
    if (_DEBIAN / "etcd").is_file():
        return _DEBIAN / "etcd"
    found = shutil.which("etcd")
    if found is None:
        raise EtcdNotInstalled(
            f"etcd is not installed (install it with scripts/servers, or set ${_BIN_ENV})"
        )
    return Path(found)


def _encode(text: str) -> str:
    """A key or value as the gateway takes it: base64 of its UTF-8 bytes."""
    return base64.b64encode(text.encode()).decode()


def _prefix_end(prefix: str) -> str:
    """The key just past every key that starts with ``prefix`` (etcd's ``range_end``)."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return base64.b64encode(bytes(raw)).decode()


class EtcdMember(ProcessLauncher, TLSServerFiles):
    """One ``etcd`` process: a member of the cluster its ``initial_cluster`` names (itself
    alone unless an :class:`EtcdCluster` says otherwise).

    Nothing runs until :meth:`start`. :meth:`stop` (SIGTERM) and :meth:`kill` (SIGKILL) end
    the process and keep its data and ports, so :meth:`start` brings the same member back.
    """

    error = EtcdServerError
    program = "etcd"
    poll_interval = 0.05
    ready_errors = (httpx.HTTPError,)

    def __init__(
        self,
        workdir: str | Path | None = None,
        *,
        name: str = "m0",
        tls: TLSFiles | None = None,
        client_certificates: bool = True,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        self.host = LOOPBACK
        self.port = 0
        self.peer_port = 0
        self.name = name
        self.tls = tls
        #: with TLS: take only clients with a certificate of ``tls``'s CA
        self.client_certificates = client_certificates
        self.startup_timeout = startup_timeout
        self._use_directory(workdir, "tumbler-etcd-")
        self.data_dir = self.dir / "data"
        self.config_path = self.data_dir
        self.log_path = self.dir / "etcd.log"
        #: every member's ``name=peer URL``, this one's included (set before the first start)
        self.initial_cluster = ""
        #: "new" for a cluster's first start; etcd ignores it once the data directory exists
        self.cluster_state = "new"
        #: the same for every member of one cluster, and another for each cluster
        self.cluster_token = f"tumbler-{uuid.uuid4().hex}"
        self._auth: tuple[str, str] | None = None

    # -- addresses -------------------------------------------------------------------------

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    @property
    def client_url(self) -> str:
        """This member's client URL (``http[s]://127.0.0.1:PORT``)."""
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.host}:{self.peer_port}"

    def _tls_files(self) -> TLSFiles:
        if self.tls is None:
            raise EtcdServerError("this server does not use TLS")
        return self.tls

    # -- the gateway -----------------------------------------------------------------------

    def client(self, timeout: float = _PROBE_TIMEOUT) -> httpx.Client:
        """An httpx client for this member's gateway (the caller closes it); on a TLS
        server it checks the server's certificate and shows the client certificate."""
        options: dict[str, Any] = {"base_url": self.client_url, "timeout": timeout}
        if self.tls is not None:
            context = ssl.create_default_context(cafile=str(self.tls.ca_path))
            context.load_cert_chain(self.tls.client_cert_path, self.tls.client_key_path)
            options["verify"] = context
        return httpx.Client(**options)

    def call(self, path: str, body: dict[str, Any], *, token: str | None = None) -> Any:
        """POST ``body`` to the gateway's ``path`` (``/v3/kv/range``, say); the JSON reply.
        With authentication on, the launcher's own calls log in as root."""
        if token is None and self._auth is not None:
            token = self._token(*self._auth)
        headers = {} if token is None else {"Authorization": token}
        with self.client() as client:
            reply = client.post(path, json=body, headers=headers)
        answer = reply.json()
        if reply.status_code != 200:
            raise EtcdServerError(f"{path} on {self.client_url}: {answer}")
        return answer

    def _token(self, user: str, password: str) -> str:
        with self.client() as client:
            reply = client.post("/v3/auth/authenticate", json={"name": user, "password": password})
        if reply.status_code != 200:
            raise EtcdServerError(f"cannot log in to {self.client_url} as {user}: {reply.text}")
        token: str = reply.json()["token"]
        return token

    def status(self) -> dict[str, Any] | None:
        """The member's ``/v3/maintenance/status`` (its id, the leader's id, the raft
        index); None if it does not answer."""
        try:
            answer: dict[str, Any] = self.call("/v3/maintenance/status", {})
        except (httpx.HTTPError, EtcdServerError):
            return None
        return answer

    def _ready(self) -> bool:
        # a member that answers /health with "true" has a leader and serves requests
        try:
            with self.client() as client:
                reply = client.get("/health")
        except httpx.HTTPError:
            return False
        return reply.status_code == 200 and reply.json().get("health") == "true"

    # -- authentication ----------------------------------------------------------------------

    def enable_auth(self, prefix: str = TUMBLER_PREFIX) -> None:
        """Turn authentication on: a ``root`` user (:data:`ROOT_PASSWORD`), and the user
        :data:`TUMBLER_USER` whose role may read and write only the keys under ``prefix``."""
        if self._auth is not None:
            return
        steps: list[tuple[str, dict[str, Any]]] = [
            ("/v3/auth/user/add", {"name": "root", "password": ROOT_PASSWORD}),
            ("/v3/auth/user/grant", {"user": "root", "role": "root"}),
            ("/v3/auth/role/add", {"name": "tumbler"}),
            (
                "/v3/auth/role/grant",
                {
                    "name": "tumbler",
                    "perm": {
                        "permType": "READWRITE",
                        "key": _encode(prefix),
                        "range_end": _prefix_end(prefix),
                    },
                },
            ),
            ("/v3/auth/user/add", {"name": TUMBLER_USER, "password": TUMBLER_PASSWORD}),
            ("/v3/auth/user/grant", {"user": TUMBLER_USER, "role": "tumbler"}),
            ("/v3/auth/enable", {}),
        ]
        for path, body in steps:
            self.call(path, body)
        self._auth = ("root", ROOT_PASSWORD)

    # -- lifecycle -------------------------------------------------------------------------

    def _pick_ports(self) -> None:
        self.port = free_port()
        self.peer_port = free_port()
        if not self.initial_cluster:
            self.initial_cluster = f"{self.name}={self.peer_url}"

    def _port_taken_message(self) -> str:
        return f"port {self.port} or {self.peer_port} on {self.host} is taken by another program"

    def _write_files(self) -> None:
        # etcd makes its data directory itself, private to its user
        self.dir.mkdir(parents=True, exist_ok=True)

    def _command(self) -> list[str]:
        options = {
            "name": self.name,
            "data-dir": str(self.data_dir),
            "listen-client-urls": self.client_url,
            "advertise-client-urls": self.client_url,
            "listen-peer-urls": self.peer_url,
            "initial-advertise-peer-urls": self.peer_url,
            "initial-cluster": self.initial_cluster,
            "initial-cluster-state": self.cluster_state,
            "initial-cluster-token": self.cluster_token,
            "logger": "zap",
            "log-outputs": "stderr",
            # a test cluster: elections in a fraction of a second, not seconds; a member alone
            # has nobody to send heartbeats to, and ticks half as often (an idle member spent
            # 0.6 CPU-seconds a minute at 50 ms, 0.4 at 100: each worker of the test run keeps
            # several all session), with the same minimum lease (seven ticks, 0.7 s, not 0.75)
            "heartbeat-interval": "100" if "," not in self.initial_cluster else "50",
            "election-timeout": "500",
        }
        if self.tls is not None:
            options.update(
                {
                    "cert-file": str(self.tls.server_cert_path),
                    "key-file": str(self.tls.server_key_path),
                }
            )
            if self.client_certificates:
                options.update(
                    {"trusted-ca-file": str(self.tls.ca_path), "client-cert-auth": "true"}
                )
        return [str(etcd_program()), *(f"--{name}={value}" for name, value in options.items())]

    def start(self: _Member) -> _Member:
        """Start the process and wait until it serves (for a cluster's member: until the
        cluster has a leader)."""
        super().start()
        self.cluster_state = "existing"
        return self

    def close(self) -> None:
        """Stop the process and remove its directory. The server cannot be started again."""
        self.stop()
        self._discard_directory()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<{type(self).__name__} {self.name} {self.client_url} {state} in {self.dir}>"


class EtcdServer(EtcdMember):
    """A cluster of one member: what the conformance suite runs on."""

    @property
    def url(self) -> str:
        """An ``etcd://`` URL of this server (``etcds://`` with TLS, its CA and client
        certificate in the query), as the user ``tumbler`` once authentication is on."""
        return _url([self], self.tls, self._auth is not None)


class EtcdCluster(Launcher):
    """``size`` members (3 by default) that form one cluster, each in a directory of its
    own under the cluster's. :meth:`start` launches them all before it waits for the first,
    so that their start-ups overlap; :meth:`leader` says which member leads now."""

    def __init__(
        self,
        workdir: str | Path | None = None,
        *,
        size: int = 3,
        tls: TLSFiles | None = None,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        if size < 1 or size % 2 == 0:
            raise EtcdServerError(f"a cluster of {size} members has no clear majority")
        self._use_directory(workdir, "tumbler-etcd-cluster-")
        self.tls = tls
        self.members = [
            EtcdMember(
                self.dir / f"m{index}", name=f"m{index}", tls=tls, startup_timeout=startup_timeout
            )
            for index in range(size)
        ]

    @property
    def url(self) -> str:
        """An ``etcd://`` URL that names every member."""
        return _url(self.members, self.tls, auth=False)

    def start(self) -> EtcdCluster:
        """Start every member that is not running, and wait until each serves."""
        if not all(member.port for member in self.members):
            for member in self.members:
                member.port, member.peer_port = free_port(), free_port()
            cluster = ",".join(f"{member.name}={member.peer_url}" for member in self.members)
            token = f"tumbler-{uuid.uuid4().hex}"
            for member in self.members:
                member.initial_cluster, member.cluster_token = cluster, token
        waiting = []
        for member in self.members:
            if not member.running:
                member._spawn()
                waiting.append(member)
        for member in waiting:
            member._await_started()
            member.cluster_state = "existing"
        return self

    def leader(self, timeout: float = STARTUP_TIMEOUT) -> int:
        """The index of the member that leads now, once a running member names one that
        runs (within ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            by_id = {}
            named = set()
            for index, member in enumerate(self.members):
                status = member.status() if member.running else None
                if status is not None:
                    by_id[status["header"]["member_id"]] = index
                    named.add(status.get("leader"))
            leaders = [by_id[leader] for leader in named if leader in by_id]
            if len(named) == 1 and len(leaders) == 1:
                return leaders[0]
            if time.monotonic() > deadline:
                raise EtcdServerError(f"no member of {self.dir} leads within {timeout:g} s")
            time.sleep(0.05)

    def close(self) -> None:
        """Stop every member and remove the cluster's directory."""
        for member in self.members:
            member.close()
        self._discard_directory()

    def __repr__(self) -> str:
        running = sum(member.running for member in self.members)
        return f"<EtcdCluster {running}/{len(self.members)} running in {self.dir}>"


def _url(members: list[EtcdMember], tls: TLSFiles | None, auth: bool) -> str:
    from urllib.parse import quote, urlencode

    hosts = ",".join(f"{member.host}:{member.port}" for member in members)
    userinfo = f"{quote(TUMBLER_USER, safe='')}:{quote(TUMBLER_PASSWORD, safe='')}@" if auth else ""
    if tls is None:
        return f"etcd://{userinfo}{hosts}{TUMBLER_PREFIX.rstrip('/')}"
    # the names the ZooKeeper backend's zookeepers:// takes too
    query = urlencode(
        {
            "ssl_ca_certs": str(tls.ca_path),
            "ssl_certfile": str(tls.client_cert_path),
            "ssl_keyfile": str(tls.client_key_path),
        }
    )
    return f"etcds://{userinfo}{hosts}{TUMBLER_PREFIX.rstrip('/')}?{query}"
