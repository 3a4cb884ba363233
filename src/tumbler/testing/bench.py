"""The bench's contenders: lock implementations it times side by side, one small unit each.

A contender is a named lock implementation bound to one backend URL. It opens *sessions*: a
client connected to the backend plus one lock object, with ``acquire()`` (blocking until
granted; raising if it cannot be) and ``release()``. The bench (``bench/bench.py`` in the
repository) builds sessions inside the process or thread that uses them, so a contender must
be picklable: keep it a frozen dataclass of plain values and connect in ``open()``, never in
``__init__``.

tumbler's own rows (:class:`TumblerSync`, :class:`TumblerAsync`) run on every URL a backend
opens. The other libraries' locks for a store (its *peers*) come from the store's
:class:`StoreBench`, which the backend's harness gives as its ``bench`` field
(``BackendHarness.bench``, a callable that imports it on demand). To add a peer:

1. subclass :class:`SyncContender` or :class:`AsyncContender` in the backend's harness package
   (``tumbler.testing.backends.<name>.bench``), give
   it a ``name`` and a ``mechanism``, and implement ``open()``, importing the peer's driver
   there (a bench of another store must not need it);
2. list it in that backend's :class:`StoreBench` ``peers``, with the URL schemes it speaks.

The bench then runs it for every URL of those schemes, with the same measurements and the same
table columns as every other row. A store whose server counts its requests, or can say which
version it is, overrides :meth:`StoreBench.request_count` and :meth:`StoreBench.version`; one
that pushes wake-ups to its waiters, or keeps leases for its clients, can say how many
(:meth:`StoreBench.push_count`, :meth:`StoreBench.leases`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol
from urllib.parse import urlsplit

import tumbler
import tumbler.aio

from ..backends.descriptor import BackendDescriptor
from .targets import TestTarget

__all__ = [
    "AsyncContender",
    "AsyncSession",
    "Contender",
    "ElectionPeer",
    "Options",
    "StoreBench",
    "SyncContender",
    "SyncSession",
    "TimeoutLockSession",
    "TumblerAsync",
    "TumblerSync",
    "store_bench",
    "tooz_session",
]


class SyncSession(Protocol):
    """One client and one lock of a blocking contender."""

    def acquire(self) -> None:
        """Block until the lock is granted; raise if it cannot be."""

    def release(self) -> None:
        """Release the lock this session holds."""

    def close(self) -> None:
        """Close the client."""


class AsyncSession(Protocol):
    """One client and one lock of an asyncio contender."""

    async def acquire(self) -> None:
        """Wait until the lock is granted; raise if it cannot be."""

    async def release(self) -> None:
        """Release the lock this session holds."""

    async def close(self) -> None:
        """Close the client."""


@dataclass(frozen=True)
class Options:
    """Settings every contender applies where its library has them (as in peer-bench.md)."""

    #: lease / expiry in seconds
    ttl: float = 30.0
    #: per-acquire timeout in seconds: a waiter that waits longer is an error, not a sample
    timeout: float = 30.0
    #: grant in arrival order, for the libraries that offer the choice
    fair: bool = False


def _descriptor(url: str) -> BackendDescriptor | None:
    """The descriptor of the backend that opens ``url``, or None if none does."""
    from ..backends import descriptor_for

    try:
        return descriptor_for(urlsplit(url).scheme)
    except tumbler.UnknownScheme:
        return None


def store_bench(url: str) -> StoreBench | None:
    """The :class:`StoreBench` of the backend that opens ``url``; None if that backend has
    none (or no backend opens it)."""
    from .harness import harness_for

    descriptor = _descriptor(url)
    harness = harness_for(descriptor) if descriptor is not None else None
    if harness is None or harness.bench is None:
        return None
    found = harness.bench()
    return found if isinstance(found, StoreBench) else None


@dataclass(frozen=True)
class ElectionPeer:
    """Another library's leader election on a store (``StoreBench.election_peers``): its
    ``name``, and ``failovers(ttl, runs)``, the seconds from its leader's SIGKILL to the next
    leader, ``runs`` times, with leases (or sessions) of ``ttl``."""

    name: str
    failovers: Callable[[float, int], list[float]]


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
    #: a store's *floor*: the raw round trips a lock pair cannot do without, through the
    #: same client, that exclude nothing. Timed uncontended only, as the denominator of the
    #: uncontended table's ``x floor`` column for the rows of its flavour
    floor: ClassVar[bool] = False
    #: whether a floor goes through the client the backend itself uses (the ``x floor``
    #: denominator), or through another, for comparison (another transport to the store)
    same_client: ClassVar[bool] = True

    @property
    def label(self) -> str:
        """The row label: the name, marked ``-fair`` where the option changes the lock."""
        return f"{self.name}-fair" if self.options.fair and self.offers_fair else self.name

    @property
    def cross_process(self) -> bool:
        """Whether clients in different processes share its locks; if not, the contended
        run uses threads of one process."""
        descriptor = _descriptor(self.url)
        return descriptor is None or descriptor.capabilities.scope != "process"

    def server_ops(self) -> int | None:
        """The server's own request counter, read from the parent process; None if the
        backend has none. Its growth over a contended run, per acquisition, is a column."""
        bench = store_bench(self.url)
        return None if bench is None else bench.request_count(self.url)

    def server_pushes(self) -> int | None:
        """The server's count of what it has pushed to waiting clients, read from the parent
        process; None if the backend has none. Its growth over a contended run, per
        acquisition, is a column."""
        bench = store_bench(self.url)
        return None if bench is None else bench.push_count(self.url)

    def server_leases(self) -> frozenset[str] | None:
        """The leases the server holds now, read from the parent process; None if the
        backend has none. Those a contended run leaves behind are a column."""
        bench = store_bench(self.url)
        return None if bench is None else bench.leases(self.url)


class SyncContender(Contender):
    """A contender whose sessions block."""

    def open(self, lock_name: str) -> SyncSession:
        """Connect, and make the lock ``lock_name`` (not yet acquired)."""
        raise NotImplementedError


class AsyncContender(Contender):
    """A contender whose sessions are coroutines, run on an asyncio loop."""

    is_async: ClassVar[bool] = True

    async def open(self, lock_name: str) -> AsyncSession:
        """Connect, and make the lock ``lock_name`` (not yet acquired)."""
        raise NotImplementedError


class TimeoutLockSession:
    """A peer's lock whose ``acquire(timeout=...)`` returns False when the timeout runs out;
    ``close`` closes its client."""

    def __init__(
        self, lock: Any, lock_name: str, timeout: float, close: Callable[[], object]
    ) -> None:
        self._lock = lock
        self._lock_name = lock_name
        self._timeout = timeout
        self._close = close

    def acquire(self) -> None:
        """Acquire within the timeout; TimeoutError if the lock says it could not."""
        if not self._lock.acquire(timeout=self._timeout):
            raise TimeoutError(f"no grant of {self._lock_name!r} within {self._timeout} s")

    def release(self) -> None:
        """Release the peer's lock."""
        self._lock.release()

    def close(self) -> None:
        """Close the peer's client."""
        self._close()


class _ToozSession:
    def __init__(self, coordinator: Any, lock: Any) -> None:
        self._coordinator = coordinator
        self._lock = lock

    def acquire(self) -> None:
        if not self._lock.acquire(blocking=True):
            raise TimeoutError("tooz refused a blocking acquire")

    def release(self) -> None:
        self._lock.release()

    def close(self) -> None:
        self._coordinator.stop()


def tooz_session(url: str, lock_name: str) -> SyncSession:
    """tooz's lock ``lock_name`` on a coordinator of its own for the tooz URL ``url`` (a
    member id of its own), taken with ``blocking=True``: tooz's locks take no timeout."""
    from tooz import coordination

    coordinator = coordination.get_coordinator(url, uuid.uuid4().hex.encode())
    coordinator.start()
    return _ToozSession(coordinator, coordinator.get_lock(lock_name.encode()))


@dataclass(frozen=True)
class StoreBench:
    """What the bench knows of one store beyond tumbler's own rows: the other libraries'
    locks on it, and how to read its server.

    A backend's harness gives it as ``bench`` (imported on demand); a store with more to
    say subclasses it.
    """

    #: the peers' contender classes, each made as ``peer(url, options)``
    peers: tuple[type[Contender], ...] = ()
    #: the URL schemes the peers speak (the store's others get tumbler's rows only)
    schemes: tuple[str, ...] = ()
    #: servers the bench starts in place of the test targets of the same name: a set-up
    #: closer to production than the tests need (fsync on, say)
    targets: tuple[TestTarget, ...] = ()
    #: the store's floors (``Contender.floor``), one per flavour, on the peers' schemes
    floors: tuple[type[Contender], ...] = ()
    #: the name of the peer whose uncontended pair is the ``x peer`` column's denominator
    reference: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """Every contender name :meth:`contenders` can return."""
        return tuple(peer.name for peer in (*self.peers, *self.floors))

    def contenders(self, url: str, options: Options) -> Sequence[Contender]:
        """The peers and floors that run on ``url`` (none for a scheme they do not speak)."""
        if urlsplit(url).scheme.lower() not in self.schemes:
            return []
        return [peer(url, options) for peer in (*self.peers, *self.floors)]

    def request_count(self, url: str) -> int | None:
        """The request counter of the server behind ``url``; None if it has none or it
        cannot be read. Two readings bracket each contender's timed uncontended pairs (the
        ``server req/pair`` column, less what a reading itself adds to the next, measured
        first) and each contended run (``server ops/acq``). Other clients of the server count
        too: the bench's uncontended rows run one client at a time."""
        return None

    def push_count(self, url: str) -> int | None:
        """How many notifications the server behind ``url`` has pushed to clients that wait
        on it (watch events, say); None if it keeps no such count or it cannot be read. Two
        readings bracket each contended run: a lock that wakes only the next waiter at a
        release shows about one per acquisition (``server pushes/acq``), one that wakes every
        waiter about one per waiter."""
        return None

    def leases(self, url: str) -> frozenset[str] | None:
        """The leases (or the like: what the server keeps for a client until it is revoked
        or runs out) that the server behind ``url`` holds now, by id; None if it has none or
        they cannot be read. Read before each contended run's workers start and after they
        exit: those there after and not before are the run's leftovers (``leases left``)."""
        return None

    def version(self, url: str) -> str | None:
        """Which server ``url`` reaches, for the bench's header; None if unknown."""
        return None

    def election_peers(self, url: str) -> Sequence[ElectionPeer]:
        """The other libraries' leader elections on ``url`` (``bench/failover.py``); none by
        default."""
        return ()

    def lease_url(self, url: str, ttl: float) -> str:
        """``url`` set up to keep many holds of lease ``ttl`` (``bench/many_leases.py``): a
        store whose holds live with a client session makes the session no longer than the
        lease, so that a lost client loses its holds as soon as a lease would run out."""
        return url


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
    """tumbler's blocking client."""

    name: ClassVar[str] = "tumbler-sync"
    offers_fair: ClassVar[bool] = True
    mechanism: ClassVar[str] = (
        "tumbler.connect(url).lock(name, ttl, timeout); the backend's grant rule; waiters "
        "poll with jittered backoff, or are woken by the backend where it pushes wake-ups "
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
    """tumbler's asyncio client."""

    name: ClassVar[str] = "tumbler-async"
    offers_fair: ClassVar[bool] = True
    mechanism: ClassVar[str] = (
        "the same through tumbler.aio.connect(url) on an asyncio loop (a backend with only a "
        "blocking driver runs its calls on the client's one backend thread)"
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
