"""etcd://, etcds://: the URL grammar of the etcd backend (no server needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tumbler import InvalidURL
from tumbler._url import parse_url
from tumbler.backends.etcd.common import parse_config
from tumbler.backends.kit.tls import TLSConfig, tls_context
from tumbler.testing.servers import make_tls_files


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("etcd://u:secret@h:99999", "port"),
        ("etcd://u:secret@h1,::1", "brackets"),
        ("etcd://u:secret@h/a/../b", "prefix"),
        ("etcd://u:secret@h/a%01b", "control characters"),
        ("etcd://:secret@h", "user name"),
        ("etcd://u:secret@h?lease_ttl=1", "lease_ttl"),
        ("etcd://u:secret@h?lease_ttl=0", "lease_ttl"),
        ("etcd://u:secret@h?request_timeout=0", "request_timeout"),
        ("etcd://u:secret@h?ssl_ca_certs=/ca.pem", "etcds://"),
        ("etcds://u:secret@h?ssl_keyfile=/k.pem", "ssl_certfile"),
        ("etcd://u:secret@h?session_timeout=5", "unknown URL option"),
        # inside another prefix's layout: its keys would be entries of that prefix's locks
        ("etcd://u:secret@h/tumbler/lock/x", "inside the keys of prefix '/tumbler'"),
        ("etcd://u:secret@h/tumbler/lock", "inside the keys of prefix '/tumbler'"),
        ("etcd://u:secret@h/a/b/evicted/c/d", "inside the keys of prefix '/a/b'"),
        # among another prefix's end marks: /tumbler/ended/lock/x/... is the end mark of lock
        # "lock" of /tumbler, and in the line of lock "x" of /tumbler/ended
        ("etcd://u:secret@h/tumbler/ended", "inside the keys of prefix '/tumbler'"),
        ("etcd://u:secret@h/a/ended/b", "inside the keys of prefix '/a'"),
    ],
)
def test_bad_urls_are_refused_without_the_password(url: str, says: str) -> None:
    with pytest.raises(InvalidURL, match=says) as refused:
        parse_config(parse_url(url))
    assert "secret" not in str(refused.value)


@pytest.mark.parametrize(
    "path", ["/lock", "/evicted/x", "/ended/x", "/locks/app", "/tumbler/Lock/x", "/a/ending"]
)
def test_a_prefix_that_is_no_other_prefixs_layout_is_taken(path: str) -> None:
    assert parse_config(parse_url(f"etcd://h{path}")).prefix == path.encode() + b"/"


def test_what_a_url_says() -> None:
    config = parse_config(
        parse_url("etcd://app:p%40ss@e1:2380,e2,[::1]:2381/locks/app?lease_ttl=4.5")
    )
    assert config.url == "etcd://app:***@e1:2380,e2,[::1]:2381/locks/app?lease_ttl=4.5"
    assert config.endpoints == ("http://e1:2380", "http://e2:2379", "http://[::1]:2381")
    assert config.prefix == b"/locks/app/"
    assert config.lease_ttl == 5  # etcd's leases are whole seconds: rounded up
    assert config.credentials == ("app", "p@ss")
    assert "p@ss" not in repr(config)
    assert config.tls is None


def test_the_defaults() -> None:
    config = parse_config(parse_url("etcd://"))
    assert config.endpoints == ("http://localhost:2379",)
    assert config.prefix == b"/tumbler/"
    assert (config.lease_ttl, config.connect_timeout, config.request_timeout) == (10, 5.0, 5.0)
    assert config.credentials is None


def test_tls_speaks_https_with_the_urls_files(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path / "tls")
    config = parse_config(
        parse_url(
            f"etcds://h?ssl_ca_certs={files.ca_path}&ssl_certfile={files.client_cert_path}"
            f"&ssl_keyfile={files.client_key_path}&ssl_check_hostname=false"
        )
    )
    assert config.endpoints == ("https://h:2379",)
    assert config.tls == TLSConfig(
        str(files.ca_path), str(files.client_cert_path), str(files.client_key_path), False
    )
    context = tls_context(config.tls, config.url)
    assert not context.check_hostname
