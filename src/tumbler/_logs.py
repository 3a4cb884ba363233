"""tumbler's loggers, which import :mod:`logging` at their first use.

Most programs that import tumbler never hear from it: a logger of this module costs them
neither the import of :mod:`logging` (and the traceback and string machinery behind it, a
tenth of ``import tumbler``) nor anything at each call once it is resolved. At that first use
the ``tumbler`` logger gets its :class:`logging.NullHandler`: a library logs, the application
decides where to, and without it Python's last-resort handler would print tumbler's warnings
to the stderr of any program that never set logging up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import logging

__all__ = ["DEBUG", "WARNING", "logger", "when_used"]

#: :data:`logging.DEBUG` and :data:`logging.WARNING`, which the logging package defines as these
#: numbers for good: a level chosen at a call does not need the package imported
DEBUG = 10
WARNING = 30

ROOT = "tumbler"

#: set-ups waiting for the first use of a tumbler logger (see :func:`when_used`)
_waiting: list[Callable[[], None]] = []
_used = False


def when_used(setup: Callable[[], None]) -> Callable[[], None]:
    """Run ``setup`` (which may import :mod:`logging`) before any tumbler logger is first
    used, or now if one was; the function returned takes it back if it has not run yet, and
    says nothing of whether it did (the caller's set-up knows)."""
    if _used:
        setup()
        return lambda: None
    _waiting.append(setup)

    def withdraw() -> None:
        if setup in _waiting:
            _waiting.remove(setup)

    return withdraw


def _first_use() -> None:
    import logging

    global _used
    root = logging.getLogger(ROOT)
    if not any(isinstance(handler, logging.NullHandler) for handler in root.handlers):
        root.addHandler(logging.NullHandler())
    _used = True
    while _waiting:
        _waiting.pop(0)()


class _DeferredLogger:
    """Stands for ``logging.getLogger(name)`` until an attribute is asked of it; then it is
    that logger's. Methods are looked up once and kept (a logger is the process's one of its
    name, and its methods read its level and handlers when called); other attributes (its
    level, say) are read afresh each time."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        import logging

        if not _used:
            _first_use()
        value = getattr(logging.getLogger(self._name), attribute)
        if callable(value):
            setattr(self, attribute, value)
        return value


def logger(name: str) -> logging.Logger:
    """The logger ``name`` (``tumbler`` or below it), imported when first used."""
    return cast("logging.Logger", _DeferredLogger(name))
