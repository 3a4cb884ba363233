"""tumbler: distributed locks for Python::

    import tumbler
    locks = tumbler.connect()              # $TUMBLER_URL, else an SQLite file of the user's
    with locks.lock("orders:42", ttl=30, timeout=5) as hold:
        hold.token                         # fencing token: grows with every grant of the name

The asyncio flavour is ``tumbler.aio``, with the same names prefixed ``Async``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from ._api import connect, prepare
    from ._core import DEFAULT_TTL
    from ._core import Seconds as Seconds
    from ._sync.changes import StateChanges
    from ._sync.client import Locks
    from ._sync.election import Election, LeaderChanges, Leadership
    from ._sync.hold import Hold, MultiHold, SegmentHold
    from ._sync.primitives import (
        Lock,
        MultiLock,
        ReadLock,
        RLock,
        RWLock,
        SegmentedLock,
        Semaphore,
    )
    from .backends import known_schemes, register_backend
    from .backends.contract import Capabilities, HolderInfo, Leader, LockState
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
        InvalidLockDelay,
        InvalidLockName,
        InvalidPermits,
        InvalidSegments,
        InvalidTimeout,
        InvalidTTL,
        InvalidURL,
        LockLost,
        MissingDependency,
        NotHeld,
        OutOfConnections,
        PermissionDenied,
        PermitsMismatch,
        StaleToken,
        TooManyWaiters,
        TumblerError,
        UnknownScheme,
        WrongEventLoop,
    )
    from .observe import Observer

#: where each public name lives. ``import tumbler`` imports none of them: each module is
#: imported at the first use of one of its names (PEP 562), so a program pays at start-up
#: only for what it uses, and ``import tumbler.aio`` does not import the blocking flavour.
#: Type checkers read the imports above, which must name the same (a test compares them).
_HOMES: dict[str, tuple[str, ...]] = {
    "._api": ("connect", "prepare"),
    "._core": ("DEFAULT_TTL", "Seconds"),
    "._sync.changes": ("StateChanges",),
    "._sync.client": ("Locks",),
    "._sync.election": ("Election", "LeaderChanges", "Leadership"),
    "._sync.hold": ("Hold", "MultiHold", "SegmentHold"),
    "._sync.primitives": (
        "Lock",
        "MultiLock",
        "ReadLock",
        "RLock",
        "RWLock",
        "SegmentedLock",
        "Semaphore",
    ),
    ".backends": ("known_schemes", "register_backend"),
    ".backends.contract": ("Capabilities", "HolderInfo", "Leader", "LockState"),
    ".errors": (
        "AcquireTimeout",
        "AlreadyHeld",
        "BackendUnavailable",
        "BrokenBackend",
        "ClientClosed",
        "ConfigurationError",
        "ForkedClient",
        "HoldInDoubt",
        "InvalidArgument",
        "InvalidLockDelay",
        "InvalidLockName",
        "InvalidPermits",
        "InvalidSegments",
        "InvalidTimeout",
        "InvalidTTL",
        "InvalidURL",
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
    ),
    ".observe": ("Observer",),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}
#: the public submodules that ``import tumbler`` alone made reachable as attributes, which
#: it still does, at their first use
_SUBMODULES = ("backends", "errors", "observe")

if not TYPE_CHECKING:
    # Hidden from type checkers, which would otherwise take any misspelt attribute of the
    # package for one this function makes.

    def __getattr__(name: str) -> object:
        import importlib

        if name in _SUBMODULES:
            return importlib.import_module(f".{name}", __name__)
        module = _HOME_OF.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_HOME_OF, *_SUBMODULES})


__all__ = [
    "DEFAULT_TTL",
    "AcquireTimeout",
    "AlreadyHeld",
    "BackendUnavailable",
    "BrokenBackend",
    "Capabilities",
    "ClientClosed",
    "ConfigurationError",
    "Election",
    "ForkedClient",
    "Hold",
    "HoldInDoubt",
    "HolderInfo",
    "InvalidArgument",
    "InvalidLockDelay",
    "InvalidLockName",
    "InvalidPermits",
    "InvalidSegments",
    "InvalidTTL",
    "InvalidTimeout",
    "InvalidURL",
    "Leader",
    "LeaderChanges",
    "Leadership",
    "Lock",
    "LockLost",
    "LockState",
    "Locks",
    "MissingDependency",
    "MultiHold",
    "MultiLock",
    "NotHeld",
    "Observer",
    "OutOfConnections",
    "PermissionDenied",
    "PermitsMismatch",
    "RLock",
    "RWLock",
    "ReadLock",
    "SegmentHold",
    "SegmentedLock",
    "Semaphore",
    "StaleToken",
    "StateChanges",
    "TooManyWaiters",
    "TumblerError",
    "UnknownScheme",
    "WrongEventLoop",
    "connect",
    "known_schemes",
    "prepare",
    "register_backend",
]
