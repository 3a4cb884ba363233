"""Whom a release wakes, for a backend that reads the head of the line of a name it freed
and tells each waiter's client in a message of its own (PostgreSQL's NOTIFY, MySQL's wake-up
rows)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from ..._core import Entry, let_through

__all__ = ["to_wake"]

Client = TypeVar("Client")

#: a live entry of a name as the release reads it: (owner, seq, shared, lim, fair, token,
#: the waiter's client, or None where none can be told)
Row = tuple[str, int, bool, int, bool, "int | None", "Client | None"]


def to_wake(rows: Sequence[Row[Client]]) -> tuple[list[tuple[Client, str]], bool]:
    """The waiters of ``rows`` that the grant rule lets through now, as ``(client, owner)``,
    in arrival order (``_core.let_through``: each counts as granted for those behind it, so a
    mutex wakes one waiter, not the herd), and whether that is all a longer head of the line
    could let through. ``rows``: every live grant of the name, and its waiters by arrival from
    the head of the line on (as many as the caller read)."""
    line = [
        Entry(owner, seq, shared, lim, fair, token)
        for owner, seq, shared, lim, fair, token, _ in rows
    ]
    through, complete = let_through(line)
    woken = [(client, rows[i][0]) for i in through if (client := rows[i][6]) is not None]
    return woken, complete
