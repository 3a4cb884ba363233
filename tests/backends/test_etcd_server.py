"""The etcd launcher (``tumbler.testing.backends.etcd.server``), on Debian's etcd: one member keeps
its data across a crash, authentication confines the tests' user to its prefix, a TLS member
refuses a client without a certificate, and a three-member cluster elects a new leader when
its leader is killed and takes the member back."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tumbler.testing.backends.etcd.server import (
    TUMBLER_PASSWORD,
    TUMBLER_USER,
    EtcdCluster,
    EtcdServer,
    EtcdServerError,
    _encode,
)
from tumbler.testing.conformance.compat import eventually
from tumbler.testing.servers import make_tls_files


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EtcdServer]:
    with EtcdServer(tmp_path / "etcd") as started:
        yield started


def _put(server: EtcdServer, key: str, token: str | None = None) -> int:
    answer = server.call("/v3/kv/put", {"key": _encode(key), "value": _encode("v")}, token=token)
    return int(answer["header"]["revision"])


def test_a_member_keeps_its_data_across_a_crash(server: EtcdServer) -> None:
    written = _put(server, "/tumbler/kept")
    server.kill()
    server.start()
    answer = server.call("/v3/kv/range", {"key": _encode("/tumbler/kept")})
    assert int(answer["kvs"][0]["mod_revision"]) == written
    assert server.url == f"etcd://127.0.0.1:{server.port}/tumbler"


def test_authentication_confines_the_tests_user_to_its_prefix(server: EtcdServer) -> None:
    server.enable_auth()
    assert "tumbler:p%40ss%3Aw%2Frd%25%3F%23@" in server.url
    token = server._token(TUMBLER_USER, TUMBLER_PASSWORD)
    assert _put(server, "/tumbler/mine", token) > 0
    with pytest.raises(EtcdServerError, match="permission denied"):
        _put(server, "/elsewhere", token)
    with pytest.raises(EtcdServerError, match="cannot log in"):
        server._token(TUMBLER_USER, "not-the-password")


def test_a_tls_member_refuses_a_client_without_a_certificate(tmp_path: Path) -> None:
    tls = make_tls_files(tmp_path / "tls")
    with EtcdServer(tmp_path / "etcd", tls=tls) as server:
        assert server.url.startswith(f"etcds://127.0.0.1:{server.port}/tumbler?ssl_ca_certs=")
        assert server.status() is not None  # with the client certificate
        checking = ssl.create_default_context(cafile=str(tls.ca_path))
        with httpx.Client(verify=checking, timeout=2.0) as bare, pytest.raises(httpx.HTTPError):
            bare.post(f"{server.client_url}/v3/maintenance/status", json={})


def test_a_cluster_elects_a_new_leader_and_takes_the_old_one_back(tmp_path: Path) -> None:
    with EtcdCluster(tmp_path / "cluster") as cluster:
        assert len(cluster.url.split(",")) == 3
        first = cluster.leader()
        written = _put(cluster.members[(first + 1) % 3], "/tumbler/before")
        cluster.members[first].kill()
        second = cluster.leader()
        assert second != first
        assert _put(cluster.members[second], "/tumbler/after") > written
        cluster.start()  # the killed member rejoins, and catches up
        rejoined = cluster.members[first]

        def caught_up() -> bool:
            # a serializable read answers from the member's own copy
            local = {"key": _encode("/tumbler/after"), "serializable": True}
            return bool(rejoined.call("/v3/kv/range", local).get("kvs"))

        eventually(caught_up, "the rejoined member has the write made without it")
        assert cluster.leader() in range(3)


def test_a_cluster_needs_an_odd_number_of_members() -> None:
    with pytest.raises(EtcdServerError, match="majority"):
        EtcdCluster(size=2)
