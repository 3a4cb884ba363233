# Generated from src/tumbler/_async/primitives.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""The lock objects: mutex, re-entrant mutex, semaphore, read/write lock, segmented lock, and
several locks taken as one (multi-lock).

A lock object is a name and its settings (lease, timeout, fairness, renewal); the grants are
the client's (``AsyncLocks``) and each lives on its hold (``AsyncHold``). A lock object keeps,
per thread (blocking flavour) or per task (asyncio), the holds that thread or task acquired:
``release()`` releases the caller's own, and re-entrancy counts the caller's own.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Hashable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Final, Generic, Protocol, TypeVar

from .. import _core as core
from .._acompat import current_context, shield
from .._logs import logger
from ..errors import (
    AcquireTimeout,
    AlreadyHeld,
    BackendUnavailable,
    InvalidTimeout,
    LockLost,
    NotHeld,
    TumblerError,
)
from .hold import Hold, MultiHold, SegmentHold

if TYPE_CHECKING:
    import random

    from .client import Locks

_log = logger("tumbler")

#: the kind of hold a lock object's acquisitions make
H = TypeVar("H", bound=Hold)


class _Unset:
    def __repr__(self) -> str:
        return "<the lock's timeout>"


_UNSET: Final = _Unset()

#: where segmented locks draw the segment they try first (made at the first draw); drawn
#: afresh in a forked child, so that the processes a server forks after importing tumbler do
#: not all try the same segments in the same order
_rng: random.Random | None = None


def _segments_rng() -> random.Random:
    global _rng
    if _rng is None:
        import random

        _rng = random.Random()
    return _rng


def _reseed() -> None:
    if _rng is not None:
        _rng.seed()


os.register_at_fork(after_in_child=_reseed)


class _Releasable(Protocol):
    """What ``with`` needs of a hold: its release, and whether one has begun."""

    @property
    def _release_begun(self) -> bool: ...

    def _report_loss(self) -> None: ...

    def release(self) -> None: ...


#: the kind of hold a ``with`` block gets
R = TypeVar("R", bound=_Releasable)


class _Holder(Generic[R]):
    """What every lock object shares: the holds of each thread or task, and ``with`` (which
    waits up to ``timeout``, and releases what it took at the end of the block)."""

    timeout: float | None
    _locks: Locks
    _guard: threading.Lock
    _holds: dict[Hashable, list[R]]
    _entered: dict[Hashable, list[R]]

    @property
    def hold(self) -> R | None:
        """The calling thread's/task's latest hold of this lock, or None."""
        with self._guard:
            holds = self._holds.get(current_context())
            return holds[-1] if holds else None

    def acquire(
        self, blocking: bool = True, timeout: core.Seconds | _Unset | None = _UNSET
    ) -> bool:
        raise NotImplementedError

    def _described(self) -> tuple[str, str]:
        """What messages call the lock (``lock 'x'``), and the lock name errors carry."""
        raise NotImplementedError

    def _left_counted(self, context: Hashable) -> bool:
        """Whether leaving a ``with`` block only counts down a re-entrant hold."""
        return False

    def __enter__(self) -> R:
        if not self.acquire():
            what, lock_name = self._described()
            raise AcquireTimeout(
                f"{what} could not be acquired within {self.timeout} s",
                lock_name=lock_name,
                backend=self._locks.url,
            )
        hold = self.hold
        assert hold is not None
        with self._guard:
            self._entered.setdefault(current_context(), []).append(hold)
        return hold

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        context = current_context()
        with self._guard:
            entered = self._entered.get(context)
            hold = entered.pop() if entered else None
            if entered is not None and not entered:
                del self._entered[context]
            if hold is not None and self._left_counted(context):
                return
        if hold is not None:
            release_on_leaving(hold, exc_type is not None, self._described()[0])


def release_on_leaving(hold: _Releasable, failing: bool, what: str) -> None:
    """The end of a ``with`` block of ``hold`` (``what``: ``lock 'x'``, for the log): release
    it, and raise ``LockLost`` if it had been lost, unless the block is ``failing`` (an
    exception on its way out, which is never hidden: the loss is logged instead)."""
    if hold._release_begun:
        # released inside the block, by hand or by close(): report a loss not yet reported
        if not failing:
            hold._report_loss()
        return
    try:
        hold.release()
    except (LockLost, BackendUnavailable):
        if not failing:
            raise
        _log.warning("%s: hold lost or not released while leaving on an error", what)


class _Primitive(_Holder[H]):
    """What every lock object of one name shares: acquire/release per thread or task,
    ``locked``. ``H``: the kind of hold it makes."""

    _shared: bool = False
    #: the same thread/task may acquire again: counted (rlock) ...
    _reentrant: bool = False
    #: ... or as separate grants (semaphore permits); otherwise a second acquire is an error
    _multiple: bool = False

    def __init__(
        self,
        locks: Locks,
        name: str,
        hold_type: Callable[..., H],
        *,
        limit: int,
        ttl: core.Seconds | None,
        timeout: core.Seconds | None,
        fair: bool,
        renew: bool,
        lock_delay: core.Seconds,
    ) -> None:
        #: the lock name (canonical NFC form)
        self.name: str = core.validate_name(name)
        #: the lease asked for, in seconds
        self.ttl: float = locks._lease_for(ttl)
        #: how long ``with`` (and ``acquire()`` without a timeout) waits; None: for ever
        self.timeout: float | None = core.validate_timeout(timeout)
        #: grants in arrival order
        self.fair: bool = core.validate_flag(fair, "fair")
        #: renew the lease automatically while held
        self.renew: bool = core.validate_flag(renew, "renew")
        #: seconds the name stays closed after a grant of this lock ends other than by a
        #: release (0: none)
        self.lock_delay: float = locks._lock_delay_for(lock_delay)
        self._locks = locks
        self._limit = limit
        self._hold_type = hold_type
        self._own_name = (self.name,)
        self._guard = threading.Lock()
        self._holds: dict[Hashable, list[H]] = {}
        self._depth: dict[Hashable, int] = {}
        self._entered: dict[Hashable, list[H]] = {}

    def acquire(
        self, blocking: bool = True, timeout: core.Seconds | _Unset | None = _UNSET
    ) -> bool:
        """Acquire the lock; True if acquired, False if the timeout ran out first.

        ``blocking=False`` tries once. ``timeout`` (seconds) defaults to the lock's own
        ``timeout``; None or -1 waits for ever, 0 tries once (a grant whose reply came after
        its lease ran out is given back and asked for again once, so that one slow round
        trip does not refuse a lock nobody holds). A wait rides out a backend
        that stops answering: it asks again until the timeout, then raises the last
        ``BackendUnavailable`` (without a timeout, once the backend has answered it, it waits
        for the backend too).
        """
        return self._acquire(self._seconds(blocking, timeout), self._own_name)

    def _seconds(self, blocking: bool, timeout: core.Seconds | _Unset | None) -> float | None:
        """How long an acquire waits: 0 for a single try, None for ever."""
        if not blocking:
            if timeout is not _UNSET and timeout is not None and timeout != -1:
                raise InvalidTimeout("a non-blocking acquire cannot have a timeout")
            return 0.0
        return self.timeout if isinstance(timeout, _Unset) else core.validate_timeout(timeout)

    def _acquire(self, seconds: float | None, names: tuple[str, ...]) -> bool:
        """Acquire one of ``names`` (the lock's own, or segments), waiting ``seconds``."""
        context = current_context()
        current = self._current(context)
        if current is not None and not self._multiple:
            if not self._reentrant:
                raise AlreadyHeld(
                    f"lock {self.name!r} is already held by this thread/task and is not "
                    "re-entrant (use rlock())",
                    lock_name=self.name,
                )
            current.check()
            with self._guard:
                self._depth[context] += 1
            return True
        hold = self._locks._acquire_hold(
            names,
            self._hold_type,
            lock_name=self.name,
            shared=self._shared,
            limit=self._limit,
            fair=self.fair,
            ttl=self.ttl,
            timeout=seconds,
            renew=self.renew,
            lock_delay=self.lock_delay,
        )
        if hold is None:
            return False
        with self._guard:
            self._holds.setdefault(context, []).append(hold)
            self._depth[context] = 1
        hold._on_finish(functools.partial(self._forget, context))
        return True

    def release(self) -> None:
        """Release the calling thread's/task's hold (its latest, for semaphores).

        Raises ``NotHeld`` if it holds none, and ``LockLost`` (after releasing) if the hold had
        been lost. A re-entrant lock is released when released as often as acquired.
        """
        context = current_context()
        hold = self._current(context)
        if hold is None:
            raise NotHeld(
                f"lock {self.name!r} is not held by this thread/task", lock_name=self.name
            )
        if self._reentrant:
            with self._guard:
                if self._depth[context] > 1:
                    self._depth[context] -= 1
                    return
        hold.release()

    def locked(self) -> bool:
        """Whether an acquire (non-fair) would have to wait now: asks the backend."""
        state = self._locks.status(self.name)
        return core.would_block([h.shared for h in state.holders], self._shared, self._limit)

    def _described(self) -> tuple[str, str]:
        return f"lock {self.name!r}", self.name

    def _left_counted(self, context: Hashable) -> bool:
        # called under the guard
        if self._reentrant and self._depth.get(context, 0) > 1:
            self._depth[context] -= 1
            return True
        return False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} ttl={self.ttl} fair={self.fair}>"

    def _current(self, context: Hashable) -> H | None:
        with self._guard:
            holds = self._holds.get(context)
            return holds[-1] if holds else None

    def _forget(self, context: Hashable, hold: H) -> None:
        with self._guard:
            holds = self._holds.get(context)
            if holds is not None and hold in holds:
                holds.remove(hold)
                if not holds:
                    del self._holds[context]
                    self._depth.pop(context, None)


class Lock(_Primitive[Hold]):
    """A mutex: one holder at a time. Not re-entrant: a second acquire by the holder raises
    ``AlreadyHeld`` instead of waiting for itself."""

    def __init__(
        self,
        locks: Locks,
        name: str,
        *,
        ttl: core.Seconds | None = None,
        timeout: core.Seconds | None = None,
        fair: bool = False,
        renew: bool = True,
        lock_delay: core.Seconds = 0.0,
    ) -> None:
        super().__init__(
            locks,
            name,
            Hold,
            limit=1,
            ttl=ttl,
            timeout=timeout,
            fair=fair,
            renew=renew,
            lock_delay=lock_delay,
        )


class RLock(Lock):
    """A re-entrant mutex: the holding thread/task may acquire again; one grant, counted."""

    _reentrant = True


class Semaphore(_Primitive[Hold]):
    """Up to ``permits`` holders at a time; each acquire takes one permit with its own lease.

    Every client must use the same number of permits for a name (``PermitsMismatch``
    otherwise). A thread/task may hold several permits; ``release()`` returns its latest.
    """

    _shared = True
    _multiple = True

    def __init__(
        self,
        locks: Locks,
        name: str,
        permits: int,
        *,
        ttl: core.Seconds | None = None,
        timeout: core.Seconds | None = None,
        fair: bool = False,
        renew: bool = True,
        lock_delay: core.Seconds = 0.0,
    ) -> None:
        #: how many holders the semaphore admits at once
        self.permits: int = core.validate_permits(permits)
        super().__init__(
            locks,
            name,
            Hold,
            limit=self.permits,
            ttl=ttl,
            timeout=timeout,
            fair=fair,
            renew=renew,
            lock_delay=lock_delay,
        )


class SegmentedLock(_Primitive[SegmentHold]):
    """A lock split into ``segments`` mutexes: each acquire takes whichever segment is free
    first, and the hold says which (``hold.segment``, 0 to ``segments - 1``), with that
    segment's own fencing token.

    For a resource that can be partitioned (a stock kept in K parts, a quota, the shards of a
    counter): up to ``segments`` holders work at once, each on its own part, where one lock
    would admit one. The caller must touch only the part of the segment it holds, and every
    client must split the resource the same way (the count is part of each segment's lock
    name, ``NAME#i/K``). Not for a resource whose every change needs all of it: use
    ``lock()``, or ``semaphore()`` when holders need no part of their own.

    An acquire tries the segments in an order that starts at a random one (acquirers that come
    at once mostly try different ones first) and, if all are taken, waits on all of them at
    once, woken by the backend when any is released. A thread/task may hold several segments;
    ``release()`` returns its latest.
    """

    _multiple = True

    def __init__(
        self,
        locks: Locks,
        name: str,
        segments: int,
        *,
        ttl: core.Seconds | None = None,
        timeout: core.Seconds | None = None,
        fair: bool = False,
        renew: bool = True,
        lock_delay: core.Seconds = 0.0,
    ) -> None:
        #: how many segments the lock is split into
        self.segments: int = core.validate_segments(segments)
        #: the lock name of each segment, in segment order
        self.segment_names: tuple[str, ...] = core.segment_names(
            core.validate_name(name), self.segments
        )
        segment_of = {name: index for index, name in enumerate(self.segment_names)}
        hold_type = functools.partial(SegmentHold, segment_of=segment_of)
        super().__init__(
            locks,
            name,
            hold_type,
            limit=1,
            ttl=ttl,
            timeout=timeout,
            fair=fair,
            renew=renew,
            lock_delay=lock_delay,
        )

    def acquire(
        self,
        blocking: bool = True,
        timeout: core.Seconds | _Unset | None = _UNSET,
        *,
        segments: Iterable[int] | None = None,
    ) -> bool:
        """Acquire a segment; True if acquired, False if the timeout ran out first.

        ``segments``: the segments it may take (default: any), e.g. those whose part of the
        resource is not used up. ``blocking`` and ``timeout`` as for ``lock().acquire()``.
        """
        chosen = core.validate_segment_choice(segments, self.segments)
        seconds = self._seconds(blocking, timeout)
        names = self.segment_names
        return self._acquire(seconds, tuple(names[i] for i in core.spread(chosen, _segments_rng())))

    def locked(self) -> bool:
        """Whether an acquire (non-fair) would have to wait now, every segment being held:
        asks the backend, one segment after the other."""
        for name in self.segment_names:
            state = self._locks.status(name)
            if not state.holders:
                return False
        return True

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.name!r} segments={self.segments} ttl={self.ttl} "
            f"fair={self.fair}>"
        )


class ReadLock(_Primitive[Hold]):
    """The shared side of a read/write lock: any number of readers, no writer."""

    _shared = True

    def __init__(
        self,
        locks: Locks,
        name: str,
        *,
        ttl: core.Seconds | None = None,
        timeout: core.Seconds | None = None,
        fair: bool = False,
        renew: bool = True,
        lock_delay: core.Seconds = 0.0,
    ) -> None:
        super().__init__(
            locks,
            name,
            Hold,
            limit=0,
            ttl=ttl,
            timeout=timeout,
            fair=fair,
            renew=renew,
            lock_delay=lock_delay,
        )


class RWLock:
    """A read/write lock: ``read()`` is shared among readers, ``write()`` is exclusive.

    The write side is the same as ``lock(name)``: a mutex of that name excludes readers too.
    Fair (arrival order) unless made with ``fair=False``, which lets a stream of readers keep a
    writer waiting.
    """

    def __init__(
        self,
        locks: Locks,
        name: str,
        *,
        ttl: core.Seconds | None = None,
        timeout: core.Seconds | None = None,
        fair: bool = True,
        renew: bool = True,
        lock_delay: core.Seconds = 0.0,
    ) -> None:
        self._read = ReadLock(
            locks, name, ttl=ttl, timeout=timeout, fair=fair, renew=renew, lock_delay=lock_delay
        )
        self._write = Lock(
            locks, name, ttl=ttl, timeout=timeout, fair=fair, renew=renew, lock_delay=lock_delay
        )
        self.name: str = self._read.name

    def read(self) -> ReadLock:
        return self._read

    def write(self) -> Lock:
        return self._write

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class MultiLock(_Holder[MultiHold]):
    """Several mutexes taken as one: all of them or none, each name with its own fencing
    token (``hold.tokens``).

    The names are taken one after the other in one order that every caller shares (the code
    point order of their canonical forms, ``names``), whatever order they were given in: two
    callers whose sets overlap then never each hold a name the other waits for. An acquire
    that cannot have every name within its timeout gives back those it took and returns
    False. The whole is lost as soon as any part is (see ``AsyncMultiHold``). Each part is a
    ``lock()`` of its name: a mutex of one of the names held elsewhere (by any client, or by
    this thread/task through another lock object) is waited for, and acquiring this
    multi-lock again in the thread/task that holds it raises ``AlreadyHeld``.
    """

    def __init__(
        self,
        locks: Locks,
        names: Iterable[str],
        *,
        ttl: core.Seconds | None = None,
        timeout: core.Seconds | None = None,
        fair: bool = False,
        renew: bool = True,
        lock_delay: core.Seconds = 0.0,
    ) -> None:
        #: the names (canonical), in the order they are taken
        self.names: tuple[str, ...] = core.multi_names(names)
        self._parts = tuple(
            Lock(
                locks,
                name,
                ttl=ttl,
                timeout=timeout,
                fair=fair,
                renew=renew,
                lock_delay=lock_delay,
            )
            for name in self.names
        )
        first = self._parts[0]
        #: the lease of each name, in seconds
        self.ttl: float = first.ttl
        #: how long ``with`` (and ``acquire()`` without a timeout) waits for all of them
        self.timeout: float | None = first.timeout
        self.fair: bool = first.fair
        self.renew: bool = first.renew
        self.lock_delay: float = first.lock_delay
        self._locks = locks
        self._guard = threading.Lock()
        self._holds: dict[Hashable, list[MultiHold]] = {}
        self._entered: dict[Hashable, list[MultiHold]] = {}

    def acquire(
        self, blocking: bool = True, timeout: core.Seconds | _Unset | None = _UNSET
    ) -> bool:
        """Acquire every name; True if acquired, False if the timeout ran out first (having
        given back what it took). ``blocking`` and ``timeout`` as for ``lock().acquire()``;
        the timeout is for all the names together. A name taken early and lost while a later
        one was waited for (its lease ran out meanwhile) is not handed over lost: every name
        is given back and the whole is taken again, within the same timeout."""
        seconds = self._parts[0]._seconds(blocking, timeout)
        clock = self._locks._clock
        deadline = None if seconds is None else clock.now() + seconds
        while True:
            taken = self._take_each(deadline)
            if taken is None:
                return False
            if not any(hold.lost for hold in taken):
                break
            shield(_give_back(taken))
            if deadline is not None and clock.now() >= deadline:
                return False
        multi = MultiHold(taken, clock)
        context = current_context()
        with self._guard:
            self._holds.setdefault(context, []).append(multi)
        taken[0]._on_finish(functools.partial(self._forget, context, multi))
        return True

    def _take_each(self, deadline: float | None) -> list[Hold] | None:
        """Take every name in order by ``deadline``; None (having given back what it took)
        if one could not be had by then."""
        clock = self._locks._clock
        taken: list[Hold] = []
        try:
            for part in self._parts:
                left = None if deadline is None else max(0.0, deadline - clock.now())
                if not part.acquire(timeout=left):
                    shield(_give_back(taken))
                    return None
                hold = part.hold
                assert hold is not None
                taken.append(hold)
        except BaseException:
            shield(_give_back(taken))
            raise
        return taken

    def release(self) -> None:
        """Release the calling thread's/task's hold of every name (see
        ``AsyncMultiHold.release``). Raises ``NotHeld`` if it holds none."""
        hold = self.hold
        if hold is None:
            raise NotHeld(
                f"locks {list(self.names)!r} are not held by this thread/task",
                lock_name=self.names[0],
            )
        hold.release()

    def _described(self) -> tuple[str, str]:
        return f"locks {list(self.names)!r}", self.names[0]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {list(self.names)!r} ttl={self.ttl} fair={self.fair}>"

    def _forget(self, context: Hashable, multi: MultiHold, _part: Hold) -> None:
        with self._guard:
            holds = self._holds.get(context)
            if holds is not None and multi in holds:
                holds.remove(multi)
                if not holds:
                    del self._holds[context]


def _give_back(holds: list[Hold]) -> int:
    """Release the parts a failed multi-lock acquire took, the last first; how many went
    back (a part that could not be released frees itself when its lease runs out)."""
    given = 0
    for hold in reversed(holds):
        try:
            hold.release()
            given += 1
        except LockLost:
            pass  # lost already: the backend no longer has it, or keeps it lapsed
        except TumblerError as error:
            _log.warning(
                "lock %r: not given back after a failed multi-lock acquire: %s", hold.name, error
            )
    return given
