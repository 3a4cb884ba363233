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
``no-recovery``
    Liveness: after each fault ends the lock is granted again within the recovery bound (TTL
    plus the backend's grace), and after the workers stop it is free again.
``worker-error``
    A worker hit an exception that is not a ``TumblerError`` (a bug), or exited unexpectedly.

Besides violations the checker counts what the faults did ("hazards"): requests the resource
refused for a stale token, grants made while a holder was paused, kills that hit a holder,
holds found lost, time to recover. A fault round whose hazard never happened proves nothing,
and :func:`hazard_exercised` says so.
"""

from __future__ import annotations

import bisect
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
NO_RECOVERY = "no-recovery"
WORKER_ERROR = "worker-error"

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
    NO_RECOVERY,
    WORKER_ERROR,
)

#: faults aimed at the current holder (the harness names its client and grant)
HOLDER_FAULTS = frozenset({"kill", "pause"})
#: the network fault that cuts one holder off while the others go on
ISOLATE = "net-isolate"

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

    def as_json(self) -> dict[str, Any]:
        return {
            "hits": self.hits,
            "kind": self.kind,
            "t0": self.t0,
            "t1": self.t1,
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
    _check_resource(history, lives, result)
    _check_tokens(grants, result)
    _check_belief(history, lives, grants, result)
    _check_work(history, lives, grants, result)
    _check_accounting(history, lives, result)
    _check_liveness(history, grants, result)
    _count_hazards(history, lives, grants, result)
    return result


def _collect_grants(history: RoundHistory, result: CheckResult) -> dict[str, _GrantLife]:
    lives: dict[str, _GrantLife] = {}
    for client, events in history.workers.items():
        invoked: dict[str, int] = {}
        for event in events:
            ev = event.get("ev")
            acq = str(event.get("acq", ""))
            t = int(event["t"])
            if ev == "acquire":
                result.acquires += 1
                invoked[acq] = t
            elif ev == "grant":
                result.grants += 1
                grant = _Grant(acq, client, int(event["token"]), invoked.get(acq, t), t)
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
    for record in history.resource:
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
        if record.get("would_refuse") or not record.get("accepted"):
            result.stale_requests += 1
        if not record.get("accepted"):
            result.stale_refused += 1
            continue
        if op == "read":
            result.reads_accepted += 1
        else:
            result.writes_accepted += 1
            writes += 1
        max_before = record.get("max_before")
        if max_before is not None and token < int(max_before):
            result.violations.append(
                Violation(
                    STALE_ACCEPTED,
                    f"{op} by {acq} with token {token} accepted after token {max_before}",
                    t,
                )
            )
        if acq != current:
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
    if result.final_counter is not None and result.final_counter != writes:
        result.violations.append(
            Violation(
                LOST_UPDATE,
                f"the counter ended at {result.final_counter} after {writes} accepted increments",
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
        """A grant of another acquire that completed after ``own`` and before ``t``."""
        start = bisect.bisect_right(done_times, own.t_done)
        end = bisect.bisect_left(done_times, t)
        for index in range(start, end):
            if grants[index].acq != own.acq:
                return grants[index]
        return None

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


def _check_work(
    history: RoundHistory,
    lives: Mapping[str, _GrantLife],
    grants: Sequence[_Grant],
    result: CheckResult,
) -> None:
    done_times = [grant.t_done for grant in grants]
    killed = set(history.killed)
    kills: dict[str, int] = {}
    pauses: dict[str, list[int]] = {}
    for fault in history.faults:
        if fault.client is None:
            continue
        if fault.kind == "kill" and fault.client in killed:
            kills[fault.client] = min(fault.t0, kills.get(fault.client, fault.t0))
        elif fault.kind == "pause":
            pauses.setdefault(fault.client, []).append(fault.t0)
    for life in lives.values():
        own = life.grant
        stopped = life.stopped_working()
        if stopped is None:
            # no stop on record: a killed holder worked until its kill; any other grant
            # without an end is unaccounted, or its worker crashed (worker-error), and when
            # its work ended is not known
            t_kill = kills.get(own.client)
            if t_kill is None or t_kill < own.t_done:
                continue
            stopped = (t_kill, "killed")
        end, why = stopped
        start = bisect.bisect_right(done_times, own.t_done)
        stop = bisect.bisect_left(done_times, end)
        other = next((g for g in grants[start:stop] if g.acq != own.acq), None)
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
                    f"{acq} (token {life.grant.token}) was granted but "
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
        index = bisect.bisect_right(done_times, fault.t1)
        if index < len(done_times):
            waited = done_times[index] - fault.t1
            result.recovery.append(waited / _NS)
            if bound_ns and waited > bound_ns:
                result.violations.append(
                    Violation(
                        NO_RECOVERY,
                        f"after {fault.kind} ({fault.target}) the lock was "
                        f"granted again only after {waited / _NS:.2f} s (bound "
                        f"{history.recovery_bound:.2f} s)",
                        fault.t1,
                    )
                )
        elif history.t_end and history.t_end - fault.t1 > bound_ns:
            result.violations.append(
                Violation(
                    NO_RECOVERY,
                    f"after {fault.kind} ({fault.target}) the lock was never "
                    f"granted again in {(history.t_end - fault.t1) / _NS:.2f} s",
                    fault.t1,
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
    others = kinds - HOLDER_FAULTS
    if others:
        network = any(kind.startswith("net-") for kind in others)
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
