"""Observers: what a client tells about the life of its locks, for metrics, traces or logs.

    class Slow(tumbler.observe.Observer):
        def acquire_granted(self, event):
            if event.wait > 1.0:
                log.info("waited %.1f s for %s", event.wait, event.name)

    locks = tumbler.connect(url, observers=[Slow()])

An observer subclasses ``Observer`` and overrides the methods of the events it wants; each
gets one event, an immutable record (a named tuple). Every event of one acquisition, of the
hold it granted and of that hold's release carries the same ``acquisition`` number, so that an
observer can pair a start with its end (a span, say). ``tumbler.otel`` turns these events
into OpenTelemetry metrics and spans.

When and where observers are called:

- In the thread or task where the event happens, at once, and never while the client holds
  one of its internal locks. The acquire events run in the acquiring thread or task (so an
  OpenTelemetry span started there is a child of the caller's span), the release events in
  the releasing one, the renewal events and most losses in the client's renewal worker.
- An observer must return quickly and must not block: it runs on the path of the lock (on the
  event loop, in asyncio). Record, count, or hand the event to a queue of your own.
- An exception an observer raises is logged (at WARNING with its traceback, the first time for
  each observer and event; at DEBUG afterwards) and goes no further: observing never changes
  what the lock does. ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``)
  is not caught.
- A client made without observers pays nothing for them: no event is made, nothing is called.
  An observer that overrides no method is not called either.

The times (``wait``, ``held``, ``lease_left``) are seconds on the client's clock (the backend's,
a ``ManualClock`` in tests): monotonic, not wall time.

Every acquisition the client makes is observed: ``acquire()`` with any timeout, ``with``, and
the read and write sides of a read/write lock. A re-entrant lock's second acquire by its holder
is not an acquisition (nothing is asked of the backend), and its inner release not a release.
"""

from __future__ import annotations

from typing import Final, Literal, NamedTuple, get_args

__all__ = [
    "LOSS_REASONS",
    "AcquireFailed",
    "AcquireGranted",
    "AcquireStarted",
    "AcquireTimedOut",
    "AcquireWaiting",
    "HoldLost",
    "LossReason",
    "Observer",
    "ReleaseStarted",
    "Released",
    "RenewalFailed",
    "Renewed",
]


#: Why a hold was lost, in a few stable words (``HoldLost.reason``; a metric's attribute):
#:
#: - ``expired``: its lease ran out before a renewal succeeded (the backend was out of reach
#:   for that long, or the process was paused past it);
#: - ``refused``: a renewal or the release found that the backend no longer had the grant;
#: - ``force_released``: the same, and the backend says an operator forced it out;
#: - ``session_expired``: the backend's session ended (ZooKeeper);
#: - ``renewal_error``: a renewal failed with an error other than the backend being out of
#:   reach (permissions taken away, say);
#: - ``client_closed``: the client was closed while the hold was held;
#: - ``forked``: the hold belongs to the parent of this process.
LossReason = Literal[
    "expired",
    "refused",
    "force_released",
    "session_expired",
    "renewal_error",
    "client_closed",
    "forked",
]
LOSS_REASONS: Final[tuple[LossReason, ...]] = get_args(LossReason)

#: A renewal is late when it was sent with less than this part of its lease left: one sent on
#: time has about two thirds left, one sent after a missed turn (a renewal that could not
#: reach the backend, a blocked event loop, a paused process) a third or less.
LATE_FRACTION: Final = 1 / 3


# -- the events ----------------------------------------------------------------------------------
#
# ``name`` is the lock's name as the lock object has it (canonical; a segmented lock's own
# name, not its segment's), ``backend`` the scheme of the client's URL (``redis``, ``sqlite``):
# never the URL, which may carry a password.


class AcquireStarted(NamedTuple):
    """An acquisition began. ``timeout``: how long it may wait (None: for ever, 0: one try)."""

    acquisition: int
    name: str
    backend: str
    timeout: float | None


class AcquireWaiting(NamedTuple):
    """The acquisition found the lock taken (or another of this client's waiters for it
    ahead) and waits. Once per acquisition at most; its end is the acquisition's end, whose
    ``waited`` is then True. The number of a client's waiters is those begun and not ended."""

    acquisition: int
    name: str
    backend: str


class AcquireGranted(NamedTuple):
    """The acquisition was granted: ``token`` is the hold's fencing token, ``wait`` the seconds
    from its start to the grant."""

    acquisition: int
    name: str
    backend: str
    token: int
    wait: float
    waited: bool


class AcquireTimedOut(NamedTuple):
    """The acquisition's timeout ran out before a grant (with ``timeout`` 0: its one try was
    refused). ``wait``: the seconds it took."""

    acquisition: int
    name: str
    backend: str
    timeout: float | None
    wait: float
    waited: bool


class AcquireFailed(NamedTuple):
    """The acquisition raised ``error`` (the backend out of reach past the timeout, the client
    closed, a cancellation ...); the caller gets that error. ``wait``: the seconds it took."""

    acquisition: int
    name: str
    backend: str
    wait: float
    waited: bool
    error: BaseException


class ReleaseStarted(NamedTuple):
    """The holder's release of a hold began (``release()``, or leaving ``with``; not a call
    that finds the hold released already, which raises ``NotHeld``). ``held``: seconds from
    the grant to now."""

    acquisition: int
    name: str
    backend: str
    token: int
    held: float


class Released(NamedTuple):
    """The holder's release ended: ``error`` is what it raised, None if it raised nothing
    (``LockLost``: the hold had been lost; ``BackendUnavailable``: the backend could not be
    told, and the grant frees itself when its lease runs out). ``held`` as for
    ``ReleaseStarted``."""

    acquisition: int
    name: str
    backend: str
    token: int
    held: float
    error: BaseException | None


class HoldLost(NamedTuple):
    """A hold was found lost, once per hold: ``reason`` in a few stable words (see
    ``LossReason``), ``detail`` in a sentence (the hold's ``lost_reason``, which may name an
    operator). ``held``: seconds from the grant to the finding."""

    acquisition: int
    name: str
    backend: str
    token: int
    held: float
    reason: LossReason
    detail: str


class Renewed(NamedTuple):
    """A hold's lease was renewed (by the renewal worker, or ``hold.extend()``). ``lease_left``:
    the seconds the client still counted on when the renewal was sent; ``late``: that was less
    than a third of the lease (a renewal turn was missed: see ``LATE_FRACTION``)."""

    acquisition: int
    name: str
    backend: str
    token: int
    lease_left: float
    late: bool


class RenewalFailed(NamedTuple):
    """A renewal could not reach the backend: the hold is in doubt and the renewal is tried
    again soon, until the lease runs out (then ``HoldLost`` with ``expired``). ``error``: what
    the backend call raised; ``lease_left``: the seconds the client still counts on, when the
    failure came back."""

    acquisition: int
    name: str
    backend: str
    token: int
    lease_left: float
    error: BaseException


# -- the observer ----------------------------------------------------------------------------------


class Observer:
    """Receives a client's events: override the methods of the events you want.

    Give observers to ``tumbler.connect(url, observers=[...])`` (or ``tumbler.aio.connect``).
    Each method is called with one event, in the thread or task where it happens, and must
    return quickly (see the module's docstring). The same observer may serve several clients,
    from several threads at once.
    """

    def acquire_started(self, event: AcquireStarted) -> None:
        """An acquisition began."""

    def acquire_waiting(self, event: AcquireWaiting) -> None:
        """An acquisition found the lock taken and waits."""

    def acquire_granted(self, event: AcquireGranted) -> None:
        """An acquisition was granted."""

    def acquire_timed_out(self, event: AcquireTimedOut) -> None:
        """An acquisition's timeout ran out."""

    def acquire_failed(self, event: AcquireFailed) -> None:
        """An acquisition raised an error."""

    def release_started(self, event: ReleaseStarted) -> None:
        """The holder's release of a hold began."""

    def released(self, event: Released) -> None:
        """The holder's release of a hold ended."""

    def lost(self, event: HoldLost) -> None:
        """A hold was found lost."""

    def renewed(self, event: Renewed) -> None:
        """A hold's lease was renewed."""

    def renewal_failed(self, event: RenewalFailed) -> None:
        """A renewal could not reach the backend."""


#: the names of Observer's event methods
EVENTS: Final = (
    "acquire_started",
    "acquire_waiting",
    "acquire_granted",
    "acquire_timed_out",
    "acquire_failed",
    "release_started",
    "released",
    "lost",
    "renewed",
    "renewal_failed",
)
