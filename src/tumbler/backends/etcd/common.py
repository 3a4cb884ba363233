"""``etcd://``: locks in etcd (extra ``tumbler-locks[etcd]``; client: its v3 JSON gateway, h11).

URL
    ``etcd://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/PREFIX][?OPTIONS]``, or
    ``etcds://`` for TLS to the members' client port (``ssl_ca_certs``, ``ssl_certfile``,
    ``ssl_keyfile``, ``ssl_check_hostname``, as ``zookeepers://`` takes them). Without a host,
    ``localhost:2379``; the port defaults to 2379. Every key the backend makes lives under
    ``PREFIX`` (default ``/tumbler``), which an operator's role for the user can be limited
    to; no part of it but the first may be ``lock``, ``evicted`` or ``ended`` (it would be
    inside another prefix's keys, below). With a user, the client logs in and sends its token
    with each request, logging in again when etcd no longer takes it.

Options
    ``lease_ttl`` (10 s, whole seconds, at least 2): the client's one lease, which every entry
    it makes is attached to; ``connect_timeout`` (5 s): how long a client tries the members
    when it starts; ``request_timeout`` (5 s): how long one request may take, over every
    attempt it makes; ``max_waiters`` (default 10000): the most waiters one lock queues (an
    acquire whose new entry finds that many waiting ahead of it deletes it and gets
    ``TooManyWaiters``; each entry counts those created before it, so entries that arrive
    together count each other).

Members
    A client sends each request to the member that answered it last, and tries the members in
    turn until the request's time is spent: a request that could not be sent, always; a read,
    a keep-alive, a grant and a renewal's read also after a lost reply or etcd's "no leader"
    (each is the same done twice), and these move on from a member that gives no answer
    within a third of the request's time (half with two members: a member stopped, cut off,
    or waiting for a leader that died); a deletion never (a second run could not say whether
    the first deleted). So one silent member of a cluster with a serving majority costs a
    renewal or a waiter's grant a third of the request time, and a leader's failure the
    election. The client's watch stream leaves a member as soon as a call finds it failing.

Key layout
    Lock ``name`` is the line of keys ``PREFIX/lock/<name, percent-encoded>/x/#<turn>.<owner
    hash>`` for exclusive entries (mutexes, writers) and ``.../s/#<turn>.<owner hash>`` for
    shared ones (read locks, semaphores), one per acquisition (the owner hash is
    ``kit.owners.owner_hash``: the owner id itself is never stored); a key whose part does not
    match its kind is not an entry. ``<turn>`` is 19 digits, ``9999999999999999999`` less the
    entry's turn, a revision no later than the one its key is created at (below), so that a
    later entry has a lower key: the keys of a part, in etcd's key order, are its entries
    newest first, and a range from an entry's key to the end of its part reads the entries
    ahead of it, nearest first, which etcd reads in key order and stops at a limit without
    sorting anything (etcd 3.4 and 3.5 sort a range asked for in any order in memory, all of
    it, whatever the limit). A key's value is JSON: the holder's description, the kind of
    entry (a mutex or write lock, a read lock, a semaphore and its permits), the client's
    lease TTL, and, for a semaphore entry granted after waiting, that it was granted. A granted
    key is attached to its client's lease, a waiting one to its client's waiters' lease
    (below). ``force_release`` leaves its note for an evicted owner in
    ``PREFIX/evicted/<name, percent-encoded>/<owner hash>``, attached to a lease of its own
    that outlives the evicted grant's by ``NOTE_GRACE``. A key of a line whose value no
    client would have written (see ``parse_line``), or whose turn is later than the
    revision it was created at, is skipped by every decision, counted by ``inspect``
    (``LockState.malformed``) and deleted by ``force_release``. The end of an acquisition a
    grant request of which went unanswered is marked by ``PREFIX/ended/<name,
    percent-encoded>/<x or s>/<owner hash>``, on the client's lease (below): outside every
    line, so no read of a line meets the marks.

    The layout before turns (``.../x/<owner hash>``, ordered by create revision) is still
    understood: such keys are entries of their line, in their place by create revision. A
    grant that finds any (a read of each part past the turns, in the same transaction: no key
    there costs nothing) reads its whole line, as those clients did, until they are gone.
    The keys of this layout end in their part, ``x`` or ``s``, then one more part, as those
    clients expect: they read them as entries of their line, and order them by create
    revision as they order their own (the order of turns), so both kinds of client can share
    a line during a rolling upgrade.

Lock-delay
    A grant made with a ``lock_delay`` (``GrantRequest.lock_delay`` above 0) has a
    *tombstone*: the key ``.../<x or s>/~<the last part of its entry's key>`` (``tomb_key``:
    in its entry's part, after the entries of both layouts, as "~" sorts after every byte
    they use), on no lease, put with a transaction guarded by the entry's create revision
    after the grant is decided and before it is returned. Its value is JSON: the holder,
    ``lock_delay``, ``token`` (the entry's create revision), ``shared`` and ``limit``. It
    outlives the client's lease: when the entry goes other than by a release (the lease
    ended; the client gave the hold up, ``lapse``) the tombstone stays, and a tombstone
    without its entry is a lapsed grant. A release deletes the entry and its tombstone in one
    transaction; ``lapse`` deletes the entry and attaches the tombstone to a lease of the
    delay in one. etcd has no server timestamps but times leases: the first client to find
    a tombstone without its entry (a grant decision; a waiter woken by the entry's deletion)
    grants a lease of the delay (whole seconds, rounded up; etcd's floor may make it longer,
    which is safe) and attaches the tombstone to it, guarded by the tombstone's mod
    revision (a second client that noticed it too revokes its lease), and etcd deletes the
    tombstone when the delay ends. Until then every decision counts it as the grant it
    was, ahead of the line; a waiter held back by tombstones watches its line for a
    deletion (the tombstone's). ``status`` shows the delay left (the lease's time to live;
    the whole delay before it was noticed); ``force_release`` deletes every tombstone of the
    line, counting none. A tombstone whose value no client would have written is malformed,
    as any such key of a line (skipped, counted, removed by ``force_release``).

    The grant's one transaction reads a key past the turns of each part already (the layout
    before turns): a tombstone is found by that read, at no cost for a line without any, and
    sends the decision to read its whole line, as that layout does. So a grant made without a
    lock-delay costs what it did before. A release that cannot reach the cluster leaves the
    tombstone (the key is deleted at the next call, as any withdrawal): the grant counts as
    lapsed, which it is. While a line has a tombstone (a live grant's too), each of its
    decisions reads it whole.

Requests that arrive late
    A request held on a silent path (a member cut off from its clients, a partition) reaches
    its member when the path comes back, however late, and the client may have moved on: it
    asked another member after a third of its request time, and the acquisition the request
    was for may have ended since. A late grant request would put the owner's key again, on
    the client's lease, which the client's renewals keep alive: a key nobody will delete,
    which keeps the lock from everyone else for as long as the client lives. So a grant
    request also requires the end mark of its acquisition not to have been written after
    the latest revision the client had seen when it sent it; the client writes that mark,
    with the deletion, at the end of each acquisition a grant request of which went
    unanswered (and deletes the key then whatever its create revision: a late request may
    have made it again meanwhile). The mark lives on the client's lease: a late request
    whose lease is gone is refused by etcd anyway. The other writes are guarded by the
    create revision of the key they change: a late copy changes nothing once the key is gone.
    A move of a waiter's key between its leases also requires the key not to have been
    written since the latest revision the client had seen: a late move to the waiters'
    lease would otherwise take a key granted since back to that lease, which ends once the
    client waits no more, and the grant with it under a holder that knows nothing.

Who holds the lock
    The line is ordered by the keys' turns, which is the order of their create revisions,
    etcd's one counter of changes. An exclusive entry holds the lock when it is first in
    line; a read entry when no exclusive entry is ahead of it; a semaphore entry when fewer
    than ``permits`` entries are ahead (``kit.line_position``, as ZooKeeper's sequential
    nodes). An entry never loses that position, since entries only leave the line ahead of it.
    A grant is one transaction: the key is put with the client's lease if it does not exist
    (and its acquisition's end mark is unwritten since the client's latest revision: "Requests
    that arrive late"), and if every key of a later turn than its own, in either part, was
    created before its turn; a client takes as its turn the latest revision it has seen, plus
    one, so its key is created at its turn or after, and the condition makes each new entry
    the last of its line. A grant whose condition fails (arrivals that came together, or a
    client whose latest revision was behind the line's) takes the revision etcd answered with,
    plus one, as its next turn; its key of the turn before, if a request for it went
    unanswered, is deleted and its acquisition's end marked first (that request could land
    later). In the same revision the transaction reads what the rule needs, not the line:
    in each part, the entries nearest ahead of the key (one, or a semaphore's permits and one,
    and a few more in case keys no client wrote are among them). Only reads crowded with keys
    no client wrote, or keys of the layout before turns, send it to read the whole line. A
    retry after a lost reply finds the key the first attempt made, by its name. Every request
    is served in arrival order (``fair`` makes no difference). etcd before 3.5 walks its index
    of every key of a range it reads, whatever the limit (it reads from disk only up to the
    limit): a grant behind a long line still costs the server a little more, about 0.1 µs per
    entry ahead of it. A new waiter that finds more keys ahead of it than ``max_waiters`` reads
    the line once to count the waiters ahead of it.

Fencing tokens
    The token of a grant is its key's create revision: etcd numbers every change of the
    cluster in one sequence that survives restarts and leader elections, and grants follow
    creation order, so tokens strictly increase per name.

Waking waiters
    A waiter watches exactly what blocks it: for a mutex or writer the key just ahead of it,
    for a reader the nearest writer ahead, for a semaphore waiter its predecessor (which
    rewrites its value when granted), and for the first semaphore waiter the line. A watch sees
    the changes after the revision etcd created it at; a waiter whose read is older than its
    watch is woken at once to read its line again, so no change in between is missed (a watch
    from a past revision would do without that, but etcd serves those from a catch-up loop
    that runs every 100 ms). A waiter's re-check (the lock layer's, every 2 s) asks the server
    nothing while its watch is made on the open stream and has not fired, for at most
    ``SAFETY_RECHECK`` (30 s) after its last read: the watch tells it of every change it waits
    for. A client's watches all travel on one stream
    (``_async.backend.AsyncKeyWatches``), whose request body is padded so that the gateway
    reads all of it (``http.UNREAD_BODY``: it dropped the watches asked for after its first
    answer); a watch etcd sends no creation notice for is asked for again.

The leases
    The client grants its lease when it connects and revokes it when it closes, which deletes
    every key still attached. The lease is kept alive by the client's renewals (``renew_all``:
    one keep-alive, and one read of the renewed keys, so that a forced release is seen) and,
    while the client only waits, by its waiters' re-checks (a keep-alive when a third of it has
    gone, even when the re-check reads nothing). An acquire's first write is its entry, on the
    lease as it is while a third of it is left: a keep-alive or a grant first would put it in
    line behind acquires that began after it. A grant made when a third of the lease has gone
    since it was last kept alive keeps it alive first, so a grant's lease
    (``Grant.granted_ttl``, at most ``lease_ttl``) is always timed from a keep-alive etcd has
    answered. A holder that dies frees its locks after ``lease_ttl``, whatever their ``ttl``; a
    client that holds nothing for longer lets its lease run out, and takes a new one at its next
    acquire.

    A waiter's key is moved, once it is found waiting, to the client's waiters' lease: the
    shortest etcd grants (its floor: 1.5 election timeouts rounded up to whole seconds, 2 s
    with etcd's defaults), which the client keeps alive every third of its TTL while any of
    its keys waits on it. A waiter whose client dies leaves the line when etcd ends that
    lease (its TTL and etcd's sweep of ended leases, every 0.5 s; ``capabilities.waiter_ttl``,
    at most 6 s, bounds it) rather than after ``lease_ttl``; one killed between its
    first write and that move leaves after ``lease_ttl``. A waiter whose read finds it first
    in line moves its key back to the client's lease in a transaction of its own, guarded by
    its create revision and by the key being unwritten since the latest revision the client
    had seen (above), before the grant is reported: the grant is a hold only once its key
    lives with the lease renewals keep alive. A hand-off thus costs a read and a move.
    A waiters' lease found gone (it ran out unheard) sends its waiters to new places at the
    end of their lines.

    Only the leader counts a lease down (keep-alives are not replicated; a new leader starts
    every lease's count again), and etcd before 3.4.31 and 3.5.13 (etcd-io/etcd#15247) lets a
    deposed leader end leases: one that hung (SIGSTOP, a stalled disk) and comes back still
    counts each lease from the last keep-alive it answered itself, revokes those it finds run
    out, and the new leader applies that revocation, however long it kept the lease alive
    itself. No client can keep such a leader from doing so, so the client times its lease by
    the leader of one raft term, which each answer names: a keep-alive answered in a later
    term extends nothing (the lease stays good until the last keep-alive answered in its own
    term plus its TTL, which comes before the deposed leader can end it), and one answered in
    an earlier term than the client has seen (a member not yet told of the election) counts
    for nothing. At the first answer of a later term the client grants a new lease, by the
    new leader, and moves every granted key to it, keeping its value and create revision
    (place and token), before the old lease can end; a key whose move does not get through
    stays on the old lease, and its hold is given up before that lease can end. Every
    election thus costs the holders one grant and one transaction, and a hold is lost only
    when the move cannot be made in time.

How a hold is lost here
    A lease etcd no longer knows (a keep-alive answered with no TTL, a put refused because
    the lease is gone: it ran out while the client could not reach the cluster, or an
    operator revoked it) ends every hold of the client at once (``SessionEvents.EXPIRED``);
    the next acquisition grants a new lease. A key deleted by ``force_release`` ends its
    hold at the next renewal. A renewal that cannot reach the cluster leaves the hold in
    doubt until the client's deadline (``lease_ttl`` after the last keep-alive answered, less
    the drift margin), which comes before etcd can end the lease; a renewal never reports
    more than that, nor more than the last keep-alive answered in the lease's raft term
    allows (above).
"""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import quote, unquote

from ..._core import MAX_LOCK_DELAY, MAX_PERMITS, Entry
from ..._url import BackendURL
from ...errors import BackendUnavailable, InvalidURL, PermissionDenied
from ..kit.errors import ErrorMap, Rule
from ..kit.options import (
    DEFAULT_MAX_WAITERS,
    MAX_SECONDS,
    address,
    host_port,
    seconds,
    waiter_count,
)
from ..kit.tls import TLS_OPTIONS, TLSConfig, tls_options
from . import DEFAULT_LEASE_TTL, DEFAULT_PORT
from .wire import (
    INVALID_ARGUMENT,
    NOT_FOUND,
    PERMISSION_DENIED,
    UNAUTHENTICATED,
    EtcdError,
    GatewayUnavailable,
)

__all__ = [
    "NOTE_GRACE",
    "SHARED",
    "TURN",
    "TOMB",
    "Contender",
    "Tombstone",
    "DEFAULT_LEASE_TTL",
    "DEFAULT_PORT",
    "DEFAULT_PREFIX",
    "EXCLUSIVE",
    "MIN_LEASE_TTL",
    "TLS_SCHEME",
    "EtcdConfig",
    "Line",
    "entry_key",
    "part_key",
    "seq_in",
    "turn_in",
    "tomb_key",
    "tomb_value",
    "turn_of",
    "entry_value",
    "lease_gone",
    "line_key",
    "lock_names_of",
    "locks_key",
    "notes_key",
    "parse_config",
    "parse_line",
    "translate_errors",
]

DEFAULT_PREFIX = "/tumbler"
#: etcd refuses leases shorter than its election timeout allows; 2 s is safe with defaults
MIN_LEASE_TTL = 2
TLS_SCHEME = "etcds"

_OPTIONS = ("lease_ttl", "connect_timeout", "request_timeout", "max_waiters")


@dataclass(frozen=True)
class EtcdConfig:
    """A parsed ``etcd://`` URL: what both flavours need to connect."""

    url: str  # redacted
    #: every member's client URL, ``http[s]://HOST:PORT``
    endpoints: tuple[str, ...]
    #: the prefix every lock key is under, as bytes, ending in ``/``
    prefix: bytes
    lease_ttl: int
    connect_timeout: float
    request_timeout: float
    #: (user, password) to log in with (never log this)
    credentials: tuple[str, str] | None = field(repr=False)
    #: how to speak TLS to the members; None: in clear
    tls: TLSConfig | None = None
    #: the most waiters one lock queues
    max_waiters: int = DEFAULT_MAX_WAITERS


def _lease_ttl(text: str) -> int:
    value = seconds(text)
    if value < MIN_LEASE_TTL:
        raise ValueError(f"expected at least {MIN_LEASE_TTL} s, the shortest lease etcd keeps")
    return math.ceil(value)


def _prefix(url: BackendURL) -> bytes:
    prefix = "/" + url.path.strip("/") if url.path.strip("/") else DEFAULT_PREFIX
    parts = prefix.split("/")[1:]
    if any(part in ("", ".", "..") for part in parts):
        raise InvalidURL(f"bad prefix {prefix!r}", backend=url.redacted)
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in prefix):
        raise InvalidURL("the prefix has control characters", backend=url.redacted)
    # PREFIX/lock/..., PREFIX/evicted/... and PREFIX/ended/... are the keys of PREFIX's locks:
    # a prefix there would put its entries in the line (or among the notes or end marks) of
    # one of PREFIX's locks, and its own keys would take in PREFIX's
    for index, part in enumerate(parts[1:], start=1):
        if part.encode() + b"/" in (_LOCKS, _EVICTED, _ENDED):
            outer = "/" + "/".join(parts[:index])
            raise InvalidURL(
                f"the prefix {prefix!r} is inside the keys of prefix {outer!r}: its entries "
                f"would join that prefix's locks (no part of a prefix but the first may be "
                f"{part!r})",
                backend=url.redacted,
            )
    return (prefix + "/").encode()


def parse_config(url: BackendURL) -> EtcdConfig:
    """Read an ``etcd://`` or ``etcds://`` URL; InvalidURL (without the password) for a
    bad one."""
    url.allow_options(_OPTIONS + TLS_OPTIONS)
    tls = tls_options(url, TLS_SCHEME, "the members' client port, in TLS")
    hosts = [host_port(part, url, DEFAULT_PORT) for part in url.hosts.split(",") if part]
    if not hosts:
        hosts = [("localhost", DEFAULT_PORT)]
    scheme = "https" if tls is not None else "http"
    endpoints = tuple(f"{scheme}://{address(host, port)}" for host, port in hosts)
    if url.password is not None and not url.username:
        raise InvalidURL("a password needs a user name: USER:PASSWORD@", backend=url.redacted)
    credentials = None if url.username is None else (url.username, url.password or "")
    return EtcdConfig(
        url=url.redacted,
        endpoints=endpoints,
        prefix=_prefix(url),
        lease_ttl=url.option("lease_ttl", _lease_ttl, DEFAULT_LEASE_TTL),
        connect_timeout=url.option("connect_timeout", seconds, 5.0),
        request_timeout=url.option("request_timeout", seconds, 5.0),
        credentials=credentials,
        tls=tls,
        max_waiters=url.option("max_waiters", waiter_count, DEFAULT_MAX_WAITERS),
    )


# --------------------------------------------------------------------------------------------
# Keys and values

#: how much longer than the evicted lease a force_release note is kept: the hosts' clocks
#: and the evicted holder's last renewal in flight
NOTE_GRACE = 30.0
_LOCKS = b"lock/"
_EVICTED = b"evicted/"
_ENDED = b"ended/"
#: the parts of a line: the keys of exclusive entries (mutexes, writers), and of shared ones
EXCLUSIVE = b"x/"
SHARED = b"s/"
#: what an entry's turn starts with: a byte below every digit and letter, so that the entries
#: of this layout sort apart from (before) those of the one before it, ``<part>/<owner hash>``
TURN = b"#"
#: where the turns count down from (19 digits: every revision etcd can reach is below it)
_TURN_TOP = 10**19 - 1
#: what the last part of a tombstone's key starts with (see "Lock-delay"): a byte above every
#: digit and letter, so that tombstones sort after both layouts' entries of their part
TOMB = b"~"


def _encoded(name: str) -> bytes:
    # no "/" is left in a name, so one name's line is never inside another's
    return quote(name, safe="").encode()


def line_key(prefix: bytes, name: str) -> bytes:
    """The prefix of every entry key of lock ``name``."""
    return prefix + _LOCKS + _encoded(name) + b"/"


def part_key(prefix: bytes, name: str, exclusive: bool) -> bytes:
    """The prefix of the keys of one part of ``name``'s line: the :data:`EXCLUSIVE` or the
    :data:`SHARED` entries."""
    return line_key(prefix, name) + (EXCLUSIVE if exclusive else SHARED)


def turn_of(seq: int) -> bytes:
    """The start of the last part of the key of an entry that came at ``seq``: later turns
    have lower keys, so that a range from an entry's key to the end of its part reads the
    entries ahead of it nearest first, which etcd does without sorting."""
    if not 0 < seq <= _TURN_TOP:
        raise ValueError(f"a turn is from 1 to {_TURN_TOP}")
    return TURN + b"%019d" % (_TURN_TOP - seq) + b"."


def entry_key(prefix: bytes, name: str, owner_hash: str, exclusive: bool, seq: int) -> bytes:
    """The key of one acquisition that came at ``seq`` (see "Key layout"): under the line's
    :data:`EXCLUSIVE` or :data:`SHARED` part, so that a reader finds the writers ahead of it
    without reading the readers."""
    return part_key(prefix, name, exclusive) + turn_of(seq) + owner_hash.encode()


def seq_in(key: bytes) -> int:
    """The turn of entry key ``key``, one of this layout."""
    digits = turn_in(key)[len(TURN) :].partition(b".")[0]
    return _TURN_TOP - int(digits)


def turn_in(key: bytes) -> bytes:
    """The last part of an entry's key, by which entries of both parts of a line compare."""
    return key[key.rindex(b"/") + 1 :]


def tomb_key(entry: bytes) -> bytes:
    """The key of the tombstone of entry key ``entry`` (see "Lock-delay"): in its part, past
    the entries of both layouts."""
    part, slash, last = entry.rpartition(b"/")
    return part + slash + TOMB + last


def tomb_value(holder: str, delay: float, token: int, shared: bool, limit: int) -> bytes:
    """The value of a tombstone: what ``status`` shows of the grant once lapsed, its delay,
    and what the grant rule counts it as."""
    record = {
        "holder": holder,
        "lock_delay": delay,
        "token": token,
        "shared": shared,
        "limit": limit,
    }
    return json.dumps(record, separators=(",", ":")).encode()


class Tombstone(NamedTuple):
    """A tombstone read (see "Lock-delay")."""

    key: bytes
    #: the key of the entry it stands for
    entry_key: bytes
    create_revision: int
    mod_revision: int
    #: the lease of its lock-delay, once the end of its grant was noticed; 0 before
    lease: int
    holder: str
    delay: float
    token: int
    shared: bool
    limit: int

    def entry(self) -> Entry:
        """The grant it was, as the grant rule counts a lapsed one."""
        owner = turn_in(self.entry_key).rpartition(b".")[2].decode("ascii", "replace")
        return Entry(owner, self.token, self.shared, self.limit, True, self.token, lapsed=True)


def _tombstone(kv: dict[str, Any]) -> Tombstone:
    """The tombstone ``kv`` is; ValueError if no tumbler client would have written it."""
    record = json.loads(kv["value"])
    if not isinstance(record, dict):
        raise ValueError("a tombstone is a JSON object")
    holder, delay = record.get("holder"), record.get("lock_delay")
    token, shared = record.get("token"), record.get("shared")
    if not isinstance(holder, str) or not isinstance(shared, bool):
        raise ValueError("a tombstone's holder is text, and shared is true or false")
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        raise ValueError("a lock-delay is a number of seconds")
    if not 0 < delay <= MAX_LOCK_DELAY:  # NaN too
        raise ValueError(f"a lock-delay is above 0 and at most {MAX_LOCK_DELAY:g}")
    limit = _whole(record.get("limit"), 0 if shared else 1, MAX_PERMITS if shared else 1)
    token = _whole(token, 1, _TURN_TOP)
    part, slash, last = kv["key"].rpartition(b"/")
    entry = part + slash + last[len(TOMB) :]
    if part[part.rfind(b"/") + 1 :] + slash != (SHARED if shared else EXCLUSIVE):
        raise ValueError("a tombstone is in the part of the line of its grant's kind")
    return Tombstone(
        kv["key"],
        entry,
        kv["create_revision"],
        kv["mod_revision"],
        kv["lease"],
        holder,
        float(delay),
        token,
        shared,
        limit,
    )


def ended_key(prefix: bytes, entry: bytes) -> bytes:
    """The key that marks the end of the acquisitions of the owner and kind of entry key
    ``entry`` (see "Requests that arrive late"): the same whatever the entry's turn, so that it
    also turns away a late request for a key of the same acquisition the client gave up for a
    later turn."""
    part, _slash, last = entry.rpartition(b"/")
    if last.startswith(TURN):
        last = last.partition(b".")[2]
    return prefix + _ENDED + part[len(prefix + _LOCKS) :] + b"/" + last


def notes_key(prefix: bytes, name: str, owner_hash: str) -> bytes:
    return prefix + _EVICTED + _encoded(name) + b"/" + owner_hash.encode()


def locks_key(prefix: bytes) -> bytes:
    """The prefix of every line."""
    return prefix + _LOCKS


def lock_names_of(prefix: bytes, keys: list[bytes]) -> list[str]:
    """The lock names whose lines ``keys`` (under :func:`locks_key`) are in."""
    names = set()
    start = len(locks_key(prefix))
    for key in keys:
        encoded, slash, _owner = key[start:].partition(b"/")
        if slash:
            with contextlib.suppress(UnicodeDecodeError):
                names.add(unquote(encoded.decode("ascii"), errors="strict"))
    return sorted(names)


def entry_value(
    holder: str, shared: bool, limit: int, lease_ttl: int, granted: bool = False
) -> bytes:
    kind = "lock" if not shared else ("read" if limit == 0 else "semaphore")
    record: dict[str, Any] = {"holder": holder, "kind": kind, "lease_ttl": lease_ttl}
    if kind == "semaphore":
        record["permits"] = limit
    if granted:
        record["granted"] = True
    return json.dumps(record, separators=(",", ":")).encode()


class Contender(NamedTuple):
    """One key of a line, read: whose, when it came, what it asks for."""

    key: bytes
    #: the owner hash (the last part of the key)
    owner: str
    create_revision: int
    lease: int
    shared: bool
    limit: int
    holder: str
    lease_ttl: float

    def entry(self) -> Entry:
        return Entry(self.owner, self.create_revision, self.shared, self.limit, True, None)


class Line(NamedTuple):
    """A line read: its contenders in order, the keys in it no tumbler client wrote, and the
    tombstones of its grants made with a lock-delay."""

    contenders: list[Contender]
    #: (key, create revision) of each: skipped by every decision, counted by ``inspect``,
    #: removed by ``force_release``
    malformed: list[tuple[bytes, int]]
    tombs: list[Tombstone] = []  # noqa: RUF012 (a NamedTuple's default, never changed)

    def lapsed(self) -> list[Tombstone]:
        """The tombstones whose entry the read did not find: grants that ended other than by
        a release (entries never come back; a release deletes its tombstone with it)."""
        keys = {c.key for c in self.contenders} | {key for key, _created in self.malformed}
        return [tomb for tomb in self.tombs if tomb.entry_key not in keys]


def _whole(value: Any, low: int, high: int) -> int:
    """``value`` if it is an integer (a JSON number without fraction) from ``low`` to ``high``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"expected a whole number from {low} to {high}")
    return value


def _lease_seconds(value: Any) -> float:
    """``value`` if it is a lease TTL some client could have: above 0, at most a year."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("expected a number of seconds")
    if not 0 < value <= MAX_SECONDS:  # NaN and the infinities too
        raise ValueError(f"expected a number of seconds above 0 and at most {MAX_SECONDS:.0f}")
    return float(value)


def _contender(kv: dict[str, Any]) -> Contender:
    """The entry ``kv`` is; ValueError if no tumbler client would have written it."""
    record = json.loads(kv["value"])
    if not isinstance(record, dict):
        raise ValueError("an entry is a JSON object")
    kind = record.get("kind")
    holder = record.get("holder")
    if not isinstance(holder, str):
        raise ValueError("the holder is text")
    lease_ttl = _lease_seconds(record.get("lease_ttl"))
    if kind == "lock":
        shared, limit = False, 1
    elif kind == "read":
        shared, limit = True, 0
    elif kind == "semaphore":
        shared, limit = True, _whole(record.get("permits"), 1, MAX_PERMITS)
    else:
        raise ValueError(f"no entry is of kind {kind!r}")
    part, last = kv["key"].rsplit(b"/", 2)[-2:]
    if part + b"/" != (SHARED if shared else EXCLUSIVE):
        raise ValueError("an entry's key is in the part of the line of its kind")
    if last.startswith(TURN):
        digits, dot, owner_part = last[len(TURN) :].partition(b".")
        if not (dot and owner_part and len(digits) == 19 and digits.isdigit()):
            raise ValueError("an entry's turn is 19 digits and a dot")
        # no client takes a turn past the revision its key is created at
        if not 0 < _TURN_TOP - int(digits) <= kv["create_revision"]:
            raise ValueError("an entry's turn comes after its key was made")
    else:
        owner_part = last  # the layout before turns: ``<part>/<owner hash>``
    owner = owner_part.decode("ascii", "replace")
    return Contender(
        kv["key"], owner, kv["create_revision"], kv["lease"], shared, limit, holder, lease_ttl
    )


def parse_line(kvs: list[dict[str, Any]]) -> Line:
    """The line from a range of its keys, in creation order. A key whose value no tumbler
    client would have written (numbers out of range, an unknown kind, no JSON object), or whose
    turn is later than its create revision, is no contender: it blocks nothing, and it is kept
    apart, for ``status`` and ``force_release``."""
    contenders = []
    malformed = []
    tombs = []
    for kv in kvs:
        try:
            if is_tomb(kv["key"]):
                tombs.append(_tombstone(kv))
            else:
                contenders.append(_contender(kv))
        except (ValueError, RecursionError):  # json's errors are ValueErrors; so is bad UTF-8
            malformed.append((kv["key"], kv["create_revision"]))
    contenders.sort(key=lambda contender: contender.create_revision)
    return Line(contenders, malformed, tombs)


def is_tomb(key: bytes) -> bool:
    """Whether ``key``, of a line, is a tombstone's (by its name: see ``tomb_key``)."""
    return key[key.rfind(b"/") + 1 :].startswith(TOMB)


# --------------------------------------------------------------------------------------------
# Errors


def lease_gone(error: EtcdError) -> bool:
    """Whether etcd refused a request because the lease it names is gone."""
    return error.code == NOT_FOUND and "lease not found" in error.message


def _anonymous(error: EtcdError) -> bool:
    """Whether etcd refused a request that named no user, its authentication being on."""
    return error.code == INVALID_ARGUMENT and "user name is empty" in error.message


def _refused(error: EtcdError) -> bool:
    if error.code in (PERMISSION_DENIED, UNAUTHENTICATED) or _anonymous(error):
        return True
    # a wrong password or an unknown user: etcd answers "invalid argument"
    return error.code == INVALID_ARGUMENT and "authentication failed" in error.message


#: what the gateway's errors mean for a lock user
ERRORS = ErrorMap(
    Rule(GatewayUnavailable, BackendUnavailable, "cannot reach etcd: {error}"),
    Rule(
        EtcdError,
        PermissionDenied,
        "etcd refused access ({error.message}): the cluster has authentication on and the URL "
        "gives no credentials (USER:PASSWORD@)",
        when=_anonymous,
    ),
    Rule(
        EtcdError,
        PermissionDenied,
        "etcd refused access ({error.message}): the URL's user lacks rights on the prefix, or "
        "gave wrong credentials",
        when=_refused,
    ),
    Rule(EtcdError, BackendUnavailable, "etcd error: {error.message} (code {error.code})"),
)


#: the driver's errors as tumbler's, at this one edge, keeping the cause:
#: ``with translate_errors(url, lock_name):``
translate_errors = ERRORS.at
