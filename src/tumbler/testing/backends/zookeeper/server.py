"""Real ZooKeeper servers for the ZooKeeper backend's tests, from Debian's ``zookeeper`` package.

Two shapes, each made of real ZooKeeper JVMs on free loopback ports, every process in its own
directory (its ``zoo.cfg``, its data directory and its log live there):

* :class:`ZooKeeperServer` - one standalone server; it can be killed (SIGKILL, as in a crash)
  and started again on the same port and data directory, with its data. Given ``tls`` (the
  files of :func:`~tumbler.testing.servers.make_tls_files`) it speaks only TLS: its one client
  port is a ``secureClientPort`` served by Netty.
* :class:`ZooKeeperEnsemble` - a replicated ensemble (3 members by default), each member with
  a client, a quorum and an election port; members can be killed and restarted one at a time
  while the others carry on, and :meth:`ZooKeeperEnsemble.leader` says which one leads.

The servers are made for tests on a small shared machine: 128 MiB of heap and the serial
collector per JVM, a 200 ms tick so sessions can expire within a test (session timeouts from
400 ms to 60 s), no admin HTTP server, no fsync (a SIGKILL loses nothing the kernel already
has; only a power cut would), and the four-letter words ``ruok``, ``srvr``, ``mntr`` and
``stat`` allowed, which is how the launcher tells when a server is up and who leads. A
``super_password`` turns on ZooKeeper's super user (``superDigest``), who passes every ACL.

Plain library code like :mod:`tumbler.testing.backends.redis.server`: no pytest and no ZooKeeper
client (the readiness probes speak the four-letter words over a socket), only mirakuru from
the ``testing`` extra (and, for a TLS server, ``cryptography``, which trustme brings). The JVM
is ``$TUMBLER_JAVA`` or ``java`` on ``PATH``; the class path is ``$TUMBLER_ZOOKEEPER_CLASSPATH``
or Debian's ``/usr/share/java/zookeeper.jar`` (whose manifest names the jars it needs), plus
``slf4j-simple.jar`` for the log and ``netty-codec.jar``, which Netty's TLS handler needs and
Debian's manifest leaves out; ``scripts/servers`` installs them.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
import signal
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tumbler.errors import InvalidArgument
from tumbler.testing.servers._common import (
    LOOPBACK,
    Launcher,
    PortTaken,
    ServerError,
    ServerNotInstalled,
    TLSFiles,
    TLSServerFiles,
    free_port,
)
from tumbler.testing.servers.process import BIND_ATTEMPTS, ProcessLauncher

__all__ = [
    "DEFAULT_MAX_SESSION_TIMEOUT",
    "DEFAULT_MIN_SESSION_TIMEOUT",
    "DEFAULT_TICK_TIME",
    "FOUR_LETTER_WORDS",
    "SUPER_USER",
    "ZOOKEEPER_STARTUP_TIMEOUT",
    "ZooKeeperEnsemble",
    "ZooKeeperMember",
    "ZooKeeperNotInstalled",
    "ZooKeeperServer",
    "ZooKeeperServerError",
    "four_letter_word",
    "java_binary",
    "super_digest",
    "zookeeper_classpath",
]

#: seconds a server gets to answer ``srvr`` (an ensemble: to elect a leader and sync everyone);
#: a JVM needs about a CPU-second to start, which a busy 2-core machine can stretch to 30 s
ZOOKEEPER_STARTUP_TIMEOUT = 60.0
#: milliseconds: ZooKeeper's unit of time (heartbeats, and the session timeout bounds'
#: defaults are 2 and 20 ticks); short, so tests can see sessions expire
DEFAULT_TICK_TIME = 200
DEFAULT_MIN_SESSION_TIMEOUT = 400
DEFAULT_MAX_SESSION_TIMEOUT = 60_000
#: the four-letter words the servers answer; the launcher itself uses ruok and srvr
FOUR_LETTER_WORDS = ("ruok", "srvr", "mntr", "stat")
#: the user that ``superDigest`` makes all-powerful
SUPER_USER = "super"

_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
_DEBIAN_JAR = Path("/usr/share/java/zookeeper.jar")
#: an SLF4J binding that needs no config file: the server logs to stderr, i.e. its log file
_SLF4J_SIMPLE = Path("/usr/share/java/slf4j-simple.jar")
#: Netty's TLS handler needs its codec classes; Debian's zookeeper.jar manifest does not name
#: them (without them the secure port closes every connection: NoClassDefFoundError)
_NETTY_CODEC = Path("/usr/share/java/netty-codec.jar")
#: the values of ``ssl.clientAuth`` a TLS server may run with: ``want`` asks clients for a
#: certificate and lets in those without one, ``need`` refuses them
TLS_CLIENT_AUTH = ("want", "need")
_JAVA_ENV = "TUMBLER_JAVA"
_CLASSPATH_ENV = "TUMBLER_ZOOKEEPER_CLASSPATH"
#: the JVM's exit status after SIGTERM: it runs its shutdown hooks, then exits 128 + 15
_EXIT_ON_SIGTERM = 128 + signal.SIGTERM
_SERVING_MODES = ("leader", "follower", "standalone")
_PROBE_TIMEOUT = 2.0

_Server = TypeVar("_Server", bound="ZooKeeperServer")


class ZooKeeperServerError(ServerError):
    """A test ZooKeeper server could not be found, started or set up; the message says why."""


class ZooKeeperNotInstalled(ZooKeeperServerError, ServerNotInstalled):
    """Java or ZooKeeper's jars are not installed (``scripts/servers`` installs both)."""


def java_binary() -> str:
    """The ``java`` program to run: ``$TUMBLER_JAVA``, else the one on PATH."""
    configured = os.environ.get(_JAVA_ENV)
    if configured:
        path = shutil.which(configured)
        if path is None:
            raise ZooKeeperNotInstalled(f"${_JAVA_ENV}={configured!r} is not an executable program")
        return path
    path = shutil.which("java")
    if path is None:
        raise ZooKeeperNotInstalled(
            "java is not on PATH (Debian's zookeeper package brings one: install it with "
            f"scripts/servers, or set ${_JAVA_ENV})"
        )
    return path


def zookeeper_classpath() -> str:
    """The JVM class path that runs ZooKeeper: ``$TUMBLER_ZOOKEEPER_CLASSPATH`` (entries
    separated by ``:``), else Debian's jar and, if installed, ``slf4j-simple.jar``.

    Raises :class:`ZooKeeperNotInstalled` naming the first entry that does not exist.
    """
    configured = os.environ.get(_CLASSPATH_ENV)
    if configured:
        for entry in configured.split(os.pathsep):
            # "dir/*" is the JVM's spelling of every jar in dir
            path = Path(entry[:-2] if entry.endswith("/*") else entry)
            if entry and not path.exists():
                raise ZooKeeperNotInstalled(
                    f"${_CLASSPATH_ENV} names {entry!r}, which does not exist"
                )
        return configured
    if not _DEBIAN_JAR.is_file():
        raise ZooKeeperNotInstalled(
            f"ZooKeeper's jar {_DEBIAN_JAR} is missing (install Debian's zookeeper package with "
            f"scripts/servers, or set ${_CLASSPATH_ENV})"
        )
    entries = [_DEBIAN_JAR]
    entries.extend(jar for jar in (_SLF4J_SIMPLE, _NETTY_CODEC) if jar.is_file())
    return os.pathsep.join(str(entry) for entry in entries)


def super_digest(password: str) -> str:
    """ZooKeeper's ``superDigest`` value for ``password``: ``super:`` and the base64 of the
    SHA-1 of ``super:<password>``, the digest scheme's documented form."""
    credentials = f"{SUPER_USER}:{password}".encode()
    digest = base64.b64encode(hashlib.sha1(credentials).digest()).decode("ascii")
    return f"{SUPER_USER}:{digest}"


def four_letter_word(
    host: str,
    port: int,
    word: str,
    timeout: float = _PROBE_TIMEOUT,
    tls: ssl.SSLContext | None = None,
) -> str:
    """Send a four-letter word (``ruok``, ``srvr``, ...) to a server and return its answer.

    ``tls`` is the context to speak TLS with, to a secure client port. Raises ``OSError`` (an
    ``ssl.SSLError`` too) if the server cannot be reached or does not finish answering within
    ``timeout`` seconds. A word the server does not allow gets a "not in the whitelist" text,
    not an error.
    """
    if len(word) != 4 or not word.isascii() or not word.isalpha():
        raise InvalidArgument(f"a four-letter word is four ASCII letters, not {word!r}")
    chunks: list[bytes] = []
    with contextlib.ExitStack() as stack:
        connection = stack.enter_context(socket.create_connection((host, port), timeout=timeout))
        if tls is not None:
            connection = stack.enter_context(tls.wrap_socket(connection, server_hostname=host))
        connection.sendall(word.encode("ascii"))
        # the server answers, then closes; an empty read is the end of the answer
        while chunk := connection.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def _mode(answer: str) -> str | None:
    for line in answer.splitlines():
        if line.startswith("Mode:"):
            return line.partition(":")[2].strip()
    return None


def _properties_value(value: str | Path) -> str:
    # zoo.cfg is a Java properties file: a backslash starts an escape
    return str(value).replace("\\", "\\\\")


def _write_key_store(tls: TLSFiles, path: Path) -> None:
    """The server's certificate chain and key in one PEM file, the key as PKCS#8: ZooKeeper's
    PEM key store reads no other key form (trustme writes EC keys in OpenSSL's own)."""
    from cryptography.hazmat.primitives import serialization  # only TLS servers need it

    key = serialization.load_pem_private_key(tls.server_key_path.read_bytes(), password=None)
    pkcs8 = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.touch(mode=0o600)
    path.write_bytes(tls.server_cert_path.read_bytes() + pkcs8)


class ZooKeeperServer(ProcessLauncher, TLSServerFiles):
    """One standalone ZooKeeper server on a free ``127.0.0.1`` port, in a directory of its own.

    Nothing runs until :meth:`start`; ``with ZooKeeperServer() as server:`` starts it and, on
    exit, :meth:`close` s it. :meth:`stop` and :meth:`kill` end the process but keep the port
    and the data directory, so :meth:`start` (or :meth:`restart`) brings the same server back
    with its znodes (sessions survive too, if they have not expired meanwhile).

    ``workdir`` is where the server's files go; without one the server makes a temporary
    directory and removes it on :meth:`close` (a given ``workdir`` is left for the caller, so
    its log can still be read after a failure). Times are in milliseconds, as in ``zoo.cfg``:
    ``tick_time``, and the bounds the server puts on the session timeout a client asks for.
    ``super_password`` sets ``superDigest``: a client that adds the digest credentials
    :attr:`super_auth` may do anything to any znode, whatever its ACL. ``force_sync`` makes
    the server fsync its transaction log (off by default: only a power cut, not a SIGKILL,
    loses what is not synced). ``max_heap`` is the JVM's ``-Xmx``; ``jvm_options`` are added
    to the JVM's command line and ``extra_config`` lines (``key=value``) to ``zoo.cfg``.

    ``tls`` (the files of :func:`~tumbler.testing.servers.make_tls_files`) makes the server speak
    only TLS, its certificate signed by the files' CA; ``tls_client_auth`` is ``"want"`` (a
    client may present a certificate of that CA, and need not) or ``"need"`` (it must). The
    URLs are then ``zookeepers://`` and :meth:`connection_kwargs` carries the CA and the client
    certificate.
    """

    error = ZooKeeperServerError
    program = "ZooKeeper"

    def __init__(
        self,
        workdir: str | Path | None = None,
        *,
        port: int | None = None,
        tick_time: int = DEFAULT_TICK_TIME,
        min_session_timeout: int = DEFAULT_MIN_SESSION_TIMEOUT,
        max_session_timeout: int = DEFAULT_MAX_SESSION_TIMEOUT,
        super_password: str | None = None,
        force_sync: bool = False,
        max_heap: str = "128m",
        jvm_options: Sequence[str] = (),
        extra_config: Sequence[str] = (),
        startup_timeout: float = ZOOKEEPER_STARTUP_TIMEOUT,
        tls: TLSFiles | None = None,
        tls_client_auth: str = "want",
    ) -> None:
        if tls_client_auth not in TLS_CLIENT_AUTH:
            raise InvalidArgument(
                f"tls_client_auth must be {' or '.join(TLS_CLIENT_AUTH)}: {tls_client_auth!r}"
            )
        for name, value in (
            ("tick_time", tick_time),
            ("min_session_timeout", min_session_timeout),
            ("max_session_timeout", max_session_timeout),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidArgument(f"{name} is a positive number of milliseconds: {value!r}")
        if min_session_timeout > max_session_timeout:
            raise InvalidArgument(
                f"min_session_timeout ({min_session_timeout} ms) is above "
                f"max_session_timeout ({max_session_timeout} ms)"
            )
        if super_password is not None and (
            not super_password or any(char in super_password for char in "\r\n")
        ):
            raise InvalidArgument("super_password must be non-empty and on one line")
        for line in extra_config:
            if "=" not in line or "\n" in line:
                raise InvalidArgument(f"an extra_config line is one key=value: {line!r}")
        if startup_timeout <= 0:
            raise InvalidArgument(f"startup_timeout must be positive: {startup_timeout!r}")
        self.host = LOOPBACK
        self.port = port or 0
        self.tick_time = tick_time
        self.min_session_timeout = min_session_timeout
        self.max_session_timeout = max_session_timeout
        self.super_password = super_password
        self.force_sync = force_sync
        self.max_heap = max_heap
        self.jvm_options = list(jvm_options)
        self.extra_config = list(extra_config)
        self.startup_timeout = startup_timeout
        self.tls = tls
        self.tls_client_auth = tls_client_auth
        self._use_directory(workdir, "tumbler-zookeeper-")
        self.config_path = self.dir / "zoo.cfg"
        self.data_dir = self.dir / "data"
        #: a TLS server's certificate chain and key in one file, the form ZooKeeper reads
        self.key_store_path = self.dir / "key-store.pem"
        #: the JVM's stdout and stderr, where ZooKeeper's log goes as well
        self.log_path = self.dir / "zookeeper.log"

    # -- addresses -------------------------------------------------------------------------

    @property
    def hosts(self) -> list[str]:
        """``["127.0.0.1:PORT"]``: the client addresses, as a ZooKeeper client takes them."""
        return [f"{self.host}:{self.port}"]

    @property
    def connect_string(self) -> str:
        """The client addresses joined by commas (kazoo's ``hosts=``)."""
        return ",".join(self.hosts)

    @property
    def scheme(self) -> str:
        """``zookeepers`` for a TLS server, ``zookeeper`` otherwise."""
        return "zookeeper" if self.tls is None else "zookeepers"

    def url_for(self, chroot: str = "") -> str:
        """``zookeeper://HOSTS`` (``zookeepers://`` with TLS) with ``chroot`` (``/a/b``) as the
        path, for ``tumbler.connect``. A TLS server's URL needs ``?ssl_ca_certs=`` with
        :attr:`ca_path` as well, unless the system trusts the CA."""
        if chroot and not chroot.startswith("/"):
            raise InvalidArgument(f"a chroot starts with '/': {chroot!r}")
        return f"{self.scheme}://{self.connect_string}{chroot}"

    @property
    def url(self) -> str:
        """``zookeeper://127.0.0.1:PORT`` (``zookeepers://`` with TLS)."""
        return self.url_for()

    def _tls_files(self) -> TLSFiles:
        if self.tls is None:
            raise ZooKeeperServerError(f"{self!r} does not speak TLS")
        return self.tls

    def connection_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for a kazoo client of this server: the hosts and, with TLS, the CA
        and the client certificate (the host name is checked)."""
        kwargs: dict[str, Any] = {"hosts": self.connect_string}
        if self.tls is not None:
            kwargs.update(
                use_ssl=True,
                ca=str(self.tls.ca_path),
                certfile=str(self.tls.client_cert_path),
                keyfile=str(self.tls.client_key_path),
                check_hostname=True,
            )
        return kwargs

    def _probe_context(self) -> ssl.SSLContext | None:
        if self.tls is None:
            return None
        context = ssl.create_default_context(cafile=str(self.tls.ca_path))
        # a readiness probe: the CA is checked, the name need not be (the files may name
        # another host, to test clients that check it)
        context.check_hostname = False
        context.load_cert_chain(str(self.tls.client_cert_path), str(self.tls.client_key_path))
        return context

    @property
    def super_digest(self) -> str | None:
        """The ``superDigest`` the server runs with, ``None`` without a ``super_password``."""
        return None if self.super_password is None else super_digest(self.super_password)

    @property
    def super_auth(self) -> tuple[str, str]:
        """``("digest", "super:PASSWORD")``: the scheme and credentials a client adds (kazoo:
        ``auth_data=[server.super_auth]``) to act as the super user."""
        if self.super_password is None:
            raise ZooKeeperServerError("this server has no super user (no super_password)")
        return ("digest", f"{SUPER_USER}:{self.super_password}")

    # -- four-letter words -----------------------------------------------------------------

    def command(self, word: str, timeout: float = _PROBE_TIMEOUT) -> str:
        """The server's answer to a four-letter word (see :func:`four_letter_word`), over TLS
        to a TLS server."""
        return four_letter_word(self.host, self.port, word, timeout, self._probe_context())

    def _ask(self, word: str) -> str | None:
        try:
            return self.command(word)
        except OSError:
            return None

    def mode(self) -> str | None:
        """What ``srvr`` says the server is: ``"standalone"``, ``"leader"``, ``"follower"``
        (``"observer"``), or ``None`` if it does not serve (down, or an election is under
        way)."""
        answer = self._ask("srvr")
        return None if answer is None else _mode(answer)

    @property
    def serving(self) -> bool:
        """Whether the server answers clients now (it leads, follows or stands alone)."""
        return self.mode() in _SERVING_MODES

    def _ready(self) -> bool:
        # ruok says "imok" as soon as the client port is open, before the server has loaded
        # its data; only srvr tells that it serves
        return self._ask("ruok") == "imok" and self.serving

    # -- configuration ---------------------------------------------------------------------

    def _config_lines(self) -> list[str]:
        return [
            f"tickTime={self.tick_time}",
            f"dataDir={_properties_value(self.data_dir)}",
            *self._client_port_lines(),
            f"minSessionTimeout={self.min_session_timeout}",
            f"maxSessionTimeout={self.max_session_timeout}",
            # the Jetty admin server would take port 8080
            "admin.enableServer=false",
            f"4lw.commands.whitelist={','.join(FOUR_LETTER_WORDS)}",
            f"forceSync={'yes' if self.force_sync else 'no'}",
            # every client of a test comes from 127.0.0.1: no per-address cap
            "maxClientCnxns=0",
            # kilobytes: the default preallocates 64 MB per transaction log
            "preAllocSize=1024",
            *self.extra_config,
        ]

    def _client_port_lines(self) -> list[str]:
        if self.tls is None:
            return [f"clientPort={self.port}", f"clientPortAddress={self.host}"]
        # no clientPort: nothing reaches this server in clear
        return [
            f"secureClientPort={self.port}",
            f"secureClientPortAddress={self.host}",
            # only Netty serves TLS (unknown keys become zookeeper.* system properties)
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            f"ssl.keyStore.location={_properties_value(self.key_store_path)}",
            "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={_properties_value(self.tls.ca_path)}",
            "ssl.trustStore.type=PEM",
            f"ssl.clientAuth={self.tls_client_auth}",
        ]

    def _write_files(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.tls is not None:
            _write_key_store(self.tls, self.key_store_path)
        self.config_path.write_text("\n".join(self._config_lines()) + "\n")

    def _command(self) -> list[str]:
        options = [
            f"-Xmx{self.max_heap}",
            # a small machine shared by several JVMs: one GC thread, and only the quick
            # compiler, which also makes start-up cheaper
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:-UsePerfData",
            "-Djava.net.preferIPv4Stack=true",
            # after a member is lost, look for the new leader every second at most, not 60
            "-Dzookeeper.fastleader.maxNotificationInterval=1000",
            "-Dzookeeper.cnxTimeout=1000",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
        ]
        if self.super_password is not None:
            digest = super_digest(self.super_password)
            options.append(f"-Dzookeeper.DigestAuthenticationProvider.superDigest={digest}")
        return [
            java_binary(),
            *options,
            *self.jvm_options,
            "-cp",
            zookeeper_classpath(),
            _MAIN_CLASS,
            str(self.config_path),
        ]

    # -- lifecycle -------------------------------------------------------------------------

    def _executor_options(self) -> dict[str, Any]:
        return {"expected_returncode": _EXIT_ON_SIGTERM}

    def close(self) -> None:
        """Stop the process and remove the directory if the server made it. The server cannot
        be started again."""
        self.stop()
        self._discard_directory()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<{type(self).__name__} {self.host}:{self.port} {state} in {self.dir}>"


class ZooKeeperMember(ZooKeeperServer):
    """One member of a :class:`ZooKeeperEnsemble`: a server with an id (``myid``, from 1) and,
    besides its client port, a quorum port (followers to the leader) and an election port.

    Made and started by the ensemble, which knows every member's ports; :meth:`start` on its
    own waits only until the JVM answers ``ruok`` - serving needs a quorum, which is the
    ensemble's to wait for.
    """

    def __init__(
        self,
        workdir: str | Path,
        myid: int,
        *,
        init_limit: int,
        sync_limit: int,
        **options: Any,
    ) -> None:
        super().__init__(workdir, **options)
        self.myid = myid
        self.init_limit = init_limit
        self.sync_limit = sync_limit
        self.quorum_port = 0
        self.election_port = 0
        #: every member's ``server.N=...`` line, set by the ensemble before each start
        self.server_lines: list[str] = []

    @property
    def server_line(self) -> str:
        """This member's line in every member's ``zoo.cfg``."""
        return f"server.{self.myid}={self.host}:{self.quorum_port}:{self.election_port}"

    def start(self: _Server) -> _Server:
        """Start the JVM on the member's ports and wait until it answers ``ruok`` (see the
        class's docstring: :meth:`ZooKeeperEnsemble.restart` also waits for it to serve)."""
        assert isinstance(self, ZooKeeperMember)
        if not self.server_lines:
            raise ZooKeeperServerError(
                f"member {self.myid} has no ensemble to join: start the ZooKeeperEnsemble"
            )
        return super().start()

    def _pick_ports(self) -> None:
        self.port = free_port()
        self.quorum_port = free_port()
        self.election_port = free_port()

    def _ready(self) -> bool:
        return self._ask("ruok") == "imok"

    def _config_lines(self) -> list[str]:
        return [
            *super()._config_lines(),
            # in ticks: how long a follower may take to connect and sync to a new leader,
            # and how far it may fall behind before the leader drops it
            f"initLimit={self.init_limit}",
            f"syncLimit={self.sync_limit}",
            *self.server_lines,
        ]

    def _write_files(self) -> None:
        super()._write_files()
        (self.data_dir / "myid").write_text(f"{self.myid}\n")

    def _port_taken_message(self) -> str:
        return (
            f"port {self.port}, {self.quorum_port} or {self.election_port} on {self.host} "
            "is taken by another program"
        )

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return (
            f"<ZooKeeperMember {self.myid} {self.host}:{self.port} "
            f"(quorum {self.quorum_port}, election {self.election_port}) {state} in {self.dir}>"
        )


class ZooKeeperEnsemble(Launcher):
    """A replicated ZooKeeper ensemble of ``size`` members (3 by default) on loopback ports.

    Nothing runs until :meth:`start`; ``with ZooKeeperEnsemble() as ensemble:`` starts it and
    closes it on exit. :attr:`members` are the :class:`ZooKeeperMember` s, indexed from 0
    (member ``i`` has ``myid`` ``i + 1``); :meth:`kill`, :meth:`stop` and :meth:`restart` act
    on one of them and keep its ports and data directory, the way a crashed or rebooted
    machine comes back. :attr:`url` names every member, as a client of the whole ensemble
    would. ``init_limit`` and ``sync_limit`` are in ticks (``zoo.cfg``'s ``initLimit`` and
    ``syncLimit``). ``init_limit`` is also how long a member elected leader waits for a
    quorum to follow it before it gives up and another election begins: when a paused leader
    comes back in the middle of an election, members can be elected whom nobody follows, each
    costing that wait, so it is kept as short as a follower's sync of a small tree allows
    (2 s at the default tick). The other options are :class:`ZooKeeperServer`'s and apply to
    every member. Each member lives in ``workdir/member-N`` (a temporary directory, removed on
    :meth:`close`, if no ``workdir``).
    """

    def __init__(
        self,
        workdir: str | Path | None = None,
        *,
        size: int = 3,
        init_limit: int = 10,
        sync_limit: int = 10,
        tick_time: int = DEFAULT_TICK_TIME,
        min_session_timeout: int = DEFAULT_MIN_SESSION_TIMEOUT,
        max_session_timeout: int = DEFAULT_MAX_SESSION_TIMEOUT,
        super_password: str | None = None,
        force_sync: bool = False,
        max_heap: str = "128m",
        jvm_options: Sequence[str] = (),
        extra_config: Sequence[str] = (),
        startup_timeout: float = ZOOKEEPER_STARTUP_TIMEOUT,
    ) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 3:
            raise InvalidArgument(f"an ensemble has at least 3 members, not {size!r}")
        for name, value in (("init_limit", init_limit), ("sync_limit", sync_limit)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidArgument(f"{name} is a positive number of ticks: {value!r}")
        self._use_directory(workdir, "tumbler-zookeeper-ensemble-")
        self.startup_timeout = startup_timeout
        self.members = [
            ZooKeeperMember(
                self.dir / f"member-{myid}",
                myid,
                init_limit=init_limit,
                sync_limit=sync_limit,
                tick_time=tick_time,
                min_session_timeout=min_session_timeout,
                max_session_timeout=max_session_timeout,
                super_password=super_password,
                force_sync=force_sync,
                max_heap=max_heap,
                jvm_options=jvm_options,
                extra_config=extra_config,
                startup_timeout=startup_timeout,
            )
            for myid in range(1, size + 1)
        ]
        #: seconds the last :meth:`start` took, until every member served
        self.startup_seconds = 0.0

    # -- addresses -------------------------------------------------------------------------

    @property
    def hosts(self) -> list[str]:
        """Every member's client address, ``["127.0.0.1:PORT", ...]``."""
        return [host for member in self.members for host in member.hosts]

    @property
    def connect_string(self) -> str:
        """Every member's client address joined by commas (kazoo's ``hosts=``)."""
        return ",".join(self.hosts)

    def url_for(self, chroot: str = "") -> str:
        """``zookeeper://HOST1,HOST2,HOST3`` with ``chroot`` as the path."""
        if chroot and not chroot.startswith("/"):
            raise InvalidArgument(f"a chroot starts with '/': {chroot!r}")
        return f"zookeeper://{self.connect_string}{chroot}"

    @property
    def url(self) -> str:
        """``zookeeper://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3``."""
        return self.url_for()

    @property
    def super_auth(self) -> tuple[str, str]:
        """The super user's scheme and credentials (see :attr:`ZooKeeperServer.super_auth`)."""
        return self.members[0].super_auth

    # -- state -----------------------------------------------------------------------------

    def modes(self) -> list[str | None]:
        """Each member's ``srvr`` mode (``"leader"``, ``"follower"``, or ``None``)."""
        return [member.mode() if member.running else None for member in self.members]

    def leader(self) -> int | None:
        """The index in :attr:`members` of the member that leads now; ``None`` while none
        does (an election is under way, or there is no quorum) or, for the moment a cut-off
        old leader takes to notice, while two claim to."""
        leaders = [index for index, mode in enumerate(self.modes()) if mode == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    def _has_quorum(self, modes: list[str | None]) -> bool:
        serving = [mode for mode in modes if mode in ("leader", "follower")]
        return serving.count("leader") == 1 and len(serving) > len(self.members) // 2

    def wait_for_quorum(self, timeout: float = ZOOKEEPER_STARTUP_TIMEOUT) -> int:
        """Wait until one member leads and a majority serve, so clients can read and write;
        returns the leader's index. Raises :class:`ZooKeeperServerError`, with each member's
        state and log, if that takes more than ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            self._wait_until(
                self._has_quorum,
                max(0.0, deadline - time.monotonic()),
                "to have a leader and a quorum",
            )
            leader = self.leader()
            if leader is not None:
                return leader
            # leadership changed hands between the two looks: look again

    def _wait_until(
        self, condition: Callable[[list[str | None]], bool], timeout: float, what: str
    ) -> None:
        deadline = time.monotonic() + timeout
        while not condition(self.modes()):
            if time.monotonic() > deadline:
                raise ZooKeeperServerError(
                    f"the ensemble {self.connect_string} failed {what} within {timeout:g} s:\n"
                    + "\n".join(self._describe(member) for member in self.members)
                )
            # nothing to wait on but the members' election
            time.sleep(0.05)

    def _describe(self, member: ZooKeeperMember) -> str:
        state = f"mode {member.mode()}" if member.running else "not running"
        return f"member {member.myid} ({member.host}:{member.port}): {state}\n{member.log_tail(8)}"

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> ZooKeeperEnsemble:
        """Start every member that is not running and wait until all of them serve (one
        leads, the others follow); returns the ensemble itself.

        The JVMs are launched together and then waited for, so their start-ups overlap. The
        first start picks free ports for every member (all again if one is taken); later
        starts reuse them. On failure every member is killed and
        :class:`ZooKeeperServerError` says why, with each member's log.
        """
        began = time.monotonic()
        java_binary()
        zookeeper_classpath()  # missing software is reported before anything starts
        pick_ports = self.members[0].port == 0
        attempts = BIND_ATTEMPTS if pick_ports else 1
        try:
            for attempt in range(1, attempts + 1):
                if pick_ports:
                    for member in self.members:
                        member._pick_ports()
                lines = [member.server_line for member in self.members]
                try:
                    self._start_members(lines, began)
                    break
                except PortTaken as taken:
                    self.kill()
                    if attempt == attempts:
                        raise ZooKeeperServerError(str(taken)) from None
        except BaseException:
            self.kill()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def _start_members(self, lines: list[str], began: float) -> None:
        launched: list[ZooKeeperMember] = []
        for member in self.members:
            member.server_lines = lines
            if not member.running:
                member._spawn()
                launched.append(member)
        for member in launched:
            member._await_started()
        remaining = max(1.0, self.startup_timeout - (time.monotonic() - began))
        try:
            self._wait_until(
                lambda modes: self._has_quorum(modes) and None not in modes,
                remaining,
                "to elect a leader with every member following",
            )
        except ZooKeeperServerError:
            # a quorum or election port taken after it was picked: no exit, just no quorum
            if any("Address already in use" in member.log_tail(200) for member in launched):
                raise PortTaken(
                    "a quorum or election port was taken by another program: "
                    + ", ".join(member.server_line for member in launched)
                ) from None
            raise

    def kill(self, index: int | None = None) -> None:
        """SIGKILL member ``index`` (every member if ``None``), as in a crash."""
        for member in self._chosen(index):
            member.kill()

    def pause(self, index: int) -> None:
        """SIGSTOP member ``index``: its connections stay open and nothing answers on them,
        clients' and the other members' alike, until :meth:`resume`."""
        self._signal(index, signal.SIGSTOP)

    def resume(self, index: int) -> None:
        """SIGCONT member ``index`` after :meth:`pause`."""
        self._signal(index, signal.SIGCONT)

    def _signal(self, index: int, signum: int) -> None:
        member = self.members[index]
        pid = member.pid
        if pid is None:
            raise ZooKeeperServerError(f"member {member.myid} is not running")
        os.kill(pid, signum)

    def stop(self, index: int | None = None) -> None:
        """SIGTERM member ``index`` (every member if ``None``), as an orderly shutdown."""
        for member in self._chosen(index):
            member.stop()

    def restart(self, index: int, timeout: float | None = None) -> ZooKeeperMember:
        """Stop member ``index`` if it runs, start it on its ports and data directory, and
        wait (``timeout`` seconds, by default ``startup_timeout``) until it serves again
        (it follows, or leads) within a quorum; returns the member."""
        member = self.members[index]
        member.stop()
        member.start()
        self._wait_until(
            lambda modes: self._has_quorum(modes) and modes[index] in ("leader", "follower"),
            self.startup_timeout if timeout is None else timeout,
            f"to take member {member.myid} back",
        )
        return member

    def _chosen(self, index: int | None) -> list[ZooKeeperMember]:
        return list(self.members) if index is None else [self.members[index]]

    def close(self) -> None:
        """Stop every member and remove the directory if the ensemble made it. The ensemble
        cannot be started again."""
        for member in self.members:
            member.close()
        self._discard_directory()

    def __repr__(self) -> str:
        return f"<ZooKeeperEnsemble {self.connect_string} in {self.dir}>"
