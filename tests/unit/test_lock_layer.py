"""The lock layer's own books on the fast path: what an acquisition that needs no wait leaves
behind (nothing), and the gate's fork check. On ``memory://``, whose hub shows the watches
subscribed."""

from __future__ import annotations

import os
import warnings

import pytest

import tumbler
from tumbler import ForkedClient

NAME = "orders:42"


@pytest.fixture
def locks():
    client = tumbler.connect("memory://lock-layer")
    yield client
    client.close()


def test_an_acquisition_that_finds_the_lock_free_leaves_no_watch_or_line(locks):
    hub = locks._backend.hub
    lock = locks.lock(NAME)
    assert lock.acquire()
    assert hub.subscribers(NAME) == 0
    assert locks._lines == {}
    assert locks._watches == set()
    lock.release()
    assert locks._gate._calls == {}


def test_a_refused_single_try_subscribes_nothing_and_leaves_no_waiter(locks):
    other = tumbler.connect("memory://lock-layer")
    try:
        held = other.lock(NAME)
        assert held.acquire()
        subscribed = []
        original = locks._backend.watch

        def watch(name: str, owner: str):  # the single try must not make one
            subscribed.append(name)
            return original(name, owner)

        locks._backend.watch = watch
        assert not locks.lock(NAME).acquire(blocking=False)
        assert subscribed == []
        assert locks.status(NAME).waiters == 0
        assert locks._lines == {}
        held.release()
    finally:
        other.close()


def test_a_client_made_before_a_fork_is_refused_in_the_child(locks):
    lock = locks.lock(NAME)
    assert lock.acquire()
    hold = lock.hold
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads, 3.12+
        pid = os.fork()
    if pid == 0:  # the child: report by exit status only
        code = 0
        try:
            if not locks._gate.forked or hold.held:
                code = 10
            try:
                locks.lock("other").acquire()
                code = 11
            except ForkedClient:
                pass
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not locks._gate.forked
    assert hold.held
    lock.release()


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_processes_forked_after_the_import_draw_their_segments_apart(flavour):
    """A server that imports tumbler and then forks its workers (gunicorn's preload, a
    fork server): each worker draws its own segments to try first, not the same sequence."""
    if flavour == "sync":
        from tumbler._sync import primitives
    else:
        from tumbler._async import primitives
    primitives._segments_rng()  # made in the parent, before the fork
    readable, writable = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads, 3.12+
        pid = os.fork()
    if pid == 0:  # the child: its first draw, on the pipe
        try:
            os.write(writable, repr(primitives._segments_rng().random()).encode())
        finally:
            os._exit(0)
    os.close(writable)
    os.waitpid(pid, 0)
    with os.fdopen(readable) as pipe:
        child = float(pipe.read())
    assert child != primitives._segments_rng().random()


def test_a_clients_segmented_waiters_wait_in_one_line_whatever_segment_they_start_at(locks):
    from tumbler.testing.conformance.compat import background, eventually

    other = tumbler.connect("memory://lock-layer")
    try:
        held = other.segmented(NAME, 3)
        holds = []
        for _ in range(3):
            assert held.acquire(timeout=0)
            holds.append(held.hold)
        crowd = locks.segmented(NAME, 3)

        def take() -> int | None:
            with crowd as hold:
                return hold.segment

        # each acquisition tries the segments from a random one on: 12 start at every one
        waiters = [background(take) for _ in range(12)]
        eventually(lambda: sum(map(len, locks._lines.values())) == 12, "all 12 are in line")
        assert len(locks._lines) == 1
        assert [other.status(name).waiters for name in held.segment_names] == [1, 1, 1]
        for hold in holds:
            hold.release()
        taken = [waiter.result() for waiter in waiters]
        assert len(taken) == 12
        assert set(taken) <= {0, 1, 2}
        assert locks._lines == {}
    finally:
        other.close()


@pytest.mark.asyncio
async def test_a_segment_granted_to_a_waiter_cancelled_as_it_leaves_the_other_lines_is_freed():
    import asyncio

    import tumbler.aio
    from tumbler.testing.conformance.compat import aeventually

    holder = await tumbler.aio.connect("memory://lock-layer-cancel")
    waiter = await tumbler.aio.connect("memory://lock-layer-cancel")
    try:
        held = holder.segmented(NAME, 2)
        holds = []
        for _ in range(2):
            assert await held.acquire(timeout=0)
            holds.append(held.hold)
        task = asyncio.ensure_future(waiter.segmented(NAME, 2).acquire())

        async def queued_on_both() -> bool:
            return [(await holder.status(n)).waiters for n in held.segment_names] == [1, 1]

        await aeventually(queued_on_both, "the waiter is in both lines")
        leaving = asyncio.Event()
        go_on = asyncio.Event()
        release_entry = waiter._gate.release_entry

        async def slow_release_entry(name: str, owner: str) -> bool:
            leaving.set()  # the first call: the waiter leaves the other segment's line
            await go_on.wait()
            return await release_entry(name, owner)

        waiter._gate.release_entry = slow_release_entry  # type: ignore[method-assign]
        freed = holds[0]
        await freed.release()
        await asyncio.wait_for(leaving.wait(), 30)
        task.cancel()
        go_on.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the segment it was granted is not kept by a hold nobody got
        assert (await holder.status(freed.name)).holders == ()
        assert waiter._live == {}
    finally:
        await waiter.close()
        await holder.close()
