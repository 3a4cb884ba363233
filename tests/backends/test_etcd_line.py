"""etcd: what another program can write into a lock's line, and what a line costs.

Entries written under a lock's line by hand (numbers out of range, values that are no entry at
all) block nothing, are counted by ``status``, and go with the next ``force_release``.

Every case runs against a real etcd started by the fixtures in tests/servers; the hostile
entries are written with a plain gateway client, as another program would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import tumbler
import tumbler.aio
from tumbler.backends.etcd._sync.gateway import Gateway
from tumbler.backends.etcd.server import EtcdServer
from tumbler.backends.etcd.wire import put
from tumbler.cli import main

from .test_etcd import line_of, the_prefix, url_of

#: long enough for a grant on a loaded machine; a blocked acquire fails after it
PATIENCE = 10.0


def _entry(kind: str, **fields: Any) -> bytes:
    record = {"holder": "by hand", "kind": kind, "lease_ttl": 10} | fields
    return json.dumps(record).encode()  # json.dumps writes Infinity and NaN as JavaScript does


#: what no tumbler client writes, by what is wrong with it
HOSTILE = {
    "permits-infinite": _entry("semaphore", permits=float("inf")),
    "permits-negative": _entry("semaphore", permits=-1),
    "permits-zero": _entry("semaphore", permits=0),
    "permits-fraction": _entry("semaphore", permits=1.5),
    "permits-bool": _entry("semaphore", permits=True),
    "permits-absurd": _entry("semaphore", permits=10**30),
    "lease-absurd": _entry("lock", lease_ttl=1e18),
    "lease-infinite": _entry("lock", lease_ttl=float("inf")),
    "lease-nan": _entry("lock", lease_ttl=float("nan")),
    "lease-negative": _entry("lock", lease_ttl=-1),
    "lease-text": _entry("lock", lease_ttl="10"),
    "holder-not-text": _entry("lock", holder=5),
    "kind-unknown": _entry("fair"),
    "not-an-object": b"[1, 2]",
    "not-json": b"\xff\xfe not json",
    "nested-deep": b"[" * 100_000 + b"]" * 100_000,
}


@pytest.fixture
def url(etcd_server: EtcdServer) -> str:
    return url_of(etcd_server)


@pytest.fixture
def raw(etcd_server: EtcdServer) -> Iterator[Gateway]:
    gateway = Gateway([etcd_server.client_url])
    yield gateway
    gateway.close()


def _write_ahead(raw: Gateway, url: str, name: str, value: bytes) -> None:
    """Put ``value`` in ``name``'s line, ahead of every entry a client will make (it is the
    oldest, and its key sorts first), attached to no lease: it stays until removed."""
    from tumbler.backends.etcd.common import line_key

    key = line_key(the_prefix(url), name) + b"0" * 20 + b"/by-hand"
    raw.txn([], [put(key, value, 0)], [])


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_an_entry_it_cannot_read_blocks_nothing_is_counted_and_goes_with_force_release(
    url: str, raw: Gateway, value: bytes
) -> None:
    with tumbler.connect(url) as locks:
        for name in ("mutex", "semaphore"):
            _write_ahead(raw, url, name, value)
        lock = locks.lock("mutex")
        assert lock.acquire(timeout=PATIENCE)
        permits = [locks.semaphore("semaphore", 2) for _ in range(2)]
        assert all(permit.acquire(timeout=PATIENCE) for permit in permits)
        state = locks.status("mutex")
        assert (len(state.holders), state.waiters, state.malformed) == (1, 0, 1)
        state = locks.status("semaphore")
        assert (len(state.holders), state.limit, state.malformed) == (2, 2, 1)
        assert locks.force_release("mutex") == 1
        assert line_of(raw, url, "mutex") == []
        assert locks.status("mutex").malformed == 0
        for permit in permits:
            permit.release()
        assert locks.force_release("semaphore") == 0  # no holder left: the entry still goes
        assert line_of(raw, url, "semaphore") == []


@pytest.mark.asyncio
async def test_an_entry_it_cannot_read_blocks_nothing_asyncio(url: str, raw: Gateway) -> None:
    _write_ahead(raw, url, "mutex", HOSTILE["permits-infinite"])
    async with await tumbler.aio.connect(url) as locks:
        lock = locks.lock("mutex")
        assert await lock.acquire(timeout=PATIENCE)
        assert (await locks.status("mutex")).malformed == 1
        assert await locks.force_release("mutex") == 1
    assert line_of(raw, url, "mutex") == []


@pytest.mark.parametrize("value", ["permits-infinite", "lease-infinite", "lease-absurd"])
def test_status_shows_a_line_with_an_entry_it_cannot_read(
    url: str, raw: Gateway, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_ahead(raw, url, "job", HOSTILE[value])
    with tumbler.connect(url) as locks:
        lock = locks.lock("job")
        assert lock.acquire(timeout=PATIENCE)
        assert main(["status", "job", "--url", url]) == 0
        assert "1 entries tumbler did not write" in capsys.readouterr().out
        assert main(["status", "job", "--json", "--url", url]) == 0

        def refuse(constant: str) -> None:
            raise AssertionError(f"status --json wrote {constant}, which is no JSON")

        shown = json.loads(capsys.readouterr().out, parse_constant=refuse)
        assert (len(shown["holders"]), shown["malformed"]) == (1, 1)
