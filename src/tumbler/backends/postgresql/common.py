"""``postgresql://``, ``postgres://``: locks in PostgreSQL tables (``tumbler-locks[postgresql]``).

URL grammar::

    postgresql://[USER[:PASSWORD]@]HOST[:PORT][/DBNAME][?OPTIONS]
    postgres://...                                      the same
    postgresql://[USER[:PASSWORD]@]/DBNAME?host=/run/postgresql   through a Unix socket

Percent-encode ``@ : / ? #`` in a password. Options: ``schema`` (where the tables live,
default ``tumbler``; made on first use), ``sslmode`` (libpq's: ``disable``, ``allow``,
``prefer``, ``require``, ``verify-ca``, ``verify-full``; default ``prefer``),
``sslrootcert``, ``sslcert``, ``sslkey`` (files), ``connect_timeout`` (seconds, default 5),
``statement_timeout`` (seconds, default 5: the server cancels a statement that runs longer),
``socket_timeout`` (seconds, default 5 or ``statement_timeout`` if that is longer, and never
shorter: the most one call waits for the server's replies on its connection; then the client
shuts that connection down and the call raises ``BackendUnavailable``, also when the network
drops replies while the connection looks alive), ``lock_timeout`` (seconds, default 2: how long
a grant waits for another client's transaction on the same name before it gives up with
``BackendUnavailable``), ``max_connections`` (default 10: the most calls one client has under
way at once; more wait for a free connection up to ``statement_timeout``), ``max_waiters``
(default 10000: the most waiters one lock queues; one more acquire that would wait gets
``TooManyWaiters``, and leaves nothing behind), ``wakeups``
(``listen``, the default: waiters are woken by ``LISTEN``/``NOTIFY``; ``poll``: waiters poll
with a short bounded backoff, for a pooler that cannot carry ``LISTEN``), ``pooler``
(``none``, the default, or ``transaction``: the URL names a pooler in transaction mode, such
as PgBouncer's ``pool_mode = transaction``; see below) and ``host`` (a Unix socket directory,
for a URL without a host).

Behind a transaction-mode pooler (``pooler=transaction``)
    Each transaction may run on another server connection, shared with other clients, so
    nothing may depend on a session outliving a transaction: the timeouts are set in each
    transaction (``set_config(..., true)``, PostgreSQL's ``SET LOCAL``) rather than as
    connection startup options (which a pooler refuses or forgets), every call, also a single
    statement, is a transaction of its own that sets them first (in the same round trip),
    statements are never prepared on the server (psycopg's ``prepare_threshold=None``: a
    prepared statement lives in one server session), and waiters and state watchers poll
    (``wakeups=poll`` is implied: ``LISTEN`` would listen on a server connection the pooler
    gives to others;
    ``wakeups=listen`` with it is refused). The locks on the names' rows end with their
    transactions already. What polling costs: a waiter learns of a release up to
    ``poll_cap`` (0.1 s) late, and each poll is a transaction on the server.

The grants a database user needs: ``CONNECT`` on the database, and either ``CREATE`` on the
database (the schema is made on first use) or, once ``tumbler init URL`` made the schema as
another role, ``USAGE`` on the schema, ``SELECT, INSERT, UPDATE, DELETE`` on its tables,
``USAGE, UPDATE`` on its sequence and ``EXECUTE`` on its functions (which every role has unless
the database revoked it from ``PUBLIC``).

What it guarantees
    Every grant, release and forced release is one short transaction that first locks the
    name's row (``SELECT ... FOR UPDATE`` in ``tumbler_names``: it ends with the transaction,
    so it is safe behind a transaction-mode pooler, and it needs the UPDATE privilege, so a
    role that may only read cannot hold a name up, as it could an advisory lock), reads the
    name's live entries and decides by tumbler's grant rule.
    Leases are timed on the server's clock (``clock_timestamp()``), never the client's: every
    expiry is written and compared by the server. Fencing tokens come from one sequence per
    schema, so they strictly increase for every name, also after the name's rows are gone,
    and across a restart of the server (a sequence never goes back; a crash may skip values).
    A release deletes the owner's row; a name nobody holds or waits for leaves no row. A
    release that frees a lock whose first waiter is exclusive hands the lock to that waiter in
    the same transaction, if the waiter's client still listens, and tells it so in the
    ``NOTIFY`` that goes with the commit. That grant lives on the waiter's own short lease
    (its entry's) until the waiter takes it up with one write, which sets the lease it asked
    for: a waiter that dies in the moment after the release saw it listen never does, and a
    request that finds its client gone revokes the grant (``tumbler_grant``).
    Other waiters are woken by ``NOTIFY``, sent to the channel of each client whose waiter the
    release lets through, with the waiter's owner hash, so only that waiter wakes; each client
    listens on one connection, and re-checks every second in case a notification is lost.
    State watchers (``locks.watch``, ``election.observe``) are woken the same way, on the same
    connection: a client that watches a name keeps a row in ``tumbler_watched`` while it
    does (30 s unless set again; deleted as the client closes), and each grant, release,
    forced release and waiter arriving or leaving notifies the client of each live row of
    the name, in its own transaction (see ``statements``, "State watchers"). Where nobody
    watches, that costs one lookup by the table's key inside a statement the call runs
    anyway, and no round trip. A role that may only read cannot write that row: its watcher
    reads every quarter second, as on a backend that wakes no watcher.
    A release deletes the waiters at the head of the line whose client no longer listens (its
    process died, its connection closed: the key its listening connection holds is free), so
    a waiter killed while it waits holds a fair line up for no longer than the server takes
    to see its connection close, not until its entry runs out (``waiter_ttl``, 3 s). A waiter
    names its client's listener key once the client listens, or means to (its watch is
    made: the connection that writes its entry then holds the key too, till the listener
    does); one whose client polls cannot be told dead: its entry runs out, 1 s after its
    last poll (a polling waiter's entry is refreshed by every poll, and lives that long).
    A release reads the name's grants and the head of its line, each by an index, and a
    decision in the client the part of the line the rule looks at; the ended and unreadable
    entries a decision (and a release) deletes first are found by indexes too (a lease past
    any tumbler grants by the one on expiry, a lock-delay it never writes by a partial one),
    so neither costs more with a longer line. Queueing does: a new waiter counts the line
    against ``max_waiters``, by its index, up to the cap.

What it cannot promise
    PostgreSQL's streaming replication is asynchronous by default: a failover to a replica
    that had not received a grant forgets it (two holders), and the token sequence may go
    back by what the replica missed. Fencing tokens let the protected resource refuse a stale
    holder; use synchronous replication for locks that must survive a failover.

    A release that grants nothing, and a waiter's entry, are committed without waiting for
    the disk (``synchronous_commit`` off for that transaction; grants, renewals and hand-offs
    wait): a crash of the server in the moment after a release may forget it, and the lock is
    then held to the end of its lease, as after a crash of its holder. No grant is forgotten.

A server out of connections
    A client uses up to ``max_connections`` connections for calls and, once one of its
    waiters waits, one more to listen. A server (or pooler) that refuses a connection
    because it has every one it allows in use fails the call that needed it at once with
    ``OutOfConnections`` (a ``BackendUnavailable``), the server's refusal for its cause: a
    waiter whose client cannot listen is told so, not left to wait.

How a hold can be lost here
    Its lease runs out before a renewal reaches the server (the client paused, or could not
    reach PostgreSQL for the whole lease); an operator force-released it (the note is kept
    in ``tumbler_evictions`` until that lease would have run out, and a minute more). A
    connection that dies does not lose its holder's grants: the lease keeps running on the
    server, and the holder's next renewal (on another connection) decides.

Lock-delay
    A grant made with a ``lock_delay`` keeps it in its row (``lock_delay``, in seconds), whose
    ``expires_at`` is then the end of its lease plus the delay (see ``statements``): the
    row, and with it the name's closure, outlives the lease by the delay, on the server's
    clock like the lease, and whatever drops rows that ran out leaves it until then. A grant
    a release hands to a waiter takes its delay at the take-up, not before: a waiter that
    dies before it takes the grant up had no grant to lose. Nothing announces a delay's end:
    its waiters find it at their next re-check (``recheck_interval``). A table made before
    the column existed gains it at the next client's start, its rows reading as no delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg  # the driver: without it, MissingDependency

from ..._url import BackendURL
from ...errors import (
    BackendUnavailable,
    ConfigurationError,
    InvalidURL,
    OutOfConnections,
    PermissionDenied,
)
from ..kit.errors import ErrorMap, Rule
from ..kit.options import DEFAULT_MAX_WAITERS, host_port, seconds, waiter_count

DEFAULT_PORT = 5432
DEFAULT_SCHEMA = "tumbler"
#: ``max_connections`` when the URL does not say: calls are one short transaction each
DEFAULT_MAX_CONNECTIONS = 10
MAX_CONNECTIONS = 1000
#: what to do about a server out of connections
CONNECTIONS_ADVICE = (
    "each client uses up to max_connections (in the URL) for calls and one more to listen "
    "for releases"
)
SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
#: PostgreSQL's identifiers are at most 63 bytes (NAMEDATALEN - 1)
MAX_IDENTIFIER = 63

_OPTIONS = (
    "schema",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "connect_timeout",
    "statement_timeout",
    "socket_timeout",
    "lock_timeout",
    "max_connections",
    "max_waiters",
    "wakeups",
    "pooler",
    "host",
)

#: SQLSTATE classes and codes that mean "this role may not": 28 (invalid authorization),
#: 42501 (insufficient privilege)
_REFUSED = ("28", "42501")
#: ... "this database or schema cannot be used as configured": 3D000 (no such database),
#: 3F000 (no such schema)
_MISCONFIGURED = ("3D000", "3F000")
#: what libpq says of refused credentials before any SQLSTATE reaches the client
_AUTH_FAILED = re.compile(
    r"password authentication failed|no password supplied|pg_hba\.conf|role \".*\" does not exist"
    # ... and what PgBouncer says of them (with its catch-all SQLSTATE 08P01)
    r"|SASL authentication failed"
)
#: ... and of a database that is not there
_NO_DATABASE = re.compile(r"database \".*\" does not exist")
#: what PgBouncer says of the startup options a direct connection sets its bounds with
_POOLER_REFUSED = re.compile(r"unsupported startup parameter")
#: SQLSTATE too_many_connections: the server has max_connections (or a role's or a
#: database's connection limit) in use already
_NO_ROOM = "53300"
#: ... what libpq reports of it at connect, where no SQLSTATE reaches the client (the slots
#: reserved for superusers being the last ones free, or none free), and what PgBouncer says
#: when it has max_client_conn clients already
_FULL = re.compile(
    r"too many clients already|remaining connection slots are reserved|too many connections "
    r"for|no more connections allowed"
)


def _text(error: BaseException) -> str:
    return str(error).strip()


def _refused(error: psycopg.Error) -> bool:
    state = error.sqlstate or ""
    return state.startswith(_REFUSED) or (
        state in ("", "08P01") and _AUTH_FAILED.search(_text(error)) is not None
    )


def _pooler_refused(error: psycopg.Error) -> bool:
    return not error.sqlstate and _POOLER_REFUSED.search(_text(error)) is not None


def _misconfigured(error: psycopg.Error) -> bool:
    state = error.sqlstate or ""
    return state in _MISCONFIGURED or (not state and _NO_DATABASE.search(_text(error)) is not None)


def _full(error: psycopg.Error) -> bool:
    state = error.sqlstate or ""
    return state == _NO_ROOM or (state in ("", "08P01") and _FULL.search(_text(error)) is not None)


def _sqlstate(code: str) -> Callable[[psycopg.Error], bool]:
    return lambda error: error.sqlstate == code


#: what psycopg's errors mean for a lock user
ERRORS = ErrorMap(
    Rule(psycopg.Error, PermissionDenied, "PostgreSQL refused: {text}", when=_refused),
    Rule(
        psycopg.Error,
        ConfigurationError,
        "PostgreSQL: {text} (is this a pooler in transaction mode? add pooler=transaction to "
        "the URL)",
        when=_pooler_refused,
    ),
    Rule(psycopg.Error, ConfigurationError, "PostgreSQL: {text}", when=_misconfigured),
    Rule(
        psycopg.Error,
        OutOfConnections,
        "PostgreSQL refused a connection: it has as many as it allows (its max_connections, or "
        "a pooler's max_client_conn); " + CONNECTIONS_ADVICE + ": {text}",
        when=_full,
    ),
    Rule(
        psycopg.Error,
        BackendUnavailable,
        "PostgreSQL cancelled a statement that ran past statement_timeout: {text}",
        when=_sqlstate("57014"),
    ),
    Rule(
        psycopg.Error,
        BackendUnavailable,
        "another client held the lock's name past lock_timeout: {text}",
        when=_sqlstate("55P03"),
    ),
    Rule(psycopg.Error, BackendUnavailable, "PostgreSQL: {text}"),
    Rule(OSError, BackendUnavailable, "cannot reach PostgreSQL: {error}"),
    text=_text,
)


#: the tumbler error a driver error means for a lock user: ``tumbler_error(error, url, name)``
tumbler_error = ERRORS.error_at


#: the driver's errors as tumbler's, at this one edge, keeping the cause:
#: ``with translate_errors(url, lock_name):``
translate_errors = ERRORS.at


class NoReply(psycopg.OperationalError):
    """The server did not answer a call within its limit (``socket_timeout``): the client
    shut the connection down, so what the call did on the server is unknown."""


def _shut_down(fileno: int) -> None:
    """Shut the socket ``fileno`` down for both directions. Unlike closing the descriptor
    (which another thread may then reuse), this leaves it open for its owner: every wait on
    it ends at once (end of file), every send fails, and libpq reports the connection broken,
    also while it unwinds a transaction or pipeline (their rollback and sync fail at once
    instead of waiting for the dropped replies in turn)."""
    with contextlib.suppress(OSError):
        duplicate = socket.socket(fileno=os.dup(fileno))
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        finally:
            duplicate.close()


class Deadline:
    """One call's limit on one connection: :meth:`fire` (at the deadline) shuts the
    connection's socket down unless :meth:`disarm` came first. After ``disarm`` returns the
    socket is never touched, so the connection may then be closed (and its descriptor
    reused) safely."""

    def __init__(self, fileno: int, limit: float) -> None:
        self.fileno = fileno
        self.limit = limit
        self.when = time.monotonic() + limit
        self.fired = False
        self._armed = True
        self._lock = threading.Lock()
        self.on_disarm: Callable[[], object] | None = None

    def fire(self) -> None:
        with self._lock:
            if not self._armed:
                return
            self._armed = False
            self.fired = True
            _shut_down(self.fileno)

    def disarm(self) -> bool:
        """End the limit; whether it fired first (the connection is then unusable)."""
        with self._lock:
            self._armed = False
        if self.on_disarm is not None:
            self.on_disarm()
        return self.fired

    def no_reply(self) -> NoReply:
        return NoReply(
            f"no reply from PostgreSQL within {self.limit:.3g} s (socket_timeout); "
            "the connection was dropped"
        )


class AsyncBound:
    """How every call keeps within its limit (asyncio): the event loop shuts the
    connection's socket down at the deadline. Cancelling the task instead would not do: a
    cancelled psycopg call unwinds through its transaction and pipeline, whose rollback and
    sync wait for replies again, and nothing cancels those waits."""

    def arm(self, connection: Any, limit: float) -> Deadline:
        deadline = Deadline(connection.fileno(), limit)
        deadline.on_disarm = asyncio.get_running_loop().call_later(limit, deadline.fire).cancel
        return deadline

    def close(self) -> None:
        pass


class Bound:
    """Blocking twin of :class:`AsyncBound`: one watchdog thread per client shuts a
    connection's socket down at its call's deadline. psycopg's blocking calls wait in
    ``poll`` on the socket, which neither the server's ``statement_timeout`` nor TCP's
    timeouts end while a peer that acknowledged the request stays silent (libpq's
    ``tcp_user_timeout`` bounds unacknowledged sends only); a shut-down socket ends it at
    once."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, Deadline]] = []
        self._count = 0
        self._changed = threading.Condition()
        self._watchdog: threading.Thread | None = None
        self._closed = False

    def arm(self, connection: Any, limit: float) -> Deadline:
        deadline = Deadline(connection.fileno(), limit)
        with self._changed:
            self._count += 1
            heapq.heappush(self._due, (deadline.when, self._count, deadline))
            if self._watchdog is None and not self._closed:
                self._watchdog = threading.Thread(
                    target=self._watch, name="tumbler-postgresql-deadlines", daemon=True
                )
                self._watchdog.start()
            if self._due[0][2] is deadline:
                self._changed.notify()
        return deadline

    def _watch(self) -> None:
        with self._changed:
            while not self._closed:
                now = time.monotonic()
                while self._due and self._due[0][0] <= now:
                    # a disarmed deadline does nothing when fired; its call is over
                    heapq.heappop(self._due)[2].fire()
                self._changed.wait(self._due[0][0] - now if self._due else None)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            watchdog, self._watchdog = self._watchdog, None
            self._changed.notify()
        if watchdog is not None and watchdog is not threading.current_thread():
            watchdog.join()


def _identifier(text: str) -> str:
    if not text or len(text.encode()) > MAX_IDENTIFIER or "\x00" in text:
        raise ValueError(f"expected 1 to {MAX_IDENTIFIER} bytes")
    return text


def _connection_count(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_CONNECTIONS:
        raise ValueError(f"expected a whole number of connections from 1 to {MAX_CONNECTIONS}")
    return int(text)


def _choice(*allowed: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}")
        return text

    return convert


@dataclass(frozen=True)
class PostgreSQLConfig:
    """A parsed ``postgresql://`` URL: what both flavours need to connect."""

    url: str  # redacted
    schema: str
    listen: bool
    #: behind a transaction-mode pooler: no session state (settings, prepared statements)
    pooled: bool
    max_connections: int
    #: the most waiters one lock queues
    max_waiters: int
    connect_timeout: float
    statement_timeout: float
    #: the most a call waits for the server's replies on its connection (client side)
    socket_timeout: float
    lock_timeout: float
    #: keyword arguments for ``psycopg.connect`` (the password among them: never log this)
    connect_options: dict[str, Any] = field(repr=False)


def parse_config(url: BackendURL) -> PostgreSQLConfig:
    """Read a ``postgresql://`` URL; InvalidURL (without the password) for a bad one."""
    url.allow_options(_OPTIONS)
    schema = url.option("schema", _identifier, DEFAULT_SCHEMA)
    socket_dir = url.query.get("host")
    if url.hosts and socket_dir is not None:
        raise InvalidURL(
            "give the host in the URL or a socket directory as host=, not both",
            backend=url.redacted,
        )
    options: dict[str, Any] = {}
    if socket_dir is not None:
        if not socket_dir.startswith("/"):
            raise InvalidURL(
                "host= is a Unix socket directory (an absolute path)", backend=url.redacted
            )
        options["host"] = socket_dir
    else:
        if "," in url.hosts:
            raise InvalidURL("give one host: several are not supported", backend=url.redacted)
        host, port = host_port(url.hosts or "localhost", url, DEFAULT_PORT)
        options.update(host=host, port=port)
    database = url.path.strip("/")
    if "/" in database:
        raise InvalidURL(f"bad database name {database!r}", backend=url.redacted)
    if database:
        options["dbname"] = database
    if url.username is not None:
        options["user"] = url.username
    if url.password is not None:
        options["password"] = url.password
    sslmode = url.option("sslmode", _choice(*SSLMODES), "prefer")
    options["sslmode"] = sslmode
    for name in ("sslrootcert", "sslcert", "sslkey"):
        path = url.query.get(name)
        if path is None:
            continue
        if sslmode == "disable":
            raise InvalidURL(
                f"{name} needs TLS, which sslmode=disable turns off", backend=url.redacted
            )
        if not Path(path).is_file():
            raise ConfigurationError(f"{name}: {path} is not a file", backend=url.redacted)
        options[name] = path
    if sslmode in ("verify-ca", "verify-full") and "sslrootcert" not in options:
        # libpq would look in ~/.postgresql/root.crt: say so rather than fail on connect
        default = Path.home() / ".postgresql" / "root.crt"
        if not default.is_file():
            raise InvalidURL(
                f"sslmode={sslmode} needs the CA: give sslrootcert=PATH", backend=url.redacted
            )
    connect_timeout = url.option("connect_timeout", seconds, 5.0)
    statement_timeout = url.option("statement_timeout", seconds, 5.0)
    lock_timeout = url.option("lock_timeout", seconds, 2.0)
    # Redis's name and default; never shorter than the server's own bound, which would then
    # never get to cancel a slow statement and say so
    socket_timeout = url.option("socket_timeout", seconds, max(5.0, statement_timeout))
    if socket_timeout < statement_timeout:
        raise InvalidURL(
            "socket_timeout must not be shorter than statement_timeout (the client would give "
            "up on a reply before the server gives up on the statement)",
            backend=url.redacted,
        )
    if lock_timeout > statement_timeout:
        raise InvalidURL(
            "lock_timeout must not be longer than statement_timeout", backend=url.redacted
        )
    # libpq takes whole seconds, and 1 at the least (0 would mean "wait for ever")
    options["connect_timeout"] = max(1, round(connect_timeout))
    # a peer that stops answering fails the connection's sends within the statement bound
    options["tcp_user_timeout"] = round(statement_timeout * 1000)
    options["keepalives"] = 1
    options["keepalives_idle"] = max(1, round(statement_timeout))
    options["keepalives_interval"] = 1
    options["keepalives_count"] = 3
    options["application_name"] = "tumbler"
    pooled = url.option("pooler", _choice("none", "transaction"), "none") == "transaction"
    wakeups = url.option("wakeups", _choice("listen", "poll"), "poll" if pooled else "listen")
    if pooled and wakeups == "listen":
        raise InvalidURL(
            "wakeups=listen cannot work through a transaction-mode pooler (pooler=transaction): "
            "LISTEN would stay on a server connection the pooler hands to other clients",
            backend=url.redacted,
        )
    return PostgreSQLConfig(
        url=url.redacted,
        schema=schema,
        listen=wakeups == "listen",
        pooled=pooled,
        max_connections=url.option("max_connections", _connection_count, DEFAULT_MAX_CONNECTIONS),
        max_waiters=url.option("max_waiters", waiter_count, DEFAULT_MAX_WAITERS),
        connect_timeout=connect_timeout,
        statement_timeout=statement_timeout,
        socket_timeout=socket_timeout,
        lock_timeout=lock_timeout,
        connect_options=options,
    )
