"""The bench's view of Redis: the peers of peer-bench.md that speak Redis, and the server's
request counter and version.

The peers (redis-py's ``Lock`` polling at 0.1 s and at 1 ms, python-redis-lock) run on every
``redis://`` and ``rediss://`` URL, next to tumbler's own rows, on the same server. Their
drivers are imported in ``open()``, inside the bench's workers: importing this module needs
neither. redis-py's ``Lock`` is the reference of the uncontended table's ``x peer`` column.

The floor (``redis-floor-sync``, ``redis-floor-async``): two ``EVALSHA`` round trips of a
trivial script on one redis-py connection (blocking, and asyncio), the least a lock whose
grant and release are each one script call can cost through that client; the ``x floor``
column divides by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tumbler.testing.bench import (
    AsyncContender,
    AsyncSession,
    StoreBench,
    SyncContender,
    SyncSession,
    TimeoutLockSession,
)

__all__ = [
    "BENCH",
    "PythonRedisLock",
    "RedisBench",
    "RedisFloor",
    "RedisFloorAsync",
    "RedisPyFastPoll",
    "RedisPyLock",
]

#: the URL schemes redis-py's ``Redis.from_url`` takes for a TCP server
PEER_SCHEMES = ("redis", "rediss")

# tumbler's own URL options that redis-py does not know: ``from_url`` would hand them to the
# connection, which refuses unknown keywords
_TUMBLER_ONLY = (
    "prefix",
    "cluster",
    "connect_timeout",
    "max_waiters",
    "wait_replicas",
    "wait_timeout",
)


def peer_url(url: str) -> str:
    """``url`` without the query options that only tumbler reads (a test target's key
    prefix, say), so that redis-py can open it."""
    parts = urlsplit(url)
    query = [(key, value) for key, value in parse_qsl(parts.query) if key not in _TUMBLER_ONLY]
    return urlunsplit(parts._replace(query=urlencode(query)))


def _client(url: str, **options: Any) -> Any:
    import redis

    return redis.Redis.from_url(peer_url(url), **options)


def unannounced() -> dict[str, Any]:
    """Options for a client that sends no CLIENT SETINFO on connect (nor HELLO: RESP2), so
    that a reading costs a server's counter its one command."""
    from tumbler.backends.redis.common import NO_CLIENT_INFO

    return {**NO_CLIENT_INFO, "protocol": 2}


def _info(url: str, section: str) -> dict[str, Any] | None:
    """One ``INFO section`` of the server behind a Redis ``url``; None for other URLs, or if
    it cannot be read (the bench goes on without the figure then)."""
    if urlsplit(url).scheme.lower() not in PEER_SCHEMES:
        return None
    try:
        # INFO is the one command this costs the server's counter
        client = _client(url, **unannounced())
        try:
            return dict(client.info(section))
        finally:
            client.close()
    except Exception:
        return None


def _persists(url: str) -> bool | None:
    """Whether the server writes its data to disk (RDB snapshots or an AOF); None if its
    configuration cannot be read (a user without CONFIG, say)."""
    try:
        client = _client(url, **unannounced())
        try:
            save = client.config_get("save").get("save", "")
            appendonly = client.config_get("appendonly").get("appendonly", "no")
        finally:
            client.close()
    except Exception:
        return None
    return bool(save) or appendonly == "yes"


@dataclass(frozen=True)
class RedisBench(StoreBench):
    """The Redis peers, and ``INFO`` for the server's figures."""

    def request_count(self, url: str) -> int | None:
        """``total_commands_processed`` of ``INFO stats``, which counts the commands a Lua
        script runs one by one, as peer-bench.md counted them. A reading costs the counter
        one command, counted after it has run: two readings in a row differ by 1."""
        stats = _info(url, "stats")
        return None if stats is None else int(stats["total_commands_processed"])

    def version(self, url: str) -> str | None:
        """``Redis 7.0.15``, and ``no persistence`` where the server saves nothing."""
        server = _info(url, "server")
        if server is None:
            return None
        shown = f"Redis {server['redis_version']}"
        return f"{shown}, no persistence" if _persists(url) is False else shown


class _RedisPySession:
    def __init__(self, client: Any, lock: Any) -> None:
        self._client = client
        self._lock = lock

    def acquire(self) -> None:
        if not self._lock.acquire():
            raise TimeoutError(f"no grant of {self._lock.name!r} within the blocking_timeout")

    def release(self) -> None:
        self._lock.release()

    def close(self) -> None:
        self._client.close()


@dataclass(frozen=True)
class RedisPyLock(SyncContender):
    """redis-py's ``Lock``, polling at the library default of 0.1 s."""

    name: ClassVar[str] = "redis-py-0.1"
    mechanism: ClassVar[str] = (
        "redis-py Redis.lock(name, timeout=ttl, sleep=0.1, blocking_timeout): SET NX PX, "
        "retried after sleep(0.1) (the library default); Lua release"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("redis-py", "redis"),)
    #: seconds between two tries of a waiter
    poll: ClassVar[float] = 0.1

    def open(self, lock_name: str) -> SyncSession:
        client = _client(self.url)
        lock = client.lock(
            lock_name,
            timeout=self.options.ttl,
            sleep=self.poll,
            blocking_timeout=self.options.timeout,
        )
        return _RedisPySession(client, lock)


@dataclass(frozen=True)
class RedisPyFastPoll(RedisPyLock):
    """redis-py's ``Lock``, polling every millisecond."""

    name: ClassVar[str] = "redis-py-0.001"
    mechanism: ClassVar[str] = "the same with sleep=0.001"
    poll: ClassVar[float] = 0.001


@dataclass(frozen=True)
class PythonRedisLock(SyncContender):
    """python-redis-lock's ``Lock``: waiters woken through a signal list."""

    name: ClassVar[str] = "python-redis-lock"
    mechanism: ClassVar[str] = (
        "redis_lock.Lock(client, name, expire=ttl): SET NX EX; waiters block on BLPOP of a "
        "signal list; the Lua unlock does DEL+LPUSH+PEXPIRE"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (
        ("python-redis-lock", "python-redis-lock"),
        ("redis-py", "redis"),
    )

    def open(self, lock_name: str) -> SyncSession:
        import redis_lock

        client = _client(self.url)
        try:
            # whole seconds: the library rounds expire and timeout down with int()
            lock = redis_lock.Lock(client, lock_name, expire=round(self.options.ttl))
        except BaseException:
            client.close()
            raise
        # The library's timeout bounds each BLPOP, not the whole acquire (a waiter that is woken
        # and loses the race starts a new one); without one, a waiter whose wake-up was lost
        # would retry for ever, with it the bench reports an error.
        return TimeoutLockSession(lock, lock_name, round(self.options.timeout), client.close)


#: the floor's script: one key and one argument, as a lock's call has, and nothing done
FLOOR_SCRIPT = "return 1"


class _FloorSession:
    def __init__(self, client: Any, lock_name: str) -> None:
        self._client = client
        self._key = f"bench-floor:{{{lock_name}}}"
        self._sha = client.script_load(FLOOR_SCRIPT)

    def acquire(self) -> None:
        self._client.evalsha(self._sha, 1, self._key, "owner")

    def release(self) -> None:
        self._client.evalsha(self._sha, 1, self._key, "owner")

    def close(self) -> None:
        self._client.close()


@dataclass(frozen=True)
class RedisFloor(SyncContender):
    """Two ``EVALSHA`` round trips of a trivial script on one blocking redis-py connection."""

    name: ClassVar[str] = "redis-floor-sync"
    mechanism: ClassVar[str] = (
        "floor: EVALSHA of 'return 1' (one key, one argument) as acquire and again as release, "
        "on one redis-py connection; excludes nothing, timed uncontended only"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("redis-py", "redis"),)
    floor: ClassVar[bool] = True

    def open(self, lock_name: str) -> SyncSession:
        # one connection: a pool of one, as the pair never overlaps
        client = _client(self.url, single_connection_client=True)
        try:
            return _FloorSession(client, lock_name)
        except BaseException:
            client.close()
            raise


class _AsyncFloorSession:
    def __init__(self, client: Any, key: str, sha: str) -> None:
        self._client = client
        self._key = key
        self._sha = sha

    async def acquire(self) -> None:
        await self._client.evalsha(self._sha, 1, self._key, "owner")

    async def release(self) -> None:
        await self._client.evalsha(self._sha, 1, self._key, "owner")

    async def close(self) -> None:
        await self._client.aclose()


@dataclass(frozen=True)
class RedisFloorAsync(AsyncContender):
    """The same on one ``redis.asyncio`` connection."""

    name: ClassVar[str] = "redis-floor-async"
    mechanism: ClassVar[str] = "floor: the same through redis.asyncio on an asyncio loop"
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("redis-py", "redis"),)
    floor: ClassVar[bool] = True

    async def open(self, lock_name: str) -> AsyncSession:
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(peer_url(self.url), single_connection_client=True)
        try:
            sha = await client.script_load(FLOOR_SCRIPT)
        except BaseException:
            await client.aclose()
            raise
        return _AsyncFloorSession(client, f"bench-floor:{{{lock_name}}}", sha)


BENCH = RedisBench(
    peers=(RedisPyLock, RedisPyFastPoll, PythonRedisLock),
    schemes=PEER_SCHEMES,
    floors=(RedisFloor, RedisFloorAsync),
    reference=RedisPyLock.name,
)
