"""Redis under a busy service: many calls on one client, many leases, waiters that die.

- ``max_connections``: calls beyond the pool's size wait for a free connection (up to
  ``socket_timeout``) instead of failing at once, on a single server and on Redis Cluster.
- ``renew_all``: every lease of a client in one pipelined round trip (one script call per
  500 leases, per hash slot on Redis Cluster), never longer than its ``timeout`` even when the
  network goes silent.
- a waiter killed while it waits: the release that would have woken it wakes the next one.

Real redis-server processes only (fixtures in ``tests/servers``); the silent network is the
fault proxy (``tumbler.torture.proxy``) between client and server.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.crc import key_slot

import tumbler
import tumbler.aio
from tests.backends.timed_waiter import TimedWaiter
from tumbler import BackendUnavailable
from tumbler.backends.contract import Renewal
from tumbler.backends.redis import CAPABILITIES, lua
from tumbler.backends.redis.common import BACKUP_FAIR_MS
from tumbler.testing.backends.redis.server import RedisServer, RedisServerCluster, RedisUser
from tumbler.testing.conformance.compat import background, eventually
from tumbler.testing.conformance.test_processes import WORKER
from tumbler.torture.proxy import FaultProxy

FLAVOURS = ["sync", "asyncio"]
#: how often a waiter re-checks on its own (``capabilities.recheck_interval``)
RECHECK = 1.0


def new_prefix() -> str:
    return f"tumbler:test-{uuid.uuid4().hex[:12]}"


def cluster_url(cluster: RedisServerCluster, prefix: str) -> str:
    nodes = ",".join(f"{host}:{port}" for host, port in cluster.startup_nodes)
    return f"redis://{nodes}/0?cluster=true&prefix={prefix}"


def url_of(kind: str, request: pytest.FixtureRequest, **options: object) -> str:
    if kind == "redis":
        url = f"{request.getfixturevalue('redis_server').url}?prefix={new_prefix()}"
    else:
        url = cluster_url(request.getfixturevalue("redis_cluster"), new_prefix())
    return url + "".join(f"&{key}={value}" for key, value in options.items())


def pause_servers(kind: str, request: pytest.FixtureRequest, ms: int) -> None:
    """Make the server (every cluster node) hold every command for ``ms``."""
    if kind == "redis":
        admins = [request.getfixturevalue("redis_server").client()]
    else:
        admins = [node.client() for node in request.getfixturevalue("redis_cluster").nodes]
    for admin in admins:
        with admin:
            admin.client_pause(ms, all=True)


def evalsha_calls(clients: list[redis.Redis]) -> int:
    """Script calls the servers have run (EVALSHA and EVAL)."""
    total = 0
    for client in clients:
        stats = client.info("commandstats")
        for command in ("cmdstat_evalsha", "cmdstat_eval"):
            total += int(stats.get(command, {}).get("calls", 0))
    return total


def run(coroutine: Any) -> Any:
    """Run a coroutine to its end in a thread of its own (the test's thread stays free)."""
    return background(lambda: asyncio.run(coroutine)).result()


# -- max_connections -------------------------------------------------------------------------

CALLS = 12  # at once, on a client of 2 connections
CAP = 2


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("kind", ["redis", "redis-cluster"])
def test_more_calls_than_max_connections_all_succeed(
    kind: str, flavour: str, request: pytest.FixtureRequest
) -> None:
    url = url_of(kind, request, max_connections=CAP)
    names = [f"busy-{index}" for index in range(CALLS)]
    if flavour == "sync":
        with tumbler.connect(url) as locks:
            start = threading.Barrier(CALLS + 1)

            def acquire_release(name: str) -> int:
                start.wait()
                with locks.lock(name) as hold:
                    return hold.token

            calls = [background(lambda name=name: acquire_release(name)) for name in names]
            # every call is sent while the server holds them all: CALLS at once on 2
            # connections, the rest waiting for one of them
            pause_servers(kind, request, 300)
            start.wait()
            tokens = [call.result() for call in calls]
    else:

        async def main() -> list[int]:
            async with await tumbler.aio.connect(url) as locks:

                async def acquire_release(name: str) -> int:
                    async with locks.lock(name) as hold:
                        return hold.token

                pause_servers(kind, request, 300)
                return list(await asyncio.gather(*(acquire_release(name) for name in names)))

        tokens = run(main())
    assert len(tokens) == CALLS
    assert all(tokens)


def test_a_client_opens_no_more_than_max_connections(fresh_redis_server: RedisServer) -> None:
    admin = fresh_redis_server.client()
    url = f"{fresh_redis_server.url}?prefix={new_prefix()}&max_connections={CAP}"
    with tumbler.connect(url) as locks:
        start = threading.Barrier(CALLS + 1)

        def acquire_release(name: str) -> None:
            start.wait()
            with locks.lock(name):
                pass

        calls = [
            background(lambda index=index: acquire_release(f"c-{index}")) for index in range(CALLS)
        ]
        admin.client_pause(300, all=True)
        start.wait()
        for call in calls:
            call.result()
        mine = admin.client_id()
        # the pool's connections stay open for the next calls: count them
        assert len([c for c in admin.client_list() if int(c["id"]) != mine]) == CAP


def occupy_every_connection(locks: Any, kind: str) -> Any:
    """Take the client's only connection (its cluster gate's only place) from under it."""
    backend = locks._backend
    if kind == "redis":
        return backend.client.connection_pool.get_connection()
    backend._gate.__enter__()
    return None


@pytest.mark.parametrize("kind", ["redis", "redis-cluster"])
def test_a_call_waits_for_a_connection_at_most_socket_timeout(
    kind: str, request: pytest.FixtureRequest
) -> None:
    url = url_of(kind, request, max_connections=1, socket_timeout=0.5)
    with tumbler.connect(url) as locks:
        backend = locks._backend
        taken = occupy_every_connection(locks, kind)
        began = time.monotonic()
        with pytest.raises(BackendUnavailable, match="max_connections") as refused:
            locks.status("orders:42")
        waited = time.monotonic() - began
        assert 0.4 < waited < 0.5 + RECHECK, waited
        assert refused.value.lock_name == "orders:42"
        if kind == "redis":
            backend.client.connection_pool.release(taken)
        else:
            backend._gate.__exit__(None, None, None)
        assert locks.status("orders:42").holders == ()


@pytest.mark.parametrize("kind", ["redis", "redis-cluster"])
def test_an_asyncio_call_waits_for_a_connection_at_most_socket_timeout(
    kind: str, request: pytest.FixtureRequest
) -> None:
    url = url_of(kind, request, max_connections=1, socket_timeout=0.5)

    async def main() -> None:
        async with await tumbler.aio.connect(url) as locks:
            backend = locks._backend
            if kind == "redis":
                taken = await backend.client.connection_pool.get_connection()
            else:
                await backend._gate.__aenter__()
            began = time.monotonic()
            with pytest.raises(BackendUnavailable, match="max_connections"):
                await locks.status("orders:42")
            waited = time.monotonic() - began
            assert 0.4 < waited < 0.5 + RECHECK, waited
            if kind == "redis":
                await backend.client.connection_pool.release(taken)
            else:
                await backend._gate.__aexit__(None, None, None)
            assert (await locks.status("orders:42")).holders == ()

    run(main())


# -- renew_all -------------------------------------------------------------------------------

#: leases renewed by one script call, as the backend documents it
PER_CALL = 500
LEASES = 2 * PER_CALL + 100


def hold_many(locks: tumbler.Locks, count: int, ttl: float = 30) -> list[tumbler.Hold]:
    holds = []
    for index in range(count):
        lock = locks.lock(f"lease-{index}", ttl=ttl, renew=False)
        assert lock.acquire(blocking=False)
        holds.append(lock.hold)
    return holds


async def ahold_many(locks: Any, count: int, ttl: float = 30) -> list[Any]:
    holds = []
    for index in range(count):
        lock = locks.lock(f"lease-{index}", ttl=ttl, renew=False)
        assert await lock.acquire(blocking=False)
        holds.append(lock.hold)
    return holds


def renewals_of(holds: list[Any], ttl: float) -> list[Renewal]:
    return [Renewal(hold.name, hold._request.owner, ttl) for hold in holds]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_renew_all_renews_every_lease_in_a_few_script_calls(
    flavour: str, fresh_redis_server: RedisServer
) -> None:
    admin = fresh_redis_server.client()
    url = f"{fresh_redis_server.url}?prefix={new_prefix()}"
    gone = Renewal("lease-0", "an owner that never held it", 60)

    def check(results: list[float | None], holds: list[Any], calls: int) -> None:
        # one script call per PER_CALL leases (a renewal per lease: LEASES calls)
        assert calls == 3, calls
        assert results[:-2] == [60] * (LEASES - 1)
        # a released grant is not revived, an unknown owner renews nothing
        assert results[-2:] == [None, None]

    if flavour == "sync":
        with tumbler.connect(url) as locks:
            holds = hold_many(locks, LEASES)
            holds[-1].release()
            locks._backend.renew_all(
                renewals_of(holds[:1], 60), 5.0
            )  # the server learns the script
            before = evalsha_calls([admin])
            results = locks._backend.renew_all([*renewals_of(holds, 60), gone], 5.0)
            check(results, holds, evalsha_calls([admin]) - before)
            assert locks.status("lease-7").holders[0].expires_in > 30
            assert locks.status(holds[-1].name).holders == ()
    else:

        async def main() -> None:
            async with await tumbler.aio.connect(url) as locks:
                holds = await ahold_many(locks, LEASES)
                await holds[-1].release()
                await locks._backend.renew_all(renewals_of(holds[:1], 60), 5.0)
                before = evalsha_calls([admin])
                results = await locks._backend.renew_all([*renewals_of(holds, 60), gone], 5.0)
                check(results, holds, evalsha_calls([admin]) - before)
                assert (await locks.status("lease-7")).holders[0].expires_in > 30

        run(main())


def test_renew_all_on_a_cluster_makes_one_call_per_hash_slot(
    redis_cluster: RedisServerCluster,
) -> None:
    url = cluster_url(redis_cluster, new_prefix())
    admins = [node.client() for node in redis_cluster.nodes]
    with tumbler.connect(url) as locks:
        holds = hold_many(locks, 40)
        # three grants of one lock: three keys of one slot, one call
        for _ in range(3):
            lock = locks.semaphore("pool", permits=3, ttl=30, renew=False)
            assert lock.acquire(blocking=False)
            holds.append(lock.hold)
        # every node learns the script (a first call is sent again as EVAL where unknown)
        locks._backend.renew_all(renewals_of(holds, 60), 5.0)
        before = evalsha_calls(admins)
        results = locks._backend.renew_all(renewals_of(holds, 60), 5.0)
        calls = evalsha_calls(admins) - before
        assert results == [60] * len(holds)
        slots = {key_slot(lua.Keys("p").entries(hold.name).encode()) for hold in holds}
        assert calls == len(slots), calls  # 41 names in 41 slots
        for hold in holds[::10]:
            assert all(h.expires_in > 30 for h in locks.status(hold.name).holders)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_renew_all_returns_within_its_timeout_when_the_network_goes_silent(
    flavour: str, redis_server: RedisServer
) -> None:
    timeout = 0.5
    with FaultProxy((redis_server.host, redis_server.port), seed=11) as proxy:
        # without a bound of its own, a renewal would wait socket_timeout for each reply
        url = f"redis://127.0.0.1:{proxy.port}/0?prefix={new_prefix()}&socket_timeout=10"

        def silent_renewals(renew_all: Any) -> list[float]:
            """How long renew_all took while the network was silent, twice (the second
            time on a new connection: the first one was dropped)."""
            took = []
            proxy.cut()
            for _ in range(2):
                began = time.monotonic()
                with pytest.raises(BackendUnavailable):
                    renew_all()
                took.append(time.monotonic() - began)
            proxy.heal()
            return took

        if flavour == "sync":
            with tumbler.connect(url) as locks:
                holds = hold_many(locks, 5)
                renewals = renewals_of(holds, 60)
                # the renewal connection is made with more time than the silent calls have
                assert locks._backend.renew_all(renewals, 5.0) == [60] * 5
                took = silent_renewals(lambda: locks._backend.renew_all(renewals, timeout))
                # the connection is usable again once the network is
                assert locks._backend.renew_all(renewals, timeout) == [60] * 5
        else:

            async def main() -> list[float]:
                async with await tumbler.aio.connect(url) as locks:
                    holds = await ahold_many(locks, 5)
                    renewals = renewals_of(holds, 60)
                    backend = locks._backend
                    assert await backend.renew_all(renewals, 5.0) == [60] * 5
                    took = []
                    proxy.cut()
                    for _ in range(2):
                        began = time.monotonic()
                        with pytest.raises(BackendUnavailable):
                            await backend.renew_all(renewals, timeout)
                        took.append(time.monotonic() - began)
                    proxy.heal()
                    assert await backend.renew_all(renewals, timeout) == [60] * 5
                    return took

            took = run(main())
    assert all(timeout <= t < timeout + RECHECK for t in took), took


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_renew_all_loads_the_script_again_after_script_flush(
    flavour: str, redis_server: RedisServer
) -> None:
    url = f"{redis_server.url}?prefix={new_prefix()}"
    admin = redis_server.client()
    if flavour == "sync":
        with tumbler.connect(url) as locks:
            renewals = renewals_of(hold_many(locks, 3), 60)
            admin.script_flush()
            assert locks._backend.renew_all(renewals, 5.0) == [60] * 3
            assert locks._backend.renew_all(renewals, 5.0) == [60] * 3
    else:

        async def main() -> None:
            async with await tumbler.aio.connect(url) as locks:
                renewals = renewals_of(await ahold_many(locks, 3), 60)
                admin.script_flush()
                assert await locks._backend.renew_all(renewals, 5.0) == [60] * 3
                assert await locks._backend.renew_all(renewals, 5.0) == [60] * 3

        run(main())


# -- waiters that die ------------------------------------------------------------------------


def waiter_entries(admin: Any, url: str, name: str) -> dict[str, str]:
    """owner hash -> the client channel of every waiter entry of ``name``."""
    prefix = url.split("prefix=")[1].split("&")[0]
    entries = {}
    for owner, value in admin.hgetall(lua.Keys(prefix).entries(name)).items():
        fields = value.decode().split("|")
        if not fields[4]:  # no token: a waiter
            entries[owner.decode()] = fields[6]
    return entries


def subscribed_clients(admin: redis.Redis) -> int:
    return sum(1 for client in admin.client_list() if int(client["sub"]) > 0)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("fair", [True, False], ids=["fair", "unfair"])
@pytest.mark.parametrize("kind", ["redis", "redis-cluster"])
def test_a_waiter_killed_while_waiting_does_not_hold_up_the_next(
    kind: str,
    fair: bool,
    flavour: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """The killed waiter is first in line, the live one behind it.

    On a single server the release wakes the killed one, finds its client gone, and wakes the
    live one in the same script: well within a re-check. On Redis Cluster the release cannot
    tell; its backup wake-up makes the live waiter try again 0.2 s later, or, both being fair,
    ``BACKUP_FAIR_MS`` (0.6 s) later, when the woken one's entry (cut short by the release) has
    run out: well within the dead entry's own lease (3 s) plus a re-check.
    """
    admin: Any
    if kind == "redis":
        server = request.getfixturevalue("fresh_redis_server")
        admin = server.client()
        url = f"{server.url}?prefix={new_prefix()}"
        bound = RECHECK / 2
    else:
        cluster = request.getfixturevalue("redis_cluster")
        admin = cluster.client()
        url = cluster_url(cluster, new_prefix())
        bound = BACKUP_FAIR_MS / 1000 + RECHECK / 2 if fair else RECHECK / 2
    name = "line"
    with tumbler.connect(url) as holder:
        lock = holder.lock(name, fair=fair)
        assert lock.acquire()
        flags = ["--fair"] if fair else []
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    WORKER,
                    "hold",
                    url,
                    name,
                    str(tmp_path / "m"),
                    "30",
                    flavour,
                    *flags,
                ]
            )
        )
        # first in line, and subscribed (its entry names its channel)
        eventually(
            lambda: list(waiter_entries(admin, url, name).values()) not in ([], [""]),
            "the doomed waiter queued and subscribed",
        )
        [doomed] = waiter_entries(admin, url, name)
        live = TimedWaiter(
            url,
            flavour,
            lambda locks: locks.lock(name, fair=fair),
            lambda locks: locks.lock(name, fair=fair),
        )

        def live_entry() -> str | None:
            entries = waiter_entries(admin, url, name)
            entries.pop(doomed, None)
            return next(iter(entries.values()), None)

        eventually(lambda: live_entry() not in (None, ""), "the live waiter queued behind")
        processes[0].send_signal(signal.SIGKILL)
        processes[0].wait()
        if kind == "redis":
            # the server has closed the dead process's connections
            eventually(lambda: subscribed_clients(admin) == 1, "the server saw the waiter die")
        # Release just after the live waiter's re-check: its next one is a second away, so a
        # hand-off well within that second is the release's doing.
        entries_key = lua.Keys(url.split("prefix=")[1].split("&")[0]).entries(name)
        stamp = admin.hgetall(entries_key)
        eventually(lambda: admin.hgetall(entries_key) != stamp, "the live waiter re-checked")
        released_at = time.monotonic()
        lock.release()
        delay = live.granted_at() - released_at
        assert delay < bound, f"the live waiter got the lock {delay:.2f} s after release"
        if kind == "redis":
            assert doomed not in waiter_entries(admin, url, name)


def test_the_capabilities_redis_declares() -> None:
    # a lease shorter than a second cannot be kept renewed (see CAPABILITIES)
    assert CAPABILITIES.min_ttl == 1.0
    assert CAPABILITIES.scope == "network"
    # a waiter re-checks (and so refreshes its entry) three times per waiter lease
    assert CAPABILITIES.waiter_ttl == 3 * CAPABILITIES.recheck_interval


#: exactly the rights the Redis backend's module docstring lists
DOCUMENTED_RIGHTS = RedisUser(
    "least",
    "least-pw",
    "~tumbler:* &tumbler:* +evalsha +script|load +info +subscribe +scan +time +hget +hset "
    "+hdel +hgetall +hlen +get +set +del +pexpireat +pexpiretime +exists +publish +zadd +zrem "
    "+zrange +zrangebyscore +zcard +zcount +zscore",
)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_renew_all_needs_no_more_rights_than_documented(flavour: str, tmp_path: Path) -> None:
    """A server that does not know the renewal script (new, restarted, flushed) is sent it
    with SCRIPT LOAD, not EVAL, which the documented rights do not include."""
    with RedisServer(tmp_path / "acl", users=[DOCUMENTED_RIGHTS]) as server:
        url = f"{server.url_for('least')}?prefix={new_prefix()}"
        if flavour == "sync":
            with tumbler.connect(url) as locks:
                renewals = renewals_of(hold_many(locks, 3), 60)
                assert locks._backend.renew_all(renewals, 5.0) == [60] * 3
                server.client().script_flush()
                assert locks._backend.renew_all(renewals, 5.0) == [60] * 3
        else:

            async def main() -> None:
                async with await tumbler.aio.connect(url) as locks:
                    renewals = renewals_of(await ahold_many(locks, 3), 60)
                    assert await locks._backend.renew_all(renewals, 5.0) == [60] * 3
                    server.client().script_flush()
                    assert await locks._backend.renew_all(renewals, 5.0) == [60] * 3

            run(main())
