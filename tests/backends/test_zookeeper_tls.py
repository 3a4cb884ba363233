"""ZooKeeper over TLS (``zookeepers://``): URL options, what a recording proxy sees, and the
refusals of certificates either way, in both flavours.

The contract suite runs on TLS too (its ``zookeeper-tls`` backend); these are the cases only
TLS has. Every case runs against a real ZooKeeper started by the fixtures in tests/servers (or
by the test, for a certificate of its own), speaking TLS on a Netty ``secureClientPort``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from unittest.mock import ANY

import pytest
import trustme

import tumbler
import tumbler.aio
from tumbler._url import parse_url
from tumbler.backends.zookeeper.common import TLSConfig, parse_config, tls_context
from tumbler.errors import BackendUnavailable, InvalidURL, TumblerError
from tumbler.testing.backends.zookeeper.server import ZooKeeperServer
from tumbler.testing.servers import make_tls_files

#: how long a refusal may take: a wrong certificate must not look like an ensemble that is down
NO_HANG = 5.0
PASSWORD = "tls-only-Pa55word"
LOCK_NAME = "payroll-secret-lock-name"
FLAVOURS = ["sync", "asyncio"]


def base_path() -> str:
    return f"/tumbler-tls-{uuid.uuid4().hex[:12]}"


def tls_url(server: ZooKeeperServer, port: int | None = None, **options: object) -> str:
    """A ``zookeepers://`` URL of ``server`` (or of ``port`` on its host) with credentials."""
    query = "&".join(f"{key}={value}" for key, value in options.items())
    host = f"{server.host}:{port or server.port}"
    return f"zookeepers://app:{PASSWORD}@{host}{base_path()}" + (f"?{query}" if query else "")


def take_and_release(flavour: str, url: str, name: str = "tls") -> int:
    """Connect in the flavour, take lock ``name`` and release it; returns its token."""
    if flavour == "sync":
        with tumbler.connect(url) as locks, locks.lock(name, timeout=10) as hold:
            return hold.token

    async def run() -> int:
        async with (
            await tumbler.aio.connect(url) as locks,
            locks.lock(name, timeout=10) as hold,
        ):
            return hold.token

    return asyncio.run(run())


def refusal(flavour: str, url: str) -> TumblerError:
    """The error connecting in the flavour ends with; fails the test if it takes long."""
    began = time.monotonic()
    with pytest.raises(TumblerError) as refused:
        take_and_release(flavour, url)
    assert time.monotonic() - began < NO_HANG, "refused only after a wait"
    assert PASSWORD not in str(refused.value)
    return refused.value


# -- URLs ------------------------------------------------------------------------------------


def test_tls_url_options(tmp_path: Path) -> None:
    tls = make_tls_files(tmp_path)
    both = tmp_path / "client-and-key.pem"
    both.write_bytes(tls.client_cert_path.read_bytes() + tls.client_key_path.read_bytes())
    config = parse_config(
        parse_url(
            f"zookeepers://zk1,zk2:2281/app?ssl_ca_certs={tls.ca_path}"
            f"&ssl_certfile={both}&ssl_check_hostname=false"
        )
    )
    assert config.connect_string == "zk1:2181,zk2:2281"
    assert config.tls == TLSConfig(str(tls.ca_path), str(both), None, check_hostname=False)
    context = tls_context(config)
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is False
    # only the CA of the URL: not the system's as well
    assert [ca["subject"] for ca in context.get_ca_certs()] == [
        ((("organizationName", "tumbler tests"),), (("organizationalUnitName", ANY),))
    ]
    default = parse_config(parse_url("zookeepers://zk"))
    assert default.tls == TLSConfig(None, None, None, check_hostname=True)
    context = tls_context(default)
    assert context is not None
    assert context.check_hostname is True
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert parse_config(parse_url("zookeeper://zk")).tls is None


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("zookeeper://zk?ssl_ca_certs=/etc/ca.pem", "need a zookeepers:// URL"),
        ("zookeeper://zk?ssl_check_hostname=true", "need a zookeepers:// URL"),
        ("zookeepers://zk?ssl_keyfile=/etc/key.pem", "ssl_keyfile needs ssl_certfile"),
        ("zookeepers://zk?ssl_check_hostname=perhaps", "ssl_check_hostname"),
        ("zookeepers://zk?ssl_ca_cert=/etc/ca.pem", "unknown URL option"),
    ],
)
def test_bad_tls_urls_are_refused(url: str, message: str) -> None:
    with pytest.raises(InvalidURL, match=message):
        parse_config(parse_url(url))


# -- nothing in clear ------------------------------------------------------------------------


class Recorder:
    """A TCP relay on loopback that keeps every byte it forwards, both ways."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.seen = bytearray()
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        self.threads = [threading.Thread(target=self.accept, daemon=True)]
        self.threads[0].start()

    def accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(self.upstream)
            with self.lock:
                self.sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                thread = threading.Thread(target=self.pump, args=(source, sink), daemon=True)
                thread.start()
                self.threads.append(thread)

    def pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                with self.lock:
                    self.seen += chunk
                sink.sendall(chunk)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        # shutdown, not close alone, wakes a thread blocked in accept or recv on the socket;
        # the accepting thread first, so that no connection comes in after
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.threads[0].join(timeout=10)
        with self.lock:
            sockets = list(self.sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in self.threads:
            thread.join(timeout=10)
            assert not thread.is_alive()
        for sock in [self.listener, *sockets]:
            sock.close()

    def saw(self, text: str | bytes) -> bool:
        data = text.encode() if isinstance(text, str) else text
        with self.lock:
            return data in self.seen


@contextlib.contextmanager
def recording(server: ZooKeeperServer) -> Iterator[Recorder]:
    recorder = Recorder((server.host, server.port))
    try:
        yield recorder
    finally:
        recorder.close()


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_recording_proxy_sees_nothing_of_a_tls_session(
    flavour: str, zookeeper_server: ZooKeeperServer, zookeeper_tls_server: ZooKeeperServer
) -> None:
    # in clear, the proxy reads the password, the lock name and the holder's description ...
    with recording(zookeeper_server) as clear:
        url = f"zookeeper://app:{PASSWORD}@127.0.0.1:{clear.port}{base_path()}"
        take_and_release(flavour, url, LOCK_NAME)
    for secret in (PASSWORD, LOCK_NAME, b'"holder"', b"pid="):
        assert clear.saw(secret), secret
    # ... over TLS it reads none of them
    server = zookeeper_tls_server
    with recording(server) as tls:
        take_and_release(flavour, tls_url(server, tls.port, ssl_ca_certs=server.ca_path), LOCK_NAME)
    assert tls.seen, "nothing went through the proxy"
    for secret in (PASSWORD, LOCK_NAME, b'"holder"', b"pid="):
        assert not tls.saw(secret), secret


# -- certificates ----------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_without_the_servers_ca_the_connection_is_refused_at_once(
    flavour: str, zookeeper_tls_server: ZooKeeperServer, tmp_path: Path
) -> None:
    server = zookeeper_tls_server
    stranger = tmp_path / "stranger-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(stranger))
    for url in (
        tls_url(server),  # the system's CAs only
        tls_url(server, ssl_ca_certs=stranger),
        tls_url(server, ssl_ca_certs=stranger, ssl_check_hostname="false"),
    ):
        error = refusal(flavour, url)
        assert isinstance(error, BackendUnavailable), error
        assert "certificate verify failed" in str(error)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_client_in_clear_to_the_tls_port_is_told_to_use_zookeepers(
    flavour: str, zookeeper_tls_server: ZooKeeperServer
) -> None:
    server = zookeeper_tls_server
    # the hint needs an attempt to have ended: the server closes at once, 3 s is room to spare
    url = f"zookeeper://app:{PASSWORD}@{server.connect_string}{base_path()}?connect_timeout=3"
    with pytest.raises(BackendUnavailable, match="use zookeepers://") as refused:
        take_and_release(flavour, url)
    assert PASSWORD not in str(refused.value)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_tls_client_to_a_port_in_clear_is_backend_unavailable(
    flavour: str, zookeeper_server: ZooKeeperServer, zookeeper_tls_server: ZooKeeperServer
) -> None:
    url = tls_url(zookeeper_server, ssl_ca_certs=zookeeper_tls_server.ca_path, connect_timeout=1)
    with pytest.raises(BackendUnavailable) as refused:
        take_and_release(flavour, url)
    assert PASSWORD not in str(refused.value)


def test_host_names_and_client_certificates(tmp_path: Path) -> None:
    """A server whose certificate names another host, and which needs client certificates:
    the host name is checked unless ``ssl_check_hostname=false``, and a client without a
    certificate is refused at once."""
    tls = make_tls_files(tmp_path / "tls", server_names=("tumbler-elsewhere.test",))
    with ZooKeeperServer(tmp_path / "zookeeper", tls=tls, tls_client_auth="need") as server:
        certificate = {"ssl_certfile": tls.client_cert_path, "ssl_keyfile": tls.client_key_path}
        both = tmp_path / "client-and-key.pem"
        both.write_bytes(tls.client_cert_path.read_bytes() + tls.client_key_path.read_bytes())
        for flavour in FLAVOURS:
            error = refusal(flavour, tls_url(server, ssl_ca_certs=tls.ca_path, **certificate))
            assert isinstance(error, BackendUnavailable), error
            assert "mismatch, certificate is not valid for '127.0.0.1'" in str(error)
            unchecked = {"ssl_ca_certs": tls.ca_path, "ssl_check_hostname": "false"}
            error = refusal(flavour, tls_url(server, **unchecked))  # no client certificate
            assert isinstance(error, BackendUnavailable), error
            assert "ALERT_BAD_CERTIFICATE" in str(error) or "CERTIFICATE_REQUIRED" in str(error)
            first = take_and_release(flavour, tls_url(server, **unchecked, **certificate))
            # the key may be in the certificate's file
            second = take_and_release(flavour, tls_url(server, **unchecked, ssl_certfile=both))
            assert second > first
