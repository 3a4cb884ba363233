"""A holder cut off in silence (the connection open, no byte flowing: a dead switch) is told
its hold is lost before the backend can grant the lock to anyone else.

The holder's renewal call then blocks until its bound; ``on_lost`` must not wait for it. Run
on the server backends, through the fault proxy, in both flavours.
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
def test_a_silenced_holder_is_told_before_anyone_else_is_granted(
    server_url: tuple[str, tuple[str, int]], flavour: str
) -> None:
    url, (host, port) = server_url
    events: list[str] = []
    told = threading.Event()

    def lost(_hold: object) -> None:
        events.append("holder told")
        told.set()

    def other_takes_the_lock() -> None:
        with tumbler.connect(url) as other:
            assert other.lock("silenced").acquire(timeout=PATIENCE)
            events.append("other granted")

    with FaultProxy((host, port), seed=11) as proxy:
        cut_url = url.replace(f":{port}/", f":{proxy.port}/", 1)
        if flavour == "sync":
            holder = tumbler.connect(cut_url)
            lock = holder.lock("silenced", ttl=TTL)
            assert lock.acquire()
            assert lock.hold is not None
            lock.hold.on_lost(lost)
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
                proxy.blackhole()
                await asyncio.to_thread(other_takes_the_lock)
                assert await asyncio.to_thread(told.wait, PATIENCE)
                proxy.heal()
                await holder.close()

            asyncio.run(main())
    assert events == ["holder told", "other granted"]
