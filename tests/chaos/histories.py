"""Hand-made torture histories: correct ones built from a plan, and mutations that break them.

A plan is a list of :class:`Step` s, one grant each, in order: ``normal`` (acquire, read,
think, write, end of work, release), ``paused`` (the holder reads, is paused past its lease,
the next holder is granted and does its whole round, then the paused one's on_lost runs, it
stops working, its probe write is refused and its release raises LockLost) or ``killed``
(the holder reads and is killed; the next grant comes after the lease). The resource's
decisions come from the real :class:`FencedCounter`, so the log is what the resource would
have written. Times are nanoseconds on one clock.

Multi-lock rounds are built from :class:`MultiHold` s (:func:`multi_round`), by hand or
scheduled from a plan (:func:`schedule_multi`), each name a counter of its own at the
resource.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from tumbler.torture.check import FaultRecord, RoundHistory
from tumbler.torture.resource import FencedCounter

MS = 1_000_000
S = 1_000_000_000
LOCK = "torture-test"
TTL = 1.0
BOUND = TTL + 1.5


@dataclass(frozen=True)
class Step:
    client: int
    kind: str  # normal, paused, killed
    gap_ms: int
    think_ms: int
    token_step: int = 1


@dataclass
class Built:
    """A history under construction; :meth:`round` makes the checker's input."""

    workers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    resource: list[dict[str, Any]] = field(default_factory=list)
    faults: list[FaultRecord] = field(default_factory=list)
    killed: set[str] = field(default_factory=set)
    bad_exits: dict[str, int] = field(default_factory=dict)
    #: (acq, client, token, t_grant) in grant order
    grants: list[tuple[str, str, int, int]] = field(default_factory=list)
    t_end: int = 0
    free_after_stop: float | None = 0.01
    primitive: str = "lock"
    #: fault kind -> what the deployment promises to keep through it
    available: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def round(self) -> RoundHistory:
        return RoundHistory(
            lock=LOCK,
            ttl=TTL,
            primitive=self.primitive,
            workers=copy.deepcopy(self.workers),
            resource=copy.deepcopy(self.resource),
            faults=list(self.faults),
            killed=set(self.killed),
            bad_exits=dict(self.bad_exits),
            recovery_bound=BOUND,
            t_end=self.t_end,
            free_after_stop=self.free_after_stop,
            available=dict(self.available),
        )


class _Builder:
    def __init__(self) -> None:
        self.built = Built()
        self.counter = FencedCounter("on")
        self.token = 100
        self.attempts: dict[str, int] = {}
        self.incarnation: dict[int, int] = {}

    def client(self, index: int) -> str:
        incarnation = self.incarnation.get(index, 0)
        return f"w{index}" if incarnation == 0 else f"w{index}r{incarnation}"

    def event(self, who: str, **fields: Any) -> None:
        self.built.workers.setdefault(who, []).append(fields)

    def acquire(self, client: str, t_invoke: int, t_grant: int, token_step: int) -> str:
        self.attempts[client] = self.attempts.get(client, 0) + 1
        acq = f"{client}.{self.attempts[client]}"
        if client not in self.built.workers:
            self.event(client, ev="start", t=t_invoke - MS, client=client, pid=1000)
        self.token += token_step
        self.event(client, ev="acquire", t=t_invoke, acq=acq)
        self.event(
            client, ev="grant", t=t_grant, acq=acq, token=self.token, ttl=TTL,
            deadline=t_grant + int(TTL * S),
        )  # fmt: skip
        self.built.grants.append((acq, client, self.token, t_grant))
        return acq

    def read(self, client: str, acq: str, token: int, t0: int, held: bool = True) -> int:
        decision, would_refuse = self.counter.read(LOCK, token)
        value_before = self.counter.counter(LOCK)
        self.built.resource.append(
            {
                "op": "read", "t": t0 + MS // 2, "lock": LOCK, "token": token, "acq": acq,
                "client": client, "accepted": decision.accepted, "would_refuse": would_refuse,
                "max_before": decision.max_before, "value_before": value_before,
            }
        )  # fmt: skip
        outcome = "ok" if decision.accepted else "refused"
        self.event(
            client, ev="op", t=t0 + MS, acq=acq, token=token, kind="read", t0=t0, held=held,
            outcome=outcome, value=decision.value,
        )  # fmt: skip
        return decision.value

    def write(
        self, client: str, acq: str, token: int, t0: int, base: int, held: bool, probe: bool = False
    ) -> None:
        value_before = self.counter.counter(LOCK)
        decision, would_refuse = self.counter.write(LOCK, token, base + 1)
        self.built.resource.append(
            {
                "op": "write", "t": t0 + MS // 2, "lock": LOCK, "token": token, "acq": acq,
                "client": client, "accepted": decision.accepted, "would_refuse": would_refuse,
                "max_before": decision.max_before, "value_before": value_before,
                "base": base, "value": base + 1,
            }
        )  # fmt: skip
        outcome = "ok" if decision.accepted else "refused"
        extra = {"probe": True} if probe else {}
        self.event(
            client, ev="op", t=t0 + MS, acq=acq, token=token, kind="write", t0=t0, held=held,
            outcome=outcome, value=base + 1, **extra,
        )  # fmt: skip

    def release(self, client: str, acq: str, t0: int, outcome: str = "ok") -> int:
        self.event(client, ev="release", t=t0 + MS, acq=acq, t0=t0, outcome=outcome)
        return t0 + MS

    def normal(self, index: int, t: int, think: int, token_step: int) -> int:
        """One whole round of a holder from ``t``; returns when its release completed."""
        client = self.client(index)
        acq = self.acquire(client, t, t + 2 * MS, token_step)
        token = self.token
        value = self.read(client, acq, token, t + 3 * MS)
        self.write(client, acq, token, t + 5 * MS + think, value, held=True)
        self.event(client, ev="work_end", t=t + 6 * MS + think, acq=acq, why="done")
        return self.release(client, acq, t + 7 * MS + think)


def build(steps: list[Step]) -> Built:
    """A correct history following ``steps`` (a final normal step is added after faults)."""
    builder = _Builder()
    t = 10 * S
    plan = list(steps)
    if not plan or plan[-1].kind != "normal":
        plan.append(Step(client=0, kind="normal", gap_ms=1, think_ms=1))
    pending_pauses: list[Step] = []
    index = 0
    while index < len(plan):
        step = plan[index]
        t += step.gap_ms * MS
        think = step.think_ms * MS
        if step.kind == "normal":
            t = builder.normal(step.client, t, think, step.token_step)
        elif step.kind == "killed":
            client = builder.client(step.client)
            acq = builder.acquire(client, t, t + 2 * MS, step.token_step)
            builder.read(client, acq, builder.token, t + 3 * MS)
            t_kill = t + 4 * MS + think
            builder.built.faults.append(
                FaultRecord("kill", t_kill, t_kill, f"worker {client}", client, acq)
            )
            builder.built.killed.add(client)
            builder.incarnation[step.client] = builder.incarnation.get(step.client, 0) + 1
            # the lease runs out; the next holder (another client) gets the lock after it
            t = t_kill + int(TTL * S) + 50 * MS
        else:  # paused
            client = builder.client(step.client)
            acq = builder.acquire(client, t, t + 2 * MS, step.token_step)
            token = builder.token
            value = builder.read(client, acq, token, t + 3 * MS)
            t_stop = t + 4 * MS
            # another client's whole round after the paused holder's lease ran out
            other = (step.client + 1) % 4
            t_other = t + 2 * MS + int(TTL * S) + 100 * MS
            t = builder.normal(other, t_other, think, 1)
            # resumed after twice the lease (a long pause: its holder must learn of the loss)
            t_cont = max(t + 5 * MS, t_stop + int(2.5 * TTL * S))
            builder.event(client, ev="lost", t=t_cont + MS, acq=acq, reason="lease ran out")
            builder.event(client, ev="work_end", t=t_cont + MS + 1, acq=acq, why="lost")
            builder.write(client, acq, token, t_cont + 2 * MS, value, held=False, probe=True)
            t = builder.release(client, acq, t_cont + 3 * MS, outcome="lost")
            builder.built.faults.append(
                FaultRecord("pause", t_stop, t_cont, f"worker {client}", client, acq)
            )
            pending_pauses.append(step)
        index += 1
    built = builder.built
    for client in built.workers:
        if client not in built.killed:
            builder.event(client, ev="stop", t=t + MS)
    built.resource.append(
        {"op": "final", "t": t + 2 * MS, "locks": {LOCK: {"counter": builder.counter.counter(LOCK),
                                                         "max_token": builder.token}}}
    )  # fmt: skip
    built.t_end = t + MS
    return built


# -- mutations: each breaks one property ---------------------------------------------------


def _grant_pairs(built: Built) -> list[tuple[tuple[str, str, int, int], tuple[str, str, int, int]]]:
    return list(zip(built.grants, built.grants[1:], strict=False))


def _released_ok(built: Built) -> list[dict[str, Any]]:
    """Releases that went well, by workers that stopped normally (not killed later)."""
    return [
        event
        for client, events in built.workers.items()
        if client not in built.killed
        for event in events
        if event.get("ev") == "release" and event.get("outcome") == "ok"
    ]


def break_exclusion(built: Built, pick: int) -> str:
    """An earlier grant's write accepted after a later grant's requests (A, B, A)."""
    pairs = _grant_pairs(built)
    first, second = pairs[pick % len(pairs)]
    last_of_second = max(
        (i for i, r in enumerate(built.resource) if r.get("acq") == second[0]), default=None
    )
    assert last_of_second is not None
    record = built.resource[last_of_second]
    built.resource.insert(
        last_of_second + 1,
        {
            "op": "write", "t": record["t"] + 1, "lock": LOCK, "token": first[2],
            "acq": first[0], "client": first[1], "accepted": True, "would_refuse": True,
            "max_before": record["token"], "value_before": record.get("value", 0),
            "base": record.get("value", 0), "value": record.get("value", 0) + 1,
        },
    )  # fmt: skip
    return "overlap"


def break_fencing(built: Built, pick: int) -> str:
    """An accepted request whose token is below the highest accepted before it."""
    accepted = [r for r in built.resource if r.get("accepted")]
    record = accepted[pick % len(accepted)]
    record["max_before"] = record["token"] + 1
    return "stale-accepted"


def break_counter(built: Built, pick: int) -> str:
    """A write based on a value the counter no longer had."""
    writes = [r for r in built.resource if r.get("op") == "write" and r.get("accepted")]
    record = writes[pick % len(writes)]
    record["base"] = record["value_before"] - 1
    return "lost-update"


def break_tokens(built: Built, pick: int) -> str:
    """A later grant gets a token not above an earlier one's."""
    pairs = _grant_pairs(built)
    first, second = pairs[pick % len(pairs)]
    for event in built.workers[second[1]]:
        if event.get("ev") == "grant" and event.get("acq") == second[0]:
            event["token"] = first[2] - (pick % 2)  # equal, or lower
    return "token-order"


def break_belief(built: Built, pick: int) -> str:
    """A holder sends a request believing it holds, after a later grant completed."""
    pairs = _grant_pairs(built)
    first, second = pairs[pick % len(pairs)]
    t0 = second[3] + 1 + pick % (5 * MS)
    built.workers[first[1]].append(
        {"ev": "op", "t": t0 + MS, "acq": first[0], "token": first[2], "kind": "write",
         "t0": t0, "held": True, "outcome": "refused", "value": 0}
    )  # fmt: skip
    return "double-hold"


def break_loss_notice(built: Built, pick: int) -> str:
    """A release reported ok after a later grant of the lock completed."""
    pairs = _grant_pairs(built)
    first, second = pairs[pick % len(pairs)]
    for event in built.workers[first[1]]:
        if event.get("ev") == "release" and event.get("acq") == first[0]:
            event["t0"] = second[3] + 1
            event["outcome"] = "ok"
            return "unnoticed-loss"
    # the first one was killed (no release): give it one
    built.killed.discard(first[1])
    built.workers[first[1]].append(
        {"ev": "release", "t": second[3] + 2, "acq": first[0], "t0": second[3] + 1,
         "outcome": "ok"}
    )  # fmt: skip
    return "unnoticed-loss"


def break_late_work(built: Built, pick: int) -> str:
    """A holder not paused goes on working (no release, no on_lost, no end of work) until after
    a later grant completed, as under a silent partition whose on_lost comes late."""
    paused = {fault.acq for fault in built.faults if fault.kind == "pause"}
    pairs = [pair for pair in _grant_pairs(built) if pair[0][0] not in paused]
    first, second = pairs[pick % len(pairs)]
    t_late = second[3] + 1 + pick % (500 * MS)
    events = built.workers[first[1]]
    ends = [e for e in events if e.get("acq") == first[0] and e["ev"] in ("release", "work_end")]
    for event in ends:
        if event["ev"] == "release":
            event["t0"] = t_late
            event["t"] = t_late + MS
        else:
            event["t"] = t_late
    if not ends:  # it was killed in its critical section: make it work on, then release
        built.killed.discard(first[1])
        events.append(
            {"ev": "release", "t": t_late + MS, "acq": first[0], "t0": t_late, "outcome": "ok"}
        )
    return "work-after-grant"


def break_accounting(built: Built, pick: int) -> str:
    """A grant never released by a worker that stopped normally (or a stranger's request)."""
    releases = _released_ok(built)
    if pick % 2 == 0 and releases:
        victim = releases[pick % len(releases)]
        for events in built.workers.values():
            if victim in events:
                events.remove(victim)
    else:
        record = built.resource[pick % (len(built.resource) - 1)]
        record["acq"] = "stranger.1"
    return "unaccounted"


def break_liveness(built: Built, pick: int) -> str:
    """A fault after which the lock is never granted again (or never freed after the stop)."""
    if pick % 2:
        built.free_after_stop = None
    else:
        t = built.t_end + MS
        built.faults.append(FaultRecord("restart", t, t + MS, "every server"))
        built.t_end = t + int((BOUND + 1) * S)
    return "no-recovery"


def break_servers(built: Built, pick: int) -> str:
    """A fault after which the servers never served again, and nor was the lock granted."""
    t = built.t_end + MS
    built.faults.append(FaultRecord("restart", t, t + MS, "every server", unserved=True))
    built.t_end = t + int((BOUND + 1) * S)
    return "servers-down"


def break_worker(built: Built, pick: int) -> str:
    """A worker hit a bug, or exited with an unexpected status."""
    client = sorted(built.workers)[pick % len(built.workers)]
    if pick % 2:
        built.workers[client].append({"ev": "error", "t": built.t_end, "what": "Traceback\nBoom"})
    else:
        built.bad_exits[client] = 70
    return "worker-error"


def break_fairness(built: Built, pick: int) -> str:
    """On a fair lock, a waiter that started its acquire well before another's is still
    waiting when that other has been granted the lock and begun its release."""
    released = [
        (event, client)
        for client, events in built.workers.items()
        for event in events
        if event.get("ev") == "release"
    ]
    release, client = released[pick % len(released)]
    acq = release["acq"]
    t_invoke = next(
        e["t"] for e in built.workers[client] if e["ev"] == "acquire" and e["acq"] == acq
    )
    built.primitive = "fair"
    built.workers["w9"] = [
        {"ev": "start", "t": t_invoke - 200 * MS, "client": "w9", "pid": 9},
        {"ev": "acquire", "t": t_invoke - 100 * MS, "acq": "w9.1"},
        {"ev": "no_grant", "t": release["t0"] + MS, "acq": "w9.1", "why": "timeout"},
        {"ev": "stop", "t": release["t0"] + 2 * MS},
    ]
    return "unfair"


def break_availability(built: Built, pick: int) -> str:
    """Where the deployment rides a fault out (a minority of its nodes lost), an acquire that
    fails with BackendUnavailable, or a hold lost, while the fault lasts."""
    acq, client, _token, t_grant = built.grants[pick % len(built.grants)]
    # the plan's own faults (a holder paused, killed) promise it too: none excuses it
    for kind in {fault.kind for fault in built.faults} | {"minority"}:
        built.available[kind] = ("acquire", "hold")
    built.faults.append(FaultRecord("minority", t_grant - 50 * MS, t_grant + 50 * MS, "node 1"))
    if pick % 2:
        event = {"ev": "lost", "t": t_grant + MS, "acq": acq, "reason": "renewal failed"}
    else:
        event = {"ev": "no_grant", "t": t_grant + MS, "acq": f"{client}.x",
                 "why": "BackendUnavailable: the reply was lost"}  # fmt: skip
    built.workers[client].append(event)
    built.workers[client].sort(key=lambda e: e["t"])
    return "unavailable"


MUTATIONS = (
    break_exclusion,
    break_fencing,
    break_counter,
    break_tokens,
    break_belief,
    break_loss_notice,
    break_late_work,
    break_accounting,
    break_liveness,
    break_servers,
    break_worker,
    break_fairness,
    break_availability,
)


# -- multi-locks ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MultiHold:
    """One round of a multi-lock's holder, in milliseconds: its acquire started (``invoke``),
    was granted ``tokens`` (name, token; requests go in this order), read each name's counter
    from ``read`` on and wrote each from ``write`` on (1 ms apart), and released. ``held``:
    what ``hold.held`` said at its writes; ``outcome``: its release's."""

    client: str
    attempt: int
    tokens: tuple[tuple[str, int], ...]
    invoke: int
    grant: int
    read: int
    write: int
    release: int
    held: bool = True
    outcome: str = "ok"

    @property
    def acq(self) -> str:
        return f"{self.client}.{self.attempt}"


def multi_round(
    holds: list[MultiHold],
    *,
    fencing: str = "on",
    waits: dict[str, list[dict[str, Any]]] | None = None,
    faults: list[FaultRecord] | None = None,
) -> RoundHistory:
    """A round of ``multi`` from ``holds`` (and ``waits``: more events of the workers), the
    resource's log made by the real fenced counter, one counter per name (requests decided
    in time order, as the resource would)."""
    counter = FencedCounter(fencing)  # type: ignore[arg-type]
    workers: dict[str, list[dict[str, Any]]] = {}
    requests: list[tuple[int, str, MultiHold, str, int]] = []
    for hold in holds:
        events = workers.setdefault(hold.client, [{"ev": "start", "t": 0, "flavour": "sync"}])
        events += [
            {"ev": "acquire", "t": hold.invoke * MS, "acq": hold.acq, "side": "lock",
             "names": [name for name, _ in hold.tokens]},
            {"ev": "grant", "t": hold.grant * MS, "acq": hold.acq, "side": "lock",
             "tokens": dict(hold.tokens), "ttl": TTL},
        ]  # fmt: skip
        for index, (name, token) in enumerate(hold.tokens):
            for kind, start, held in (("read", hold.read, True), ("write", hold.write, hold.held)):
                t0 = (start + index) * MS
                events.append(
                    {"ev": "op", "t": t0 + MS // 2, "acq": hold.acq, "token": token,
                     "kind": kind, "t0": t0, "held": held, "outcome": "ok", "lock": name}
                )  # fmt: skip
                requests.append((t0 + MS // 4, kind, hold, name, token))
        last_write = hold.write + len(hold.tokens)
        events += [
            {"ev": "work_end", "t": last_write * MS, "acq": hold.acq, "why": "done"},
            {"ev": "release", "t": hold.release * MS + MS // 2, "acq": hold.acq,
             "t0": hold.release * MS, "outcome": hold.outcome},
        ]  # fmt: skip
    resource: list[dict[str, Any]] = []
    read: dict[tuple[str, str], int] = {}
    for t, kind, hold, name, token in sorted(requests, key=lambda request: request[0]):
        value_before = counter.counter(name)
        if kind == "read":
            decision, stale = counter.read(name, token)
            read[hold.acq, name] = decision.value
            extra: dict[str, Any] = {}
        else:
            base = read[hold.acq, name]
            decision, stale = counter.write(name, token, base + 1)
            extra = {"base": base, "value": base + 1}
        resource.append(
            {"op": kind, "t": t, "lock": name, "token": token, "acq": hold.acq,
             "client": hold.client, "accepted": decision.accepted, "would_refuse": stale,
             "max_before": decision.max_before, "bound": decision.bound,
             "value_before": value_before, "shared": False, "held": True, "probe": False,
             **extra}
        )  # fmt: skip
    for client, events in (waits or {}).items():
        workers.setdefault(client, [{"ev": "start", "t": 0, "flavour": "sync"}]).extend(events)
    for events in workers.values():
        events.sort(key=lambda event: int(event["t"]))
        events.append({"ev": "stop", "t": 10_000 * MS})
    resource.append({"op": "final", "t": 10_000 * MS, "locks": counter.snapshot()})
    return RoundHistory(
        LOCK, TTL, workers, resource, faults or [], recovery_bound=2.5, t_end=9_000 * MS,
        primitive="multi",
    )  # fmt: skip


def schedule_multi(plan: list[tuple[int, list[str], int, int]]) -> list[MultiHold]:
    """Correct multi-lock holds from ``plan`` (client, names, gap ms, think ms): each client's
    acquire starts ``gap`` after its last release, and is granted once every one of its names
    is free (holds of disjoint names run side by side); tokens grow per name, in grant
    order."""
    client_free: dict[int, int] = {}
    name_free: dict[str, int] = {}
    tokens: dict[str, int] = {}
    attempts: dict[int, int] = {}
    holds: list[MultiHold] = []
    for client, names, gap, think in plan:
        invoke = client_free.get(client, 0) + gap + 1
        grant = max([invoke, *(name_free.get(name, 0) for name in names)]) + 2
        read = grant + 1
        write = read + len(names) + think
        release = write + len(names) + 1
        granted = []
        for name in sorted(names):  # as the library takes them
            tokens[name] = tokens.get(name, 0) + 1 + len(holds)
            granted.append((name, tokens[name]))
            name_free[name] = release + 1
        attempts[client] = attempts.get(client, 0) + 1
        holds.append(
            MultiHold(f"w{client}", attempts[client], tuple(granted), invoke, grant, read,
                      write, release)
        )  # fmt: skip
        client_free[client] = release + 1
    return holds
