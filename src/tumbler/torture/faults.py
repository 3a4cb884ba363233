"""The faults the harness injects (the "nemesis"), and the network proxy it injects them with.

Fault kinds (``--faults``):

``kill``
    SIGKILL the worker that holds the lock, between its read and its write. Its lease must
    run out and the lock pass on; its grant is never released.
``pause``
    SIGSTOP the holder between its read and its write for longer than its lease
    (``2 * TTL + 1 s``), then SIGCONT. Meanwhile another worker should be granted the lock; the
    resumed holder sends its write with the old token, which the resource must refuse, and it
    must learn that its hold was lost.
``kill-waiter``
    SIGKILL a worker that has waited in its acquire for a while (its request is in the line)
    while another holds the lock: its entry stays until its own short lease runs out, and the
    line must not stall for longer (on a fair lock, nobody behind it may pass it).
``restart``
    SIGKILL every server of the backend, keep them down for 0.1 to 1.5 TTL, start them again.
``minority``
    SIGKILL one node of a cluster or ensemble, keep it down for 1 to 2 TTL, start it again:
    on a sharded backend (Redis Cluster) the node that stores the lock, on an ensemble the
    follower the session of a worker in a long hold is on (never the leader); with no such
    holder in time there is nothing to hit, and no node is killed. Where every node keeps its
    own copy of each grant (Redlock's masters), up to a minority of them at once (1 or 2 of
    5), taking turns round the nodes.
``minority-pause``
    The same nodes as ``minority``, SIGSTOPped for 1.5 to 2.5 TTL (longer than the lease),
    then SIGCONT: nodes that hang rather than crash. Their connections stay open and
    unanswered, their data stays, and what was sent to them meanwhile is acted on when they
    resume, after leases have run out.
``rolling-loss``
    Where every node keeps its own copy of each grant in memory (Redlock's masters): SIGKILL
    a majority of the nodes one after another, each restarted empty at once and the next
    taken 0.2 to 0.4 TTL later, all within one lease of the holder the fault was aimed at. A
    majority never stops answering, yet a majority forgets the grant: only what keeps a node
    restarted empty out of grants (Redlock's ``restart_delay``, at least the longest lease)
    keeps a second holder out.
``leader``
    The same for the ensemble's current leader.
``leader-pause``
    SIGSTOP the ensemble's current leader for 1.5 to 2.5 TTL, then SIGCONT: a leader that
    hangs rather than crashes, its followers' connections to it open and unanswered, until
    they elect another.
``member-blackhole``
    One member of a cluster unreachable on the network while it keeps running: the clients
    reach each member through a proxy of its own (``Deployment.member_proxies``), and the
    proxy of the member a long holder's client is on (where every node keeps its own copy of
    each grant, Redlock's masters: the next member round the ring) is blackholed both ways
    for 1.5 to 2.5 TTL, past the lease, then healed. Its connections stay open and
    unanswered; the member goes on with its peers, so a majority serves throughout, and a
    client must move to another member before its hold's deadline.
``net-delay``
    Through the proxy: delay every chunk in both directions by 0.05 to 0.25 TTL, with 50 %
    jitter, for 2 TTL.
``net-cut``
    Through the proxy: blackhole both directions for 0.5 to 2.5 TTL, then heal.
``net-drop``
    Through the proxy: pass requests, drop replies (the server acts, the client never hears)
    for 0.5 to 2.5 TTL, then heal.
``net-blip``
    Through the proxy: blackhole both directions for 0.1 to 0.3 TTL, well within a lease, then
    heal (what was held is delivered, late): the moment a switch or a route flaps.
``net-reset``
    Through the proxy: reset every connection (RST) three times, 0.1 TTL apart.
``net-isolate``
    A silent partition of the holder alone: each worker reaches the server through a proxy of
    its own, and the holder's is blackholed for 1.5 to 3 TTL (half the time its connections
    are then reset) while the others go on. Its lease runs out at the server and another
    worker is granted the lock: the holder must have been told (``on_lost``) before that.
``none``
    Nothing: a baseline round.

Every fault is recorded as a :class:`~tumbler.torture.check.FaultRecord` with its start and
end (``time.monotonic_ns()``), what it hit, and the grant it was aimed at (``kill``/``pause``:
the grant the worker held when the signal landed). :attr:`Nemesis.landed` says whether the
last fault certainly hit what it was aimed at, as far as the harness can tell at once, so a
round can inject again until it has (the checker decides from the history alone).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .check import MEMBER_BLACKHOLE, FaultRecord

if TYPE_CHECKING:
    from .backends import Deployment
    from .pool import WorkerPool, WorkerSlot

__all__ = [
    "ALL_FAULTS",
    "CLIENT_FAULTS",
    "FAULT_HELP",
    "HOLDER_FAULTS",
    "MEMBER_FAULTS",
    "MINORITY_FAULTS",
    "NETWORK_FAULTS",
    "PROXY_FAULTS",
    "SERVER_FAULTS",
    "SERVING_PATIENCE",
    "Nemesis",
    "ProxyControl",
    "network_faults_missing",
]

HOLDER_FAULTS = frozenset({"kill", "pause"})
#: faults on the workers that do not aim at the holder
CLIENT_FAULTS = frozenset({"kill-waiter"})
SERVER_FAULTS = frozenset(
    {"restart", "minority", "minority-pause", "rolling-loss", "leader", "leader-pause"}
)
NETWORK_FAULTS = frozenset(
    {"net-delay", "net-cut", "net-drop", "net-blip", "net-reset", "net-isolate"}
)
#: seconds the servers may take to serve again after a fault of theirs (an election, a
#: restart) before the round counts the wait against the client
SERVING_PATIENCE = 60.0
#: faults on one member's own proxy (``Deployment.member_proxies``)
MEMBER_FAULTS = frozenset({MEMBER_BLACKHOLE})
#: the faults that need the fault proxy
PROXY_FAULTS = NETWORK_FAULTS | MEMBER_FAULTS
#: the faults that take out a minority of the nodes (:meth:`Nemesis._minority_nodes`)
MINORITY_FAULTS = frozenset({"minority", "minority-pause"})
ALL_FAULTS = (
    "none",
    "kill",
    "pause",
    "kill-waiter",
    "restart",
    "minority",
    "minority-pause",
    "rolling-loss",
    "leader",
    "leader-pause",
    MEMBER_BLACKHOLE,
    "net-delay",
    "net-cut",
    "net-drop",
    "net-blip",
    "net-reset",
    "net-isolate",
)
FAULT_HELP = {
    "none": "no fault (a baseline)",
    "kill": "SIGKILL the holder inside its critical section",
    "pause": "SIGSTOP the holder for 2 TTL + 1 s, then SIGCONT",
    "kill-waiter": "SIGKILL a worker queued in its acquire while another holds the lock",
    "restart": "SIGKILL every server, restart it",
    "minority": "SIGKILL one node of a cluster/ensemble (the lock's shard, or the holder's "
    "follower), or up to a minority where every node keeps each grant, restart them",
    "minority-pause": "SIGSTOP a minority of nodes (as minority picks them) for longer than "
    "the lease, then SIGCONT",
    "rolling-loss": "SIGKILL a majority of nodes one after another within a lease, each "
    "restarted empty at once (where every node keeps each grant)",
    "leader": "SIGKILL the ensemble's leader, restart it",
    "leader-pause": "SIGSTOP the ensemble's leader past the lease, then SIGCONT",
    MEMBER_BLACKHOLE: "blackhole one member's own proxy past the lease, the member running "
    "on with its peers, then heal",
    "net-delay": "delay both directions with jitter (proxy)",
    "net-cut": "blackhole both directions, then heal (proxy)",
    "net-drop": "pass requests, drop replies, then heal (proxy)",
    "net-blip": "blackhole both directions well within a lease, then heal (proxy)",
    "net-reset": "reset every connection (proxy)",
    "net-isolate": "blackhole the holder's connections only, then heal (its own proxy)",
}

_NS = 1_000_000_000


def network_faults_missing() -> str | None:
    """Why the proxy for network faults is not available, or None."""
    if importlib.util.find_spec("tumbler.torture.proxy") is None:
        return "the fault proxy (tumbler.torture.proxy) is not installed"
    return None


class ProxyControl:
    """The harness's handle on one fault proxy in front of one server.

    Wraps :class:`tumbler.torture.proxy.FaultProxy`, so the faults need only these verbs.
    """

    def __init__(self, proxy: Any) -> None:
        self._proxy = proxy

    @classmethod
    def start(cls, host: str, port: int, seed: int | None = None) -> ProxyControl:
        from .proxy import FaultProxy

        return cls(FaultProxy((host, port), seed=seed).start())

    @property
    def port(self) -> int:
        port: int = self._proxy.port
        return port

    def delay(self, seconds: float, jitter: float) -> None:
        """Delay both directions by ``seconds`` plus or minus ``jitter``."""
        self._proxy.delay(seconds * 1000, jitter * 1000, "both")

    def cut(self) -> None:
        """Blackhole both directions (held bytes are delivered on heal, as TCP would)."""
        self._proxy.cut()

    def drop_replies(self) -> None:
        """Requests pass, replies are discarded for good."""
        self._proxy.drop("downstream")

    def reset(self) -> None:
        """RST every open connection."""
        self._proxy.reset_connections()

    def heal(self) -> None:
        self._proxy.heal()

    def stats(self) -> Any:
        """The proxy's counters (a ``ProxyStats``)."""
        return self._proxy.stats()

    def close(self) -> None:
        self._proxy.stop()


@dataclass(frozen=True)
class _Target:
    """The hold a server or network fault is aimed at."""

    slot: WorkerSlot
    acq: str
    #: the ensemble member the holder's session is on, where that decides what to kill
    node: int | None = None


class Nemesis:
    """Injects one fault at a time into a deployment and its workers, and records it."""

    def __init__(
        self,
        deployment: Deployment,
        pool: WorkerPool,
        *,
        ttl: float,
        rng: random.Random,
        pause: float | None = None,
    ) -> None:
        self.deployment = deployment
        self.pool = pool
        self.ttl = ttl
        self.rng = rng
        #: how long a paused holder stays stopped
        self.pause_seconds = pause if pause is not None else 2 * ttl + 1.0
        self._nodes_hit = 0
        #: the long holder a server or network fault is aimed at
        self._target: _Target | None = None
        #: the target's hold was still going on once the fault had begun
        self._struck = False
        #: whether the last fault injected certainly hit what it was aimed at (see
        #: :meth:`inject`)
        self.landed = False
        self._inject: dict[str, Callable[[], FaultRecord | None]] = {
            "kill": self._kill,
            "pause": self._pause,
            "kill-waiter": self._kill_waiter,
            "restart": self._restart,
            "minority": self._minority,
            "minority-pause": self._minority_pause,
            "rolling-loss": self._rolling_loss,
            "leader": self._leader,
            "leader-pause": self._leader_pause,
            MEMBER_BLACKHOLE: self._member_blackhole,
            "net-delay": self._net_delay,
            "net-cut": self._net_cut,
            "net-drop": self._net_drop,
            "net-blip": self._net_blip,
            "net-reset": self._net_reset,
            "net-isolate": self._net_isolate,
        }

    def inject(self, kind: str) -> FaultRecord | None:
        """Inject one fault of ``kind``; None if there was nothing to hit in time (no holder).

        Server and network faults wait (up to a few leases) for a worker in a long hold, so
        that the fault finds a lease to break, not only idle connections; on an ensemble a
        ``minority`` fault waits for one whose session is on a follower, the node it kills,
        and a ``member-blackhole`` fault for one whose client is on a member it can tell.

        Afterwards :attr:`landed` says whether the fault certainly hit what it was aimed at:
        ``kill`` and ``pause`` a worker that still held its grant when the signal landed; the
        others a hold still going on once the fault had begun (a holder that ended its work
        first was missed: its client may notice nothing), or, for network faults, traffic the
        proxy dropped, held or reset.
        """
        self._target = None
        self._struck = False
        self.landed = False
        if kind not in HOLDER_FAULTS and kind not in CLIENT_FAULTS:
            if kind in MINORITY_FAULTS and self.deployment.node_ports():
                self._target = self._holder_on_a_follower(timeout=3 * self.ttl + 2)
                if self._target is None:
                    return None  # a follower no holder is on: its loss would prove nothing
            elif kind in MEMBER_FAULTS and not self.deployment.holds_on_every_node:
                self._target = self._holder_on_a_member(timeout=3 * self.ttl + 2)
                if self._target is None:
                    return None  # a member no holder is on: cutting it off proves nothing
            else:
                slot = self.pool.find_holder(timeout=3 * self.ttl + 2, long=True)
                if slot is not None and slot.acq is not None:
                    self._target = _Target(slot, slot.acq)
        record = self._inject[kind]()
        if record is not None and kind in SERVER_FAULTS:
            record = self._served_again(record)
        if record is not None:
            if kind in HOLDER_FAULTS:
                self.landed = record.acq is not None
            elif kind in CLIENT_FAULTS:
                self.landed = True  # a waiter killed is a waiter killed
            else:
                self.landed = self._struck or record.hits > 0
        return record

    def _served_again(self, record: FaultRecord) -> FaultRecord:
        """``record`` with when the servers served clients again; marked ``unserved`` if they
        did not within :data:`SERVING_PATIENCE` (the recovery bound then counts from the
        fault's end, and is sure to be exceeded: ``servers-down``, the servers' outage)."""
        why_not = self.deployment.wait_serving(SERVING_PATIENCE)
        if why_not is not None:
            detail = f"{record.detail}; {why_not}".lstrip("; ")
            return dataclasses.replace(record, detail=detail, unserved=True)
        return dataclasses.replace(record, served=time.monotonic_ns())

    def _holder_on_a_follower(self, timeout: float) -> _Target | None:
        """A worker in a long hold whose session is on a follower, and that follower: the
        node whose loss makes its client fail over (the leader's is the ``leader`` fault)."""
        leader = self.deployment.leader()
        if leader is None:
            return None  # an election is under way: which member follows is not known yet
        serving: dict[tuple[int, str | None], int | None] = {}

        def accept(slot: WorkerSlot) -> bool:
            key = (slot.process.pid, slot.acq)  # a client may fail over between holds
            if key not in serving:
                serving[key] = self.deployment.node_serving(slot.process.pid)
            return serving[key] not in (None, leader)

        slot = self.pool.find_holder(timeout=timeout, long=True, accept=accept)
        if slot is None or slot.acq is None:
            return None
        return _Target(slot, slot.acq, serving[(slot.process.pid, slot.acq)])

    def _holder_on_a_member(self, timeout: float) -> _Target | None:
        """A worker in a long hold whose client is on a member the harness can tell (through
        that member's proxy, or directly), and that member, leader or follower alike."""
        serving: dict[tuple[int, str | None], int | None] = {}

        def accept(slot: WorkerSlot) -> bool:
            key = (slot.process.pid, slot.acq)  # a client may move between holds
            if key not in serving:
                serving[key] = self.deployment.node_serving(slot.process.pid)
            return serving[key] is not None

        slot = self.pool.find_holder(timeout=timeout, long=True, accept=accept)
        if slot is None or slot.acq is None:
            return None
        return _Target(slot, slot.acq, serving[(slot.process.pid, slot.acq)])

    def _strike(self) -> None:
        """Called as soon as a fault has begun: whether the hold it was aimed at was still
        going on then. Its worker records the end of its work before it releases, so a hold
        whose work has not ended by now is released, if at all, after the fault began."""
        target = self._target
        self._struck = target is not None and self.pool.holding(target.slot, target.acq)

    def _hit_holder(self, record: FaultRecord) -> FaultRecord:
        """``record`` naming the long holder the fault was aimed at (the checker confirms from
        the history that the fault began during that hold)."""
        if self._target is None:
            return record
        return dataclasses.replace(record, client=self._target.slot.client, acq=self._target.acq)

    def _between(self, low: float, high: float) -> float:
        return self.ttl * self.rng.uniform(low, high)

    # -- holders -----------------------------------------------------------------------------

    def _kill(self) -> FaultRecord | None:
        slot = self.pool.find_holder(timeout=5 * self.ttl + 5)
        if slot is None:
            return None
        client, pid = slot.client, slot.process.pid
        t0 = time.monotonic_ns()
        acq = self.pool.kill(slot)
        # The kill ends when the worker is dead, not when it is signalled: a loaded machine
        # can run its exit (which closes its connections, what a server sees) much later.
        t1 = time.monotonic_ns()
        self.pool.replace(slot)
        return FaultRecord("kill", t0, t1, f"worker {client} pid {pid}", client, acq)

    def _kill_waiter(self) -> FaultRecord | None:
        slot = self.pool.find_waiter(timeout=5 * self.ttl + 5, queued_for=0.1 * self.ttl)
        if slot is None:
            return None
        client, pid = slot.client, slot.process.pid
        t0 = time.monotonic_ns()
        self.pool.kill(slot)
        t1 = time.monotonic_ns()  # dead, as above
        self.pool.replace(slot)
        return FaultRecord("kill-waiter", t0, t1, f"worker {client} pid {pid} (waiting)", client)

    def _pause(self) -> FaultRecord | None:
        slot = self.pool.find_holder(timeout=5 * self.ttl + 5)
        if slot is None:
            return None
        client, pid = slot.client, slot.process.pid
        t0 = time.monotonic_ns()
        acq = self.pool.pause(slot)
        try:
            # the fault is the passing of time: nothing to wait on but the clock
            time.sleep(self.pause_seconds)
        finally:
            self.pool.resume(slot)
        t1 = time.monotonic_ns()
        return FaultRecord(
            "pause",
            t0,
            t1,
            f"worker {client} pid {pid}",
            client,
            acq,
            f"stopped {(t1 - t0) / _NS:.2f} s",
        )

    # -- servers -----------------------------------------------------------------------------

    def _restart(self) -> FaultRecord:
        down = self._between(0.1, 1.5)
        t0 = time.monotonic_ns()
        self.deployment.kill_all()
        self._strike()
        time.sleep(down)
        self.deployment.restart_all()
        t1 = time.monotonic_ns()
        return self._hit_holder(
            FaultRecord("restart", t0, t1, "every server", detail=f"down {down:.2f} s")
        )

    def _minority_nodes(self) -> tuple[list[int], str, bool] | None:
        """The nodes a minority fault takes out, how the record names them, and whether the
        fault certainly reaches the hold it was aimed at; None if there is nothing to hit."""
        nodes = self.deployment.nodes
        if nodes < 3:
            return None
        if self.deployment.node_ports():
            # an ensemble: the follower the holder's session is on (its client must fail
            # over); :meth:`inject` found one, or there is nothing to hit
            if self._target is None or self._target.node is None:
                return None
            node = self._target.node
            return [node], f"node {node} (the holder's)", True
        leader = self.deployment.leader()
        choices = [index for index in range(nodes) if index != leader]
        # where the lock lives on one node only (a shard), that node is the one to lose
        home = self.deployment.node_of(self.pool.lock)
        if home is not None and home != leader:
            self._nodes_hit += 1
            return [home], f"node {home} (the lock's)", True
        count = 1
        if self.deployment.holds_on_every_node:
            # any minority leaves a majority that decides alone: lose as many as that allows
            # now and then, the next nodes round the ring each time
            most = min(len(choices), (nodes - 1) // 2)
            count = self.rng.randint(1, most) if most > 1 else 1
        indices = sorted(choices[(self._nodes_hit + step) % len(choices)] for step in range(count))
        self._nodes_hit += count
        named = f"node {indices[0]}" if count == 1 else f"nodes {', '.join(map(str, indices))}"
        return indices, named, self.deployment.holds_on_every_node

    def _minority(self) -> FaultRecord | None:
        chosen = self._minority_nodes()
        if chosen is None:
            return None
        indices, target, hits_hold = chosen
        record = self._node_outage("minority", indices, target)
        return self._hit_holder(record) if hits_hold else record

    def _minority_pause(self) -> FaultRecord | None:
        chosen = self._minority_nodes()
        if chosen is None:
            return None
        indices, target, hits_hold = chosen
        stopped = self._between(1.5, 2.5)
        t0 = time.monotonic_ns()
        paused: list[int] = []
        try:
            for index in indices:
                self.deployment.pause_node(index)
                paused.append(index)
            self._strike()
            # the fault is the passing of time: nothing to wait on but the clock
            time.sleep(stopped)
        finally:
            for index in paused:
                self.deployment.resume_node(index)
        t1 = time.monotonic_ns()
        record = FaultRecord(
            "minority-pause", t0, t1, target, detail=f"stopped {(t1 - t0) / _NS:.2f} s"
        )
        return self._hit_holder(record) if hits_hold else record

    def _rolling_loss(self) -> FaultRecord | None:
        nodes = self.deployment.nodes
        if nodes < 3 or not self.deployment.holds_on_every_node:
            return None
        # each time from the next node round the ring, so that every node is lost in turn
        first = self._nodes_hit % nodes
        indices = [(first + step) % nodes for step in range(nodes // 2 + 1)]
        self._nodes_hit += 1
        t0 = time.monotonic_ns()
        for position, index in enumerate(indices):
            if position:
                # the fault is the passing of time between the losses: nothing to wait on
                time.sleep(self._between(0.2, 0.4))
            self.deployment.kill_node(index)
            self.deployment.restart_node(index)
            if not position:
                self._strike()
        t1 = time.monotonic_ns()
        named = ", ".join(map(str, indices))
        return self._hit_holder(
            FaultRecord("rolling-loss", t0, t1, f"nodes {named}", detail="each restarted empty")
        )

    def _leader(self) -> FaultRecord | None:
        leader = self.deployment.leader()
        if leader is None:
            return None
        # every member stops serving until a new leader is elected: every client is hit
        return self._hit_holder(self._node_outage("leader", [leader], f"leader (node {leader})"))

    def _leader_pause(self) -> FaultRecord | None:
        leader = self.deployment.leader()
        if leader is None:
            return None
        stopped = self._between(1.5, 2.5)
        t0 = time.monotonic_ns()
        self.deployment.pause_node(leader)
        try:
            self._strike()
            # the fault is the passing of time: nothing to wait on but the clock
            time.sleep(stopped)
        finally:
            self.deployment.resume_node(leader)
        t1 = time.monotonic_ns()
        record = FaultRecord(
            "leader-pause", t0, t1, f"leader (node {leader})", detail=f"stopped {stopped:.2f} s"
        )
        return self._hit_holder(record)

    def _member_blackhole(self) -> FaultRecord | None:
        proxies = self.deployment.member_proxies
        if not proxies:
            return None
        if self.deployment.holds_on_every_node:
            # every member keeps the grant: each in turn, round the ring
            node = self._nodes_hit % len(proxies)
            self._nodes_hit += 1
            target = f"node {node}'s proxy"
        else:
            if self._target is None or self._target.node is None:
                return None
            node = self._target.node
            target = f"node {node}'s proxy (the holder's)"
        # past the lease: a client that stays with the silent member loses its hold
        seconds = self._between(1.5, 2.5)
        return self._network(
            MEMBER_BLACKHOLE,
            ProxyControl.cut,
            seconds,
            f"node {node} cut off {seconds:.2f} s",
            hits=lambda totals: totals.pending,
            proxies=[proxies[node]],
            target=target,
        )

    def _node_outage(self, kind: str, indices: list[int], target: str) -> FaultRecord:
        down = self._between(1.0, 2.0)
        t0 = time.monotonic_ns()
        for index in indices:
            self.deployment.kill_node(index)
        self._strike()
        time.sleep(down)
        for index in indices:
            self.deployment.restart_node(index)
        t1 = time.monotonic_ns()
        return FaultRecord(kind, t0, t1, target, detail=f"down {down:.2f} s")

    # -- network -----------------------------------------------------------------------------

    def _network(
        self,
        kind: str,
        apply: Callable[[ProxyControl], None],
        seconds: float,
        detail: str,
        hits: Callable[[ProxyTotals], int],
        before_heal: Callable[[ProxyControl], None] | None = None,
        proxies: list[ProxyControl] | None = None,
        target: str = "proxy",
    ) -> FaultRecord | None:
        if proxies is None:
            proxies = self.deployment.proxies
        if not proxies:
            return None
        before = ProxyTotals.of(proxies)
        t0 = time.monotonic_ns()
        try:
            for proxy in proxies:
                apply(proxy)
            self._strike()
            time.sleep(seconds)
            held = ProxyTotals.of(proxies)
            if before_heal is not None:
                for proxy in proxies:
                    before_heal(proxy)
        finally:
            for proxy in proxies:
                with contextlib.suppress(Exception):
                    proxy.heal()
        t1 = time.monotonic_ns()
        during = ProxyTotals.of(proxies) - before
        during = dataclasses.replace(during, pending=held.pending)
        count = hits(during)
        return self._hit_holder(
            FaultRecord(kind, t0, t1, target, detail=f"{detail}: {during}", hits=count)
        )

    def _net_delay(self) -> FaultRecord | None:
        # each way, so a round trip takes 0.1 to 0.5 TTL, plus or minus half of it: now under
        # the clients' timeouts (a third of the TTL), now over
        delay = self._between(0.05, 0.25)
        jitter = delay / 2
        return self._network(
            "net-delay",
            lambda proxy: proxy.delay(delay, jitter),
            2 * self.ttl,
            f"{delay * 1000:.0f} ± {jitter * 1000:.0f} ms for {2 * self.ttl:g} s",
            hits=lambda totals: totals.forwarded,
        )

    def _net_cut(self) -> FaultRecord | None:
        seconds = self._between(0.5, 2.5)
        # Half the cuts end as TCP gives up on a long partition (connections reset), half as
        # a short one heals (what was held is delivered, late).
        give_up = self.rng.random() < 0.5
        return self._network(
            "net-cut",
            ProxyControl.cut,
            seconds,
            f"cut {seconds:.2f} s" + (", then reset" if give_up else ""),
            hits=lambda totals: totals.pending,
            before_heal=ProxyControl.reset if give_up else None,
        )

    def _net_drop(self) -> FaultRecord | None:
        seconds = self._between(0.5, 2.5)
        return self._network(
            "net-drop",
            ProxyControl.drop_replies,
            seconds,
            f"replies dropped {seconds:.2f} s",
            hits=lambda totals: totals.dropped,
        )

    def _net_blip(self) -> FaultRecord | None:
        seconds = self._between(0.1, 0.3)
        return self._network(
            "net-blip",
            ProxyControl.cut,
            seconds,
            f"cut {seconds:.2f} s",
            hits=lambda totals: totals.pending,
        )

    def _net_isolate(self) -> FaultRecord | None:
        if self._target is None:
            return None  # no holder in a long hold: cutting a waiter off proves nothing
        slot = self._target.slot
        client = slot.client
        if slot.proxy is None:
            return None
        # longer than the lease, so that another worker is granted the lock meanwhile
        seconds = self._between(1.5, 3.0)
        give_up = self.rng.random() < 0.5
        return self._network(
            "net-isolate",
            ProxyControl.cut,
            seconds,
            f"worker {client} cut off {seconds:.2f} s" + (", then reset" if give_up else ""),
            hits=lambda totals: totals.pending,
            before_heal=ProxyControl.reset if give_up else None,
            proxies=[slot.proxy],
            target=f"worker {client}'s proxy",
        )

    def _net_reset(self) -> FaultRecord | None:
        proxies = self.deployment.proxies
        if not proxies:
            return None
        before = ProxyTotals.of(proxies)
        t0 = time.monotonic_ns()
        for burst in range(3):
            if burst:
                time.sleep(0.1 * self.ttl)
            for proxy in proxies:
                proxy.reset()
            if not burst:
                self._strike()
        t1 = time.monotonic_ns()
        during = ProxyTotals.of(proxies) - before
        return self._hit_holder(
            FaultRecord(
                "net-reset", t0, t1, "proxy", detail=f"3 resets: {during}", hits=during.reset
            )
        )


@dataclass(frozen=True)
class ProxyTotals:
    """The counters of a deployment's proxies, summed; differences measure one fault."""

    #: bytes forwarded, both directions
    forwarded: int = 0
    #: replies (bytes) dropped
    dropped: int = 0
    #: bytes held (delayed or blackholed) at one moment
    pending: int = 0
    #: connections reset
    reset: int = 0

    @classmethod
    def of(cls, proxies: list[ProxyControl]) -> ProxyTotals:
        total = cls()
        for proxy in proxies:
            stats = proxy.stats()
            flows = (stats.upstream, stats.downstream)
            total = total + cls(
                forwarded=sum(flow.forwarded for flow in flows),
                dropped=sum(flow.dropped for flow in flows),
                pending=sum(flow.pending for flow in flows),
                reset=stats.reset,
            )
        return total

    def __add__(self, other: ProxyTotals) -> ProxyTotals:
        return ProxyTotals(
            self.forwarded + other.forwarded,
            self.dropped + other.dropped,
            self.pending + other.pending,
            self.reset + other.reset,
        )

    def __sub__(self, other: ProxyTotals) -> ProxyTotals:
        return ProxyTotals(
            self.forwarded - other.forwarded,
            self.dropped - other.dropped,
            self.pending - other.pending,
            self.reset - other.reset,
        )

    def __str__(self) -> str:
        return (
            f"{self.forwarded} B forwarded, {self.dropped} B dropped, {self.pending} B held, "
            f"{self.reset} connections reset"
        )
