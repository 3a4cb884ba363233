"""Uses of the API that cannot work, refused up front with a clear error."""

from __future__ import annotations

import asyncio
import copy
import pickle

import pytest

import tumbler
import tumbler.aio
from tumbler import WrongEventLoop


@pytest.fixture
def locks():
    client = tumbler.connect("memory://")
    yield client
    client.close()


async def coroutine_function() -> None:
    pass


def generator_function():
    yield


async def async_generator_function():
    yield


class AsyncCallable:
    async def __call__(self) -> None:
        pass


@pytest.mark.parametrize(
    "function", [coroutine_function, generator_function, async_generator_function, AsyncCallable()]
)
def test_blocking_synchronized_refuses_what_it_cannot_hold_the_lock_around(locks, function):
    with pytest.raises(TypeError, match="synchronized"):
        locks.synchronized("job")(function)


@pytest.mark.parametrize(
    "function", [len, generator_function, async_generator_function, lambda: None]
)
def test_asyncio_synchronized_refuses_what_it_cannot_hold_the_lock_around(function):
    async def main() -> None:
        async with await tumbler.aio.connect("memory://") as locks:
            with pytest.raises(TypeError, match="synchronized"):
                locks.synchronized("job")(function)
            # what it is for still works
            decorated = locks.synchronized("job")(AsyncCallable())
            await decorated()

    asyncio.run(main())


def test_a_hold_cannot_be_pickled_or_copied(locks):
    with locks.lock("kept") as hold:
        with pytest.raises(TypeError, match="cannot leave its process"):
            pickle.dumps(hold)
        with pytest.raises(TypeError, match="cannot be copied"):
            copy.copy(hold)
        with pytest.raises(TypeError, match="cannot be copied"):
            copy.deepcopy(hold)
        assert hold.held


def test_an_asyncio_client_is_refused_on_another_event_loop():
    async def make() -> tumbler.aio.AsyncLocks:
        client = await tumbler.aio.connect("memory://loops")
        assert await client.lock("left-held").acquire()
        return client  # not closed: the end of asyncio.run() closes it

    locks = asyncio.run(make())

    async def use() -> None:
        with pytest.raises(WrongEventLoop):
            await locks.lock("elsewhere").acquire()
        with pytest.raises(WrongEventLoop):
            await locks.status("elsewhere")
        async with await tumbler.aio.connect("memory://loops") as fresh:
            assert (await fresh.status("left-held")).holders == ()

    asyncio.run(use())


def test_an_open_asyncio_client_refuses_close_from_another_event_loop():
    async def make() -> tumbler.aio.AsyncLocks:
        return await tumbler.aio.connect("memory://")

    loop = asyncio.new_event_loop()
    try:
        locks = loop.run_until_complete(make())  # the loop stays open: nothing closed it

        async def close_elsewhere() -> None:
            with pytest.raises(WrongEventLoop):
                await locks.close()

        asyncio.run(close_elsewhere())
        loop.run_until_complete(locks.close())
    finally:
        loop.close()
