"""An asyncio client belongs to the event loop it was made on.

Used from another loop (a second ``asyncio.run()``, a test framework's loop per test) its
connections and renewal worker are gone with the first loop: every backend refuses the use
with ``WrongEventLoop`` before anything is granted, rather than granting a lock nobody renews
or failing with a driver's "Event loop is closed".
"""

from __future__ import annotations

import asyncio

import pytest

import tumbler.aio
from tumbler import WrongEventLoop

pytestmark = pytest.mark.tumbler_connection


def test_a_client_refuses_a_second_event_loop_and_grants_nothing(backend_url: str) -> None:
    loop = asyncio.new_event_loop()
    locks = None
    try:
        locks = loop.run_until_complete(tumbler.aio.connect(backend_url))

        async def elsewhere() -> None:
            with pytest.raises(WrongEventLoop):
                await locks.lock("loops", ttl=1.0).acquire(timeout=0)
            with pytest.raises(WrongEventLoop):
                await locks.status("loops")
            with pytest.raises(WrongEventLoop):
                await locks.close()

        asyncio.run(elsewhere())

        async def home() -> None:
            assert (await locks.status("loops")).holders == ()  # nothing was granted

        loop.run_until_complete(home())
    finally:
        if locks is not None:
            # on its own loop, whatever failed: its connections would otherwise outlive the
            # case, and be reported against whichever case the collector next runs in
            loop.run_until_complete(locks.close())
        loop.close()
