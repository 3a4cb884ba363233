"""etcd: what another program can write into a lock's line, and what a line costs.

Entries written under a lock's line by hand (numbers out of range, values that are no entry at
all) block nothing, are counted by ``status``, and go with the next ``force_release``. A grant
attempt reads the head of the line, not all of it; a line takes at most ``max_waiters``; a
waiter whose watch is made re-checks without asking the server, but for a slow safety read.

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
from tumbler.backends.contract import GrantRequest
from tumbler.backends.etcd._sync.backend import SAFETY_RECHECK
from tumbler.backends.etcd._sync.gateway import Gateway
from tumbler.backends.etcd.common import entry_key
from tumbler.backends.etcd.wire import put
from tumbler.backends.kit.owners import owner_hash
from tumbler.cli import main
from tumbler.errors import TooManyWaiters
from tumbler.testing.backends.etcd.server import EtcdServer
from tumbler.testing.conformance.compat import eventually

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
    oldest), attached to no lease: it stays until removed. Its key is where a client would
    put an entry of its kind (an exclusive one's, if it has none)."""
    try:
        shared = json.loads(value)["kind"] != "lock"
    except (ValueError, TypeError, KeyError, RecursionError):
        shared = False
    key = entry_key(the_prefix(url), name, "by-hand", exclusive=not shared)
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


# -- what a grant reads --------------------------------------------------------------------------

#: waiters written by hand behind a holder, for the cases on what a grant attempt reads
LINE = 300


def _crowd(raw: Gateway, url: str, name: str) -> int:
    """A reader holding ``name`` and LINE writers waiting behind it, on a lease of their own
    (its id returned, to revoke)."""
    lease, _ttl = raw.grant_lease(600)
    prefix = the_prefix(url)
    reader = json.dumps({"holder": "by hand", "kind": "read", "lease_ttl": 10}).encode()
    writer = json.dumps({"holder": "by hand", "kind": "lock", "lease_ttl": 10}).encode()
    raw.txn([], [put(entry_key(prefix, name, "holder", exclusive=False), reader, lease)], [])
    for start in range(0, LINE, 100):
        keys = [entry_key(prefix, name, f"w{i}", exclusive=True) for i in range(start, start + 100)]
        raw.txn([], [put(key, writer, lease) for key in keys], [])
    return lease


class _Counting:
    """Counts the keys the gateway's replies carry, and the calls."""

    def __init__(self, backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.keys = 0
        self.calls = 0
        gateway = backend.gateway
        original = gateway.call

        def call(path: str, body: Any, **options: Any) -> Any:
            reply = original(path, body, **options)
            self.calls += 1
            if isinstance(reply, dict):
                self.keys += len(reply.get("kvs", []))
                for response in reply.get("responses", []):
                    self.keys += len(response.get("response_range", {}).get("kvs", []))
            return reply

        monkeypatch.setattr(gateway, "call", call)


@pytest.mark.parametrize("shared", [False, True], ids=["writer", "reader"])
def test_a_grant_attempt_reads_the_head_of_the_line_not_all_of_it(
    url: str, raw: Gateway, shared: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease = _crowd(raw, url, "crowded")
    request = GrantRequest("crowded", "mine", shared, 0 if shared else 1, True, 30.0, "t", True)
    with tumbler.connect(url) as locks:
        backend = locks._backend
        counting = _Counting(backend, monkeypatch)
        assert backend.try_grant(request) is None  # waits: the writers are ahead
        assert counting.keys <= 16, f"a grant attempt read {counting.keys} keys"
        backend.release("crowded", "mine")
    raw.revoke(lease)


def test_a_line_longer_than_max_waiters_takes_no_more(url: str, raw: Gateway) -> None:
    lease = _crowd(raw, url, "crowded")
    with tumbler.connect(f"{url}&max_waiters={LINE}") as locks:
        with pytest.raises(TooManyWaiters, match="max_waiters"):
            locks.lock("crowded").acquire(timeout=PATIENCE)
        assert len(line_of(raw, url, "crowded")) == LINE + 1  # its entry withdrawn
    with tumbler.connect(f"{url}&max_waiters={LINE + 1}") as locks:
        request = GrantRequest("crowded", "mine", False, 1, True, 30.0, "t", True)
        assert locks._backend.try_grant(request) is None  # one more place: it waits
    raw.revoke(lease)


def test_a_waiter_whose_watch_is_made_rechecks_without_asking_the_server(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = GrantRequest("quiet", "waiter", False, 1, True, 30.0, "t", True)
    with tumbler.connect(url) as holding, tumbler.connect(url) as waiting:
        assert holding.lock("quiet").acquire(timeout=PATIENCE)
        backend = waiting._backend
        tag = owner_hash("waiter")

        def watched() -> bool:
            # a watch made after the read wakes its waiter to read again, as the lock layer
            # then does: the read after it is the one the watch covers
            assert backend.try_grant(request) is None
            return bool(backend.watches.watching("quiet", tag))

        eventually(watched, "the waiter's watch covers its last read")
        counting = _Counting(backend, monkeypatch)
        for _ in range(10):
            assert backend.try_grant(request) is None
        assert counting.calls == 0
        # past the safety interval, it reads its line again
        entry = backend._entries[("quiet", "waiter")]
        entry.read_at -= SAFETY_RECHECK
        assert backend.try_grant(request) is None
        assert counting.calls >= 1
        backend.release("quiet", "waiter")
