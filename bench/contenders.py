"""Contenders: the lock implementations the bench times, one small pluggable unit each.

A contender is a named lock implementation bound to one backend URL. It opens *sessions*: a
client connected to the backend plus one lock object, with ``acquire()`` (blocking until
granted; raising if it cannot be) and ``release()``. The bench builds sessions inside the
process (or thread) that uses them, so a contender must be picklable: keep it a frozen
dataclass of plain values and connect in ``open()``, never in ``__init__``.

To add a peer (redis-py ``Lock``, kazoo ``Lock``, ...) or another backend's variant:

1. subclass ``SyncContender`` or ``AsyncContender``, give it a ``name`` and a ``mechanism``,
   and implement ``open()`` (and ``server_ops()`` if the server has a request counter);
2. write a factory ``(url, options) -> list[Contender]`` returning it for the URL schemes it
   speaks, and decorate the factory with ``@contender_factory(<the names it returns>)``.

The bench then runs it for every ``--url`` of those schemes, with the same measurements and the
same table columns as every other row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol
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
        return None


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
        "tumbler.connect(url).lock(name, ttl, timeout); the backend's grant rule, waiters "
        "woken by the backend or polling with jittered backoff (SQLite: 2-50 ms)"
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


@contender_factory(TumblerSync.name, TumblerAsync.name)
def _tumbler(url: str, options: Options) -> list[Contender]:
    if urlsplit(url).scheme.lower() not in tumbler.known_schemes():
        return []
    return [TumblerSync(url, options), TumblerAsync(url, options)]


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
