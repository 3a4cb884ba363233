"""Who may touch the etcd backend's leases (docs/security.md, etcd).

etcd checks no right on its lease calls: with password authentication alone, a client that
never logged in lists every lease, reads every key a lease carries (every lock's entries) and
keeps a crashed holder's lease alive for as long as it likes, so the lock stays taken. The
cases show that on a real etcd, and that the set-up docs/security.md recommends, members that
take only clients with a certificate of their CA (``--client-cert-auth``), keeps every other
client out at the TLS handshake while tumbler, with its certificate, locks as before.
"""

from __future__ import annotations

import base64
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import trustme

import tumbler
import tumbler.aio
from tumbler._url import parse_url
from tumbler.backends.etcd.common import line_key, parse_config
from tumbler.testing.backends.etcd.server import EtcdServer
from tumbler.testing.servers import ServerError, make_tls_files

from ..servers.fixtures import server_unavailable

PATIENCE = 30.0
#: the lease of the cases' clients: a dead one's keys go this long after its last keep-alive
LEASE_TTL = 3


def url_of(server: EtcdServer) -> str:
    """The server's URL (as the user ``tumbler``) with a prefix of the case's own."""
    parts = urlsplit(server.url)
    query = "&".join(filter(None, [parts.query, f"lease_ttl={LEASE_TTL}"]))
    return urlunsplit(
        parts._replace(path=f"{parts.path}/test-{uuid.uuid4().hex[:12]}", query=query)
    )


def leases_carrying(client: httpx.Client, keys: bytes) -> list[int]:
    """Every lease, of those ``client`` may list, that carries a key starting with ``keys``."""
    found = []
    for lease in post(client, "/v3/lease/leases", {})["leases"]:
        carried = post(client, "/v3/lease/timetolive", {"ID": lease["ID"], "keys": True})
        if any(base64.b64decode(key).startswith(keys) for key in carried.get("keys", [])):
            found.append(int(lease["ID"]))
    return found


def lock_keys(url: str, name: str) -> bytes:
    """What every entry key of lock ``name`` under the URL's prefix starts with."""
    return line_key(parse_config(parse_url(url)).prefix, name)


def crash_holding(url: str, name: str) -> None:
    """A client in a process of its own takes ``name`` and dies (SIGKILL) holding it: its
    lease is left to run out on the server."""
    script = (
        "import os, tumbler\n"
        f"tumbler.connect({url!r}).lock({name!r}).acquire()\n"
        "print('held', flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    crashed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert crashed.stdout == "held\n", crashed.stderr


def post(client: httpx.Client, path: str, body: dict[str, Any]) -> Any:
    reply = client.post(path, json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()


# -- password authentication alone -------------------------------------------------------------


@pytest.fixture
def password_only(fresh_etcd_server: EtcdServer) -> EtcdServer:
    """An etcd member with authentication on and no client certificates: clients in clear,
    ``tumbler`` logging in with its password."""
    fresh_etcd_server.enable_auth()
    return fresh_etcd_server


def test_with_passwords_alone_anyone_reads_every_lease_and_keeps_a_dead_holders_alive(
    password_only: EtcdServer,
) -> None:
    url = url_of(password_only)
    crash_holding(url, "crashed")
    crashed = time.monotonic()
    with tumbler.connect(url) as locks, httpx.Client(base_url=password_only.client_url) as anyone:
        # authentication is on: the stranger may read no key...
        refused = anyone.post("/v3/kv/range", json={"key": base64.b64encode(b"/").decode()})
        assert refused.status_code != 200
        # ...but lists every lease, and reads every key a lease carries
        holders = leases_carrying(anyone, lock_keys(url, "crashed"))
        assert len(holders) == 1
        # and keeps the dead holder's lease alive: the lock stays taken past its lease
        while time.monotonic() - crashed < 2 * LEASE_TTL + 1:
            kept = post(anyone, "/v3/lease/keepalive", {"ID": holders[0]})
            assert int(kept["result"]["TTL"]) > 0
            assert not locks.lock("crashed").acquire(blocking=False)
            # the stranger's pace: well within the lease it keeps alive
            time.sleep(LEASE_TTL / 4)
        assert locks.status("crashed").locked
        # once the stranger stops, the lease runs out and the lock is free again
        assert locks.lock("crashed").acquire(timeout=PATIENCE)


# -- client certificates ---------------------------------------------------------------------


def _no_certificate() -> ssl.SSLContext:
    # the stranger need not check the server's certificate to try
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _another_cas_certificate() -> ssl.SSLContext:
    context = _no_certificate()
    trustme.CA(organization_name="not the members' CA").issue_cert(
        "tumbler-client.test"
    ).configure_cert(context)
    return context


def _the_servers_ca_only(server: EtcdServer) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(server.ca_path))


@pytest.fixture
def tls_without_client_certificates(tmp_path: Path) -> Iterator[EtcdServer]:
    """An etcd member that speaks only TLS, authentication on, and takes clients without a
    certificate."""
    try:
        tls = make_tls_files(tmp_path / "tls")
        server = EtcdServer(tmp_path / "etcd", tls=tls, client_certificates=False).start()
        server.enable_auth()
    except (ServerError, OSError) as error:
        server_unavailable(f"cannot start etcd with TLS: {error}")
    yield server
    server.close()


def test_tls_without_client_certificates_lets_anyone_read_the_leases(
    tls_without_client_certificates: EtcdServer,
) -> None:
    """TLS alone hides the traffic; it is the members' demand for a certificate of their CA
    that keeps strangers away from the leases."""
    server = tls_without_client_certificates
    url = url_of(server)
    with (
        tumbler.connect(url) as locks,
        locks.lock("exposed"),
        httpx.Client(base_url=server.client_url, verify=_no_certificate()) as anyone,
    ):
        assert len(leases_carrying(anyone, lock_keys(url, "exposed"))) == 1


@pytest.fixture
def held_on_tls(etcd_tls_server: EtcdServer) -> Iterator[tuple[str, tumbler.Lock]]:
    """A lock that tumbler, with its client certificate and password, holds on the
    member that takes only clients with a certificate of its CA."""
    url = url_of(etcd_tls_server)
    with tumbler.connect(url) as locks:
        lock = locks.lock("guarded")
        assert lock.acquire(timeout=PATIENCE)
        yield url, lock
        lock.release()


@pytest.mark.parametrize(
    "stranger",
    [
        pytest.param(lambda server: _no_certificate(), id="no-certificate"),
        pytest.param(_the_servers_ca_only, id="no-certificate-checking-the-server"),
        pytest.param(lambda server: _another_cas_certificate(), id="another-cas-certificate"),
    ],
)
def test_with_client_certificates_a_client_without_one_of_the_ca_is_refused_at_the_handshake(
    etcd_tls_server: EtcdServer, held_on_tls: tuple[str, tumbler.Lock], stranger: Any
) -> None:
    _, lock = held_on_tls
    hold = lock.hold
    assert hold is not None
    context = stranger(etcd_tls_server)
    for path, body in (
        ("/v3/lease/leases", {}),
        ("/v3/lease/timetolive", {"ID": 1, "keys": True}),
        ("/v3/lease/keepalive", {"ID": 1}),
    ):
        # the member's TLS alert, not a request it read and answered
        with (
            httpx.Client(base_url=etcd_tls_server.client_url, verify=context) as client,
            pytest.raises(httpx.TransportError, match="alert"),
        ):
            client.post(path, json=body)
    assert hold.held


def test_with_client_certificates_a_certificate_of_the_ca_is_what_reaches_the_leases(
    etcd_tls_server: EtcdServer, held_on_tls: tuple[str, tumbler.Lock]
) -> None:
    """The certificate is the boundary: a client with one of the CA's certificates and no
    password still lists the leases (the JSON gateway takes no user from the certificate),
    so the CA must sign certificates only for the lock users and operators."""
    url, _ = held_on_tls
    context = _the_servers_ca_only(etcd_tls_server)
    context.load_cert_chain(etcd_tls_server.client_cert_path, etcd_tls_server.client_key_path)
    with httpx.Client(base_url=etcd_tls_server.client_url, verify=context) as insider:
        assert leases_carrying(insider, lock_keys(url, "guarded"))
        # without the password it reads no key itself
        refused = insider.post("/v3/kv/range", json={"key": base64.b64encode(b"/").decode()})
        assert refused.status_code != 200


def test_with_client_certificates_tumbler_locks_with_its_certificate(
    etcd_tls_server: EtcdServer,
) -> None:
    url = url_of(etcd_tls_server)
    with tumbler.connect(url) as locks, tumbler.connect(url) as other:
        with locks.lock("certified"):
            assert not other.lock("certified").acquire(blocking=False)
        lock = other.lock("certified")
        assert lock.acquire(timeout=PATIENCE)
        lock.release()


@pytest.mark.asyncio
async def test_with_client_certificates_tumbler_locks_with_its_certificate_asyncio(
    etcd_tls_server: EtcdServer,
) -> None:
    url = url_of(etcd_tls_server)
    async with await tumbler.aio.connect(url) as locks, await tumbler.aio.connect(url) as other:
        async with locks.lock("certified"):
            assert not await other.lock("certified").acquire(blocking=False)
        lock = other.lock("certified")
        assert await lock.acquire(timeout=PATIENCE)
        await lock.release()
