"""Whom a release wakes, for a backend that reads the head of the line of a name it freed
and tells each waiter's client in a message of its own (PostgreSQL's NOTIFY, MySQL's wake-up
rows)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._core import Entry, let_through

__all__ = ["line_of", "to_wake"]


def line_of(rows: Sequence[Sequence[Any]]) -> list[Entry]:
    """The entries of a name's line as a store reads them, ``(owner, seq, shared, lim, fair,
    token, ...)`` (a store without a boolean type gives its flags as numbers)."""
    return [Entry(row[0], row[1], bool(row[2]), row[3], bool(row[4]), row[5]) for row in rows]


def to_wake(rows: Sequence[Sequence[Any]]) -> tuple[list[tuple[Any, str]], bool]:
    """The waiters of ``rows`` that the grant rule lets through now, as ``(client, owner)``,
    in arrival order (``_core.let_through``: each counts as granted for those behind it, so a
    mutex wakes one waiter, not the herd), and whether that is all a longer head of the line
    could let through. ``rows``: every live grant of the name, and its waiters by arrival from
    the head of the line on (as many as the caller read), each ``(owner, seq, shared, lim,
    fair, token, client)`` (``client``: the waiter's, or None where none can be told)."""
    through, complete = let_through(line_of(rows))
    woken = [(client, rows[i][0]) for i in through if (client := rows[i][6]) is not None]
    return woken, complete
