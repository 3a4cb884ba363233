"""tumbler: distributed locks for Python.

    import tumbler
    locks = tumbler.connect()              # $TUMBLER_URL, else an SQLite file of the user's
    with locks.lock("orders:42", ttl=30, timeout=5) as hold:
        hold.token                         # fencing token: grows with every grant of the name

The asyncio flavour is ``tumbler.aio``, with the same names prefixed ``Async``.
"""

from __future__ import annotations

import logging

from ._core import DEFAULT_TTL, validate_ttl
from ._sync.client import Locks
from ._sync.hold import Hold
from ._sync.primitives import Lock, ReadLock, RLock, RWLock, Semaphore
from .backends import known_schemes, register_backend
from .backends.contract import Capabilities, HolderInfo, LockState
from .errors import (
    AcquireTimeout,
    AlreadyHeld,
    BackendUnavailable,
    BrokenBackend,
    ClientClosed,
    ConfigurationError,
    ForkedClient,
    HoldInDoubt,
    InvalidArgument,
    InvalidLockName,
    InvalidPermits,
    InvalidTimeout,
    InvalidTTL,
    InvalidURL,
    LockLost,
    MissingDependency,
    NotHeld,
    PermissionDenied,
    PermitsMismatch,
    TooManyWaiters,
    TumblerError,
    UnknownScheme,
    WrongEventLoop,
)

__version__ = "0.1.0"

# A library logs, the application decides where to: without this, Python's last-resort
# handler would print tumbler's warnings to stderr of any program that never set up logging.
logging.getLogger("tumbler").addHandler(logging.NullHandler())

__all__ = [
    "DEFAULT_TTL",
    "AcquireTimeout",
    "AlreadyHeld",
    "BackendUnavailable",
    "BrokenBackend",
    "Capabilities",
    "ClientClosed",
    "ConfigurationError",
    "ForkedClient",
    "Hold",
    "HoldInDoubt",
    "HolderInfo",
    "InvalidArgument",
    "InvalidLockName",
    "InvalidPermits",
    "InvalidTTL",
    "InvalidTimeout",
    "InvalidURL",
    "Lock",
    "LockLost",
    "LockState",
    "Locks",
    "MissingDependency",
    "NotHeld",
    "PermissionDenied",
    "PermitsMismatch",
    "RLock",
    "RWLock",
    "ReadLock",
    "Semaphore",
    "TooManyWaiters",
    "TumblerError",
    "UnknownScheme",
    "WrongEventLoop",
    "connect",
    "known_schemes",
    "register_backend",
]


def connect(
    url: str | None = None, *, default_ttl: float = DEFAULT_TTL, **options: object
) -> Locks:
    """Open a lock client on the backend that ``url`` names.

    ``url`` defaults to ``$TUMBLER_URL``, else ``sqlite://`` (a file in the user's cache
    directory). The scheme picks the backend: ``sqlite://``, ``memory://``, and those of
    installed extras. ``options`` go to the backend (``clock=`` for ``memory://``).
    ``default_ttl`` is the lease of locks made without a ``ttl``.

    Raises ``UnknownScheme``, ``InvalidURL``, ``MissingDependency`` (naming the extra to
    install), ``ConfigurationError``, ``PermissionDenied`` or ``BackendUnavailable``.
    """
    from ._connect import backend_module

    default_ttl = validate_ttl(default_ttl)  # before anything is opened or created
    module, parsed = backend_module(url, options)
    backend = module.open_sync(parsed, **options)
    try:
        return Locks(backend, default_ttl=default_ttl)
    except BaseException:
        backend.close()
        raise
