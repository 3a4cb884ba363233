"""The lock contract, as every backend must keep it (asyncio source of the blocking twin).

Each case runs on every target the conformance plugin gives (:mod:`.plugin`), in both
flavours: this file for asyncio, ``_sync/test_locks.py`` (generated from it) for threads.
"""

from __future__ import annotations

import gc
import inspect
import time
import unicodedata

import pytest

from tumbler import (
    AcquireTimeout,
    AlreadyHeld,
    ClientClosed,
    InvalidArgument,
    InvalidTTL,
    LockLost,
    NotHeld,
    PermitsMismatch,
    TooManyWaiters,
)
from tumbler._async.client import AsyncLocks
from tumbler._async.hold import AsyncHold
from tumbler._async.primitives import AsyncLock, AsyncSemaphore

from ..bad_input import (
    REFUSED,
    VALID,
    Case,
    Group,
    Subject,
    case_id,
    group_id,
    no_backend_call,
)
from ..compat import PATIENCE, AsyncConnect, abackground, aeventually, agather

pytestmark = pytest.mark.asyncio  # async-only

# a short lease, for cases about expiry: long enough for a loaded 2-core machine (two test
# workers, their servers and their child processes) to renew in time
SHORT_TTL = 1.0
# the lease of a hold that must hear of a force-release from its next renewal (every third of
# the lease): with a second, a renewal held up on a loaded machine (the store busy with the
# force-release itself, a starved renewal thread) lets the lease run out first, and the hold
# is lost without learning who forced it
FORCED_TTL = 3.0


def assert_cut_to(hold: AsyncHold, expected: float, connected: float) -> None:
    """``hold`` was granted ``expected``, or, where grants ride a lease the client took
    when it connected, what was left of it: never more, and never less than
    ``expected`` less the time since ``connected`` (before the client was made)."""
    assert expected - (time.monotonic() - connected) <= hold.ttl <= expected


@pytest.mark.tumbler_connection
async def test_acquire_gives_a_hold_with_a_token(aconnect: AsyncConnect) -> None:
    locks = await aconnect()
    lock = locks.lock("orders:42", ttl=30)
    assert not await lock.locked()
    async with lock as hold:
        assert hold.held
        assert not hold.lost
        assert isinstance(hold.token, int)
        assert hold.name == "orders:42"
        assert 0 < hold.expires_in <= 30
        assert lock.hold is hold
        assert await lock.locked()
        state = await locks.status("orders:42")
        assert [h.token for h in state.holders] == [hold.token]
        assert state.waiters == 0
    assert not hold.held
    assert lock.hold is None
    assert not await lock.locked()
    assert (await locks.status("orders:42")).holders == ()


@pytest.mark.tumbler_connection
async def test_mutual_exclusion_between_clients(aconnect: AsyncConnect) -> None:
    first, second = await aconnect(), await aconnect()
    a = first.lock("resource")
    b = second.lock("resource")
    assert await a.acquire(timeout=0)
    assert not await b.acquire(blocking=False)
    assert not await b.acquire(timeout=0)
    assert (await second.status("resource")).waiters == 0
    await a.release()
    assert await b.acquire(blocking=False)
    await b.release()


async def test_fencing_tokens_strictly_increase_across_holders_and_cleanup(
    aconnect: AsyncConnect,
) -> None:
    first, second = await aconnect(), await aconnect()
    tokens = []
    for locks in (first, second, first, second):
        async with locks.lock("fenced") as hold:
            tokens.append(hold.token)
        # every entry of the name is gone between grants; other names come and go
        async with locks.lock("other"):
            pass
    async with second.semaphore("fenced", 2) as hold:
        tokens.append(hold.token)
    assert tokens == sorted(tokens)
    assert len(set(tokens)) == len(tokens)


async def test_timeout_is_honoured_and_the_waiter_leaves_nothing_behind(
    aconnect: AsyncConnect,
) -> None:
    holder, waiter = await aconnect(), await aconnect()
    assert await holder.lock("busy").acquire()
    started = time.monotonic()
    assert not await waiter.lock("busy").acquire(timeout=0.3)
    assert time.monotonic() - started >= 0.3
    state = await waiter.status("busy")
    assert state.waiters == 0
    assert len(state.holders) == 1


async def test_with_raises_acquire_timeout(aconnect: AsyncConnect) -> None:
    holder, waiter = await aconnect(), await aconnect()
    assert await holder.lock("busy").acquire()
    with pytest.raises(AcquireTimeout) as caught:
        async with waiter.lock("busy", timeout=0.1):
            pytest.fail("entered a lock that is held elsewhere")
    assert isinstance(caught.value, TimeoutError)
    assert caught.value.lock_name == "busy"


@pytest.mark.tumbler_connection
async def test_a_waiter_gets_the_lock_when_it_is_released(aconnect: AsyncConnect) -> None:
    holder, waiter = await aconnect(), await aconnect()
    held = holder.lock("handoff")
    assert await held.acquire()
    wanted = waiter.lock("handoff")

    async def take() -> AsyncHold | None:
        assert await wanted.acquire(timeout=20)
        return wanted.hold  # holds are per task/thread: read it where it was acquired

    pending = abackground(take)

    async def waiting() -> bool:
        return (await holder.status("handoff")).waiters == 1

    await aeventually(waiting, "the waiter is in line")
    assert held.hold is not None
    first_token = held.hold.token
    await held.release()
    taken = await pending.result()
    assert taken.held
    assert taken.token > first_token
    assert wanted.hold is None


async def test_release_is_owner_only(aconnect: AsyncConnect) -> None:
    first, second = await aconnect(), await aconnect()
    mine = first.lock("owned")
    theirs = second.lock("owned")
    assert await mine.acquire()
    with pytest.raises(NotHeld):
        await theirs.release()
    hold = mine.hold
    assert hold is not None
    assert hold.held
    await mine.release()
    with pytest.raises(NotHeld):
        await mine.release()
    with pytest.raises(NotHeld):
        await hold.release()


async def test_one_lock_object_shared_by_two_tasks_or_threads(aconnect: AsyncConnect) -> None:
    locks = await aconnect()
    lock = locks.lock("shared-object")
    assert await lock.acquire()

    async def release_from_elsewhere() -> str:
        try:
            await lock.release()
        except NotHeld:
            return "refused"
        return "released"

    assert await agather(release_from_elsewhere) == ["refused"]
    # the hold itself is the capability: whoever has it may release it
    hold = lock.hold
    assert hold is not None
    assert hold.held

    async def release_hold() -> None:
        await hold.release()

    await agather(release_hold)
    assert not await lock.locked()
    assert lock.hold is None


async def test_lock_is_not_reentrant(aconnect: AsyncConnect) -> None:
    locks = await aconnect()
    lock = locks.lock("plain")
    async with lock:
        with pytest.raises(AlreadyHeld):
            await lock.acquire()
        assert lock.hold is not None
        assert lock.hold.held


async def test_rlock_is_reentrant_per_owner(aconnect: AsyncConnect) -> None:
    first, second = await aconnect(), await aconnect()
    rlock = first.rlock("again")
    async with rlock as outer:
        async with rlock as inner:
            assert inner is outer
            assert await rlock.acquire()
            await rlock.release()
        assert outer.held
        assert not await second.lock("again").acquire(blocking=False)
    assert not outer.held
    assert await second.lock("again").acquire(blocking=False)


async def test_semaphore_permits_are_never_exceeded(aconnect: AsyncConnect) -> None:
    first, second = await aconnect(), await aconnect()
    sem_a = first.semaphore("pool", 3)
    sem_b = second.semaphore("pool", 3)
    assert await sem_a.acquire(blocking=False)
    assert await sem_a.acquire(blocking=False)
    assert await sem_b.acquire(blocking=False)
    assert not await sem_b.acquire(blocking=False)
    assert await sem_b.locked()
    state = await first.status("pool")
    assert len(state.holders) == 3
    assert state.limit == 3
    tokens = [h.token for h in state.holders]
    assert len(set(tokens)) == 3
    await sem_a.release()
    assert await sem_b.acquire(blocking=False)
    with pytest.raises(PermitsMismatch):
        await second.semaphore("pool", 5).acquire(blocking=False)


@pytest.mark.tumbler_connection
async def test_semaphore_waiters_get_freed_permits(aconnect: AsyncConnect) -> None:
    first, second = await aconnect(), await aconnect()
    holder = first.semaphore("pool2", 1)
    assert await holder.acquire()
    waiter = second.semaphore("pool2", 1)
    pending = abackground(lambda: waiter.acquire(timeout=20))

    async def waiting() -> bool:
        return (await first.status("pool2")).waiters == 1

    await aeventually(waiting, "the waiter is in line")
    await holder.release()
    assert await pending.result() is True


async def test_read_write_exclusion(aconnect: AsyncConnect) -> None:
    first, second, third = await aconnect(), await aconnect(), await aconnect()
    reader_a = first.rwlock("doc").read()
    reader_b = second.rwlock("doc").read()
    writer = third.rwlock("doc").write()
    assert await reader_a.acquire(blocking=False)
    assert await reader_b.acquire(blocking=False)
    assert not await writer.acquire(blocking=False)
    assert await writer.locked()
    await reader_a.release()
    await reader_b.release()
    assert await writer.acquire(blocking=False)
    assert not await reader_a.acquire(blocking=False)
    # the write side is the mutex of that name
    assert not await first.lock("doc").acquire(blocking=False)
    await writer.release()
    assert await reader_a.acquire(blocking=False)


async def test_a_read_lock_and_a_semaphore_of_one_name_conflict(aconnect: AsyncConnect) -> None:
    locks = await aconnect()
    assert await locks.rwlock("mixed").read().acquire(blocking=False)
    with pytest.raises(PermitsMismatch):
        await locks.semaphore("mixed", 2).acquire(blocking=False)


@pytest.mark.parametrize("kind", ["lock", "semaphore", "write"])
async def test_fair_waiters_are_granted_in_arrival_order(aconnect: AsyncConnect, kind: str) -> None:
    holder_client = await aconnect()

    def make(locks: AsyncLocks) -> AsyncLock | AsyncSemaphore:
        if kind == "semaphore":
            return locks.semaphore("queue", 1, fair=True)
        if kind == "write":
            return locks.rwlock("queue", fair=True).write()
        return locks.lock("queue", fair=True)

    holder = make(holder_client)
    assert await holder.acquire()
    order: list[int] = []
    pending = []
    for index in range(4):
        client = await aconnect()
        lock = make(client)

        async def wait_then_record(
            lock: AsyncLock | AsyncSemaphore = lock, index: int = index
        ) -> None:
            assert await lock.acquire(timeout=20)
            order.append(index)
            await lock.release()

        pending.append(abackground(wait_then_record))

        async def queued(count: int = index + 1) -> bool:
            return (await holder_client.status("queue")).waiters == count

        await aeventually(queued, f"{index + 1} waiters are in line")
    await holder.release()
    for call in pending:
        await call.result()
    assert order == [0, 1, 2, 3]


@pytest.mark.tumbler_connection
async def test_an_unrenewed_lease_expires_and_the_holder_learns(aconnect: AsyncConnect) -> None:
    first, second = await aconnect(), await aconnect()
    lost: list[object] = []
    lock = first.lock("lease", ttl=SHORT_TTL, renew=False)
    assert await lock.acquire()
    hold = lock.hold
    assert hold is not None
    hold.on_lost(lost.append)
    assert await hold.wait_lost(timeout=20)
    assert hold.lost
    assert not hold.held
    assert hold.lost_reason is not None
    assert "lease" in hold.lost_reason
    assert lost == [hold]
    other = second.lock("lease")
    assert await other.acquire(timeout=20)
    assert other.hold is not None
    assert other.hold.token > hold.token
    with pytest.raises(LockLost):
        await lock.release()


async def test_wait_lost_returns_after_the_on_lost_callbacks_ran(aconnect: AsyncConnect) -> None:
    holder, operator = await aconnect(), await aconnect()
    lock = holder.lock("told-first", ttl=SHORT_TTL)
    assert await lock.acquire()
    hold = lock.hold
    assert hold is not None
    told: list[str] = []

    def slow(_hold: object) -> None:
        time.sleep(0.3)  # slow work in a callback, as the holder's wait_lost() wakes
        told.append("slow")

    hold.on_lost(slow)
    hold.on_lost(lambda _hold: told.append("quick"))
    # a renewed hold has no deadline to run out at: its renewal worker finds it lost
    assert await operator.force_release("told-first") == 1
    assert await hold.wait_lost(timeout=20)
    assert told == ["slow", "quick"]
    with pytest.raises(LockLost):
        await lock.release()


async def test_wait_lost_returns_false_once_the_hold_is_released(aconnect: AsyncConnect) -> None:
    locks = await aconnect()
    lock = locks.lock("watched")
    assert await lock.acquire()
    hold = lock.hold
    assert hold is not None
    watching = abackground(lambda: hold.wait_lost())  # no timeout: only the release ends it
    await lock.release()
    assert await watching.result() is False
    assert not hold.lost


@pytest.mark.tumbler_connection
async def test_renewal_keeps_the_lock_past_its_ttl(aconnect: AsyncConnect) -> None:
    first, second = await aconnect(), await aconnect()
    lock = first.lock("renewed", ttl=SHORT_TTL)
    assert await lock.acquire()
    hold = lock.hold
    assert hold is not None
    # two lease lengths pass (six renewals due): without them it would be lost after one
    assert not await hold.wait_lost(timeout=2 * SHORT_TTL)
    assert hold.held
    assert not await second.lock("renewed").acquire(blocking=False)
    await lock.release()


async def test_leaving_with_after_the_lease_was_lost_raises_lock_lost(
    aconnect: AsyncConnect,
) -> None:
    locks = await aconnect()
    with pytest.raises(LockLost):
        async with locks.lock("lost-in-with", ttl=SHORT_TTL, renew=False) as hold:
            assert await hold.wait_lost(timeout=20)


async def test_lock_lost_does_not_hide_the_exception_on_its_way_out(aconnect: AsyncConnect) -> None:
    locks = await aconnect()
    with pytest.raises(KeyError):  # noqa: PT012 (the with block is the scenario)
        async with locks.lock("lost-and-failed", ttl=SHORT_TTL, renew=False) as hold:
            assert await hold.wait_lost(timeout=20)
            raise KeyError("the caller's own error")


@pytest.mark.tumbler_connection
async def test_force_release_takes_the_lock_from_its_holder(aconnect: AsyncConnect) -> None:
    holder, operator, next_client = await aconnect(), await aconnect(), await aconnect()
    lock = holder.lock("stuck", ttl=FORCED_TTL)
    assert await lock.acquire()
    hold = lock.hold
    assert hold is not None
    assert await operator.force_release("stuck") == 1
    assert await next_client.lock("stuck").acquire(blocking=False)
    assert await hold.wait_lost(timeout=20)
    assert hold.lost_reason is not None
    assert "force-released" in hold.lost_reason
    with pytest.raises(LockLost):
        await lock.release()


async def test_force_release_counts_only_live_grants(aconnect: AsyncConnect) -> None:
    holder, operator = await aconnect(), await aconnect()
    lock = holder.lock("ran-out", ttl=SHORT_TTL, renew=False)
    assert await lock.acquire()
    assert lock.hold is not None
    assert await lock.hold.wait_lost(timeout=20)

    async def expired_on_the_backend() -> bool:
        # the client gives up a little before the backend's lease ends
        return (await operator.status("ran-out")).holders == ()

    await aeventually(expired_on_the_backend, "the backend's lease has run out")
    assert await operator.force_release("ran-out") == 0


async def test_extend_sets_a_new_lease(aconnect: AsyncConnect) -> None:
    locks = await aconnect()
    lock = locks.lock("extended", ttl=SHORT_TTL, renew=False)
    assert await lock.acquire()
    hold = lock.hold
    assert hold is not None
    await hold.extend(30)
    # a session-based backend grants at most its session timeout
    longest = locks.capabilities.max_ttl or 30
    assert hold.ttl == min(30, longest)
    assert hold.expires_in > min(25, longest * 0.8)
    # past the original lease, the extension holds; well before its end (3 s on etcd's test
    # target, whose lease is the longest), so that the release below gets there in time
    assert not await hold.wait_lost(timeout=1.5 * SHORT_TTL)
    assert hold.held
    await lock.release()


async def test_a_lease_is_what_was_asked_cut_to_the_longest_granted(
    aconnect: AsyncConnect,
) -> None:
    # Redlock's safety rests on the cut: a master restarted empty stays out for max_ttl
    connected = time.monotonic()
    locks = await aconnect()
    longest = locks.capabilities.max_ttl
    asked = 4 * longest if longest is not None else 40.0
    expected = min(asked, longest or asked)
    lock = locks.lock("longest-lease", ttl=asked, renew=False)
    assert lock.ttl == asked  # what was asked for; the grant is cut
    async with lock as hold:
        assert_cut_to(hold, expected, connected)
        for extension in (None, asked):
            await hold.extend(extension)
            assert hold.ttl == expected
            (holder,) = (await locks.status("longest-lease")).holders
            if not holder.session:
                assert expected * 0.5 < holder.expires_in <= expected


async def test_synchronized_serialises_calls_and_allows_recursion(aconnect: AsyncConnect) -> None:
    locks = await aconnect()
    other = await aconnect()
    calls: list[int] = []

    @locks.synchronized("job", ttl=30)
    async def job(depth: int) -> int:
        assert await other.lock("job").locked()
        calls.append(depth)
        if depth:
            return await job(depth - 1) + 1
        return 0

    assert await job(2) == 2
    assert calls == [2, 1, 0]
    assert not await other.lock("job").locked()


@pytest.mark.tumbler_connection
async def test_close_releases_what_is_held_and_refuses_further_use(aconnect: AsyncConnect) -> None:
    first, second = await aconnect(), await aconnect()
    lock = first.lock("closing")
    assert await lock.acquire()
    hold = lock.hold
    assert hold is not None
    await first.close()
    assert hold.lost
    assert await second.lock("closing").acquire(blocking=False)
    with pytest.raises(ClientClosed):
        await first.lock("closing").acquire()


@pytest.mark.tumbler_connection
async def test_close_ends_a_wait_with_client_closed_and_the_waiter_leaves_the_line(
    aconnect: AsyncConnect,
) -> None:
    holder, closing = await aconnect(), await aconnect()
    held = holder.lock("closed-while-waiting")
    assert await held.acquire()
    # no timeout: only close() can end this wait (on a manual clock nothing else would)
    pending = abackground(lambda: closing.lock("closed-while-waiting").acquire(timeout=None))

    async def waiting() -> bool:
        return (await holder.status("closed-while-waiting")).waiters == 1

    await aeventually(waiting, "the waiter is in line")
    await closing.close()
    with pytest.raises(ClientClosed):
        await pending.result()
    state = await holder.status("closed-while-waiting")
    assert state.waiters == 0
    assert held.hold is not None
    assert [h.token for h in state.holders] == [held.hold.token]
    # nothing was granted to the closed client after all: the next in line gets it
    await held.release()
    assert await holder.lock("closed-while-waiting").acquire(timeout=0)


async def test_close_ends_the_waits_of_waiters_behind_another_of_their_client(
    aconnect: AsyncConnect,
) -> None:
    holder, closing = await aconnect(), await aconnect()
    held = holder.lock("closed-behind")
    assert await held.acquire()
    lock = closing.lock("closed-behind")
    # no timeout: only close() can end these waits; the first waits at the backend, the
    # others for their turn in the client's line
    pending = [abackground(lambda: lock.acquire(timeout=None)) for _ in range(3)]

    async def all_in_line() -> bool:
        # the client's line is the lock layer's own book (no backend shows it)
        return sum(len(line) for line in closing._lines.values()) == 3

    await aeventually(all_in_line, "the three waiters are in their client's line")
    await closing.close()
    for waiter in pending:
        with pytest.raises(ClientClosed):
            await waiter.result()
    assert (await holder.status("closed-behind")).waiters == 0
    await held.release()


async def test_leaving_with_after_close_raises_lock_lost_once(aconnect: AsyncConnect) -> None:
    locks = await aconnect()
    with pytest.raises(LockLost):  # noqa: PT012 (the with block is the scenario)
        async with locks.lock("closed-inside") as hold:
            await locks.close()
            assert hold.lost
            assert hold.lost_reason is not None
            assert "closed" in hold.lost_reason


# -- bad input: the table of tests/contract/test_bad_input.py -------------------------------


async def settled(result: object) -> object:
    """What a call of the table returns, awaited in asyncio (the blocking twin has it already)."""
    if inspect.isawaitable(result):
        return await result
    return result


@pytest.mark.tumbler_lock_layer
@pytest.mark.parametrize("group", REFUSED, ids=group_id)
async def test_bad_input_is_refused_and_leaves_nothing_behind(
    aconnect: AsyncConnect, group: Group
) -> None:
    locks, observer = await aconnect(), await aconnect()
    for case in group.cases:
        with case.named():
            await refused_and_nothing_left(locks, observer, aconnect, case)


async def refused_and_nothing_left(
    locks: AsyncLocks, observer: AsyncLocks, aconnect: AsyncConnect, case: Case
) -> None:
    held: AsyncLock | None = None
    if case.call.needs_hold:
        held = locks.lock("held", ttl=30)
        assert await held.acquire()
    hold = held.hold if held is not None else None
    granted = (hold.token, hold.ttl) if hold is not None else None
    with no_backend_call(locks), pytest.raises(case.error) as refused:
        await settled(case.call.run(Subject(locks, hold, aconnect), case.value))
    case.check_refusal(refused.value)
    if held is not None:
        assert hold is not None
        assert hold.held
        assert (hold.token, hold.ttl) == granted
        assert [h.token for h in (await observer.status("held")).holders] == [hold.token]
        await held.release()
    assert await observer.status_all() == []
    async with locks.lock("still-works", timeout=0) as still:
        assert still.held
    assert await observer.status_all() == []


@pytest.mark.parametrize("case", VALID, ids=case_id)
async def test_valid_names_are_data(aconnect: AsyncConnect, case: Case) -> None:
    locks, observer = await aconnect(), await aconnect()
    name = case.value
    assert isinstance(name, str)
    canonical = unicodedata.normalize("NFC", name)
    lock = locks.lock(name)
    assert await lock.acquire(blocking=False)
    hold = lock.hold
    assert hold is not None
    assert type(hold.name) is str
    assert hold.name == lock.name == canonical
    assert [state.name for state in await observer.status_all()] == [canonical]
    assert [h.token for h in (await observer.status(name)).holders] == [hold.token]
    for spelling in case.input.same:
        assert not await observer.lock(spelling).acquire(blocking=False), spelling
        assert [h.token for h in (await observer.status(spelling)).holders] == [hold.token]
    for name in case.input.other:
        neighbour = observer.lock(name)
        assert await neighbour.acquire(blocking=False), name
        await neighbour.release()
    assert hold.held
    await lock.release()
    assert await observer.status_all() == []


@pytest.mark.tumbler_connection
async def test_status_all_lists_held_locks_and_waiters(aconnect: AsyncConnect) -> None:
    holder, waiter = await aconnect(), await aconnect()
    # taken in the other order than their names sort in: status_all sorts by name
    assert await holder.semaphore("two", 2).acquire()
    assert await holder.lock("one").acquire()
    wanted = waiter.lock("one")
    pending = abackground(lambda: wanted.acquire(timeout=20))

    async def waiting() -> bool:
        return (await holder.status("one")).waiters == 1

    await aeventually(waiting, "the waiter is in line")
    states = {state.name: state for state in await holder.status_all()}
    assert list(states) == ["one", "two"]  # every lock with a holder or a waiter, by name
    assert states["one"].waiters == 1
    assert not states["one"].holders[0].shared
    assert states["two"].holders[0].shared
    assert all(0 < h.expires_in <= 30 for s in states.values() for h in s.holders)
    assert "pid=" in states["one"].holders[0].holder
    assert await holder.force_release("one") == 1
    assert await pending.result() is True


#: a client's own description at its longest (core.MAX_HOLDER), with text beyond ASCII
LONG_HOLDER = ("billing-worker-3 run: ./charge --batch 'à la carte' ☃ " * 10)[:200]


async def test_a_client_s_holder_description_is_what_status_shows(
    aconnect: AsyncConnect,
) -> None:
    described, observer = await aconnect(holder=LONG_HOLDER), await aconnect()
    assert await described.lock("described").acquire()
    waiting = described.semaphore("described-line", 1)
    assert await observer.semaphore("described-line", 1).acquire()
    pending = abackground(lambda: waiting.acquire(timeout=20))

    async def queued() -> bool:
        return (await observer.status("described-line")).waiters == 1

    await aeventually(queued, "the described client waits")
    [held] = (await observer.status("described")).holders
    assert held.holder == LONG_HOLDER
    assert await observer.force_release("described-line") == 1
    assert await pending.result() is True
    [held] = (await observer.status("described-line")).holders
    assert held.holder == LONG_HOLDER  # its waiter entry carried it to its grant


@pytest.mark.tumbler_lock_layer
@pytest.mark.parametrize("option", ["fair", "renew"])
@pytest.mark.parametrize("value", ["no", 0, 1, None])
async def test_yes_no_options_take_only_booleans(
    aconnect: AsyncConnect, option: str, value: object
) -> None:
    locks = await aconnect()
    with (
        no_backend_call(locks),
        pytest.raises(InvalidArgument, match=f"{option} must be True or False"),
    ):
        locks.lock("flags", **{option: value})  # type: ignore[arg-type]  # wrong on purpose
    assert await locks.status_all() == []


async def test_default_ttl_of_the_client(aconnect: AsyncConnect) -> None:
    connected = time.monotonic()
    locks = await aconnect(default_ttl=12)
    lock = locks.lock("default-ttl")
    assert lock.ttl == 12
    async with lock as hold:
        assert_cut_to(hold, min(12, locks.capabilities.max_ttl or 12), connected)


@pytest.mark.tumbler_connection
async def test_mutual_exclusion_under_concurrency(aconnect: AsyncConnect) -> None:
    clients = [await aconnect() for _ in range(4)]
    inside = 0
    most_inside = 0
    tokens: list[int] = []

    async def worker(locks: AsyncLocks) -> None:
        nonlocal inside, most_inside
        lock = locks.lock("counter")
        for _ in range(10):
            async with lock as hold:
                inside += 1
                most_inside = max(most_inside, inside)
                tokens.append(hold.token)
                inside -= 1

    await agather(*[lambda c=c: worker(c) for c in clients])
    assert most_inside == 1
    assert len(tokens) == 40
    assert tokens == sorted(tokens)


async def test_a_grant_stays_held_after_its_lock_object_is_dropped(aconnect: AsyncConnect) -> None:
    first, second = await aconnect(), await aconnect()
    # A full collection pauses every thread for as long as the heap takes to walk (most of a
    # second in a test worker that has run a thousand cases, on a loaded machine): made
    # inside the lease, it would pause the renewal past the lease's end, as a pause of the
    # whole process does. So one now, none that the collector decides on by itself while the
    # leases run, and only the young generations, where the dropped lock object is, once it
    # is dropped.
    gc.collect()
    gc.disable()
    try:
        # the caller keeps no reference: the client must still renew the grant
        assert await first.lock("dropped", ttl=SHORT_TTL).acquire()
        gc.collect(1)
        # several leases pass without a renewal failing: the lock stays taken
        assert not await second.lock("dropped").acquire(timeout=3 * SHORT_TTL)
    finally:
        gc.enable()
    state = await first.status("dropped")
    assert len(state.holders) == 1


@pytest.mark.tumbler_connection
async def test_a_clients_waiters_on_one_lock_wait_at_the_backend_as_one(
    aconnect: AsyncConnect,
) -> None:
    holder, crowd = await aconnect(), await aconnect()
    held = holder.lock("busy")
    assert await held.acquire()
    lock = crowd.lock("busy")
    granted: list[int] = []

    async def take() -> None:
        async with lock as hold:
            granted.append(hold.token)

    waiters = [abackground(take) for _ in range(20)]

    async def one_in_line() -> bool:
        return (await holder.status("busy")).waiters == 1

    await aeventually(one_in_line, "the crowd's first waiter is in line")
    assert (await holder.status("busy")).waiters == 1
    await held.release()
    for waiter in waiters:
        await waiter.result()
    assert len(granted) == 20
    assert granted == sorted(granted)
    assert (await holder.status("busy")).waiters == 0


@pytest.mark.tumbler_requires("line_cap")
async def test_a_full_line_refuses_one_more_waiter(aconnect: AsyncConnect) -> None:
    """A lock queues at most ``max_waiters`` waiters (a URL option): one more acquire that
    would wait gets ``TooManyWaiters`` at once and leaves nothing behind, while a try that
    does not wait still answers; once the line moves, a new waiter queues again."""
    holder, first, second = [await aconnect(query="max_waiters=1") for _ in range(3)]
    held = holder.lock("crowded")
    assert await held.acquire()

    async def take() -> bool:
        return await first.lock("crowded").acquire(timeout=PATIENCE)

    pending = abackground(take)

    async def queued() -> bool:
        return (await holder.status("crowded")).waiters == 1

    await aeventually(queued, "one waiter is in line")
    refused = second.lock("crowded")
    with pytest.raises(TooManyWaiters) as full:
        await refused.acquire(timeout=PATIENCE)
    assert full.value.lock_name == "crowded"
    assert "max_waiters" in str(full.value)
    assert not await refused.acquire(blocking=False)
    assert await queued()  # the refused acquire left nothing
    await held.release()
    assert await pending.result() is True
    assert not await refused.acquire(timeout=0.2)  # queues behind the holder, and times out


async def test_overlapping_readers_do_not_starve_a_writer(aconnect: AsyncConnect) -> None:
    readers_client, other_readers, writer_client = (
        await aconnect(),
        await aconnect(),
        await aconnect(),
    )
    first = readers_client.rwlock("shelf").read()
    second = other_readers.rwlock("shelf").read()
    writer = writer_client.rwlock("shelf").write()
    written = False
    assert await first.acquire(timeout=0)

    async def writes() -> bool:
        nonlocal written
        acquired = await writer.acquire(timeout=PATIENCE)
        written = True
        if acquired:
            await writer.release()
        return acquired

    pending = abackground(writes)

    async def queued() -> bool:
        return (await writer_client.status("shelf")).waiters == 1

    await aeventually(queued, "the writer waits")
    # a relay of readers: the next takes its read lock before the last lets go, so without
    # arrival order there is never a moment with no reader, and the writer never gets in
    holding, idle = first, second
    while not written:
        if not await idle.acquire(timeout=0.2):
            break  # queued behind the writer: the relay is broken, as it must be
        await holding.release()
        holding, idle = idle, holding
    if holding.hold is not None:
        await holding.release()
    assert await pending.result() is True


@pytest.mark.tumbler_requires("min_ttl_floor")
async def test_a_ttl_shorter_than_the_backend_keeps_is_refused(aconnect: AsyncConnect) -> None:
    locks = await aconnect()
    floor = locks.capabilities.min_ttl
    with pytest.raises(InvalidTTL, match=f"{floor:g} s"):
        locks.lock("short", ttl=floor / 2)
    with pytest.raises(InvalidTTL, match=f"{floor:g} s"):
        await aconnect(default_ttl=floor / 2)
    assert await locks.status_all() == []


@pytest.mark.tumbler_connection
async def test_a_forced_release_tells_its_holders_who_forced_it_and_why(
    aconnect: AsyncConnect, caplog: pytest.LogCaptureFixture
) -> None:
    holder, operator = await aconnect(), await aconnect()
    renewed = holder.lock("evicted", ttl=FORCED_TTL)
    unrenewed = holder.lock("evicted-quietly", ttl=30, renew=False)
    assert await renewed.acquire()
    assert await unrenewed.acquire()
    hold = renewed.hold
    assert hold is not None
    with caplog.at_level("WARNING", logger="tumbler"):
        assert await operator.force_release("evicted", reason="stuck job, ticket 42") == 1
        assert await operator.force_release("evicted-quietly") == 1
        # the renewed holder learns at its next renewal, the other when it releases
        assert await hold.wait_lost(timeout=PATIENCE)
        with pytest.raises(LockLost, match=r"force-released by .* pid=") as lost:
            await unrenewed.release()
    assert hold.lost_reason is not None
    assert hold.lost_reason.startswith("force-released by ")
    assert hold.lost_reason.endswith(": stuck job, ticket 42")
    assert "pid=" in hold.lost_reason
    assert "ticket" not in str(lost.value)
    forced = [r.getMessage() for r in caplog.records if r.getMessage().startswith("force-released")]
    assert len(forced) == 2
    assert "ticket 42" in forced[0]
    told = [r.getMessage() for r in caplog.records if "lost: force-released by" in r.getMessage()]
    assert len(told) == 2


@pytest.mark.tumbler_lock_layer
@pytest.mark.parametrize("reason", ["", "two\nlines", "x\ud800", "x" * 501, 42])
async def test_a_bad_reason_is_refused_and_releases_nothing(
    aconnect: AsyncConnect, reason: object
) -> None:
    holder, operator = await aconnect(), await aconnect()
    assert await holder.lock("kept").acquire()
    with no_backend_call(operator), pytest.raises(InvalidArgument, match="reason"):
        await operator.force_release("kept", reason=reason)  # type: ignore[arg-type]  # on purpose
    assert len((await operator.status("kept")).holders) == 1
