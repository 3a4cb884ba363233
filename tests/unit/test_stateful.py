"""A hypothesis state machine plays several clients of one ``memory://`` store on a manual clock.

Each step tries a lock, releases a hold, moves the clock (then lets every client's renewals
run), or force-releases a name; after every step the clients' holds and the backend's
``status()`` are compared with a small model of grants and leases kept here. The model is
written from the documented rules (grant predicate, lease = grant or renewal time + ttl on the
backend, the client giving up 1% + 2 ms earlier, renewal at a third of the lease), not from the
code, so that a change to either side shows up as a disagreement.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import tumbler
from tests.search import examples
from tumbler.testing import ManualClock

TTL = 30.0
PERMITS = 2
NAMES = ("alpha", "beta")
CLIENTS = 3
KINDS = ("mutex", "semaphore", "read", "write")
# how many shared holders a kind admits (0: any number); exclusive kinds count as 1
LIMIT = {"mutex": 1, "write": 1, "semaphore": PERMITS, "read": 0}
SHARED = {"semaphore", "read"}
MAX_ADVANCE = 40.0
RENEW_EVERY = TTL / 3

#: (client index, lock name, kind, renew): each client has its own lock object per key
LockKey = tuple[int, str, str, bool]
AnyLock = tumbler.Lock | tumbler.Semaphore | tumbler.ReadLock


def give_up_margin(ttl: float) -> float:
    """How much before the backend's lease ends a client stops believing it holds it."""
    return ttl * 0.01 + min(0.025, max(0.002, ttl * 0.05))


@dataclass(eq=False)
class Grant:
    """The model of one successful acquire: the backend's row and the client's hold."""

    lock_key: LockKey
    token: int
    hold: tumbler.Hold
    granted_at: float
    #: the backend keeps the row while now < lease_end (memory:// drops it at expires_at <= now)
    lease_end: float
    #: the client's hold is valid while now < give_up_at
    give_up_at: float
    renew_due: float
    in_backend: bool = True
    released: bool = False
    lost: bool = False
    #: an operator force-released it: its holder may believe it holds it until it next renews
    revoked: bool = False
    longest_step: float = 0.0

    @property
    def client(self) -> int:
        return self.lock_key[0]

    @property
    def name(self) -> str:
        return self.lock_key[1]

    @property
    def kind(self) -> str:
        return self.lock_key[2]

    @property
    def renew(self) -> bool:
        return self.lock_key[3]

    @property
    def shared(self) -> bool:
        return self.kind in SHARED

    @property
    def limit(self) -> int:
        return LIMIT[self.kind]

    def __repr__(self) -> str:
        return (
            f"Grant({self.lock_key}, token={self.token}, lease_end={self.lease_end}, "
            f"give_up_at={self.give_up_at}, in_backend={self.in_backend}, "
            f"released={self.released}, lost={self.lost}, revoked={self.revoked})"
        )


class LockMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.now = 0.0
        url = f"memory://stateful-{uuid.uuid4().hex}"
        self.operator = tumbler.connect(url, clock=self.clock)
        self.clients = [tumbler.connect(url, clock=self.clock) for _ in range(CLIENTS)]
        self.locks: dict[LockKey, AnyLock] = {}
        self.grants: list[Grant] = []
        self.last_token = 0

    def teardown(self) -> None:
        for locks in (*self.clients, self.operator):
            locks.close()

    # -- the model ------------------------------------------------------------------------------

    def lock_object(self, key: LockKey) -> AnyLock:
        if key not in self.locks:
            client, name, kind, renew = key
            locks = self.clients[client]
            if kind == "mutex":
                self.locks[key] = locks.lock(name, ttl=TTL, renew=renew)
            elif kind == "semaphore":
                self.locks[key] = locks.semaphore(name, PERMITS, ttl=TTL, renew=renew)
            elif kind == "read":
                self.locks[key] = locks.rwlock(name, ttl=TTL, renew=renew).read()
            else:
                self.locks[key] = locks.rwlock(name, ttl=TTL, renew=renew).write()
        return self.locks[key]

    def backend_rows(self, name: str) -> list[Grant]:
        live = (g for g in self.grants if g.in_backend and self.now < g.lease_end)
        return [g for g in live if g.name == name]

    def unreleased(self) -> list[Grant]:
        return [g for g in self.grants if not g.released]

    def move_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.now += seconds
        for locks in self.clients:
            locks.settle()
        for g in self.grants:
            if g.released or g.lost:
                continue
            g.longest_step = max(g.longest_step, seconds)
            if not g.renew:
                g.lost = self.now >= g.give_up_at
                # a hold the client gives up is given back: its grant leaves the backend
                g.in_backend = g.in_backend and not g.lost
            elif self.now >= g.renew_due:
                # the renewal worker runs once, at the new time: too late, refused, or renewed
                if self.now >= g.give_up_at:
                    g.lost = True
                    g.in_backend = False  # given back
                elif not (g.in_backend and self.now < g.lease_end):
                    g.lost = True
                else:
                    g.lease_end = self.now + TTL
                    g.give_up_at = self.now + TTL - give_up_margin(TTL)
                    g.renew_due = self.now + RENEW_EVERY

    # -- rules ------------------------------------------------------------------------------------

    @rule(
        client=st.integers(0, CLIENTS - 1),
        name=st.sampled_from(NAMES),
        kind=st.sampled_from(KINDS),
        renew=st.booleans(),
    )
    def try_acquire(self, client: int, name: str, kind: str, renew: bool) -> None:
        key = (client, name, kind, renew)
        lock = self.lock_object(key)
        shared, limit = kind in SHARED, LIMIT[kind]
        # a lost hold stays the lock object's until released: only semaphores take more
        if kind != "semaphore" and any(g.lock_key == key for g in self.unreleased()):
            with pytest.raises(tumbler.AlreadyHeld):
                lock.acquire(blocking=False)
            return
        rows = self.backend_rows(name)
        if shared and any(g.shared and g.limit != limit for g in rows):
            with pytest.raises(tumbler.PermitsMismatch):
                lock.acquire(blocking=False)
            return
        if shared:
            free = all(g.shared for g in rows) and (limit == 0 or len(rows) < limit)
        else:
            free = not rows
        assert lock.locked() is not free, (key, rows)
        acquired = lock.acquire(blocking=False)
        assert acquired is free, (key, rows)
        if not acquired:
            return
        hold = lock.hold
        assert hold is not None
        self.last_token += 1
        assert hold.token == self.last_token, "tokens are one counter per store"
        earlier = [g.token for g in self.grants if g.name == name]
        assert all(token < hold.token for token in earlier)
        self.grants.append(
            Grant(
                key,
                hold.token,
                hold,
                granted_at=self.now,
                lease_end=self.now + TTL,
                give_up_at=self.now + TTL - give_up_margin(TTL),
                renew_due=self.now + RENEW_EVERY,
            )
        )

    @precondition(lambda self: self.unreleased())
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        g = data.draw(st.sampled_from(self.unreleased()), label="grant")
        backend_had_it = g.in_backend and self.now < g.lease_end
        if g.lost or not backend_had_it:
            with pytest.raises(tumbler.LockLost):
                g.hold.release()
            g.lost = True
        else:
            g.hold.release()
        g.released = True
        g.in_backend = False

    @precondition(lambda self: any(g.released for g in self.grants))
    @rule(data=st.data())
    def release_again(self, data: st.DataObject) -> None:
        g = data.draw(st.sampled_from([g for g in self.grants if g.released]), label="grant")
        with pytest.raises(tumbler.NotHeld):
            g.hold.release()

    @rule(seconds=st.floats(0, MAX_ADVANCE, allow_nan=False, allow_infinity=False))
    def advance(self, seconds: float) -> None:
        self.move_clock(seconds)

    @rule(seconds=st.floats(0, RENEW_EVERY, allow_nan=False, allow_infinity=False))
    def advance_a_little(self, seconds: float) -> None:
        self.move_clock(seconds)

    @precondition(lambda self: any(not g.released and not g.lost for g in self.grants))
    @rule(
        data=st.data(),
        edge=st.sampled_from(("give_up", "lease_end", "renew_due")),
        # just before, at, and just after the instant: where an off-by-one comparison shows
        nudge=st.sampled_from((-1e-6, 0.0, 1e-6)),
    )
    def advance_to_an_edge(self, data: st.DataObject, edge: str, nudge: float) -> None:
        live = [g for g in self.grants if not g.released and not g.lost]
        g = data.draw(st.sampled_from(live), label="grant")
        target = {"give_up": g.give_up_at, "lease_end": g.lease_end, "renew_due": g.renew_due}
        seconds = target[edge] + nudge - self.now
        if 0 <= seconds <= MAX_ADVANCE:
            self.move_clock(seconds)

    @rule(name=st.sampled_from(NAMES))
    def force_release(self, name: str) -> None:
        rows = self.backend_rows(name)
        assert self.operator.force_release(name) == len(rows)
        for g in self.grants:
            if g.name == name and g.in_backend:
                g.in_backend = False
                g.revoked = not g.released

    # -- invariants -------------------------------------------------------------------------------

    @invariant()
    def clock_agrees(self) -> None:
        assert self.clock.now() == self.now

    @invariant()
    def holds_agree_with_the_model(self) -> None:
        for g in self.grants:
            assert g.hold.held is (not g.released and not g.lost), g
            assert g.hold.lost is g.lost, g
            if g.hold.held:
                assert g.hold.expires_in == pytest.approx(g.give_up_at - self.now), g

    @invariant()
    def no_conflicting_holds(self) -> None:
        for name in NAMES:
            # a force-released holder may still believe it holds until its next renewal:
            # that is the operator's doing, and fencing tokens cover it
            held = [g for g in self.grants if g.name == name and not g.revoked and g.hold.held]
            exclusive = [g for g in held if not g.shared]
            assert len(exclusive) <= 1, held
            assert not exclusive or len(held) == 1, held
            assert sum(g.kind == "semaphore" for g in held) <= PERMITS, held

    @invariant()
    def tokens_increase(self) -> None:
        for name in NAMES:
            tokens = [g.token for g in self.grants if g.name == name]
            assert all(a < b for a, b in itertools.pairwise(tokens)), tokens

    @invariant()
    def renewed_holds_survive_short_steps(self) -> None:
        for g in self.grants:
            if g.renew and not g.released and not g.revoked and g.longest_step <= RENEW_EVERY:
                assert g.hold.held, g

    @invariant()
    def unrenewed_holds_end_with_their_lease(self) -> None:
        for g in self.grants:
            if not g.renew and not g.released:
                ends = g.granted_at + TTL - give_up_margin(TTL)
                assert g.hold.held is (self.now < ends), g

    @invariant()
    def status_agrees(self) -> None:
        for name in NAMES:
            state = self.operator.status(name)
            rows = {g.token: g for g in self.backend_rows(name)}
            assert sorted(h.token for h in state.holders) == sorted(rows), (state, rows)
            for holder in state.holders:
                g = rows[holder.token]
                assert holder.shared is g.shared, (holder, g)
                assert holder.expires_in == pytest.approx(g.lease_end - self.now), (holder, g)
            assert state.waiters == 0, state
            limits = {g.limit for g in rows.values() if g.shared}
            assert state.limit == (limits.pop() if len(limits) == 1 else None), (state, rows)


LockMachine.TestCase.settings = settings(
    max_examples=examples(300),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLockMachine = LockMachine.TestCase
