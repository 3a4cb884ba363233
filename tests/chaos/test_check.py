"""The history checker: correct histories pass, each kind of violation is found.

Histories are built from hypothesis-drawn plans (tests/chaos/histories.py): holders that take
turns, holders paused past their lease (their late write refused by the resource), holders
killed in their critical section. Each mutation breaks exactly one property; the checker must
name it. No servers: these run in milliseconds.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tumbler.torture.check import (
    ALL_KINDS,
    CheckResult,
    FaultRecord,
    RoundHistory,
    Violation,
    check_round,
    hazard_exercised,
)
from tumbler.torture.history import HistoryTail, HistoryWriter, read_history
from tumbler.torture.resource import FencedCounter

from .histories import (
    LOCK,
    MS,
    MUTATIONS,
    Built,
    MultiHold,
    S,
    Step,
    build,
    multi_round,
    schedule_multi,
)

steps = st.builds(
    Step,
    client=st.integers(0, 3),
    kind=st.sampled_from(["normal", "normal", "normal", "paused", "killed"]),
    gap_ms=st.integers(0, 200),
    think_ms=st.integers(0, 50),
    token_step=st.integers(1, 1_000_000),
)
plans = st.lists(steps, min_size=2, max_size=25)


@given(plans)
@settings(max_examples=150, deadline=None)
def test_correct_histories_have_no_violation(plan: list[Step]) -> None:
    built = build(plan)
    result = check_round(built.round())
    assert result.violations == []
    paused = sum(1 for fault in built.faults if fault.kind == "pause")
    killed = sum(1 for fault in built.faults if fault.kind == "kill")
    assert result.grants == len(built.grants)
    assert result.stale_refused == result.stale_requests == paused  # each paused late write
    assert result.holds_lost == paused
    assert result.pauses_loss_detected == paused
    assert result.kills_of_holders == killed
    assert result.grants_during_pause == paused  # the one other holder's round
    assert result.final_counter == result.writes_accepted == len(built.grants) - paused - killed
    assert len(result.recovery) == len(built.faults)
    assert result.work_after_grant == []  # the paused holders are exempt, the others stopped


@pytest.mark.parametrize("mutate", MUTATIONS, ids=lambda mutate: mutate.__name__)
@given(plan=plans, pick=st.integers(0, 10_000))
@settings(max_examples=60, deadline=None)
def test_each_broken_property_is_found(
    mutate: Callable[[Built, int], str], plan: list[Step], pick: int
) -> None:
    built = build(plan)
    kind = mutate(built, pick)
    assert kind in ALL_KINDS
    result = check_round(built.round())
    assert kind in result.by_kind(), result.violations


def test_every_kind_has_a_mutation() -> None:
    built = build([Step(0, "normal", 0, 1), Step(1, "paused", 0, 1), Step(2, "killed", 0, 1)])
    found = {mutate(build([Step(0, "normal", 0, 1), Step(1, "normal", 0, 1)]), 0)
             for mutate in MUTATIONS}  # fmt: skip
    assert found == set(ALL_KINDS)
    assert check_round(built.round()).violations == []


# -- hand-made histories of each kind, read as a reader would ---------------------------


def _resource_log(counter: FencedCounter, resource: list[dict[str, object]]) -> Callable[..., int]:
    """``decide(op, acq, token, t, base=0)``: ask the fenced counter, as the resource process
    does, and append its log line to ``resource``; returns the value read or written."""

    def decide(op: str, acq: str, token: int, t: int, base: int = 0) -> int:
        value_before = counter.counter(LOCK)
        if op == "read":
            decision, stale = counter.read(LOCK, token)
        else:
            decision, stale = counter.write(LOCK, token, base + 1)
        resource.append({
            "op": op, "t": t, "lock": LOCK, "token": token, "acq": acq, "accepted":
            decision.accepted, "would_refuse": stale, "max_before": decision.max_before,
            "value_before": value_before, "base": base, "value": base + 1,
        })  # fmt: skip
        return decision.value

    return decide


def _two_holders_overlapping(fencing: str, late_write_ms: int = 3000) -> RoundHistory:
    """A reads, B is granted and does its round, A writes late: the classic pause.

    B reads at 1500 ms and writes at 1510 ms; A's late write is at ``late_write_ms``.
    """
    counter = FencedCounter(fencing)  # type: ignore[arg-type]
    resource: list[dict[str, object]] = []
    decide = _resource_log(counter, resource)

    a_value = decide("read", "a.1", 1, 3 * MS)
    b_value = decide("read", "b.1", 2, 1500 * MS)
    if late_write_ms < 1510:
        decide("write", "a.1", 1, late_write_ms * MS, a_value)
    decide("write", "b.1", 2, 1510 * MS, b_value)
    if late_write_ms >= 1510:
        decide("write", "a.1", 1, late_write_ms * MS, a_value)
    workers = {
        "a": [
            {"ev": "acquire", "t": 1 * MS, "acq": "a.1"},
            {"ev": "grant", "t": 2 * MS, "acq": "a.1", "token": 1},
            {"ev": "op", "t": 4 * MS, "acq": "a.1", "kind": "read", "t0": 3 * MS, "held": True},
            {"ev": "op", "t": (late_write_ms + 1) * MS, "acq": "a.1", "kind": "write",
             "t0": late_write_ms * MS, "held": False},
            {"ev": "lost", "t": 3002 * MS, "acq": "a.1"},
            {"ev": "release", "t": 3004 * MS, "acq": "a.1", "t0": 3003 * MS, "outcome": "lost"},
            {"ev": "stop", "t": 3005 * MS},
        ],
        "b": [
            {"ev": "acquire", "t": 100 * MS, "acq": "b.1"},
            {"ev": "grant", "t": 1400 * MS, "acq": "b.1", "token": 2},
            {"ev": "op", "t": 1501 * MS, "acq": "b.1", "kind": "read", "t0": 1500 * MS,
             "held": True},
            {"ev": "op", "t": 1511 * MS, "acq": "b.1", "kind": "write", "t0": 1510 * MS,
             "held": True},
            {"ev": "release", "t": 1521 * MS, "acq": "b.1", "t0": 1520 * MS, "outcome": "ok"},
            {"ev": "stop", "t": 3005 * MS},
        ],
    }  # fmt: skip
    pause = FaultRecord("pause", 5 * MS, (late_write_ms - 5) * MS, "worker a", "a", "a.1")
    return RoundHistory(LOCK, 1.0, workers, resource, [pause], recovery_bound=2.5,
                        t_end=3100 * MS)  # fmt: skip


def test_fencing_refuses_the_paused_holder() -> None:
    result = check_round(_two_holders_overlapping("on"))
    assert result.violations == []
    assert result.stale_refused == 1
    assert result.grants_during_pause == 1
    assert hazard_exercised(["pause"], result) == (True, "1 grants in pauses, 1 stale requests")


def test_without_fencing_the_paused_holder_overwrites() -> None:
    result = check_round(_two_holders_overlapping("off"))
    kinds = result.by_kind()
    assert kinds["overlap"] == 1
    assert kinds["lost-update"] == 1  # the late write was based on a stale read
    assert kinds["stale-accepted"] == 1
    assert set(kinds) == {"overlap", "lost-update", "stale-accepted"}
    # the hazard happened all the same: a stale write arrived (and was let through)
    assert (result.stale_refused, result.stale_requests) == (0, 1)
    assert hazard_exercised(["pause"], result)[0] is True


def test_fencing_only_writes_lets_a_late_write_land_between_read_and_write() -> None:
    # A's late write lands between B's read and B's write: with only writes fenced it is
    # accepted (A's token is still the highest written), and B's write then overwrites it
    kinds = check_round(_two_holders_overlapping("writes", late_write_ms=1505)).by_kind()
    assert kinds["lost-update"] == 1
    assert kinds["overlap"] >= 1
    # fencing the reads too refuses it: B's read raised the bar
    result = check_round(_two_holders_overlapping("on", late_write_ms=1505))
    assert result.violations == []
    assert result.stale_refused == 1


def test_a_killed_holder_needs_no_release_but_a_stopped_one_does() -> None:
    built = build([Step(0, "killed", 0, 1), Step(1, "normal", 0, 1)])
    assert check_round(built.round()).violations == []
    built.killed.clear()  # as if it had stopped on request: its grant is unaccounted
    victim = next(fault.client for fault in built.faults if fault.kind == "kill")
    assert victim is not None
    built.workers[victim].append({"ev": "stop", "t": built.t_end})
    assert check_round(built.round()).by_kind() == {"unaccounted": 1}


def test_slow_recovery_is_a_violation() -> None:
    built = build([Step(0, "normal", 0, 1), Step(1, "normal", 0, 1)])
    t_grant = built.grants[1][3]
    built.faults.append(FaultRecord("restart", t_grant - 3_000 * MS, t_grant - 2_600 * MS))
    result = check_round(built.round())
    assert result.by_kind() == {"no-recovery": 1}
    assert result.recovery == [pytest.approx(2.6, abs=0.01)]


def test_recovery_counts_from_when_the_servers_served_again() -> None:
    # an election the servers took 2.4 s over is theirs: the client's recovery is the 0.5 s
    # after it, within the bound
    built = build([Step(0, "normal", 0, 1), Step(1, "normal", 0, 1)])
    t_grant = built.grants[1][3]
    fault = FaultRecord("leader", t_grant - 3_200 * MS, t_grant - 2_900 * MS)
    built.faults.append(dataclasses.replace(fault, served=t_grant - 500 * MS))
    result = check_round(built.round())
    assert result.violations == []
    assert result.recovery == [pytest.approx(0.5, abs=0.01)]
    # a client slow after the servers came back is counted from then, and named with it
    built.faults[-1] = dataclasses.replace(fault, served=t_grant - 2_600 * MS)
    slow = check_round(built.round())
    assert slow.recovery == [pytest.approx(2.6, abs=0.02)]
    (violation,) = slow.violations
    assert violation.kind == "no-recovery"
    assert "the servers served again 0.30 s after it ended" in violation.detail


def test_servers_that_never_served_again_are_their_own_outage_not_the_clients() -> None:
    """A fault after which the servers did not serve within the harness's patience (their
    modes said they did, no session was made): the lock's long wait is ``servers-down``,
    which no deployment promises, not ``no-recovery``."""
    built = build([Step(0, "normal", 0, 1), Step(1, "normal", 0, 1)])
    t_grant = built.grants[1][3]
    fault = FaultRecord(
        "leader-pause", t_grant - 3_200 * MS, t_grant - 2_900 * MS, "node 1",
        detail="stopped 2.06 s; no session made in 60 s", unserved=True,
    )  # fmt: skip
    built.faults.append(fault)
    (violation,) = check_round(built.round()).violations
    assert violation.kind == "servers-down"
    assert "the servers did not serve again: stopped 2.06 s; no session made" in violation.detail
    assert fault.as_json()["unserved"] is True


# -- work after another's grant (issue 11) -----------------------------------------------


def _late_notice(
    lost_ms: int | None,
    *,
    release_ms: int = 2610,
    work_end: tuple[int, str] | None = None,
    pause_ms: tuple[int, int] | None = None,
) -> RoundHistory:
    """A, in a long hold, is cut off from the server: its lease runs out there, B is granted
    at 1400 ms and does its round. A's on_lost runs at ``lost_ms`` (None: never); A records
    the end of its work 1 ms later (or as ``work_end`` says), sends its write as a probe,
    refused, and releases at ``release_ms`` (raising LockLost if it was told, else "ok").

    With ``pause_ms`` A is stopped (SIGSTOP) over that interval as well.
    """
    resource: list[dict[str, object]] = []
    decide = _resource_log(FencedCounter("on"), resource)

    a_value = decide("read", "a.1", 1, 3 * MS)
    b_value = decide("read", "b.1", 2, 1500 * MS)
    decide("write", "b.1", 2, 1510 * MS, b_value)
    a: list[dict[str, object]] = [
        {"ev": "acquire", "t": 1 * MS, "acq": "a.1"},
        {"ev": "grant", "t": 2 * MS, "acq": "a.1", "token": 1},
        {"ev": "op", "t": 4 * MS, "acq": "a.1", "kind": "read", "t0": 3 * MS, "held": True,
         "outcome": "ok", "value": a_value},
    ]  # fmt: skip
    if lost_ms is not None:
        a.append({"ev": "lost", "t": lost_ms * MS, "acq": "a.1"})
        work_end = work_end or (lost_ms + 1, "lost")
    if work_end is not None:
        end_ms, why = work_end
        a.append({"ev": "work_end", "t": end_ms * MS, "acq": "a.1", "why": why})
        decide("write", "a.1", 1, (end_ms + 2) * MS, a_value)
        a.append({"ev": "op", "t": (end_ms + 3) * MS, "acq": "a.1", "kind": "write",
                  "t0": (end_ms + 2) * MS, "held": False, "outcome": "refused",
                  "probe": lost_ms is not None})  # fmt: skip
    outcome = "ok" if lost_ms is None else "lost"
    a += [
        {"ev": "release", "t": (release_ms + 1) * MS, "acq": "a.1", "t0": release_ms * MS,
         "outcome": outcome},
        {"ev": "stop", "t": 3005 * MS},
    ]  # fmt: skip
    workers = {
        "a": a,
        "b": [
            {"ev": "acquire", "t": 100 * MS, "acq": "b.1"},
            {"ev": "grant", "t": 1400 * MS, "acq": "b.1", "token": 2},
            {"ev": "op", "t": 1501 * MS, "acq": "b.1", "kind": "read", "t0": 1500 * MS,
             "held": True},
            {"ev": "op", "t": 1511 * MS, "acq": "b.1", "kind": "write", "t0": 1510 * MS,
             "held": True},
            {"ev": "work_end", "t": 1512 * MS, "acq": "b.1", "why": "done"},
            {"ev": "release", "t": 1521 * MS, "acq": "b.1", "t0": 1520 * MS, "outcome": "ok"},
            {"ev": "stop", "t": 3005 * MS},
        ],
    }  # fmt: skip
    faults = []
    if pause_ms is not None:
        faults.append(
            FaultRecord("pause", pause_ms[0] * MS, pause_ms[1] * MS, "worker a", "a", "a.1")
        )
    return RoundHistory(LOCK, 1.0, workers, resource, faults, recovery_bound=2.5,
                        t_end=3100 * MS)  # fmt: skip


def _details(result: CheckResult, kind: str) -> list[str]:
    return [violation.detail for violation in result.violations if violation.kind == kind]


def test_a_holder_told_after_another_was_granted_worked_after_its_grant() -> None:
    # on_lost 1200 ms after B's grant: every other property holds (A's write was a refused
    # probe, its release raised LockLost), yet A went on working alongside B
    result = check_round(_late_notice(lost_ms=2600))
    assert result.by_kind() == {"work-after-grant": 1}
    (violation,) = result.violations
    assert violation.t == 1400 * MS
    assert violation.detail == (
        "a.1 (token 1) was still working 1200.0 ms after b.1 was granted token 2 "
        "(it stopped when: on_lost ran)"
    )
    assert result.work_after_grant == [pytest.approx(1.2)]
    assert result.work_after_grant_max == pytest.approx(1.2)


def test_a_holder_told_before_the_next_grant_kept_its_promise() -> None:
    result = check_round(_late_notice(lost_ms=1300))
    assert result.violations == []
    assert result.work_after_grant == []


def test_a_holder_never_told_worked_until_it_noticed() -> None:
    # no on_lost: its work ended when the resource refused its write at 1990 ms, after B's
    # grant; its release (after that) is not what stopped it
    result = check_round(_late_notice(lost_ms=None, work_end=(1990, "refused")))
    assert result.by_kind() == {"work-after-grant": 1, "unnoticed-loss": 1}
    assert result.work_after_grant == [pytest.approx(0.59)]
    (detail,) = _details(result, "work-after-grant")
    assert detail.endswith("(it stopped when: work ended: refused)")


def test_a_release_after_another_grant_ends_the_work_late() -> None:
    # neither told nor noticing: the work ended when the release was invoked, 50 ms after
    # B's grant (and that release not raising LockLost is unnoticed-loss)
    result = check_round(_late_notice(lost_ms=None, release_ms=1450))
    assert result.by_kind() == {"work-after-grant": 1, "unnoticed-loss": 1}
    assert "50.0 ms after b.1" in _details(result, "work-after-grant")[0]
    assert result.work_after_grant == [pytest.approx(0.05)]


def test_a_holder_stopped_before_the_other_grant_is_exempt() -> None:
    # SIGSTOP from 500 ms to 2590 ms: B is granted while A cannot run at all; A's on_lost at
    # resume is as soon as a stopped process can be told (fencing refuses its probe)
    assert check_round(_late_notice(lost_ms=2600, pause_ms=(500, 2590))).violations == []
    # stopped only after B's grant: the work between B's grant and the pause is a violation
    late = check_round(_late_notice(lost_ms=2600, pause_ms=(1450, 2590)))
    assert late.by_kind() == {"work-after-grant": 1}


def test_grants_while_a_holder_was_cut_off_are_counted() -> None:
    history = _late_notice(lost_ms=1300)
    isolate = FaultRecord("net-isolate", 500 * MS, 2500 * MS, "worker a's proxy", "a", "a.1")
    history = RoundHistory(
        LOCK, 1.0, history.workers, history.resource, [isolate], recovery_bound=2.5,
        t_end=3100 * MS,
    )  # fmt: skip
    result = check_round(history)
    assert result.grants_during_isolation == 1  # b.1 at 1400 ms
    assert result.holds_hit == 1
    assert result.violations == []


def test_a_killed_holder_stopped_working_at_its_kill() -> None:
    built = build([Step(0, "normal", 0, 1), Step(1, "killed", 0, 1), Step(2, "normal", 0, 1)])
    assert check_round(built.round()).violations == []
    # a kill recorded only after the next grant: the holder worked until then
    kill = next(fault for fault in built.faults if fault.kind == "kill")
    built.faults[built.faults.index(kill)] = FaultRecord(
        "kill", built.grants[2][3] + 5 * MS, built.grants[2][3] + 5 * MS, kill.target,
        kill.client, kill.acq,
    )  # fmt: skip
    assert check_round(built.round()).by_kind()["work-after-grant"] == 1


# -- hazards ---------------------------------------------------------------------------


def test_a_fault_round_that_hit_nothing_is_flagged() -> None:
    empty = CheckResult(faults=3)
    assert hazard_exercised(["kill"], empty) == (False, "no kill hit a holder")
    assert hazard_exercised(["pause"], empty)[0] is False
    assert hazard_exercised(["pause"], CheckResult(faults=1, grants_during_pause=2)) == (
        False,
        "no stale request after a pause",
    )
    assert hazard_exercised(["restart"], empty) == (False, "the clients never noticed")
    assert hazard_exercised(["net-reset"], CheckResult(faults=1, fault_hits=2))[0] is True
    assert hazard_exercised(["restart"], CheckResult(faults=1, fault_hits=2))[0] is False
    assert hazard_exercised(["kill"], CheckResult()) == (False, "no fault was injected")
    # a holder cut off alone proves something only if another worker was granted meanwhile
    cut_off = CheckResult(faults=1, fault_hits=300, holds_hit=1, disruptions=4)
    assert hazard_exercised(["net-isolate"], cut_off) == (
        False,
        "no grant while a holder was cut off",
    )
    cut_off.grants_during_isolation = 2
    assert hazard_exercised(["net-isolate"], cut_off)[0] is True
    assert hazard_exercised(["none"], CheckResult()) == (True, "baseline")


# -- the history files -----------------------------------------------------------------


def test_a_truncated_last_line_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "w0.jsonl"
    with HistoryWriter(path) as writer:
        writer.write("acquire", acq="w0.1")
        writer.write("grant", acq="w0.1", token=7)
    with path.open("ab") as file:  # a SIGKILL in the middle of a line
        file.write(json.dumps({"ev": "op", "acq": "w0.1"}).encode()[:9])
    history = read_history(path)
    assert [event["ev"] for event in history.events] == ["acquire", "grant"]
    assert history.damaged_lines == 1
    assert read_history(tmp_path / "missing.jsonl").events == []


def test_a_tail_waits_for_the_end_of_a_line(tmp_path: Path) -> None:
    path = tmp_path / "w0.jsonl"
    tail = HistoryTail(path)
    assert list(tail.new_events()) == []  # no file yet
    line = json.dumps({"ev": "grant", "t": 1}).encode()
    with path.open("wb") as file:
        file.write(line[:5])
        file.flush()
        assert list(tail.new_events()) == []
        file.write(line[5:] + b"\n")
        file.flush()
        assert list(tail.new_events()) == [{"ev": "grant", "t": 1}]
    tail.close()


# -- the resource's rule ----------------------------------------------------------------


@given(st.lists(st.tuples(st.sampled_from(["read", "write"]), st.integers(0, 20)), max_size=40))
def test_fenced_counter_accepts_exactly_the_fresh_tokens(ops: list[tuple[str, int]]) -> None:
    on, writes, off = FencedCounter("on"), FencedCounter("writes"), FencedCounter("off")
    highest: int | None = None
    highest_written: int | None = None
    for op, token in ops:
        fresh = highest is None or token >= highest
        fresh_write = highest_written is None or token >= highest_written
        if op == "read":
            assert on.read(LOCK, token)[0].accepted is fresh
            assert writes.read(LOCK, token)[0].accepted is True
            decision, would_refuse = off.read(LOCK, token)
        else:
            assert on.write(LOCK, token, 1)[0].accepted is fresh
            assert writes.write(LOCK, token, 1)[0].accepted is fresh_write
            decision, would_refuse = off.write(LOCK, token, 1)
            if fresh_write:
                highest_written = token if highest_written is None else max(highest_written, token)
        assert decision.accepted is True
        if fresh:
            highest = token if highest is None else max(highest, token)
        assert would_refuse is not fresh
        assert on.snapshot()[LOCK]["max_token"] == highest


@pytest.mark.parametrize("outcome", ["ok", "error", "not_held"])
def test_a_long_paused_holder_must_be_told_of_the_loss(outcome: str) -> None:
    built = build([Step(0, "normal", 0, 1), Step(1, "paused", 0, 1)])
    assert check_round(built.round()).violations == []
    paused = next(fault for fault in built.faults if fault.kind == "pause")
    assert paused.client is not None
    events = built.workers[paused.client]
    # no on_lost, and a release that did not raise LockLost (say the backend's error hid it)
    events[:] = [e for e in events if not (e["ev"] == "lost" and e["acq"] == paused.acq)]
    for event in events:
        if event["ev"] == "release" and event["acq"] == paused.acq:
            event["outcome"] = outcome
    assert check_round(built.round()).by_kind() == {"unnoticed-loss": 1}


# -- semaphores, read/write locks, fair locks ------------------------------------------------


@dataclass(frozen=True)
class _Hold:
    """One holder's whole round, in milliseconds: acquire started, granted, first request,
    second request (a read for a shared holder, a write for an exclusive one), release.
    ``held2``: what ``hold.held`` said at the second request; ``probe``: that request came
    after on_lost (at ``lost``) and is a probe; ``release`` None: still waiting (no grant)."""

    client: str
    token: int
    invoke: int
    grant: int
    first: int
    second: int
    release: int
    side: str = "lock"
    held2: bool = True
    lost: int | None = None
    outcome: str = "ok"


def _shared_round(
    primitive: str,
    holds: list[_Hold],
    *,
    fencing: str = "on",
    permits: int = 2,
    faults: list[FaultRecord] | None = None,
    waits: dict[str, list[dict[str, Any]]] | None = None,
) -> RoundHistory:
    """A round of ``primitive`` from ``holds``, the resource's log made by the real fenced
    counter (requests decided in time order, as the resource would)."""
    counter = FencedCounter(fencing)  # type: ignore[arg-type]
    workers: dict[str, list[dict[str, Any]]] = {}
    requests: list[tuple[int, str, _Hold, bool, bool]] = []
    for hold in holds:
        acq = f"{hold.client}.{hold.token}"
        shared = primitive == "semaphore" or hold.side == "read"
        second = "read" if shared else "write"
        events = workers.setdefault(hold.client, [{"ev": "start", "t": 0, "flavour": "sync"}])
        events += [
            {"ev": "acquire", "t": hold.invoke * MS, "acq": acq, "side": hold.side},
            {"ev": "grant", "t": hold.grant * MS, "acq": acq, "side": hold.side,
             "token": hold.token},
            {"ev": "op", "t": hold.first * MS + 1, "acq": acq, "kind": "read",
             "t0": hold.first * MS, "held": True, "outcome": "ok"},
        ]  # fmt: skip
        if hold.lost is not None:
            events.append({"ev": "lost", "t": hold.lost * MS, "acq": acq})
            events.append({"ev": "work_end", "t": hold.lost * MS + 1, "acq": acq, "why": "lost"})
        events.append(
            {"ev": "op", "t": hold.second * MS + 1, "acq": acq, "kind": second,
             "t0": hold.second * MS, "held": hold.held2, "outcome": "ok",
             **({"probe": True} if hold.lost is not None else {})}
        )  # fmt: skip
        if hold.lost is None:
            events.append({"ev": "work_end", "t": hold.second * MS + 2, "acq": acq, "why": "done"})
        events.append(
            {"ev": "release", "t": hold.release * MS + 1, "acq": acq, "t0": hold.release * MS,
             "outcome": hold.outcome}
        )  # fmt: skip
        requests.append((hold.first, "read", hold, shared, True))
        requests.append((hold.second, second, hold, shared, hold.held2))
    resource: list[dict[str, object]] = []
    for t, op, hold, shared, held in sorted(requests, key=lambda r: r[0]):
        value_before = counter.counter(LOCK)
        if op == "read":
            decision, stale = counter.read(LOCK, hold.token, shared=shared)
        else:
            decision, stale = counter.write(LOCK, hold.token, value_before + 1, shared=shared)
        resource.append({
            "op": op, "t": t * MS + MS // 2, "lock": LOCK, "token": hold.token,
            "acq": f"{hold.client}.{hold.token}", "accepted": decision.accepted,
            "would_refuse": stale, "max_before": decision.max_before, "bound": decision.bound,
            "value_before": value_before, "base": value_before, "value": value_before + 1,
            "shared": shared, "held": held, "probe": hold.lost is not None and t == hold.second,
        })  # fmt: skip
    for client, events in (waits or {}).items():
        workers.setdefault(client, [{"ev": "start", "t": 0}]).extend(events)
    for events in workers.values():
        events.sort(key=lambda event: int(event["t"]))
        events.append({"ev": "stop", "t": 10_000 * MS})
    return RoundHistory(
        LOCK, 1.0, workers, resource, faults or [], recovery_bound=2.5, t_end=9_000 * MS,
        primitive=primitive, permits=permits,
    )  # fmt: skip


def test_a_semaphore_admits_its_permits_and_no_more() -> None:
    # two holders at once, a third granted once the first released: correct
    fine = [
        _Hold("a", 1, 0, 10, 11, 40, 50),
        _Hold("b", 2, 5, 20, 21, 60, 70),
        _Hold("c", 3, 8, 55, 56, 80, 90),
    ]
    result = check_round(_shared_round("semaphore", fine))
    assert result.violations == []
    assert result.stale_refused == 0  # nothing is fenced on a semaphore
    # the third granted while both others still claim theirs and work and use the resource
    crowded = [*fine[:2], _Hold("c", 3, 8, 30, 31, 35, 45)]
    kinds = check_round(_shared_round("semaphore", crowded)).by_kind()
    assert kinds == {"double-hold": 1, "work-after-grant": 1, "overlap": 1}
    # with three permits the same history is correct
    assert check_round(_shared_round("semaphore", crowded, permits=3)).violations == []


def test_a_semaphore_holder_that_claims_nothing_still_must_stop_working_and_be_told() -> None:
    # b stopped claiming (its second request said not held) but was still at work, and
    # released "ok" after c's grant: the claim-count and the release-count both see it
    holds = [
        _Hold("a", 1, 0, 10, 11, 40, 50),
        _Hold("b", 2, 5, 20, 21, 22, 60, held2=False),
        _Hold("c", 3, 8, 30, 31, 35, 45),
    ]
    kinds = check_round(_shared_round("semaphore", holds)).by_kind()
    assert kinds["unnoticed-loss"] == 1
    assert "double-hold" not in kinds  # b never claimed after c's grant


def test_a_paused_semaphore_holder_is_left_out_of_the_count_but_counted_as_a_hazard() -> None:
    # a is paused past its lease (told on resuming, its probe accepted: nothing is fenced);
    # b and c hold the two permits meanwhile
    holds = [
        _Hold("a", 1, 0, 10, 11, 2600, 2602, lost=2590, outcome="lost", held2=False),
        _Hold("b", 2, 5, 20, 21, 1400, 1500),
        _Hold("c", 3, 8, 1200, 1201, 1300, 1350),
        _Hold("d", 4, 2500, 2590, 2591, 2650, 2660),
    ]
    pause = FaultRecord("pause", 15 * MS, 2580 * MS, "worker a", "a", "a.1")
    result = check_round(_shared_round("semaphore", holds, faults=[pause]))
    assert result.violations == []
    assert result.paused_holders_exempt == 1
    assert result.stale_requests == 1  # the probe
    assert result.grants_during_pause == 2  # b and c


def test_readers_share_and_a_writer_waits_for_them() -> None:
    holds = [
        _Hold("r1", 1, 0, 10, 11, 40, 50, side="read"),
        _Hold("r2", 2, 5, 20, 21, 45, 55, side="read"),  # read beside r1: fine
        _Hold("w", 3, 8, 60, 61, 80, 90, side="write"),
        _Hold("r3", 4, 70, 95, 96, 99, 100, side="read"),
    ]
    result = check_round(_shared_round("rwlock", holds))
    assert result.violations == []
    assert result.writes_accepted == result.final_counter == 1 or result.final_counter is None
    assert result.sides == {"read": 3, "write": 1}
    # a reader with a lower token read after a reader with a higher one: not stale
    assert result.stale_refused == 0


def test_a_writer_beside_a_reader_is_found() -> None:
    holds = [
        _Hold("r1", 1, 0, 10, 11, 70, 80, side="read"),
        _Hold("w", 2, 8, 30, 31, 50, 60, side="write"),
    ]
    kinds = check_round(_shared_round("rwlock", holds, fencing="off")).by_kind()
    assert kinds["double-hold"] == 1  # r1 read believing it held, after w's grant
    assert kinds["work-after-grant"] == 1
    assert kinds["overlap"] == 1  # w's requests between r1's at the resource
    # with fencing on, r1's second read is refused (below w's token): the resource is safe,
    # but the library's claim is still wrong
    fenced = check_round(_shared_round("rwlock", holds)).by_kind()
    assert "overlap" not in fenced
    assert fenced["double-hold"] == 1


def test_a_stale_reader_is_refused_after_a_writer() -> None:
    holds = [
        _Hold("r1", 1, 0, 10, 11, 2600, 2602, side="read", lost=2590, outcome="lost",
              held2=False),
        _Hold("w", 2, 8, 1200, 1201, 1300, 1350, side="write"),
        _Hold("r2", 3, 2500, 2590, 2591, 2650, 2660, side="read"),
    ]  # fmt: skip
    pause = FaultRecord("pause", 15 * MS, 2580 * MS, "worker r1", "r1", "r1.1")
    result = check_round(_shared_round("rwlock", holds, faults=[pause]))
    assert result.violations == []
    assert result.stale_refused == 1


def _fair(
    b_invoke: int, b_grant: int, a_end: int, a_why: str = "granted", primitive: str = "fair",
    a_queued: int | None = None, **kw: Any,
) -> CheckResult:  # fmt: skip
    """h holds until 300 ms; a starts waiting at 0 (in line at ``a_queued``, if its worker
    said), b at ``b_invoke``; b is granted at ``b_grant`` and releases 30 ms later; a's
    acquire ends at ``a_end`` (``a_why``)."""
    holds = [
        _Hold("h", 1, -10, -5, 0, 1, 300),
        _Hold("b", 3 if b_grant > a_end else 2, b_invoke, b_grant, b_grant + 1, b_grant + 2,
              b_grant + 30),
    ]  # fmt: skip
    a_events: list[dict[str, Any]] = [{"ev": "acquire", "t": 0, "acq": "a.9"}]
    if a_queued is not None:
        a_events.append({"ev": "queued", "t": a_queued * MS})
    if a_why == "granted":
        token = 2 if b_grant > a_end else 3
        a_events += [
            {"ev": "grant", "t": a_end * MS, "acq": "a.9", "token": token},
            {"ev": "work_end", "t": a_end * MS + 1, "acq": "a.9", "why": "done"},
            {"ev": "release", "t": a_end * MS + 3, "acq": "a.9", "t0": a_end * MS + 2,
             "outcome": "ok"},
        ]  # fmt: skip
    else:
        a_events.append({"ev": "no_grant", "t": a_end * MS, "acq": "a.9", "why": a_why})
    return check_round(_shared_round(primitive, holds, waits={"a": a_events}, **kw))


def test_a_fair_lock_grants_in_arrival_order() -> None:
    # a arrived first and is granted first, b after it: in order, one pair checked
    result = _fair(b_invoke=100, b_grant=340, a_end=301)
    assert result.violations == []
    assert result.fair_pairs == 1


def test_a_waiter_overtaken_on_a_fair_lock_is_found() -> None:
    result = _fair(b_invoke=100, b_grant=301, a_end=340)
    assert result.by_kind() == {"unfair": 1}
    # a's own pause ended long enough before it started (fair_lapse, 6 s) to be no excuse
    paused = FaultRecord("pause", -9000 * MS, -6100 * MS, "worker a", "a", None)
    assert _fair(b_invoke=100, b_grant=301, a_end=340, faults=[paused]).by_kind()["unfair"] == 1
    # timed out still waiting, after b was granted and released: overtaken all the same
    assert _fair(b_invoke=100, b_grant=301, a_end=4000, a_why="timeout").by_kind() == {"unfair": 1}


def test_fairness_is_not_judged_where_arrival_order_is_uncertain() -> None:
    # b started within the slack of a: a's first request may have reached the backend later
    result = _fair(b_invoke=20, b_grant=301, a_end=340)
    assert result.violations == []
    assert result.fair_pairs == 0
    # a's acquire ended in an error: it was in trouble with the backend meanwhile
    assert _fair(b_invoke=100, b_grant=301, a_end=340, a_why="BackendUnavailable").violations == []
    # a was paused while waiting (its entry may have lapsed), or a server fault came between
    pause = FaultRecord("pause", 50 * MS, 60 * MS, "worker a", "a", None)
    assert _fair(b_invoke=100, b_grant=301, a_end=340, faults=[pause]).violations == []
    # a was paused just before it started (it held the lock then): resumed, its client
    # reconnects before a's first request reaches the backend
    resumed = FaultRecord("pause", -3000 * MS, -4 * MS, "worker a", "a", None)
    assert _fair(b_invoke=100, b_grant=301, a_end=340, faults=[resumed]).violations == []
    restart = FaultRecord("restart", -3000 * MS, -2000 * MS, "every server")
    assert _fair(b_invoke=100, b_grant=301, a_end=340, faults=[restart]).violations == []
    # b granted while a still waited, but a's grant came before b began its release: the
    # backend may have granted a first, its reply late (not fairness's business: the two
    # holds overlapping is, and the other properties say so)
    assert "unfair" not in _fair(b_invoke=100, b_grant=301, a_end=320).by_kind()
    # and on a lock that is not fair, the same overtaking is no violation
    assert _fair(b_invoke=100, b_grant=301, a_end=340, primitive="lock").violations == []


def test_an_election_is_checked_as_the_fair_mutex_it_is() -> None:
    """Candidates lead in the order they came: a later one leading first is found."""
    assert _fair(b_invoke=100, b_grant=340, a_end=301, primitive="election").violations == []
    overtaken = _fair(b_invoke=100, b_grant=301, a_end=340, primitive="election")
    assert overtaken.by_kind() == {"unfair": 1}


# -- availability (issue 29) ---------------------------------------------------------------


def _with_fault(
    kind: str, available: dict[str, tuple[str, ...]], event: dict[str, Any], after_ms: int = 2000
) -> list[Violation]:
    """The unavailability found in a round with one fault of ``kind`` around a grant and
    ``event`` ``after_ms`` after that grant (the recovery bound is 2.5 s from the fault's end,
    0.1 s after the grant)."""
    built = build([Step(0, "normal", 0, 1), Step(1, "normal", 0, 1)])
    acq, client, _token, t_grant = built.grants[1]
    built.available = available
    built.t_end = t_grant + 5 * S  # the workers went on until then
    built.faults.append(FaultRecord(kind, t_grant - 100 * MS, t_grant + 100 * MS, "node 2"))
    built.workers[client].append({**event, "t": t_grant + after_ms * MS, "acq": acq})
    built.workers[client].sort(key=lambda e: e["t"])
    return [v for v in check_round(built.round()).violations if v.kind == "unavailable"]


FAILED = {"ev": "no_grant", "why": "BackendUnavailable: reply was lost (ReadTimeout)"}
LOST = {"ev": "lost", "reason": "the renewals failed"}


@pytest.mark.parametrize("event", [FAILED, LOST], ids=["acquire", "hold"])
def test_a_failure_within_a_fault_the_deployment_rides_out_is_unavailability(
    event: dict[str, Any],
) -> None:
    (found,) = _with_fault("minority", {"minority": ("acquire", "hold")}, event)
    assert "into minority of node 2" in found.detail


def test_what_a_fault_does_not_promise_is_not_unavailability() -> None:
    # the leader's loss may cost holds (an election can outlast a lease), never waiters
    promises = {"leader": ("acquire",)}
    assert _with_fault("leader", promises, LOST) == []
    assert [v.kind for v in _with_fault("leader", promises, FAILED)] == ["unavailable"]
    # past the recovery bound after the fault, and under faults that promise nothing
    assert _with_fault("minority", {"minority": ("acquire",)}, FAILED, after_ms=3000) == []
    assert _with_fault("restart", {"minority": ("acquire",)}, FAILED) == []
    assert _with_fault("minority", {}, FAILED) == []
    # an acquire that ran out of time waited as it was asked to, whatever it then says
    timeout = {"ev": "no_grant", "why": "timeout"}
    assert _with_fault("minority", {"minority": ("acquire",)}, timeout) == []


def test_an_acquire_that_failed_when_its_time_was_up_waited_as_asked() -> None:
    built = build([Step(0, "normal", 0, 1), Step(1, "normal", 0, 1)])
    _acq, client, _token, t_grant = built.grants[1]
    built.available = {"minority": ("acquire",)}
    built.t_end = t_grant + 10 * S
    built.faults.append(FaultRecord("minority", t_grant, t_grant + 100 * MS, "node 2"))
    for acq, waited_ms in (("w9.1", 4000), ("w9.2", 1000)):
        start = t_grant + 50 * MS
        built.workers[client] += [
            {"ev": "acquire", "t": start, "acq": acq},
            {**FAILED, "t": start + waited_ms * MS, "acq": acq},
        ]
    built.workers[client].sort(key=lambda e: e["t"])
    history = dataclasses.replace(built.round(), acquire_timeout=4.0)
    found = [v for v in check_round(history).violations if v.kind == "unavailable"]
    assert len(found) == 1  # w9.2's, after 1 s of its 4


@pytest.mark.parametrize(("gap_ms", "stalled"), [(100, False), (3000, True)])
def test_a_dead_waiter_may_hold_the_line_up_for_the_bound_only(gap_ms: int, stalled: bool) -> None:
    built = build([Step(0, "normal", 0, 1), Step(1, "normal", gap_ms, 1)])
    _acq, _client, _token, t_grant = built.grants[0]
    built.faults.append(FaultRecord("kill-waiter", t_grant + MS, t_grant + MS, "worker w9"))
    history = dataclasses.replace(built.round(), dead_waiter_bound=1.5)
    found = [
        v for v in check_round(history).violations if "was killed, the next release" in v.detail
    ]
    assert bool(found) is stalled, found


def test_a_waiter_in_line_before_another_began_is_ahead_of_it_however_close() -> None:
    """With the workers' ``queued`` events, arrival is the place in line, not the acquire's
    start plus a slack: a waiter queued before the other even began is ahead of it, 10 ms
    earlier or 1 s; one queued after the other began (its place taken by a second request,
    or a slow one) is not judged against it."""
    assert _fair(b_invoke=30, b_grant=301, a_end=340).violations == []  # within the slack
    close = _fair(b_invoke=30, b_grant=301, a_end=340, a_queued=20)
    assert close.by_kind() == {"unfair": 1}  # in line 10 ms before the other began
    late_in_line = _fair(b_invoke=100, b_grant=301, a_end=340, a_queued=120)
    assert late_in_line.violations == []
    assert late_in_line.fair_pairs == 0


# -- multi-locks ---------------------------------------------------------------------------

multi_plans = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.lists(st.sampled_from(["w", "x", "y", "z"]), min_size=2, max_size=3, unique=True),
        st.integers(0, 30),
        st.integers(0, 20),
    ),
    min_size=1,
    max_size=20,
)


@given(multi_plans)
@settings(max_examples=100, deadline=None)
def test_correct_multi_histories_have_no_violation(
    plan: list[tuple[int, list[str], int, int]],
) -> None:
    """Holders of overlapping sets one after the other, of disjoint sets side by side (their
    tokens in no order across names): nothing is flagged, and each name's counter counts its
    own writes."""
    holds = schedule_multi(plan)
    result = check_round(multi_round(holds))
    assert result.violations == []
    assert result.grants == len(holds)
    writes = sum(len(hold.tokens) for hold in holds)
    assert result.final_counter == result.writes_accepted == writes
    assert result.stale_requests == 0


def _pair(b_tokens: tuple[tuple[str, int], ...], fencing: str = "on") -> CheckResult:
    """a holds x and y from 5 to 50 ms (its writes at 40 ms); b is granted ``b_tokens`` at
    20 ms, reads at 25, writes at 30 and releases at 35: inside a's hold."""
    a = MultiHold("a", 1, (("x", 1), ("y", 2)), 0, 5, 10, 40, 50)
    b = MultiHold("b", 1, b_tokens, 2, 20, 25, 30, 35)
    return check_round(multi_round([a, b], fencing=fencing))


def test_multi_holds_of_disjoint_names_may_overlap() -> None:
    result = _pair((("w", 3), ("z", 4)))
    assert result.violations == []
    assert result.final_counter == result.writes_accepted == 4


def test_two_multi_holds_overlapping_on_one_name_are_found_on_that_name() -> None:
    unfenced = _pair((("y", 3), ("z", 4)), fencing="off")
    kinds = unfenced.by_kind()
    assert kinds["overlap"] >= 1  # a's write on y after b's requests: A, B, A
    assert kinds["lost-update"] >= 1
    # believed held, worked on and released without LockLost after b's grant of y
    assert {"double-hold", "work-after-grant", "unnoticed-loss"} <= set(kinds)
    # every one of them on y alone: x (a's only) and z (b's only) were never shared
    assert all(v.detail.startswith("y: ") for v in unfenced.violations), unfenced.violations
    # fenced, the resource refuses a's stale write on y; what a's holder believed is still
    # wrong, on y
    fenced = _pair((("y", 3), ("z", 4)))
    assert "overlap" not in fenced.by_kind()
    assert fenced.stale_refused == 1
    # its writes on x and on y: each sent with hold.held true, which claims y as well
    assert fenced.by_kind()["double-hold"] == 2
    assert all(v.detail.startswith("y: ") for v in fenced.violations), fenced.violations


def test_tokens_grow_per_name_and_only_per_name() -> None:
    a = MultiHold("a", 1, (("x", 5), ("y", 6)), 0, 5, 10, 20, 30)
    # b asked after a's grant: its y token must be above a's 6; its z token is z's alone
    late = MultiHold("b", 1, (("y", 7), ("z", 1)), 40, 45, 50, 60, 70)
    assert check_round(multi_round([a, late])).violations == []
    stale = dataclasses.replace(late, tokens=(("y", 4), ("z", 1)))
    result = check_round(multi_round([a, stale]))
    (order,) = [v for v in result.violations if v.kind == "token-order"]
    assert order.detail.startswith("y: b.1 got token 4, not above token 6 of a.1")


def test_a_request_about_a_name_the_grant_did_not_include_is_unaccounted() -> None:
    history = multi_round(schedule_multi([(0, ["x", "y"], 0, 0), (1, ["y", "z"], 0, 0)]))
    request = next(r for r in history.resource if r.get("acq") == "w0.1" and r["lock"] == "y")
    request["lock"] = "z"
    details = [v.detail for v in check_round(history).violations if v.kind == "unaccounted"]
    assert any(d.startswith("z: the resource got a") and "w0.1" in d for d in details), details


def test_a_violation_on_every_name_of_a_hold_is_reported_once_naming_them() -> None:
    # a paused 2.6 s (more than twice its lease) and never told: on x and on y alike (b,
    # granted other names after the pause, shows the round went on)
    paused = MultiHold("a", 1, (("x", 1), ("y", 2)), 0, 5, 10, 2700, 2800)
    other = MultiHold("b", 1, (("w", 1), ("z", 1)), 2600, 2650, 2660, 2670, 2680)
    pause = FaultRecord("pause", 20 * MS, 2620 * MS, "worker a", "a", "a.1")
    result = check_round(multi_round([paused, other], faults=[pause]))
    (violation,) = result.violations
    assert violation.kind == "unnoticed-loss"
    assert violation.detail.startswith("x, y: a.1 was paused")


def _stalled(
    *, fault: FaultRecord | None = None, granted_meanwhile: bool = False
) -> list[Violation]:
    """a and b each take a multi-lock and release it; then, from 100 ms, each waits for
    x and y (in opposite orders) until its acquire times out after 4 s, and c is granted x
    after that (at 4200 ms; with ``granted_meanwhile``, at 2000 ms too)."""
    holds = [
        MultiHold("a", 1, (("x", 1), ("y", 2)), 0, 5, 6, 10, 20),
        MultiHold("b", 1, (("y", 3), ("z", 4)), 15, 25, 26, 30, 40),
        MultiHold("c", 1, (("w", 5), ("x", 6)), 4100, 4200, 4201, 4210, 4220),
    ]
    if granted_meanwhile:
        holds.append(MultiHold("c", 0, (("w", 1), ("z", 5)), 1900, 2000, 2001, 2010, 2020))
    waits = {
        "a": [{"ev": "acquire", "t": 100 * MS, "acq": "a.2", "names": ["x", "y"]},
              {"ev": "no_grant", "t": 4100 * MS, "acq": "a.2", "why": "timeout"}],
        "b": [{"ev": "acquire", "t": 101 * MS, "acq": "b.2", "names": ["y", "x"]},
              {"ev": "no_grant", "t": 4101 * MS, "acq": "b.2", "why": "timeout"}],
    }  # fmt: skip
    history = multi_round(holds, waits=waits, faults=[fault] if fault else [])
    return check_round(history).violations


def test_a_round_whose_waiters_all_time_out_with_no_fault_is_a_deadlock() -> None:
    (violation,) = _stalled()
    assert violation.kind == "no-recovery"
    assert violation.t == 100 * MS
    assert violation.detail == (
        "nobody was granted anything for 4.00 s, with no fault under way, while 2 acquires "
        "of a, b timed out (a.2, b.2): a deadlock"
    )


def test_waiters_that_time_out_beside_a_grant_or_a_fault_are_no_deadlock() -> None:
    # someone was granted meanwhile: the others waited behind holders, as waiters may
    assert _stalled(granted_meanwhile=True) == []
    # a fault under way while they waited (the grant after it came within the bound)
    assert _stalled(fault=FaultRecord("restart", 3000 * MS, 3100 * MS, "every server")) == []
