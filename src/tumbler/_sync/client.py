# Generated from src/tumbler/_async/client.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""The client: one connection to a lock backend, the lock objects it makes, and its holds.

A client (``AsyncLocks``) owns what its lock objects share: the backend behind its gate
(``AsyncClientGate``: calls refused once closed, counted while in flight); the holds it
granted, kept renewed until they are released, lost or the client closed (one renewal worker
and one deadline watch for them all); the lines in which its own waiters for a lock queue, so
that only the first of them talks to the backend; and the operators' calls (status,
force_release).
"""

from __future__ import annotations

import binascii
import collections
import functools
import os
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, ParamSpec, TypeVar, cast

from .. import _core as core
from .. import _observing
from .._acompat import (
    Event,
    ExitGuard,
    check_cancelled,
    check_synchronizable,
    current_context,
    shield,
    sleep_real,
)
from .._clock import Clock
from .._logs import DEBUG, WARNING, logger
from .._observing import Acquisition, Observers, checked
from ..backends.contract import (
    Backend,
    Capabilities,
    Grant,
    GrantRequest,
    LockState,
    SessionEvents,
    StateWatching,
    Watch,
)
from ..errors import BackendUnavailable, TumblerError
from .gate import ClientGate
from .hold import GIVE_BACK, RENEW, Hold
from .primitives import (
    Lock,
    MultiLock,
    RLock,
    RWLock,
    SegmentedLock,
    Semaphore,
)
from .renewal import Renewer

if TYPE_CHECKING:
    import random

    from .changes import StateChanges
    from .election import Election

_log = logger("tumbler")
#: the longest pause between grant requests of a waiter whose backend is not answering
UNAVAILABLE_RETRY_CAP = 0.5
#: how many times one try asks for a grant whose reply keeps coming after its lease ran out
LATE_GRANT_TRIES = 2

P = ParamSpec("P")
R = TypeVar("R")
#: the kind of hold an acquisition makes (a segmented lock's say which segment)
H = TypeVar("H", bound=Hold)
#: makes the hold of a grant: (request, grant, when the request was sent)
HoldMaker = Callable[[GrantRequest, Grant, float], H]


#: base64's two characters that are not URL-safe, and what the URL-safe alphabet has instead
_URL_SAFE = bytes.maketrans(b"+/", b"-_")


def _new_owner() -> str:
    """A fresh owner id: 18 random bytes from the OS, as 24 URL-safe characters (what
    ``secrets.token_urlsafe(18)`` makes, without importing ``secrets``, ``hmac`` and
    ``base64``)."""
    return binascii.b2a_base64(os.urandom(18), newline=False).translate(_URL_SAFE).decode()


def _eviction_note(forcer: str, reason: str | None) -> str:
    """What a forced release leaves for the holders it evicts: who forced it, when, and why
    (``forcer``: the client's host and pid)."""
    import getpass  # only forced releases need it

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (a container's uid)
        user = f"uid {os.getuid()}"
    moment = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    note = f"{user} on {forcer} at {moment}"
    return note if reason is None else f"{note}: {reason}"


class _Place:
    """A waiter's place in its client's line for one lock.

    Its ``turn`` is made only when the waiter must wait for someone ahead of it (rare: most
    acquisitions find the line empty); whoever leaves the head of the line, or closes the
    client, sets it. ``turn`` is set and read under the client's guard.
    """

    __slots__ = ("turn",)

    def __init__(self) -> None:
        self.turn: Event | None = None

    def wake(self) -> None:
        """Tell the waiter to look at the line again (it waits only if it made its turn)."""
        turn = self.turn
        if turn is not None:
            turn.set_threadsafe()


class _AnyWatch:
    """The watches of several locks as one (a segmented lock's segments): entered together,
    and a wait returns at a wake-up of any of them.

    It always asks for a retry on entry: a segmented acquisition's first tries leave no waiter
    entries, and backends wake waiters by their entries.
    """

    def __init__(self, watches: list[Watch], clock: Clock) -> None:
        self.retry_needed = True
        self._watches = watches
        self._clock = clock
        self._changed = Event()
        for watch in watches:
            watch.add_listener(self._changed.set_threadsafe)

    def wait(self, timeout: float) -> None:
        self._changed.wait(self._clock.real_timeout(timeout))
        self._changed.clear()

    def wake(self) -> None:
        self._changed.set_threadsafe()

    def add_listener(self, listener: Callable[[], None]) -> None:
        for watch in self._watches:
            watch.add_listener(listener)

    def close(self) -> None:
        for watch in self._watches:
            watch.close()

    def __enter__(self) -> _AnyWatch:
        try:
            for watch in self._watches:
                watch.__enter__()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Locks:
    """A client of one lock backend: makes lock objects and renews their leases.

    Made by ``connect()``. Use one client per process (per event loop in asyncio) and share it:
    it holds the backend connection(s) and the one renewal worker that serves every hold. A
    grant stays held, and renewed, until it is released, found lost, or the client closed: the
    client keeps it, not the caller's reference to the lock object or the hold.

    ``close()`` (or leaving ``with``) releases what is still held; so does the end of the
    program (interpreter exit; in asyncio, the end of ``asyncio.run()``) for a client left
    open, within a couple of seconds, so that an unreachable backend cannot hang the exit. A
    client is not usable in a process forked from the one that made it (``ForkedClient``), nor,
    in asyncio, from another event loop (``WrongEventLoop``): connect anew there.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        default_ttl: core.Seconds = core.DEFAULT_TTL,
        observers: Iterable[_observing.Observer] = (),
        holder: str | None = None,
    ) -> None:
        self._backend = backend
        self._clock = backend.clock
        #: the client's calls on its backend (for its holds and lock objects)
        self._gate = ClientGate(backend)
        self._default_ttl = self._gate.lease(core.validate_ttl(default_ttl))
        #: None unless an observer wants some event: then every acquisition is observed
        self._observers = Observers.of(checked(observers), backend.url, backend.clock)
        self._renewer: Renewer[Hold] = Renewer(backend.clock, self._serve_due, self._expire_overdue)
        #: the jitter of this client's waits between polls, made at its first wait
        self._rng: random.Random | None = None
        self._holder = (
            f"{os.uname().nodename} pid={self._gate.pid}"
            if holder is None
            else core.validate_holder(holder)
        )
        # The client keeps every hold it granted until it is released, lost or the client
        # closed: a hold must not run out because the caller dropped its lock object.
        self._live: dict[int, Hold] = {}
        # ... under the gate's guard, as are the lines and watches: close() must find every
        # one of them that began before it
        self._guard = self._gate.guard
        # a client's waiters on one lock queue here, and only the first of them at the backend
        self._lines: dict[
            tuple[tuple[str, ...], bool, int, bool, float], collections.deque[_Place]
        ] = {}
        self._watches: set[Watch] = set()
        if backend.session_events is not None:
            backend.session_events.subscribe(self._on_session_event)
        self._exit_guard = ExitGuard(self.close)

    @property
    def url(self) -> str:
        """The backend's URL, without credentials."""
        return self._backend.url

    @property
    def capabilities(self) -> Capabilities:
        return self._backend.capabilities

    # -- lock objects ------------------------------------------------------------------------

    def lock(
        self,
        name: str,
        *,
        ttl: core.Seconds | None = None,
        timeout: core.Seconds | None = None,
        fair: bool = False,
        renew: bool = True,
        lock_delay: core.Seconds = 0.0,
    ) -> Lock:
        """A mutex named ``name``.

        ``ttl``: the lease in seconds (default 30): if the holder dies, others can have the lock
        this long after its last renewal. While the holder lives its lease is renewed every
        ``ttl/3`` unless ``renew=False``. ``timeout``: how long ``with`` waits (None: for ever).
        ``fair=True``: waiters are granted in arrival order.
        ``lock_delay`` (seconds, default 0): if this grant ends other than by a release (its
        holder died, paused or was cut off past its lease), nobody is granted ``name`` for
        that long after, so that writes the lost holder had in flight land before the next
        holder starts (Chubby's lock-delay). A release, and an operator's force release,
        end a grant with no delay. Every client of a name should use the same.
        """
        return Lock(
            self, name, ttl=ttl, timeout=timeout, fair=fair, renew=renew, lock_delay=lock_delay
        )

    def rlock(
        self,
        name: str,
        *,
        ttl: core.Seconds | None = None,
        timeout: core.Seconds | None = None,
        fair: bool = False,
        renew: bool = True,
        lock_delay: core.Seconds = 0.0,
    ) -> RLock:
        """A re-entrant mutex: like ``lock()``, but the holder may acquire it again."""
        return RLock(
            self, name, ttl=ttl, timeout=timeout, fair=fair, renew=renew, lock_delay=lock_delay
        )

    def semaphore(
        self,
        name: str,
        permits: int,
        *,
        ttl: core.Seconds | None = None,
        timeout: core.Seconds | None = None,
        fair: bool = False,
        renew: bool = True,
        lock_delay: core.Seconds = 0.0,
    ) -> Semaphore:
        """A semaphore admitting ``permits`` holders at once; each permit is its own lease
        (and its own ``lock_delay``: a lost permit is kept from others that long)."""
        return Semaphore(
            self,
            name,
            permits,
            ttl=ttl,
            timeout=timeout,
            fair=fair,
            renew=renew,
            lock_delay=lock_delay,
        )

    def segmented(
        self,
        name: str,
        segments: int,
        *,
        ttl: core.Seconds | None = None,
        timeout: core.Seconds | None = None,
        fair: bool = False,
        renew: bool = True,
        lock_delay: core.Seconds = 0.0,
    ) -> SegmentedLock:
        """A lock split into ``segments`` mutexes (at most 1024), for a resource kept in that
        many parts: each acquire takes whichever segment frees first and the hold tells which
        (``hold.segment``), so up to ``segments`` holders work at once, each on its own part.
        ``ttl``, ``timeout``, ``fair``, ``renew`` and ``lock_delay`` as for ``lock()``; every
        client must use the same ``segments`` for a name.
        """
        return SegmentedLock(
            self,
            name,
            segments,
            ttl=ttl,
            timeout=timeout,
            fair=fair,
            renew=renew,
            lock_delay=lock_delay,
        )

    def multi(
        self,
        names: Iterable[str],
        *,
        ttl: core.Seconds | None = None,
        timeout: core.Seconds | None = None,
        fair: bool = False,
        renew: bool = True,
        lock_delay: core.Seconds = 0.0,
    ) -> MultiLock:
        """Several mutexes taken as one: all of ``names`` or none, in one order every caller
        shares (so two callers with overlapping sets never wait for each other for ever),
        each name with its own fencing token (``hold.tokens``); lost as a whole if any part
        is. ``ttl``, ``timeout`` (for all the names together), ``fair``, ``renew`` and
        ``lock_delay`` (for each name) as for ``lock()``. Raises ``InvalidLockName`` for a bad
        name, a name given twice, or none.
        """
        return MultiLock(
            self, names, ttl=ttl, timeout=timeout, fair=fair, renew=renew, lock_delay=lock_delay
        )

    def rwlock(
        self,
        name: str,
        *,
        ttl: core.Seconds | None = None,
        timeout: core.Seconds | None = None,
        fair: bool = True,
        renew: bool = True,
        lock_delay: core.Seconds = 0.0,
    ) -> RWLock:
        """A read/write lock: ``.read()`` shared, ``.write()`` exclusive.

        Fair by default: requests are granted in arrival order, so a reader that comes after a
        waiting writer waits behind it and a stream of readers cannot starve a writer (as
        Curator's and kazoo's read/write locks behave). ``fair=False`` lets readers overtake a
        waiting writer, for more read throughput at the risk of starving writers.
        ``lock_delay`` as for ``lock()``, for either side's grants.
        """
        return RWLock(
            self, name, ttl=ttl, timeout=timeout, fair=fair, renew=renew, lock_delay=lock_delay
        )

    def synchronized(
        self,
        name: str,
        *,
        ttl: core.Seconds | None = None,
        timeout: core.Seconds | None = None,
        fair: bool = False,
        lock_delay: core.Seconds = 0.0,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Decorate a function so that every call runs holding the re-entrant mutex ``name``.

        A call that cannot have the lock within ``timeout`` raises ``AcquireTimeout``; a call
        whose hold is lost while it runs raises ``LockLost`` when it returns. Generator
        functions are refused (``TypeError``): the lock would be released when the generator is
        made, before its body runs; so are coroutine functions in the blocking client and plain
        ones in the asyncio client, which would give no exclusion either.
        """
        lock = self.rlock(name, ttl=ttl, timeout=timeout, fair=fair, lock_delay=lock_delay)

        def decorate(function: Callable[P, R]) -> Callable[P, R]:
            check_synchronizable(function)

            @functools.wraps(function)
            def locked_call(*args: P.args, **kwargs: P.kwargs) -> R:
                with lock:
                    return function(*args, **kwargs)

            return locked_call

        return decorate

    # -- operators ---------------------------------------------------------------------------

    def election(
        self, name: str, *, ttl: core.Seconds | None = None, lock_delay: core.Seconds = 0.0
    ) -> Election:
        """A leader election named ``name``: ``campaign(value)`` waits until the caller leads
        and returns its leadership (a hold whose ``term``, its fencing token, strictly grows
        from leader to leader); ``leader()`` reads who leads; ``observe()`` follows it.

        ``ttl``: the leadership's lease (default the client's, 30 s): a leader that dies is
        replaced this long after its last renewal (where grants live with the client's
        session or lease, ZooKeeper's and etcd's, when that ends: the URL's
        ``session_timeout`` or ``lease_ttl``, ``capabilities.max_ttl``); one that lives is
        renewed every ``ttl/3`` and told (``lost``, ``on_lost``) before anyone else could
        lead if that fails. The election is the lock ``name`` with its leader as holder, as
        ``status`` shows it. ``lock_delay``: nobody leads for that long after a leader lost
        its lease (not after a resignation), as for ``lock()``.
        """
        from .election import Election  # imported by the programs that elect

        return Election(self, name, ttl=ttl, lock_delay=lock_delay)

    def watch(self, name: str) -> StateChanges:
        """The state of lock ``name`` (as ``status`` reads it) now, then each time its
        entries change: ``async for state in locks.watch(name)`` (``for`` in the blocking
        flavour). The iterator's class says what counts as a change and how it is learnt
        of; ``close()`` it, or use it in a ``with`` block, to stop watching."""
        canonical = core.validate_name(name)
        backend = self._backend
        watch: Watch
        if backend.capabilities.state_wakeups:
            watch = cast(StateWatching, backend).watch_state(canonical)
        else:
            watch = _AnyWatch([], self._clock)  # a poller: woken by close() alone
        try:
            with self._guard:
                self._gate.check_usable(canonical)
                self._watches.add(watch)  # close() wakes it
        except BaseException:
            watch.close()
            raise
        from .changes import StateChanges  # imported by the programs that watch

        return StateChanges(self, canonical, watch)

    def status(self, name: str) -> LockState:
        """Holders (with fencing token and lease left) and waiters of one lock."""
        canonical = core.validate_name(name)
        with self._gate.operation(canonical):
            return self._backend.inspect(canonical)

    def status_all(self) -> list[LockState]:
        """Every lock that has holders or waiters."""
        with self._gate.operation(None):
            return self._backend.inspect_all()

    def force_release(self, name: str, *, reason: str | None = None) -> int:
        """Remove every grant of ``name`` (for operators); returns how many were removed.

        Their holders find out at their next renewal (``LockLost``); a fencing-checking resource
        refuses their writes once the next holder (with a greater token) has written. Who forced
        it (user, host, pid), when, and ``reason`` are left on the backend for each evicted
        holder, whose ``lost_reason`` then says "force-released by ...", and logged here at
        WARNING; the holder's client logs the loss at WARNING too.
        """
        canonical = core.validate_name(name)
        note = _eviction_note(self._holder, core.validate_reason(reason))
        with self._gate.operation(canonical):
            removed = self._backend.force_release(canonical, note)
        if removed:
            _log.warning("force-released lock %r (%d grant(s)): %s", canonical, removed, note)
        return removed

    def settle(self) -> None:
        """Wait until the renewals and expiry checks due on the clock have run.

        For tests on a ``ManualClock``: ``clock.advance(10); await locks.settle()``.
        """
        self._renewer.settle()

    def close(self) -> None:
        """Release every hold still held, stop renewing, and close the backend.

        Threads or tasks waiting for a lock of this client raise ``ClientClosed`` (they leave
        the line first); calls that start afterwards raise it too. Calls already talking to
        the backend are let finish before its connections close, so close() may take as long
        as the slowest of them (each is bounded by the backend's timeouts).
        """
        with self._guard:
            if not self._gate.shut():
                return
            watches = list(self._watches)
            places = [place for line in self._lines.values() for place in line]
        self._exit_guard.disarm()
        if self._gate.forked:
            return  # the parent's connections and grants are the parent's to close
        for watch in watches:
            watch.wake()
        for place in places:
            place.wake()
        with self._guard:
            holds = list(self._live.values())
        for hold in holds:
            try:
                hold._give_up_on_close()
            except TumblerError as error:
                _log.warning("could not release lock %r on close: %s", hold.name, error)
        self._renewer.close()
        if self._backend.session_events is not None:
            self._backend.session_events.unsubscribe(self._on_session_event)
        self._gate.calls_finished()
        self._backend.close()

    def __enter__(self) -> Locks:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"

    # -- internals ---------------------------------------------------------------------------

    # -- for the lock objects (tumbler's own code) ----------------------------------------------

    def _lease_for(self, ttl: core.Seconds | None) -> float:
        """The lease of a lock made with ``ttl``: the client's default if None; refused
        (``InvalidTTL``) if shorter than the backend can keep renewed."""
        return self._default_ttl if ttl is None else self._gate.lease(core.validate_ttl(ttl))

    def _lock_delay_for(self, lock_delay: core.Seconds) -> float:
        """The lock-delay of a lock made with ``lock_delay``: refused (``InvalidLockDelay``)
        if out of range, or above 0 on a backend that does not keep one."""
        return self._gate.lock_delay(core.validate_lock_delay(lock_delay))

    def _acquire_hold(
        self,
        names: tuple[str, ...],
        hold_type: Callable[..., H],
        *,
        lock_name: str,
        shared: bool,
        limit: int,
        fair: bool,
        ttl: float,
        timeout: float | None,
        renew: bool,
        holder: str | None = None,
        lock_delay: float = 0.0,
    ) -> H | None:
        """A new grant of one of ``names`` (canonical; one lock, or the segments a segmented
        lock may take, tried in this order and waited for all at once), held by a new owner;
        None if ``timeout`` ran out first. ``renew``: keep the lease renewed while held.
        ``hold_type``: the hold's class, called as ``AsyncHold`` is (the segmented lock's
        binds what its holds need besides). ``lock_name``: the lock object's name, for the
        client's observers. ``holder``: what operators read of the holder (validated), if not
        the client's own. ``lock_delay``: the grant's (validated)."""
        # a single try leaves no waiter entry; every other try does: a release finds the
        # waiters to wake by their entries, and fair requests keep their place by them
        requests = tuple(
            self._request(
                name,
                shared,
                limit,
                fair,
                ttl,
                renew,
                queue=timeout != 0,
                holder=holder,
                lock_delay=lock_delay,
            )
            for name in names
        )
        if self._observers is None:
            make: HoldMaker[H] = functools.partial(hold_type, self, auto_renew=renew)
            return self._acquire(requests, timeout, make, None)
        observed = self._observers.acquisition(lock_name, timeout)
        make = functools.partial(hold_type, self, auto_renew=renew, observed=observed)
        try:
            hold = self._acquire(requests, timeout, make, observed)
        except BaseException as error:
            observed.failed(error)
            raise
        if hold is None:
            observed.timed_out()
        else:
            observed.granted(hold)
        return hold

    # -- internals ---------------------------------------------------------------------------

    def _on_session_event(self, event: str) -> None:
        """The backend's session is in trouble (called on the backend's thread: no waiting).

        Holds are marked at once, so ``held`` turns False the moment the connection drops; the
        renewal worker then does the rest on its own thread or loop, where ``on_lost``
        callbacks are documented to run.
        """
        with self._guard:
            holds = list(self._live.values())
        for hold in holds:
            if event == SessionEvents.EXPIRED:
                hold._doubt(pending_loss="the backend's session expired")
            elif event == SessionEvents.SUSPENDED:
                hold._doubt()
        self._renewer.expedite()

    def _request(
        self,
        name: str,
        shared: bool,
        limit: int,
        fair: bool,
        ttl: float,
        renew: bool = True,
        queue: bool = True,
        holder: str | None = None,
        lock_delay: float = 0.0,
    ) -> GrantRequest:
        return GrantRequest(
            name=name,
            owner=_new_owner(),
            shared=shared,
            limit=limit,
            fair=fair,
            ttl=self._gate.grantable(ttl),
            holder=self._holder if holder is None else holder,
            queue=queue,
            # _new_hold schedules the first renewal at a third of the lease granted
            renewed=renew,
            lock_delay=lock_delay,
        )

    def _acquire(
        self,
        requests: tuple[GrantRequest, ...],
        timeout: float | None,
        make: HoldMaker[H],
        observed: Acquisition | None,
    ) -> H | None:
        """Try; if refused, wait for a change and try again, until granted or the timeout runs
        out. ``requests``: one lock's, or one per segment a segmented lock may take (tried in
        that order; the first granted wins).

        The watch is made before the first try (without I/O), so no change after that try goes
        unnoticed, and entered (subscribed, which may take a round trip) only if the first try
        failed: most acquisitions find the lock free. If entering may have missed a change,
        the watch says so and the lock is tried again before waiting. Every exit other than a
        grant withdraws the request (the waiter entry, or a grant whose reply an error or a
        cancellation cut off), so a timed-out or cancelled waiter leaves nothing behind.

        One waiter per lock and client talks to the backend; the client's others queue behind
        it in the client's line, in arrival order, at no cost to the backend or the connection
        pool. ``observed``, if the acquisition is observed, is told when it starts waiting.
        """
        gate = self._gate
        head = requests[0]
        name = head.name
        if timeout == 0:
            # a single try waits for nothing: neither a place in line nor a watch
            tried: set[str] = set()
            with gate.operation(name):
                try:
                    return self._try_each(requests, make, tried)
                except BaseException:
                    # a grant whose reply an error or a cancellation cut off
                    shield(self._withdraw_all(requests, tried))
                    raise
        clock = self._clock
        deadline = None if timeout is None else clock.now() + timeout
        # the names in a fixed order: a segmented lock's acquisitions each start at their own
        # segment, and still wait in one line (one lock, the usual case, needs no sorting)
        if len(requests) == 1:
            names: tuple[str, ...] = (name,)
        else:
            names = tuple(sorted(request.name for request in requests))
        key = (names, head.shared, head.limit, head.fair, head.lock_delay)
        place = _Place()
        context = current_context()
        watch = self._watch(requests)
        # One critical section for the usual case: counted in flight (close() waits for the
        # call), placed in line, and the watch made known to close(), which wakes it.
        try:
            with self._guard:
                gate.check_usable(name)
                gate.begin(context)
                line = self._lines.get(key)
                if line is None:
                    line = self._lines[key] = collections.deque()
                line.append(place)
                first = line[0] is place
                if first:
                    self._watches.add(watch)
        except BaseException:
            watch.close()
            raise
        #: the watch close() knows of, closed on the way out
        watched: Watch | None = watch if first else None
        try:
            if not first:
                # Someone of this client is ahead: the watch would only gather their changes
                # while this waiter waits for its turn; a fresh one is made after it.
                watch.close()
                if observed is not None:
                    observed.waiting()
                if not self._wait_turn(name, line, place, deadline):
                    return None
                watch = watched = self._watch(requests)
                with self._guard:
                    self._watches.add(watch)  # closed below, by finally, if refused here
                    gate.check_usable(name)
            left = None if deadline is None else max(0.0, deadline - clock.now())
            return self._acquire_or_wait(requests, left, make, watch, observed)
        finally:
            with self._guard:
                if watched is not None:
                    self._watches.discard(watched)
                first = line[0] is place
                line.remove(place)
                if not line:
                    if self._lines.get(key) is line:
                        del self._lines[key]
                elif first:
                    line[0].wake()
                gate.end(context)
            if watched is not None:
                watched.close()

    def _forget_watch(self, watch: Watch) -> None:
        """A state watcher's ``watch`` is done with (from any thread)."""
        with self._guard:
            self._watches.discard(watch)
        watch.close()

    def _watch(self, requests: tuple[GrantRequest, ...]) -> Watch:
        """The watch for ``requests``: the backend's own for one lock, all of theirs at once
        for several."""
        backend = self._backend
        if len(requests) == 1:
            return backend.watch(requests[0].name, requests[0].owner)
        watches: list[Watch] = []
        try:
            for request in requests:
                watches.append(backend.watch(request.name, request.owner))
        except BaseException:
            for made in watches:
                made.close()
            raise
        return _AnyWatch(watches, self._clock)

    def _wait_turn(
        self,
        name: str,
        line: collections.deque[_Place],
        place: _Place,
        deadline: float | None,
    ) -> bool:
        """Wait until ``place`` is first in its line; False if the deadline passed first."""
        turn = Event()
        with self._guard:
            self._gate.check_usable(name)
            if line[0] is place:
                return True
            # made under the guard: whoever leaves the head of the line from now on sets it
            place.turn = turn
        clock = self._clock
        clock.add_listener(turn.set_threadsafe)
        try:
            while True:
                turn.clear()
                with self._guard:
                    self._gate.check_usable(name)  # close() sets every turn
                    if line[0] is place:
                        return True
                now = clock.now()
                if deadline is not None and now >= deadline:
                    return False
                turn.wait(None if deadline is None else clock.real_timeout(deadline - now))
                check_cancelled()
        finally:
            clock.remove_listener(turn.set_threadsafe)

    def _acquire_or_wait(
        self,
        requests: tuple[GrantRequest, ...],
        timeout: float | None,
        make: HoldMaker[H],
        watch: Watch,
        observed: Acquisition | None,
    ) -> H | None:
        """Try, then wait on ``watch`` (made before the try) and try again until granted or
        ``timeout`` runs out; ``observed`` is told when the first try was refused."""
        backend = self._backend
        caps = backend.capabilities
        clock = self._clock
        deadline = None if timeout is None else clock.now() + timeout
        #: the names tried so far: those that may have an entry (or a grant cut off) to withdraw
        tried: set[str] = set()
        try:
            first_round: tuple[GrantRequest, ...] = requests
            if len(requests) > 1:
                # Segments are first tried without waiter entries: most often one is free,
                # and there would be as many entries to withdraw as segments tried before it.
                # The watch asks for a retry on entry, which queues the requests.
                first_round = tuple(request._replace(queue=False) for request in requests)
            # A waiter rides out a backend that stops answering for a while (a leader change,
            # a blip, a member that hangs): a grant request is idempotent by its owner, so it
            # is asked again, soon, until the caller's deadline; only then does the last
            # error reach the caller, who learns that the backend, not the lock, was the
            # obstacle. With no deadline it waits for the backend as it would for the lock,
            # once the backend answered it (one that never did fails the acquire at once).
            unavailable: BackendUnavailable | None = None
            answered = False
            try:
                hold = self._try_each(first_round, make, tried)
            except BackendUnavailable as error:
                hold, unavailable = None, self._unavailable(error, deadline, None, answered)
            else:
                answered = True
            if hold is not None:
                return hold
            if observed is not None and answered:
                observed.waiting()  # refused: it has its place in line (after an error, not yet)
            rng = self._jitter()
            backoff = core.Backoff(caps.poll_base, caps.poll_cap, rng)
            failing = core.Backoff(
                min(caps.poll_cap, UNAVAILABLE_RETRY_CAP), UNAVAILABLE_RETRY_CAP, rng
            )
            entered = False
            try:
                watch.__enter__()
                entered = True
            except BackendUnavailable as error:
                # the subscription failed (and the watch was closed): the waiter polls instead
                unavailable = self._unavailable(error, deadline, unavailable, answered)
            try:
                retry = unavailable is not None or watch.retry_needed
                while True:
                    if retry:
                        try:
                            hold = self._try_each(requests, make, tried)
                        except BackendUnavailable as error:
                            hold = None
                            unavailable = self._unavailable(error, deadline, unavailable, answered)
                        else:
                            unavailable, answered = None, True
                            if hold is None and observed is not None:
                                observed.waiting()  # said once: the first refusal
                        if hold is not None:
                            tried.discard(hold.name)
                            if tried:
                                self._leave_other_lines(hold, requests, tried)
                            return hold
                    retry = True
                    now = clock.now()
                    if deadline is not None and now >= deadline:
                        if unavailable is not None:
                            raise unavailable
                        break
                    if unavailable is not None:
                        pause = failing.next()
                    else:
                        failing.reset()
                        pause = caps.recheck_interval if caps.push_wakeups else backoff.next()
                        pause = min(pause, caps.waiter_ttl / 3)
                    if deadline is not None:
                        pause = min(pause, deadline - now)
                    if entered:
                        watch.wait(pause)
                    else:
                        sleep_real(clock.real_timeout(pause) or pause)
                    check_cancelled()
                    self._gate.check_usable(requests[0].name)
            finally:
                if entered:
                    watch.__exit__(None, None, None)
        except BaseException:
            shield(self._withdraw_all(requests, tried))
            raise
        shield(self._withdraw_all(requests, tried))
        return None

    def _jitter(self) -> random.Random:
        """The source of this client's jitter between polls, made when it first waits."""
        if self._rng is None:
            import random

            self._rng = random.Random()
        return self._rng

    def _unavailable(
        self,
        error: BackendUnavailable,
        deadline: float | None,
        before: BackendUnavailable | None,
        answered: bool,
    ) -> BackendUnavailable:
        """``error`` of a grant request made while waiting, to be asked again (see
        ``_acquire_or_wait``); raised at once when no time is left to ask again, or with no
        deadline when the backend never ``answered`` this acquire. ``before``: the error of
        the request before, if it failed too (said once, not at every retry)."""
        if deadline is None and not answered:
            raise error
        if deadline is not None and self._clock.now() >= deadline:
            raise error
        _log.log(
            DEBUG if before is not None else WARNING,
            "lock %r: the backend did not answer a grant request (%s: %s); asking again",
            error.lock_name,
            type(error).__name__,
            error.message,
        )
        return error

    def _leave_other_lines(
        self, hold: Hold, requests: tuple[GrantRequest, ...], tried: set[str]
    ) -> None:
        """Withdraw the requests of ``tried`` now that ``hold`` was granted. Interrupted (a
        cancellation), the caller never gets the hold: it is released too, or it would stay
        held, and renewed, until the client closes."""
        try:
            shield(self._withdraw_all(requests, tried))
        except BaseException:
            try:
                hold.release()  # runs to its end, cancelled or not
            except TumblerError as error:
                _log.warning("could not release lock %r: %s", hold.name, error)
            raise

    def _try_each(
        self, requests: tuple[GrantRequest, ...], make: HoldMaker[H], tried: set[str]
    ) -> H | None:
        """Try each request in turn, adding its name to ``tried`` first: the first hold
        granted, or None."""
        for request in requests:
            tried.add(request.name)
            hold = self._try(request, make)
            if hold is not None:
                return hold
        return None

    def _try(self, request: GrantRequest, make: HoldMaker[H]) -> H | None:
        for _ in range(LATE_GRANT_TRIES):
            sent_at = self._clock.now()
            grant = self._backend.try_grant(request)
            check_cancelled()
            if grant is None:
                return None
            if core.local_deadline(sent_at, grant.granted_ttl) > self._clock.now():
                hold = self._new_hold(make(request, grant, sent_at), sent_at)
                if hold is not None:
                    return hold
            # The reply came too late to use the lease, or close() began meanwhile and nobody
            # would renew it: give it back. A late reply is the store's slowness, not another
            # holder: the request is made again at once, so that a lock nobody holds is not
            # refused to a try without waiting (timeout 0) for one slow round trip.
            shield(self._gate.release_entry(request.name, request.owner))
            self._gate.check_usable(request.name)
        return None

    def _withdraw_all(self, requests: tuple[GrantRequest, ...], names: set[str]) -> bool:
        """Withdraw the requests of ``names``; False if the backend could not be reached for
        some."""
        withdrawn = True
        for request in requests:
            if request.name in names and not self._withdraw(request):
                withdrawn = False
        return withdrawn

    def _withdraw(self, request: GrantRequest) -> bool:
        """Remove the request's entry, if any; False if the backend could not be reached."""
        try:
            self._gate.release_entry(request.name, request.owner)
        except TumblerError as error:
            _log.warning(
                "could not withdraw from lock %r (its entry expires by itself): %s",
                request.name,
                error,
            )
            return False
        return True

    def _new_hold(self, hold: H, sent_at: float) -> H | None:
        """``hold``, a new grant's, kept and scheduled for renewal; None if close() began (it
        would never be renewed)."""
        key = id(hold)
        with self._guard:
            if self._gate.closed:
                return None
            self._live[key] = hold
        hold._on_finish(lambda _: self._forget(key))
        due = sent_at + core.renew_delay(hold.ttl) if hold._auto_renew else hold._deadline
        self._renewer.schedule(hold, due, hold._deadline)
        return hold

    def _forget(self, key: int) -> None:
        with self._guard:
            self._live.pop(key, None)

    def _serve_due(self, holds: list[Hold]) -> list[float | None]:
        """The renewal worker's batch: every hold due now, renewed with one backend call."""
        clock = self._clock
        now = clock.now()
        after: list[float | None] = [None] * len(holds)
        renewing: list[int] = []
        for index, hold in enumerate(holds):
            step = hold._triage(now)
            if step is RENEW:
                renewing.append(index)
            elif step is GIVE_BACK:
                self._forget(id(hold))
                hold._give_back()
            else:
                after[index] = step
        if not renewing:
            return after
        batch = [holds[index] for index in renewing]
        sent_at = clock.now()
        # A renewal that outlived the leases it renews would only keep the worker from the
        # others: bounded by the least time left (the deadline watch reports losses meanwhile).
        bound = max(min(hold._deadline for hold in batch) - sent_at, core.MIN_CALL_BOUND)
        try:
            granted = self._backend.renew_all([hold._renewal() for hold in batch], bound)
        except BackendUnavailable as error:
            _log.warning("renewal of %d lock(s) failed, will retry: %s", len(batch), error)
            for index, hold in zip(renewing, batch, strict=True):
                after[index] = hold._unreachable(error)
            return after
        except TumblerError as error:
            for hold in batch:
                hold._mark_lost(f"renewal failed: {error}", "renewal_error")
            return after
        for index, hold, ttl in zip(renewing, batch, granted, strict=True):
            if ttl is None and not hold._loss_pending:
                hold._explain_refusal()
            after[index] = hold._renewed(ttl, sent_at)
        return after

    def _expire_overdue(self) -> float | None:
        """The deadline watch: report every hold whose deadline passed as lost (the renewal
        worker gives their grants back); the next deadline to watch for."""
        with self._guard:
            holds = list(self._live.values())
        now = self._clock.now()
        earliest: float | None = None
        for hold in holds:
            deadline = hold._expire(now)
            if deadline is None:
                if hold._awaits_give_back:
                    self._renewer.schedule(hold, now)
            elif earliest is None or deadline < earliest:
                earliest = deadline
        return earliest
