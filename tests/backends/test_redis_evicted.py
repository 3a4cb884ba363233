"""Redis: a force release leaves a note for each holder it evicted, and only for them.

``force_release(name, note)`` writes the note under the lock's ``:evicted`` key (in the lock's
hash slot: the same script, also on Redis Cluster), keyed by the evicted owner's hash;
``evicted(name, owner)`` reads it back until that owner's lease would have run out (plus a
grace), and the key expires with its longest-kept note while later force releases drop the
notes whose time passed. Both flavours, on a real redis-server (and a real cluster).
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.cluster
from redis.crc import key_slot

from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest
from tumbler.backends.redis import lua
from tumbler.backends.redis import opener as redis_backend
from tumbler.testing.backends.redis.server import RedisServer, RedisServerCluster
from tumbler.testing.conformance.compat import eventually

FLAVOURS = ["sync", "asyncio"]
NOTE = "force-released by ops@host-1 (pid 4242) at 2026-11-24T10:00:00Z: stuck batch job"


def shared(name: str, owner: str, ttl: float = 60.0) -> GrantRequest:
    return GrantRequest(name, owner, True, 0, False, ttl, "test", True)


def exclusive(name: str, owner: str, ttl: float = 60.0) -> GrantRequest:
    return GrantRequest(name, owner, False, 1, False, ttl, "test", True)


def owner() -> str:
    return uuid.uuid4().hex


class Backend:
    """The Redis backend in the flavour under test, called the same way in both: the
    asyncio one on an event loop of its own."""

    def __init__(self, url: str, flavour: str) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        if flavour == "sync":
            self._backend: Any = redis_backend.open_sync(parse_url(url))
        else:
            self._loop = asyncio.new_event_loop()
            self._backend = self._loop.run_until_complete(redis_backend.open_async(parse_url(url)))

    def __getattr__(self, method: str) -> Callable[..., Any]:
        call = getattr(self._backend, method)
        loop = self._loop
        if loop is None:
            return call  # type: ignore[no-any-return]
        return lambda *args: loop.run_until_complete(call(*args))

    def close(self) -> None:
        self.__getattr__("close")()
        if self._loop is not None:
            self._loop.close()


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def prefix() -> str:
    return f"tumbler:test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def backend(redis_server: RedisServer, prefix: str, flavour: str) -> Iterator[Backend]:
    opened = Backend(f"{redis_server.url}?prefix={prefix}", flavour)
    yield opened
    opened.close()


def server_ms(admin: redis.Redis | redis.cluster.RedisCluster) -> int:
    seconds, micros = admin.time()
    return int(seconds) * 1000 + int(micros) // 1000


def evict_all_but_the_waiter(backend: Backend, name: str) -> dict[str, str]:
    """Make every kind of owner on ``name``, force-release it; returns the owners by kind."""
    owners = {kind: owner() for kind in ("released", "expired", "first", "second", "waiter")}
    assert backend.try_grant(exclusive(name, owners["released"])) is not None
    assert backend.release(name, owners["released"]) is True
    assert backend.try_grant(shared(name, owners["expired"], ttl=0.05)) is not None
    assert backend.try_grant(shared(name, owners["first"])) is not None
    assert backend.try_grant(shared(name, owners["second"])) is not None
    assert backend.try_grant(exclusive(name, owners["waiter"])) is None  # queued behind them
    # the short lease ran out on the server: that grant is gone by itself, not evicted
    eventually(lambda: len(backend.inspect(name).holders) == 2, "the short lease ran out")
    assert backend.force_release(name, NOTE) == 2
    return owners


def test_a_force_release_leaves_its_note_for_each_evicted_holder_only(
    backend: Backend, redis_server: RedisServer, prefix: str
) -> None:
    name = "orders:{42}"  # braces are escaped out of the hash tag: the notes stay with it
    owners = evict_all_but_the_waiter(backend, name)
    assert backend.evicted(name, owners["first"]) == NOTE
    assert backend.evicted(name, owners["second"]) == NOTE
    for kind in ("released", "expired", "waiter"):
        assert backend.evicted(name, owners[kind]) is None, kind
    assert backend.evicted(name, owner()) is None  # an owner nobody knows
    assert backend.evicted("another-name", owners["first"]) is None
    assert backend.inspect(name).waiters == 1  # the waiter stays in line
    # stored by owner hash, in the lock's hash slot, as the module docstring says
    keys = lua.Keys(prefix)
    notes = redis_server.client().hgetall(keys.evicted(name))
    hashes = {hashlib.sha1(owners[kind].encode()).hexdigest() for kind in ("first", "second")}
    assert {key.decode() if isinstance(key, bytes) else key for key in notes} == hashes
    assert key_slot(keys.evicted(name).encode()) == key_slot(keys.entries(name).encode())


def test_a_second_force_release_keeps_the_first_ones_notes(backend: Backend) -> None:
    first, second = owner(), owner()
    assert backend.try_grant(exclusive("jobs", first)) is not None
    assert backend.force_release("jobs", "first eviction") == 1
    assert backend.try_grant(exclusive("jobs", second)) is not None
    assert backend.force_release("jobs", "second eviction") == 1
    assert backend.force_release("jobs", "nothing to evict") == 0
    assert backend.evicted("jobs", first) == "first eviction"
    assert backend.evicted("jobs", second) == "second eviction"


def test_a_note_outlives_the_evicted_lease_then_goes_and_is_pruned(
    backend: Backend, redis_server: RedisServer, prefix: str
) -> None:
    admin = redis_server.client()
    notes_key = lua.Keys(prefix).evicted("batch")
    brief, lasting, later = owner(), owner(), owner()
    # the brief lease ends between these two bounds (the grant was made in between)
    earliest_end = server_ms(admin) + 500
    assert backend.try_grant(shared("batch", brief, ttl=0.5)) is not None
    latest_end = server_ms(admin) + 500
    assert backend.try_grant(shared("batch", lasting, ttl=60.0)) is not None
    assert backend.force_release("batch", NOTE) == 2
    assert backend.evicted("batch", brief) == NOTE
    # past the lease the evicted grant had left, its holder can still learn why it went
    eventually(lambda: server_ms(admin) > latest_end, "the evicted lease would have run out")
    assert backend.evicted("batch", brief) == NOTE
    # ... but not forever: the grace after the lease is short
    eventually(lambda: backend.evicted("batch", brief) is None, "the brief note expired")
    assert server_ms(admin) >= earliest_end + lua.EVICTED_GRACE_MS
    assert backend.evicted("batch", lasting) == NOTE
    # the next force release of the name drops the note whose time passed
    assert backend.try_grant(exclusive("batch", later, ttl=30.0)) is not None
    assert backend.force_release("batch", "again") == 1
    hashes = {hashlib.sha1(o.encode()).hexdigest().encode() for o in (lasting, later)}
    assert set(admin.hgetall(notes_key)) == hashes
    # and the key goes with its longest-kept note (the 60 s lease, plus the grace)
    expires_in = admin.pexpiretime(notes_key) - server_ms(admin)
    assert 55_000 < expires_in <= 60_000 + lua.EVICTED_GRACE_MS


def test_notes_live_in_the_locks_slot_on_redis_cluster(
    redis_cluster: RedisServerCluster, prefix: str, flavour: str
) -> None:
    nodes = ",".join(f"{host}:{port}" for host, port in redis_cluster.startup_nodes)
    backend = Backend(f"redis://{nodes}/0?cluster=true&prefix={prefix}", flavour)
    try:
        # names whose slots lie on different nodes: each script runs on one node
        for number in range(8):
            name = f"orders:{number}"
            owners = evict_all_but_the_waiter(backend, name)
            assert backend.evicted(name, owners["first"]) == NOTE
            assert backend.evicted(name, owners["waiter"]) is None
    finally:
        backend.close()
