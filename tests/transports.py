"""Where a socket transport that nobody closed was made.

asyncio warns of such a transport (``ResourceWarning: unclosed transport``) only when the
garbage collector finds it, in whatever test runs at that moment, which the warning then
fails; the warning itself says neither the test nor the code that made the transport. Each
transport made while the tests run remembers both, and one found unclosed writes them to
standard error, which the failing test's report shows beside the warning.
"""

from __future__ import annotations

import os
import sys
import traceback

# imported now: pytest's report of a warning imports it, and inside the collector a second
# warning would find it half imported
import tracemalloc  # noqa: F401
from asyncio import selector_events
from typing import Any

#: how many calls of the stack that made a transport it remembers
_DEPTH = 40
#: the calls it leaves out of what it tells: the standard library's asyncio (not a package's
#: ``asyncio`` module, such as redis-py's, whose calls say where the transport was made), and
#: pytest's around the test
_MACHINERY = (
    os.path.dirname(selector_events.__file__) + os.sep,
    "/_pytest/",
    "/pluggy/",
    "/pytest_asyncio/",
)

_Transport: Any = selector_events._SelectorTransport
_made = _Transport.__init__
_collected = _Transport.__del__


def _remember(self: Any, *args: Any, **kwargs: Any) -> None:
    _made(self, *args, **kwargs)
    self._made_in = os.environ.get("PYTEST_CURRENT_TEST"), traceback.extract_stack(limit=_DEPTH)


def _tell(self: Any, *args: Any) -> None:
    made_in = getattr(self, "_made_in", None)
    if getattr(self, "_sock", None) is not None and made_in is not None:
        test, stack = made_in
        sys.stderr.write(
            f"unclosed transport {self!r}, made in {test} by:\n"
            + "".join(
                traceback.format_list(
                    [
                        frame
                        for frame in stack[:-1]
                        if not any(m in frame.filename for m in _MACHINERY)
                    ]
                )
            )
        )
    _collected(self, *args)


_Transport.__init__ = _remember
_Transport.__del__ = _tell
