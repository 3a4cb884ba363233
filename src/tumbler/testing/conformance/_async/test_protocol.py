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

from tumbler.backends.contract import AsyncBackend, Grant, GrantRequest, LockState, Renewal
from tumbler.errors import BackendUnavailable

from ..protocol import AsyncBackends

pytestmark = [
    pytest.mark.tumbler_connection,
    pytest.mark.asyncio,  # async-only
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


def in_line(backend: AsyncBackend, since: float) -> bool:
    """Whether a waiter entry refreshed by a call sent at ``since`` surely still lives."""
    return backend.clock.now() - since < backend.capabilities.waiter_ttl


async def granted(backend: AsyncBackend, asked: GrantRequest) -> Grant:
    grant = await backend.try_grant(asked)
    assert grant is not None, f"{asked} was not granted"
    assert grant.owner == asked.owner
    assert grant.name == asked.name
    return grant


async def free(backend: AsyncBackend, name: str) -> LockState:
    state = await backend.inspect(name)
    assert state.holders == ()
    assert state.waiters == 0
    return state


@pytest.mark.parametrize("kind", KINDS, ids=[kind.id for kind in KINDS])
async def test_a_retried_grant_request_returns_the_same_grant(backend_url: str, kind: Kind) -> None:
    async with AsyncBackends(backend_url) as backends:
        backend = await backends.open()
        name = unique("retried-grant")
        # shared kinds are granted to two owners, so the retry meets another holder's entry
        asked = [request(name, owner(), kind.first) for _ in range(2 if kind.first.shared else 1)]
        grants = [await granted(backend, each) for each in asked]
        for each, grant in zip(asked, grants, strict=True):
            again = await granted(backend, each)
            assert again.token == grant.token
            state = await backend.inspect(name)
            assert len(state.holders) == len(asked), "a second entry"
            assert state.waiters == 0
        state = await backend.inspect(name)
        assert sorted(holder.token for holder in state.holders) == sorted(
            grant.token for grant in grants
        )
        for each in asked:
            assert await backend.release(name, each.owner) is True
        await free(backend, name)


@pytest.mark.parametrize("kind", KINDS, ids=[kind.id for kind in KINDS])
async def test_a_retried_waiting_request_keeps_its_place_in_line(
    backend_url: str, kind: Kind
) -> None:
    async with AsyncBackends(backend_url) as backends:
        backend = await backends.open()
        for _attempt in range(ATTEMPTS):
            name = unique("retried-waiter")
            holders = [request(name, owner(), shape) for shape in kind.full]
            for each in holders:
                await granted(backend, each)
            first = request(name, owner(), kind.first)
            later = request(name, owner(), kind.later)
            assert await backend.try_grant(first) is None
            # from here on both waiters' entries must live: ``since`` is before the older one's
            # last refresh
            since = backend.clock.now()
            assert await backend.try_grant(later) is None
            before = await backend.inspect(name)
            retried = await backend.try_grant(first)
            after = await backend.inspect(name)
            # one grant goes: the first waiter may take its place, the later one may not
            assert await backend.release(name, holders[0].owner) is True
            overtaking = await backend.try_grant(later)
            taking = await backend.try_grant(first)
            if not in_line(backend, since):
                continue  # a stall outlived the waiter leases: what follows proves nothing
            assert (before.waiters, len(before.holders)) == (2, len(holders))
            assert retried is None
            assert (after.waiters, len(after.holders)) == (2, len(holders)), "a second entry"
            assert overtaking is None, "the retry lost the first waiter its place in line"
            assert taking is not None, "the first waiter in line was not granted"
            assert (await granted(backend, first)).token == taking.token
            state = await backend.inspect(name)
            assert (state.waiters, len(state.holders)) == (1, len(holders))
            for each in (*holders[1:], first, later):
                await backend.release(name, each.owner)
            await free(backend, name)
            return
        pytest.fail(f"every one of {ATTEMPTS} tries stalled for longer than a waiter's lease")


async def test_renew_never_revives_a_released_or_force_released_grant(backend_url: str) -> None:
    async with AsyncBackends(backend_url) as backends:
        backend = await backends.open()
        name = unique("renew-removed")
        released = request(name, owner())
        await granted(backend, released)
        granted_ttl = await backend.renew(name, released.owner, LONG_TTL)
        assert granted_ttl is not None
        assert 0 < granted_ttl <= LONG_TTL
        assert await backend.release(name, released.owner) is True
        assert await backend.renew(name, released.owner, LONG_TTL) is None
        assert await backend.renew_all([Renewal(name, released.owner, LONG_TTL)], 5.0) == [None]
        await free(backend, name)

        forced = request(name, owner())
        await granted(backend, forced)
        assert await backend.force_release(name, "conformance: renew after force") == 1
        assert await backend.renew(name, forced.owner, LONG_TTL) is None
        assert await backend.renew_all([Renewal(name, forced.owner, LONG_TTL)], 5.0) == [None]
        await free(backend, name)
        # the name is free for anyone else
        taker = request(name, owner())
        await granted(backend, taker)
        assert await backend.renew(name, forced.owner, LONG_TTL) is None
        assert len((await backend.inspect(name)).holders) == 1
        assert await backend.release(name, taker.owner) is True


#: the bound a renewal is given while the store stalls: well under every backend's default
#: socket and session timeouts, which are what a renewal without a bound of its own waits
STALLED_TIMEOUT = 1.0
#: how far past its timeout "about timeout" lets a renewal return: the time to give up on
#: its connection and for a loaded machine to run the caller again, a second at most
ABOUT = 1.0


async def test_renew_all_returns_within_its_timeout_when_the_server_stalls(
    backend_url: str, stall_servers: Callable[[], contextlib.AbstractContextManager[None]]
) -> None:
    """A renewal that outlived the leases it renews would keep the client's renewal worker
    from every other hold: whatever the store does, ``renew_all`` answers or raises
    ``BackendUnavailable`` within about its timeout."""
    async with AsyncBackends(backend_url) as backends:
        backend = await backends.open()
        asked = [request(unique("stalled"), owner()) for _ in range(3)]
        for each in asked:
            await granted(backend, each)
        renewals = [Renewal(each.name, each.owner, LONG_TTL) for each in asked]
        # the store's connections are made, as a client's are when a renewal falls due
        assert len(await backend.renew_all(renewals, 5.0)) == len(renewals)
        with stall_servers():
            began = time.monotonic()
            with contextlib.suppress(BackendUnavailable):
                renewed = await backend.renew_all(renewals, STALLED_TIMEOUT)
                assert len(renewed) == len(renewals)
            took = time.monotonic() - began
        assert took < STALLED_TIMEOUT + ABOUT, f"renew_all took {took:.2f} s"


async def test_renew_of_a_waiter_grants_nothing(backend_url: str) -> None:
    async with AsyncBackends(backend_url) as backends:
        backend = await backends.open()
        for _attempt in range(ATTEMPTS):
            name = unique("renew-waiter")
            holder, waiter = request(name, owner()), request(name, owner())
            await granted(backend, holder)
            since = backend.clock.now()
            assert await backend.try_grant(waiter) is None
            renewed = await backend.renew(name, waiter.owner, LONG_TTL)
            state = await backend.inspect(name)
            if not in_line(backend, since):
                continue
            assert renewed is None
            assert (state.waiters, len(state.holders)) == (1, 1)
            assert await backend.release(name, holder.owner) is True
            assert await backend.release(name, waiter.owner) is False
            await free(backend, name)
            return
        pytest.fail(f"every one of {ATTEMPTS} tries stalled for longer than a waiter's lease")


@pytest.mark.tumbler_requires("lease_liveness")
async def test_an_expired_grant_is_neither_renewed_nor_released(backend_url: str) -> None:
    async with AsyncBackends(backend_url) as backends:
        backend = await backends.open()
        ttl = backend.capabilities.min_ttl
        # Three names whose leases run out together: one is renewed late, one released late,
        # and the last, granted after them, is the one watched. Neither of the others is read
        # before its late call: a backend may remove expired entries when it reads them, and
        # then renew and release would find nothing whether they would revive it or not.
        renewed = request(unique("expired-renew"), owner(), ttl=ttl)
        released = request(unique("expired-release"), owner(), ttl=ttl)
        watched = request(unique("expired-watched"), owner(), ttl=ttl)
        grants = [await granted(backend, each) for each in (renewed, released)]
        since = backend.clock.now()
        last = await granted(backend, watched)
        assert all(grant.granted_ttl <= last.granted_ttl for grant in grants)

        async def expired() -> LockState | None:
            state = await backend.inspect(watched.name)
            return state if not state.holders else None

        await backends.until(
            backend, expired, since, overdue(last.granted_ttl), "the lease ran out"
        )
        assert await backend.renew_all([Renewal(renewed.name, renewed.owner, LONG_TTL)], 5.0) == [
            None
        ]
        assert await backend.renew(renewed.name, renewed.owner, LONG_TTL) is None
        assert await backend.release(released.name, released.owner) is False
        for each, grant in zip((renewed, released), grants, strict=True):
            await free(backend, each.name)  # not revived
            taker = request(each.name, owner())
            taken = await granted(backend, taker)
            assert taken.token > grant.token
            assert await backend.release(each.name, each.owner) is False
            assert await backend.release(each.name, taker.owner) is True


async def test_release_returns_true_only_for_a_live_grant(backend_url: str) -> None:
    async with AsyncBackends(backend_url) as backends:
        backend = await backends.open()
        name = unique("release")
        mine = request(name, owner())
        await granted(backend, mine)
        assert await backend.release(name, owner()) is False  # an unknown owner
        assert len((await backend.inspect(name)).holders) == 1
        assert await backend.release(name, mine.owner) is True
        assert await backend.release(name, mine.owner) is False  # released already
        await free(backend, name)
        assert await backend.release(unique("never-used"), owner()) is False


async def test_releasing_a_waiter_removes_its_entry_and_returns_false(backend_url: str) -> None:
    async with AsyncBackends(backend_url) as backends:
        backend = await backends.open()
        for _attempt in range(ATTEMPTS):
            name = unique("release-waiter")
            holder, waiter = request(name, owner()), request(name, owner())
            await granted(backend, holder)
            since = backend.clock.now()
            assert await backend.try_grant(waiter) is None
            waiting = await backend.inspect(name)
            withdrawn = await backend.release(name, waiter.owner)
            left = await backend.inspect(name)
            if not in_line(backend, since):
                continue
            assert (waiting.waiters, len(waiting.holders)) == (1, 1)
            assert withdrawn is False
            assert (left.waiters, len(left.holders)) == (0, 1)
            assert await backend.release(name, holder.owner) is True
            await free(backend, name)
            return
        pytest.fail(f"every one of {ATTEMPTS} tries stalled for longer than a waiter's lease")


@pytest.mark.tumbler_requires("lease_liveness")
async def test_a_waiter_that_stops_refreshing_drops_out_of_line(backend_url: str) -> None:
    async with AsyncBackends(backend_url) as backends:
        backend = await backends.open()
        waiter_ttl = backend.capabilities.waiter_ttl
        name = unique("waiter-lease")
        holder = request(name, owner())
        await granted(backend, holder)
        vanished, behind = request(name, owner()), request(name, owner())
        since = backend.clock.now()
        assert await backend.try_grant(vanished) is None  # and never asks again
        assert await backend.try_grant(behind) is None
        assert await backend.release(name, holder.owner) is True
        overtaking = await backend.try_grant(behind)
        if in_line(backend, since):
            assert overtaking is None, "a fair request overtook a live waiter"
        # the live waiter keeps asking (refreshing its own entry) until the other's runs out
        grant = await backends.until(
            backend,
            lambda: backend.try_grant(behind),
            since,
            overdue(waiter_ttl),
            "the waiter that stopped refreshing still blocks the line",
        )
        state = await backend.inspect(name)
        assert [holder.token for holder in state.holders] == [grant.token]
        assert state.waiters == 0
        assert await backend.release(name, vanished.owner) is False
        assert await backend.release(name, behind.owner) is True


@pytest.mark.tumbler_requires("session_liveness")
async def test_a_waiter_whose_session_closes_drops_out_of_line(backend_url: str) -> None:
    async with AsyncBackends(backend_url) as backends:
        backend, theirs = await backends.open(), await backends.open()
        name = unique("waiter-session")
        holder = request(name, owner())
        await granted(backend, holder)
        vanished, behind = request(name, owner()), request(name, owner())
        assert await theirs.try_grant(vanished) is None
        assert await backend.try_grant(behind) is None
        assert (await backend.inspect(name)).waiters == 2
        assert await backend.release(name, holder.owner) is True
        # its session lives: its entry keeps its place however long the case takes
        assert await backend.try_grant(behind) is None, "a fair request overtook a live waiter"
        since = backend.clock.now()
        await backends.close(theirs)
        grant = await backends.until(
            backend,
            lambda: backend.try_grant(behind),
            since,
            backend.capabilities.waiter_ttl,
            "the waiter whose session closed still blocks the line",
        )
        state = await backend.inspect(name)
        assert [holder.token for holder in state.holders] == [grant.token]
        assert state.waiters == 0
        assert await backend.release(name, behind.owner) is True


async def test_fencing_tokens_strictly_increase_across_owners_and_cleanup(
    backend_url: str,
) -> None:
    async with AsyncBackends(backend_url) as backends:
        one, other = await backends.open(), await backends.open()
        name = unique("fencing")
        tokens: list[int] = []

        async def take(backend: AsyncBackend, shape: Shape = EXCLUSIVE) -> GrantRequest:
            asked = request(name, owner(), shape)
            tokens.append((await granted(backend, asked)).token)
            return asked

        # each step leaves the name without any entry: the counter must not start again
        first = await take(one)
        assert await one.release(name, first.owner) is True
        await free(other, name)
        await take(other)
        assert await one.force_release(name, "conformance: fencing") == 1
        await free(one, name)
        # each connection releases its own grants (a session-based backend knows only those)
        permits = [(one, await take(one, PERMIT)), (other, await take(other, PERMIT))]
        for backend, each in permits:
            assert await backend.release(name, each.owner) is True
        await free(one, name)
        reader = await take(other, READ)
        assert await other.release(name, reader.owner) is True
        await free(one, name)
        # a waiter granted later gets a token of its own turn
        holder = await take(one)
        waiter = request(name, owner())
        assert await other.try_grant(waiter) is None
        assert await one.release(name, holder.owner) is True
        tokens.append((await granted(other, waiter)).token)
        assert await other.release(name, waiter.owner) is True
        await free(one, name)
        assert tokens == sorted(set(tokens)), tokens
