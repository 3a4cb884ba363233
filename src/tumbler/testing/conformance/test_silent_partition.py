"""A holder cut off in silence (the connection open, no byte flowing: a dead switch) has
given its hold up before the backend can grant the lock to anyone else, and is told.

The holder's renewal call then blocks until its bound; the loss must not wait for it. What is
exact is the holder's belief: from its local deadline on, ``hold.lost`` is True, and the
backend's lease outlives that deadline, so whoever is granted next finds the holder already
knowing. The ``on_lost`` callback runs in a background worker at that deadline; how soon after
it depends on the machine scheduling the holder's process (a stall longer than the drift
margin lets the other's grant come first), so the case checks that the holder was told, not
by which millisecond. Run on the server backends, through the fault proxy, in both flavours.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

import tumbler
import tumbler.aio
from tumbler._url import parse_url
from tumbler.torture.proxy import FaultProxy

from .compat import PATIENCE
from .plugin import Target

TTL = 2.0
FLAVOURS = ["sync", "async"]

pytestmark = pytest.mark.tumbler_requires("network_exclusion", "single_server")


@pytest.fixture
def server_url(conformance_target: Target, process_backend_url: str) -> tuple[str, tuple[str, int]]:
    single_server = conformance_target.descriptor.single_server
    assert single_server is not None  # required by the module's mark
    server = single_server(parse_url(process_backend_url))
    if server is None:
        pytest.skip(f"the {conformance_target.name} target's URL names more than one server")
    return process_backend_url, server


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_silenced_holder_gives_its_hold_up_before_anyone_else_is_granted(
    server_url: tuple[str, tuple[str, int]], flavour: str
) -> None:
    url, (host, port) = server_url
    told = threading.Event()
    # whether the holder had given its hold up at the moment another client was granted
    gave_up_first: list[bool] = []
    held: list[tumbler.Hold | tumbler.aio.AsyncHold] = []

    def lost(_hold: object) -> None:
        told.set()

    def other_takes_the_lock() -> None:
        with tumbler.connect(url) as other:
            assert other.lock("silenced").acquire(timeout=PATIENCE)
            (hold,) = held
            gave_up_first.append(hold.lost and not hold.held)

    with FaultProxy((host, port), seed=11) as proxy:
        cut_url = url.replace(f":{port}/", f":{proxy.port}/", 1)
        if flavour == "sync":
            holder = tumbler.connect(cut_url)
            lock = holder.lock("silenced", ttl=TTL)
            assert lock.acquire()
            assert lock.hold is not None
            lock.hold.on_lost(lost)
            held.append(lock.hold)
            proxy.blackhole()
            other_takes_the_lock()
            assert told.wait(PATIENCE)
            proxy.heal()
            holder.close()
        else:

            async def main() -> None:
                holder = await tumbler.aio.connect(cut_url)
                lock = holder.lock("silenced", ttl=TTL)
                assert await lock.acquire()
                assert lock.hold is not None
                lock.hold.on_lost(lost)
                held.append(lock.hold)
                proxy.blackhole()
                await asyncio.to_thread(other_takes_the_lock)
                assert await asyncio.to_thread(told.wait, PATIENCE)
                proxy.heal()
                await holder.close()

            asyncio.run(main())
    assert gave_up_first == [True]
    (hold,) = held
    assert hold.lost_reason == "the lease ran out before a renewal succeeded"
