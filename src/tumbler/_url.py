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
            raise InvalidURL(
                f"bad value {value!r} for URL option {name!r}: {error}", backend=self.redacted
            ) from None

    def allow_options(self, allowed: Iterable[str]) -> None:
        """Refuse options the backend does not know: a typo must not be silently ignored."""
        known = set(allowed)
        unknown = sorted(set(self.query) - known)
        if unknown:
            listed = ", ".join(sorted(known)) or "none"
            raise InvalidURL(
                f"unknown URL option(s) {', '.join(unknown)} for {self.scheme}://; "
                f"known options: {listed}",
                backend=self.redacted,
            )


def parse_url(url: str) -> BackendURL:
    """Split a backend URL; raise InvalidURL (without echoing a password) if it is malformed."""
    if not isinstance(url, str):
        raise InvalidURL(f"a backend URL must be str, not {type(url).__name__}")
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in url):
        raise InvalidURL("a backend URL must not contain control characters")
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
    username = password = None
    if userinfo:
        user, has_password, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if has_password else None
    redacted = url.partition("#")[0]
    if password is not None:
        redacted = redacted.replace(parts.netloc, f"{userinfo.partition(':')[0]}:***@{hosts}", 1)
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise InvalidURL("malformed query string in backend URL", backend=redacted) from None
    query: dict[str, str] = {}
    for key, value in pairs:
        if key in query:
            raise InvalidURL(f"URL option {key!r} is given twice", backend=redacted)
        query[key] = value
    return BackendURL(
        raw=url,
        scheme=parts.scheme.lower(),
        hosts=hosts,
        username=username,
        password=password,
        path=unquote(parts.path),
        query=query,
        redacted=redacted,
    )
