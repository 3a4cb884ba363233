"""Tests of the Redis test-server tooling itself: plain, TLS+ACL and cluster servers, and the
fixtures' skip-or-fail rule."""

from __future__ import annotations

import socket
import string
from pathlib import Path

import pytest
import redis
import trustme
from redis.backoff import NoBackoff
from redis.retry import Retry

from tumbler.testing.backends.redis import server as servers
from tumbler.testing.backends.redis.server import (
    TUMBLER_PASSWORD,
    RedisNotInstalled,
    RedisServer,
    RedisServerCluster,
    RedisServerError,
    flush_redis,
    start_tls_redis,
)

pytest_plugins = ["tests.servers.fixtures"]

#: a client that reports a refused or broken connection at once instead of retrying
NO_RETRY = Retry(NoBackoff(), 0)


# -- plain server --------------------------------------------------------------------------


def test_plain_server_answers_ping_and_set_get(redis_server: RedisServer) -> None:
    flush_redis(redis_server)
    assert redis_server.url == f"redis://127.0.0.1:{redis_server.port}/0"
    with redis.Redis.from_url(redis_server.url) as client:
        assert client.ping()
        assert client.set("tumbler:plain", b"value")
        assert client.get("tumbler:plain") == b"value"


def test_plain_server_is_configured_for_tests(redis_server: RedisServer) -> None:
    with redis_server.client(decode_responses=True) as admin:
        config = admin.config_get("*")
    assert config["bind"] == "127.0.0.1"
    assert config["protected-mode"] == "yes"
    assert config["save"] == ""
    assert config["appendonly"] == "no"
    assert config["maxmemory-policy"] == "noeviction"
    assert Path(config["dir"]) == redis_server.dir
    assert Path(config["logfile"]).parent == redis_server.dir


def test_flush_redis_deletes_every_key(redis_server: RedisServer) -> None:
    with redis_server.client() as admin:
        admin.set("tumbler:left-over", 1)
        admin.set("other", 1)
        flush_redis(redis_server)
        assert admin.dbsize() == 0


def test_kill_then_start_comes_back_on_the_same_port(fresh_redis_server: RedisServer) -> None:
    server = fresh_redis_server
    port, pid = server.port, server.pid
    with server.client(retry=NO_RETRY) as client:
        client.set("tumbler:k", "v")
        server.kill()
        assert not server.running
        with pytest.raises(redis.ConnectionError):
            client.ping()
        server.start()
        assert (server.port, server.running) == (port, True)
        assert server.pid != pid
        assert client.ping()
        # nothing is persisted by default: a crash loses every key
        assert client.get("tumbler:k") is None


def test_appendonly_server_keeps_its_keys_through_a_crash(tmp_path: Path) -> None:
    # fsync on every write, so the key is on disk before SET returns
    with RedisServer(tmp_path, appendonly=True, extra_config=["appendfsync always"]) as server:
        with server.client() as client:
            client.set("tumbler:k", "v")
        server.kill()
        server.restart()
        with server.client() as client:
            assert client.get("tumbler:k") == b"v"


def test_a_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, extra_config=["no-such-directive yes"])
    with pytest.raises(RedisServerError, match=r"(?s)did not come up.*no-such-directive"):
        server.start()
    assert not server.running


def test_a_taken_port_is_named(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        server = RedisServer(tmp_path, port=port)
        with pytest.raises(RedisServerError, match=f"port {port} .* taken"):
            server.start()


def test_a_port_taken_after_it_was_picked_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race between picking a free port and the server binding it, made to happen."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        real_free_port = servers.free_port
        picks = iter([taken])
        monkeypatch.setattr(servers, "free_port", lambda: next(picks, None) or real_free_port())
        with RedisServer(tmp_path) as server:
            assert server.port != taken
            with server.client() as client:
                assert client.ping()


def test_a_missing_redis_server_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUMBLER_REDIS_SERVER", str(tmp_path / "no-redis-server"))
    with pytest.raises(RedisNotInstalled, match="TUMBLER_REDIS_SERVER"):
        RedisServer(tmp_path).start()


def test_a_server_without_workdir_removes_its_directory() -> None:
    with RedisServer() as server:
        directory = server.dir
        assert (directory / "redis.conf").exists()
    assert not directory.exists()


# -- TLS and ACL ---------------------------------------------------------------------------


def tls_client(server: RedisServer, ca: str | Path, **options: object) -> redis.Redis:
    """A client that trusts only ``ca`` and checks that the certificate names 127.0.0.1."""
    return redis.Redis(
        host="127.0.0.1",
        port=server.port,
        ssl=True,
        ssl_ca_certs=str(ca),
        ssl_cert_reqs="required",
        ssl_check_hostname=True,
        retry=NO_RETRY,
        **options,  # type: ignore[arg-type]
    )


def test_tls_server_refuses_plaintext(redis_tls_server: RedisServer) -> None:
    admin = redis_tls_server.admin
    assert admin is not None
    # right credentials, so only the missing TLS can be what is refused
    with (
        redis.Redis(
            host="127.0.0.1",
            port=redis_tls_server.port,
            username=admin.name,
            password=admin.password,
            retry=NO_RETRY,
        ) as plain,
        pytest.raises(redis.ConnectionError) as refused,
    ):
        plain.ping()
    assert not isinstance(refused.value, redis.AuthenticationError)


def test_tls_server_accepts_a_client_with_only_the_ca(redis_tls_server: RedisServer) -> None:
    options = {"username": "tumbler", "password": TUMBLER_PASSWORD}
    with tls_client(redis_tls_server, redis_tls_server.ca_path, **options) as client:
        assert client.ping()
        assert client.acl_whoami() == "tumbler"


def test_tls_server_is_not_trusted_without_its_ca(
    redis_tls_server: RedisServer, tmp_path: Path
) -> None:
    stranger = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(stranger))
    options = {"username": "tumbler", "password": TUMBLER_PASSWORD}
    with (
        tls_client(redis_tls_server, stranger, **options) as client,
        pytest.raises(redis.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        client.ping()


def test_tls_url_carries_the_percent_encoded_password(redis_tls_server: RedisServer) -> None:
    url = redis_tls_server.url_for("tumbler")
    assert url == (f"rediss://tumbler:p%40ss%3Aw%2Frd%25%3F%23@127.0.0.1:{redis_tls_server.port}/0")
    assert redis_tls_server.url == url
    with redis.Redis.from_url(url, ssl_ca_certs=str(redis_tls_server.ca_path)) as client:
        assert client.acl_whoami() == "tumbler"


def test_tumbler_user_has_a_lock_librarys_rights_on_its_keys_only(
    redis_tls_server: RedisServer,
) -> None:
    with redis_tls_server.client("tumbler") as client:
        assert client.set("tumbler:x", 1)
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.set("other:x", 1)
        script = "return redis.call('SET', KEYS[1], ARGV[1])"
        assert client.eval(script, 1, "tumbler:y", "1") == b"OK"
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.eval(script, 1, "other:y", "1")
        assert client.script_exists(client.script_load("return 1")) == [True]
        assert client.hset("tumbler:h", "holder", "a") == 1
        assert client.hgetall("tumbler:h") == {b"holder": b"a"}
        assert client.hdel("tumbler:h", "holder") == 1
        assert client.incr("tumbler:fencing") == 1
        assert client.scan(0, match="tumbler:*", count=1000)[1]
        assert client.time()[0] > 0
        assert client.wait(0, 0) == 0
        assert client.publish("tumbler:wake", "m") == 0
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.publish("other", "m")
        with client.pubsub() as pubsub:
            pubsub.subscribe("tumbler:wake")
            assert pubsub.get_message(timeout=5)["type"] == "subscribe"
            pubsub.subscribe("other")
            with pytest.raises(redis.exceptions.NoPermissionError):
                pubsub.get_message(timeout=5)
        assert client.pexpire("tumbler:x", 10_000)
        assert 0 < client.pttl("tumbler:x") <= 10_000
        assert client.client_setname("tumbler-test")
        assert "redis_version" in client.info("server")
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.flushall()
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.config_get("*")


def test_reader_user_may_not_write(redis_tls_server: RedisServer) -> None:
    with redis_tls_server.client("reader") as client:
        assert client.get("tumbler:absent") is None
        with pytest.raises(redis.exceptions.NoPermissionError, match="'set' command"):
            client.set("tumbler:x", 1)


def test_default_user_is_off(redis_tls_server: RedisServer) -> None:
    with redis_tls_server.client() as admin:
        assert "off" in admin.acl_getuser("default")["flags"]
    with (
        tls_client(redis_tls_server, redis_tls_server.ca_path) as anonymous,
        pytest.raises(redis.AuthenticationError),
    ):
        anonymous.ping()


def test_tls_auth_clients_yes_requires_a_client_certificate(tmp_path: Path) -> None:
    with start_tls_redis(tmp_path, tls_auth_clients="yes") as server:
        options = {"username": "tumbler", "password": TUMBLER_PASSWORD}
        with (
            tls_client(server, server.ca_path, **options) as without_certificate,
            pytest.raises(redis.ConnectionError),
        ):
            without_certificate.ping()
        certificate = {
            "ssl_certfile": str(server.client_cert_path),
            "ssl_keyfile": str(server.client_key_path),
        }
        with tls_client(server, server.ca_path, **options, **certificate) as client:
            assert client.ping()


# -- cluster -------------------------------------------------------------------------------


def test_cluster_has_three_masters_and_is_ok(redis_cluster: RedisServerCluster) -> None:
    assert len(redis_cluster.nodes) == 3
    assert redis_cluster.startup_nodes[0] == (redis_cluster.host, redis_cluster.port)
    for node in redis_cluster.nodes:
        info = redis_cluster.cluster_info(node)
        assert info["cluster_state"] == "ok"
        assert info["cluster_slots_assigned"] == "16384"
        assert info["cluster_known_nodes"] == "3"
        with node.client() as direct:
            assert direct.role()[0] == b"master"


def test_cluster_spreads_hash_tags_over_the_nodes(redis_cluster: RedisServerCluster) -> None:
    flush_redis(redis_cluster)
    client = redis_cluster.client()
    key_on: dict[int, str] = {}
    for tag in string.ascii_lowercase:
        key = f"tumbler:{{{tag}}}:grant"
        key_on.setdefault(client.get_node_from_key(key).port, key)
    assert sorted(key_on) == sorted(node.port for node in redis_cluster.nodes)
    for port, key in key_on.items():
        assert client.set(key, port)
        assert client.get(key) == str(port).encode()
    for node in redis_cluster.nodes:
        with node.client() as direct:
            # the owner holds the key itself; every other node redirects
            assert direct.get(key_on[node.port]) == str(node.port).encode()
            elsewhere = next(key for port, key in key_on.items() if port != node.port)
            with pytest.raises(redis.exceptions.MovedError):
                direct.get(elsewhere)
