"""What one grant attempt and one release cost on etcd, by the length of the line, and what
idle waiters cost the server.

    python bench/etcd_line_cost.py [--waiters 0,1000,5000] [--repeat 50] [--idle 200]

For each N, the line of one lock name is written by hand (a plain gateway client): a reader
holds the lock, and N writers wait behind it (their keys on a lease of the run's, their client
not listening, as a line that holds up the lock). Then, through the backend's own calls
(``try_grant``, ``release``), measured one call at a time, with the CPU time the etcd server
spent on them (``/proc/PID/stat``, divided by the calls):

- grant (mutex): a single try of a writer, refused (its key is put, the line read, the key
  deleted);
- grant (read): a single try of a reader, refused (the writers are ahead);
- new waiter: a writer's first try that queues (its key put, the line read, the key moved to
  the waiters' lease);
- release: that waiter leaves (a guarded deletion, as a holder's release is).

Then ``--idle`` waiters, each of its own asyncio client, wait on one held lock for 10 s,
and the etcd server's CPU over those 10 s is printed, as a share of one core.

A throwaway etcd on free loopback ports (Debian's etcd-server). Nothing is asserted (see
bench/README.md). To compare two versions of tumbler, run it with ``PYTHONPATH`` naming the
other's ``src``.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest
from tumbler.backends.etcd import common, opener
from tumbler.backends.etcd._sync.gateway import Gateway
from tumbler.backends.etcd.wire import put
from tumbler.backends.kit.owners import owner_hash
from tumbler.testing.backends.etcd.server import EtcdServer

NAME = "crowded"
#: how long the idle waiters wait while the server's CPU is counted
IDLE_SECONDS = 10.0


def _request(owner: str, shared: bool, queue: bool = False) -> GrantRequest:
    return GrantRequest(NAME, owner, shared, 0 if shared else 1, True, 30.0, "bench", queue)


def _key(prefix: bytes, owner: str, exclusive: bool, turn: int) -> bytes:
    """An entry's key as the tumbler being measured lays it out (by turn and kind, by kind,
    or by owner alone); ``turn``: the revision its transaction makes."""
    parameters = inspect.signature(common.entry_key).parameters
    if "seq" in parameters:
        return common.entry_key(prefix, NAME, owner_hash(owner), exclusive, turn)
    if "exclusive" in parameters:
        return common.entry_key(prefix, NAME, owner_hash(owner), exclusive=exclusive)  # type: ignore[call-arg]
    return common.entry_key(prefix, NAME, owner_hash(owner))  # type: ignore[call-arg]


def _cpu(pid: int) -> float:
    """Seconds of CPU process ``pid`` has used."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(server: EtcdServer, waiters: int, repeat: int) -> dict[str, str]:
    url = f"etcd://{server.host}:{server.port}/bench-{uuid.uuid4().hex[:8]}"
    config = common.parse_config(parse_url(url))
    raw = Gateway([server.client_url])
    backend = opener.open_sync(parse_url(url))
    pid = server.pids()[0]
    try:
        lease, _ttl = raw.grant_lease(3600)
        holder = json.dumps({"holder": "bench", "kind": "read", "lease_ttl": 10}).encode()
        writer = json.dumps({"holder": "bench", "kind": "lock", "lease_ttl": 10}).encode()
        raw.txn(
            [], [put(_key(config.prefix, "holder", False, raw.revision + 1), holder, lease)], []
        )
        for start in range(0, waiters, 100):
            turn = raw.revision + 1
            raw.txn(
                [],
                [
                    put(_key(config.prefix, f"writer{i}", True, turn), writer, lease)
                    for i in range(start, min(waiters, start + 100))
                ],
                [],
            )
        figures = {
            "grant (mutex)": _calls(
                lambda i: backend.try_grant(_request(f"w{i}", False)), repeat, pid
            ),
            "grant (read)": _calls(
                lambda i: backend.try_grant(_request(f"q{i}", True)), repeat, pid
            ),
            "new waiter": _calls(
                lambda i: backend.try_grant(_request(f"n{i}", False, True)), repeat, pid
            ),
            "release": _calls(lambda i: backend.release(NAME, f"n{i}"), repeat, pid),
        }
        raw.revoke(lease)
        return figures
    finally:
        backend.close()
        raw.close()


def _calls(call: Callable[[int], Any], repeat: int, pid: int) -> str:
    times = []
    cpu = _cpu(pid)
    for i in range(repeat):
        start = time.perf_counter()
        call(i)
        times.append((time.perf_counter() - start) * 1000)
    server_ms = (_cpu(pid) - cpu) * 1000 / repeat
    return f"{statistics.median(times):7.2f} {server_ms:6.1f}"


async def _idle(server: EtcdServer, waiters: int) -> float:
    """The etcd server's CPU share while ``waiters`` clients wait on a held lock (a client
    sends one waiter of a name to the backend at a time: one client each)."""
    import tumbler.aio

    url = f"etcd://{server.host}:{server.port}/bench-{uuid.uuid4().hex[:8]}"
    pid = server.pids()[0]
    clients = [await tumbler.aio.connect(url) for _ in range(waiters + 1)]
    try:
        held = clients[0].lock(NAME)
        assert await held.acquire()
        tasks = [
            asyncio.create_task(client.lock(NAME).acquire(timeout=IDLE_SECONDS * 6))
            for client in clients[1:]
        ]
        for _ in range(240):  # every waiter in line, or two minutes
            if (await clients[0].status(NAME)).waiters >= waiters:
                break
            await asyncio.sleep(0.5)
        cpu, began = _cpu(pid), time.monotonic()
        await asyncio.sleep(IDLE_SECONDS)
        share = (_cpu(pid) - cpu) / (time.monotonic() - began)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await held.release()
    finally:
        for client in clients:
            await client.close()
    return share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--waiters", default="0,1000,5000")
    parser.add_argument("--repeat", type=int, default=50)
    # etcd's JSON gateway carries every client's calls and watch streams to the server on
    # one connection, which takes at most 250 streams at once: more clients stall
    parser.add_argument("--idle", type=int, default=200, help="idle waiters (0: skip)")
    options = parser.parse_args()
    counts = [int(text) for text in options.waiters.split(",")]
    with tempfile.TemporaryDirectory(prefix="tumbler-bench-") as directory:
        server = EtcdServer(Path(directory) / "etcd")
        server.start()
        try:
            print("etcd: per call, the client's median ms and the server's CPU ms, by waiters")
            print(f"{'call':<15}" + "".join(f"{n:>16,}" for n in counts))
            results = [_measure(server, n, options.repeat) for n in counts]
            for call in results[0]:
                print(f"{call:<15}" + "".join(f"{r[call]:>16}" for r in results))
            if options.idle:
                share = asyncio.run(_idle(server, options.idle))
                print(f"\n{options.idle} idle waiters: etcd used {share:.0%} of a core")
        finally:
            server.close()


if __name__ == "__main__":
    main()
