"""Backend URLs: parsing, query options, and credentials that never reach a message or log."""

from __future__ import annotations

import contextlib
import pathlib
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.search import PROFILE
from tumbler._url import BackendURL, parse_url
from tumbler.errors import InvalidURL, TumblerError

# A secret no other part of the test URLs contains, so finding it anywhere means a leak.
SECRET = "Xy7SECRETq"


def refused(url: object) -> InvalidURL:
    with pytest.raises(InvalidURL) as info:
        parse_url(url)  # type: ignore[arg-type]
    assert type(info.value) is InvalidURL
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, TumblerError)
    return info.value


def shown(url: BackendURL) -> list[str]:
    """Every way a parsed URL can end up in a message or a log."""
    return [str(url), repr(url), url.redacted, f"{url}", f"{url!r}"]


def shown_for(text: str) -> list[str]:
    """What parsing ``text`` can put in a message or a log: the URL, or the error refusing it."""
    try:
        url = parse_url(text)
    except InvalidURL as error:
        return [str(error), repr(error), error.backend or ""]
    return shown(url)


@pytest.mark.parametrize(
    ("text", "scheme"),
    [("SQLite:///tmp/x.db", "sqlite"), ("MEMORY://store", "memory"), ("ReDiS://h", "redis")],
)
def test_scheme_is_lowercased(text: str, scheme: str) -> None:
    assert parse_url(text).scheme == scheme


def test_parts_of_a_full_url() -> None:
    url = parse_url("redis://alice:pw@cache.example:6379,backup.example:6380/0?tls=1&pool=4#frag")
    assert url.scheme == "redis"
    assert url.username == "alice"
    assert url.password == "pw"
    assert url.hosts == "cache.example:6379,backup.example:6380"
    assert url.path == "/0"
    assert url.query == {"tls": "1", "pool": "4"}
    assert url.raw.endswith("#frag")
    assert "#frag" not in url.redacted


def test_a_url_without_credentials_is_shown_as_given() -> None:
    url = parse_url("sqlite:///var/lib/app/locks.db?busy_timeout=2")
    assert url.username is None
    assert url.password is None
    assert str(url) == url.redacted == "sqlite:///var/lib/app/locks.db?busy_timeout=2"


def test_a_user_without_password_is_kept() -> None:
    url = parse_url("etcd://bob@h:2379")
    assert url.username == "bob"
    assert url.password is None
    assert url.hosts == "h:2379"
    assert str(url) == "etcd://bob@h:2379"


def test_the_password_is_never_shown() -> None:
    url = parse_url(f"redis://alice:{SECRET}@cache.example:6379/0")
    assert url.password == SECRET
    for text in shown(url):
        assert SECRET not in text
    assert str(url) == "redis://alice:***@cache.example:6379/0"


def test_a_password_without_user_is_never_shown() -> None:
    url = parse_url(f"redis://:{SECRET}@h/0")
    assert url.username is None
    assert url.password == SECRET
    assert all(SECRET not in text for text in shown(url))
    assert str(url) == "redis://:***@h/0"


@pytest.mark.parametrize("special", ["@", ":", "/", "%", "#", "?", "&", "=", " ", "é", "@:/%"])
def test_percent_encoded_passwords_are_decoded_and_never_shown(special: str) -> None:
    password = f"{SECRET}{special}tail"
    user = "us@er:name"
    url = parse_url(f"redis://{quote(user, safe='')}:{quote(password, safe='')}@h:1/2?a=b")
    assert url.username == user
    assert url.password == password
    assert url.hosts == "h:1"
    assert url.path == "/2"
    assert url.query == {"a": "b"}
    for text in shown(url):
        assert SECRET not in text
        assert quote(SECRET, safe="") not in text


@PROFILE
@given(
    password=st.text(min_size=1, max_size=30),
    hosts=st.sampled_from(["h", "h:1", "h1:1,h2:2", "[::1]:5"]),
    path=st.sampled_from(["", "/", "/0", "/a/b"]),
)
def test_any_percent_encoded_password_round_trips_and_stays_hidden(
    password: str, hosts: str, path: str
) -> None:
    url = parse_url(f"zk://u:{quote(SECRET + password, safe='')}@{hosts}{path}")
    assert url.password == SECRET + password
    assert url.hosts == hosts
    for text in shown(url):
        assert SECRET not in text


@pytest.mark.parametrize(
    "raw_password",
    [
        pytest.param(f"{SECRET}/rest", id="slash"),
        pytest.param(f"{SECRET}?rest", id="question-mark"),
        pytest.param(f"{SECRET}#rest", id="hash"),
    ],
)
def test_a_password_with_unencoded_delimiters_never_leaks(raw_password: str) -> None:
    # Users paste passwords into URLs unencoded. Such a URL is malformed, but then it must be
    # refused without echoing the secret, or parsed without showing it: never shown.
    for shown_text in shown_for(f"redis://alice:{raw_password}@cache.example:6379/0"):
        assert SECRET not in shown_text


@pytest.mark.parametrize(
    "query",
    ["a=1&a=2", "a=1&b=2&a=1", "a=&a=", "%61=1&a=2"],
)
def test_an_option_given_twice_is_refused(query: str) -> None:
    error = refused(f"memory://store?{query}")
    assert "'a'" in str(error)


def test_an_option_given_twice_is_refused_without_showing_the_password() -> None:
    error = refused(f"redis://u:{SECRET}@h/0?db=1&db=2")
    assert SECRET not in str(error)
    assert "***" in str(error)


@pytest.mark.parametrize("query", ["a", "a=1&b", "a=1&&b=2", "&", "a=1&"])
def test_a_malformed_query_is_refused(query: str) -> None:
    error = refused(f"redis://u:{SECRET}@h/0?{query}")
    assert SECRET not in str(error)


def test_blank_option_values_are_kept() -> None:
    assert parse_url("memory://x?flag=").query == {"flag": ""}


def test_option_values_are_percent_decoded() -> None:
    assert parse_url("memory://x?prefix=a%2Fb%20c").query == {"prefix": "a/b c"}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "locks.db",
        "/var/lib/locks.db",
        "//host/path",
        "://host",
        "1redis://host",
        "http://[::1",  # unbalanced IPv6 bracket
    ],
)
def test_malformed_urls_are_refused(text: str) -> None:
    refused(text)


@pytest.mark.parametrize(
    "text",
    [
        "memory://a\x00b",
        "memory://a\nb",
        "memory://a\rb",
        "memory://a\tb",
        "sqlite:///tmp/x\x1b[31m.db",
        "memory://x\x7f",
        "\nmemory://x",
        "memory://x?a=1\n",
    ],
)
def test_control_characters_are_refused(text: str) -> None:
    refused(text)


@pytest.mark.parametrize(
    "value", [None, b"memory://x", 42, pathlib.Path("/tmp/x.db"), ["memory://"]]
)
def test_urls_that_are_not_str_are_refused(value: object) -> None:
    error = refused(value)
    assert type(value).__name__ in str(error)


@PROFILE
@given(st.text(max_size=80))
def test_any_text_parses_or_is_refused_as_invalid_url(text: str) -> None:
    with contextlib.suppress(InvalidURL):
        parse_url(text)


@PROFILE
@given(
    st.text(st.characters(codec="ascii", exclude_characters="\x00"), min_size=0, max_size=40).map(
        lambda tail: "redis://u:" + SECRET + "@" + tail
    )
)
def test_errors_about_a_url_with_a_password_never_show_it(text: str) -> None:
    for shown_text in shown_for(text):
        assert SECRET not in shown_text


# ---------------------------------------------------------------------------------------------
# Options


def test_allow_options_accepts_known_options() -> None:
    parse_url("sqlite:///x.db?busy_timeout=1&synchronous=full").allow_options(
        ["busy_timeout", "synchronous"]
    )


def test_allow_options_names_the_unknown_option_and_lists_the_known_ones() -> None:
    url = parse_url(f"sqlite://u:{SECRET}@/x.db?busy_timeuot=1&synchronous=full")
    with pytest.raises(InvalidURL) as info:
        url.allow_options(("busy_timeout", "synchronous"))
    message = str(info.value)
    assert "busy_timeuot" in message
    assert "busy_timeout" in message
    assert "synchronous" in message
    assert "sqlite://" in message
    assert SECRET not in message
    assert isinstance(info.value, ValueError)


def test_allow_options_lists_every_unknown_option() -> None:
    url = parse_url("memory://x?zeta=1&alpha=2")
    with pytest.raises(InvalidURL) as info:
        url.allow_options(())
    message = str(info.value)
    assert "alpha, zeta" in message
    assert "none" in message  # memory:// takes no option at all


def test_option_converts_or_falls_back_to_the_default() -> None:
    url = parse_url("sqlite:///x.db?busy_timeout=2.5")
    assert url.option("busy_timeout", float, 5.0) == 2.5
    assert url.option("synchronous", str, "normal") == "normal"


@pytest.mark.parametrize(
    ("value", "convert"), [("abc", float), ("1.5", int), ("", float), ("nan-ish", int)]
)
def test_option_conversion_errors_name_the_option_and_value(value: str, convert: type) -> None:
    url = parse_url(f"redis://u:{SECRET}@h/0?pool_size={value}")
    with pytest.raises(InvalidURL) as info:
        url.option("pool_size", convert, 4)
    message = str(info.value)
    assert "'pool_size'" in message
    assert repr(value) in message
    assert SECRET not in message
    assert type(info.value) is InvalidURL


def test_option_conversion_type_errors_are_converted_too() -> None:
    def strict(value: str) -> int:
        raise TypeError("not this")

    with pytest.raises(InvalidURL, match="'n'"):
        parse_url("memory://x?n=1").option("n", strict, 0)


@pytest.mark.parametrize("text", ["redis://host/\x85", "redis://ho\x9bst/0"])
def test_c1_control_characters_are_refused(text: str) -> None:
    with pytest.raises(InvalidURL, match="control"):
        parse_url(text)


# ---------------------------------------------------------------------------------------------
# Percent-decoding: what a URL spells with %XX is checked as if written out


@pytest.mark.parametrize(
    "text",
    [
        "sqlite:///tmp/a%0Ab.db",  # a newline in a file name
        "sqlite:///tmp/a%00b.db",  # NUL: no file system takes it
        "sqlite:///tmp/a%1B%5B31m.db",
        "sqlite:///tmp/a%C2%85.db",  # C1 control NEL, UTF-8 encoded
        "memory://x?prefix=a%00b",
        "memory://x?a%0Ab=1",
    ],
)
def test_percent_encoded_control_characters_are_refused(text: str) -> None:
    assert "control characters" in str(refused(text))


@pytest.mark.parametrize(
    ("text", "part"),
    [
        ("sqlite:///tmp/%FF.db", "path"),
        ("sqlite:///tmp/caf%E9.db", "path"),  # Latin-1, not UTF-8
        ("memory://x?prefix=%C3", "query string"),
        (f"redis://u%FF:{SECRET}@h/0", "user name"),
        (f"redis://u:{SECRET}%FF@h/0", "password"),
    ],
)
def test_percent_encoded_bytes_that_are_not_utf8_are_refused_not_replaced(
    text: str, part: str
) -> None:
    error = refused(text)
    assert f"{part} percent-encodes bytes that are not UTF-8" in str(error)
    assert SECRET not in str(error)


@pytest.mark.parametrize(
    "text", ["sqlite:///tmp/caf\udce9.db", "memory://\ud800", "redis://h/0?a=\udfff"]
)
def test_text_with_surrogates_is_refused(text: str) -> None:
    # what Python makes of command-line bytes that are not UTF-8
    assert "not UTF-8" in str(refused(text))


@pytest.mark.parametrize("secret", ["\x00", "\n", "\x7f", "tab\there"])
def test_a_password_may_hold_any_character(secret: str) -> None:
    # credentials are the server's business; only where the URL names files or options do
    # control characters mean a mistake
    url = parse_url(f"redis://u:{quote(SECRET + secret, safe='')}@h/0")
    assert url.password == SECRET + secret
    assert all(SECRET not in text for text in shown(url))
