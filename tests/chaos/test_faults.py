"""The nemesis's aim: which node a ``minority`` fault kills, which member's proxy a
``member-blackhole`` fault cuts, and whether a fault hit its hold; which Redlock masters a
``minority`` or ``minority-pause`` fault takes out; when a kill of a worker ends.

The pool's state is built by hand: each worker slot is a real process holding a real kazoo
session on the ensemble member the test chooses, and its history file says what the harness
would have read from a worker (a grant, its read, a long think ahead). The ensemble is the
harness's own deployment (:func:`tumbler.torture.backends.deployments`), so the fault really
kills and restarts a member.
"""

from __future__ import annotations

import contextlib
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.servers.fixtures import server_unavailable
from tumbler.testing.backends.redlock.server import RedlockMasters
from tumbler.torture.backends import Deployment, Settings, SetupError, deployments
from tumbler.torture.check import FaultRecord
from tumbler.torture.faults import Nemesis
from tumbler.torture.history import HistoryTail, HistoryWriter
from tumbler.torture.pool import WorkerPool, WorkerSlot

#: the lease the nemesis sizes its waits and outages by: short, so a miss costs little time
TTL = 0.2
#: how long the hand-made holders think after their read: the whole test
THINK = 600.0

_SESSION = """
import sys
from kazoo.client import KazooClient

client = KazooClient(hosts=sys.argv[1], timeout=10)
client.start(20)
print("connected", flush=True)
sys.stdin.read()  # until the test closes the pipe
"""


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[Deployment]:
    """The harness's 3-member ZooKeeper deployment, every member serving."""
    spec = deployments()["zookeeper-ensemble"]
    reason = spec.unavailable()
    if reason is not None:
        server_unavailable(f"no ZooKeeper ensemble: {reason}")
    try:
        deployment = spec.start(tmp_path / "servers", Settings(ttl=1.0))
    except SetupError as error:
        server_unavailable(f"cannot start a ZooKeeper ensemble: {error}")
    yield deployment
    deployment.close()


class _Pool:
    """A :class:`WorkerPool` whose slots the test fills by hand."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.pool = WorkerPool(
            url="zookeeper://unused",
            lock="torture-test",
            resource=directory / "resource.sock",
            directory=directory,
            count=0,
            ttl=TTL,
            think=0.02,
            acquire_timeout=1.0,
            idle=0.0,
            seed=0,
        )
        self.writers: dict[str, HistoryWriter] = {}

    def session_on(self, client: str, port: int) -> WorkerSlot:
        """A slot whose process has a ZooKeeper session on the member at ``port`` only."""
        process = subprocess.Popen(
            [sys.executable, "-c", _SESSION, f"127.0.0.1:{port}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # kazoo's log of the outages the test causes
        )
        history = self.directory / f"{client}.jsonl"
        slot = WorkerSlot(len(self.pool.slots), 0, client, process, history, HistoryTail(history))
        self.pool.slots.append(slot)
        assert process.stdout is not None
        assert process.stdout.readline() == b"connected\n"
        self.writers[client] = HistoryWriter(history)
        self.event(client, "start", pid=process.pid)
        return slot

    def event(self, who: str, ev: str, **fields: Any) -> None:
        self.writers[who].write(ev, **fields)

    def long_hold(self, client: str, acq: str) -> None:
        """``client`` is granted ``acq`` and reads: it thinks for :data:`THINK` from now."""
        self.event(client, "acquire", acq=acq)
        self.event(client, "grant", acq=acq, token=1)
        t0 = time.monotonic_ns()
        self.event(client, "op", acq=acq, kind="read", t0=t0, held=True, outcome="ok", think=THINK)

    def close(self) -> None:
        for slot in self.pool.slots:
            assert slot.process.stdin is not None
            assert slot.process.stdout is not None
            slot.process.stdin.close()
            slot.process.wait(10)
            slot.process.stdout.close()
            slot.tail.close()
        for writer in self.writers.values():
            writer.close()


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[_Pool]:
    made = _Pool(tmp_path)
    yield made
    made.close()


def _nemesis(deployment: Deployment, pool: _Pool) -> Nemesis:
    return Nemesis(deployment, pool.pool, ttl=TTL, rng=random.Random(7))


def _member_pids(deployment: Any) -> list[int | None]:
    """Each member's process id: a member killed and started again has a new one."""
    return [member.pid for member in deployment.ensemble.members]


def _wait_serving(deployment: Deployment, slot: WorkerSlot, node: int) -> None:
    """Until the slot's session is connected to ``node`` again (after that node's outage)."""
    deadline = time.monotonic() + 30
    while deployment.node_serving(slot.process.pid) != node:
        assert time.monotonic() < deadline, f"{slot.client} did not reconnect to node {node}"
        time.sleep(0.05)  # kazoo's reconnection: nothing to wait on from here


def _ports(deployment: Deployment) -> tuple[int, list[int]]:
    """The leader's client port and the followers'."""
    leader = deployment.leader()
    assert leader is not None
    ports = deployment.node_ports()
    return ports[leader], [port for index, port in enumerate(ports) if index != leader]


@pytest.mark.timeout(120)
def test_a_minority_fault_kills_no_follower_when_no_holder_is_on_one(
    ensemble: Deployment, pool: _Pool
) -> None:
    """Every holder's session is on the leader: a follower's loss hits none of them (their
    clients notice nothing), so there is nothing for the fault to hit, and no node dies.
    It used to kill a follower anyway, named no hold, and the round proved nothing."""
    leader_port, _ = _ports(ensemble)
    for client in ("w0", "w1"):
        pool.session_on(client, leader_port)
        pool.long_hold(client, f"{client}.1")
    members = _member_pids(ensemble)
    record = _nemesis(ensemble, pool).inject("minority")
    assert (record, _member_pids(ensemble)) == (None, members)


@pytest.mark.timeout(180)
def test_a_minority_fault_kills_the_follower_the_holder_is_on(
    ensemble: Deployment, pool: _Pool
) -> None:
    """The holder on a follower is the target, whoever else holds on the leader; the fault
    has landed only if that hold was still going on when the follower died."""
    leader_port, followers = _ports(ensemble)
    pool.session_on("w0", leader_port)
    pool.long_hold("w0", "w0.1")
    holder = followers[1]
    slot = pool.session_on("w1", holder)
    pool.long_hold("w1", "w1.1")
    nemesis = _nemesis(ensemble, pool)
    node = ensemble.node_ports().index(holder)
    members = _member_pids(ensemble)

    record = nemesis.inject("minority")
    assert record is not None
    assert record.target == f"node {node} (the holder's)"
    restarted = [index for index, pid in enumerate(_member_pids(ensemble)) if pid != members[index]]
    assert restarted == [node]
    assert (record.client, record.acq) == ("w1", "w1.1")
    assert nemesis.landed

    # the same hold, its work over before the fault (on_lost ran): the fault misses it
    pool.event("w1", "work_end", acq="w1.1", why="lost")
    _wait_serving(ensemble, slot, node)
    record = nemesis.inject("minority")
    assert record is not None
    assert (record.client, record.acq) == ("w1", "w1.1")
    assert not nemesis.landed


def test_the_pool_knows_whether_a_hold_is_still_at_work(pool: _Pool, tmp_path: Path) -> None:
    """A worker records the end of its work before it releases: until that line, whatever
    the fault began before, the release came after it."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    history = tmp_path / "w0.jsonl"
    slot = WorkerSlot(0, 0, "w0", process, history, HistoryTail(history))
    with HistoryWriter(history) as writer:
        assert not pool.pool.holding(slot, "w0.1")  # nothing on file yet
        writer.write("acquire", acq="w0.1")
        assert not pool.pool.holding(slot, "w0.1")  # waiting
        writer.write("grant", acq="w0.1", token=1)
        assert pool.pool.holding(slot, "w0.1")
        writer.write("op", acq="w0.1", kind="read", t0=0, held=True, outcome="ok", think=1.0)
        assert pool.pool.holding(slot, "w0.1")
        assert not pool.pool.holding(slot, "w0.2")
        writer.write("op", acq="w0.1", kind="write", t0=0, held=True, outcome="ok")
        assert pool.pool.holding(slot, "w0.1")
        writer.write("work_end", acq="w0.1", why="done")
        assert not pool.pool.holding(slot, "w0.1")
        writer.write("release", acq="w0.1", t0=0, outcome="ok")
        assert not pool.pool.holding(slot, "w0.1")
        writer.write("acquire", acq="w0.2")
        writer.write("grant", acq="w0.2", token=2)
        assert pool.pool.holding(slot, "w0.2")
    slot.tail.close()


@pytest.mark.timeout(120)
def test_a_minority_round_places_the_workers_on_the_followers(ensemble: Deployment) -> None:
    """A session on the leader is out of a minority fault's reach: in a round of that fault
    the workers' URL names the followers only. Faults that can move the leadership keep the
    whole ensemble in it."""
    _, followers = _ports(ensemble)
    hosts = ",".join(f"127.0.0.1:{port}" for port in followers)
    path_and_options = ensemble.url.split("/", 3)[3]
    assert ensemble.workers_url(["minority"]) == f"zookeeper://{hosts}/{path_and_options}"
    assert ensemble.workers_url(["minority", "kill"]) == ensemble.workers_url(["minority"])
    for kinds in (["leader"], ["minority", "leader"], ["restart"], ["kill"], []):
        assert ensemble.workers_url(kinds) == ensemble.url


@pytest.mark.timeout(120)
def test_a_member_blackhole_cuts_off_the_member_the_holder_is_on(
    ensemble: Deployment, pool: _Pool
) -> None:
    """Each member has a proxy of its own, named by the workers' URL in a round of the fault;
    the fault cuts the proxy of the member the long holder's session goes through, the
    leader's too (the member goes on with its peers)."""
    proxies = [proxy.port for proxy in ensemble.member_proxies]
    assert len(proxies) == 3
    hosts = ",".join(f"127.0.0.1:{port}" for port in proxies)
    path_and_options = ensemble.url.split("/", 3)[3]
    assert ensemble.workers_url(["member-blackhole"]) == f"zookeeper://{hosts}/{path_and_options}"
    assert ensemble.workers_url(["minority", "member-blackhole"]) == ensemble.workers_url(
        ["member-blackhole"]
    )
    leader = ensemble.leader()
    assert leader is not None
    slot = pool.session_on("w0", proxies[leader])
    assert ensemble.node_serving(slot.process.pid) == leader
    pool.long_hold("w0", "w0.1")
    nemesis = _nemesis(ensemble, pool)

    record = nemesis.inject("member-blackhole")
    assert record is not None
    assert record.target == f"node {leader}'s proxy (the holder's)"
    assert (record.client, record.acq) == ("w0", "w0.1")
    assert nemesis.landed


# -- Redlock: every master keeps its own copy of each grant ----------------------------------


@pytest.fixture
def redlock(tmp_path: Path) -> Iterator[Deployment]:
    """The harness's 5-master Redlock deployment, every master serving."""
    spec = deployments()["redlock"]
    reason = spec.unavailable()
    if reason is not None:
        server_unavailable(f"no Redlock masters: {reason}")
    try:
        deployment = spec.start(tmp_path / "servers", Settings(ttl=1.0))
    except SetupError as error:
        server_unavailable(f"cannot start the Redlock masters: {error}")
    yield deployment
    deployment.close()


def _holder(pool: _Pool, client: str) -> WorkerSlot:
    """A slot whose process does nothing (a Redlock fault needs no session to aim at), in a
    long hold."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    history = pool.directory / f"{client}.jsonl"
    slot = WorkerSlot(len(pool.pool.slots), 0, client, process, history, HistoryTail(history))
    pool.pool.slots.append(slot)
    pool.writers[client] = HistoryWriter(history)
    pool.event(client, "start", pid=process.pid)
    pool.long_hold(client, f"{client}.1")
    return slot


def _masters(deployment: Any) -> RedlockMasters:
    """The deployment's launcher of the masters."""
    masters: RedlockMasters = deployment.masters
    return masters


def _stopped_meanwhile(deployment: Deployment, run: Callable[[], Any]) -> tuple[Any, set[int]]:
    """``run()``'s result, and the masters seen stopped (SIGSTOP) while it ran."""
    masters = _masters(deployment).masters
    seen: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for index, master in enumerate(masters):
                with contextlib.suppress(psutil.Error, TypeError):
                    if psutil.Process(master.pid).status() == psutil.STATUS_STOPPED:
                        seen.add(index)
            done.wait(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        return run(), seen
    finally:
        done.set()
        watcher.join()


@pytest.mark.timeout(60)
def test_a_minority_pause_stops_up_to_two_masters_past_the_lease(
    redlock: Deployment, pool: _Pool
) -> None:
    """Up to two of the five masters hang (SIGSTOP) for longer than a lease, then go on;
    every master keeps the lock's grant, so the fault reaches the hold there is."""
    _holder(pool, "w0")
    nemesis = _nemesis(redlock, pool)
    masters = _masters(redlock)
    pids = [master.pid for master in masters.masters]
    stopped_sets = []
    for _ in range(3):
        record, stopped = _stopped_meanwhile(redlock, lambda: nemesis.inject("minority-pause"))
        assert record is not None
        assert record.kind == "minority-pause"
        assert (record.client, record.acq) == ("w0", "w0.1")
        assert nemesis.landed
        assert 1 <= len(stopped) <= 2, stopped
        assert record.target == (
            f"node {min(stopped)}"
            if len(stopped) == 1
            else f"nodes {', '.join(map(str, sorted(stopped)))}"
        )
        assert (record.t1 - record.t0) / 1e9 >= 1.5 * TTL
        stopped_sets.append(stopped)
    # resumed, not restarted: the same processes, every one serving
    assert [master.pid for master in masters.masters] == pids
    assert not any(masters.paused(index) for index in range(5))
    # the faults take turns round the masters
    assert len(set().union(*stopped_sets)) > max(len(s) for s in stopped_sets)


@pytest.mark.timeout(60)
def test_a_minority_fault_restarts_up_to_two_masters_empty(
    redlock: Deployment, pool: _Pool
) -> None:
    """Up to two masters crash and come back without their keys; the others keep theirs."""
    _holder(pool, "w0")
    masters = _masters(redlock)
    for index in range(5):
        masters.client(index).set("tumbler:before", "1")
    pids = [master.pid for master in masters.masters]
    record = _nemesis(redlock, pool).inject("minority")
    assert record is not None
    assert (record.client, record.acq) == ("w0", "w0.1")
    restarted = [i for i, master in enumerate(masters.masters) if master.pid != pids[i]]
    assert 1 <= len(restarted) <= 2
    for index in range(5):
        kept = masters.client(index).get("tumbler:before")
        assert kept == (None if index in restarted else b"1"), index


def test_only_network_rounds_reach_the_masters_through_the_proxies(redlock: Deployment) -> None:
    """One proxy per master, named by the workers' URL in rounds that fault the network; the
    other rounds' workers, and the harness itself, reach the masters directly."""
    masters = _masters(redlock)
    direct = ",".join(f"127.0.0.1:{master.port}" for master in masters.masters)
    proxied = ",".join(f"127.0.0.1:{proxy.port}" for proxy in redlock.proxies)
    assert len(redlock.proxies) == 5
    assert redlock.admin_url.startswith(f"redlock://{direct}?")
    assert redlock.workers_url(["net-cut", "net-drop"]).startswith(f"redlock://{proxied}?")
    for kinds in (["kill"], ["minority"], ["minority-pause"], ["restart"], []):
        assert redlock.workers_url(kinds) == redlock.admin_url
    assert redlock.isolatable() is None  # several addresses: no proxy of each worker's own


@dataclass
class _ReapedPool(WorkerPool):
    """Notes when each worker it kills has been reaped, and puts no new one in its place."""

    reaped: list[int] = field(default_factory=list)

    def kill(self, slot: WorkerSlot) -> str | None:
        acq = super().kill(slot)
        self.reaped.append(time.monotonic_ns())
        return acq

    def replace(self, slot: WorkerSlot) -> None:
        self.retired.append(slot)


@pytest.mark.parametrize("kind", ["kill", "kill-waiter"])
def test_a_kill_ends_once_its_worker_is_dead(tmp_path: Path, kind: str) -> None:
    """The checker measures from a kill's end (the next release must let the next waiter in
    within the dead-waiter bound; recovery): that end is the worker's death, when the kernel
    has closed its connections, not the signal, which a loaded machine can act on much later
    (a release meanwhile still reaches the dying waiter, as Redis's wake-up count did)."""
    pool = _ReapedPool(
        url="memory://", lock="torture-test", resource=tmp_path / "resource.sock",
        directory=tmp_path, count=0, ttl=TTL, think=0.02, acquire_timeout=1.0, idle=0.0, seed=0,
    )  # fmt: skip
    writers = []
    for client, state in (("w0", "holding"), ("w1", "waiting")):
        process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                   stdin=subprocess.PIPE)  # fmt: skip
        history = tmp_path / f"{client}.jsonl"
        slot = WorkerSlot(len(pool.slots), 0, client, process, history, HistoryTail(history))
        pool.slots.append(slot)
        writer = HistoryWriter(history)
        writers.append(writer)
        writer.write("start", pid=process.pid)
        writer.write("acquire", acq=f"{client}.1")
        if state == "holding":
            writer.write("grant", acq=f"{client}.1", token=1)
            t0 = time.monotonic_ns()
            writer.write("op", acq=f"{client}.1", kind="read", t0=t0, held=True, outcome="ok",
                         think=THINK)  # fmt: skip
    try:
        nemesis = Nemesis(Deployment("memory://", "memory://"), pool, ttl=TTL, rng=random.Random(7))
        record: FaultRecord | None = nemesis.inject(kind)
        assert record is not None
        assert record.client == ("w0" if kind == "kill" else "w1")
        assert record.t0 < pool.reaped[0] <= record.t1
    finally:
        for slot in [*pool.slots, *pool.retired]:
            slot.process.kill()
            slot.process.wait()
            assert slot.process.stdin is not None
            slot.process.stdin.close()
            slot.tail.close()
        for writer in writers:
            writer.close()


def test_an_ensembles_account_tells_each_members_answer_and_session_directly_and_by_proxy(
    ensemble: Deployment,
) -> None:
    # the account of a round that could not start tells a member that does not answer from a
    # proxy that does not pass its answers on
    assert ensemble.member_proxies, "the fault proxy is installed with the test dependencies"
    account = ensemble.account().split("; ")
    assert len(account) == 3, account
    for part in account:
        assert re.fullmatch(
            r"node \d: 'Mode: (leader|follower)' in .*, a session in .*, through its proxy "
            r"'Mode: (leader|follower)' in .*, a session in .*",
            part,
        ), part
    ensemble.member_proxies[1].cut()
    try:
        cut = ensemble.account().split("; ")[1]
    finally:
        ensemble.member_proxies[1].heal()
    assert re.fullmatch(
        r"node 1: 'Mode: \w+' in .*, a session in .*, through its proxy no answer .*, "
        r"no session in .*",
        cut,
    ), cut
