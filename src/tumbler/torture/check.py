"""The checker: decides from a round's recorded history whether the lock kept its promises.

Pure: it reads events (see :mod:`tumbler.torture.history` for the workers' and
:mod:`tumbler.torture.resource` for the resource's) and fault records, and returns counts and
violations. Every stamp is ``time.monotonic_ns()`` of one machine, so "before" is exact.

Properties (each violation kind names one):

``overlap``
    Exclusion at the resource: in the resource's order of decisions, the accepted requests of
    each grant form one contiguous run (A, B, A is a violation), and no two grants share a
    token there.
``stale-accepted``
    The resource accepted a request whose token was below the highest it had accepted (only
    possible with fencing off: the control experiment).
``lost-update``
    Every accepted write was based on the counter's current value, and the final counter equals
    the number of accepted writes.
``token-order``
    Fencing tokens strictly increase: a grant that completed before another was requested has
    the smaller token, and no two grants share one.
``double-hold``
    The client never claimed a hold it no longer had: a request sent while ``hold.held`` was
    true must not come after another, later grant of the lock completed.
``unnoticed-loss``
    A holder whose hold was taken over learns it: a release invoked after a later grant
    completed must raise ``LockLost``; a holder paused for more than twice its lease must get
    its ``on_lost`` callback or ``LockLost`` from its release (an error that hides the loss
    does not count).
``work-after-grant``
    A holder stops working before another client's grant of the lock begins: each grant's
    work ends when its holder released it (the release was invoked), its ``on_lost`` callback
    ran, or it noticed the loss itself (``work_end``; a killed holder at its kill); a later
    grant that completed before that end is a violation, reported with how long the holder
    went on. The later grant counts from when its acquire returned (it certainly had begun
    by then). A holder stopped (SIGSTOP) during its hold before the other grant is exempt: no
    lease can tell a stopped process in time (fencing covers it, and ``unnoticed-loss``
    checks that it is told when it resumes).
``unaccounted``
    Every grant ends in a release or a loss (unless its worker was killed), and every request
    at the resource comes from a grant a worker recorded, with that grant's token.
``unfair``
    A ``fair=True`` lock grants waiters in arrival order; see :func:`_check_fair` for when a
    pair of waiters is judged (certainly queued in a known order, no fault in between).
``no-recovery``
    Liveness: after each fault ends the lock is granted again within the recovery bound (TTL
    plus the backend's grace), and after the workers stop it is free again. On a multi-lock,
    also without a fault: no acquire (after the round's first grant) times out while nobody is
    granted anything, with no fault from its start until the bound after its end (see
    :func:`_check_stalls`: the shape of a deadlock). Where a fault took servers out of a
    cluster that elects, the bound counts from when a quorum had a leader again
    (:attr:`FaultRecord.served`): the election's length is the servers', and the report gives
    it. After a waiter is killed (``kill-waiter``), the first release that follows lets the
    next waiter in within ``RoundHistory.dead_waiter_bound``: a dead waiter's entry does not
    stall the line.
``servers-down``
    After a fault of the servers' they did not serve again (a write committed, where the
    deployment can tell) within the harness's patience: what followed was the servers' own
    outage (ZooKeeper 3.8.0's leader that resumes in the middle of its followers' election
    commits nothing until the next election, ZOOKEEPER-4785), which no client can ride out.
    Reported where ``no-recovery`` would be; never promised.
``worker-error``
    A worker hit an exception that is not a ``TumblerError`` (a bug), or exited unexpectedly.
``unavailable``
    What users feel, where the deployment promises to ride a fault out
    (``RoundHistory.available``: fault kind -> ``acquire`` and/or ``hold``): from a fault's
    start until the recovery bound after its end, no acquire fails with
    ``BackendUnavailable`` before its timeout ran out (``acquire``: a waiter keeps waiting, as
    its timeout allows; one whose time ran out during the fault says why it got nothing) and
    no hold is lost (``hold``: its ``on_lost`` runs, or its release raises ``LockLost``). A
    moment that is also within the window of a fault whose kind does not promise it (a
    holder killed, a round of several kinds) is excused.

Per primitive (``RoundHistory.primitive``), "another grant" means one the grant excludes. A
read/write lock's write side excludes every grant, a read side only writers: ``overlap``,
``double-hold``, ``unnoticed-loss`` and ``work-after-grant`` count only pairs with a writer
(readers' spans at the resource may interleave), and a shared request's ``stale-accepted``
bound is the highest *exclusive* token, as the resource fences it. A semaphore of N admits N:
those four kinds become counts, a grant completed while N other claims (requests sent while
``hold.held`` was true; releases without ``LockLost``; work) were running, or more than N spans
of accepted requests at the resource at once. The resource cannot fence a semaphore (one
highest token cannot stand for N holders: every request is accepted), so at the resource only
requests sent while ``hold.held`` was true, not probes, count, and holders the harness paused
during their hold are left out (``paused_holders_exempt``); the others are hazards
(``stale_requests``).

A multi-lock (``multi``: each grant several names, each with its own token in the ``grant``
event's ``tokens``, each name a counter of its own at the resource) is a mutex per name: the
properties above that speak of "the lock" (``overlap``, ``stale-accepted``, ``lost-update``,
``token-order``, ``double-hold``, ``unnoticed-loss``, ``work-after-grant``, and requests at
the resource ``unaccounted`` for) are checked name by name, on the grants that include the
name and with the name's token (see :func:`_check_each_name`); a grant's belief is the whole
hold's (``hold.held`` is every part's), so any request it sent counts against a later grant
of any of its names. Grants of disjoint sets exclude nothing. The others (accounting,
liveness, availability) are the round's, over every grant.

Besides violations the checker counts what the faults did ("hazards"): requests the resource
refused for a stale token, grants made while a holder was paused, kills that hit a holder,
holds found lost, time to recover. A fault round whose hazard never happened proves nothing,
and :func:`hazard_exercised` says so.
"""

from __future__ import annotations

import bisect
import dataclasses
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .history import Event

__all__ = [
    "ALL_KINDS",
    "BELIEF_KINDS",
    "FENCED_KINDS",
    "CheckResult",
    "FaultRecord",
    "RoundHistory",
    "Violation",
    "check_round",
    "hazard_exercised",
]

OVERLAP = "overlap"
STALE_ACCEPTED = "stale-accepted"
LOST_UPDATE = "lost-update"
TOKEN_ORDER = "token-order"
DOUBLE_HOLD = "double-hold"
UNNOTICED_LOSS = "unnoticed-loss"
WORK_AFTER_GRANT = "work-after-grant"
UNACCOUNTED = "unaccounted"
UNFAIR = "unfair"
NO_RECOVERY = "no-recovery"
SERVERS_DOWN = "servers-down"
WORKER_ERROR = "worker-error"
UNAVAILABLE = "unavailable"
#: what a deployment may promise to keep through a fault (``RoundHistory.available``)
AVAILABILITY = ("acquire", "hold")

#: the primitives whose grants are exclusive (an election's leader is a fair mutex's holder;
#: a multi-lock's grant, of each of its names)
EXCLUSIVE_PRIMITIVES = ("lock", "fair", "election", "multi")
#: the primitives that grant in arrival order
FAIR_PRIMITIVES = ("fair", "election")
#: the primitives whose grants are of several names at once, each with its own token; their
#: waiters hold names while they wait for others, and could wait for one another for ever
MULTI_PRIMITIVES = ("multi",)

#: what the resource's fencing protects: these need fencing, not the lock alone
FENCED_KINDS = (OVERLAP, STALE_ACCEPTED, LOST_UPDATE)
#: what the lock alone promises about its holders' belief
BELIEF_KINDS = (DOUBLE_HOLD, UNNOTICED_LOSS, WORK_AFTER_GRANT)
ALL_KINDS = (
    OVERLAP,
    STALE_ACCEPTED,
    LOST_UPDATE,
    TOKEN_ORDER,
    DOUBLE_HOLD,
    UNNOTICED_LOSS,
    WORK_AFTER_GRANT,
    UNACCOUNTED,
    UNFAIR,
    NO_RECOVERY,
    SERVERS_DOWN,
    WORKER_ERROR,
    UNAVAILABLE,
)

#: faults aimed at the current holder (the harness names its client and grant)
HOLDER_FAULTS = frozenset({"kill", "pause"})
#: faults on the workers that do not aim at the holder (a waiter killed)
CLIENT_FAULTS = frozenset({"kill-waiter"})
#: the network fault that cuts one holder off while the others go on
ISOLATE = "net-isolate"
#: the fault that blackholes one member's proxy (a fault of the network, as far as the
#: clients can tell: the proxy's counters show what it held)
MEMBER_BLACKHOLE = "member-blackhole"

_NS = 1_000_000_000


@dataclass(frozen=True)
class FaultRecord:
    """One injected fault: ``kind``, from ``t0`` until ``t1`` (healed, resumed, restarted)."""

    kind: str
    t0: int
    t1: int
    #: what was hit, for the report ("worker w2.1 pid 4242", "redis node 2", "proxy")
    target: str = ""
    #: the worker hit (kill, pause)
    client: str | None = None
    #: the grant that worker held when hit, if it held one
    acq: str | None = None
    detail: str = ""
    #: what the fault measurably hit, by its own count (network faults: bytes dropped or
    #: held, connections reset)
    hits: int = 0
    #: when the servers served clients again after a fault of theirs (a quorum had a leader,
    #: and a write committed where the deployment can tell), where the harness waited for
    #: that: an election is the servers' time, not the client's
    served: int | None = None
    #: the servers did not serve again within the harness's patience (``servers-down``)
    unserved: bool = False

    @property
    def over(self) -> int:
        """When the fault's own effect was over: healed, and the servers serving again. The
        recovery bound, and the windows the fault excuses or promises, count from here."""
        return self.t1 if self.served is None else max(self.t1, self.served)

    def as_json(self) -> dict[str, Any]:
        return {
            "hits": self.hits,
            "kind": self.kind,
            "t0": self.t0,
            "t1": self.t1,
            "served": self.served,
            "unserved": self.unserved,
            "target": self.target,
            "client": self.client,
            "acq": self.acq,
            "detail": self.detail,
        }


@dataclass
class RoundHistory:
    """Everything recorded in one round, as the checker needs it."""

    lock: str
    ttl: float
    #: each worker's events, by client id
    workers: Mapping[str, Sequence[Event]]
    #: the resource's decisions, in its order (``final`` line included, if it got there)
    resource: Sequence[Event]
    faults: Sequence[FaultRecord] = ()
    #: clients the harness killed (their histories may end anywhere)
    killed: Iterable[str] = ()
    #: clients that exited other than on request (client id -> exit status)
    bad_exits: Mapping[str, int] = field(default_factory=dict)
    #: lines the readers could not parse (truncated tails of killed workers)
    damaged_lines: int = 0
    #: seconds a fault may keep the lock unavailable after it ends
    recovery_bound: float = 0.0
    #: when the round stopped injecting faults and when the workers were told to stop
    t_end: int = 0
    #: seconds from the workers' stop until the lock had no holder (None: never within bound)
    free_after_stop: float | None = 0.0
    #: the primitive the workers took: ``lock``, ``fair``, ``semaphore`` (of ``permits``),
    #: ``rwlock`` (each grant's side is in its ``grant`` event), ``election`` (each grant a
    #: leadership, its token the term: checked as ``fair``) or ``multi`` (each grant several
    #: names, each with its token: checked as a ``lock`` per name)
    primitive: str = "lock"
    permits: int = 1
    #: ``fair``: how much earlier a waiter's acquire must have started than another's for the
    #: checker to take it as certainly queued first (its first request to the backend, which
    #: the history does not show, must have arrived before the other's acquire started)
    fair_slack: float = 0.05
    #: ``fair``: seconds after a server or network fault during which a waiter's entry may
    #: still have been lost (a restart that forgot it, a retry that could not refresh it)
    fair_lapse: float = 6.0
    #: fault kind -> what the deployment promises to keep through it (``AVAILABILITY``)
    available: Mapping[str, Iterable[str]] = field(default_factory=dict)
    #: seconds each acquire of the workers waits at most (0: not known)
    acquire_timeout: float = 0.0
    #: seconds a killed waiter may hold the line up after the next release (0: not checked)
    dead_waiter_bound: float = 0.0


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str
    t: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "detail": self.detail, "t": self.t}


@dataclass
class CheckResult:
    """Counts, hazards and violations of one round."""

    violations: list[Violation] = field(default_factory=list)
    acquires: int = 0
    grants: int = 0
    #: acquires that returned without a hold because of an error (not a timeout)
    acquire_errors: int = 0
    acquire_timeouts: int = 0
    reads_accepted: int = 0
    writes_accepted: int = 0
    #: requests the resource refused for a stale token: the fencing check at work
    stale_refused: int = 0
    #: requests that came with a stale token, refused or not (with fencing off, accepted)
    stale_requests: int = 0
    #: distinct grants whose holder learned the hold was lost (callback or LockLost)
    holds_lost: int = 0
    faults: int = 0
    #: kills that hit a worker holding a grant
    kills_of_holders: int = 0
    #: grants made (by others) while a holder was paused
    grants_during_pause: int = 0
    #: grants made (by others) while a holder was cut off alone (``net-isolate``)
    grants_during_isolation: int = 0
    #: pauses longer than twice the lease whose holder then learned it had lost the hold
    pauses_loss_detected: int = 0
    #: errors, losses and holds in doubt the clients saw while a server or network fault
    #: was on (or a lease after)
    disruptions: int = 0
    #: what network faults hit by their own count (bytes dropped or held, resets)
    fault_hits: int = 0
    #: server and network faults that began while the holder they were aimed at held
    holds_hit: int = 0
    #: seconds from each fault's end to the next grant
    recovery: list[float] = field(default_factory=list)
    #: for each grant whose holder went on working after another grant had begun, for how
    #: many seconds (the ``work-after-grant`` violations, promised or not)
    work_after_grant: list[float] = field(default_factory=list)
    final_counter: int | None = None
    damaged_lines: int = 0
    free_after_stop: float | None = None
    #: grants by the flavour of the worker granted (``sync``, ``asyncio``)
    flavours: Counter[str] = field(default_factory=Counter)
    #: grants by side (``lock``; ``read`` and ``write`` of a read/write lock)
    sides: Counter[str] = field(default_factory=Counter)
    #: ``fair``: pairs of waiters both certainly queued, whose grant order was checked
    fair_pairs: int = 0
    #: holders exempt from the count of holders because the harness had paused them (a
    #: semaphore's or read side's stale requests cannot be fenced)
    paused_holders_exempt: int = 0

    def by_kind(self) -> Counter[str]:
        return Counter(violation.kind for violation in self.violations)

    @property
    def recovery_max(self) -> float | None:
        return max(self.recovery) if self.recovery else None

    @property
    def recovery_p50(self) -> float | None:
        return statistics.median(self.recovery) if self.recovery else None

    @property
    def work_after_grant_max(self) -> float | None:
        return max(self.work_after_grant) if self.work_after_grant else None

    def as_json(self) -> dict[str, Any]:
        return {
            "acquires": self.acquires,
            "grants": self.grants,
            "acquire_errors": self.acquire_errors,
            "acquire_timeouts": self.acquire_timeouts,
            "reads_accepted": self.reads_accepted,
            "writes_accepted": self.writes_accepted,
            "stale_refused": self.stale_refused,
            "stale_requests": self.stale_requests,
            "holds_lost": self.holds_lost,
            "faults": self.faults,
            "kills_of_holders": self.kills_of_holders,
            "grants_during_pause": self.grants_during_pause,
            "grants_during_isolation": self.grants_during_isolation,
            "pauses_loss_detected": self.pauses_loss_detected,
            "disruptions": self.disruptions,
            "fault_hits": self.fault_hits,
            "holds_hit": self.holds_hit,
            "recovery_s": [round(value, 4) for value in self.recovery],
            "work_after_grant_s": [round(value, 4) for value in self.work_after_grant],
            "final_counter": self.final_counter,
            "flavours": dict(self.flavours),
            "sides": dict(self.sides),
            "fair_pairs": self.fair_pairs,
            "paused_holders_exempt": self.paused_holders_exempt,
            "damaged_lines": self.damaged_lines,
            "free_after_stop_s": self.free_after_stop,
            "violations": [violation.as_json() for violation in self.violations],
        }


@dataclass(frozen=True)
class _Grant:
    acq: str
    client: str
    token: int
    t_invoke: int
    t_done: int
    #: held beside others (a read side's, a semaphore permit's)
    shared: bool = False
    #: a multi-lock's grant: each name's token, by name (``token`` is then 0; each name is
    #: checked on its own with its token as ``token``, see :func:`_check_each_name`)
    tokens: tuple[tuple[str, int], ...] = ()

    @property
    def shown(self) -> str:
        """Its token, or a multi-lock's tokens, as the details say them."""
        if self.tokens:
            return "tokens " + ", ".join(f"{name}={token}" for name, token in self.tokens)
        return f"token {self.token}"


def _conflict(a: _Grant, b: _Grant) -> bool:
    """Whether two grants of the lock exclude each other (a semaphore's are counted instead)."""
    return a.acq != b.acq and not (a.shared and b.shared)


@dataclass
class _GrantLife:
    grant: _Grant
    release_t0: int | None = None
    release_outcome: str | None = None
    lost: bool = False
    #: when the on_lost callback ran
    lost_t: int | None = None
    #: when the holder recorded that it stopped working, and why
    work_end_t: int | None = None
    work_end_why: str | None = None

    def stopped_working(self) -> tuple[int, str] | None:
        """When the holder stopped working, and what stopped it (None: not on record)."""
        ends = [
            (t, why)
            for t, why in (
                (self.release_t0, "released"),
                (self.lost_t, "on_lost ran"),
                (self.work_end_t, f"work ended: {self.work_end_why}"),
            )
            if t is not None
        ]
        return min(ends) if ends else None


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.1f} ms"


def check_round(history: RoundHistory) -> CheckResult:
    """Check one round; see the module docstring for the properties."""
    result = CheckResult(damaged_lines=history.damaged_lines)
    result.faults = len(history.faults)
    result.free_after_stop = history.free_after_stop
    lives = _collect_grants(history, result)
    grants = sorted((life.grant for life in lives.values()), key=lambda g: g.t_done)
    if history.primitive in MULTI_PRIMITIVES:
        _check_each_name(history, lives, result)
    else:
        _check_lock(history, lives, grants, result)
    _check_accounting(history, lives, result)
    if history.primitive in FAIR_PRIMITIVES:
        _check_fair(history, lives, result)
    _check_liveness(history, grants, result)
    if history.primitive in MULTI_PRIMITIVES:
        _check_stalls(history, grants, result)
    _check_dead_waiters(history, lives, grants, result)
    _check_availability(history, result)
    _count_hazards(history, lives, grants, result)
    return result


def _check_lock(
    history: RoundHistory,
    lives: Mapping[str, _GrantLife],
    grants: Sequence[_Grant],
    result: CheckResult,
) -> None:
    """What the grants of ``history.lock`` promise of one another and at the resource."""
    _check_resource(history, lives, result)
    _check_tokens(grants, result)
    _check_belief(history, lives, grants, result)
    _check_work(history, lives, grants, result)


def _check_each_name(
    history: RoundHistory, lives: Mapping[str, _GrantLife], result: CheckResult
) -> None:
    """A multi-lock's round, name by name: each name's grants (with the name's token) checked
    as a mutex's (:func:`_check_lock`), with the name as the round's lock, against its own
    counter at the resource. The names are those of the grants and those the resource was
    asked about (a request about a name its grant did not include is ``unaccounted``). A
    violation found on several names alike (a paused holder of them all never told of the
    loss) is reported once, naming them; the counts and the final counter are summed."""
    names = {name for life in lives.values() for name, _ in life.grant.tokens}
    names |= {str(r.get("lock")) for r in history.resource if r.get("op") in ("read", "write")}
    found: dict[tuple[str, str, int | None], list[str]] = {}
    counters: list[int] = []
    for name in sorted(names):
        own: dict[str, _GrantLife] = {}
        for acq, life in lives.items():
            token = dict(life.grant.tokens).get(name)
            if token is not None:
                grant = dataclasses.replace(life.grant, token=token, tokens=())
                own[acq] = dataclasses.replace(life, grant=grant)
        grants = sorted((life.grant for life in own.values()), key=lambda g: g.t_done)
        part = CheckResult()
        _check_lock(dataclasses.replace(history, lock=name), own, grants, part)
        for violation in part.violations:
            found.setdefault((violation.kind, violation.detail, violation.t), []).append(name)
        result.reads_accepted += part.reads_accepted
        result.writes_accepted += part.writes_accepted
        result.stale_refused += part.stale_refused
        result.stale_requests += part.stale_requests
        result.work_after_grant += part.work_after_grant
        if part.final_counter is not None:
            counters.append(part.final_counter)
    if counters:
        result.final_counter = sum(counters)
    for (kind, detail, t), where in found.items():
        result.violations.append(Violation(kind, f"{', '.join(where)}: {detail}", t))


def _collect_grants(history: RoundHistory, result: CheckResult) -> dict[str, _GrantLife]:
    lives: dict[str, _GrantLife] = {}
    for client, events in history.workers.items():
        invoked: dict[str, int] = {}
        flavour = "sync"
        for event in events:
            ev = event.get("ev")
            acq = str(event.get("acq", ""))
            t = int(event["t"])
            if ev == "start":
                flavour = str(event.get("flavour", "sync"))
            elif ev == "acquire":
                result.acquires += 1
                invoked[acq] = t
            elif ev == "grant":
                result.grants += 1
                side = str(event.get("side", "lock"))
                result.flavours[flavour] += 1
                result.sides[side] += 1
                shared = history.primitive == "semaphore" or side == "read"
                if "tokens" in event:
                    given = event["tokens"].items()
                    tokens = tuple(sorted((str(name), int(value)) for name, value in given))
                    grant = _Grant(acq, client, 0, invoked.get(acq, t), t, tokens=tokens)
                else:
                    token = int(event["token"])
                    grant = _Grant(acq, client, token, invoked.get(acq, t), t, shared)
                lives[acq] = _GrantLife(grant)
            elif ev == "no_grant":
                if event.get("why") == "timeout":
                    result.acquire_timeouts += 1
                elif event.get("why") != "stopped":
                    result.acquire_errors += 1
            elif ev == "lost" and acq in lives:
                lives[acq].lost = True
                if lives[acq].lost_t is None:
                    lives[acq].lost_t = t
            elif ev == "work_end" and acq in lives and lives[acq].work_end_t is None:
                lives[acq].work_end_t = t
                lives[acq].work_end_why = str(event.get("why", "?"))
            elif ev == "release" and acq in lives:
                life = lives[acq]
                life.release_t0 = int(event.get("t0", t))
                life.release_outcome = event.get("outcome")
                if life.release_outcome == "lost":
                    life.lost = True
            elif ev == "error":
                first = str(event.get("what", "")).strip().splitlines()
                result.violations.append(
                    Violation(
                        WORKER_ERROR,
                        f"worker {client}: {first[-1] if first else '?'}",
                        event.get("t"),
                    )
                )
    result.holds_lost = sum(1 for life in lives.values() if life.lost)
    for client, status in sorted(history.bad_exits.items()):
        result.violations.append(
            Violation(WORKER_ERROR, f"worker {client} exited with status {status}")
        )
    return lives


def _check_resource(
    history: RoundHistory, lives: Mapping[str, _GrantLife], result: CheckResult
) -> None:
    finished: set[str] = set()
    current: str | None = None
    token_owner: dict[int, str] = {}
    writes = 0
    #: each grant's first and last accepted request, as positions in ``stamps``
    spans: dict[str, tuple[int, int]] = {}
    stamps: list[int] = []
    for record in history.resource:
        index = len(stamps)
        op = record.get("op")
        if op == "final":
            state = record.get("locks", {}).get(history.lock)
            if state is not None:
                result.final_counter = int(state["counter"])
            continue
        if op not in ("read", "write") or record.get("lock") != history.lock:
            continue
        acq = str(record.get("acq"))
        token = int(record["token"])
        t = int(record["t"])
        life = lives.get(acq)
        if life is None:
            result.violations.append(
                Violation(
                    UNACCOUNTED,
                    f"the resource got a {op} from {acq} (token {token}), "
                    "a grant no worker recorded",
                    t,
                )
            )
        elif life.grant.token != token:
            result.violations.append(
                Violation(
                    UNACCOUNTED, f"{acq} sent token {token} but was granted {life.grant.token}", t
                )
            )
        unfenced_stale = history.primitive == "semaphore" and (
            record.get("probe") or record.get("held") is False
        )
        if record.get("would_refuse") or not record.get("accepted") or unfenced_stale:
            result.stale_requests += 1
        if not record.get("accepted"):
            result.stale_refused += 1
            continue
        if op == "read":
            result.reads_accepted += 1
        else:
            result.writes_accepted += 1
            writes += 1
        # a shared request is checked against the highest exclusive token only
        bound = record.get("bound", record.get("max_before"))
        if bound is not None and token < int(bound):
            result.violations.append(
                Violation(
                    STALE_ACCEPTED,
                    f"{op} by {acq} with token {token} accepted after token {bound}",
                    t,
                )
            )
        if history.primitive not in EXCLUSIVE_PRIMITIVES:
            # shared grants interleave legitimately: spans are compared after the loop
            if not unfenced_stale:
                first, _ = spans.get(acq, (index, index))
                spans[acq] = (first, index)
                stamps.append(t)
        elif acq != current:
            if acq in finished:
                result.violations.append(
                    Violation(
                        OVERLAP,
                        f"{op} by {acq} (token {token}) accepted after {current} "
                        "had been accepted since its earlier requests",
                        t,
                    )
                )
            if current is not None:
                finished.add(current)
            current = acq
        owner = token_owner.setdefault(token, acq)
        if owner != acq:
            result.violations.append(
                Violation(OVERLAP, f"{owner} and {acq} both used token {token} at the resource", t)
            )
        if op == "write" and int(record["base"]) != int(record["value_before"]):
            result.violations.append(
                Violation(
                    LOST_UPDATE,
                    f"write by {acq} (token {token}) was based on "
                    f"{record['base']} but the counter was {record['value_before']}",
                    t,
                )
            )
    if spans:
        _check_spans(history, lives, spans, stamps, result)
    if result.final_counter is not None and result.final_counter != writes:
        result.violations.append(
            Violation(
                LOST_UPDATE,
                f"the counter ended at {result.final_counter} after {writes} accepted increments",
            )
        )


def _paused_in(history: RoundHistory, life: _GrantLife) -> bool:
    """Whether the harness paused the holder of ``life`` while it held the grant."""
    end = life.release_t0
    return any(
        fault.kind == "pause"
        and fault.client == life.grant.client
        and life.grant.t_done <= fault.t0
        and (end is None or fault.t0 <= end)
        for fault in history.faults
    )


def _check_spans(
    history: RoundHistory,
    lives: Mapping[str, _GrantLife],
    spans: Mapping[str, tuple[int, int]],
    stamps: Sequence[int],
    result: CheckResult,
) -> None:
    """Exclusion at the resource for shared grants: each grant's accepted requests span from
    its first to its last; a write side's span holds no other grant's request (and lies in
    no other's span); a semaphore's spans overlap at most ``permits`` at a time, counting
    only requests sent while ``hold.held`` was true and not probes (nothing fences them:
    the others are hazards, ``stale_requests``) and leaving out holders the harness paused
    (a lease cannot stop a stopped process; they are counted in ``paused_holders_exempt``)."""
    ordered = sorted(spans.items(), key=lambda item: item[1][0])
    if history.primitive == "semaphore":
        exempt = {acq for acq in spans if acq in lives and _paused_in(history, lives[acq])}
        result.paused_holders_exempt += len(exempt)
        active: list[tuple[int, str]] = []  # (last, acq) of spans begun
        for acq, (first, last) in ordered:
            if acq in exempt:
                continue
            active = [(end, other) for end, other in active if end > first]
            if len(active) >= history.permits:
                others = ", ".join(sorted(other for _, other in active))
                result.violations.append(
                    Violation(
                        OVERLAP,
                        f"{acq} was at work at the resource beside {len(active)} other "
                        f"holders ({others}) of a semaphore of {history.permits}",
                        stamps[first],
                    )
                )
            active.append((last, acq))
        return
    for position, (acq, (_, last)) in enumerate(ordered):
        own = lives.get(acq)
        for other_acq, (other_first, _) in ordered[position + 1 :]:
            if other_first > last:
                break
            other = lives.get(other_acq)
            if own is None or other is None or not _conflict(own.grant, other.grant):
                continue
            result.violations.append(
                Violation(
                    OVERLAP,
                    f"{other_acq} (token {other.grant.token}) was accepted at the resource "
                    f"between requests of {acq} (token {own.grant.token}), and one of them "
                    "holds the write side",
                    stamps[other_first],
                )
            )


def _check_tokens(grants: Sequence[_Grant], result: CheckResult) -> None:
    seen: dict[int, str] = {}
    for grant in grants:
        other = seen.setdefault(grant.token, grant.acq)
        if other != grant.acq:
            result.violations.append(
                Violation(
                    TOKEN_ORDER,
                    f"{other} and {grant.acq} were both granted token {grant.token}",
                    grant.t_done,
                )
            )
    # Real-time order: a grant completed before another was invoked has a smaller token.
    by_invoke = sorted(grants, key=lambda g: g.t_invoke)
    best: _Grant | None = None
    done = 0
    for grant in by_invoke:
        while done < len(grants) and grants[done].t_done < grant.t_invoke:
            if best is None or grants[done].token > best.token:
                best = grants[done]
            done += 1
        if best is not None and grant.token <= best.token and best.acq != grant.acq:
            result.violations.append(
                Violation(
                    TOKEN_ORDER,
                    f"{grant.acq} got token {grant.token}, not above token "
                    f"{best.token} of {best.acq} granted before it asked",
                    grant.t_done,
                )
            )


def _check_belief(
    history: RoundHistory,
    lives: Mapping[str, _GrantLife],
    grants: Sequence[_Grant],
    result: CheckResult,
) -> None:
    done_times = [grant.t_done for grant in grants]

    def later_grant(own: _Grant, t: int) -> _Grant | None:
        """A grant excluding ``own`` that completed after ``own`` and before ``t``."""
        start = bisect.bisect_right(done_times, own.t_done)
        end = bisect.bisect_left(done_times, t)
        for index in range(start, end):
            if _conflict(own, grants[index]):
                return grants[index]
        return None

    if history.primitive == "semaphore":
        _check_semaphore_belief(history, lives, grants, result)

    for events in history.workers.values():
        for event in events:
            if event.get("ev") != "op" or not event.get("held"):
                continue
            life = lives.get(event.get("acq", ""))
            if life is None:
                continue
            other = later_grant(life.grant, int(event["t0"]))
            if other is not None:
                result.violations.append(
                    Violation(
                        DOUBLE_HOLD,
                        f"{life.grant.acq} (token {life.grant.token}) sent a "
                        f"{event['kind']} believing it held the lock, "
                        f"{_ms(int(event['t0']) - other.t_done)} after {other.acq} was "
                        f"granted token {other.token}",
                        int(event["t0"]),
                    )
                )
    flagged: set[str] = set()
    for life in lives.values():
        if life.release_outcome != "ok" or life.release_t0 is None:
            continue
        other = later_grant(life.grant, life.release_t0)
        if other is not None:
            flagged.add(life.grant.acq)
            result.violations.append(
                Violation(
                    UNNOTICED_LOSS,
                    f"{life.grant.acq} released token {life.grant.token} "
                    f"without LockLost after {other.acq} was granted token {other.token}",
                    life.release_t0,
                )
            )
    # Twice the lease: by then the server has certainly expired the grant too (a session
    # expires a tick or so after its timeout), so the release cannot have found it.
    long_pause_ns = 2 * int(history.ttl * _NS)
    for fault in history.faults:
        if fault.kind != "pause" or fault.acq is None or fault.t1 - fault.t0 <= long_pause_ns:
            continue
        life = lives.get(fault.acq)
        if life is None or life.release_t0 is None or life.release_t0 < fault.t0:
            continue  # released before the pause began, or never got to release (killed)
        if not life.lost and fault.acq not in flagged:
            # neither on_lost nor LockLost: released "ok", or with an error that hid the loss
            result.violations.append(
                Violation(
                    UNNOTICED_LOSS,
                    f"{fault.acq} was paused {_ms(fault.t1 - fault.t0)} (lease "
                    f"{history.ttl:g} s), was never told of the loss (no on_lost) and its "
                    f"release ended {life.release_outcome!r}, not in LockLost",
                    life.release_t0,
                )
            )


def _over_capacity(
    grants: Sequence[_Grant], ends: Mapping[str, int], permits: int
) -> list[tuple[_Grant, list[tuple[int, _Grant]]]]:
    """The grants that completed while ``permits`` others were within their intervals (from
    their grant to ``ends[acq]``), each with those others (their ends)."""
    found: list[tuple[_Grant, list[tuple[int, _Grant]]]] = []
    active: list[tuple[int, _Grant]] = []
    for grant in grants:  # in the order they completed
        active = [(end, other) for end, other in active if end > grant.t_done]
        if len(active) >= permits:
            found.append((grant, list(active)))
        end = ends.get(grant.acq)
        if end is not None and end > grant.t_done:
            active.append((end, grant))
    return found


def _names(active: Sequence[tuple[int, _Grant]]) -> str:
    return ", ".join(f"{other.acq} (token {other.token})" for _, other in active)


def _check_semaphore_belief(
    history: RoundHistory,
    lives: Mapping[str, _GrantLife],
    grants: Sequence[_Grant],
    result: CheckResult,
) -> None:
    """``double-hold`` and ``unnoticed-loss`` for a semaphore: the library never claims more
    than ``permits`` holds at once. A grant's claim runs from its grant to the last request
    it sent while ``hold.held`` was true (``double-hold``), or to its release if that did not
    raise ``LockLost`` (``unnoticed-loss``); a grant that completed while ``permits`` other
    claims ran is a violation. Sound as the lock's pairwise rule is: each of those holders'
    leases was still running at the backend when that grant was returned."""
    claims: dict[str, int] = {}
    for events in history.workers.values():
        for event in events:
            if event.get("ev") == "op" and event.get("held"):
                acq = str(event.get("acq"))
                if acq in lives:
                    claims[acq] = max(claims.get(acq, 0), int(event["t0"]))
    flagged: set[str] = set()
    for grant, active in _over_capacity(grants, claims, history.permits):
        flagged.add(grant.acq)
        result.violations.append(
            Violation(
                DOUBLE_HOLD,
                f"{grant.acq} was granted a permit of a semaphore of {history.permits} while "
                f"{len(active)} holders still claimed theirs: {_names(active)}",
                grant.t_done,
            )
        )
    released = dict(claims)
    for acq, life in lives.items():
        if life.release_outcome == "ok" and life.release_t0 is not None:
            released[acq] = max(released.get(acq, 0), life.release_t0)
    for grant, active in _over_capacity(grants, released, history.permits):
        if grant.acq in flagged:
            continue
        result.violations.append(
            Violation(
                UNNOTICED_LOSS,
                f"{grant.acq} was granted a permit of a semaphore of {history.permits} before "
                f"{len(active)} holders released theirs without LockLost: {_names(active)}",
                grant.t_done,
            )
        )


def _work_ends(
    history: RoundHistory, lives: Mapping[str, _GrantLife]
) -> dict[str, tuple[int, str]]:
    """When each grant's holder stopped working, and why (a killed holder at its kill)."""
    killed = set(history.killed)
    kills: dict[str, int] = {}
    for fault in history.faults:
        if fault.client is not None and fault.kind == "kill" and fault.client in killed:
            kills[fault.client] = min(fault.t0, kills.get(fault.client, fault.t0))
    ends: dict[str, tuple[int, str]] = {}
    for acq, life in lives.items():
        stopped = life.stopped_working()
        if stopped is None:
            # no stop on record: a killed holder worked until its kill; any other grant
            # without an end is unaccounted, or its worker crashed (worker-error), and when
            # its work ended is not known
            t_kill = kills.get(life.grant.client)
            if t_kill is None or t_kill < life.grant.t_done:
                continue
            stopped = (t_kill, "killed")
        ends[acq] = stopped
    return ends


def _check_semaphore_work(
    history: RoundHistory,
    lives: Mapping[str, _GrantLife],
    grants: Sequence[_Grant],
    result: CheckResult,
) -> None:
    """``work-after-grant`` for a semaphore: no grant completes while ``permits`` other
    holders are still at work, leaving out those the harness paused during their hold before
    that grant (as for the lock)."""
    ends = _work_ends(history, lives)
    pauses: dict[str, list[int]] = {}
    for fault in history.faults:
        if fault.client is not None and fault.kind == "pause":
            pauses.setdefault(fault.client, []).append(fault.t0)
    for grant, active in _over_capacity(
        grants, {a: t for a, (t, _) in ends.items()}, history.permits
    ):
        working = [
            (end, other)
            for end, other in active
            if not any(other.t_done <= p <= grant.t_done for p in pauses.get(other.client, ()))
        ]
        if len(working) < history.permits:
            continue
        late = min(end for end, _ in working) - grant.t_done
        result.work_after_grant.append(late / _NS)
        result.violations.append(
            Violation(
                WORK_AFTER_GRANT,
                f"{grant.acq} was granted a permit of a semaphore of {history.permits} while "
                f"{len(working)} holders were still working: {_names(working)} (the first "
                f"stopped {_ms(late)} later)",
                grant.t_done,
            )
        )


def _check_work(
    history: RoundHistory,
    lives: Mapping[str, _GrantLife],
    grants: Sequence[_Grant],
    result: CheckResult,
) -> None:
    if history.primitive == "semaphore":
        _check_semaphore_work(history, lives, grants, result)
        return
    done_times = [grant.t_done for grant in grants]
    pauses: dict[str, list[int]] = {}
    for fault in history.faults:
        if fault.client is not None and fault.kind == "pause":
            pauses.setdefault(fault.client, []).append(fault.t0)
    ends = _work_ends(history, lives)
    for acq, life in lives.items():
        own = life.grant
        if acq not in ends:
            continue
        end, why = ends[acq]
        start = bisect.bisect_right(done_times, own.t_done)
        stop = bisect.bisect_left(done_times, end)
        other = next((g for g in grants[start:stop] if _conflict(own, g)), None)
        if other is None:
            continue
        if any(own.t_done <= t_pause <= other.t_done for t_pause in pauses.get(own.client, ())):
            continue  # stopped by the harness before the other grant: see the docstring
        late = end - other.t_done
        result.work_after_grant.append(late / _NS)
        result.violations.append(
            Violation(
                WORK_AFTER_GRANT,
                f"{own.acq} (token {own.token}) was still working {_ms(late)} after "
                f"{other.acq} was granted token {other.token} (it stopped when: {why})",
                other.t_done,
            )
        )


@dataclass(frozen=True)
class _Wait:
    """One acquire: when it started, when it ended (None: never, on record) and how."""

    acq: str
    client: str
    t_invoke: int
    t_end: int | None
    outcome: str
    #: when it took its place in line (the backend refused it and kept its entry; the
    #: worker's ``queued`` event), if the history says
    t_queued: int | None = None


def _waits(history: RoundHistory) -> list[_Wait]:
    waits: list[_Wait] = []
    for client, events in history.workers.items():
        started: dict[str, int] = {}
        ended: dict[str, tuple[int, str]] = {}
        queued: dict[str, int] = {}
        current = ""
        for event in events:
            ev, acq = event.get("ev"), str(event.get("acq", ""))
            if ev == "acquire":
                started[acq] = int(event["t"])
                current = acq
            elif ev == "queued":
                # one acquire at a time per worker: it is the one under way
                queued.setdefault(current, int(event["t"]))
            elif ev == "grant":
                ended[acq] = (int(event["t"]), "granted")
            elif ev == "no_grant":
                why = str(event.get("why"))
                ended[acq] = (int(event["t"]), why if why in ("timeout", "stopped") else "error")
        for acq, t in started.items():
            end, outcome = ended.get(acq, (None, "none"))
            waits.append(_Wait(acq, client, t, end, outcome, queued.get(acq)))
    return sorted(waits, key=lambda wait: wait.t_invoke)


def _check_fair(
    history: RoundHistory, lives: Mapping[str, _GrantLife], result: CheckResult
) -> None:
    """``unfair``: a fair lock grants its waiters in the order they arrived.

    A waiter A and a later one B are compared when A certainly arrived first: A had its
    place in line before B's acquire started (its worker's ``queued`` event: the backend
    refused it a grant and kept its entry), or, in a history without that event, A's
    acquire started at least ``fair_slack`` before B's (arrival is A's first request
    reaching the backend, which the history does not show: the slack bounds how long that
    takes; a backend that takes a second request to place A, or a slow one, exceeds it). B
    overtook A if B was granted and had begun its release while A's acquire was still going
    on (it ended later with a grant or a timeout: an acquire that ended in an error had
    trouble with the backend meanwhile, and one never ended on record was killed). Begun its
    release, not only been granted: then B was certainly granted first at the backend, A's
    grant reply cannot still have been on its way. Exempt: pairs near a fault of A's own
    worker or of a server or the network (from ``fair_lapse`` before A's start until B's
    release): a waiter's entry may lapse there, and a worker that has just resumed from a
    pause may have to reconnect (ZooKeeper: a new session, its old one expired) before its
    first request reaches the backend, behind requests made after its start."""
    waits = _waits(history)
    starts = [wait.t_invoke for wait in waits]
    slack = int(history.fair_slack * _NS)
    lapse = int(history.fair_lapse * _NS)
    longest = max(
        (wait.t_end - wait.t_invoke for wait in waits if wait.t_end is not None), default=0
    )
    fault_windows = [
        (fault.t0, fault.over + lapse)
        for fault in history.faults
        if fault.kind not in HOLDER_FAULTS
    ]
    own_faults: dict[str, list[tuple[int, int]]] = {}
    for fault in history.faults:
        if fault.kind in HOLDER_FAULTS and fault.client is not None:
            own_faults.setdefault(fault.client, []).append((fault.t0, fault.t1 + lapse))
    for life in lives.values():
        overtaker = life.grant
        released = life.release_t0
        if released is None:
            continue
        low = bisect.bisect_left(starts, overtaker.t_invoke - slack - longest)
        high = bisect.bisect_right(starts, overtaker.t_invoke)
        for wait in waits[low:high]:
            if wait.client == overtaker.client or wait.t_end is None:
                continue
            if wait.t_queued is not None:
                if wait.t_queued > overtaker.t_invoke:
                    continue  # not in line yet when the other began
            elif wait.t_invoke > overtaker.t_invoke - slack:
                continue
            if wait.t_end <= overtaker.t_invoke or wait.outcome not in ("granted", "timeout"):
                continue  # not waiting beside it, or in trouble with the backend
            near = [*own_faults.get(wait.client, ()), *fault_windows]
            if any(t0 <= released and wait.t_invoke <= t1 for t0, t1 in near):
                continue
            result.fair_pairs += 1
            if wait.t_end > released:
                result.violations.append(
                    Violation(
                        UNFAIR,
                        f"{overtaker.acq} (token {overtaker.token}) started its acquire "
                        f"{_ms(overtaker.t_invoke - wait.t_invoke)} after {wait.acq}, was "
                        f"granted and began its release while {wait.acq} still waited",
                        overtaker.t_done,
                    )
                )


def _check_accounting(
    history: RoundHistory, lives: Mapping[str, _GrantLife], result: CheckResult
) -> None:
    killed = set(history.killed)
    stopped = {
        client
        for client, events in history.workers.items()
        if any(event.get("ev") == "stop" for event in events)
    }
    for acq, life in lives.items():
        client = life.grant.client
        if life.release_outcome is not None or client in killed or client in history.bad_exits:
            continue
        if client in stopped:
            result.violations.append(
                Violation(
                    UNACCOUNTED,
                    f"{acq} ({life.grant.shown}) was granted but "
                    "neither released nor lost before its worker stopped",
                    life.grant.t_done,
                )
            )


def _check_liveness(history: RoundHistory, grants: Sequence[_Grant], result: CheckResult) -> None:
    done_times = [grant.t_done for grant in grants]
    bound_ns = int(history.recovery_bound * _NS)
    if not grants and any(history.workers.values()):
        result.violations.append(Violation(NO_RECOVERY, "no worker was ever granted the lock"))
    for fault in history.faults:
        index = bisect.bisect_right(done_times, fault.over)
        served = (
            ""
            if fault.served is None
            else f"; the servers served again {max(0, fault.served - fault.t1) / _NS:.2f} s "
            "after it ended"
        )
        if fault.unserved:
            served = f"; the servers did not serve again: {fault.detail}"
        kind = SERVERS_DOWN if fault.unserved else NO_RECOVERY
        if index < len(done_times):
            waited = done_times[index] - fault.over
            result.recovery.append(waited / _NS)
            if bound_ns and waited > bound_ns:
                result.violations.append(
                    Violation(
                        kind,
                        f"after {fault.kind} ({fault.target}) the lock was "
                        f"granted again only after {waited / _NS:.2f} s (bound "
                        f"{history.recovery_bound:.2f} s{served})",
                        fault.over,
                    )
                )
        elif history.t_end and history.t_end - fault.over > bound_ns:
            result.violations.append(
                Violation(
                    kind,
                    f"after {fault.kind} ({fault.target}) the lock was never "
                    f"granted again in {(history.t_end - fault.over) / _NS:.2f} s{served}",
                    fault.over,
                )
            )
    if history.free_after_stop is None:
        result.violations.append(
            Violation(
                NO_RECOVERY,
                "after the workers stopped the lock still had a holder "
                f"{history.recovery_bound:.2f} s later",
            )
        )


def _check_stalls(history: RoundHistory, grants: Sequence[_Grant], result: CheckResult) -> None:
    """``no-recovery`` with no fault to recover from: an acquire that ran out of time while
    nobody was granted anything (from its start to its end), no fault from its start until
    the bound after its end (the recovery bound, or the dead-waiter bound if longer) and the
    round's first grant made before it began (a slow start is the servers'). For a whole
    acquire timeout nobody finished a hold and passed its names on: the waiters waited for
    one another, which is what a deadlock looks like. Each stretch of such acquires that
    overlap is one violation.

    Only a multi-lock's waiters hold names while they wait: elsewhere a waiter waits only
    for holders, whom the lease and the faults' own bounds cover."""
    if not grants:
        return  # _check_liveness says that nobody ever was
    done_times = [grant.t_done for grant in grants]
    slack = int(max(history.recovery_bound, history.dead_waiter_bound) * _NS)
    windows = [(fault.t0, fault.over + slack) for fault in history.faults]
    stalled = [
        wait
        for wait in _waits(history)
        if wait.outcome == "timeout"
        and wait.t_end is not None
        and wait.t_invoke > done_times[0]
        # nobody granted while it waited
        and bisect.bisect_right(done_times, wait.t_invoke)
        == bisect.bisect_left(done_times, wait.t_end)
        and not any(t0 <= wait.t_end and wait.t_invoke <= t1 for t0, t1 in windows)
    ]
    stretches: list[tuple[list[_Wait], int]] = []  # the acquires, and when the last ended
    for wait in stalled:  # in the order they began
        end = wait.t_end or wait.t_invoke
        if stretches and wait.t_invoke <= stretches[-1][1]:
            stretch, ended = stretches[-1]
            stretch.append(wait)
            stretches[-1] = (stretch, max(ended, end))
        else:
            stretches.append(([wait], end))
    for stretch, ended in stretches:
        begun = stretch[0].t_invoke
        clients = sorted({wait.client for wait in stretch})
        result.violations.append(
            Violation(
                NO_RECOVERY,
                f"nobody was granted anything for {(ended - begun) / _NS:.2f} s, with no "
                f"fault under way, while {len(stretch)} acquires of {', '.join(clients)} "
                f"timed out ({', '.join(wait.acq for wait in stretch)}): a deadlock",
                begun,
            )
        )


def _check_dead_waiters(
    history: RoundHistory,
    lives: Mapping[str, _GrantLife],
    grants: Sequence[_Grant],
    result: CheckResult,
) -> None:
    """``no-recovery`` after ``kill-waiter``: see the module docstring."""
    if not history.dead_waiter_bound:
        return
    bound_ns = int(history.dead_waiter_bound * _NS)
    releases = sorted(
        life.release_t0
        for life in lives.values()
        if life.release_t0 is not None and life.release_outcome == "ok"
    )
    done_times = [grant.t_done for grant in grants]
    for fault in history.faults:
        if fault.kind != "kill-waiter":
            continue
        index = bisect.bisect_right(releases, fault.t1)
        if index == len(releases):
            continue  # nobody released after it: the round's end
        released = releases[index]
        after = bisect.bisect_right(done_times, released)
        if after == len(done_times):
            continue  # nobody waited any more: liveness says the rest
        waited = done_times[after] - released
        if waited > bound_ns:
            result.violations.append(
                Violation(
                    NO_RECOVERY,
                    f"after {fault.target} was killed, the next release let the next waiter "
                    f"in only {waited / _NS:.2f} s later (bound {history.dead_waiter_bound:g} s)",
                    released,
                )
            )


def _check_availability(history: RoundHistory, result: CheckResult) -> None:
    """``unavailable``: see the module docstring."""
    if not history.available:
        return
    bound_ns = int(history.recovery_bound * _NS)

    def promised(t: int, what: str) -> FaultRecord | None:
        """The fault that promised ``what`` at ``t``, unless another one excuses it."""
        during = [f for f in history.faults if f.t0 <= t <= f.over + bound_ns]
        if any(what not in history.available.get(f.kind, ()) for f in during):
            return None
        return during[-1] if during else None

    lost: set[str] = set()  # a hold's loss counts once (on_lost, then its release)
    # an acquire that failed when its time was up (a little before: the harness's clock)
    patience_ns = int(history.acquire_timeout * 0.95 * _NS)
    for client, events in history.workers.items():
        invoked: dict[str, int] = {}
        for event in events:
            ev, t = event.get("ev"), int(event["t"])
            if history.t_end and t > history.t_end:
                break  # the workers were told to stop
            if ev == "acquire":
                invoked[str(event.get("acq"))] = t
            if ev in ("lost", "release"):
                acq = str(event.get("acq"))
                if acq in lost:
                    continue
            if ev == "no_grant" and str(event.get("why", "")).startswith("BackendUnavailable"):
                waited = t - invoked.get(str(event.get("acq")), t)
                if patience_ns and waited >= patience_ns:
                    continue
                what, detail = "acquire", f"an acquire of {client} failed: {event['why']}"
            elif ev == "lost":
                what, detail = (
                    "hold",
                    f"the hold {event.get('acq')} was lost: {event.get('reason')}",
                )
            elif ev == "release" and event.get("outcome") == "lost":
                what, detail = "hold", f"the hold {event.get('acq')} was found lost at release"
            else:
                continue
            fault = promised(t, what)
            if fault is not None:
                if what == "hold":
                    lost.add(str(event.get("acq")))
                after = (t - fault.t0) / _NS
                result.violations.append(
                    Violation(
                        UNAVAILABLE,
                        f"{detail} ({after:.2f} s into {fault.kind} of {fault.target}, "
                        f"which the deployment rides out)",
                        t,
                    )
                )


def _count_hazards(
    history: RoundHistory,
    lives: Mapping[str, _GrantLife],
    grants: Sequence[_Grant],
    result: CheckResult,
) -> None:
    done_times = [grant.t_done for grant in grants]
    ttl_ns = int(history.ttl * _NS)
    disruption_times = sorted(
        int(event["t"])
        for events in history.workers.values()
        for event in events
        if event.get("ev") in ("lost", "connect_error", "release_error")
        or (event.get("ev") == "no_grant" and event.get("why") not in ("timeout", "stopped"))
        or (event.get("ev") == "op" and event.get("outcome") == "refused")
        # the library said it could not be sure (connection lost, hold in doubt)
        or (event.get("ev") == "op" and not event.get("held", True))
    )
    for fault in history.faults:
        result.fault_hits += fault.hits
        if fault.kind == "kill" and fault.acq is not None:
            result.kills_of_holders += 1
        if fault.kind == "pause" and fault.acq is not None:
            start = bisect.bisect_right(done_times, fault.t0)
            end = bisect.bisect_left(done_times, fault.t1)
            during = sum(1 for grant in grants[start:end] if grant.client != fault.client)
            result.grants_during_pause += during
            life = lives.get(fault.acq)
            if fault.t1 - fault.t0 > 2 * ttl_ns and life is not None and life.lost:
                result.pauses_loss_detected += 1
        if fault.kind == ISOLATE and fault.acq is not None:
            start = bisect.bisect_right(done_times, fault.t0)
            end = bisect.bisect_left(done_times, fault.t1)
            result.grants_during_isolation += sum(
                1 for grant in grants[start:end] if grant.client != fault.client
            )
        if fault.kind not in HOLDER_FAULTS and fault.acq is not None:
            life = lives.get(fault.acq)
            if (
                life is not None
                and life.grant.t_done < fault.t0
                and (life.release_t0 is None or life.release_t0 > fault.t0)
            ):
                result.holds_hit += 1
        if fault.kind not in HOLDER_FAULTS:
            # what clients saw from when the fault began until a lease after it ended
            start = bisect.bisect_left(disruption_times, fault.t0)
            end = bisect.bisect_right(disruption_times, fault.t1 + ttl_ns)
            result.disruptions += end - start


def hazard_exercised(kinds: Iterable[str], result: CheckResult) -> tuple[bool, str]:
    """Whether the round's faults actually bit, and what shows it (or what was missing).

    ``kill``: a kill hit a holder; ``pause``: another worker was granted the lock during a
    pause and a stale request reached the resource (refused, unless fencing is off); server
    faults: a fault began while a holder held (on the node it used, for a minority), or
    clients saw errors, losses or holds in doubt while the fault was on; network faults:
    that, or the proxy dropped, held or reset something; ``net-isolate`` also: another worker
    was granted the lock while the holder was cut off. A round without faults exercises
    nothing and needs nothing.
    """
    kinds = set(kinds) - {"none"}
    if not kinds:
        return True, "baseline"
    if result.faults == 0:
        return False, "no fault was injected"
    missing: list[str] = []
    shown: list[str] = []
    if "kill" in kinds:
        if result.kills_of_holders:
            shown.append(f"{result.kills_of_holders} holders killed")
        else:
            missing.append("no kill hit a holder")
    if "pause" in kinds:
        if result.grants_during_pause and result.stale_requests:
            shown.append(
                f"{result.grants_during_pause} grants in pauses, "
                f"{result.stale_requests} stale requests"
            )
        elif not result.grants_during_pause:
            missing.append("no grant while a holder was paused")
        else:
            missing.append("no stale request after a pause")
    if ISOLATE in kinds:
        if result.grants_during_isolation:
            shown.append(f"{result.grants_during_isolation} grants while a holder was cut off")
        else:
            missing.append("no grant while a holder was cut off")
    if CLIENT_FAULTS & kinds:
        shown.append(f"{result.faults} waiters killed")
    others = kinds - HOLDER_FAULTS - CLIENT_FAULTS
    if others:
        network = any(kind.startswith("net-") or kind == MEMBER_BLACKHOLE for kind in others)
        if result.disruptions or result.holds_hit or (network and result.fault_hits):
            hit = f", proxy hit {result.fault_hits}" if network else ""
            shown.append(
                f"{result.holds_hit} holds hit, {result.disruptions} client errors/losses{hit}"
            )
        else:
            missing.append("the clients never noticed")
    if missing:
        return False, "; ".join(missing)
    return True, "; ".join(shown)
