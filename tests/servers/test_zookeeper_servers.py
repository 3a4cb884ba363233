"""Tests of the ZooKeeper test-server tooling itself: a standalone server, a 3-member ensemble
that loses and regains members, the super user, and the fixtures' skip-or-fail rule."""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl, make_digest_acl_credential

from tumbler.errors import InvalidArgument
from tumbler.testing.backends.zookeeper.server import (
    ZooKeeperEnsemble,
    ZooKeeperNotInstalled,
    ZooKeeperServer,
    ZooKeeperServerError,
    four_letter_word,
    super_digest,
)
from tumbler.testing.conformance.compat import eventually
from tumbler.testing.servers import ServerNotInstalled
from tumbler.testing.servers import process as launching

pytest_plugins = ["tests.servers.fixtures"]

#: seconds a client gets to connect; far above what a healthy server needs
CONNECT = 20.0


@contextmanager
def kazoo(hosts: str, **options: Any) -> Iterator[KazooClient]:
    """A started kazoo client that reconnects at once (no backoff), whose ``retry`` keeps
    trying for 20 s, closed at the end."""
    retry = {"max_tries": -1, "delay": 0.05, "max_delay": 0.2}
    client = KazooClient(
        hosts=hosts,
        connection_retry=retry,
        command_retry={**retry, "deadline": 20.0},
        **options,
    )
    client.start(timeout=CONNECT)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def unique_path() -> str:
    return f"/tumbler-test-{uuid.uuid4().hex}"


def listening(pid: int | None) -> set[tuple[str, int]]:
    """The TCP addresses a process listens on."""
    assert pid is not None
    return {
        (connection.laddr.ip, connection.laddr.port)
        for connection in psutil.Process(pid).net_connections(kind="inet")
        if connection.status == psutil.CONN_LISTEN
    }


def _receive(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        data += chunk
    return data


def negotiated_session_timeout(server: ZooKeeperServer, requested_ms: int) -> int:
    """The session timeout the server grants a client asking for ``requested_ms``, from a
    hand-made ConnectRequest (protocol version, last zxid, timeout, session id, password,
    read-only), so no client library's rounding comes between."""
    request = struct.pack(">iqiqi16s?", 0, 0, requested_ms, 0, 16, bytes(16), False)
    with socket.create_connection((server.host, server.port), timeout=CONNECT) as connection:
        connection.sendall(struct.pack(">i", len(request)) + request)
        (length,) = struct.unpack(">i", _receive(connection, 4))
        reply = _receive(connection, length)
    _protocol_version, timeout, _session_id = struct.unpack(">iiq", reply[:16])
    return int(timeout)


# -- standalone ----------------------------------------------------------------------------


def test_standalone_server_serves_a_client(zookeeper_server: ZooKeeperServer) -> None:
    port = zookeeper_server.port
    assert zookeeper_server.hosts == [f"127.0.0.1:{port}"]
    assert zookeeper_server.connect_string == f"127.0.0.1:{port}"
    assert zookeeper_server.url == f"zookeeper://127.0.0.1:{port}"
    assert zookeeper_server.url_for("/a/b") == f"zookeeper://127.0.0.1:{port}/a/b"
    assert zookeeper_server.mode() == "standalone"
    path = unique_path()
    with kazoo(zookeeper_server.connect_string) as client:
        client.create(path, b"granted")
        data, stat = client.get(path)
        assert data == b"granted"
        assert stat.version == 0
        client.set(path, b"again")
    with kazoo(zookeeper_server.connect_string) as other:
        assert other.get(path)[0] == b"again"


def test_standalone_server_is_configured_for_tests(zookeeper_server: ZooKeeperServer) -> None:
    # only the client port, on loopback: no admin HTTP server, no JMX, no wildcard bind
    assert listening(zookeeper_server.pid) == {("127.0.0.1", zookeeper_server.port)}
    assert zookeeper_server.command("ruok") == "imok"
    for word in ("srvr", "stat"):
        assert "Mode: standalone" in zookeeper_server.command(word)
    assert "zk_server_state\tstandalone" in zookeeper_server.command("mntr")
    assert "not in the whitelist" in zookeeper_server.command("conf")
    # the session timeout bounds: 400 ms and 60 s by default
    assert negotiated_session_timeout(zookeeper_server, 1) == 400
    assert negotiated_session_timeout(zookeeper_server, 5_000) == 5_000
    assert negotiated_session_timeout(zookeeper_server, 600_000) == 60_000
    assert zookeeper_server.startup_seconds > 0
    # the JVM is capped as asked
    command = psutil.Process(zookeeper_server.pid).cmdline()
    assert "-Xmx128m" in command


def test_a_tls_server_speaks_only_tls(zookeeper_tls_server: ZooKeeperServer) -> None:
    server = zookeeper_tls_server
    port = server.port
    assert server.url_for("/a") == f"zookeepers://127.0.0.1:{port}/a"
    # one port, on loopback, and nothing on it in clear: a four-letter word gets no answer
    assert listening(server.pid) == {("127.0.0.1", port)}
    try:
        answer = four_letter_word(server.host, port, "ruok")
    except OSError:
        answer = ""
    assert answer == ""
    assert server.command("ruok") == "imok"  # over TLS
    assert "Mode: standalone" in server.command("srvr")
    # what kazoo needs to reach it, the host name checked against the certificate
    options = server.connection_kwargs()
    assert options["use_ssl"] is True
    assert options["check_hostname"] is True
    path = unique_path()
    with kazoo(**options) as client:
        client.create(path, b"over TLS")
        assert client.get(path)[0] == b"over TLS"
    with pytest.raises(ZooKeeperServerError, match="does not speak TLS"):
        _ = ZooKeeperServer().ca_path


def test_session_timeout_bounds_are_configurable(tmp_path: Path) -> None:
    server = ZooKeeperServer(
        tmp_path, tick_time=100, min_session_timeout=1_000, max_session_timeout=2_000
    )
    with server:
        assert negotiated_session_timeout(server, 1) == 1_000
        assert negotiated_session_timeout(server, 1_500) == 1_500
        assert negotiated_session_timeout(server, 60_000) == 2_000
        assert "tickTime=100" in server.config_path.read_text().splitlines()


def test_kill_then_start_keeps_the_port_and_the_znodes(
    fresh_zookeeper_server: ZooKeeperServer,
) -> None:
    server = fresh_zookeeper_server
    port, pid = server.port, server.pid
    path = unique_path()
    # ZooKeeper 3.8.0 may leave a connection made while it starts unanswered (an NPE closing
    # it), so the client's read times out; a 2 s session keeps that wait short
    with kazoo(server.connect_string, timeout=2.0) as client:
        client.create(path, b"survives")
        server.kill()
        assert not server.running
        with pytest.raises(ConnectionRefusedError):
            server.command("ruok")
        eventually(lambda: not client.connected, "the client sees the server gone")
        server.start()
        assert (server.port, server.running) == (port, True)
        assert server.pid != pid
        eventually(lambda: client.connected, "the client is back")
        assert client.retry(client.get, path)[0] == b"survives"
    server.restart()
    with kazoo(server.connect_string) as client:
        assert client.get(path)[0] == b"survives"


def test_super_user_reads_a_node_protected_by_a_digest_acl(
    zookeeper_server: ZooKeeperServer,
) -> None:
    assert zookeeper_server.super_password is not None
    assert zookeeper_server.super_digest == super_digest(zookeeper_server.super_password)
    path = unique_path()
    hosts = zookeeper_server.connect_string
    owner_acl = [make_digest_acl("alice", "alice-secret", all=True)]
    with kazoo(hosts, auth_data=[("digest", "alice:alice-secret")]) as alice:
        alice.create(path, b"alice's", acl=owner_acl)
        assert alice.get(path)[0] == b"alice's"
    with kazoo(hosts) as stranger, pytest.raises(NoAuthError):
        stranger.get(path)
    impostor = ("digest", "super:not-the-password")
    with kazoo(hosts, auth_data=[impostor]) as client, pytest.raises(NoAuthError):
        client.get(path)
    with kazoo(hosts, auth_data=[zookeeper_server.super_auth]) as root:
        assert root.get(path)[0] == b"alice's"
        root.delete(path)
        assert root.exists(path) is None


def test_super_digest_is_zookeepers_documented_form() -> None:
    # the example in ZooKeeper's administrator's guide, and kazoo's own computation
    assert super_digest("test") == "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
    assert super_digest("p@ss:w/rd") == make_digest_acl_credential("super", "p@ss:w/rd")


def test_a_server_without_a_super_password_has_no_super_user(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path)
    assert server.super_digest is None
    with pytest.raises(ZooKeeperServerError, match="no super user"):
        _ = server.super_auth


def test_a_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path, extra_config=["syncEnabled=maybe"])
    with pytest.raises(
        ZooKeeperServerError,
        match=r"(?s)did not come up.*java exited with code 2.*Invalid option maybe for syncEnabled",
    ):
        server.start()
    assert not server.running


def test_a_server_that_does_not_serve_in_time_is_given_up_on(tmp_path: Path) -> None:
    # no JVM loads ZooKeeper in 50 ms: the wait ends, and the JVM with it
    server = ZooKeeperServer(tmp_path, startup_timeout=0.05)
    with pytest.raises(ZooKeeperServerError, match=r"did not serve within 0\.05 s"):
        server.start()
    assert not server.running
    java = {
        process.pid
        for process in psutil.process_iter(["cmdline"])
        if str(server.config_path) in (process.info["cmdline"] or [])
    }
    assert java == set()


def test_a_taken_port_is_named(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        server = ZooKeeperServer(tmp_path, port=port)
        with pytest.raises(ZooKeeperServerError, match=f"port {port} .* taken"):
            server.start()
        assert not server.running


def test_a_port_taken_after_it_was_picked_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race between picking a free port and the JVM binding it, made to happen: the
    squatter binds without listening, so only the JVM's own bind can find it taken."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        taken = squatter.getsockname()[1]
        real_free_port = launching.free_port
        picks = iter([taken])
        monkeypatch.setattr(launching, "free_port", lambda: next(picks, None) or real_free_port())
        with ZooKeeperServer(tmp_path) as server:
            assert server.port != taken
            assert "Address already in use" in server.log_path.read_text()
            assert server.mode() == "standalone"


def test_missing_java_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUMBLER_JAVA", str(tmp_path / "no-java"))
    with pytest.raises(ZooKeeperNotInstalled, match="TUMBLER_JAVA") as missing:
        ZooKeeperServer(tmp_path).start()
    assert isinstance(missing.value, ServerNotInstalled)
    with pytest.raises(ZooKeeperNotInstalled, match="TUMBLER_JAVA"):
        ZooKeeperEnsemble(tmp_path / "ensemble").start()


def test_a_missing_zookeeper_jar_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = tmp_path / "zookeeper.jar"
    monkeypatch.setenv("TUMBLER_ZOOKEEPER_CLASSPATH", str(jar))
    with pytest.raises(ZooKeeperNotInstalled, match=f"names '{jar}', which does not exist"):
        ZooKeeperServer(tmp_path).start()


def test_bad_arguments_are_refused_before_anything_starts(tmp_path: Path) -> None:
    workdir = tmp_path / "never"
    bad: list[dict[str, Any]] = [
        {"tick_time": 0},
        {"tick_time": 1.5},
        {"min_session_timeout": 5_000, "max_session_timeout": 4_000},
        {"super_password": ""},
        {"super_password": "two\nlines"},
        {"extra_config": ["no equals sign"]},
        {"startup_timeout": 0},
        {"tls_client_auth": "optional"},
    ]
    for options in bad:
        with pytest.raises(InvalidArgument):
            ZooKeeperServer(workdir, **options)
    for options in ({"size": 2}, {"size": True}, {"init_limit": 0}, {"sync_limit": -1}):
        with pytest.raises(InvalidArgument):
            ZooKeeperEnsemble(workdir, **options)
    assert not workdir.exists()
    server = ZooKeeperServer(tmp_path)
    with pytest.raises(InvalidArgument, match="chroot"):
        server.url_for("no-slash")
    with pytest.raises(InvalidArgument, match="four ASCII letters"):
        four_letter_word("127.0.0.1", 1, "ruok\n")


def test_a_server_without_workdir_removes_its_directory() -> None:
    with ZooKeeperServer() as server:
        directory = server.dir
        assert (directory / "zoo.cfg").exists()
        assert (server.data_dir / "version-2").is_dir()
    assert not directory.exists()


# -- ensemble ------------------------------------------------------------------------------


def test_ensemble_elects_one_leader_and_replicates(zookeeper_ensemble: ZooKeeperEnsemble) -> None:
    ensemble = zookeeper_ensemble
    members = ensemble.members
    assert [member.myid for member in members] == [1, 2, 3]
    assert ensemble.hosts == [f"127.0.0.1:{member.port}" for member in members]
    assert ensemble.url == "zookeeper://" + ",".join(ensemble.hosts)
    modes = ensemble.modes()
    assert sorted(modes, key=str) == ["follower", "follower", "leader"]
    leader = ensemble.leader()
    assert leader is not None
    assert modes[leader] == "leader"
    assert ensemble.wait_for_quorum(timeout=1) == leader
    for index, member in enumerate(members):
        assert (member.data_dir / "myid").read_text().strip() == str(member.myid)
        assert f"server.{member.myid}=127.0.0.1:" in member.config_path.read_text()
        ports = {port for _, port in listening(member.pid)}
        assert {host for host, _ in listening(member.pid)} == {"127.0.0.1"}
        # the leader alone listens on its quorum port, for its followers
        expected = {member.port, member.election_port}
        if index == leader:
            expected.add(member.quorum_port)
        assert ports == expected, member
    path = unique_path()
    first, last = members[0].connect_string, members[-1].connect_string
    with kazoo(first) as writer, kazoo(last) as reader:
        writer.create(path, b"replicated")
        reader.sync(path)
        assert reader.get(path)[0] == b"replicated"


def test_ensemble_survives_losing_its_leader(zookeeper_ensemble: ZooKeeperEnsemble) -> None:
    ensemble = zookeeper_ensemble
    old_leader = ensemble.leader()
    assert old_leader is not None
    path = unique_path()
    with kazoo(ensemble.connect_string) as client:
        client.create(path, b"before")
        ensemble.kill(old_leader)
        assert not ensemble.members[old_leader].running
        new_leader = ensemble.wait_for_quorum(timeout=20)
        assert new_leader != old_leader
        assert ensemble.modes()[old_leader] is None
        # the session moves to a surviving member; what was written before is there
        assert client.retry(client.get, path)[0] == b"before"
        client.retry(client.set, path, b"after")

        member = ensemble.restart(old_leader)
        assert member is ensemble.members[old_leader]
        assert ensemble.modes()[old_leader] == "follower"
        assert ensemble.leader() == new_leader
    # the member that was down caught up with the write it missed
    with kazoo(member.connect_string) as direct:
        direct.sync(path)
        assert direct.get(path)[0] == b"after"


def test_ensemble_without_a_majority_has_no_quorum(zookeeper_ensemble: ZooKeeperEnsemble) -> None:
    ensemble = zookeeper_ensemble
    ensemble.kill(0)
    ensemble.stop(1)
    with pytest.raises(ZooKeeperServerError, match=r"(?s)a leader and a quorum.*not running"):
        ensemble.wait_for_quorum(timeout=2)
    assert ensemble.leader() is None
    assert ensemble.modes() == [None, None, None]
    assert ensemble.members[2].running  # up, but alone it serves nobody
    ensemble.restart(1)
    assert ensemble.wait_for_quorum(timeout=20) in (1, 2)


def test_ensemble_members_can_only_start_with_their_ensemble(tmp_path: Path) -> None:
    ensemble = ZooKeeperEnsemble(tmp_path)
    with pytest.raises(ZooKeeperServerError, match="no ensemble to join"):
        ensemble.members[0].start()
    assert not ensemble.members[0].running
    ensemble.close()
