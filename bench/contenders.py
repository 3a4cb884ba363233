"""Contenders: the lock implementations the bench times, one small pluggable unit each.

A contender is a named lock implementation bound to one backend URL. It opens *sessions*: a
client connected to the backend plus one lock object, with ``acquire()`` (blocking until
granted; raising if it cannot be) and ``release()``. The bench builds sessions inside the
process (or thread) that uses them, so a contender must be picklable: keep it a frozen
dataclass of plain values and connect in ``open()``, never in ``__init__``.

The peers of peer-bench.md that speak Redis (redis-py ``Lock`` at two poll intervals,
python-redis-lock) run on every ``redis://`` URL, next to tumbler's own rows.

To add a peer (kazoo ``Lock``, ...) or another backend's variant:

1. subclass ``SyncContender`` or ``AsyncContender``, give it a ``name`` and a ``mechanism``,
   and implement ``open()`` (and teach ``server_request_count()`` the server's request
   counter, if the server has one that it does not know yet);
2. write a factory ``(url, options) -> list[Contender]`` returning it for the URL schemes it
   speaks, and decorate the factory with ``@contender_factory(<the names it returns>)``.

The bench then runs it for every ``--url`` of those schemes, with the same measurements and the
same table columns as every other row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol
from urllib.parse import urlsplit

import tumbler
import tumbler.aio


class SyncSession(Protocol):
    """One client and one lock of a blocking contender."""

    def acquire(self) -> None:
        """Block until the lock is granted; raise if it cannot be."""

    def release(self) -> None: ...

    def close(self) -> None: ...


class AsyncSession(Protocol):
    """One client and one lock of an asyncio contender."""

    async def acquire(self) -> None:
        """Wait until the lock is granted; raise if it cannot be."""

    async def release(self) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Options:
    """Settings every contender applies where its library has them (as in peer-bench.md)."""

    #: lease / expiry in seconds
    ttl: float = 30.0
    #: per-acquire timeout in seconds: a waiter that waits longer is an error, not a sample
    timeout: float = 30.0
    #: grant in arrival order, for the libraries that offer the choice
    fair: bool = False


@dataclass(frozen=True)
class Contender:
    """A lock implementation bound to one backend URL."""

    url: str
    options: Options
    #: the row label
    name: ClassVar[str] = "?"
    #: how it locks and waits, one line for the legend
    mechanism: ClassVar[str] = ""
    is_async: ClassVar[bool] = False
    #: run unless --contender picks others (a negative control is not)
    default: ClassVar[bool] = True
    #: whether ``options.fair`` changes anything
    offers_fair: ClassVar[bool] = False
    #: the client libraries whose versions the header shows: (shown as, distribution name)
    libraries: ClassVar[tuple[tuple[str, str], ...]] = ()

    @property
    def label(self) -> str:
        return f"{self.name}-fair" if self.options.fair and self.offers_fair else self.name

    @property
    def cross_process(self) -> bool:
        """Whether clients in different processes share its locks; if not, the contended
        run uses threads of one process."""
        return urlsplit(self.url).scheme.lower() != "memory"

    def server_ops(self) -> int | None:
        """The server's own request counter, read from the parent process; None if the
        backend has none. Its growth over a contended run, per acquisition, is a column."""
        return server_request_count(self.url)


class SyncContender(Contender):
    def open(self, lock_name: str) -> SyncSession:
        raise NotImplementedError


class AsyncContender(Contender):
    is_async: ClassVar[bool] = True

    async def open(self, lock_name: str) -> AsyncSession:
        raise NotImplementedError


# -- tumbler ------------------------------------------------------------------------------------


class _TumblerSession:
    def __init__(self, locks: tumbler.Locks, lock: tumbler.Lock) -> None:
        self._locks = locks
        self._lock = lock

    def acquire(self) -> None:
        if not self._lock.acquire():
            raise tumbler.AcquireTimeout(f"no grant of {self._lock.name!r} within the timeout")

    def release(self) -> None:
        self._lock.release()

    def close(self) -> None:
        self._locks.close()


class _TumblerAsyncSession:
    def __init__(self, locks: tumbler.aio.AsyncLocks, lock: tumbler.aio.AsyncLock) -> None:
        self._locks = locks
        self._lock = lock

    async def acquire(self) -> None:
        if not await self._lock.acquire():
            raise tumbler.AcquireTimeout(f"no grant of {self._lock.name!r} within the timeout")

    async def release(self) -> None:
        await self._lock.release()

    async def close(self) -> None:
        await self._locks.close()


@dataclass(frozen=True)
class TumblerSync(SyncContender):
    name: ClassVar[str] = "tumbler-sync"
    offers_fair: ClassVar[bool] = True
    mechanism: ClassVar[str] = (
        "tumbler.connect(url).lock(name, ttl, timeout); the backend's grant rule; waiters "
        "poll with jittered backoff on SQLite (2-50 ms) and are woken by pub/sub on Redis "
        "(only those a release lets through)"
    )

    def open(self, lock_name: str) -> SyncSession:
        locks = tumbler.connect(self.url)
        try:
            lock = locks.lock(
                lock_name,
                ttl=self.options.ttl,
                timeout=self.options.timeout,
                fair=self.options.fair,
            )
        except BaseException:
            locks.close()
            raise
        return _TumblerSession(locks, lock)


@dataclass(frozen=True)
class TumblerAsync(AsyncContender):
    name: ClassVar[str] = "tumbler-async"
    offers_fair: ClassVar[bool] = True
    mechanism: ClassVar[str] = (
        "the same through tumbler.aio.connect(url) on an asyncio loop (SQLite calls run on "
        "the client's one backend thread)"
    )

    async def open(self, lock_name: str) -> AsyncSession:
        locks = await tumbler.aio.connect(self.url)
        try:
            lock = locks.lock(
                lock_name,
                ttl=self.options.ttl,
                timeout=self.options.timeout,
                fair=self.options.fair,
            )
        except BaseException:
            await locks.close()
            raise
        return _TumblerAsyncSession(locks, lock)


# -- the Redis peers (peer-bench.md) ----------------------------------------------------------

#: the URL schemes redis-py's ``Redis.from_url`` takes for a TCP server
REDIS_SCHEMES = ("redis", "rediss")


def _redis_client(url: str) -> Any:
    # The peers' drivers are imported only where a Redis URL is measured: a bench of SQLite
    # alone must not need them.
    import redis

    return redis.Redis.from_url(url)


def _redis_info(url: str, section: str) -> dict[str, Any] | None:
    """One ``INFO section`` of the server behind a Redis ``url``; None for other URLs, or if
    it cannot be read (the bench goes on without the figure then)."""
    if urlsplit(url).scheme.lower() not in REDIS_SCHEMES:
        return None
    try:
        import redis

        # No CLIENT SETINFO (lib_name/lib_version None) nor HELLO (RESP2) on connect, so that
        # INFO is the one command this costs the server's counter
        client = redis.Redis.from_url(url, lib_name=None, lib_version=None, protocol=2)
        try:
            return dict(client.info(section))
        finally:
            client.close()
    except Exception:
        return None


def server_request_count(url: str) -> int | None:
    """The request counter of the server behind ``url``; None if it has none (SQLite, memory)
    or cannot be read.

    Redis: ``total_commands_processed`` of ``INFO stats``, which counts the commands a Lua
    script runs one by one, as peer-bench.md counted them. A reading costs the counter one
    command, counted after it has run: two readings in a row differ by 1.
    """
    stats = _redis_info(url, "stats")
    return None if stats is None else int(stats["total_commands_processed"])


def server_version(url: str) -> str | None:
    """Which server ``url`` reaches, for the header (``Redis 7.0.15``); None if unknown."""
    server = _redis_info(url, "server")
    return None if server is None else f"Redis {server['redis_version']}"


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
        client = _redis_client(self.url)
        lock = client.lock(
            lock_name,
            timeout=self.options.ttl,
            sleep=self.poll,
            blocking_timeout=self.options.timeout,
        )
        return _RedisPySession(client, lock)


@dataclass(frozen=True)
class RedisPyFastPoll(RedisPyLock):
    name: ClassVar[str] = "redis-py-0.001"
    mechanism: ClassVar[str] = "the same with sleep=0.001"
    poll: ClassVar[float] = 0.001


class _TimeoutLockSession:
    """A peer's lock whose ``acquire(timeout=...)`` returns False when the timeout runs out."""

    def __init__(
        self, lock: Any, lock_name: str, timeout: float, close: Callable[[], object]
    ) -> None:
        self._lock = lock
        self._lock_name = lock_name
        self._timeout = timeout
        self._close = close

    def acquire(self) -> None:
        if not self._lock.acquire(timeout=self._timeout):
            raise TimeoutError(f"no grant of {self._lock_name!r} within {self._timeout} s")

    def release(self) -> None:
        self._lock.release()

    def close(self) -> None:
        self._close()


@dataclass(frozen=True)
class PythonRedisLock(SyncContender):
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
        import redis_lock  # type: ignore[import-untyped]

        client = _redis_client(self.url)
        try:
            # whole seconds: the library rounds expire and timeout down with int()
            lock = redis_lock.Lock(client, lock_name, expire=round(self.options.ttl))
        except BaseException:
            client.close()
            raise
        # The library's timeout bounds each BLPOP, not the whole acquire (a waiter that is woken
        # and loses the race starts a new one); without one, a waiter whose wake-up was lost
        # would retry for ever, with it the bench reports an error.
        return _TimeoutLockSession(lock, lock_name, round(self.options.timeout), client.close)


# -- ZooKeeper peers -----------------------------------------------------------------------------

ZOOKEEPER_SCHEMES = ("zookeeper",)


@dataclass(frozen=True)
class KazooLock(SyncContender):
    """kazoo's own ``Lock`` recipe on the same ensemble as tumbler's rows."""

    name: ClassVar[str] = "kazoo-Lock"
    mechanism: ClassVar[str] = (
        "kazoo client.Lock(path): ephemeral sequential node, watch on the predecessor "
        "(its own node names: not shared with tumbler's locks)"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("kazoo", "kazoo"),)

    def open(self, lock_name: str) -> SyncSession:
        from kazoo.client import KazooClient

        from tumbler._url import parse_url
        from tumbler.backends.zookeeper.common import parse_config

        config = parse_config(parse_url(self.url))
        client = KazooClient(hosts=config.connect_string, timeout=config.session_timeout)
        client.start(timeout=config.connect_timeout)
        lock = client.Lock(f"{config.base}/kazoo-{lock_name}")

        def close() -> None:
            client.stop()
            client.close()

        return _TimeoutLockSession(lock, lock_name, self.options.timeout, close)


# -- negative control ---------------------------------------------------------------------------


class _NoSession:
    def acquire(self) -> None:
        pass

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class NoLock(SyncContender):
    """Excludes nothing: its contended run must fail the counter check, which shows that the
    check catches a broken lock. Run it with ``--contender nolock``."""

    name: ClassVar[str] = "nolock"
    mechanism: ClassVar[str] = "negative control: acquire and release do nothing"
    default: ClassVar[bool] = False

    def open(self, lock_name: str) -> SyncSession:
        return _NoSession()


# -- the registry -------------------------------------------------------------------------------

Factory = Callable[[str, Options], "list[Contender]"]
_factories: list[Factory] = []
_names: set[str] = set()


def contender_factory(*names: str) -> Callable[[Factory], Factory]:
    """Register ``factory(url, options)``, which returns the contenders that can run on ``url``
    (an empty list for URLs it does not speak); ``names`` are those it can return."""

    def register(factory: Factory) -> Factory:
        _factories.append(factory)
        _names.update(names)
        return factory

    return register


#: schemes whose backend tumbler is getting: its rows run there (and, until the backend is
#: registered, report the connect error) so that they stand beside the peers from the start
TUMBLER_PLANNED = REDIS_SCHEMES


@contender_factory(TumblerSync.name, TumblerAsync.name)
def _tumbler(url: str, options: Options) -> list[Contender]:
    scheme = urlsplit(url).scheme.lower()
    if scheme not in tumbler.known_schemes() and scheme not in TUMBLER_PLANNED:
        return []
    return [TumblerSync(url, options), TumblerAsync(url, options)]


@contender_factory(RedisPyLock.name, RedisPyFastPoll.name, PythonRedisLock.name)
def _redis_peers(url: str, options: Options) -> list[Contender]:
    if urlsplit(url).scheme.lower() not in REDIS_SCHEMES:
        return []
    return [RedisPyLock(url, options), RedisPyFastPoll(url, options), PythonRedisLock(url, options)]


@contender_factory(KazooLock.name)
def _zookeeper_peers(url: str, options: Options) -> list[Contender]:
    if urlsplit(url).scheme.lower() not in ZOOKEEPER_SCHEMES:
        return []
    return [KazooLock(url, options)]


@contender_factory(NoLock.name)
def _controls(url: str, options: Options) -> list[Contender]:
    return [NoLock(url, options)]


def contenders_for(url: str, options: Options, names: list[str] | None) -> list[Contender]:
    """The contenders to run on ``url``: the default ones, or those ``names`` picks."""
    found = [contender for factory in _factories for contender in factory(url, options)]
    if names is None:
        return [contender for contender in found if contender.default]
    return [contender for contender in found if contender.name in names]


def known_names() -> list[str]:
    """Every contender name a factory can build (for --help, and to refuse typos)."""
    return sorted(_names)
