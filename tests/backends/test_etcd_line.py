"""etcd: what another program can write into a lock's line, and what a line costs.

Entries written under a lock's line by hand (numbers out of range, values that are no entry at
all, turns past their key's revision) block nothing, are counted by ``status``, and go with the
next ``force_release``. A line's key order is its order, so that a grant attempt reads the
entries nearest ahead of its own, never all of them, and asks etcd for no sorted read; a line
takes at most ``max_waiters``; a waiter whose watch is made re-checks without asking the
server, but for a slow safety read. Keys of the layout before turns are honoured.

Every case runs against a real etcd started by the fixtures in tests/servers; the hostile
entries are written with a plain gateway client, as another program would.
"""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import tumbler
import tumbler.aio
from tumbler.backends.contract import GrantRequest
from tumbler.backends.etcd._sync.backend import SAFETY_RECHECK
from tumbler.backends.etcd._sync.gateway import Gateway
from tumbler.backends.etcd.common import entry_key, line_key
from tumbler.backends.etcd.wire import delete, prefix_end, put
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
    key = entry_key(the_prefix(url), name, "by-hand", not shared, raw.revision + 1)
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
    # each key at the turn of the revision its transaction makes, as a client's would be
    raw.txn(
        [], [put(entry_key(prefix, name, "holder", False, raw.revision + 1), reader, lease)], []
    )
    for start in range(0, LINE, 100):
        turn = raw.revision + 1
        keys = [entry_key(prefix, name, f"w{i}", True, turn) for i in range(start, start + 100)]
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
def test_a_grant_attempt_reads_the_entries_nearest_ahead_not_the_line(
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


# -- the line's order is its keys' order --------------------------------------------------------


def _ranges(body: Any) -> Iterator[dict[str, Any]]:
    """Every read of a range (not of one key) a request body asks etcd for, nested
    transactions' too."""
    if not isinstance(body, dict):
        return
    if "key" in body and "range_end" in body and "target" not in body:
        yield body  # a read (``/v3/kv/range``), not a comparison
    for branch in ("success", "failure"):
        for operation in body.get(branch, []):
            if "range_end" in operation.get("request_range", {}):
                yield operation["request_range"]
            if "request_txn" in operation:
                yield from _ranges(operation["request_txn"])


class _Reads:
    """Records the range reads a backend's gateway (of either flavour) sends to the server."""

    def __init__(self, backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads: list[dict[str, Any]] = []
        gateway = backend.gateway
        original = gateway.call

        if inspect.iscoroutinefunction(original):

            async def acall(path: str, body: Any, **options: Any) -> Any:
                self.reads.extend(_ranges(body))
                return await original(path, body, **options)

            monkeypatch.setattr(gateway, "call", acall)
            return

        def call(path: str, body: Any, **options: Any) -> Any:
            self.reads.extend(_ranges(body))
            return original(path, body, **options)

        monkeypatch.setattr(gateway, "call", call)

    def costly(self) -> list[dict[str, Any]]:
        """The reads etcd serves by fetching every key of their range: any sort (etcd 3.4
        and 3.5 sort the whole range in memory, whatever the limit), a filter on revisions
        (the same), or no limit."""
        return [
            body
            for body in self.reads
            if body.get("sort_order", "NONE") != "NONE"
            or body.get("sort_target", "KEY") != "KEY"
            or any(field.endswith("_revision") for field in body)
            or int(body.get("limit", 0)) <= 0
        ]


def test_no_read_of_a_grant_a_wake_up_or_a_release_makes_etcd_sort_or_fetch_the_line(
    url: str, raw: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease = _crowd(raw, url, "crowded")
    with tumbler.connect(url) as locks, tumbler.connect(url) as holding:
        backend = locks._backend
        reads = _Reads(backend, monkeypatch)
        for shared in (False, True):
            request = GrantRequest("crowded", "try", shared, 0 if shared else 1, True, 30.0, "t")
            assert backend.try_grant(request) is None  # refused: withdrawn
        writer = GrantRequest("crowded", "mine", False, 1, True, 30.0, "t", True)
        assert backend.try_grant(writer) is None  # queued behind the line
        assert backend.release("crowded", "mine") is False
        # a waiter woken by its predecessor's release, then granted, then released
        held = holding.lock("woken")
        assert held.acquire(timeout=PATIENCE)
        waiter = GrantRequest("woken", "waiter", False, 1, True, 30.0, "t", True)
        assert backend.try_grant(waiter) is None
        held.release()
        eventually(lambda: backend.try_grant(waiter) is not None, "the waiter is granted")
        assert backend.release("woken", "waiter") is True
        assert len(reads.reads) >= 8
        assert reads.costly() == []
    raw.revoke(lease)


@pytest.mark.asyncio
async def test_no_read_of_a_grant_or_a_release_makes_etcd_sort_or_fetch_the_line_asyncio(
    url: str, raw: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease = _crowd(raw, url, "crowded")
    async with await tumbler.aio.connect(url) as locks:
        reads = _Reads(locks._backend, monkeypatch)
        assert not await locks.lock("crowded").acquire(blocking=False)
        assert not await locks.rwlock("crowded").read().acquire(blocking=False)
        lock = locks.lock("alone")
        assert await lock.acquire(timeout=PATIENCE)
        await lock.release()
        assert len(reads.reads) >= 4
        assert reads.costly() == []
    raw.revoke(lease)


def test_entries_arriving_together_take_turns_in_key_order(url: str, raw: Gateway) -> None:
    """Clients that ask at once, one of them with a latest revision far behind the line's:
    each entry's key is below those of the entries before it (newest first), whatever turn
    its client asked for first, and the line is granted in that order."""
    with tumbler.connect(url) as stale:
        stale.status("together")  # its latest revision: from now
        for i in range(20):  # the cluster moves on without it
            raw.txn([], [put(b"/elsewhere/%d" % i, b"x", 0)], [])
        clients = [tumbler.connect(url) for _ in range(6)]
        try:
            backends = [stale._backend] + [c._backend for c in clients]
            requests = [
                GrantRequest("together", f"o{i}", False, 1, True, 30.0, "t", True)
                for i in range(len(backends))
            ]
            start = threading.Barrier(len(backends))

            def arrive(i: int) -> None:
                start.wait()
                backends[i].try_grant(requests[i])

            threads = [threading.Thread(target=arrive, args=(i,)) for i in range(len(backends))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            line = line_of(raw, url, "together")  # by creation
            assert len(line) == len(backends)
            keys = [kv["key"] for kv in line]
            assert keys == sorted(keys, reverse=True)
            # the first created holds; each of the others waits for the one before it
            pairs = zip(backends, requests, strict=True)
            by_owner = {owner_hash(request.owner): (b, request) for b, request in pairs}
            order = [by_owner[kv["key"].rsplit(b".", 1)[1].decode()] for kv in line]
            for index, (backend, request) in enumerate(order):
                # a waiter whose watch has not told it yet answers from what it knows
                eventually(
                    lambda b=backend, r=request: b.try_grant(r) is not None,  # type: ignore[misc]
                    f"entry {index} of the line is granted",
                )
                for _later_backend, later in order[index + 1 :]:
                    assert _later_backend.try_grant(later) is None
                assert backend.release("together", request.owner) is True
        finally:
            for client in clients:
                client.close()


def test_a_key_whose_turn_comes_after_its_revision_blocks_no_arrival(
    url: str, raw: Gateway
) -> None:
    """No client takes a turn past the revision its key is made at: such a key (the newest
    turn there can be) is no entry, and the check that makes each entry the last of its line
    does not count it."""
    key = entry_key(the_prefix(url), "late-turn", "by-hand", True, 10**19 - 1)
    raw.txn([], [put(key, _entry("lock"), 0)], [])
    with tumbler.connect(url) as locks:
        lock = locks.lock("late-turn")
        assert lock.acquire(timeout=PATIENCE)
        other = locks.lock("late-turn")
        assert not other.acquire(blocking=False)
        assert locks.status("late-turn").malformed == 1
        lock.release()
        assert other.acquire(blocking=False)
        other.release()
        assert locks.force_release("late-turn") == 0
    assert line_of(raw, url, "late-turn") == []


def _earlier_layout_key(url: str, name: str, owner: str, exclusive: bool) -> bytes:
    """An entry's key as clients before turns laid it out: ``<part>/<owner hash>``."""
    part = b"x/" if exclusive else b"s/"
    return line_key(the_prefix(url), name) + part + owner_hash(owner).encode()


def test_entries_of_the_layout_before_turns_are_honoured(url: str, raw: Gateway) -> None:
    """A rolling upgrade: an older client holds a lock, another waits for it; a client of
    this layout waits behind both, in their order (create revisions), and is woken when they
    leave. The keys it makes are in the parts the older clients read, and end with the owner
    hash after a dot: an older client reads them as entries of its own line."""
    lease, _ttl = raw.grant_lease(600)
    holder = _earlier_layout_key(url, "upgrade", "old-holder", True)
    waiter = _earlier_layout_key(url, "upgrade", "old-waiter", False)
    raw.txn([], [put(holder, _entry("lock"), lease)], [])
    raw.txn([], [put(waiter, _entry("read"), lease)], [])
    with tumbler.connect(url) as locks:
        state = locks.status("upgrade")
        assert (len(state.holders), state.waiters, state.malformed) == (1, 1, 0)
        lock = locks.lock("upgrade")
        assert not lock.acquire(blocking=False)
        request = GrantRequest("upgrade", "new", False, 1, True, 30.0, "t", True)
        backend = locks._backend
        assert backend.try_grant(request) is None
        mine = [kv["key"] for kv in line_of(raw, url, "upgrade")][-1]
        assert mine.rsplit(b"/", 2)[-2] == b"x"
        raw.txn([], [delete(holder)], [])
        assert backend.try_grant(request) is None  # the older reader is next
        raw.txn([], [delete(waiter)], [])
        # its watch tells it of the deletion: until then it answers from what it knows
        eventually(lambda: backend.try_grant(request) is not None, "granted once both left")
        assert backend.release("upgrade", "new") is True
    raw.revoke(lease)


@pytest.mark.asyncio
async def test_entries_of_the_layout_before_turns_are_honoured_asyncio(
    url: str, raw: Gateway
) -> None:
    holder = _earlier_layout_key(url, "upgrade-aio", "old-holder", True)
    raw.txn([], [put(holder, _entry("lock"), 0)], [])
    async with await tumbler.aio.connect(url) as locks:
        lock = locks.lock("upgrade-aio")
        assert not await lock.acquire(blocking=False)
        assert (await locks.status("upgrade-aio")).holders
        assert await locks.force_release("upgrade-aio") == 1
        assert await lock.acquire(timeout=PATIENCE)
        await lock.release()
    key = line_key(the_prefix(url), "upgrade-aio")
    assert raw.range(key, prefix_end(key))[1] == []
