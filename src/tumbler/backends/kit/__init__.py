"""The backend kit: what every backend would otherwise write again.

A backend author implements the contract (:mod:`tumbler.backends.contract`) and takes the
rest from here. Each piece is for:

- :class:`BaseWatch` / :class:`AsyncBaseWatch`: the watch handshake of the contract (made
  without I/O yet catching every wake-up, ``retry_needed`` after entry, ``wake()`` from any
  thread, ``close()`` idempotent), kept once. A backend that must subscribe on its server
  before waiting subclasses it and fills in ``_subscribe`` (and ``_unsubscribe``).
- :class:`HubWatch` / :class:`AsyncHubWatch`: the watch every backend can return from
  ``watch()``. It wakes when the backend's :class:`~tumbler.backends.contract.WakeHub` is
  notified for the name (a release the backend made, a pub/sub message, a server-side watch),
  when a manual clock moves, or when the timeout passes (a poller needs nothing more).
- :class:`MarkedWatch` / :class:`AsyncMarkedWatch`: a state watch that lasts while a mark on
  the store says the name is watched (a marker key, a row of watchers), set at entry and
  again at a third of its life; the backend fills in ``_set_mark``.
- ``start_or_close`` / ``astart_or_close``: what ``open_sync``/``open_async`` of a backend
  that starts after construction returns: the started backend, or, if ``start()`` raised
  (or was cancelled), the error, after ``close()`` released what the start had opened.
- :class:`InspectEachName` / :class:`AsyncInspectEachName`: the default ``inspect_all``, for
  a store that can list its lock names (``lock_names()``) and read each with ``inspect``.
- :class:`LockStateBuilder`: ``inspect``'s ``LockState`` from the live entries of a name
  (holders with the seconds left on their leases, waiters counted, the agreed shared limit).
- :class:`AsyncAdapter`: the asyncio flavour of a backend whose driver only blocks (SQLite's
  stdlib module): every call on one worker thread, releases and renewals ahead of polls.
  Imported on first use, so that a blocking-only program never loads asyncio.
- :mod:`tumbler.backends.kit.options` (``flag``, ``seconds``, ``host_port``,
  ``waiter_count``): the URL query options several backends parse alike, with the same
  wording in their errors; ``line_full``, the ``TooManyWaiters`` of a line at its
  ``max_waiters``.
- :mod:`tumbler.backends.kit.errors` (``ErrorMap``, ``Rule``, ``Site``, ``mentions``): a
  driver's errors as tumbler's, from a table of rows the backend writes (the driver's class,
  and the tumbler error with its message, or a function where more than the class decides),
  the cause, the lock name and the backend's URL kept.
- :mod:`tumbler.backends.kit.slots` (``Slots``, ``AsyncSlots``): at most so many calls under
  way at once, the others waiting a bounded time, for a backend whose connection pool fails
  a call at once when full. Imported from there (it needs asyncio).
- The grant rule, from tumbler's pure core: :func:`plan` turns the live entries of a name
  (:class:`Entry`) and one request into a :class:`WritePlan` (the :class:`Decision`, and which
  :class:`Write` to make), so that a backend storing rows only stores. :func:`decide` is the
  rule alone, for a backend that decides elsewhere but must agree with it; a backend whose
  store keeps entries in one arrival line (sequential nodes, a list) asks
  :func:`line_position` which entry a waiter must watch (:data:`WATCH_LINE`: the whole line);
  :func:`let_through` says whom a change to a line lets through (one pass over its head).
- :func:`~tumbler.backends.kit.owners.owner_hash`: an owner as a store keeps it (its SHA-1),
  so that reading the store gives nobody an owner id to act with, and as a wake-up or a
  hand-off names its waiter (``kit.handoffs``). Imported from there.
- :func:`to_wake`: the waiters of a freed line that the rule lets through now
  (``_core.let_through``: one pass over the head of the line), for a backend whose release
  tells each waiter's client (PostgreSQL, MySQL).
- :mod:`tumbler.backends.kit._async.listener` (``AsyncListener``, and ``Listener`` in its
  ``_sync`` twin): the life of a client's one listening connection (started at the first
  wait, connected again after a failure, every waiter woken once it listens again), for a
  backend that fills in how to listen (PostgreSQL, MySQL, etcd). Imported from there.
- :mod:`tumbler.backends.kit._async.sql` (and its ``_sync`` twin): what the SQL backends
  (PostgreSQL, MySQL) share: the pool, the decision on a name's line and its write
  (``decide``, through the backend's ``AsyncLine``), whom a release wakes, the listener's key,
  the watch, and the calls that differ only in their statements, each store's driver and SQL
  behind seams. Imported from there.
- :func:`~tumbler.backends.kit.state.states_of`: rows of live entries, as a store reads them
  for every name at once, to the ``LockState`` of each name.

The kit imports only the contract, the errors and tumbler's clock and concurrency seams; it
never imports the lock layer (``tumbler._async``/``tumbler._sync``), so imports point one
way: locks -> contract <- backends (-> kit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._core import (
    WATCH_LINE,
    Decision,
    Entry,
    Write,
    WritePlan,
    check_limits,
    decide,
    let_through,
    line_position,
    plan,
)
from ._async.inspection import AsyncInspectEachName
from ._async.opening import AsyncStartable
from ._async.opening import start_or_close as astart_or_close
from ._async.watch import AsyncBaseWatch, AsyncHubWatch, AsyncMarkedWatch
from ._sync.inspection import InspectEachName
from ._sync.opening import Startable, start_or_close
from ._sync.watch import BaseWatch, HubWatch, MarkedWatch
from .options import (
    DEFAULT_MAX_WAITERS,
    MAX_SECONDS,
    flag,
    host_port,
    line_full,
    seconds,
    waiter_count,
)
from .state import LockStateBuilder
from .wake import to_wake

if TYPE_CHECKING:
    from .adapter import AsyncAdapter

__all__ = [
    "MAX_SECONDS",
    "WATCH_LINE",
    "AsyncAdapter",
    "AsyncBaseWatch",
    "AsyncHubWatch",
    "AsyncInspectEachName",
    "AsyncMarkedWatch",
    "AsyncStartable",
    "BaseWatch",
    "DEFAULT_MAX_WAITERS",
    "Decision",
    "Entry",
    "HubWatch",
    "InspectEachName",
    "LockStateBuilder",
    "MarkedWatch",
    "Startable",
    "Write",
    "WritePlan",
    "astart_or_close",
    "check_limits",
    "decide",
    "flag",
    "host_port",
    "let_through",
    "line_full",
    "line_position",
    "plan",
    "seconds",
    "start_or_close",
    "to_wake",
    "waiter_count",
]


def __getattr__(name: str) -> object:
    # the adapter imports asyncio, which the blocking flavour must not pay for
    if name == "AsyncAdapter":
        from .adapter import AsyncAdapter

        return AsyncAdapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
