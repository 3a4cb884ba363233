# Generated from src/tumbler/testing/conformance/_async/test_locks.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
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
from tumbler._sync.client import Locks
from tumbler._sync.hold import Hold
from tumbler._sync.primitives import Lock, Semaphore

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
from ..compat import PATIENCE, Connect, background, eventually, gather

# a short lease, for cases about expiry: long enough for a loaded 2-core machine (two test
# workers, their servers and their child processes) to renew in time
SHORT_TTL = 1.0
# the lease of a hold that must hear of a force-release from its next renewal (every third of
# the lease): with a second, a renewal held up on a loaded machine (the store busy with the
# force-release itself, a starved renewal thread) lets the lease run out first, and the hold
# is lost without learning who forced it
FORCED_TTL = 3.0


def assert_cut_to(hold: Hold, expected: float, connected: float) -> None:
    """``hold`` was granted ``expected``, or, where grants ride a lease the client took
    when it connected, what was left of it: never more, and never less than
    ``expected`` less the time since ``connected`` (before the client was made)."""
    assert expected - (time.monotonic() - connected) <= hold.ttl <= expected


@pytest.mark.tumbler_connection
def test_acquire_gives_a_hold_with_a_token(connect: Connect) -> None:
    locks = connect()
    lock = locks.lock("orders:42", ttl=30)
    assert not lock.locked()
    with lock as hold:
        assert hold.held
        assert not hold.lost
        assert isinstance(hold.token, int)
        assert hold.name == "orders:42"
        assert 0 < hold.expires_in <= 30
        assert lock.hold is hold
        assert lock.locked()
        state = locks.status("orders:42")
        assert [h.token for h in state.holders] == [hold.token]
        assert state.waiters == 0
    assert not hold.held
    assert lock.hold is None
    assert not lock.locked()
    assert (locks.status("orders:42")).holders == ()


@pytest.mark.tumbler_connection
def test_mutual_exclusion_between_clients(connect: Connect) -> None:
    first, second = connect(), connect()
    a = first.lock("resource")
    b = second.lock("resource")
    assert a.acquire(timeout=0)
    assert not b.acquire(blocking=False)
    assert not b.acquire(timeout=0)
    assert (second.status("resource")).waiters == 0
    a.release()
    assert b.acquire(blocking=False)
    b.release()


def test_fencing_tokens_strictly_increase_across_holders_and_cleanup(
    connect: Connect,
) -> None:
    first, second = connect(), connect()
    tokens = []
    for locks in (first, second, first, second):
        with locks.lock("fenced") as hold:
            tokens.append(hold.token)
        # every entry of the name is gone between grants; other names come and go
        with locks.lock("other"):
            pass
    with second.semaphore("fenced", 2) as hold:
        tokens.append(hold.token)
    assert tokens == sorted(tokens)
    assert len(set(tokens)) == len(tokens)


def test_timeout_is_honoured_and_the_waiter_leaves_nothing_behind(
    connect: Connect,
) -> None:
    holder, waiter = connect(), connect()
    assert holder.lock("busy").acquire()
    started = time.monotonic()
    assert not waiter.lock("busy").acquire(timeout=0.3)
    assert time.monotonic() - started >= 0.3
    state = waiter.status("busy")
    assert state.waiters == 0
    assert len(state.holders) == 1


def test_with_raises_acquire_timeout(connect: Connect) -> None:
    holder, waiter = connect(), connect()
    assert holder.lock("busy").acquire()
    with pytest.raises(AcquireTimeout) as caught:
        with waiter.lock("busy", timeout=0.1):
            pytest.fail("entered a lock that is held elsewhere")
    assert isinstance(caught.value, TimeoutError)
    assert caught.value.lock_name == "busy"


@pytest.mark.tumbler_connection
def test_a_waiter_gets_the_lock_when_it_is_released(connect: Connect) -> None:
    holder, waiter = connect(), connect()
    held = holder.lock("handoff")
    assert held.acquire()
    wanted = waiter.lock("handoff")

    def take() -> Hold | None:
        assert wanted.acquire(timeout=20)
        return wanted.hold  # holds are per task/thread: read it where it was acquired

    pending = background(take)

    def waiting() -> bool:
        return (holder.status("handoff")).waiters == 1

    eventually(waiting, "the waiter is in line")
    assert held.hold is not None
    first_token = held.hold.token
    held.release()
    taken = pending.result()
    assert taken.held
    assert taken.token > first_token
    assert wanted.hold is None


def test_release_is_owner_only(connect: Connect) -> None:
    first, second = connect(), connect()
    mine = first.lock("owned")
    theirs = second.lock("owned")
    assert mine.acquire()
    with pytest.raises(NotHeld):
        theirs.release()
    hold = mine.hold
    assert hold is not None
    assert hold.held
    mine.release()
    with pytest.raises(NotHeld):
        mine.release()
    with pytest.raises(NotHeld):
        hold.release()


def test_one_lock_object_shared_by_two_tasks_or_threads(connect: Connect) -> None:
    locks = connect()
    lock = locks.lock("shared-object")
    assert lock.acquire()

    def release_from_elsewhere() -> str:
        try:
            lock.release()
        except NotHeld:
            return "refused"
        return "released"

    assert gather(release_from_elsewhere) == ["refused"]
    # the hold itself is the capability: whoever has it may release it
    hold = lock.hold
    assert hold is not None
    assert hold.held

    def release_hold() -> None:
        hold.release()

    gather(release_hold)
    assert not lock.locked()
    assert lock.hold is None


def test_lock_is_not_reentrant(connect: Connect) -> None:
    locks = connect()
    lock = locks.lock("plain")
    with lock:
        with pytest.raises(AlreadyHeld):
            lock.acquire()
        assert lock.hold is not None
        assert lock.hold.held


def test_rlock_is_reentrant_per_owner(connect: Connect) -> None:
    first, second = connect(), connect()
    rlock = first.rlock("again")
    with rlock as outer:
        with rlock as inner:
            assert inner is outer
            assert rlock.acquire()
            rlock.release()
        assert outer.held
        assert not second.lock("again").acquire(blocking=False)
    assert not outer.held
    assert second.lock("again").acquire(blocking=False)


def test_semaphore_permits_are_never_exceeded(connect: Connect) -> None:
    first, second = connect(), connect()
    sem_a = first.semaphore("pool", 3)
    sem_b = second.semaphore("pool", 3)
    assert sem_a.acquire(blocking=False)
    assert sem_a.acquire(blocking=False)
    assert sem_b.acquire(blocking=False)
    assert not sem_b.acquire(blocking=False)
    assert sem_b.locked()
    state = first.status("pool")
    assert len(state.holders) == 3
    assert state.limit == 3
    tokens = [h.token for h in state.holders]
    assert len(set(tokens)) == 3
    sem_a.release()
    assert sem_b.acquire(blocking=False)
    with pytest.raises(PermitsMismatch):
        second.semaphore("pool", 5).acquire(blocking=False)


@pytest.mark.tumbler_connection
def test_semaphore_waiters_get_freed_permits(connect: Connect) -> None:
    first, second = connect(), connect()
    holder = first.semaphore("pool2", 1)
    assert holder.acquire()
    waiter = second.semaphore("pool2", 1)
    pending = background(lambda: waiter.acquire(timeout=20))

    def waiting() -> bool:
        return (first.status("pool2")).waiters == 1

    eventually(waiting, "the waiter is in line")
    holder.release()
    assert pending.result() is True


def test_read_write_exclusion(connect: Connect) -> None:
    first, second, third = connect(), connect(), connect()
    reader_a = first.rwlock("doc").read()
    reader_b = second.rwlock("doc").read()
    writer = third.rwlock("doc").write()
    assert reader_a.acquire(blocking=False)
    assert reader_b.acquire(blocking=False)
    assert not writer.acquire(blocking=False)
    assert writer.locked()
    reader_a.release()
    reader_b.release()
    assert writer.acquire(blocking=False)
    assert not reader_a.acquire(blocking=False)
    # the write side is the mutex of that name
    assert not first.lock("doc").acquire(blocking=False)
    writer.release()
    assert reader_a.acquire(blocking=False)


def test_a_read_lock_and_a_semaphore_of_one_name_conflict(connect: Connect) -> None:
    locks = connect()
    assert locks.rwlock("mixed").read().acquire(blocking=False)
    with pytest.raises(PermitsMismatch):
        locks.semaphore("mixed", 2).acquire(blocking=False)


@pytest.mark.parametrize("kind", ["lock", "semaphore", "write"])
def test_fair_waiters_are_granted_in_arrival_order(connect: Connect, kind: str) -> None:
    holder_client = connect()

    def make(locks: Locks) -> Lock | Semaphore:
        if kind == "semaphore":
            return locks.semaphore("queue", 1, fair=True)
        if kind == "write":
            return locks.rwlock("queue", fair=True).write()
        return locks.lock("queue", fair=True)

    holder = make(holder_client)
    assert holder.acquire()
    order: list[int] = []
    pending = []
    for index in range(4):
        client = connect()
        lock = make(client)

        def wait_then_record(lock: Lock | Semaphore = lock, index: int = index) -> None:
            assert lock.acquire(timeout=20)
            order.append(index)
            lock.release()

        pending.append(background(wait_then_record))

        def queued(count: int = index + 1) -> bool:
            return (holder_client.status("queue")).waiters == count

        eventually(queued, f"{index + 1} waiters are in line")
    holder.release()
    for call in pending:
        call.result()
    assert order == [0, 1, 2, 3]


@pytest.mark.tumbler_connection
def test_an_unrenewed_lease_expires_and_the_holder_learns(connect: Connect) -> None:
    first, second = connect(), connect()
    lost: list[object] = []
    lock = first.lock("lease", ttl=SHORT_TTL, renew=False)
    assert lock.acquire()
    hold = lock.hold
    assert hold is not None
    hold.on_lost(lost.append)
    assert hold.wait_lost(timeout=20)
    assert hold.lost
    assert not hold.held
    assert hold.lost_reason is not None
    assert "lease" in hold.lost_reason
    assert lost == [hold]
    other = second.lock("lease")
    assert other.acquire(timeout=20)
    assert other.hold is not None
    assert other.hold.token > hold.token
    with pytest.raises(LockLost):
        lock.release()


def test_wait_lost_returns_after_the_on_lost_callbacks_ran(connect: Connect) -> None:
    holder, operator = connect(), connect()
    lock = holder.lock("told-first", ttl=SHORT_TTL)
    assert lock.acquire()
    hold = lock.hold
    assert hold is not None
    told: list[str] = []

    def slow(_hold: object) -> None:
        time.sleep(0.3)  # slow work in a callback, as the holder's wait_lost() wakes
        told.append("slow")

    hold.on_lost(slow)
    hold.on_lost(lambda _hold: told.append("quick"))
    # a renewed hold has no deadline to run out at: its renewal worker finds it lost
    assert operator.force_release("told-first") == 1
    assert hold.wait_lost(timeout=20)
    assert told == ["slow", "quick"]
    with pytest.raises(LockLost):
        lock.release()


def test_wait_lost_returns_false_once_the_hold_is_released(connect: Connect) -> None:
    locks = connect()
    lock = locks.lock("watched")
    assert lock.acquire()
    hold = lock.hold
    assert hold is not None
    watching = background(lambda: hold.wait_lost())  # no timeout: only the release ends it
    lock.release()
    assert watching.result() is False
    assert not hold.lost


@pytest.mark.tumbler_connection
def test_renewal_keeps_the_lock_past_its_ttl(connect: Connect) -> None:
    first, second = connect(), connect()
    lock = first.lock("renewed", ttl=SHORT_TTL)
    assert lock.acquire()
    hold = lock.hold
    assert hold is not None
    # two lease lengths pass (six renewals due): without them it would be lost after one
    assert not hold.wait_lost(timeout=2 * SHORT_TTL)
    assert hold.held
    assert not second.lock("renewed").acquire(blocking=False)
    lock.release()


def test_leaving_with_after_the_lease_was_lost_raises_lock_lost(
    connect: Connect,
) -> None:
    locks = connect()
    with pytest.raises(LockLost):
        with locks.lock("lost-in-with", ttl=SHORT_TTL, renew=False) as hold:
            assert hold.wait_lost(timeout=20)


def test_lock_lost_does_not_hide_the_exception_on_its_way_out(connect: Connect) -> None:
    locks = connect()
    with pytest.raises(KeyError):  # noqa: PT012 (the with block is the scenario)
        with locks.lock("lost-and-failed", ttl=SHORT_TTL, renew=False) as hold:
            assert hold.wait_lost(timeout=20)
            raise KeyError("the caller's own error")


@pytest.mark.tumbler_connection
def test_force_release_takes_the_lock_from_its_holder(connect: Connect) -> None:
    holder, operator, next_client = connect(), connect(), connect()
    lock = holder.lock("stuck", ttl=FORCED_TTL)
    assert lock.acquire()
    hold = lock.hold
    assert hold is not None
    assert operator.force_release("stuck") == 1
    assert next_client.lock("stuck").acquire(blocking=False)
    assert hold.wait_lost(timeout=20)
    assert hold.lost_reason is not None
    assert "force-released" in hold.lost_reason
    with pytest.raises(LockLost):
        lock.release()


def test_force_release_counts_only_live_grants(connect: Connect) -> None:
    holder, operator = connect(), connect()
    lock = holder.lock("ran-out", ttl=SHORT_TTL, renew=False)
    assert lock.acquire()
    assert lock.hold is not None
    assert lock.hold.wait_lost(timeout=20)

    def expired_on_the_backend() -> bool:
        # the client gives up a little before the backend's lease ends
        return (operator.status("ran-out")).holders == ()

    eventually(expired_on_the_backend, "the backend's lease has run out")
    assert operator.force_release("ran-out") == 0


def test_extend_sets_a_new_lease(connect: Connect) -> None:
    locks = connect()
    lock = locks.lock("extended", ttl=SHORT_TTL, renew=False)
    assert lock.acquire()
    hold = lock.hold
    assert hold is not None
    hold.extend(30)
    # a session-based backend grants at most its session timeout
    longest = locks.capabilities.max_ttl or 30
    assert hold.ttl == min(30, longest)
    assert hold.expires_in > min(25, longest * 0.8)
    # past the original lease, the extension holds; well before its end (3 s on etcd's test
    # target, whose lease is the longest), so that the release below gets there in time
    assert not hold.wait_lost(timeout=1.5 * SHORT_TTL)
    assert hold.held
    lock.release()


def test_a_lease_is_what_was_asked_cut_to_the_longest_granted(
    connect: Connect,
) -> None:
    # Redlock's safety rests on the cut: a master restarted empty stays out for max_ttl
    connected = time.monotonic()
    locks = connect()
    longest = locks.capabilities.max_ttl
    asked = 4 * longest if longest is not None else 40.0
    expected = min(asked, longest or asked)
    lock = locks.lock("longest-lease", ttl=asked, renew=False)
    assert lock.ttl == asked  # what was asked for; the grant is cut
    with lock as hold:
        assert_cut_to(hold, expected, connected)
        for extension in (None, asked):
            hold.extend(extension)
            assert hold.ttl == expected
            (holder,) = (locks.status("longest-lease")).holders
            if not holder.session:
                assert expected * 0.5 < holder.expires_in <= expected


def test_synchronized_serialises_calls_and_allows_recursion(connect: Connect) -> None:
    locks = connect()
    other = connect()
    calls: list[int] = []

    @locks.synchronized("job", ttl=30)
    def job(depth: int) -> int:
        assert other.lock("job").locked()
        calls.append(depth)
        if depth:
            return job(depth - 1) + 1
        return 0

    assert job(2) == 2
    assert calls == [2, 1, 0]
    assert not other.lock("job").locked()


@pytest.mark.tumbler_connection
def test_close_releases_what_is_held_and_refuses_further_use(connect: Connect) -> None:
    first, second = connect(), connect()
    lock = first.lock("closing")
    assert lock.acquire()
    hold = lock.hold
    assert hold is not None
    first.close()
    assert hold.lost
    assert second.lock("closing").acquire(blocking=False)
    with pytest.raises(ClientClosed):
        first.lock("closing").acquire()


@pytest.mark.tumbler_connection
def test_close_ends_a_wait_with_client_closed_and_the_waiter_leaves_the_line(
    connect: Connect,
) -> None:
    holder, closing = connect(), connect()
    held = holder.lock("closed-while-waiting")
    assert held.acquire()
    # no timeout: only close() can end this wait (on a manual clock nothing else would)
    pending = background(lambda: closing.lock("closed-while-waiting").acquire(timeout=None))

    def waiting() -> bool:
        return (holder.status("closed-while-waiting")).waiters == 1

    eventually(waiting, "the waiter is in line")
    closing.close()
    with pytest.raises(ClientClosed):
        pending.result()
    state = holder.status("closed-while-waiting")
    assert state.waiters == 0
    assert held.hold is not None
    assert [h.token for h in state.holders] == [held.hold.token]
    # nothing was granted to the closed client after all: the next in line gets it
    held.release()
    assert holder.lock("closed-while-waiting").acquire(timeout=0)


def test_close_ends_the_waits_of_waiters_behind_another_of_their_client(
    connect: Connect,
) -> None:
    holder, closing = connect(), connect()
    held = holder.lock("closed-behind")
    assert held.acquire()
    lock = closing.lock("closed-behind")
    # no timeout: only close() can end these waits; the first waits at the backend, the
    # others for their turn in the client's line
    pending = [background(lambda: lock.acquire(timeout=None)) for _ in range(3)]

    def all_in_line() -> bool:
        # the client's line is the lock layer's own book (no backend shows it)
        return sum(len(line) for line in closing._lines.values()) == 3

    eventually(all_in_line, "the three waiters are in their client's line")
    closing.close()
    for waiter in pending:
        with pytest.raises(ClientClosed):
            waiter.result()
    assert (holder.status("closed-behind")).waiters == 0
    held.release()


def test_leaving_with_after_close_raises_lock_lost_once(connect: Connect) -> None:
    locks = connect()
    with pytest.raises(LockLost):  # noqa: PT012 (the with block is the scenario)
        with locks.lock("closed-inside") as hold:
            locks.close()
            assert hold.lost
            assert hold.lost_reason is not None
            assert "closed" in hold.lost_reason


# -- bad input: the table of tests/contract/test_bad_input.py -------------------------------


def settled(result: object) -> object:
    """What a call of the table returns, awaited in asyncio (the blocking twin has it already)."""
    if inspect.isawaitable(result):
        return result
    return result


@pytest.mark.tumbler_lock_layer
@pytest.mark.parametrize("group", REFUSED, ids=group_id)
def test_bad_input_is_refused_and_leaves_nothing_behind(connect: Connect, group: Group) -> None:
    locks, observer = connect(), connect()
    for case in group.cases:
        with case.named():
            refused_and_nothing_left(locks, observer, connect, case)


def refused_and_nothing_left(locks: Locks, observer: Locks, connect: Connect, case: Case) -> None:
    held: Lock | None = None
    if case.call.needs_hold:
        held = locks.lock("held", ttl=30)
        assert held.acquire()
    hold = held.hold if held is not None else None
    granted = (hold.token, hold.ttl) if hold is not None else None
    with no_backend_call(locks), pytest.raises(case.error) as refused:
        settled(case.call.run(Subject(locks, hold, connect), case.value))
    case.check_refusal(refused.value)
    if held is not None:
        assert hold is not None
        assert hold.held
        assert (hold.token, hold.ttl) == granted
        assert [h.token for h in (observer.status("held")).holders] == [hold.token]
        held.release()
    assert observer.status_all() == []
    with locks.lock("still-works", timeout=0) as still:
        assert still.held
    assert observer.status_all() == []


@pytest.mark.parametrize("case", VALID, ids=case_id)
def test_valid_names_are_data(connect: Connect, case: Case) -> None:
    locks, observer = connect(), connect()
    name = case.value
    assert isinstance(name, str)
    canonical = unicodedata.normalize("NFC", name)
    lock = locks.lock(name)
    assert lock.acquire(blocking=False)
    hold = lock.hold
    assert hold is not None
    assert type(hold.name) is str
    assert hold.name == lock.name == canonical
    assert [state.name for state in observer.status_all()] == [canonical]
    assert [h.token for h in (observer.status(name)).holders] == [hold.token]
    for spelling in case.input.same:
        assert not observer.lock(spelling).acquire(blocking=False), spelling
        assert [h.token for h in (observer.status(spelling)).holders] == [hold.token]
    for name in case.input.other:
        neighbour = observer.lock(name)
        assert neighbour.acquire(blocking=False), name
        neighbour.release()
    assert hold.held
    lock.release()
    assert observer.status_all() == []


@pytest.mark.tumbler_connection
def test_status_all_lists_held_locks_and_waiters(connect: Connect) -> None:
    holder, waiter = connect(), connect()
    # taken in the other order than their names sort in: status_all sorts by name
    assert holder.semaphore("two", 2).acquire()
    assert holder.lock("one").acquire()
    wanted = waiter.lock("one")
    pending = background(lambda: wanted.acquire(timeout=20))

    def waiting() -> bool:
        return (holder.status("one")).waiters == 1

    eventually(waiting, "the waiter is in line")
    states = {state.name: state for state in holder.status_all()}
    assert list(states) == ["one", "two"]  # every lock with a holder or a waiter, by name
    assert states["one"].waiters == 1
    assert not states["one"].holders[0].shared
    assert states["two"].holders[0].shared
    assert all(0 < h.expires_in <= 30 for s in states.values() for h in s.holders)
    assert "pid=" in states["one"].holders[0].holder
    assert holder.force_release("one") == 1
    assert pending.result() is True


#: a client's own description at its longest (core.MAX_HOLDER), with text beyond ASCII
LONG_HOLDER = ("billing-worker-3 run: ./charge --batch 'à la carte' ☃ " * 10)[:200]


def test_a_client_s_holder_description_is_what_status_shows(
    connect: Connect,
) -> None:
    described, observer = connect(holder=LONG_HOLDER), connect()
    assert described.lock("described").acquire()
    waiting = described.semaphore("described-line", 1)
    assert observer.semaphore("described-line", 1).acquire()
    pending = background(lambda: waiting.acquire(timeout=20))

    def queued() -> bool:
        return (observer.status("described-line")).waiters == 1

    eventually(queued, "the described client waits")
    [held] = (observer.status("described")).holders
    assert held.holder == LONG_HOLDER
    assert observer.force_release("described-line") == 1
    assert pending.result() is True
    [held] = (observer.status("described-line")).holders
    assert held.holder == LONG_HOLDER  # its waiter entry carried it to its grant


@pytest.mark.tumbler_lock_layer
@pytest.mark.parametrize("option", ["fair", "renew"])
@pytest.mark.parametrize("value", ["no", 0, 1, None])
def test_yes_no_options_take_only_booleans(connect: Connect, option: str, value: object) -> None:
    locks = connect()
    with (
        no_backend_call(locks),
        pytest.raises(InvalidArgument, match=f"{option} must be True or False"),
    ):
        locks.lock("flags", **{option: value})  # type: ignore[arg-type]  # wrong on purpose
    assert locks.status_all() == []


def test_default_ttl_of_the_client(connect: Connect) -> None:
    connected = time.monotonic()
    locks = connect(default_ttl=12)
    lock = locks.lock("default-ttl")
    assert lock.ttl == 12
    with lock as hold:
        assert_cut_to(hold, min(12, locks.capabilities.max_ttl or 12), connected)


@pytest.mark.tumbler_connection
def test_mutual_exclusion_under_concurrency(connect: Connect) -> None:
    clients = [connect() for _ in range(4)]
    inside = 0
    most_inside = 0
    tokens: list[int] = []

    def worker(locks: Locks) -> None:
        nonlocal inside, most_inside
        lock = locks.lock("counter")
        for _ in range(10):
            with lock as hold:
                inside += 1
                most_inside = max(most_inside, inside)
                tokens.append(hold.token)
                inside -= 1

    gather(*[lambda c=c: worker(c) for c in clients])
    assert most_inside == 1
    assert len(tokens) == 40
    assert tokens == sorted(tokens)


def test_a_grant_stays_held_after_its_lock_object_is_dropped(connect: Connect) -> None:
    first, second = connect(), connect()
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
        assert first.lock("dropped", ttl=SHORT_TTL).acquire()
        gc.collect(1)
        # several leases pass without a renewal failing: the lock stays taken
        assert not second.lock("dropped").acquire(timeout=3 * SHORT_TTL)
    finally:
        gc.enable()
    state = first.status("dropped")
    assert len(state.holders) == 1


@pytest.mark.tumbler_connection
def test_a_clients_waiters_on_one_lock_wait_at_the_backend_as_one(
    connect: Connect,
) -> None:
    holder, crowd = connect(), connect()
    held = holder.lock("busy")
    assert held.acquire()
    lock = crowd.lock("busy")
    granted: list[int] = []

    def take() -> None:
        with lock as hold:
            granted.append(hold.token)

    waiters = [background(take) for _ in range(20)]

    def one_in_line() -> bool:
        return (holder.status("busy")).waiters == 1

    eventually(one_in_line, "the crowd's first waiter is in line")
    assert (holder.status("busy")).waiters == 1
    held.release()
    for waiter in waiters:
        waiter.result()
    assert len(granted) == 20
    assert granted == sorted(granted)
    assert (holder.status("busy")).waiters == 0


@pytest.mark.tumbler_requires("line_cap")
def test_a_full_line_refuses_one_more_waiter(connect: Connect) -> None:
    """A lock queues at most ``max_waiters`` waiters (a URL option): one more acquire that
    would wait gets ``TooManyWaiters`` at once and leaves nothing behind, while a try that
    does not wait still answers; once the line moves, a new waiter queues again."""
    holder, first, second = [connect(query="max_waiters=1") for _ in range(3)]
    held = holder.lock("crowded")
    assert held.acquire()

    def take() -> bool:
        return first.lock("crowded").acquire(timeout=PATIENCE)

    pending = background(take)

    def queued() -> bool:
        return (holder.status("crowded")).waiters == 1

    eventually(queued, "one waiter is in line")
    refused = second.lock("crowded")
    with pytest.raises(TooManyWaiters) as full:
        refused.acquire(timeout=PATIENCE)
    assert full.value.lock_name == "crowded"
    assert "max_waiters" in str(full.value)
    assert not refused.acquire(blocking=False)
    assert queued()  # the refused acquire left nothing
    held.release()
    assert pending.result() is True
    assert not refused.acquire(timeout=0.2)  # queues behind the holder, and times out


def test_overlapping_readers_do_not_starve_a_writer(connect: Connect) -> None:
    readers_client, other_readers, writer_client = (
        connect(),
        connect(),
        connect(),
    )
    first = readers_client.rwlock("shelf").read()
    second = other_readers.rwlock("shelf").read()
    writer = writer_client.rwlock("shelf").write()
    written = False
    assert first.acquire(timeout=0)

    def writes() -> bool:
        nonlocal written
        acquired = writer.acquire(timeout=PATIENCE)
        written = True
        if acquired:
            writer.release()
        return acquired

    pending = background(writes)

    def queued() -> bool:
        return (writer_client.status("shelf")).waiters == 1

    eventually(queued, "the writer waits")
    # a relay of readers: the next takes its read lock before the last lets go, so without
    # arrival order there is never a moment with no reader, and the writer never gets in
    holding, idle = first, second
    while not written:
        if not idle.acquire(timeout=0.2):
            break  # queued behind the writer: the relay is broken, as it must be
        holding.release()
        holding, idle = idle, holding
    if holding.hold is not None:
        holding.release()
    assert pending.result() is True


@pytest.mark.tumbler_requires("min_ttl_floor")
def test_a_ttl_shorter_than_the_backend_keeps_is_refused(connect: Connect) -> None:
    locks = connect()
    floor = locks.capabilities.min_ttl
    with pytest.raises(InvalidTTL, match=f"{floor:g} s"):
        locks.lock("short", ttl=floor / 2)
    with pytest.raises(InvalidTTL, match=f"{floor:g} s"):
        connect(default_ttl=floor / 2)
    assert locks.status_all() == []


@pytest.mark.tumbler_connection
def test_a_forced_release_tells_its_holders_who_forced_it_and_why(
    connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    holder, operator = connect(), connect()
    renewed = holder.lock("evicted", ttl=FORCED_TTL)
    unrenewed = holder.lock("evicted-quietly", ttl=30, renew=False)
    assert renewed.acquire()
    assert unrenewed.acquire()
    hold = renewed.hold
    assert hold is not None
    with caplog.at_level("WARNING", logger="tumbler"):
        assert operator.force_release("evicted", reason="stuck job, ticket 42") == 1
        assert operator.force_release("evicted-quietly") == 1
        # the renewed holder learns at its next renewal, the other when it releases
        assert hold.wait_lost(timeout=PATIENCE)
        with pytest.raises(LockLost, match=r"force-released by .* pid=") as lost:
            unrenewed.release()
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
def test_a_bad_reason_is_refused_and_releases_nothing(connect: Connect, reason: object) -> None:
    holder, operator = connect(), connect()
    assert holder.lock("kept").acquire()
    with no_backend_call(operator), pytest.raises(InvalidArgument, match="reason"):
        operator.force_release("kept", reason=reason)  # type: ignore[arg-type]  # on purpose
    assert len((operator.status("kept")).holders) == 1
