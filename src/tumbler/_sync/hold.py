# Generated from src/tumbler/_async/hold.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""The hold: one grant of a lock, from the grant to its release or its loss.

Ownership lives on a ``Hold``: each acquisition gets a fresh unguessable owner id that only its
hold knows, never a thread-local, so two tasks sharing a lock object cannot release each other's
grant.

How a hold can be lost (and how the holder learns it):

1. The lease runs out before a renewal succeeds: the backend was unreachable for longer than
   the lease, or the holder's process was paused (SIGSTOP, a long GC or C call, a blocked event
   loop) past it. Noticed at the client's local deadline by its deadline watch, whatever
   a renewal call is doing, or by ``held``/``check()``.
2. A renewal is refused: the backend no longer has the grant (it expired there, or an operator
   force-released it). Noticed at that renewal.
3. The client is closed, or the process forked (the child's copies are not held).
4. The backend's session expired (ZooKeeper's LOST). Noticed when the backend reports it.

Between "held" and "lost" a hold can be *in doubt*: a renewal could not reach the backend, or
a session-based backend reported its connection dropped (ZooKeeper's SUSPENDED). Then
``hold.held`` is False and ``check()`` raises ``HoldInDoubt`` until a renewal confirms the hold
(it may come back) or its lease runs out (it is lost).

Then ``hold.lost`` is True, the ``on_lost`` callbacks run (in a background worker of the
client: a thread, or a task on its event loop), and ``release()`` or leaving the ``with`` block
raises ``LockLost``.
The client's view is conservative: it gives a hold up (``local_deadline``) a little before the
backend could grant it to anyone else, timed from when the grant or renewal was *sent*.

The life of a hold is one ``HoldState``, changed only along ``TRANSITIONS``::

    HELD <-> IN_DOUBT            renewals fail to reach the backend / confirm it again
    HELD, IN_DOUBT -> LOST       found lost (deadline passed, renewal refused, session expired,
                                 client closed)
    LOST -> GIVEN_BACK           the renewal worker released the lost grant at the backend
    any of those -> RELEASING    the holder's release() is on its way to the backend
    any of those -> RELEASED     the grant was given back for good (release, or close())

A hold becomes lost by the clock alone too: ``lost`` is True once a granted hold's deadline
passed, before anyone records it (``LOST``). A loss found while the hold is being released,
or after, is kept as ``lost_reason`` without a change of state: the grant is on its way back
anyway.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, NoReturn, cast

from .. import _core as core
from .._acompat import Event, shield
from .._clock import Clock
from .._core import (
    GIVEN_BACK,
    GRANTED,
    HELD,
    IN_DOUBT,
    LOST,
    RELEASED,
    RELEASING,
    UNLOST,
    HoldState,
    transition,
)
from .._logs import logger
from .._observing import Acquisition
from ..backends.contract import Grant, GrantRequest, Lapsing, Renewal
from ..errors import HoldInDoubt, LockLost, NotHeld, TumblerError

if TYPE_CHECKING:
    from ..observe import LossReason
    from .client import Locks

_log = logger("tumbler")


class Step(enum.Enum):
    """What the renewal worker must do for a hold, besides waiting."""

    RENEW = "renew"
    GIVE_BACK = "give back"


RENEW: Final = Step.RENEW
GIVE_BACK: Final = Step.GIVE_BACK


class Hold:
    """One grant of a lock: its fencing token, its lease, and whether it is still held.

    A hold is what ``with lock as hold`` gives; ``lock.hold`` gives the calling thread's or
    task's latest one. It can be passed to another thread or task, which may then release it.
    """

    def __init__(
        self,
        locks: Locks,
        request: GrantRequest,
        grant: Grant,
        sent_at: float,
        auto_renew: bool,
        *,
        observed: Acquisition | None = None,
    ) -> None:
        #: the lock name (canonical form)
        self.name: str = grant.name
        #: the fencing token: greater than that of every earlier grant of this name
        self.token: int = grant.token
        #: the lease the backend granted, in seconds
        self.ttl: float = grant.granted_ttl
        self._gate = locks._gate
        self._request = request
        self._auto_renew = auto_renew
        self._deadline = core.local_deadline(sent_at, grant.granted_ttl)
        self._state = HELD
        self._lost_reason: str | None = None
        #: why the hold will be found lost when the renewal worker gets to it (a session
        #: expired on the backend's thread, or a refused renewal's eviction note)
        self._pending_loss: str | None = None
        self._pending_cause: LossReason = "refused"
        #: whether a caller was told of the loss (LockLost is raised once per hold)
        self._loss_reported = False
        #: set once the hold's end was announced (released, or lost and the on_lost callbacks
        #: run): what wait_lost() waits for
        self._settled = False
        self._lost_wakers: set[Event] = set()
        self._callbacks: list[Callable[[Hold], object]] = []
        self._finish_callbacks: list[Callable[[Hold], None]] = []
        self._guard = threading.Lock()
        #: the acquisition's observation, if the client has observers
        self._observed = observed
        if observed is not None:
            observed.grant_made()

    # -- what a holder asks ------------------------------------------------------------------

    @property
    def held(self) -> bool:
        """True while this hold is known valid: not released, not lost, not in doubt, and its
        lease has not run out."""
        return self._state is HELD and not self.lost

    @property
    def in_doubt(self) -> bool:
        """True while the client cannot confirm the hold (see the module docstring): the last
        renewal could not reach the backend, or the backend's connection dropped. It may be
        confirmed again; if not, it is lost when its lease runs out."""
        return self._state is IN_DOUBT and not self.lost

    @property
    def lost(self) -> bool:
        """True once the hold ended without being released (see the module docstring)."""
        if self._lost_reason is not None:
            return True
        if self._gate.forked:
            return True
        return self._state in GRANTED and self._gate.clock.now() >= self._deadline

    @property
    def lost_reason(self) -> str | None:
        """Why the hold was lost, or None."""
        if self._lost_reason is None and self.lost:
            if self._gate.forked:
                return "the hold belongs to the parent process (inherited across fork)"
            return "the lease ran out before a renewal succeeded"
        return self._lost_reason

    @property
    def expires_in(self) -> float:
        """Seconds until the client gives this hold up unless it is renewed (0 if not held)."""
        if not self.held:
            return 0.0
        return max(0.0, self._deadline - self._gate.clock.now())

    @property
    def gives_up_in(self) -> float:
        """Seconds until the client gives this hold up unless a renewal gets through: the same
        as ``expires_in`` while the hold is held, and the time it has left to be confirmed
        while it is in doubt (when ``expires_in`` is 0); 0 once it is released or lost.

        For work that must end before the backend could grant the lock to anyone else and that
        takes time to stop (``tumbler run`` stops its command this long before, less the time
        the command is given to exit): the backend's lease runs out a little after this.
        """
        if self._state not in (HELD, IN_DOUBT) or self.lost:
            return 0.0
        return max(0.0, self._deadline - self._gate.clock.now())

    def check(self) -> None:
        """Raise ``LockLost`` if the hold was lost, ``HoldInDoubt`` if it is in doubt,
        ``NotHeld`` if it was released."""
        if self.lost:
            raise LockLost(f"lock {self.name!r} was lost: {self.lost_reason}", lock_name=self.name)
        if self._state not in GRANTED:
            raise NotHeld(f"lock {self.name!r} was released", lock_name=self.name)
        if self._state is IN_DOUBT:
            raise HoldInDoubt(
                f"lock {self.name!r} is in doubt: the backend cannot be reached to confirm it",
                lock_name=self.name,
            )

    def on_lost(self, callback: Callable[[Hold], object]) -> None:
        """Call ``callback(hold)`` once when the hold is found lost (at once if it already is).

        It runs in one of the client's background workers (threads in the blocking flavour,
        tasks on the event loop in asyncio): at the hold's local deadline at the latest, even
        while a renewal call is stuck on a silent network; or in the thread or task whose
        ``wait_lost()`` found the lease run out first. It must not block, and exceptions it
        raises are logged.
        """
        with self._guard:
            already = self._lost_reason is not None
            if not already:
                self._callbacks.append(callback)
        if already:
            self._run_callback(callback)

    def wait_lost(self, timeout: core.Seconds | None = None) -> bool:
        """Wait until the hold is found lost or ``timeout`` passes; True if it was lost.

        Returns at the client's deadline at the latest, even while a renewal is still waiting
        for an unreachable backend (the renewal worker reports the loss when that call ends).
        When it returns True, the ``on_lost`` callbacks have run (unless ``timeout`` ran out
        while another thread was still running them). Returns False once the hold is released
        without having been lost.
        """
        seconds = core.validate_timeout(timeout)
        clock = self._gate.clock
        end = None if seconds is None else clock.now() + seconds
        # a wake-up of this call's own: the clock moved by hand, or the loss was settled
        wake = Event()
        with self._guard:
            self._lost_wakers.add(wake)
        clock.add_listener(wake.set_threadsafe)
        try:
            while True:
                wake.clear()
                if self._settled:
                    break
                if self._lost_reason is None and self.lost:
                    # found at the deadline, even if the renewal worker is still waiting for
                    # the backend; the worker gives the grant back when it gets to it
                    self._mark_lost(self.lost_reason or "the hold was lost", self._lapse)
                    continue  # or another thread marked it first: wait for its callbacks
                now = clock.now()
                # the deadline may move (renewals), so wake there and look again
                held = self._state in UNLOST and self._lost_reason is None
                left = self._deadline - now if held else None
                if end is not None:
                    if end - now <= 0:
                        break
                    left = end - now if left is None else min(left, end - now)
                wake.wait(None if left is None else clock.real_timeout(left))
        finally:
            clock.remove_listener(wake.set_threadsafe)
            with self._guard:
                self._lost_wakers.discard(wake)
        return self.lost

    def extend(self, ttl: core.Seconds | None = None) -> None:
        """Set the lease to ``ttl`` seconds from now (default: the TTL asked for at acquire).

        For holds acquired with ``renew=False``; renewed holds are extended automatically.
        Raises ``LockLost`` if the backend no longer has the grant.
        """
        gate = self._gate
        seconds = (
            self._request.ttl if ttl is None else gate.grantable(gate.lease(core.validate_ttl(ttl)))
        )
        with gate.operation(self.name):
            self.check()
            sent_at = gate.clock.now()
            granted = gate.backend.renew(self.name, self._request.owner, seconds)
        if granted is None:
            eviction = gate.eviction_of(self.name, self._request.owner)
            self._mark_lost(eviction or "the backend no longer has this grant", _refusal(eviction))
            self.check()
            return
        lease_left = self._deadline - sent_at
        self._deadline = core.local_deadline(sent_at, granted)
        self.ttl = granted
        if self._observed is not None:
            self._observed.renewed(self, lease_left, granted)

    def release(self) -> None:
        """Give the grant back. Raises ``LockLost`` (after releasing) if it had been lost.

        Runs to its end even if the calling task is cancelled. If the backend cannot be reached
        the error is raised, and the grant frees itself when its lease runs out (it is no
        longer renewed); but if the hold was lost already (its lease ran out while the holder
        was paused, say), ``LockLost`` is what the caller learns either way.
        """
        with self._gate.operation(self.name):
            self._release()

    def _release(self) -> None:
        if self.lost and self._lost_reason is None:
            # the lease ran out before anyone noticed (the process was paused): tell the
            # on_lost callbacks now, before the backend is asked anything
            self._mark_lost(
                self.lost_reason or "the lease ran out before a renewal succeeded", self._lapse
            )
        with self._guard:
            if self._state not in GRANTED:
                raise NotHeld(f"lock {self.name!r} was already released", lock_name=self.name)
            self._move(RELEASING)
        observed = self._observed
        if observed is None:
            self._end_release()
            return
        # told only of a release that begins: a second release of the hold is not one
        held = observed.held()
        observed.release_started(self, held)
        try:
            self._end_release()
        except BaseException as error:
            observed.released(self, held, error)
            raise
        observed.released(self, held, None)

    def _end_release(self) -> None:
        try:
            shield(self._release_grant())
        except TumblerError:
            self._report_loss()  # lost anyway: that is what the holder must hear
            raise
        self._report_loss()

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "a hold cannot leave its process: its lease is renewed by the client that was "
            "granted it, and its owner id must stay secret; pass the name and the fencing "
            "token instead"
        )

    def __copy__(self) -> NoReturn:
        raise TypeError(
            "a hold cannot be copied: a copy would share the grant's owner without being "
            "renewed or released with it; pass the hold itself"
        )

    def __deepcopy__(self, memo: object) -> NoReturn:
        self.__copy__()

    def __repr__(self) -> str:
        state = "held" if self.held else ("lost" if self.lost else _WORDS[self._state])
        return (
            f"<{type(self).__name__} {self.name!r}{self._detail()} token={self.token} {state} "
            f"expires_in={self.expires_in:.3f}>"
        )

    def _detail(self) -> str:
        """What ``repr`` says of this kind of hold after its name."""
        return ""

    # -- for the client and the lock objects (tumbler's own code) ------------------------------

    @property
    def _release_begun(self) -> bool:
        """True once a release of the grant began (by the holder, or by close())."""
        return self._state not in GRANTED

    @property
    def _awaits_give_back(self) -> bool:
        """True if the hold was found lost and its grant is still to be given back."""
        return self._state is LOST

    def _on_finish(self, callback: Callable[[Hold], None]) -> None:
        """Call ``callback(hold)`` once the grant is released (the hold leaves the books)."""
        self._finish_callbacks.append(callback)

    def _report_loss(self) -> None:
        """Raise LockLost once per hold: a caller told of the loss is not told again."""
        if self._lost_reason is not None and not self._loss_reported:
            self._loss_reported = True
            raise LockLost(f"lock {self.name!r} was lost: {self._lost_reason}", lock_name=self.name)

    def _doubt(self, pending_loss: str | None = None) -> None:
        """The backend cannot confirm the hold now; with ``pending_loss``, it will not again
        (the hold is lost for that reason when the renewal worker gets to it: the backend's
        session expired). Called from any thread (a backend's session events come on the
        backend's own)."""
        with self._guard:
            if pending_loss is not None:
                self._pending_loss, self._pending_cause = pending_loss, "session_expired"
            if self._state is HELD:
                self._move(IN_DOUBT)

    @property
    def _loss_pending(self) -> bool:
        """True if the hold is known to be lost as soon as the renewal worker gets to it."""
        return self._pending_loss is not None

    def _explain_refusal(self) -> None:
        """A renewal was refused: ask the backend whether an operator forced the grant out,
        to say so when the loss is recorded."""
        eviction = self._gate.eviction_of(self.name, self._request.owner)
        if eviction is not None:
            self._pending_loss, self._pending_cause = eviction, "force_released"

    @property
    def _lapse(self) -> LossReason:
        """Why a hold lost by the clock alone was lost (see ``lost``)."""
        return "forked" if self._gate.forked else "expired"

    def _mark_lost(self, reason: str, cause: LossReason) -> None:
        """Record the loss (once), run the ``on_lost`` callbacks, and wake ``wait_lost()``.
        ``cause``: ``reason`` in a word, for the observers."""
        with self._guard:
            if self._lost_reason is not None:
                return
            self._lost_reason = reason
            if self._state in UNLOST:
                self._move(LOST)
            callbacks, self._callbacks = self._callbacks, []
        _log.warning("lock %r lost: %s", self.name, reason)
        if self._observed is not None:
            self._observed.lost(self, cause, reason)
        for callback in callbacks:
            self._run_callback(callback)
        self._settle()  # after the callbacks: a wait_lost() that returns finds them done

    def _triage(self, now: float) -> float | Step | None:
        """What the renewal worker must do for this hold, decided without I/O: ``RENEW``,
        ``GIVE_BACK`` (it was found lost: release the grant), a later due time, or None (the
        hold ended)."""
        if self._state not in GRANTED:
            return None
        if self._pending_loss is not None:
            self._mark_lost(self._pending_loss, self._pending_cause)
        elif now >= self._deadline:
            self._mark_lost("the lease ran out before a renewal succeeded", "expired")
        if self._lost_reason is not None:
            return None if self._state is GIVEN_BACK else GIVE_BACK
        if not self._auto_renew and self._state is not IN_DOUBT:
            return self._deadline
        return RENEW

    def _renewal(self) -> Renewal:
        """What the renewal worker asks the backend to renew for this hold."""
        return Renewal(self.name, self._request.owner, self._request.ttl)

    def _renewed(self, granted: float | None, sent_at: float) -> float | None:
        """Take a renewal's answer; the next due time, or None."""
        if self._state not in GRANTED:
            return None
        now = self._gate.clock.now()
        if granted is not None and self._lost_reason is None and now >= self._deadline:
            # confirmed too late: the holder may already have been told the hold is lost, and
            # a hold reported lost never comes back
            self._mark_lost("the lease ran out before a renewal succeeded", "expired")
        if self._lost_reason is not None:
            return now  # found lost meanwhile (the deadline watch): give the grant back
        if granted is None:
            if self._pending_loss is not None:
                self._mark_lost(self._pending_loss, self._pending_cause)
            else:
                self._mark_lost(
                    "a renewal was refused: the backend no longer has this grant "
                    "(its lease ran out there, or it was force-released)",
                    "refused",
                )
            return None
        with self._guard:
            if self._state is IN_DOUBT:
                self._move(HELD)
        lease_left = self._deadline - sent_at
        if self._auto_renew:
            self._deadline = core.local_deadline(sent_at, granted)
            self.ttl = granted
        if self._observed is not None:
            self._observed.renewed(self, lease_left, granted)
        if not self._auto_renew:
            return self._deadline  # confirmed after a doubt, not extended
        return sent_at + core.renew_delay(granted)

    def _unreachable(self, error: BaseException) -> float:
        """A renewal could not reach the backend (``error``): in doubt, and tried again
        soon."""
        self._doubt()
        later = self._gate.clock.now()
        if self._observed is not None:
            self._observed.renewal_failed(self, self._deadline - later, error)
        return min(self._deadline, later + core.retry_delay(self._deadline - later))

    def _expire(self, now: float) -> float | None:
        """The deadline watch: report the hold lost once its deadline passed; else the
        deadline to wake at (None: nothing to watch)."""
        if self._state not in UNLOST or self._lost_reason is not None:
            return None
        if now < self._deadline:
            return self._deadline
        self._mark_lost("the lease ran out before a renewal succeeded", "expired")
        return None

    def _give_back(self) -> None:
        """Release a grant the client gave up: a session-based backend would keep it for as
        long as the session lives, and others are spared the wait for their own expiry. A
        grant with a lock-delay on a lease is left to run out instead: given up, it ended
        other than by a release, and its delay must follow; on a session it is lapsed
        (``lapse``: its entry removed, its delay counted from now), where the backend can."""
        with self._guard:
            if self._state is GIVEN_BACK:
                return
            if self._state is LOST:
                self._move(GIVEN_BACK)
        backend = self._gate.backend
        if self._request.lock_delay:
            if not backend.capabilities.session_liveness:
                return
            if hasattr(backend, "lapse"):
                try:
                    with self._gate.call():
                        cast(Lapsing, backend).lapse(self.name, self._request.owner)
                except TumblerError as error:
                    _log.debug("could not lapse lost lock %r: %s", self.name, error)
                return
        try:
            self._gate.release_entry(self.name, self._request.owner)
        except TumblerError as error:
            _log.debug("could not give back lost lock %r: %s", self.name, error)

    def _give_up_on_close(self) -> None:
        """The client is closing: lose the hold (if still granted) and release its grant."""
        if self._state in GRANTED:
            self._mark_lost("the client was closed", "client_closed")
            self._release_grant()

    def _release_grant(self) -> bool:
        """Release at the backend and end the hold; False if the backend no longer had it."""
        # shielded: a caller cancelled meanwhile still has its hold ended, and told if lost
        try:
            try:
                was_live = self._gate.release_entry(self.name, self._request.owner)
            finally:
                # Renewal stops whatever the backend answered: if the release did not get
                # through, the grant frees itself when its lease runs out.
                self._finish()
            if not was_live:
                eviction = self._gate.eviction_of(self.name, self._request.owner)
                self._mark_lost(
                    eviction
                    or "the backend no longer had this grant at release: its lease ran out "
                    "or it was force-released",
                    _refusal(eviction),
                )
            return was_live
        finally:
            self._settle()

    # -- internals -----------------------------------------------------------------------------

    def _move(self, wanted: HoldState) -> None:
        """Change state along ``TRANSITIONS`` (the caller holds ``_guard``)."""
        self._state = transition(self._state, wanted)

    def _finish(self) -> None:
        with self._guard:
            if self._state is not RELEASED:
                # close() and the holder's release() may both end the hold
                self._move(RELEASED)
            callbacks, self._finish_callbacks = self._finish_callbacks, []
        for callback in callbacks:
            callback(self)

    def _settle(self) -> None:
        with self._guard:
            self._settled = True
            wakers = list(self._lost_wakers)
        for wake in wakers:
            wake.set_threadsafe()

    def _run_callback(self, callback: Callable[[Hold], object]) -> None:
        try:
            callback(self)
        except Exception:
            _log.exception("on_lost callback for lock %r failed", self.name)


def _refusal(eviction: str | None) -> LossReason:
    """Why the backend no longer had a grant, in a word: an operator's eviction note, or
    not."""
    return "refused" if eviction is None else "force_released"


#: how ``repr()`` names a hold that is neither ``held`` nor ``lost``: in doubt reads as held,
#: the grant being still the holder's to release
_WORDS: Final[Mapping[HoldState, str]] = {
    HELD: "held",
    IN_DOUBT: "held",
    LOST: "held",
    GIVEN_BACK: "held",
    RELEASING: "releasing",
    RELEASED: "released",
}


class SegmentHold(Hold):
    """A hold of one segment of a segmented lock (``locks.segmented()``): an ``AsyncHold``
    that says which segment it is on. ``name`` is that segment's own lock name and ``token``
    its own fencing token."""

    def __init__(
        self,
        locks: Locks,
        request: GrantRequest,
        grant: Grant,
        sent_at: float,
        auto_renew: bool,
        *,
        segment_of: Mapping[str, int],
        observed: Acquisition | None = None,
    ) -> None:
        super().__init__(locks, request, grant, sent_at, auto_renew, observed=observed)
        #: which segment this hold is on, 0 to ``segments - 1``: the part of the resource
        #: its holder may touch
        self.segment: int = segment_of[grant.name]

    def _detail(self) -> str:
        return f" segment={self.segment}"


class MultiHold:
    """The grant of a multi-lock (``locks.multi()``): one hold per name, held and lost as one.

    ``tokens`` maps each name to its grant's fencing token (hand each resource the token of
    its own name); ``holds`` are the parts, in the order they were taken. The whole is lost
    as soon as any part is: ``lost``, ``lost_reason`` (the first part lost, and why),
    ``on_lost`` and ``wait_lost`` speak of the first loss; the other parts stay granted until
    ``release()`` (or the end of the ``with`` block) gives them all back.
    """

    def __init__(self, holds: Sequence[Hold], clock: Clock) -> None:
        #: the holds of the names, in the multi-lock's order
        self.holds: tuple[Hold, ...] = tuple(holds)
        #: the names, in the multi-lock's order
        self.names: tuple[str, ...] = tuple(hold.name for hold in self.holds)
        self._clock = clock
        self._guard = threading.Lock()
        self._first_lost: Hold | None = None
        self._callbacks: list[Callable[[MultiHold], object]] = []
        self._wakers: set[Event] = set()
        for hold in self.holds:
            hold.on_lost(self._part_lost)
            hold._on_finish(self._part_ended)

    @property
    def tokens(self) -> Mapping[str, int]:
        """Each name's fencing token."""
        return {hold.name: hold.token for hold in self.holds}

    @property
    def held(self) -> bool:
        """True while every part is held (see ``AsyncHold.held``)."""
        return all(hold.held for hold in self.holds)

    @property
    def in_doubt(self) -> bool:
        """True while no part is lost and some part is in doubt."""
        return not self.lost and any(hold.in_doubt for hold in self.holds)

    @property
    def lost(self) -> bool:
        """True once any part was lost."""
        return any(hold.lost for hold in self.holds)

    @property
    def lost_reason(self) -> str | None:
        """Which part was lost first, and why; None while none is."""
        first = self._first_lost or next((hold for hold in self.holds if hold.lost), None)
        if first is None:
            return None
        return f"lock {first.name!r}: {first.lost_reason}"

    @property
    def expires_in(self) -> float:
        """The least ``expires_in`` of the parts: 0 unless every part is held."""
        return min(hold.expires_in for hold in self.holds)

    @property
    def gives_up_in(self) -> float:
        """The least ``gives_up_in`` of the parts (see ``AsyncHold.gives_up_in``)."""
        return min(hold.gives_up_in for hold in self.holds)

    def check(self) -> None:
        """Raise what ``check()`` of the first part with a problem raises: ``LockLost``,
        ``HoldInDoubt`` or ``NotHeld``."""
        lost = [hold for hold in self.holds if hold.lost]
        for hold in lost or self.holds:
            hold.check()

    def on_lost(self, callback: Callable[[MultiHold], object]) -> None:
        """Call ``callback(multi_hold)`` once when any part is found lost (at once if one
        already is); where and how as ``AsyncHold.on_lost``."""
        with self._guard:
            already = self._first_lost is not None
            if not already:
                self._callbacks.append(callback)
        if already:
            self._run_callback(callback)

    def wait_lost(self, timeout: core.Seconds | None = None) -> bool:
        """Wait until any part is found lost or ``timeout`` passes; True if one was lost.
        Returns at the first part's deadline at the latest, and False once every part is
        released without a loss."""
        seconds = core.validate_timeout(timeout)
        clock = self._clock
        end = None if seconds is None else clock.now() + seconds
        # woken by a part's loss or end, and by a clock moved by hand
        wake = Event()
        with self._guard:
            self._wakers.add(wake)
        clock.add_listener(wake.set_threadsafe)
        try:
            while True:
                wake.clear()
                for hold in self.holds:
                    if self._first_lost is None and hold.lost:
                        # past its deadline, before the client's deadline watch got to it:
                        # the part's own wait marks it lost and tells the callbacks, ours too
                        hold.wait_lost(0)
                live = [hold for hold in self.holds if not hold._settled]
                if self._first_lost is not None or not live:
                    break
                # a part being released has no deadline: its end wakes this wait
                deadlines = [hold.gives_up_in for hold in live if hold.gives_up_in > 0]
                left = min(deadlines) if deadlines else None
                if end is not None:
                    remaining = end - clock.now()
                    if remaining <= 0:
                        break
                    left = remaining if left is None else min(left, remaining)
                wake.wait(None if left is None else clock.real_timeout(left))
        finally:
            clock.remove_listener(wake.set_threadsafe)
            with self._guard:
                self._wakers.discard(wake)
        return self.lost

    def extend(self, ttl: core.Seconds | None = None) -> None:
        """``extend(ttl)`` each part (see ``AsyncHold.extend``)."""
        for hold in self.holds:
            hold.extend(ttl)

    def release(self) -> None:
        """Give every part back, the last taken first. Every part is released whatever
        happens to another; then the first error is raised: ``LockLost`` if a part had been
        lost, else what a part's release raised."""
        errors: list[TumblerError] = []
        for hold in reversed(self.holds):
            try:
                hold.release()
            except TumblerError as error:
                errors.append(error)
        lost = [error for error in errors if isinstance(error, LockLost)]
        if lost or errors:
            raise (lost or errors)[0]

    @property
    def _release_begun(self) -> bool:
        return all(hold._release_begun for hold in self.holds)

    def _report_loss(self) -> None:
        # each part raises once at most: a loss its release reported is not reported again
        for hold in self.holds:
            hold._report_loss()

    def __repr__(self) -> str:
        if self.lost:
            state = "lost"
        elif self.held or self.in_doubt:
            state = "held"  # in doubt reads as held, as a single hold's repr has it
        else:
            state = "released"
        return f"<{type(self).__name__} {list(self.tokens.items())} {state}>"

    def _part_lost(self, hold: Hold) -> None:
        with self._guard:
            if self._first_lost is not None:
                return
            self._first_lost = hold
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            self._run_callback(callback)
        self._part_ended(hold)

    def _part_ended(self, _hold: Hold) -> None:
        with self._guard:
            wakers = list(self._wakers)
        for wake in wakers:
            wake.set_threadsafe()

    def _run_callback(self, callback: Callable[[MultiHold], object]) -> None:
        try:
            callback(self)
        except Exception:
            _log.exception("on_lost callback for locks %r failed", list(self.names))
