# Generated from tests/unit/_async/test_sql_decide.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""The SQL kit's decide-and-apply step (asyncio source of ``tests/unit/_sync/test_sql_decide.py``):
``decide`` reads a name's line through the backend's ``AsyncLine``, asks the grant rule, and
makes the one write the rule plans, in the line's transaction. The line here keeps entries in
a list; PostgreSQL's and MySQL's tests run the same step on their servers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from tumbler.backends.contract import GrantRequest
from tumbler.backends.kit._sync.sql import Try, decide
from tumbler.errors import TooManyWaiters


class ListLine:
    """A line of ``(owner, seq, shared, lim, fair, token)`` rows and a log of its writes."""

    def __init__(self, rows: list[tuple[Any, ...]], owner: str) -> None:
        self.rows = rows
        self.owner = owner
        self.writes: list[str] = []
        self.committed = False
        self._next_token = 100

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        yield
        self.committed = True

    def read(self) -> list[tuple[Any, ...]]:
        return [(*row, None) for row in self.rows]

    def take_up(self, token: int) -> int | None:
        self.writes.append(f"take_up {token}")
        return token

    def refresh_waiter(self, seq: int) -> None:
        self.writes.append(f"refresh_waiter {seq}")

    def grant_waiter(self, seq: int) -> int:
        self.writes.append(f"grant_waiter {seq}")
        self._next_token += 1
        return self._next_token

    def add_grant(self) -> int:
        self.writes.append("add_grant")
        self._next_token += 1
        return self._next_token

    def waiting(self) -> int:
        return sum(1 for row in self.rows if row[5] is None)

    def add_waiter(self) -> None:
        self.writes.append("add_waiter")

    def token(self, written: int) -> int | None:
        return written


def _request(owner: str, queue: bool = True) -> GrantRequest:
    return GrantRequest("stock", owner, False, 1, False, 30.0, "test", queue=queue)


def test_a_free_name_is_granted_with_the_token_the_write_gives() -> None:
    line = ListLine([], "a")
    assert decide(line, Try(_request("a"), "a", {}), 10, "sql://") == (101, 30.0)
    assert line.writes == ["add_grant"]
    assert line.committed


def test_a_grant_already_held_is_taken_up_with_its_token() -> None:
    line = ListLine([("a", 1, False, 1, False, 7)], "a")
    assert decide(line, Try(_request("a"), "a", {}), 10, "sql://") == (7, 30.0)
    assert line.writes == ["take_up 7"]


def test_a_request_behind_a_holder_waits_or_refreshes_its_entry() -> None:
    held = ("a", 1, False, 1, False, 7)
    line = ListLine([held], "b")
    assert decide(line, Try(_request("b"), "b", {}), 10, "sql://") is None
    assert line.writes == ["add_waiter"]
    line = ListLine([held, ("b", 2, False, 1, False, None)], "b")
    assert decide(line, Try(_request("b"), "b", {}), 10, "sql://") is None
    assert line.writes == ["refresh_waiter 2"]


def test_a_waiter_at_the_head_of_a_free_line_is_granted() -> None:
    line = ListLine([("b", 2, False, 1, False, None)], "b")
    assert decide(line, Try(_request("b"), "b", {}), 10, "sql://") == (101, 30.0)
    assert line.writes == ["grant_waiter 2"]


def test_a_try_that_would_not_queue_writes_nothing() -> None:
    line = ListLine([("a", 1, False, 1, False, 7)], "b")
    assert decide(line, Try(_request("b", queue=False), "b", {}), 10, "sql://") is None
    assert line.writes == []


def test_a_new_waiter_behind_a_full_line_is_refused_after_an_empty_commit() -> None:
    rows = [("a", 1, False, 1, False, 7), ("b", 2, False, 1, False, None)]
    line = ListLine(rows, "c")
    with pytest.raises(TooManyWaiters):
        decide(line, Try(_request("c"), "c", {}), 1, "sql://")
    assert line.writes == []
    assert line.committed
