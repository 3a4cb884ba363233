"""The bench's view of ZooKeeper: kazoo's own ``Lock`` recipe beside tumbler's rows, the
floor, the server's request counter, and the server the bench starts.

The bench's ZooKeeper fsyncs every transaction (``forceSync=yes``), as a production server
does: a grant's create is fsynced, and that dominates every figure. The test targets leave it
off, for speed, so the bench starts its own under the target's name. kazoo is imported in
``open()``, inside the bench's workers: importing this module does not need it.

kazoo's ``Lock`` is the reference of the uncontended table's ``x peer`` column.

The floor (``zk-floor-sync``, ``zk-floor-async``): the three requests a lock on ZooKeeper
cannot do without, as raw kazoo calls on one client: acquire creates an ephemeral sequential
node (returning its stat, whose czxid a fencing token needs) and reads the lock node's
children in the same round trip (sent together: the server answers a session's requests in
order, so the read sees the create), and release deletes the node. It excludes nothing. The
blocking one waits on kazoo's results, the asyncio one awaits them on the loop the way
tumbler's asyncio backend does (``kazoo_aresult``); the ``x floor`` column divides by the one
of the row's flavour.

The server's request counter (``request_count``) is the ``Received`` figure of the ``srvr``
four-letter word (packets received from clients, heartbeats included), summed over the
URL's hosts: every client of the servers counts, so it means something only while the
bench's client is the one at work there.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from tumbler.testing.bench import (
    AsyncContender,
    AsyncSession,
    ElectionPeer,
    StoreBench,
    SyncContender,
    SyncSession,
    TimeoutLockSession,
)
from tumbler.testing.targets import TestTarget

__all__ = ["BENCH", "KazooLock", "ZooKeeperBench", "ZooKeeperFloor", "ZooKeeperFloorAsync"]

#: how long a reading of the server's counter may take before the bench goes without it
_READING_TIMEOUT = 5.0


@dataclass(frozen=True)
class KazooLock(SyncContender):
    """kazoo's own ``Lock`` recipe on the same ensemble as tumbler's rows."""

    name: ClassVar[str] = "kazoo-Lock"
    mechanism: ClassVar[str] = (
        "kazoo client.Lock(path): ephemeral sequential node, watch on the predecessor "
        "(its own node names: not shared with tumbler's locks)"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("kazoo", "kazoo"),)

    def open(self, lock_name: str) -> SyncSession:
        config = _config(self.url)
        client = _started_client(config)
        lock = client.Lock(f"{config.base}/kazoo-{lock_name}")

        def close() -> None:
            _stop(client)

        return TimeoutLockSession(lock, lock_name, self.options.timeout, close)


def _config(url: str) -> Any:
    from tumbler._url import parse_url
    from tumbler.backends.zookeeper.common import parse_config

    return parse_config(parse_url(url))


def _started_client(config: Any) -> Any:
    """A plain kazoo client of the URL's ensemble (kazoo's defaults but the session timeout),
    connected."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=config.connect_string, timeout=config.session_timeout)
    client.start(timeout=config.connect_timeout)
    return client


def _stop(client: Any) -> None:
    client.stop()
    client.close()


class _FloorSession:
    def __init__(self, client: Any, path: str, timeout: float) -> None:
        self._client = client
        self._path = path
        self._timeout = timeout
        self._node: str | None = None

    def acquire(self) -> None:
        from tumbler.backends.zookeeper.common import kazoo_result

        creating = self._client.create_async(
            f"{self._path}/floor-", ephemeral=True, sequence=True, include_data=True
        )
        listing = self._client.get_children_async(self._path)
        self._node, _stat = kazoo_result(creating, self._timeout)
        kazoo_result(listing, self._timeout)

    def release(self) -> None:
        from tumbler.backends.zookeeper.common import kazoo_result

        assert self._node is not None, "released before acquired"
        kazoo_result(self._client.delete_async(self._node), self._timeout)
        self._node = None

    def close(self) -> None:
        _stop(self._client)


@dataclass(frozen=True)
class ZooKeeperFloor(SyncContender):
    """The three raw requests of a ZooKeeper lock pair on one blocking kazoo client."""

    name: ClassVar[str] = "zk-floor-sync"
    mechanism: ClassVar[str] = (
        "floor: create ephemeral sequential (with its stat) and get_children sent together as "
        "acquire, delete as release, on one kazoo client; excludes nothing, timed uncontended "
        "only"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("kazoo", "kazoo"),)
    floor: ClassVar[bool] = True

    def open(self, lock_name: str) -> SyncSession:
        config = _config(self.url)
        client = _started_client(config)
        try:
            path = f"{config.base}/zk-floor-{lock_name}"
            client.ensure_path(path)
        except BaseException:
            _stop(client)
            raise
        return _FloorSession(client, path, config.request_timeout)


class _AsyncFloorSession:
    def __init__(self, client: Any, path: str, timeout: float) -> None:
        self._client = client
        self._path = path
        self._timeout = timeout
        self._node: str | None = None

    async def acquire(self) -> None:
        from tumbler.backends.zookeeper.common import kazoo_aresult

        creating = self._client.create_async(
            f"{self._path}/floor-", ephemeral=True, sequence=True, include_data=True
        )
        listing = self._client.get_children_async(self._path)
        self._node, _stat = await kazoo_aresult(creating, self._timeout)
        await kazoo_aresult(listing, self._timeout)

    async def release(self) -> None:
        from tumbler.backends.zookeeper.common import kazoo_aresult

        assert self._node is not None, "released before acquired"
        await kazoo_aresult(self._client.delete_async(self._node), self._timeout)
        self._node = None

    async def close(self) -> None:
        from tumbler.backends.zookeeper.common import arun_blocking

        await arun_blocking(_stop, self._client)


@dataclass(frozen=True)
class ZooKeeperFloorAsync(AsyncContender):
    """The same, awaited on an asyncio loop."""

    name: ClassVar[str] = "zk-floor-async"
    mechanism: ClassVar[str] = (
        "floor: the same, kazoo's results awaited on an asyncio loop as tumbler's asyncio "
        "backend awaits them"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("kazoo", "kazoo"),)
    floor: ClassVar[bool] = True

    async def open(self, lock_name: str) -> AsyncSession:
        from tumbler.backends.zookeeper.common import arun_blocking

        config = _config(self.url)
        client = await arun_blocking(_started_client, config)
        try:
            path = f"{config.base}/zk-floor-{lock_name}"
            await arun_blocking(client.ensure_path, path)
        except BaseException:
            await arun_blocking(_stop, client)
            raise
        return _AsyncFloorSession(client, path, config.request_timeout)


def _srvr(url: str) -> list[str] | None:
    """The ``srvr`` answer of each of the URL's hosts; None if one cannot be read (down, the
    word not allowed, or no launcher module: the testing extra is missing)."""
    try:
        from tumbler.backends.zookeeper.common import tls_context

        from .server import four_letter_word
    except ImportError:
        return None
    try:
        config = _config(url)
        tls = tls_context(config)
        return [
            four_letter_word(host, port, "srvr", _READING_TIMEOUT, tls)
            for host, port in config.hosts
        ]
    except Exception:  # the bench goes on without the figure
        return None


class _Running:
    def __init__(self, directory: Path) -> None:
        from .server import ZooKeeperServer

        self.server = ZooKeeperServer(directory, force_sync=True).start()
        self._urls = 0

    def fresh_url(self) -> str:
        self._urls += 1
        return self.server.url_for("/bench" if self._urls == 1 else f"/bench-{self._urls}")

    def close(self) -> None:
        self.server.close()


def _lead_with_kazoo(hosts: str, path: str, session: float, led: Any) -> None:
    """A process that leads kazoo's ``Election`` at ``path`` until it is killed."""
    from kazoo.client import KazooClient

    def lead() -> None:
        led.set()
        time.sleep(3600)

    client = KazooClient(hosts=hosts, timeout=session)
    client.start()
    client.Election(path, "doomed").run(lead)


def _kazoo_failovers(url: str, ttl: float, runs: int) -> list[float]:
    """kazoo's ``Election`` on ``url``'s ensemble, its sessions of ``ttl``: the seconds from
    the leader process's SIGKILL to the next leader (a candidate in this process, in line
    before the kill), ``runs`` times."""
    from kazoo.client import KazooClient

    hosts = _config(url).connect_string
    context = multiprocessing.get_context("spawn")
    times = []
    client = KazooClient(hosts=hosts, timeout=ttl)
    client.start()
    try:
        for run in range(runs):
            path = f"/bench-failover-kazoo-{os.getpid()}-{run}"
            led = context.Event()
            leader = context.Process(target=_lead_with_kazoo, args=(hosts, path, ttl, led))
            leader.start()
            if not led.wait(60):
                leader.kill()
                raise RuntimeError("kazoo's leader process did not lead")
            election = client.Election(path, "next")
            killed: list[float] = []

            def kill_when_queued(
                election: Any = election, leader: Any = leader, killed: list[float] = killed
            ) -> None:
                while len(election.contenders()) < 2:
                    time.sleep(0.005)
                killed.append(time.monotonic())
                os.kill(leader.pid, signal.SIGKILL)
                leader.join()

            killer = threading.Thread(target=kill_when_queued, daemon=True)
            killer.start()
            elected: list[float] = []
            election.run(lambda elected=elected: elected.append(time.monotonic()))
            killer.join()
            times.append(elected[0] - killed[0])
    finally:
        _stop(client)
    return times


@dataclass(frozen=True)
class ZooKeeperBench(StoreBench):
    """kazoo's ``Lock``, the floors, ``srvr`` for the server's figures, and the fsynced
    server."""

    def request_count(self, url: str) -> int | None:
        """The packets the URL's servers have received from clients (``srvr``'s
        ``Received``), summed over its hosts. A reading is one such packet on each server,
        counted by the next reading: two readings in a row differ by the number of hosts."""
        answers = _srvr(url)
        if answers is None:
            return None
        total = 0
        for answer in answers:
            match = re.search(r"^Received: (\d+)$", answer, re.MULTILINE)
            if match is None:
                return None
            total += int(match[1])
        return total

    def version(self, url: str) -> str | None:
        """``ZooKeeper 3.8.0``, from the first host's ``srvr``."""
        answers = _srvr(url)
        if not answers:
            return None
        match = re.search(r"^Zookeeper version: ([\w.]+)", answers[0], re.MULTILINE)
        return None if match is None else f"ZooKeeper {match[1]}"

    def election_peers(self, url: str) -> Sequence[ElectionPeer]:
        """kazoo's ``Election`` recipe, what a ZooKeeper user would otherwise run."""
        if urlsplit(url).scheme.lower() not in self.schemes:
            return ()
        return (ElectionPeer("kazoo Election", lambda ttl, runs: _kazoo_failovers(url, ttl, runs)),)

    def lease_url(self, url: str, ttl: float) -> str:
        """``url`` with a session timeout of ``ttl``: a holder's nodes go with its session."""
        return f"{url}{'&' if '?' in url else '?'}session_timeout={ttl:g}"


BENCH = ZooKeeperBench(
    peers=(KazooLock,),
    # zookeepers:// needs the TLS files the peer is not given
    schemes=("zookeeper",),
    targets=(TestTarget("zookeeper", _Running),),
    floors=(ZooKeeperFloor, ZooKeeperFloorAsync),
    reference=KazooLock.name,
)
