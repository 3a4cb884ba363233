"""The public API: what ``__all__`` promises exists, and the sync and asyncio flavours match.

The sync lock code is generated from the asyncio code; a hand edit to one flavour, or a
change the generator does not carry over, shows up here as a difference in names, in
properties or in parameters.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from pathlib import Path
from types import ModuleType

import pytest

import tumbler
import tumbler.aio
import tumbler.backends.contract
import tumbler.errors
import tumbler.testing

PUBLIC_MODULES = [
    "tumbler",
    "tumbler.aio",
    "tumbler.errors",
    "tumbler.testing",
    "tumbler.observe",
    "tumbler.otel",
]

# sync class name -> asyncio class name
FLAVOURS = {
    "Lock": "AsyncLock",
    "Hold": "AsyncHold",
    "SegmentHold": "AsyncSegmentHold",
    "Locks": "AsyncLocks",
    "Semaphore": "AsyncSemaphore",
    "SegmentedLock": "AsyncSegmentedLock",
    "RLock": "AsyncRLock",
    "RWLock": "AsyncRWLock",
    "ReadLock": "AsyncReadLock",
    "MultiLock": "AsyncMultiLock",
    "MultiHold": "AsyncMultiHold",
    "Election": "AsyncElection",
    "Leadership": "AsyncLeadership",
    "LeaderChanges": "AsyncLeaderChanges",
    "StateChanges": "AsyncStateChanges",
}

# protocol methods with an asyncio counterpart, under the sync name
ASYNC_DUNDERS = {
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
}
PROTOCOL_DUNDERS = {"__enter__", "__exit__", "__iter__", "__next__", "__call__", "__len__"}


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_name_in_all_exists(module_name: str) -> None:
    module = importlib.import_module(module_name)
    for name in module.__all__:
        assert hasattr(module, name), f"{module_name}.{name} is in __all__ but missing"


@pytest.mark.parametrize("module_name", [*PUBLIC_MODULES, "tumbler.backends.contract"])
def test_no_private_or_duplicate_names_in_all(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert all(isinstance(name, str) for name in module.__all__)
    assert not [name for name in module.__all__ if name.startswith("_")]
    assert len(set(module.__all__)) == len(module.__all__)


def test_star_import_gives_exactly_all() -> None:
    for module_name in PUBLIC_MODULES:
        namespace: dict[str, object] = {}
        exec(f"from {module_name} import *", namespace)
        namespace.pop("__builtins__")
        assert set(namespace) == set(importlib.import_module(module_name).__all__)


def test_every_sync_class_has_an_asyncio_twin_and_back() -> None:
    sync_classes = {
        name
        for name in tumbler.__all__
        if name in FLAVOURS or "Async" + name in tumbler.aio.__all__
    }
    assert sync_classes == set(FLAVOURS)
    for sync_name, async_name in FLAVOURS.items():
        assert sync_name in tumbler.__all__
        assert async_name in tumbler.aio.__all__
    async_classes = {name for name in tumbler.aio.__all__ if name.startswith("Async")}
    assert async_classes == set(FLAVOURS.values())


#: What a user may use on each class, besides its protocol (``with``, ``async with``): what the
#: README and the docstrings document. Anything else without a leading underscore would be
#: tumbler's own machinery in a user's completion list, and a name users come to rely on.
SURFACE = {
    "Hold": {
        "name", "token", "ttl", "held", "in_doubt", "lost", "lost_reason", "expires_in",
        "gives_up_in", "check", "on_lost", "wait_lost", "extend", "release",
    },
    "SegmentHold": {
        "name", "token", "ttl", "segment", "held", "in_doubt", "lost", "lost_reason",
        "expires_in", "gives_up_in", "check", "on_lost", "wait_lost", "extend", "release",
    },
    "Locks": {
        "url", "capabilities", "lock", "rlock", "semaphore", "segmented", "rwlock", "multi",
        "election", "synchronized", "watch", "status", "status_all", "force_release", "settle",
        "close",
    },
    "Election": {"name", "ttl", "lock_delay", "campaign", "leader", "observe"},
    "Leadership": {
        "name", "token", "term", "value", "ttl", "held", "in_doubt", "lost", "lost_reason",
        "expires_in", "gives_up_in", "check", "on_lost", "wait_lost", "extend", "release",
        "resign",
    },
    "StateChanges": {"name", "close"},
    "LeaderChanges": {"close"},
    "MultiLock": {
        "names", "ttl", "timeout", "fair", "renew", "lock_delay", "hold", "acquire", "release",
    },
    "MultiHold": {
        "names", "holds", "tokens", "held", "in_doubt", "lost", "lost_reason", "expires_in",
        "gives_up_in", "check", "on_lost", "wait_lost", "extend", "release",
    },
    "Lock": {
        "name", "ttl", "timeout", "fair", "renew", "lock_delay", "hold", "acquire", "release",
        "locked",
    },
    "RLock": {
        "name", "ttl", "timeout", "fair", "renew", "lock_delay", "hold", "acquire", "release",
        "locked",
    },
    "Semaphore": {
        "name", "permits", "ttl", "timeout", "fair", "renew", "lock_delay", "hold", "acquire",
        "release", "locked",
    },
    "SegmentedLock": {
        "name", "segments", "segment_names", "ttl", "timeout", "fair", "renew", "lock_delay",
        "hold", "acquire", "release", "locked",
    },
    "RWLock": {"name", "read", "write"},
    "ReadLock": {
        "name", "ttl", "timeout", "fair", "renew", "lock_delay", "hold", "acquire", "release",
        "locked",
    },
}  # fmt: skip


def _public(instance: object) -> set[str]:
    return {member for member in dir(instance) if not member.startswith("_")}


def _surfaces(
    locks: object, lock: object, segmented: object, multi: object, leadership: object
) -> dict[str, set[str]]:
    """The public names of a live object of each class of SURFACE, by its sync name (instance
    attributes show only on an instance); ``lock``, ``segmented`` and ``multi`` are held,
    ``leadership`` leads."""
    rw = locks.rwlock("rw")  # type: ignore[attr-defined]
    election = locks.election("e")  # type: ignore[attr-defined]
    return {
        "Election": _public(election),
        "Leadership": _public(leadership),
        "StateChanges": _public(locks.watch("w")),  # type: ignore[attr-defined]
        "LeaderChanges": _public(election.observe()),
        "Locks": _public(locks),
        "Lock": _public(lock),
        "Hold": _public(lock.hold),  # type: ignore[attr-defined]
        "SegmentHold": _public(segmented.hold),  # type: ignore[attr-defined]
        "RLock": _public(locks.rlock("r")),  # type: ignore[attr-defined]
        "Semaphore": _public(locks.semaphore("s", 2)),  # type: ignore[attr-defined]
        "SegmentedLock": _public(locks.segmented("g", 2)),  # type: ignore[attr-defined]
        "RWLock": _public(rw),
        "ReadLock": _public(rw.read()),
        "MultiLock": _public(multi),
        "MultiHold": _public(multi.hold),  # type: ignore[attr-defined]
    }


def test_each_class_shows_only_what_a_user_may_use() -> None:
    with tumbler.connect("memory://") as locks:
        lock, segmented = locks.lock("surface-sync"), locks.segmented("surface-sync-g", 2)
        multi = locks.multi(["surface-sync-m1", "surface-sync-m2"])
        assert lock.acquire()
        assert segmented.acquire()
        assert multi.acquire()
        leadership = locks.election("surface-sync-e").campaign("me")
        assert _surfaces(locks, lock, segmented, multi, leadership) == SURFACE


def test_each_asyncio_class_shows_only_what_a_user_may_use() -> None:
    async def surfaces() -> dict[str, set[str]]:
        async with await tumbler.aio.connect("memory://") as locks:
            lock = locks.lock("surface-asyncio")
            segmented = locks.segmented("surface-asyncio-g", 2)
            multi = locks.multi(["surface-asyncio-m1", "surface-asyncio-m2"])
            assert await lock.acquire()
            assert await segmented.acquire()
            assert await multi.acquire()
            leadership = await locks.election("surface-asyncio-e").campaign("me")
            return _surfaces(locks, lock, segmented, multi, leadership)

    assert asyncio.run(surfaces()) == SURFACE


# ---------------------------------------------------------------------------------------------
# Comparing two flavours of a class


def _members(cls: type) -> dict[str, object]:
    """Public members (under their sync name), with their static value (None: annotation)."""
    members: dict[str, object] = {}
    for name in dir(cls):
        public = not name.startswith("_")
        if public or name in PROTOCOL_DUNDERS or name in ASYNC_DUNDERS:
            members[ASYNC_DUNDERS.get(name, name)] = inspect.getattr_static(cls, name)
    for klass in cls.__mro__:
        for name in inspect.get_annotations(klass):
            if not name.startswith("_"):
                members.setdefault(name, None)
    # what object and Protocol give every class is not part of the API
    for name in ("__call__", "__init_subclass__"):
        if name in members and getattr(cls, name, None) is getattr(object, name, None):
            del members[name]
    return members


def _parameters(function: object) -> list[tuple[str, str, bool]]:
    assert callable(function)
    signature = inspect.signature(function)
    return [
        (parameter.name, parameter.kind.name, parameter.default is inspect.Parameter.empty)
        for parameter in signature.parameters.values()
    ]


def _function(value: object) -> object:
    if isinstance(value, (staticmethod, classmethod)):
        return value.__func__
    return value


def flavour_differences(sync_cls: type, async_cls: type) -> list[str]:
    """How the asyncio flavour of a class differs from the sync one, in words."""
    differences: list[str] = []
    sync_members = _members(sync_cls)
    async_members = _members(async_cls)
    for name in sorted(set(sync_members) - set(async_members)):
        differences.append(f"{async_cls.__name__} lacks {name}")
    for name in sorted(set(async_members) - set(sync_members)):
        differences.append(f"{sync_cls.__name__} lacks {name}")
    for name in sorted(set(sync_members) & set(async_members)):
        sync_value, async_value = sync_members[name], async_members[name]
        if isinstance(sync_value, property) != isinstance(async_value, property):
            differences.append(f"{name} is a property in only one flavour")
            continue
        if isinstance(sync_value, property) or sync_value is None or async_value is None:
            continue
        sync_function, async_function = _function(sync_value), _function(async_value)
        if callable(sync_function) != callable(async_function):
            differences.append(f"{name} is callable in only one flavour")
            continue
        if not callable(sync_function):
            continue
        sync_parameters = _parameters(sync_function)
        async_parameters = _parameters(async_function)
        if sync_parameters != async_parameters:
            differences.append(f"{name}: {sync_parameters} != {async_parameters}")
    # the constructor too: the generator must carry over every argument
    if _parameters(sync_cls.__init__) != _parameters(async_cls.__init__):
        differences.append("__init__ parameters differ")
    return differences


@pytest.mark.parametrize(("sync_name", "async_name"), list(FLAVOURS.items()))
def test_sync_and_async_lock_classes_match(sync_name: str, async_name: str) -> None:
    sync_cls = getattr(tumbler, sync_name)
    async_cls = getattr(tumbler.aio, async_name)
    assert flavour_differences(sync_cls, async_cls) == []


@pytest.mark.parametrize(
    ("sync_name", "async_name"), [("Backend", "AsyncBackend"), ("Watch", "AsyncWatch")]
)
def test_sync_and_async_backend_contracts_match(sync_name: str, async_name: str) -> None:
    contract: ModuleType = tumbler.backends.contract
    sync_cls = getattr(contract, sync_name)
    async_cls = getattr(contract, async_name)
    assert flavour_differences(sync_cls, async_cls) == []
    # and the members the lock logic relies on are there at all
    if sync_name == "Backend":
        for name in ("url", "capabilities", "clock", "try_grant", "release", "close"):
            assert name in _members(sync_cls)


def test_sync_and_async_connect_take_the_same_arguments() -> None:
    assert _parameters(tumbler.connect) == _parameters(tumbler.aio.connect)


def test_the_async_flavour_awaits_what_the_sync_one_blocks_on() -> None:
    # every sync method that can block on the backend is a coroutine in the asyncio flavour
    for method in ("acquire", "release", "locked", "__aenter__", "__aexit__"):
        assert inspect.iscoroutinefunction(getattr(tumbler.aio.AsyncLock, method)), method
    for method in ("status", "status_all", "force_release", "settle", "close"):
        assert inspect.iscoroutinefunction(getattr(tumbler.aio.AsyncLocks, method)), method
    for method in ("extend", "release", "wait_lost"):
        assert inspect.iscoroutinefunction(getattr(tumbler.aio.AsyncHold, method)), method
    for method in ("acquire", "release", "locked"):
        assert not inspect.iscoroutinefunction(getattr(tumbler.Lock, method)), method


# The comparison must see drift, or the tests above prove nothing.


class _SyncThing:
    def __init__(self, name: str, *, ttl: float | None = None) -> None:
        self.name = name

    @property
    def held(self) -> bool:
        return True

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        return True

    def release(self) -> None:
        pass

    def __enter__(self) -> _SyncThing:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass


class _AsyncThingInSync:
    def __init__(self, name: str, *, ttl: float | None = None) -> None:
        self.name = name

    @property
    def held(self) -> bool:
        return True

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        return True

    async def release(self) -> None:
        pass

    async def __aenter__(self) -> _AsyncThingInSync:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        pass


class _AsyncThingDrifted:
    def __init__(self, name: str, *, ttl: float | None = None, fair: bool = False) -> None:
        self.name = name

    def held(self) -> bool:  # a method where the sync flavour has a property
        return True

    async def acquire(self, blocking: bool = True, deadline: float | None = None) -> bool:
        return True

    async def release_all(self) -> None:
        pass

    async def __aenter__(self) -> _AsyncThingDrifted:
        return self


def test_flavour_comparison_accepts_matching_classes() -> None:
    assert flavour_differences(_SyncThing, _AsyncThingInSync) == []


def test_flavour_comparison_reports_every_kind_of_drift() -> None:
    differences = flavour_differences(_SyncThing, _AsyncThingDrifted)
    text = "\n".join(differences)
    assert "_AsyncThingDrifted lacks release" in text
    assert "_SyncThing lacks release_all" in text
    assert "_AsyncThingDrifted lacks __exit__" in text
    assert "held is a property in only one flavour" in text
    assert "acquire:" in text
    assert "__init__ parameters differ" in text


# ---------------------------------------------------------------------------------------------
# Instance attributes: set in __init__, so only a live object shows them


def _attributes(instance: object) -> set[str]:
    return {name for name in vars(instance) if not name.startswith("_")}


def test_sync_and_async_objects_have_the_same_attributes() -> None:
    sync: dict[str, set[str]] = {}
    with tumbler.connect("memory://public-api-sync") as locks:
        sync["Locks"] = _attributes(locks)
        sync["Lock"] = _attributes(locks.lock("a"))
        sync["RLock"] = _attributes(locks.rlock("b"))
        sync["Semaphore"] = _attributes(locks.semaphore("c", 2))
        sync["SegmentedLock"] = _attributes(locks.segmented("g", 4))
        sync["RWLock"] = _attributes(locks.rwlock("d"))
        sync["ReadLock"] = _attributes(locks.rwlock("e").read())
        with locks.lock("f") as hold:
            sync["Hold"] = _attributes(hold)
        with locks.segmented("h", 2) as segment_hold:
            sync["SegmentHold"] = _attributes(segment_hold)

    async def collect() -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        async with await tumbler.aio.connect("memory://public-api-async") as locks:
            found["Locks"] = _attributes(locks)
            found["Lock"] = _attributes(locks.lock("a"))
            found["RLock"] = _attributes(locks.rlock("b"))
            found["Semaphore"] = _attributes(locks.semaphore("c", 2))
            found["SegmentedLock"] = _attributes(locks.segmented("g", 4))
            found["RWLock"] = _attributes(locks.rwlock("d"))
            found["ReadLock"] = _attributes(locks.rwlock("e").read())
            async with locks.lock("f") as hold:
                found["Hold"] = _attributes(hold)
            async with locks.segmented("h", 2) as segment_hold:
                found["SegmentHold"] = _attributes(segment_hold)
        return found

    assert asyncio.run(collect()) == sync
    assert "token" in sync["Hold"]
    assert {"name", "ttl", "timeout", "fair", "renew"} <= sync["Lock"]
    assert "permits" in sync["Semaphore"]
    assert {"segments", "segment_names"} <= sync["SegmentedLock"]
    assert "segment" not in sync["Hold"]
    assert "segment" in sync["SegmentHold"]


def test_a_holder_that_no_store_could_keep_is_refused_before_a_client_opens(
    tmp_path: Path,
) -> None:
    """A lone surrogate has no UTF-8: a client described by one would fail at its first grant
    with the encoder's error, not a typed one."""
    url = f"sqlite:///{tmp_path}/locks.db"
    with pytest.raises(tumbler.errors.InvalidArgument, match=r"U\+D800"):
        tumbler.connect(url, holder="worker \ud800")
    with pytest.raises(tumbler.errors.InvalidArgument, match=r"U\+D800"):
        asyncio.run(tumbler.aio.connect(url, holder="worker \ud800"))
    assert list(tmp_path.iterdir()) == []


# -- the package's names, imported at their first use ----------------------------------------


def _type_checking_imports() -> dict[str, set[str]]:
    """What ``tumbler/__init__.py`` imports for type checkers: module -> names."""
    import ast

    tree = ast.parse(Path(tumbler.__file__).read_text())
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    imported: dict[str, set[str]] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom)
        module = "." * node.level + (node.module or "")
        imported.setdefault(module, set()).update(alias.name for alias in node.names)
    return imported


def test_type_checkers_see_every_name_the_package_imports_at_first_use() -> None:
    homes = {module: set(names) for module, names in tumbler._HOMES.items()}
    assert _type_checking_imports() == homes


@pytest.mark.parametrize("name", [*tumbler.__all__, "Seconds", "errors", "observe", "backends"])
def test_each_name_resolves_to_what_its_module_defines(name: str) -> None:
    value = getattr(tumbler, name)
    home = tumbler._HOME_OF.get(name)
    if home is None:
        assert value is importlib.import_module(f"tumbler.{name}")
    else:
        assert value is getattr(importlib.import_module(home, "tumbler"), name)
    assert name in dir(tumbler)


def test_a_name_the_package_does_not_have_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Lokc'"):
        tumbler.Lokc  # type: ignore[attr-defined]  # noqa: B018


def test_the_apis_durations_and_observers_evaluate_as_types() -> None:
    """``Seconds`` and the observers' type are made at their first use, not named as text:
    what evaluates the API's annotations (a docs build, typing.get_type_hints) gets types."""
    import datetime
    import typing

    from tumbler.observe import Observer

    seconds = float | datetime.timedelta
    assert tumbler.Seconds == seconds
    for connect in (tumbler.connect, tumbler.aio.connect):
        hints = typing.get_type_hints(connect)
        assert hints["default_ttl"] == seconds
        assert typing.get_args(hints["observers"]) == (Observer,)
