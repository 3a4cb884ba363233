"""What the lock layer calls to tell a client's observers (:mod:`tumbler.observe`) of its
locks' lives: the check of the observers given to ``connect()``, and the dispatch. A client
made without observers has no dispatch (``Observers.of`` is None) and never imports the
events' module.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from ._clock import Clock
from ._logs import DEBUG, WARNING, logger
from .errors import InvalidArgument

if TYPE_CHECKING:
    from .observe import LossReason
    from .observe import Observer as Observer
else:
    # Hidden from type checkers, which read the import above.

    def __getattr__(name: str) -> object:
        # ``_observing.Observer`` in the API's signatures, for what evaluates them (a docs
        # build, typing.get_type_hints): the events' module imported only then
        if name == "Observer":
            from .observe import Observer

            return Observer
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_log = logger("tumbler")


def checked(observers: object) -> tuple[Observer, ...]:
    """``observers`` as given to ``connect()``: an iterable of ``Observer`` instances, else
    ``InvalidArgument``."""
    if isinstance(observers, (tuple, list)) and not observers:
        return ()  # the default: nothing of the observers' module is needed
    from .observe import Observer

    if isinstance(observers, (str, bytes, Observer)) or not isinstance(observers, Iterable):
        raise InvalidArgument(
            f"observers must be a list of tumbler.observe.Observer, not {type(observers).__name__}"
        )
    found = tuple(observers)
    for observer in found:
        if not isinstance(observer, Observer):
            raise InvalidArgument(
                "each observer must be an instance of a subclass of tumbler.observe.Observer, "
                f"not {type(observer).__name__}"
            )
    return found


# -- what the lock layer calls (tumbler's own code) ------------------------------------------------


class _HoldLike(Protocol):
    """What an event needs of a hold (the lock layer's ``Hold`` and ``AsyncHold``)."""

    @property
    def token(self) -> int: ...


Handler = Callable[[object], None]

#: one number per acquisition, unique in the process (``next()`` on a count is atomic)
_acquisitions = itertools.count(1)


class Observers:
    """A client's observers: each event's handlers (the methods its observers override), and
    the calls that make each event. None of a client's at all when it has no handler."""

    def __init__(self, observers: tuple[Observer, ...], backend: str, clock: Clock) -> None:
        from . import observe

        #: the module of the events (imported only by a client with observers)
        self.events = observe
        self.backend = backend
        self.clock = clock
        self._handlers: dict[str, tuple[Handler, ...]] = {
            event: tuple(
                getattr(observer, event)
                for observer in observers
                if getattr(type(observer), event) is not getattr(observe.Observer, event)
            )
            for event in observe.EVENTS
        }
        (
            self._started,
            self._waiting,
            self._granted,
            self._timed_out,
            self._failed,
            self._release_started,
            self._released,
            self._lost,
            self._renewed,
            self._renewal_failed,
        ) = (self._handlers[event] for event in observe.EVENTS)
        #: (observer method's function, event) pairs whose failure was logged in full already
        self._failed_once: set[tuple[object, str]] = set()
        self._failures_guard = threading.Lock()

    @classmethod
    def of(cls, observers: tuple[Observer, ...], url: str, clock: Clock) -> Observers | None:
        """The dispatch for a client of ``url`` (its scheme is the events' ``backend``); None if
        no observer overrides any event."""
        if not observers:
            return None
        made = cls(observers, url.partition(":")[0], clock)
        return made if any(made._handlers.values()) else None

    def acquisition(self, name: str, timeout: float | None) -> Acquisition:
        """Begin observing an acquisition of the lock ``name``."""
        return Acquisition(self, name, timeout)

    def emit(self, handlers: tuple[Handler, ...], event: object) -> None:
        for handler in handlers:
            try:
                handler(event)
            except Exception:
                self._report(handler, type(event).__name__)

    def _report(self, handler: Handler, event: str) -> None:
        key = (getattr(handler, "__func__", handler), event)
        with self._failures_guard:
            first = key not in self._failed_once
            self._failed_once.add(key)
        _log.log(
            WARNING if first else DEBUG,
            "observer %r failed on %s%s",
            getattr(handler, "__self__", handler),
            event,
            "" if first else " (again)",
            exc_info=True,
        )


class Acquisition:
    """The events of one acquisition, of the hold it grants and of that hold's end."""

    __slots__ = ("granted_at", "name", "number", "observers", "started_at", "timeout", "waited")

    def __init__(self, observers: Observers, name: str, timeout: float | None) -> None:
        self.observers = observers
        self.name = name
        self.timeout = timeout
        self.number = next(_acquisitions)
        self.started_at = observers.clock.now()
        #: when the grant came (reset if a grant came too late to use and another follows)
        self.granted_at = self.started_at
        self.waited = False
        handlers = observers._started
        if handlers:
            observers.emit(
                handlers,
                observers.events.AcquireStarted(self.number, name, observers.backend, timeout),
            )

    def grant_made(self) -> None:
        """A grant came back (its hold is being made)."""
        self.granted_at = self.observers.clock.now()

    def waiting(self) -> None:
        """The acquisition waits (said once)."""
        if self.waited:
            return
        self.waited = True
        observers = self.observers
        if observers._waiting:
            observers.emit(
                observers._waiting,
                observers.events.AcquireWaiting(self.number, self.name, observers.backend),
            )

    def granted(self, hold: _HoldLike) -> None:
        observers = self.observers
        if observers._granted:
            wait = self.granted_at - self.started_at
            event = observers.events.AcquireGranted(
                self.number, self.name, observers.backend, hold.token, wait, self.waited
            )
            observers.emit(observers._granted, event)

    def timed_out(self) -> None:
        observers = self.observers
        if observers._timed_out:
            wait = observers.clock.now() - self.started_at
            event = observers.events.AcquireTimedOut(
                self.number, self.name, observers.backend, self.timeout, wait, self.waited
            )
            observers.emit(observers._timed_out, event)

    def failed(self, error: BaseException) -> None:
        observers = self.observers
        if observers._failed:
            wait = observers.clock.now() - self.started_at
            event = observers.events.AcquireFailed(
                self.number, self.name, observers.backend, wait, self.waited, error
            )
            observers.emit(observers._failed, event)

    # -- the hold's --------------------------------------------------------------------------

    def _held(self) -> float:
        return self.observers.clock.now() - self.granted_at

    def release_started(self, hold: _HoldLike, held: float) -> None:
        observers = self.observers
        if observers._release_started:
            event = observers.events.ReleaseStarted(
                self.number, self.name, observers.backend, hold.token, held
            )
            observers.emit(observers._release_started, event)

    def released(self, hold: _HoldLike, held: float, error: BaseException | None) -> None:
        observers = self.observers
        if observers._released:
            event = observers.events.Released(
                self.number, self.name, observers.backend, hold.token, held, error
            )
            observers.emit(observers._released, event)

    def held(self) -> float:
        """Seconds from the grant to now."""
        return self._held()

    def lost(self, hold: _HoldLike, reason: LossReason, detail: str) -> None:
        observers = self.observers
        if observers._lost:
            event = observers.events.HoldLost(
                self.number, self.name, observers.backend, hold.token, self._held(), reason, detail
            )
            observers.emit(observers._lost, event)

    def renewed(self, hold: _HoldLike, lease_left: float, lease: float) -> None:
        observers = self.observers
        if observers._renewed:
            late = lease_left < lease * observers.events.LATE_FRACTION
            event = observers.events.Renewed(
                self.number, self.name, observers.backend, hold.token, lease_left, late
            )
            observers.emit(observers._renewed, event)

    def renewal_failed(self, hold: _HoldLike, lease_left: float, error: BaseException) -> None:
        observers = self.observers
        if observers._renewal_failed:
            event = observers.events.RenewalFailed(
                self.number, self.name, observers.backend, hold.token, lease_left, error
            )
            observers.emit(observers._renewal_failed, event)
