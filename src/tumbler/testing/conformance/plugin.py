"""The conformance suite's pytest plugin: which backends the cases run on, and what each may
be asked.

Registered by the ``pytest11`` entry point ``tumbler``, so it is loaded wherever tumbler is
installed; it does nothing unless cases of :mod:`tumbler.testing.conformance` are collected
(its hooks look only at those, and no server starts before a case asks for one).

Options:

``--tumbler-url URL``
    Run every case against ``URL``. Its backend is found by scheme
    (:func:`tumbler.backends.descriptor_for`); each test gets a URL of its own from the
    descriptor's ``isolate`` (another file, key prefix or path of the same store), or ``URL``
    itself for a backend that declares none (its tests then share the store).
``--tumbler-target NAME`` (repeatable)
    Run on these test targets only (``BackendHarness.test_targets``): the built-in backends'
    harnesses' (:mod:`tumbler.testing.backends`), or a harness an installed package registers
    under the entry point group ``tumbler.harnesses``.

``--tumbler-split-flavours SEED``
    Run each case that has a blocking and an asyncio twin in one flavour only on each target
    whose store is served by servers, the flavour chosen by ``SEED``, the case (with its
    parameters) and the target: half the cases each way on every such target, both flavours
    of every case across them, and both flavours of every case on the targets without a
    server (``--tumbler-split-serverless``: on those too). The project's full run passes the
    commit's hash, so that the half it leaves out changes with every commit; without the
    option, every case runs in both flavours everywhere.

Without ``--tumbler-url`` or ``--tumbler-target``, the cases run on every test target of every
built-in harness: the project's own run. Two markers narrow that: a case marked
``tumbler_lock_layer`` checks what does not depend on the backend (what the lock layer refuses
before any backend call; a control run that uses no lock), and runs on one target of the run
(one that declares what the case requires and, where there is one, needs no server); a target
that differs from another only by its connection (TLS, another user:
``TestTarget.connection_variant``) runs only the cases marked ``tumbler_connection``. A
target's servers start once per session (per xdist worker), when a test first needs them, and
stop at its end. A target whose servers cannot start fails its tests when ``$CI`` is true
(``1``, ``true`` or ``yes``), where a skipped suite would look like a passing one, and skips
them with the reason elsewhere.

A case that needs something not every backend promises says so with
``@pytest.mark.tumbler_requires(NAME, ...)`` (names: :data:`REQUIREMENTS`); on a backend whose
descriptor does not declare it, the case is skipped with a reason naming what is missing and
the backend.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest
import pytest_asyncio

import tumbler
import tumbler.aio
from tumbler._url import parse_url
from tumbler.backends import descriptor_for
from tumbler.backends.contract import Capabilities
from tumbler.backends.descriptor import BackendDescriptor
from tumbler.testing.harness import BackendHarness, builtin_harnesses, third_party_harnesses
from tumbler.testing.servers import ServerError
from tumbler.testing.targets import RunningTarget, ServedTarget

__all__ = [
    "REQUIREMENTS",
    "Target",
    "in_ci",
    "server_unavailable",
]

#: the package whose cases this plugin parametrizes
SUITE = "tumbler.testing.conformance"

#: what a case may require with ``tumbler_requires``: a description for the skip reason, and
#: the test on the backend's descriptor
REQUIREMENTS: dict[str, tuple[str, Callable[[BackendDescriptor], bool]]] = {
    "process_exclusion": (
        "locks that exclude other OS processes (scope 'host' or 'network')",
        lambda descriptor: descriptor.capabilities.scope != "process",
    ),
    "network_exclusion": (
        "locks that exclude processes on other machines (scope 'network')",
        lambda descriptor: descriptor.capabilities.scope == "network",
    ),
    "push_wakeups": (
        "waiters woken by the backend (push_wakeups)",
        lambda descriptor: descriptor.capabilities.push_wakeups,
    ),
    "state_wakeups": (
        "state watchers woken by the backend (state_wakeups)",
        lambda descriptor: descriptor.capabilities.state_wakeups,
    ),
    "durable_fencing": (
        "fencing tokens that survive a restart (durable_fencing)",
        lambda descriptor: descriptor.capabilities.durable_fencing,
    ),
    "session_liveness": (
        "holds that live with a session (session_liveness)",
        lambda descriptor: descriptor.capabilities.session_liveness,
    ),
    "lease_liveness": (
        "grants and waiters that end with their lease, not with a session (no session_liveness)",
        lambda descriptor: not descriptor.capabilities.session_liveness,
    ),
    "max_ttl": (
        "a longest lease (max_ttl)",
        lambda descriptor: descriptor.capabilities.max_ttl is not None,
    ),
    "min_ttl_floor": (
        "a shortest lease above tumbler's own floor (min_ttl)",
        lambda descriptor: _raises_the_ttl_floor(descriptor.capabilities),
    ),
    "lock_delay": (
        "lapsed grants kept for their lock-delay (lock_delay)",
        lambda descriptor: descriptor.capabilities.lock_delay,
    ),
    "no_lock_delay": (
        "a backend that keeps no lock-delay (no lock_delay)",
        lambda descriptor: not descriptor.capabilities.lock_delay,
    ),
    "line_cap": (
        "a bounded line (line_cap: the URL option max_waiters)",
        lambda descriptor: descriptor.capabilities.line_cap,
    ),
    "single_server": (
        "URLs that name one TCP server (single_server)",
        lambda descriptor: descriptor.single_server is not None,
    ),
}


def _raises_the_ttl_floor(capabilities: Capabilities) -> bool:
    from tumbler._core import MIN_TTL

    return capabilities.min_ttl > MIN_TTL


def in_ci() -> bool:
    """Whether this run is CI's ($CI is true, 1 or yes)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def server_unavailable(reason: str) -> NoReturn:
    """Fail the test in CI, skip it elsewhere, with ``reason``."""
    if in_ci():
        pytest.fail(f"{reason} (failing rather than skipping because $CI is set)", pytrace=False)
    pytest.skip(reason)


class _GivenURL:
    """A URL given with ``--tumbler-url``: nothing to start; each test gets it isolated."""

    def __init__(self, url: str, descriptor: BackendDescriptor) -> None:
        self._url = url
        self._descriptor = descriptor

    def fresh_url(self) -> str:
        if self._descriptor.isolate is None:
            return self._url
        return self._descriptor.isolate(parse_url(self._url), secrets.token_hex(8))

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Target:
    """One set-up the cases run on: a built-in test target, or a URL given by hand."""

    #: what test ids and reports show
    name: str
    descriptor: BackendDescriptor
    start: Callable[[Path], RunningTarget]
    #: whether it differs from another target only by the connection (TLS, another user):
    #: then only the cases marked ``tumbler_connection`` run on it
    connection_variant: bool = False
    #: whether its store is served by servers it starts (its harness names the system
    #: packages they come from), rather than a file or the test process's memory
    needs_servers: bool = False


def _targets(config: pytest.Config) -> list[Target]:
    url: str | None = config.getoption("tumbler_url")
    names: list[str] = config.getoption("tumbler_target") or []
    if url is not None:
        if names:
            raise pytest.UsageError("give --tumbler-url or --tumbler-target, not both")
        descriptor = descriptor_for(parse_url(url).scheme)
        return [Target("url", descriptor, lambda _directory: _GivenURL(url, descriptor))]
    built_in = _targets_of(builtin_harnesses())
    if not names:
        return built_in
    known = {target.name: target for target in built_in}
    if any(name not in known for name in names):
        for target in _targets_of(third_party_harnesses()):
            known.setdefault(target.name, target)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise pytest.UsageError(
            f"unknown --tumbler-target {', '.join(unknown)}; the targets are {', '.join(known)}"
        )
    return [known[name] for name in dict.fromkeys(names)]


def _targets_of(harnesses: list[BackendHarness]) -> list[Target]:
    return [
        Target(
            target.name,
            harness.descriptor,
            target.start,
            target.connection_variant,
            needs_servers=bool(harness.system_packages),
        )
        for harness in harnesses
        for target in harness.test_targets()
    ]


_TARGETS = pytest.StashKey[list[Target]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tumbler", "tumbler conformance suite")
    group.addoption(
        "--tumbler-url",
        metavar="URL",
        default=None,
        help="run the conformance suite against this backend URL",
    )
    group.addoption(
        "--tumbler-target",
        metavar="NAME",
        action="append",
        default=None,
        help="run the conformance suite on this test target only (repeatable)",
    )
    group.addoption(
        "--tumbler-split-flavours",
        metavar="SEED",
        default=None,
        help="on targets with servers, run each case in one flavour (blocking or asyncio) "
        "chosen by SEED, rather than in both",
    )
    group.addoption(
        "--tumbler-split-serverless",
        action="store_true",
        default=False,
        help="with --tumbler-split-flavours: on the targets without servers too",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "tumbler_requires(*names): the conformance case needs these backend capabilities "
        f"({', '.join(REQUIREMENTS)}); skipped where the backend does not declare them",
    )
    config.addinivalue_line(
        "markers",
        "tumbler_connection: the conformance case exercises the connection to the store, so it "
        "also runs on targets that differ from another only by their connection (TLS, a user)",
    )
    config.addinivalue_line(
        "markers",
        "tumbler_lock_layer: the conformance case checks what does not depend on the backend "
        "(what the lock layer refuses before any backend call, a control run without a lock), "
        "so it runs on one target of the run",
    )


def _lock_layer_target(targets: list[Target], requires: set[str]) -> list[Target]:
    """The one target of ``targets`` that a case independent of the backend runs on: of those
    that declare what the case ``requires`` (all of them if none does: the case then skips
    with the reason), the first whose store needs no server (the cheapest), else the first."""
    able = [
        target
        for target in targets
        if all(REQUIREMENTS[name][1](target.descriptor) for name in requires)
    ] or targets
    serverless = [target for target in able if not target.needs_servers]
    return (serverless or able)[:1]


def _in_suite(module_name: str) -> bool:
    return module_name == SUITE or module_name.startswith(SUITE + ".")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module is None or not _in_suite(metafunc.module.__name__):
        return
    if "conformance_target" not in metafunc.fixturenames:
        return
    requires: set[str] = set()
    for mark in metafunc.definition.iter_markers("tumbler_requires"):
        unknown = [name for name in mark.args if name not in REQUIREMENTS]
        if unknown:
            raise pytest.UsageError(
                f"{metafunc.definition.nodeid}: unknown tumbler_requires {unknown}; "
                f"known: {', '.join(REQUIREMENTS)}"
            )
        requires.update(mark.args)
    if _TARGETS not in metafunc.config.stash:
        metafunc.config.stash[_TARGETS] = _targets(metafunc.config)
    targets = metafunc.config.stash[_TARGETS]
    if metafunc.definition.get_closest_marker("tumbler_lock_layer") is not None:
        targets = _lock_layer_target(targets, requires)
    elif metafunc.definition.get_closest_marker("tumbler_connection") is None:
        targets = [target for target in targets if not target.connection_variant]
    metafunc.parametrize(
        "conformance_target", targets, indirect=True, ids=[target.name for target in targets]
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _target_by_target(items)
    seed: str | None = config.getoption("tumbler_split_flavours")
    if seed is None:
        return
    serverless: bool = config.getoption("tumbler_split_serverless")
    twins: dict[tuple[object, ...], list[tuple[pytest.Item, str]]] = {}
    for item in items:
        case = _flavoured_case(item, serverless)
        if case is not None:
            key, flavour = case
            twins.setdefault(key, []).append((item, flavour))
    left_out: set[pytest.Item] = set()
    for key, pair in twins.items():
        if len(pair) != 2 or pair[0][1] == pair[1][1]:
            continue
        kept = ("sync", "async")[hashlib.sha256(f"{seed}:{key!r}".encode()).digest()[0] % 2]
        left_out.update(item for item, flavour in pair if flavour != kept)
    if left_out:
        config.hook.pytest_deselected(items=[item for item in items if item in left_out])
        items[:] = [item for item in items if item not in left_out]


def _target_by_target(items: list[pytest.Item]) -> None:
    """Put the suite's cases in the places they were collected in, but one target's after
    another (the targets in the order they first come): a worker of pytest-xdist is given a
    stretch of the run in a row, and starts the servers of each target it meets. Collected
    case by case, every worker that ran some of the suite met every target, and kept all of
    their servers until the end of its session."""
    places: list[int] = []
    ranks: list[int] = []
    rank: dict[str, int] = {}
    for index, item in enumerate(items):
        target = getattr(getattr(item, "callspec", None), "params", {}).get("conformance_target")
        if isinstance(target, Target):
            places.append(index)
            ranks.append(rank.setdefault(target.name, len(rank)))
    cases = [items[index] for _, index in sorted(zip(ranks, places, strict=True))]
    for index, item in zip(places, cases, strict=True):
        items[index] = item


def _flavoured_case(item: pytest.Item, serverless: bool) -> tuple[tuple[object, ...], str] | None:
    """For a case of the suite on a target with servers (or any, if ``serverless``) that has
    a twin in the other flavour: what names the pair (the case, its other parameters, the
    target), and its flavour."""
    callspec = getattr(item, "callspec", None)
    module = getattr(item, "module", None)
    if callspec is None or module is None or not _in_suite(module.__name__):
        return None
    target = callspec.params.get("conformance_target")
    if not isinstance(target, Target) or not (target.needs_servers or serverless):
        return None
    package = module.__name__.rsplit(".", 2)[-2]
    flavour = {"_sync": "sync", "_async": "async"}.get(package, callspec.params.get("flavour"))
    if flavour not in ("sync", "async"):
        return None
    # the other parameters by their place in their lists, the same in both twins
    others = sorted(
        (name, index)
        for name, index in callspec.indices.items()
        if name not in ("conformance_target", "flavour")
    )
    case = getattr(item, "originalname", item.name)
    return (module.__name__.rsplit(".", 1)[-1], case, tuple(others), target.name), flavour


class _Running:
    """The targets started in this session, by name; a target that failed to start is not
    tried again (its error is kept)."""

    def __init__(self, directory: Callable[[str], Path]) -> None:
        self._directory = directory
        self._started: dict[str, RunningTarget] = {}
        self._failed: dict[str, str] = {}

    def get(self, target: Target) -> RunningTarget:
        if target.name in self._failed:
            server_unavailable(self._failed[target.name])
        if target.name not in self._started:
            try:
                self._started[target.name] = target.start(self._directory(target.name))
            except (ServerError, OSError) as error:
                self._failed[target.name] = f"cannot start the {target.name} test target: {error}"
                server_unavailable(self._failed[target.name])
        return self._started[target.name]

    def close(self) -> None:
        for running in self._started.values():
            running.close()


@pytest.fixture(scope="session")
def conformance_running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Running]:
    """The conformance targets started in this session."""
    running = _Running(lambda name: tmp_path_factory.mktemp(name))
    yield running
    running.close()


@pytest.fixture
def conformance_target(request: pytest.FixtureRequest) -> Target:
    """The target this case runs on; skips the case if it needs what the backend lacks."""
    target: Target | None = getattr(request, "param", None)
    if target is None:
        raise pytest.UsageError(
            f"{request.node.nodeid}: conformance_target is given only to {SUITE}'s cases"
        )
    for mark in request.node.iter_markers("tumbler_requires"):
        for name in mark.args:
            what, declared = REQUIREMENTS[name]
            if not declared(target.descriptor):
                pytest.skip(
                    f"needs {name}: {what}, which the {target.descriptor.name} backend "
                    "does not declare"
                )
    return target


@pytest.fixture
def conformance_url(conformance_target: Target, conformance_running: _Running) -> str:
    """A URL of the target under test that no other test uses: a new file, store or prefix."""
    return conformance_running.get(conformance_target).fresh_url()


@pytest.fixture
def stall_servers(
    conformance_target: Target, conformance_running: _Running
) -> Callable[[], contextlib.AbstractContextManager[None]]:
    """``with stall_servers():`` stops every process that serves the target's store
    (SIGSTOP: a server that hangs, keeping its connections open, as a stalled machine or a
    long pause does) and lets them run again at its end (SIGCONT). Skips the case on a
    target whose store has no process of its own (a file, memory, a URL given by hand)."""
    running = conformance_running.get(conformance_target)
    if not isinstance(running, ServedTarget) or not running.server_pids():
        pytest.skip(f"the {conformance_target.name} target has no server process to stop")

    @contextlib.contextmanager
    def stalled() -> Iterator[None]:
        pids = running.server_pids()
        stopped: list[int] = []
        try:
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            yield
        finally:
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    return stalled


def with_query(url: str, query: str | None) -> str:
    """``url`` with the URL options ``query`` (``name=value&...``) added."""
    if not query:
        return url
    return f"{url}{'&' if '?' in url else '?'}{query}"


@pytest.fixture
def backend_url(conformance_url: str) -> str:
    """A fresh URL of the backend under test."""
    return conformance_url


@pytest.fixture
def process_backend_url(conformance_url: str) -> str:
    """A fresh URL of the backend under test, for cases that start other processes."""
    return conformance_url


@pytest.fixture
def connect(backend_url: str) -> Iterator[Callable[..., tumbler.Locks]]:
    """Make clients of the backend under test; each is closed after the test."""
    clients: list[tumbler.Locks] = []

    def make(*, query: str | None = None, **options: object) -> tumbler.Locks:
        """A client; ``query``: URL options added to the backend's URL (``max_waiters=1``)."""
        client = tumbler.connect(with_query(backend_url, query), **options)  # type: ignore[arg-type]
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest_asyncio.fixture
async def aconnect(
    backend_url: str,
) -> AsyncIterator[Callable[..., Awaitable[tumbler.aio.AsyncLocks]]]:
    """Make asyncio clients of the backend under test; each is closed after the test."""
    clients: list[tumbler.aio.AsyncLocks] = []

    async def make(*, query: str | None = None, **options: object) -> tumbler.aio.AsyncLocks:
        """As ``connect``'s."""
        url = with_query(backend_url, query)
        client = await tumbler.aio.connect(url, **options)  # type: ignore[arg-type]
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()
