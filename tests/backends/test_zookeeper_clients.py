"""``tumbler.connect`` (and ``tumbler.aio.connect``) given the application's ``KazooClient``
in place of a URL: the same ensemble, reached the same way, in a session of tumbler's own;
the client stays the application's.

Real ZooKeeper servers (the session's plain one and its TLS one, ``tests/servers``); each
test keeps to a chroot of its own.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from .configured_clients import FLAVOURS, lock_through, refused


def _chroot() -> str:
    return f"/test-clients-{uuid.uuid4().hex[:12]}"


def _use(flavour: str, client: KazooClient, **options: object) -> dict[str, Any]:
    """:func:`lock_through`, seeing tumbler's session (``session``) while it is open."""
    return lock_through(
        flavour,
        client,
        look=lambda locks: {"session": locks._backend._client.client_id},
        **options,
    )


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_client_with_a_chroot_and_a_digest_gives_tumbler_its_ensemble_path_and_user(
    flavour: str, zookeeper_server
) -> None:
    """tumbler's nodes go under the client's chroot, made by the client's user (its ACL),
    in a session of tumbler's own; the application's client, started, serves on."""
    chroot = _chroot()
    setup = KazooClient(hosts=zookeeper_server.connect_string)
    setup.start()
    setup.ensure_path(chroot)
    setup.stop()
    setup.close()
    client = KazooClient(
        hosts=zookeeper_server.connect_string + chroot,
        timeout=6.0,
        auth_data=[("digest", "app:s@cret")],
    )
    client.start()
    try:
        seen = _use(flavour, client, base="/locks", request_timeout=3)
        assert seen["holders"] == 1
        assert seen["token"] > 0
        assert seen["session"] != client.client_id  # a session of its own
        config = seen["config"]
        assert config.base == f"{chroot}/locks"
        assert config.session_timeout == 6.0
        assert config.request_timeout == 3.0
        assert config.digest == "app:s@cret"
        assert "s@cret" not in config.url
        # the nodes carry the client's user's ACL, and the application's client still serves
        assert client.get_acls("/locks")[0] == [make_digest_acl("app", "s@cret", all=True)]
        assert client.connected
    finally:
        client.stop()
        client.close()


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_tls_client_gives_tumbler_its_certificates(flavour: str, zookeeper_tls_server) -> None:
    server = zookeeper_tls_server
    client = KazooClient(
        hosts=server.connect_string + _chroot(),
        use_ssl=True,
        ca=str(server.ca_path),
        verify_certs=True,
    )
    seen = _use(flavour, client)  # never started: tumbler needs only its settings
    assert seen["holders"] == 1
    assert seen["config"].tls is not None
    assert seen["config"].tls.ca_certs == str(server.ca_path)
    assert seen["config"].url.startswith("zookeepers://")


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_what_tumbler_cannot_copy_or_a_bad_option_is_refused_before_anything_opens(
    flavour: str,
) -> None:
    # port 1: nothing listens there, so a refusal that connected first would say so instead
    hosts = "127.0.0.1:1"
    sasl = KazooClient(hosts=hosts, auth_data=[("ip", "127.0.0.1")])
    assert "authenticates with one digest" in str(refused(flavour, sasl))
    unverified = KazooClient(hosts=hosts, use_ssl=True, verify_certs=False)
    assert "does not verify the servers' certificates" in str(refused(flavour, unverified))
    plain = KazooClient(hosts=hosts)
    said = refused(flavour, plain, session_timeout=5)
    assert "does not take the option(s) session_timeout" in str(said)
    assert "base must be an absolute path" in str(refused(flavour, plain, base="locks"))
    bad = refused(flavour, plain, base="/zookeeper/quota")
    assert "bad base path" in str(bad)
    assert "127.0.0.1:1" in str(bad)
