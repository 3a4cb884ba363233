"""``ashield``: the asyncio seam that lets a release run to its end when its caller is
cancelled. Its work runs as a task of its own (so that a timeout or a cancellation check inside
it concerns the work, not the caller), whether it finishes at once or has to wait."""

from __future__ import annotations

import asyncio

import pytest

from tumbler._acompat import ashield

pytestmark = pytest.mark.asyncio


async def test_a_call_that_needs_no_wait_gives_its_result_and_runs_as_its_own_task():
    caller = asyncio.current_task()

    async def call() -> object:
        return asyncio.current_task()

    ran_in = await ashield(call())
    assert ran_in is not None
    assert ran_in is not caller


async def test_the_calls_error_reaches_the_caller():
    async def call() -> None:
        raise LookupError("refused")

    with pytest.raises(LookupError, match="refused"):
        await ashield(call())


async def test_a_cancelled_caller_is_told_at_once_and_the_call_runs_to_its_end():
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str] = loop.create_future()
    started = asyncio.Event()
    finished: asyncio.Future[str] = loop.create_future()

    async def call() -> str:
        started.set()
        result = await answer
        finished.set_result(result)
        return result

    caller = asyncio.ensure_future(ashield(call()))
    await started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert not finished.done()  # the caller was told before the call could end
    answer.set_result("released")
    assert await asyncio.wait_for(finished, 60) == "released"


async def test_a_call_that_waits_gives_its_result_to_the_caller():
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[int] = loop.create_future()

    async def call() -> int:
        return await answer

    loop.call_soon(answer.set_result, 7)
    assert await ashield(call()) == 7
