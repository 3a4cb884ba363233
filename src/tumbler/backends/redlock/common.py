"""``redlock://``, ``redlocks://``: one lock over N independent Redis masters (extra
``tumbler-locks[redis]``).

URL grammar::

    redlock://[[USER]:PASSWORD@]HOST:PORT,HOST:PORT,HOST:PORT[,...][/DB][?OPTIONS]
    redlocks://...          TLS to every master; each master's certificate is verified

N is odd and at least 3; the masters are independent servers (no replicas, no Redis
Cluster), each Redis 7.0 or newer. Every master takes the same credentials, database and TLS
options. Options: those of ``redis://`` that apply to one server (``prefix``,
``socket_timeout``, ``connect_timeout``, ``max_connections``, ``max_waiters``, and for
``redlocks://`` ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``, ``ssl_check_hostname``),
and ``node_timeout`` (seconds, default 0.1: how long a grant or release waits for the
masters' replies; a master that has not answered by then counts as not granting) and
``restart_delay`` (seconds, default 60, 0 to turn it off: how long a master that lost its data
stays out; also the longest lease granted: a longer ``ttl`` is cut to it).
``socket_timeout`` (default 1) bounds the other calls (renewals, within the leases' time;
inspection, force release, the wake-up subscriptions), ``connect_timeout`` (default 0.5) a
connection's set-up (TCP, TLS and the login).

The algorithm (the Redlock of the Redis documentation)
    A grant is the Redis backend's grant script, sent to every master at once (written to each
    connection, then the replies read: no thread per master), each reply awaited until
    ``node_timeout``. It counts if a quorum granted (a majority; for a semaphore of k permits,
    ``N*k//(k+1) + 1`` masters, so that k+1 holders would need more grants than the masters
    hold) and time is left: the hold's lease counts from before the request was sent, less the
    lock layer's drift allowance (1% of the TTL for the masters' clocks, and the delay of
    acting on a deadline), and a grant with none of it left by the last reply does not count.
    A grant that does not count is given back on every master that made it, at once: released,
    or for a request that waits, put back in line where it was (see ``.lua``); the next try
    comes after a random pause (up to ``node_timeout``), so that two clients that split the
    masters between them do not split them again. A master that failed is left out of grants
    for a growing pause (from 0.1 s to 2 s) rather than waited for on every one. Renewals and
    releases go to every master at once, those left out too (one may hold the grant); a
    renewal waits up to ``socket_timeout`` and keeps a hold only if a quorum renewed it in
    time. One that too few masters answer
    leaves the hold to the lock layer's loss rules (it is lost at its deadline unless a retry
    gets a quorum); one that a quorum answers without renewing makes it lost at once. Waiters
    queue on every master and are woken by any master's release (pub/sub, one connection per
    master, as on one Redis server), with a re-check every second. If fewer masters than a
    quorum answer a grant, it raises ``BackendUnavailable`` naming how many did: after three
    tries when the others refuse connections (they are down), after up to ``socket_timeout``
    when they answer late. It never reports a grant no quorum made.

Watching a lock's state (``locks.watch``, elections' ``observe``)
    As on one Redis server, per master: a state watcher's client subscribes to the lock's
    channel on each master (confirmed by the master) and then sets the marker key that makes
    that master's grants, releases, hand-backs and force releases of the lock publish there
    (``<prefix>:{<name>}:watched``, 30 s, set again every 10 s while it watches: a watcher
    that went away costs a master's changes of the lock a PUBLISH to nobody for 30 s at
    most). Entering the watch needs a majority of the masters subscribed and marked: every
    change that counts was made on a quorum, which shares a master with that majority, so
    one of them publishes it. One message from any master is enough: it is a hint, after
    which the watcher reads the lock again (``inspect``, from a quorum); it re-reads every
    ``recheck_interval`` (1 s) anyway. A master missed at entry (down, or left out after a
    failure) is subscribed to and marked when the marker is set again. Without the marker a
    master's scripts only check that it is absent (an ``EXISTS`` inside the script, no round
    trip).

Fencing tokens
    Each master keeps a sequence per name, as on one Redis server, but draws from
    ``max(sequence + 1, proposal, floor + 1)``, where the proposal is the client's clock in
    microseconds and the floor is the greatest value the master drew or was raised to for any
    name (``<prefix>:token-floor``). A grant's token T is the greatest value its granting
    masters drew; those that drew less are raised to T (the grant's entry, the name's sequence
    and the floor) before the grant counts, and it counts only if a quorum holds it with T.
    A master whose sequence for the name is at T or past it already refuses the raise: it may
    have given T to another grant. Two grants that hold at once (a semaphore's permits, read
    locks) thus never share a token, as their quorums share a master, whose sequence went
    from below T to T for one of them only; a grant refused so is given back and tried again
    after a random pause.

    The objection: the greatest of independent counters cannot order grants whose quorums
    change while masters lose their data (quorum A, B, C grants; A restarts empty; later
    grants come from B, C, D, E, or from A with masters that never saw the name). The answer,
    which ``test_tokens_order_grants_across_changing_quorums_and_lost_masters`` replays with
    tokens far above every clock: a grant that counted left T in the floor of every master of
    its quorum Q1. A later grant's quorum Q2 shares a master m with Q1 (two quorums always
    do). If m kept its data, it draws above T. If m lost it, m took no part in any grant until
    it was marked (below), and marking gives it the greatest floor of the masters with a
    marker that answer; when those are a majority they include a master of Q1, which kept T
    in its floor or was itself marked after losing it, with such a floor (by induction on the
    markings). So m draws above T. A master is marked as soon as a grant meets it without
    its marker, while the others answer. One marked while fewer than a majority of marked
    masters answer (a majority lost its data at once, beyond what Redlock survives) is
    logged, and its tokens then rest on the proposals: the clients' clocks, which exceed the
    forgotten tokens unless a client's clock is behind the earlier holders' by more than the
    time between the grants. A name's sequence lapses a day after its last grant, the floor
    never.

Masters restarted empty (``restart_delay``)
    Each master keeps a marker (no expiry) saying from when it may grant. A master found
    without one has lost its data, unless no master has one (a new deployment, or a key
    prefix never used: every master is marked to serve at once). No lease is longer than
    ``restart_delay``: the lock layer cuts a longer ``ttl`` to it (``capabilities.max_ttl``),
    for grants, renewals and extensions alike. Each master also records the longest
    ``restart_delay`` of the clients granted a lease on it, plus the grant's ``lock_delay``
    (``<prefix>:longest-lease``), and the client marks a master that lost its data to serve
    only after the longest of its own and those the other masters recorded, so every grant
    it forgot has run out, and its lock-delay after it, when it grants again, also where the
    clients of a deployment were given different delays. With
    ``restart_delay=0`` a master restarted empty grants at once: the lock it forgot can be
    granted again while its holder still holds it on the other masters of its quorum, which
    makes two holders whenever those others and the restarted master are a quorum together.
    A restart with ``appendonly yes`` and ``appendfsync always`` keeps the marker and the
    grants: such a master serves again at once. If every master loses its data at once, the
    deployment is new again: nothing can tell the earlier grants, whose holders learn of
    their loss at their next renewal.

Lock-delay (``lock_delay``)
    Each master keeps a grant made with a lock-delay as one Redis server does (see the Redis
    backend's ``.lua``): lapsed, once its lease ran out there, until its delay has passed too. A
    grant lapsed on a quorum of the masters refuses every grant (a grant needs a quorum of
    masters where the name is free, and two quorums share a master); fewer masters cannot keep
    the name closed alone. ``status`` shows a grant that a quorum keeps, but fewer than a quorum
    still hold live, as lapsed, for as long as a quorum keeps it. A renewal grants a hold anew
    on the masters that lack it, never on one where it lapsed (a grant once lost is not
    revived); one that a quorum no longer renews is lost. A master that lost its data stays out
    for the lock-delay too (above). A master that missed the grant never had it: the delay rests
    on the quorum that granted it, as the grant did.

What it cannot promise
    Redlock's safety rests on timing: the masters' clocks must run at about the same rate
    (the drift allowance covers 1%), and a holder's process must not pause for longer than
    its lease without noticing (a GC pause, a stopped VM): after the pause, it may still act
    while the lease it held has gone to another client. Fencing tokens let the protected
    resource refuse the stale holder; for locks whose safety must not rest on timing, use a
    consensus backend (ZooKeeper, etcd). Fair locks queue on every master, but each master
    keeps its own line: a fair waiter is never passed by a later one on a master where both
    wait, but the masters may choose different waiters, and the grant goes to whichever
    gathers a quorum first; fairness across the masters is not promised.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

from ..._url import BackendURL
from ...errors import InvalidURL
from ..kit.options import host_port, seconds
from ..redis import common as redis_common
from ..redis.common import RedisConfig
from . import DEFAULT_PORT

#: ``node_timeout`` when the URL does not say
DEFAULT_NODE_TIMEOUT = 0.1
#: ``restart_delay`` when the URL does not say: longer than any lease a client asks for by
#: default, and no lease is granted for longer
DEFAULT_RESTART_DELAY = 60.0
#: ``socket_timeout`` and ``connect_timeout`` when the URL does not say: a grant waits only
#: ``node_timeout`` for replies, but setting up a connection (and the other calls) may take
#: longer; still short, as a call that waits on a stopped master holds up the others
DEFAULT_SOCKET_TIMEOUT = 1.0
DEFAULT_CONNECT_TIMEOUT = 0.5
#: how many times a grant goes out, at least, when fewer masters than a quorum answer (and
#: until ``socket_timeout`` has passed)
ROUNDS = 3
#: how long a master that failed is left out: the first pause, and the longest
BACKOFF_FIRST = 0.1
BACKOFF_LONGEST = 2.0
#: the longest restart_delay: a day
MAX_RESTART_DELAY = 24 * 3600.0

_REDLOCK_OPTIONS = ("node_timeout", "restart_delay")
_MASTER_OPTIONS = (
    "prefix",
    "db",
    "socket_timeout",
    "connect_timeout",
    "max_connections",
    "max_waiters",
    "ssl_ca_certs",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_check_hostname",
)


class AsyncReader:
    """How a call fanned out to the masters reads one reply within a time (asyncio).

    Not redis-py's own ``read_response(timeout=...)``: when that runs out it returns None
    and leaves the reply to come on the connection, for the next call to read as its own.
    Cancelled, a read drops its connection instead.
    """

    @staticmethod
    async def read(connection: Any, timeout: float) -> Any:
        return await asyncio.wait_for(connection.read_response(), timeout)


class Reader:
    """Blocking twin of :class:`AsyncReader`: a read that runs out of time raises
    ``TimeoutError`` and drops its connection."""

    @staticmethod
    def read(connection: Any, timeout: float) -> Any:
        return connection.read_response(timeout=timeout)


def quorum(masters: int, shared: bool, limit: int) -> int:
    """How many of ``masters`` must grant a request: a majority, and for a semaphore of
    ``limit`` permits enough that ``limit + 1`` holders would need more grants than the masters
    have permits (``masters * limit``)."""
    if shared and limit > 1:
        return masters * limit // (limit + 1) + 1
    return masters // 2 + 1


def _delay(text: str) -> float:
    value = float(text)
    if not 0 <= value <= MAX_RESTART_DELAY:
        raise ValueError(f"expected a number of seconds from 0 to {MAX_RESTART_DELAY:.0f}")
    return value


@dataclass(frozen=True)
class RedlockConfig:
    """A parsed ``redlock://`` URL."""

    url: str  # redacted
    #: each master's connection settings, as for one Redis server
    masters: tuple[RedisConfig, ...]
    node_timeout: float
    restart_delay: float
    prefix: str


def parse_config(url: BackendURL) -> RedlockConfig:
    url.allow_options(_REDLOCK_OPTIONS + _MASTER_OPTIONS)
    if url.scheme != "redlocks" and any(name.startswith("ssl_") for name in url.query):
        raise InvalidURL("ssl_* options need a redlocks:// URL", backend=url.redacted)
    node_timeout = url.option("node_timeout", seconds, DEFAULT_NODE_TIMEOUT)
    restart_delay = url.option("restart_delay", _delay, DEFAULT_RESTART_DELAY)
    parts = url.hosts.split(",")
    if not url.hosts or any(not part for part in parts):
        raise InvalidURL(
            "redlock:// lists its masters as HOST:PORT,HOST:PORT,HOST:PORT", backend=url.redacted
        )
    addresses = [host_port(part, url, DEFAULT_PORT) for part in parts]
    if len(addresses) < 3 or len(addresses) % 2 == 0:
        raise InvalidURL(
            f"Redlock needs an odd number of masters, at least 3; the URL lists {len(addresses)}",
            backend=url.redacted,
        )
    seen: set[tuple[str, int]] = set()
    for host, port in addresses:
        if (host.lower(), port) in seen:
            raise InvalidURL(
                f"the master {host}:{port} is listed twice: each must be its own server",
                backend=url.redacted,
            )
        seen.add((host.lower(), port))
    query = {key: value for key, value in url.query.items() if key not in _REDLOCK_OPTIONS}
    query.setdefault("socket_timeout", str(DEFAULT_SOCKET_TIMEOUT))
    query.setdefault("connect_timeout", str(DEFAULT_CONNECT_TIMEOUT))
    scheme = "rediss" if url.scheme == "redlocks" else "redis"
    masters = []
    for host, port in addresses:
        shown = f"[{host}]" if ":" in host else host
        master_url = replace(url, scheme=scheme, hosts=f"{shown}:{port}", query=query)
        masters.append(parse_config_of_master(master_url, url))
    return RedlockConfig(
        url=url.redacted,
        masters=tuple(masters),
        node_timeout=node_timeout,
        restart_delay=restart_delay,
        prefix=masters[0].prefix,
    )


def parse_config_of_master(master_url: BackendURL, url: BackendURL) -> RedisConfig:
    """One master's settings (``master_url``: the redlock URL narrowed to it), named in
    messages by the redlock URL and the master's address."""
    config = redis_common.parse_config(master_url)
    return replace(config, url=f"{url.redacted} (master {master_url.hosts})")
