"""Every error tumbler raises, under one base class.

Each class also inherits the builtin exception a caller would already catch for that kind of
failure, so ``except TimeoutError`` or ``except ValueError`` keep working::

    TumblerError
    ├── AcquireTimeout (TimeoutError)       the lock could not be had within the timeout
    ├── LockLost                            a hold ended without its owner releasing it
    │   └── HoldInDoubt                     check(): the hold cannot be confirmed right now
    ├── StaleToken                          tumbler.fencing refused a write: a newer holder wrote
    ├── NotHeld (RuntimeError)              release of a lock the caller does not hold
    ├── AlreadyHeld (RuntimeError)          non-re-entrant lock taken twice by one thread/task
    ├── ClientClosed (RuntimeError)         use of a client after close()
    ├── ForkedClient (RuntimeError)         use of a client inherited across fork()
    ├── WrongEventLoop (RuntimeError)       an asyncio client used from another event loop
    ├── InvalidArgument (ValueError)        bad input, refused before the backend is touched
    │   ├── InvalidLockName
    │   ├── InvalidTTL
    │   ├── InvalidTimeout
    │   ├── InvalidLockDelay
    │   ├── InvalidPermits
    │   ├── InvalidSegments
    │   └── InvalidURL
    │       └── UnknownScheme
    ├── PermitsMismatch (ValueError)        a semaphore's permits differ from its live holders'
    ├── TooManyWaiters                      the lock's line at the backend is full
    ├── ConfigurationError                  the backend cannot be used as configured
    │   ├── MissingDependency (ImportError) the backend's optional extra is not installed
    │   └── BrokenBackend                   an installed package's backend cannot be loaded
    ├── PermissionDenied (PermissionError)  the backend refused us access
    └── BackendUnavailable (ConnectionError) the backend cannot be reached or is not answering
        └── OutOfConnections                the server refused a connection: it has all it allows

Errors about one lock carry its ``lock_name``; errors about a backend carry ``backend``, the
backend's URL with any password removed.

Each class carries ``exit_status``, the status a command exits with when it reports the error
(the ``tumbler`` command, its ``torture`` harness), in the style of sysexits(3). A class has its
parent's unless this table names it:

    64  EX_USAGE        InvalidArgument, PermitsMismatch
    69  EX_UNAVAILABLE  BackendUnavailable
    70  EX_SOFTWARE     TumblerError (an error that means a bug: NotHeld, ClientClosed, ...)
    75  EX_TEMPFAIL     AcquireTimeout, TooManyWaiters (busy: worth trying again later)
    77  EX_NOPERM       PermissionDenied
    78  EX_CONFIG       ConfigurationError, InvalidURL (a URL is configuration)
    79  EX_LOCK_LOST    LockLost, StaleToken (not in sysexits(3))

A stale token is the resource's word that the hold was lost, and the same write with the same
token is refused again: not a busy resource (75), so not worth retrying.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "AcquireTimeout",
    "AlreadyHeld",
    "BackendUnavailable",
    "BrokenBackend",
    "ClientClosed",
    "ConfigurationError",
    "ForkedClient",
    "InvalidArgument",
    "InvalidLockDelay",
    "InvalidLockName",
    "InvalidPermits",
    "InvalidSegments",
    "InvalidTTL",
    "InvalidTimeout",
    "InvalidURL",
    "HoldInDoubt",
    "LockLost",
    "MissingDependency",
    "NotHeld",
    "OutOfConnections",
    "PermissionDenied",
    "PermitsMismatch",
    "StaleToken",
    "TooManyWaiters",
    "TumblerError",
    "UnknownScheme",
    "WrongEventLoop",
]


#: the exit statuses of the table above, named as sysexits(3) names them
EX_USAGE = 64
EX_UNAVAILABLE = 69
EX_SOFTWARE = 70
EX_TEMPFAIL = 75
EX_NOPERM = 77
EX_CONFIG = 78
EX_LOCK_LOST = 79
#: not an error's: what ``tumbler run`` exits with when its command cannot be executed, or is
#: not found, as a shell does; and a shell's "ended by signal N", 128 + N
EX_CANNOT_EXECUTE = 126
EX_NOT_FOUND = 127
EX_SIGNAL_BASE = 128


class TumblerError(Exception):
    """Base class of every error raised by tumbler."""

    #: what a command that reports this error exits with (see the module's table)
    exit_status: ClassVar[int] = EX_SOFTWARE

    def __init__(
        self, message: str, *, lock_name: str | None = None, backend: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.lock_name = lock_name
        self.backend = backend

    def __reduce__(self) -> tuple[object, ...]:
        # Subclasses take other constructor arguments; rebuild from the state instead, so
        # errors survive crossing a process boundary (multiprocessing, concurrent.futures).
        return (_rebuild, (type(self), self.args, self.__dict__))

    def __str__(self) -> str:
        parts = [self.message]
        if self.lock_name is not None and repr(self.lock_name) not in self.message:
            parts.append(f"(lock {self.lock_name!r})")
        if self.backend is not None and self.backend not in self.message:
            parts.append(f"[{self.backend}]")
        return " ".join(parts)


def _rebuild(
    cls: type[TumblerError], args: tuple[object, ...], state: dict[str, object]
) -> TumblerError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class AcquireTimeout(TumblerError, TimeoutError):
    """The lock could not be acquired before the timeout ran out."""

    exit_status = EX_TEMPFAIL


class LockLost(TumblerError):
    """A hold ended without its owner releasing it.

    Raised when leaving a ``with`` block (and by ``release()`` and ``Hold.check()``) if the
    lease ran out, a renewal was refused, or an operator force-released the lock. The code that
    ran under the hold may not have been alone: a resource that checks fencing tokens will have
    refused its writes once a newer holder wrote.
    """

    exit_status = EX_LOCK_LOST


class HoldInDoubt(LockLost):
    """The client cannot tell whether it still holds the lock (raised by ``Hold.check()``).

    The connection to a session-based backend dropped (ZooKeeper's SUSPENDED), or renewals
    could not reach the backend: the hold may still be valid, and becomes so again when a
    renewal confirms it, but until then work that needs the lock must not go on. A subclass of
    ``LockLost``, so code that stops on a lost lock stops here too.
    """


class StaleToken(TumblerError):
    """A write fenced with a token lower than the highest its resource has accepted was refused
    (by :mod:`tumbler.fencing`), and nothing of it was made.

    A newer holder of the lock has written, so this holder's lease ran out (or an operator
    force-released it) before the write arrived: it is no longer alone. Retrying with the same
    token is refused again; stop, and take the lock anew if the work must still be done.
    ``resource`` is what was fenced, ``token`` the refused token, ``highest`` the highest one
    the resource had accepted (None where the store did not say).
    """

    exit_status = EX_LOCK_LOST

    def __init__(
        self,
        resource: str,
        token: int,
        highest: int | None = None,
        *,
        lock_name: str | None = None,
        backend: str | None = None,
    ) -> None:
        accepted = "" if highest is None else f" (it has accepted {highest})"
        super().__init__(
            f"{resource!r} refused fencing token {token}{accepted}: a newer holder of the lock "
            "has written; this holder's lease ran out",
            lock_name=lock_name,
            backend=backend,
        )
        self.resource = resource
        self.token = token
        self.highest = highest


class NotHeld(TumblerError, RuntimeError):
    """release() (or renewal) of a lock that the calling thread or task does not hold."""


class AlreadyHeld(TumblerError, RuntimeError):
    """A non-re-entrant lock was acquired again by the thread or task that holds it."""


class ClientClosed(TumblerError, RuntimeError):
    """The client was used after close()."""


class ForkedClient(TumblerError, RuntimeError):
    """The client was created in a parent process; a forked child must connect() anew."""


class WrongEventLoop(TumblerError, RuntimeError):
    """An asyncio client was used from an event loop other than the one it was made on.

    Its connections and its renewal worker belong to that loop: once it is gone (a second
    ``asyncio.run()``, a test framework's loop per test), nothing would renew a grant made
    through it. Connect anew on each loop.
    """


class InvalidArgument(TumblerError, ValueError):
    """An argument was refused before anything was sent to the backend."""

    exit_status = EX_USAGE


class InvalidLockName(InvalidArgument):
    """A lock name that is empty, too long, not text or holds control characters."""


class InvalidTTL(InvalidArgument):
    """A TTL (lease length) that is not a finite number of seconds in the allowed range."""


class InvalidTimeout(InvalidArgument):
    """An acquire timeout that is negative (other than -1), NaN or not a number."""


class InvalidLockDelay(InvalidArgument):
    """A lock-delay that is not a number of seconds from 0 to an hour."""


class InvalidPermits(InvalidArgument):
    """A semaphore permit count that is not a whole number in the allowed range."""


class InvalidSegments(InvalidArgument):
    """A segmented lock's segment count, or a choice among its segments, that is not valid."""


class InvalidURL(InvalidArgument):
    """A backend URL that cannot be parsed or names an unknown option."""

    exit_status = EX_CONFIG  # from --url or $TUMBLER_URL: configuration, as much as input


class UnknownScheme(InvalidURL):
    """A backend URL whose scheme no installed backend handles."""

    def __init__(self, scheme: str, known: list[str]) -> None:
        super().__init__(
            f"unknown backend URL scheme {scheme!r}; known schemes: {', '.join(sorted(known))}"
        )
        self.scheme = scheme
        self.known = sorted(known)


class PermitsMismatch(TumblerError, ValueError):
    """A semaphore asked for with a permit count other than the one its live holders use."""

    exit_status = EX_USAGE


class TooManyWaiters(TumblerError):
    """An acquire would have queued behind as many waiters as the backend allows for one lock.

    The backend keeps each lock's line bounded (the ``max_waiters`` URL option, on every
    backend but etcd), so that one crowded lock cannot slow the server for every other lock.
    Nothing was queued: try again later, or take fewer waits at once.
    """

    exit_status = EX_TEMPFAIL


class ConfigurationError(TumblerError):
    """The backend cannot be used as configured (a bad path, an unsafe directory, ...)."""

    exit_status = EX_CONFIG


#: the name tumbler is installed by: "tumbler" on PyPI is another project, which pip would
#: install instead, with only a warning that it has no such extra
DISTRIBUTION = "tumbler-locks"


def install_command(extra: str) -> str:
    """The command that installs tumbler with one of its extras (``redis``, ``testing``)."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


class MissingDependency(ConfigurationError, ImportError):
    """The backend, or another part of tumbler, needs an optional dependency that is not
    installed. ``needed_by`` names that part when it is not the backend of ``scheme``
    (``tumbler.otel``)."""

    def __init__(
        self, scheme: str | None, extra: str, missing: str, *, needed_by: str | None = None
    ) -> None:
        who = needed_by if needed_by is not None else f"the {scheme}:// backend"
        super().__init__(f"{who} needs the {missing!r} package: {install_command(extra)}")
        self.extra = extra
        self.missing = missing


class BrokenBackend(ConfigurationError):
    """The backend an installed package registers for a scheme (by entry point) cannot be
    loaded: its import fails, or what it names is not a backend descriptor."""


class PermissionDenied(TumblerError, PermissionError):
    """The backend refused access (file permissions, credentials, ACLs)."""

    exit_status = EX_NOPERM


class BackendUnavailable(TumblerError, ConnectionError):
    """The backend cannot be reached, or did not answer in time."""

    exit_status = EX_UNAVAILABLE


class OutOfConnections(BackendUnavailable):
    """The server refused a new connection because it has as many as it allows (PostgreSQL's
    and MySQL's ``max_connections``, a pooler's client limit). Each client of a SQL backend
    keeps up to its own ``max_connections`` (in the URL) for calls, and one or two more to
    learn of releases: lower that, or raise the server's limit."""
