"""Backend URLs: parsing, options from the query string, and redaction of credentials."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from .errors import InvalidURL

T = TypeVar("T")

# RFC 3986: a letter, then letters, digits, "+", "-", "." (older Pythons' urlsplit is laxer)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*\Z")
# C0 and C1 control characters and DEL: in a URL they are a paste accident or an attack on logs.
# Searched for (and compiled, by re's cache) only in text that is not printable ASCII.
_CONTROL = "[\x00-\x1f\x7f-\x9f]"
_SURROGATE = "[\ud800-\udfff]"


def _has(characters: str, text: str) -> bool:
    return not (text.isascii() and text.isprintable()) and re.search(characters, text) is not None


_NOT_UTF8 = "the URL's {part} percent-encodes bytes that are not UTF-8"
# query options whose values are shown as *** (libpq's, redis-py's and PyMySQL's spellings of
# a password among them): a secret given as an option is as secret as one in the user info
_SECRET_OPTION = re.compile(r"pass|pwd|secret|token|credential|auth", re.IGNORECASE)
_QUERY_PAIR = re.compile(r"([^&=]*)=([^&]*)")


def is_secret_option(name: str) -> bool:
    """Whether the query option ``name`` may carry a secret, whose value is never shown."""
    return _SECRET_OPTION.search(name) is not None


def _redacted_query(query: str) -> str:
    def hide(pair: re.Match[str]) -> str:
        return f"{pair[1]}=***" if is_secret_option(unquote(pair[1])) else pair[0]

    return _QUERY_PAIR.sub(hide, query)


@dataclass(frozen=True)
class BackendURL:
    """A parsed backend URL. ``str()`` and ``repr()`` never show the password."""

    raw: str = field(repr=False)
    scheme: str
    #: the part between ``//`` and the path, credentials removed (``host:port,host:port``)
    hosts: str
    username: str | None
    password: str | None = field(repr=False)
    path: str
    query: dict[str, str]
    #: the URL with the password replaced by ``***``: for messages and logs
    redacted: str

    def __str__(self) -> str:
        return self.redacted

    def option(self, name: str, convert: Callable[[str], T], default: T) -> T:
        """The query option ``name`` converted, or ``default``; InvalidURL names a bad value."""
        if name not in self.query:
            return default
        value = self.query[name]
        try:
            return convert(value)
        except (TypeError, ValueError) as error:
            shown = "***" if is_secret_option(name) else repr(value)
            said = "" if is_secret_option(name) else f": {error}"
            raise InvalidURL(
                f"bad value {shown} for URL option {name!r}{said}", backend=self.redacted
            ) from None

    def allow_options(self, allowed: Iterable[str]) -> None:
        """Refuse options the backend does not know: a typo must not be silently ignored."""
        known = set(allowed)
        unknown = sorted(set(self.query) - known)
        if unknown:
            listed = ", ".join(sorted(known)) or "none"
            hint = ""
            if any(is_secret_option(name) for name in unknown):
                hint = " (a password goes in the URL's user info: SCHEME://USER:PASSWORD@HOST)"
            raise InvalidURL(
                f"unknown URL option(s) {', '.join(unknown)} for {self.scheme}://; "
                f"known options: {listed}{hint}",
                backend=self.redacted,
            )


def parse_url(url: str) -> BackendURL:
    """Split a backend URL; raise InvalidURL (without echoing a password) if it is malformed."""
    if not isinstance(url, str):
        raise InvalidURL(f"a backend URL must be str, not {type(url).__name__}")
    if _has(_CONTROL, url):
        raise InvalidURL("a backend URL must not contain control characters")
    if _has(_SURROGATE, url):
        # what Python makes of command-line bytes that are not UTF-8
        raise InvalidURL("a backend URL must be valid text: it has bytes that are not UTF-8")
    try:
        parts = urlsplit(url)
    except ValueError as error:
        raise InvalidURL(f"malformed backend URL: {error}") from None
    if not _SCHEME.match(parts.scheme):
        raise InvalidURL("a backend URL needs a scheme, as in sqlite:///path/locks.db")
    after_netloc = url.split("://", 1)[-1][len(parts.netloc) :]
    if "@" in after_netloc and "@" not in parts.netloc and parts.netloc:
        # "user:pa/ss@host": the unencoded delimiter ended the host part early, so the
        # secret would be taken for a host; refuse, and do not echo the URL
        raise InvalidURL(
            "the URL's credentials contain an unencoded '/', '?' or '#': percent-encode them "
            "(for example '/' as %2F)"
        )
    userinfo, _, hosts = parts.netloc.rpartition("@")
    user, has_password, secret = userinfo.partition(":")
    redacted = url.partition("#")[0]
    if has_password:
        redacted = redacted.replace(parts.netloc, f"{user}:***@{hosts}", 1)
    if parts.query:
        head, _, query_text = redacted.partition("?")
        redacted = f"{head}?{_redacted_query(query_text)}"
    username = _decoded(user, "user name", redacted) or None
    password = _decoded(secret, "password", redacted) if has_password else None
    path = _decoded(parts.path, "path", redacted)
    try:
        pairs = parse_qsl(
            parts.query,
            keep_blank_values=True,
            strict_parsing=bool(parts.query),
            errors="strict",
        )
    except UnicodeDecodeError:
        raise InvalidURL(_NOT_UTF8.format(part="query string"), backend=redacted) from None
    except ValueError:
        raise InvalidURL("malformed query string in backend URL", backend=redacted) from None
    query: dict[str, str] = {}
    for key, value in pairs:
        if _has(_CONTROL, key + value):
            raise InvalidURL(
                "a URL option must not percent-encode control characters", backend=redacted
            )
        if key in query:
            raise InvalidURL(f"URL option {key!r} is given twice", backend=redacted)
        query[key] = value
    if _has(_CONTROL, path):
        # a file name with a newline or NUL in it is a mistake, not a wish
        raise InvalidURL(
            "the URL's path must not percent-encode control characters", backend=redacted
        )
    return BackendURL(
        raw=url,
        scheme=parts.scheme.lower(),
        hosts=hosts,
        username=username,
        password=password,
        path=path,
        query=query,
        redacted=redacted,
    )


def _decoded(text: str, part: str, redacted: str) -> str:
    """Percent-decode one part of a URL; bytes that are not UTF-8 are refused, not replaced."""
    try:
        return unquote(text, errors="strict")
    except UnicodeDecodeError:
        raise InvalidURL(_NOT_UTF8.format(part=part), backend=redacted) from None
