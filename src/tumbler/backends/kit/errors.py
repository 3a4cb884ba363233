"""A driver's errors as tumbler's, by table, at a backend's one edge.

A backend lists what its driver raises and what that means for a lock user, as an
:class:`ErrorMap` of :class:`Rule` rows; ``with errors.translating(Site(url, name)):`` around
its driver calls raises the tumbler error instead, with the driver's error as its cause. The
rows are tried in order: the first whose class matches and whose ``when`` holds decides, so a
subclass's row comes before its parent's, and a row that looks at the message before the one
that takes the class whatever it says. An error that no row takes goes through untouched: a
bug in tumbler is not the server's failure.

A row becomes either a tumbler error class, made with the row's message (``says``), the lock
name and the backend URL; or, where more than a message decides (a code, the file's state,
the error's own cause), a function of the driver's error and the :class:`Site`, which returns
the error to raise.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, cast

from ...errors import TumblerError

__all__ = ["ErrorMap", "Rule", "Site", "mentions"]

#: a row's function: the error to raise for a driver error (the first argument) at a site
Translation = Callable[[Any, Any], Exception]
#: whether a row takes a driver error of its class
Predicate = Callable[[Any], bool]

#: what a row's message may name: the driver's error, the map's text of it, its class's name,
#: and the site
_FIELDS = frozenset({"error", "text", "kind", "site"})


class Site:
    """Where a driver error came up: the backend's URL (its password already removed) and the
    lock the call was about, if one was. A backend whose errors need more to be told apart
    (SQLite: its file, how long the call waited) passes a subclass to its rows' functions."""

    __slots__ = ("backend", "lock_name")

    def __init__(self, backend: str, lock_name: str | None = None) -> None:
        self.backend = backend
        self.lock_name = lock_name


def mentions(*fragments: str) -> Predicate:
    """A row's ``when``: the driver's message holds any of ``fragments``."""

    def holds(error: BaseException) -> bool:
        text = str(error)
        return any(fragment in text for fragment in fragments)

    return holds


class Rule:
    """One row of a backend's table: a driver error of class ``catches`` (for which ``when``
    holds, if given) ``becomes`` this tumbler error class, saying ``says``, or what this
    function returns.

    ``says`` is a :meth:`str.format` template over ``error`` (the driver's error), ``text``
    (the map's text of it), ``kind`` (its class's name) and ``site``."""

    # A plain class, not a dataclass: each backend's module makes its table at import, and a
    # dataclass costs its module the compiling of the methods it writes.
    __slots__ = ("becomes", "catches", "says", "when")

    def __init__(
        self,
        catches: type[Exception] | tuple[type[Exception], ...],
        becomes: type[TumblerError] | Translation,
        says: str = "{error}",
        when: Predicate | None = None,
    ) -> None:
        self.catches = catches
        self.becomes = becomes
        self.says = says
        self.when = when
        if not isinstance(becomes, type):
            if says != "{error}":
                raise TypeError("a row whose function makes the error has no message of its own")
            return
        if not issubclass(becomes, TumblerError):
            raise TypeError(f"a row becomes a tumbler error, not {becomes.__name__}")
        named = {
            field.partition(".")[0].partition("[")[0]
            for _, field, _, _ in string.Formatter().parse(says)
            if field is not None
        }
        if not named <= _FIELDS:
            unknown = ", ".join(sorted(named - _FIELDS))
            known = ", ".join(sorted(_FIELDS))
            raise ValueError(f"the message {says!r} names {unknown}; it may name {known}")

    def __repr__(self) -> str:
        return f"Rule({self.catches!r}, {self.becomes!r}, {self.says!r}, {self.when!r})"

    def takes(self, error: BaseException) -> bool:
        return isinstance(error, self.catches) and (self.when is None or self.when(error))

    def make(self, error: Exception, site: Site, text: Callable[[Any], str]) -> Exception:
        if isinstance(self.becomes, type) and issubclass(self.becomes, TumblerError):
            message = self.says.format(
                error=error, text=text(error), kind=type(error).__name__, site=site
            )
            return self.becomes(message, lock_name=site.lock_name, backend=site.backend)
        # not a tumbler error class: a function (checked when the row was made)
        return cast(Translation, self.becomes)(error, site)


class ErrorMap:
    """A backend's table of driver errors: :meth:`translate` one, or let :meth:`translating`
    translate whatever its block raises.

    ``text``: the driver error's text that messages name as ``{text}`` (default ``str``), for
    a driver whose ``str`` is not what a user should read (a code in front, a blank after)."""

    def __init__(self, *rules: Rule, text: Callable[[Any], str] = str) -> None:
        self.rules = rules
        self.text = text
        #: every class some row takes: what ``translating`` catches at all
        self.catches: tuple[type[Exception], ...] = tuple(
            dict.fromkeys(
                kind
                for rule in rules
                for kind in (rule.catches if isinstance(rule.catches, tuple) else (rule.catches,))
            )
        )

    def translate(self, error: Exception, site: Site) -> Exception | None:
        """The error to raise for ``error`` at ``site``; None if no row takes it."""
        for rule in self.rules:
            if rule.takes(error):
                return rule.make(error, site, self.text)
        return None

    def tumbler_error(self, error: Exception, site: Site) -> TumblerError:
        """The tumbler error for ``error`` at ``site``, for a caller that reports it rather
        than raising it at once: the table must make one of every error given here."""
        translated = self.translate(error, site)
        if not isinstance(translated, TumblerError):
            raise TypeError(f"the table makes no tumbler error of {type(error).__name__}: {error}")
        return translated

    def translating(self, site: Site) -> AbstractContextManager[None]:
        """Raise the translation of any driver error the block raises, from it."""
        return _Translating(self, site)

    def at(self, backend: str, lock_name: str | None = None) -> AbstractContextManager[None]:
        """:meth:`translating` at the site of the backend URL ``backend`` (its password already
        removed) and ``lock_name``: what a backend wraps its driver calls in."""
        return _Translating(self, Site(backend, lock_name))

    def error_at(
        self, error: Exception, backend: str, lock_name: str | None = None
    ) -> TumblerError:
        """:meth:`tumbler_error` at the site of ``backend`` and ``lock_name``."""
        return self.tumbler_error(error, Site(backend, lock_name))


class _Translating:
    # a class rather than contextlib's generator, which costs several times as much: every
    # call a backend makes to its server goes through one

    __slots__ = ("_errors", "_site")

    def __init__(self, errors: ErrorMap, site: Site) -> None:
        self._errors = errors
        self._site = site

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if isinstance(error, self._errors.catches):
            translated = self._errors.translate(error, self._site)
            if translated is not None:
                raise translated from error
