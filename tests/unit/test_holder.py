"""A client's description of itself (``connect(holder=...)``): checked before anything opens.

That every backend keeps it whole and shows it in ``status`` is a conformance case
(``test_a_client_s_holder_description_is_what_status_shows``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import tumbler
import tumbler.aio
from tumbler import InvalidArgument
from tumbler._core import MAX_HOLDER


@pytest.mark.parametrize(
    ("holder", "said"),
    [
        ("", "1 to 200 characters"),
        ("   ", "1 to 200 characters"),
        ("x" * (MAX_HOLDER + 1), "1 to 200 characters"),
        ("worker\nhost", "one line"),
        ("worker \x1b[31m", "one line"),
        (42, "must be text"),
        (b"worker", "must be text"),
    ],
)
def test_connect_refuses_a_holder_it_cannot_keep_before_opening_anything(
    tmp_path: Path, holder: object, said: str
) -> None:
    path = tmp_path / "locks.db"
    with pytest.raises(InvalidArgument, match=said):
        tumbler.connect(f"sqlite:///{path}", holder=holder)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=said):
        asyncio.run(tumbler.aio.connect(f"sqlite:///{path}", holder=holder))  # type: ignore[arg-type]
    assert not path.exists()


def test_without_a_holder_a_client_is_its_host_and_pid() -> None:
    import os

    with tumbler.connect("memory://holder-default") as locks:
        assert locks.lock("x").acquire()
        [held] = locks.status("x").holders
    assert held.holder == f"{os.uname().nodename} pid={os.getpid()}"
