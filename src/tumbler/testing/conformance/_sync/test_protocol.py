# Generated from src/tumbler/testing/conformance/_async/test_protocol.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""The backend contract below the lock API: grant requests, renewals and releases sent to the
backend directly (asyncio source of the blocking twin ``_sync/test_protocol.py``).

These hold a backend to the guarantees of ``tumbler.backends.contract`` that a lock object
never shows: a retried request finds its own entry, a renewal never revives what is gone, a
release says whether it removed a live grant, a waiter that vanished stops blocking the line,
and fencing tokens only grow.

Waiter entries live ``capabilities.waiter_ttl`` after their last refresh. A case that relies
on one staying in line observes it only while that lease surely lasts, on the backend's clock,
and plays the scenario again otherwise (a loaded machine may stall it for longer): a fair line
that a late refresh lost is not a broken backend.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tumbler.backends.contract import Backend, Grant, GrantRequest, LockState, Renewal
from tumbler.errors import BackendUnavailable

from ..protocol import Backends

pytestmark = [
    pytest.mark.tumbler_connection,
]

#: the lease of grants that must outlive the case
LONG_TTL = 30.0
#: how many times a scenario that depends on waiter leases is played before the case fails
ATTEMPTS = 3


@dataclass(frozen=True)
class Shape:
    """What a request asks for (``GrantRequest.shared`` and ``limit``)."""

    shared: bool
    limit: int


EXCLUSIVE = Shape(shared=False, limit=1)
READ = Shape(shared=True, limit=0)
WRITE = Shape(shared=False, limit=1)
PERMIT = Shape(shared=True, limit=2)  # one permit of a semaphore of two


@dataclass(frozen=True)
class Kind:
    """One kind of lock, as the requests a case sends for it."""

    id: str
    #: the grants that fill the lock, so that the requests below must wait
    full: tuple[Shape, ...]
    #: the first waiter in line, whose retries are under test
    first: Shape
    #: a fair waiter that arrives after it
    later: Shape


KINDS = [
    Kind("exclusive", full=(EXCLUSIVE,), first=EXCLUSIVE, later=EXCLUSIVE),
    Kind("semaphore", full=(PERMIT, PERMIT), first=PERMIT, later=PERMIT),
    Kind("read-write", full=(WRITE,), first=READ, later=WRITE),
]


def unique(name: str) -> str:
    """A lock name no other case uses, also on a store the cases share."""
    return f"protocol:{name}:{uuid.uuid4().hex[:12]}"


def owner() -> str:
    return uuid.uuid4().hex


def request(
    name: str, who: str, shape: Shape = EXCLUSIVE, *, fair: bool = True, ttl: float = LONG_TTL
) -> GrantRequest:
    return GrantRequest(name, who, shape.shared, shape.limit, fair, ttl, holder="conformance")


def overdue(lease: float) -> float:
    """How long after a lease began the case calls its entry overdue: twice the lease and a
    second, since the backend may time it on a server's clock and remove it lazily."""
    return 2 * lease + 1.0


def in_line(backend: Backend, since: float) -> bool:
    """Whether a waiter entry refreshed by a call sent at ``since`` surely still lives."""
    return backend.clock.now() - since < backend.capabilities.waiter_ttl


def granted(backend: Backend, asked: GrantRequest) -> Grant:
    grant = backend.try_grant(asked)
    assert grant is not None, f"{asked} was not granted"
    assert grant.owner == asked.owner
    assert grant.name == asked.name
    return grant


def free(backend: Backend, name: str) -> LockState:
    state = backend.inspect(name)
    assert state.holders == ()
    assert state.waiters == 0
    return state


@pytest.mark.parametrize("kind", KINDS, ids=[kind.id for kind in KINDS])
def test_a_retried_grant_request_returns_the_same_grant(backend_url: str, kind: Kind) -> None:
    with Backends(backend_url) as backends:
        backend = backends.open()
        name = unique("retried-grant")
        # shared kinds are granted to two owners, so the retry meets another holder's entry
        asked = [request(name, owner(), kind.first) for _ in range(2 if kind.first.shared else 1)]
        grants = [granted(backend, each) for each in asked]
        for each, grant in zip(asked, grants, strict=True):
            again = granted(backend, each)
            assert again.token == grant.token
            state = backend.inspect(name)
            assert len(state.holders) == len(asked), "a second entry"
            assert state.waiters == 0
        state = backend.inspect(name)
        assert sorted(holder.token for holder in state.holders) == sorted(
            grant.token for grant in grants
        )
        for each in asked:
            assert backend.release(name, each.owner) is True
        free(backend, name)


@pytest.mark.parametrize("kind", KINDS, ids=[kind.id for kind in KINDS])
def test_a_retried_waiting_request_keeps_its_place_in_line(backend_url: str, kind: Kind) -> None:
    with Backends(backend_url) as backends:
        backend = backends.open()
        for _attempt in range(ATTEMPTS):
            name = unique("retried-waiter")
            holders = [request(name, owner(), shape) for shape in kind.full]
            for each in holders:
                granted(backend, each)
            first = request(name, owner(), kind.first)
            later = request(name, owner(), kind.later)
            assert backend.try_grant(first) is None
            # from here on both waiters' entries must live: ``since`` is before the older one's
            # last refresh
            since = backend.clock.now()
            assert backend.try_grant(later) is None
            before = backend.inspect(name)
            retried = backend.try_grant(first)
            after = backend.inspect(name)
            # one grant goes: the first waiter may take its place, the later one may not
            assert backend.release(name, holders[0].owner) is True
            overtaking = backend.try_grant(later)
            taking = backend.try_grant(first)
            if not in_line(backend, since):
                continue  # a stall outlived the waiter leases: what follows proves nothing
            assert (before.waiters, len(before.holders)) == (2, len(holders))
            assert retried is None
            assert (after.waiters, len(after.holders)) == (2, len(holders)), "a second entry"
            assert overtaking is None, "the retry lost the first waiter its place in line"
            assert taking is not None, "the first waiter in line was not granted"
            assert (granted(backend, first)).token == taking.token
            state = backend.inspect(name)
            assert (state.waiters, len(state.holders)) == (1, len(holders))
            for each in (*holders[1:], first, later):
                backend.release(name, each.owner)
            free(backend, name)
            return
        pytest.fail(f"every one of {ATTEMPTS} tries stalled for longer than a waiter's lease")


def test_renew_never_revives_a_released_or_force_released_grant(backend_url: str) -> None:
    with Backends(backend_url) as backends:
        backend = backends.open()
        name = unique("renew-removed")
        released = request(name, owner())
        granted(backend, released)
        granted_ttl = backend.renew(name, released.owner, LONG_TTL)
        assert granted_ttl is not None
        assert 0 < granted_ttl <= LONG_TTL
        assert backend.release(name, released.owner) is True
        assert backend.renew(name, released.owner, LONG_TTL) is None
        assert backend.renew_all([Renewal(name, released.owner, LONG_TTL)], 5.0) == [None]
        free(backend, name)

        forced = request(name, owner())
        granted(backend, forced)
        assert backend.force_release(name, "conformance: renew after force") == 1
        assert backend.renew(name, forced.owner, LONG_TTL) is None
        assert backend.renew_all([Renewal(name, forced.owner, LONG_TTL)], 5.0) == [None]
        free(backend, name)
        # the name is free for anyone else
        taker = request(name, owner())
        granted(backend, taker)
        assert backend.renew(name, forced.owner, LONG_TTL) is None
        assert len((backend.inspect(name)).holders) == 1
        assert backend.release(name, taker.owner) is True


#: the bound a renewal is given while the store stalls: well under every backend's default
#: socket and session timeouts, which are what a renewal without a bound of its own waits
STALLED_TIMEOUT = 1.0
#: how far past its timeout "about timeout" lets a renewal return: the time to give up on
#: its connection and for a loaded machine to run the caller again, a second at most
ABOUT = 1.0


def test_renew_all_returns_within_its_timeout_when_the_server_stalls(
    backend_url: str, stall_servers: Callable[[], contextlib.AbstractContextManager[None]]
) -> None:
    """A renewal that outlived the leases it renews would keep the client's renewal worker
    from every other hold: whatever the store does, ``renew_all`` answers or raises
    ``BackendUnavailable`` within about its timeout."""
    with Backends(backend_url) as backends:
        backend = backends.open()
        asked = [request(unique("stalled"), owner()) for _ in range(3)]
        for each in asked:
            granted(backend, each)
        renewals = [Renewal(each.name, each.owner, LONG_TTL) for each in asked]
        # the store's connections are made, as a client's are when a renewal falls due
        assert len(backend.renew_all(renewals, 5.0)) == len(renewals)
        with stall_servers():
            began = time.monotonic()
            with contextlib.suppress(BackendUnavailable):
                renewed = backend.renew_all(renewals, STALLED_TIMEOUT)
                assert len(renewed) == len(renewals)
            took = time.monotonic() - began
        assert took < STALLED_TIMEOUT + ABOUT, f"renew_all took {took:.2f} s"


def test_renew_of_a_waiter_grants_nothing(backend_url: str) -> None:
    with Backends(backend_url) as backends:
        backend = backends.open()
        for _attempt in range(ATTEMPTS):
            name = unique("renew-waiter")
            holder, waiter = request(name, owner()), request(name, owner())
            granted(backend, holder)
            since = backend.clock.now()
            assert backend.try_grant(waiter) is None
            renewed = backend.renew(name, waiter.owner, LONG_TTL)
            state = backend.inspect(name)
            if not in_line(backend, since):
                continue
            assert renewed is None
            assert (state.waiters, len(state.holders)) == (1, 1)
            assert backend.release(name, holder.owner) is True
            assert backend.release(name, waiter.owner) is False
            free(backend, name)
            return
        pytest.fail(f"every one of {ATTEMPTS} tries stalled for longer than a waiter's lease")


@pytest.mark.tumbler_requires("lease_liveness")
def test_an_expired_grant_is_neither_renewed_nor_released(backend_url: str) -> None:
    with Backends(backend_url) as backends:
        backend = backends.open()
        ttl = backend.capabilities.min_ttl
        # Three names whose leases run out together: one is renewed late, one released late,
        # and the last, granted after them, is the one watched. Neither of the others is read
        # before its late call: a backend may remove expired entries when it reads them, and
        # then renew and release would find nothing whether they would revive it or not.
        renewed = request(unique("expired-renew"), owner(), ttl=ttl)
        released = request(unique("expired-release"), owner(), ttl=ttl)
        watched = request(unique("expired-watched"), owner(), ttl=ttl)
        grants = [granted(backend, each) for each in (renewed, released)]
        since = backend.clock.now()
        last = granted(backend, watched)
        assert all(grant.granted_ttl <= last.granted_ttl for grant in grants)

        def expired() -> LockState | None:
            state = backend.inspect(watched.name)
            return state if not state.holders else None

        backends.until(backend, expired, since, overdue(last.granted_ttl), "the lease ran out")
        assert backend.renew_all([Renewal(renewed.name, renewed.owner, LONG_TTL)], 5.0) == [None]
        assert backend.renew(renewed.name, renewed.owner, LONG_TTL) is None
        assert backend.release(released.name, released.owner) is False
        for each, grant in zip((renewed, released), grants, strict=True):
            free(backend, each.name)  # not revived
            taker = request(each.name, owner())
            taken = granted(backend, taker)
            assert taken.token > grant.token
            assert backend.release(each.name, each.owner) is False
            assert backend.release(each.name, taker.owner) is True


def test_release_returns_true_only_for_a_live_grant(backend_url: str) -> None:
    with Backends(backend_url) as backends:
        backend = backends.open()
        name = unique("release")
        mine = request(name, owner())
        granted(backend, mine)
        assert backend.release(name, owner()) is False  # an unknown owner
        assert len((backend.inspect(name)).holders) == 1
        assert backend.release(name, mine.owner) is True
        assert backend.release(name, mine.owner) is False  # released already
        free(backend, name)
        assert backend.release(unique("never-used"), owner()) is False


def test_releasing_a_waiter_removes_its_entry_and_returns_false(backend_url: str) -> None:
    with Backends(backend_url) as backends:
        backend = backends.open()
        for _attempt in range(ATTEMPTS):
            name = unique("release-waiter")
            holder, waiter = request(name, owner()), request(name, owner())
            granted(backend, holder)
            since = backend.clock.now()
            assert backend.try_grant(waiter) is None
            waiting = backend.inspect(name)
            withdrawn = backend.release(name, waiter.owner)
            left = backend.inspect(name)
            if not in_line(backend, since):
                continue
            assert (waiting.waiters, len(waiting.holders)) == (1, 1)
            assert withdrawn is False
            assert (left.waiters, len(left.holders)) == (0, 1)
            assert backend.release(name, holder.owner) is True
            free(backend, name)
            return
        pytest.fail(f"every one of {ATTEMPTS} tries stalled for longer than a waiter's lease")


@pytest.mark.tumbler_requires("lease_liveness")
def test_a_waiter_that_stops_refreshing_drops_out_of_line(backend_url: str) -> None:
    with Backends(backend_url) as backends:
        backend = backends.open()
        waiter_ttl = backend.capabilities.waiter_ttl
        name = unique("waiter-lease")
        holder = request(name, owner())
        granted(backend, holder)
        vanished, behind = request(name, owner()), request(name, owner())
        since = backend.clock.now()
        assert backend.try_grant(vanished) is None  # and never asks again
        assert backend.try_grant(behind) is None
        assert backend.release(name, holder.owner) is True
        overtaking = backend.try_grant(behind)
        if in_line(backend, since):
            assert overtaking is None, "a fair request overtook a live waiter"
        # the live waiter keeps asking (refreshing its own entry) until the other's runs out
        grant = backends.until(
            backend,
            lambda: backend.try_grant(behind),
            since,
            overdue(waiter_ttl),
            "the waiter that stopped refreshing still blocks the line",
        )
        state = backend.inspect(name)
        assert [holder.token for holder in state.holders] == [grant.token]
        assert state.waiters == 0
        assert backend.release(name, vanished.owner) is False
        assert backend.release(name, behind.owner) is True


@pytest.mark.tumbler_requires("session_liveness")
def test_a_waiter_whose_session_closes_drops_out_of_line(backend_url: str) -> None:
    with Backends(backend_url) as backends:
        backend, theirs = backends.open(), backends.open()
        name = unique("waiter-session")
        holder = request(name, owner())
        granted(backend, holder)
        vanished, behind = request(name, owner()), request(name, owner())
        assert theirs.try_grant(vanished) is None
        assert backend.try_grant(behind) is None
        assert (backend.inspect(name)).waiters == 2
        assert backend.release(name, holder.owner) is True
        # its session lives: its entry keeps its place however long the case takes
        assert backend.try_grant(behind) is None, "a fair request overtook a live waiter"
        since = backend.clock.now()
        backends.close(theirs)
        grant = backends.until(
            backend,
            lambda: backend.try_grant(behind),
            since,
            backend.capabilities.waiter_ttl,
            "the waiter whose session closed still blocks the line",
        )
        state = backend.inspect(name)
        assert [holder.token for holder in state.holders] == [grant.token]
        assert state.waiters == 0
        assert backend.release(name, behind.owner) is True


def test_fencing_tokens_strictly_increase_across_owners_and_cleanup(
    backend_url: str,
) -> None:
    with Backends(backend_url) as backends:
        one, other = backends.open(), backends.open()
        name = unique("fencing")
        tokens: list[int] = []

        def take(backend: Backend, shape: Shape = EXCLUSIVE) -> GrantRequest:
            asked = request(name, owner(), shape)
            tokens.append((granted(backend, asked)).token)
            return asked

        # each step leaves the name without any entry: the counter must not start again
        first = take(one)
        assert one.release(name, first.owner) is True
        free(other, name)
        take(other)
        assert one.force_release(name, "conformance: fencing") == 1
        free(one, name)
        # each connection releases its own grants (a session-based backend knows only those)
        permits = [(one, take(one, PERMIT)), (other, take(other, PERMIT))]
        for backend, each in permits:
            assert backend.release(name, each.owner) is True
        free(one, name)
        reader = take(other, READ)
        assert other.release(name, reader.owner) is True
        free(one, name)
        # a waiter granted later gets a token of its own turn
        holder = take(one)
        waiter = request(name, owner())
        assert other.try_grant(waiter) is None
        assert one.release(name, holder.owner) is True
        tokens.append((granted(other, waiter)).token)
        assert other.release(name, waiter.owner) is True
        free(one, name)
        assert tokens == sorted(set(tokens)), tokens
