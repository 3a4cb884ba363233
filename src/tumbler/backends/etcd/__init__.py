"""The etcd backend (``etcd://``, ``etcds://``): locks as keys of a line ordered by their create
revisions, attached to their client's lease, spoken to through etcd's v3 JSON gateway. Its URL
grammar, key layout, promises and how a hold is lost are in :mod:`.common`; the client in
:mod:`._async.backend` (and its generated blocking twin), over :mod:`._async.gateway`.
"""

from __future__ import annotations

from ..contract import Capabilities
from ..descriptor import BackendDescriptor, one_of_hosts, under_path

DEFAULT_PORT = 2379
#: the ``lease_ttl`` a URL gets unless it names one
DEFAULT_LEASE_TTL = 10
#: how long a vanished waiter's entry may stay in line: more than the waiters' lease as etcd
#: grants it with its default election timeout (2 s) and etcd's sweep of ended leases
#: (0.5 s). The client keeps that lease alive itself, so its waiters' re-checks need not come
#: more often than the recheck_interval (2 s), which the lock layer's third of it is.
WAITER_TTL = 6.0
#: how late etcd may end a lease after its TTL: it sweeps ended leases every 500 ms
LEASE_SWEEP = 0.5

CAPABILITIES = Capabilities(
    push_wakeups=True,
    # create revisions survive restarts and leader elections
    durable_fencing=True,
    # the leader times the leases
    server_clock=True,
    # an entry lives as long as its client's lease, which the client keeps alive
    session_liveness=True,
    # a waiter's entry lives with the client's short waiters' lease: etcd's floor (2 s with
    # its defaults) and its sweep of ended leases (every 0.5 s) are within it; a connection
    # whose cluster grants longer (or whose lease_ttl is shorter) declares its own
    waiter_ttl=WAITER_TTL,
    # a waiter whose watch came after its read is woken to read again, so none is missed
    # while the stream lives; the re-check covers a stream that failed unseen, and asks the
    # server nothing while the waiter's watch is made and quiet (but every SAFETY_RECHECK)
    recheck_interval=2.0,
    # a renewal is a keep-alive and a read: two round trips
    min_ttl=0.5,
    # no grant outlives the lease: each connection declares its lease_ttl
    max_ttl=float(DEFAULT_LEASE_TTL),
    # a cluster serves clients on any machine that reaches it
    scope="network",
    # the watch stream follows a lock's whole line: every entry put or deleted
    state_wakeups=True,
    # max_waiters: a new waiter that finds that many ahead of it withdraws
    line_cap=True,
    # a grant with a lock-delay leaves a tombstone on no lease (common: "Lock-delay")
    lock_delay=True,
)


DESCRIPTOR = BackendDescriptor(
    name="etcd",
    schemes=("etcd", "etcds"),
    opener=f"{__name__}.opener",
    capabilities=CAPABILITIES,
    summary="an etcd cluster (or one member), through its v3 JSON gateway",
    url_form="etcd://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/PREFIX][?OPTIONS]",
    extra="etcd",
    # every key the backend makes is under the URL's path
    isolate=under_path("/tumbler"),
    single_server=one_of_hosts(DEFAULT_PORT),
)
