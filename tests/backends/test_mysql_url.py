"""mysql://, mariadb://: the URL grammar of the MySQL / MariaDB backend (no server needed)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from tumbler import ConfigurationError, InvalidURL
from tumbler._url import parse_url
from tumbler.backends.mysql.common import parse_config
from tumbler.testing.servers import make_tls_files


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://u:secret@h", "database"),
        ("mysql://u:secret@h/a/b", "database"),
        ("mysql://u:secret@h1,h2/db", "one host"),
        ("mysql://u:secret@h:99999/db", "port"),
        ("mysql://u:secret@h/db?table_prefix=", "table_prefix"),
        ("mysql://u:secret@h/db?table_prefix=a-b", "table_prefix"),
        ("mysql://u:secret@h/db?table_prefix=" + "x" * 41, "table_prefix"),
        ("mysql://u:secret@h/db?connect_timeout=0", "connect_timeout"),
        ("mysql://u:secret@h/db?lock_timeout=5&socket_timeout=5", "lock_timeout"),
        ("mysql://u:secret@h/db?max_connections=0", "max_connections"),
        ("mysql://u:secret@h/db?wakeups=listen", "wakeups"),
        ("mysql://u:secret@h/db?schema=x", "unknown URL option"),
    ],
)
def test_bad_urls_are_refused_without_the_password(url: str, says: str) -> None:
    with pytest.raises(InvalidURL, match=says) as refused:
        parse_config(parse_url(url))
    assert "secret" not in str(refused.value)


def test_tls_files_must_exist_and_come_with_the_ca(tmp_path: Path) -> None:
    missing = tmp_path / "ca.pem"
    with pytest.raises(ConfigurationError, match="not a file"):
        parse_config(parse_url(f"mysql://u@h/db?ssl_ca={missing}"))
    tls = make_tls_files(tmp_path / "tls")
    with pytest.raises(InvalidURL, match="ssl_ca"):
        parse_config(
            parse_url(
                f"mysql://u@h/db?ssl_cert={tls.client_cert_path}&ssl_key={tls.client_key_path}"
            )
        )
    with pytest.raises(InvalidURL, match="together"):
        parse_config(
            parse_url(f"mysql://u@h/db?ssl_ca={tls.ca_path}&ssl_cert={tls.client_cert_path}")
        )


def test_what_a_url_says(tmp_path: Path) -> None:
    config = parse_config(parse_url("mariadb://app:p%40ss@db.internal/locks"))
    assert config.url == "mariadb://app:***@db.internal/locks"
    assert config.prefix == "tumbler_"
    assert config.database == "locks"
    assert config.ring
    assert (config.connect_timeout, config.socket_timeout, config.lock_timeout) == (5.0, 5.0, 2.0)
    options = config.connect_options
    assert (options["host"], options["port"], options["user"]) == ("db.internal", 3306, "app")
    assert options["password"] == "p@ss"
    assert "ssl" not in options
    assert "p@ss" not in repr(config)
    tls = make_tls_files(tmp_path / "tls")
    secured = parse_config(
        parse_url(
            f"mysql://app@127.0.0.1:3307/locks?ssl_ca={tls.ca_path}&table_prefix=svc_"
            "&wakeups=poll&max_connections=4&socket_timeout=9&lock_timeout=1"
        )
    )
    assert isinstance(secured.connect_options["ssl"], ssl.SSLContext)
    assert secured.connect_options["ssl"].verify_mode is ssl.CERT_REQUIRED
    assert secured.connect_options["port"] == 3307
    assert (secured.prefix, secured.ring, secured.max_connections) == ("svc_", False, 4)
    assert (secured.socket_timeout, secured.lock_timeout) == (9.0, 1.0)
