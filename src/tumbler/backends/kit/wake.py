"""Whom a release wakes, for a backend that reads the line of a name it freed and tells each
waiter's client in a message of its own (PostgreSQL's NOTIFY, MySQL's wake-up rows)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TypeVar

from ..._core import Decision, Entry, decide
from ...errors import PermitsMismatch

__all__ = ["to_wake"]

Client = TypeVar("Client")

#: a live entry of a name as the release reads it: (owner, seq, shared, lim, fair, token,
#: the waiter's client, or None where none can be told)
Row = tuple[str, int, bool, int, bool, "int | None", "Client | None"]


def to_wake(rows: Sequence[Row[Client]]) -> list[tuple[Client, str]]:
    """The waiters of a line that the grant rule lets through now, as ``(client, owner)``,
    in arrival order: each such waiter counts as granted for those behind it, so a mutex
    wakes one waiter, not the herd."""
    line = [
        Entry(owner, seq, shared, lim, fair, token)
        for owner, seq, shared, lim, fair, token, _ in rows
    ]
    woken: list[tuple[Client, str]] = []
    for index, (owner, _, shared, lim, fair, token, client) in enumerate(rows):
        if token is not None:
            continue
        try:
            decision = decide(line, owner, shared, lim, fair)
        except PermitsMismatch:
            continue
        if decision is Decision.GRANT:
            line[index] = dataclasses.replace(line[index], token=0)
            if client is not None:
                woken.append((client, owner))
    return woken
