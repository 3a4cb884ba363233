# Generated from src/tumbler/backends/mysql/_async/backend.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""The MySQL / MariaDB backend (asyncio flavour on aiomysql, the source of the generated
blocking twin on PyMySQL).

See ``tumbler.backends.mysql.common`` for the URL grammar and the guarantees, and
``tumbler.backends.mysql.statements`` for the tables and stored procedures.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import pymysql

from ...._acompat import sleep_real
from ...._clock import SYSTEM_CLOCK, Clock
from ....errors import (
    BackendUnavailable,
    ConfigurationError,
    OutOfConnections,
    PermissionDenied,
    TumblerError,
)
from ...contract import Grant, GrantRequest, LockState, Renewal, SessionEvents, WakeHub
from ...kit import BaseWatch, Decision, Entry, LockStateBuilder, Write, plan, to_wake
from ...kit._sync.listener import Listener
from ...kit.options import line_full
from ...kit.owners import owner_hash
from ...kit.slots import Slots
from .. import CAPABILITIES
from ..common import (
    MySQLConfig,
    NoConnection,
    NoReply,
    Replies,
    bounded,
    close_connection,
    closed_by_server,
    open_connection,
    translate_errors,
    tumbler_error,
)
from ..statements import (
    INDEXES,
    NOTE_GRACE,
    PROCEDURES,
    RENEW_ROWS,
    SWEEP_EVERY,
    SWEEP_ROWS,
    VERSION,
    Statements,
)

_log = logging.getLogger("tumbler.mysql")

T = TypeVar("T")

#: the server's errors that say a connection is gone (server gone away, lost, killed)
_LOST = frozenset({2006, 2013, 2055, 1927})
#: "query execution was interrupted": a KILL QUERY, which is how a release rings a listener
_INTERRUPTED = 1317
#: a server that refuses connections for a moment (starting, shutting down); not one that
#: has all the connections it allows (1040), which says so at once (OutOfConnections)
_REFUSED_NOW = frozenset({2002, 2003, 1053})


#: InnoDB rolled the statement's transaction back to break a deadlock
_DEADLOCK = 1213
#: how many times a transaction is run before its deadlocks are the caller's error
_DEADLOCK_TRIES = 5


def _code(error: BaseException) -> int:
    args = getattr(error, "args", ())
    return args[0] if args and isinstance(args[0], int) else 0


#: delivered wake-ups a listener keeps before it deletes them, in one statement
_WAKEUPS_KEPT = 32
#: waiters a release reads at the head of a line to find whom it lets through; more (twice as
#: many each time) only while every one read goes through (a run of readers)
WAKE_HEAD = 16
#: a seq after every entry's: the place in line of an owner with no entry
_LAST_SEQ = 2**64 - 1


def _passing(statement: str, seqs: Sequence[int]) -> str:
    """``statement`` with a placeholder for each of ``seqs``, or for one seq 0 if none."""
    return statement.format(seqs=", ".join(["%s"] * max(1, len(seqs))))


def _answered(error: BaseException) -> bool:
    """Whether the server answered the statement that failed with ``error`` (so nothing of
    it still runs there)."""
    return (
        isinstance(error, pymysql.Error)
        and not isinstance(error, NoReply)
        and _code(error) not in _LOST
    )


def _transaction(run: Callable[[], T]) -> T:
    """``run()``, one whole transaction (a procedure's, or one the client began and ends),
    run again when InnoDB rolled it back to break a deadlock: nothing of it was kept, and
    InnoDB's own advice is to run it again. Names take turns on their row in ``names``, so
    what is left to deadlock is rare (two transactions meeting on an index's pages)."""
    for attempt in range(1, _DEADLOCK_TRIES + 1):
        try:
            return run()
        except pymysql.err.OperationalError as error:
            if _code(error) != _DEADLOCK or attempt == _DEADLOCK_TRIES:
                raise
            _log.debug("a deadlock rolled a transaction back: running it again")
    raise AssertionError("unreachable")


class Pool:
    """The client's connections for calls: at most ``max_connections`` in use at once, idle
    ones kept for the next call. A connection a call left in doubt (an error, a
    cancellation, a limit run out) is closed rather than reused."""

    def __init__(self, config: MySQLConfig) -> None:
        self._config = config
        self._idle: list[Any] = []
        self._lock = threading.Lock()
        self._slots = Slots(config.max_connections, config.socket_timeout, NoConnection)
        #: server thread ids of connections given up while a statement may still run there
        self._abandoned: list[int] = []
        self._closed = False

    def connect(self, deadline: float | None = None) -> Any:
        """A new connection, tried again for up to ``connect_timeout`` while the server
        refuses connections for a moment (a restart): a connection that failed ran nothing.
        ``deadline`` (``time.monotonic()``): a call's own, which bounds each try too."""
        until = time.monotonic() + self._config.connect_timeout
        if deadline is not None:
            until = min(until, deadline)
        pause = 0.02
        while True:
            try:
                connection = open_connection(
                    self._config, None if deadline is None else _left(deadline)
                )
            except pymysql.err.OperationalError as error:
                left = until - time.monotonic()
                if self._closed or left <= 0 or _code(error) not in _REFUSED_NOW:
                    raise
                sleep_real(min(pause, left))
                pause = min(pause * 2, 0.5)
                continue
            return connection

    @contextlib.contextmanager
    def connection(self, deadline: float | None = None) -> Iterator[Any]:
        """A connection for one call; ``deadline`` (``time.monotonic()``): the call's own,
        which bounds its wait for a place and a connection, and for each reply."""
        if self._closed:
            raise pymysql.err.OperationalError(2006, "the client is closed")
        slots = self._slots
        if deadline is not None:
            slots = slots.within(min(_left(deadline), self._config.socket_timeout))
        try:
            with slots:
                connection = self._idle_connection()
                if connection is None:
                    connection = self.connect(deadline)
                try:
                    if deadline is not None:
                        Replies.limit(connection, _left(deadline))
                    if self._abandoned:
                        self._kill_abandoned(connection)
                    yield connection
                except BaseException as error:
                    if not _answered(error):
                        with contextlib.suppress(Exception), self._lock:
                            self._abandoned.append(int(connection.thread_id()))
                    close_connection(connection)
                    if isinstance(error, pymysql.err.OperationalError):
                        self._drop_idle()  # a restart closed them all
                    raise
                if self._closed:
                    close_connection(connection)
                    return
                if deadline is not None:
                    Replies.limit(connection, self._config.socket_timeout)
                with self._lock:
                    self._idle.append(connection)
        except NoConnection:
            raise BackendUnavailable(
                "every connection of this client to MySQL stayed busy for socket_timeout; "
                "the client makes more calls at once than max_connections (in the URL) allows",
                backend=self._config.url,
            ) from None

    def _kill_abandoned(self, connection: Any) -> None:
        """End the connections calls gave up on (a cancellation, no reply in time, a lost
        connection), before this call runs. The server runs a statement to its end also when
        its client has hung up: a grant a caller gave up on, then withdrew, could otherwise
        land after the withdrawal and hold the lock for a whole lease. Once killed, such a
        statement has either taken the name's row (and whatever runs next on the name waits
        for it) or never will."""
        with self._lock:
            abandoned, self._abandoned = self._abandoned, []
        with connection.cursor() as cursor:
            for thread in abandoned:
                try:
                    cursor.execute("KILL CONNECTION %s", (thread,))
                except pymysql.Error as error:
                    if _code(error) in _LOST:
                        raise
                    # gone already (1094), or not ours to end
                    _log.debug("could not end connection %s: %s", thread, error)

    def _idle_connection(self) -> Any:
        """An idle connection the server has not closed, if there is one. One it closed
        would fail the call that used it (also a release, which is not tried again), so it
        is dropped here, and so are the other idle ones (a restart closed them all)."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                connection = self._idle.pop()
            if not closed_by_server(connection):
                return connection
            close_connection(connection)
            self._drop_idle()

    def _drop_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            close_connection(connection)

    def run(
        self,
        call: Callable[[Any], T],
        *,
        idempotent: bool = False,
        deadline: float | None = None,
    ) -> T:
        """``call`` on a connection of :meth:`connection`, bounded by ``socket_timeout``;
        tried again on a fresh connection for up to ``connect_timeout`` when it is
        ``idempotent`` and its connection was found gone (an idle one the server closed).
        ``deadline`` (``time.monotonic()``): the call's own, which bounds all of it."""
        until = time.monotonic() + self._config.connect_timeout
        if deadline is not None:
            until = min(until, deadline)
        while True:
            try:
                with self.connection(deadline) as connection:
                    limit = self._config.socket_timeout
                    if deadline is not None:
                        limit = min(limit, _left(deadline))
                    return bounded(call(connection), limit)
            except pymysql.err.OperationalError as error:
                retry = idempotent and _code(error) in _LOST and not isinstance(error, NoReply)
                if self._closed or time.monotonic() >= until or not retry:
                    raise

    def close(self) -> None:
        self._closed = True
        self._drop_idle()


def _left(deadline: float) -> float:
    """The seconds left before ``deadline`` (``time.monotonic()``); ``NoReply`` if none."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise NoReply(2013, "no reply from MySQL within the call's time")
    return left


def _one_row(connection: Any, statement: str, args: Sequence[Any]) -> tuple[Any, ...]:
    """The first row of ``statement`` (a CALL's answer: its other results are read too)."""
    with connection.cursor() as cursor:
        cursor.execute(statement, args)
        row = cursor.fetchone()
        while cursor.nextset():
            pass
    if row is None:
        raise pymysql.err.InternalError(0, f"no answer to {statement.split('(')[0]}")
    return tuple(row)


def _execute(connection: Any, statement: str, args: Sequence[Any]) -> int:
    """Run ``statement`` for its effect; the rows it changed (every result of a CALL read)."""
    with connection.cursor() as cursor:
        cursor.execute(statement, args)
        changed = int(cursor.rowcount)
        while cursor.nextset():
            pass
    return changed


def _uninterrupted(connection: Any, statement: str, args: Sequence[Any], limit: float) -> None:
    """Run ``statement`` on the listener's connection, again when a ring interrupts it
    (``KILL QUERY`` ends whatever the listener runs)."""
    while True:
        try:
            bounded(_execute(connection, statement, args), limit)
        except pymysql.err.OperationalError as error:
            if _code(error) != _INTERRUPTED:
                raise
            continue
        return


class Wakeups(Listener):
    """The client's one listening connection: it holds the client's listener lock and waits
    for the client's doorbell, which a second connection holds, and a release that wakes one
    of this client's waiters leaves a wake-up row and interrupts that wait (see
    ``statements``). The reader reads its wake-ups, keeps the grants handed over, and wakes
    just those waiters."""

    def __init__(self, backend: MySQLBackend) -> None:
        config = backend.config
        super().__init__(
            backend.clock,
            backend.hub,
            config.url,
            label="MySQL",
            log=_log,
            patience=config.connect_timeout + config.socket_timeout,
        )
        self._backend = backend
        #: the client's listener key: its waiters' entries name it, its listener holds it
        self.key = secrets.randbits(62)

    def _listen(self) -> None:
        backend = self._backend
        sql = backend.sql
        limit = backend.config.socket_timeout
        # each wait ends well within socket_timeout, which the blocking driver applies to
        # every read, the wait's too
        nap = min(backend.capabilities.recheck_interval, limit / 2)
        connection: Any = None
        doorbell: Any = None
        try:
            doorbell = backend.pool.connect()
            if bounded(_one_row(doorbell, sql["doorbell"], (self.key,)), limit) != (1,):
                raise pymysql.err.OperationalError(0, "the doorbell is taken")
            connection = backend.pool.connect()
            if bounded(_one_row(connection, sql["listen"], (self.key,)), limit) != (1,):
                raise pymysql.err.OperationalError(0, "the listener lock is taken")
            bounded(_execute(connection, sql["forget_wakeups"], (self.key,)), limit)
            self._now_listening()
            delivered: list[int] = []  # wake-ups delivered and not yet deleted
            while not self._closed:
                waited = None
                try:
                    (waited,) = bounded(
                        _one_row(
                            connection,
                            _passing(sql["sleep"], delivered),
                            (self.key, *(delivered or [0]), self.key, nap),
                        ),
                        nap + limit,
                    )
                except pymysql.err.OperationalError as error:
                    if _code(error) != _INTERRUPTED:
                        raise
                if waited == 1:  # its holder is gone: the listener has the doorbell
                    raise pymysql.err.OperationalError(0, "the doorbell's holder left")
                delivered += self._deliver(connection, limit, delivered)
                # deleted when the batch is full, or while nothing else is to be done
                if delivered and (len(delivered) >= _WAKEUPS_KEPT or waited == 0):
                    self._forget(connection, limit, delivered)
                    delivered = []
            self._leave(connection, limit)
        finally:
            for opened in (connection, doorbell):
                if opened is not None:
                    close_connection(opened)

    def _deliver(self, connection: Any, limit: float, delivered: list[int]) -> list[int]:
        """Read this client's wake-ups (but those ``delivered`` already), wake their waiters,
        and return their seqs. A ring that interrupts the read (``KILL QUERY`` ends whatever
        the listener runs) left a row that the next wait finds at once: the read is dropped."""
        try:
            with connection.cursor() as cursor:
                statement = _passing(self._backend.sql["wakeups"], delivered)
                bounded(cursor.execute(statement, (self.key, *(delivered or [0]))), limit)
                rows = list(cursor.fetchall())
        except pymysql.err.OperationalError as error:
            if _code(error) != _INTERRUPTED:
                raise
            return []
        for _, message in rows:
            text = message.decode() if isinstance(message, bytes) else str(message)
            self.handoffs.deliver(text, self._backend.hub)
        return [int(seq) for seq, _ in rows]

    def _forget(self, connection: Any, limit: float, delivered: list[int]) -> None:
        """Delete the wake-ups ``delivered`` (a wake-up read twice would hand a grant over
        twice)."""
        statement = _passing(self._backend.sql["read_wakeups"], delivered)
        _uninterrupted(connection, statement, (self.key, *delivered), limit)

    def _leave(self, connection: Any, limit: float) -> None:
        """Stop listening, then delete every wake-up left for this client, which nobody will
        read: a release leaves one only for a client that holds its listener lock, so once
        the lock is let go, none comes after the delete (and one a release is writing as it
        goes, the delete waits for)."""
        sql = self._backend.sql
        _uninterrupted(connection, sql["unlisten"], (self.key,), limit)
        _uninterrupted(connection, sql["forget_wakeups"], (self.key,), limit)

    def _refused(self, failure: Exception, name: str) -> TumblerError | None:
        # what waiting for the next attempt will not mend soon: a server out of connections,
        # refused credentials, a database or schema that is not there
        if isinstance(failure, pymysql.Error):
            error = tumbler_error(failure, self._backend.url, name)
            if isinstance(error, (OutOfConnections, PermissionDenied, ConfigurationError)):
                return error
        return None

    def _interrupt(self) -> None:
        # end the reader's wait now rather than at its end
        with contextlib.suppress(pymysql.Error, BackendUnavailable, OSError):
            sql = self._backend.sql

            def ring(connection: Any) -> None:
                _execute(connection, sql["ring"], (self.key,))

            self._backend.pool.run(ring)


class MySQLWatch(BaseWatch):
    """A waiter's view of its client's wake-ups (as PostgreSQL's: made before the first
    try; entering starts listening, and asks for a retry, if the client did not yet)."""

    def __init__(self, backend: MySQLBackend, name: str, owner: str) -> None:
        super().__init__(backend.clock, name, backend.hub, owner_hash(owner))
        self._backend = backend
        self._listening = not backend.config.ring or backend.wakeups.subscribed()

    def _subscribe(self) -> bool:
        if self._listening:
            return False
        self._backend.wakeups.subscribe(self.name)
        return True


def _entry_of(request: GrantRequest, owner: str) -> dict[str, Any]:
    """What an entry of ``request`` stores of it (``owner``: the owner's hash)."""
    return {
        # names go as text (utf8mb4) into VARBINARY: the same bytes, compared as bytes
        "name": request.name,
        "owner": owner,
        "shared": request.shared,
        "lim": request.limit,
        "fair": request.fair,
        "holder": request.holder,
    }


class MySQLBackend:
    """The MySQL / MariaDB backend contract: a small pool of connections for calls, and one
    listening connection for wake-ups."""

    session_events: SessionEvents | None = None

    def __init__(self, config: MySQLConfig) -> None:
        self.config = config
        self.url = config.url
        self.capabilities = CAPABILITIES
        self.clock: Clock = SYSTEM_CLOCK
        self.hub = WakeHub()
        self.sql = Statements.of(config.prefix)
        self.pool = Pool(config)
        self.wakeups = Wakeups(self)
        self._grants = 0

    # -- set-up ----------------------------------------------------------------------------

    def start(self) -> None:
        """Connect, and make the tables and procedures if one is missing (clients racing to
        make them take turns on a named lock)."""
        with translate_errors(self.url):
            self.pool.run(self.set_up, idempotent=True)

    def set_up(self, connection: Any) -> bool:
        """Check that the server is one this backend's promises hold on, then make the tables
        and procedures if one is missing; whether it made them."""
        with connection.cursor() as cursor:
            cursor.execute(self.sql["cluster"])
            settings = {name.lower(): str(value).upper() for name, value in cursor.fetchall()}
        if settings.get("wsrep_on") == "ON":
            raise ConfigurationError(
                "this MySQL server is a node of a Galera cluster (wsrep_on=ON), which the "
                "backend refuses: a node grants on what it has applied, and a grant another "
                "node certified but this one has not applied yet is not seen, nor does a "
                "release wake waiters on other nodes; point the URL at a server outside the "
                "cluster",
                backend=self.url,
            )
        return self.make_tables(connection)

    def make_tables(self, connection: Any) -> bool:
        """Make the tables and procedures if one is missing, and bring those an earlier
        version made up to this one's (its indexes added, its procedures made again);
        whether it did."""
        if self._tables_exist(connection):
            return False
        lock = f"tumbler-schema-{self.config.prefix}"
        got = _one_row(connection, self.sql["schema_lock"], (lock, 30))
        if got != (1,):
            raise pymysql.err.OperationalError(1205, "another client kept the tables' lock")
        try:
            if self._tables_exist(connection):
                return False
            with connection.cursor() as cursor:
                made = self._indexes(cursor)
                if made is not None:
                    # tables of an earlier version: what this one reads by, and its procedures
                    if "unusable" not in made and not self._has_unusable(cursor):
                        cursor.execute(self.sql["add_unusable"])
                    for key, columns in INDEXES.items():
                        if key not in made:
                            add = self.sql["add_index"].format(key=key, columns=columns)
                            cursor.execute(add)
                    for procedure in PROCEDURES:
                        cursor.execute(self.sql["drop_procedure"].format(procedure=procedure))
                for statement in self.sql.create:
                    cursor.execute(statement)
        finally:
            _one_row(connection, self.sql["schema_unlock"], (lock,))
        return True

    def _indexes(self, cursor: Any) -> set[str] | None:
        """The names of the entries table's indexes; None if there is no such table."""
        cursor.execute(self.sql["indexes"], (f"{self.config.prefix}entries",))
        names = {str(name) for (name,) in cursor.fetchall()}
        return names or None

    def _has_unusable(self, cursor: Any) -> bool:
        """Whether the entries table has the column its index of unusable entries is on."""
        cursor.execute(self.sql["columns"], (f"{self.config.prefix}entries",))
        return "unusable" in {str(name).lower() for (name,) in cursor.fetchall()}

    def _tables_exist(self, connection: Any) -> bool:
        """Whether the tables and procedures are there, as this version makes them: the
        procedure made last names this version. (A user that may only read sees that
        procedure, and nothing of the tables.)"""
        row = _one_row(connection, self.sql["made"], (f"{self.config.prefix}states",))
        return bool(row[0] == VERSION)

    # -- grants ----------------------------------------------------------------------------

    def _claim(self, connection: Any, request: GrantRequest) -> bool:
        """Whether ``request``'s entry names the client's key though the client does not
        listen yet, ``connection`` (or another of the client's) holding its waiter lock: when
        the request would queue and its waiter means to wait (its watch is made: the locks
        make it before the first try, and enter it, which starts listening, only once that
        try failed). Till the listener holds its own lock, this one says the client lives:
        without a key at all, a waiter killed in that moment held a fair line up for its
        entry's whole lease ({p}hand_off tells a waiter dead by its key's locks)."""
        if not (
            request.queue
            and self.config.ring
            and not self.wakeups.subscribed()
            and not self.wakeups.failing()  # a client that cannot listen is not told
            and self.hub.subscribers(request.name)
        ):
            return False
        _one_row(connection, self.sql["claim"], (self.wakeups.key,))
        return True

    def _waiter_terms(
        self, request: GrantRequest, stamp: int, claimed: bool = False
    ) -> dict[str, Any]:
        """What a waiter's entry stores besides the request: its own short lease, refreshed
        by each try, and what a release needs to hand it the lock and wake it."""
        # Only once the client listens, or a connection of it holds its waiter lock
        # (``claimed``): a release takes a waiter whose client's listener and waiter locks
        # nobody holds for one whose client is gone, and deletes its entry ({p}hand_off).
        listening = self.config.ring and (claimed or self.wakeups.subscribed())
        return {
            "ttl": self.capabilities.waiter_ttl,
            "client": self.wakeups.key if listening else None,
            "lease": request.ttl,
            "stamp": stamp,
        }

    def try_grant(self, request: GrantRequest) -> Grant | None:
        owner = owner_hash(request.owner)
        taken = self.wakeups.take_handed(
            request, lambda token: self._take_up(request.name, owner, token, request.ttl)
        )
        if taken is not None:
            return taken
        # when this try was sent, on this client's clock: a release that hands the lock to
        # this waiter says when its lease began in those terms (kit.handoffs)
        stamp = round(self.clock.now() * 1e6)

        def grant(connection: Any) -> tuple[int, float] | None:
            waiter = self._waiter_terms(request, stamp, self._claim(connection, request))
            arguments = (
                request.name,
                owner,
                request.shared,
                request.limit,
                request.fair,
                request.ttl,
                request.holder,
                request.queue,
                waiter["ttl"],
                waiter["client"],
                stamp,
                self.config.max_waiters,
            )
            token, left, undecided, full = _transaction(
                lambda: _one_row(connection, self.sql["grant"], arguments)
            )
            if full:
                raise line_full(self.config.max_waiters, request.name, self.url)
            if undecided:
                return _transaction(lambda: self._decide(connection, request, owner, waiter))
            return None if token is None else (int(token), float(left))

        with translate_errors(self.url, request.name):
            granted = self.pool.run(grant, idempotent=True)
            self._grants += 1
            if self._grants % SWEEP_EVERY == 0:
                self.pool.run(self._sweep, idempotent=True)
        if granted is None:
            return None
        token, left = granted
        return Grant(request.name, request.owner, token, left)

    def _take_up(self, name: str, owner: str, token: int, ttl: float) -> bool:
        """Take up the grant with ``token`` a release handed to ``owner`` (its hash): its
        lease set to ``ttl`` from now, if the owner's entry is a live grant with that token
        (see ``AsyncListener.take_handed``, and ``{p}hand_off``)."""

        def write(connection: Any) -> bool:
            arguments = (ttl, name, owner, token)
            return _transaction(lambda: _execute(connection, self.sql["take_up"], arguments)) == 1

        with translate_errors(self.url, name):
            return self.pool.run(write, idempotent=True)

    def _sweep(self, connection: Any) -> None:
        _transaction(lambda: _execute(connection, self.sql["sweep"], (SWEEP_ROWS,)))

    def _decide(
        self, connection: Any, request: GrantRequest, owner: str, waiter: dict[str, Any]
    ) -> tuple[int, float] | None:
        """Decide by the grant rule on the name's live line, and write what it says: the
        token and the lease left of a grant; None if none."""
        sql = self.sql
        with connection.cursor() as cursor:
            cursor.execute(sql["begin"])
            try:
                cursor.execute(sql["lock_name"], (request.name,))
                # The owner's own entry may have run out since {p}grant deleted the expired
                # ones: missing from the live line read below yet still in the table, where
                # writing it anew would break the by_name key. Deleted first, as there.
                cursor.execute(sql["drop_expired"], (request.name,))
                cursor.execute(sql["place"], (request.name, owner))
                place = cursor.fetchone()
                cursor.execute(
                    sql["line"],
                    {
                        "name": request.name,
                        "owner": owner,
                        "fair": request.fair,
                        "shared": request.shared,
                        "lim": request.limit,
                        "count": max(1, request.limit),
                        "before": _LAST_SEQ if place is None else place[0],
                    },
                )
                rows = list(cursor.fetchall())
                line = [
                    Entry(entry_owner, seq, bool(shared), lim, bool(fair), token)
                    for entry_owner, seq, shared, lim, fair, token, _ in rows
                ]
                decided = plan(
                    line, owner, request.shared, request.limit, request.fair, request.queue
                )
                answer: tuple[int, float] | None = None
                full = False  # a new waiter refused: the line has max_waiters already
                write = decided.write
                if decided.decision is Decision.HELD:
                    # granted already, by a release that handed it over or by a try whose
                    # reply was lost: taken up, with the lease asked for from now (unless it
                    # ran out this very moment: the owner's next try asks anew)
                    arguments = (request.ttl, request.name, owner, decided.held_token)
                    cursor.execute(sql["take_up"], arguments)
                    if cursor.rowcount == 1:
                        answer = decided.held_token, request.ttl
                elif write is Write.REFRESH_WAITER:
                    assert decided.mine is not None
                    cursor.execute(sql["refresh_waiter"], {"seq": decided.mine.seq, **waiter})
                elif write in (Write.GRANT_WAITER, Write.ADD_GRANT):
                    cursor.execute(sql["new_token"])
                    token = int(cursor.lastrowid)
                    cursor.execute(sql["drop_token"])
                    if write is Write.GRANT_WAITER:
                        assert decided.mine is not None
                        cursor.execute(
                            sql["grant_waiter"],
                            {"seq": decided.mine.seq, "ttl": request.ttl, "token": token},
                        )
                    else:
                        cursor.execute(
                            sql["add"],
                            {
                                **_entry_of(request, owner),
                                "token": token,
                                "ttl": request.ttl,
                                "client": None,
                                "lease": None,
                                "stamp": None,
                            },
                        )
                    answer = token, request.ttl
                elif write is Write.ADD_WAITER:
                    cursor.execute(sql["waiting"], (request.name, self.config.max_waiters))
                    counted = cursor.fetchone()
                    full = counted is not None and counted[0] >= self.config.max_waiters
                    if not full:
                        cursor.execute(
                            sql["add"], {**_entry_of(request, owner), "token": None, **waiter}
                        )
                cursor.execute(sql["commit"])
            except BaseException:
                with contextlib.suppress(pymysql.Error):
                    connection.rollback()
                raise
        if full:
            raise line_full(self.config.max_waiters, request.name, self.url)
        return answer

    # -- leases ----------------------------------------------------------------------------

    def renew(self, name: str, owner: str, ttl: float) -> float | None:
        def renew(connection: Any) -> bool:
            changed = _execute(connection, self.sql["renew"], (ttl, name, owner_hash(owner)))
            return changed == 1

        with translate_errors(self.url, name):
            renewed = self.pool.run(renew, idempotent=True)
        return ttl if renewed else None

    def renew_all(self, renewals: Sequence[Renewal], timeout: float) -> list[float | None]:
        """Every renewal on one connection, up to ``RENEW_ROWS`` leases of one ttl in each
        statement, all within ``timeout``: each reply is waited for only the time left."""
        if not renewals:
            return []
        deadline = time.monotonic() + timeout
        # names go as text, as everywhere (aiomysql cannot pass bytes with PyMySQL 1.2)
        keys = [(r.name, owner_hash(r.owner)) for r in renewals]
        by_ttl: dict[float, list[int]] = {}
        for index, renewal in enumerate(renewals):
            by_ttl.setdefault(renewal.ttl, []).append(index)

        def renew(connection: Any) -> set[int]:
            renewed: set[int] = set()
            for ttl, indexes in by_ttl.items():
                for start in range(0, len(indexes), RENEW_ROWS):
                    batch = indexes[start : start + RENEW_ROWS]
                    renewed |= self._renew_batch(connection, deadline, ttl, batch, keys)
            return renewed

        with translate_errors(self.url):
            renewed = bounded(self.pool.run(renew, idempotent=True, deadline=deadline), timeout)
        return [r.ttl if index in renewed else None for index, r in enumerate(renewals)]

    def _renew_batch(
        self,
        connection: Any,
        deadline: float,
        ttl: float,
        batch: list[int],
        keys: list[tuple[str, str]],
    ) -> set[int]:
        """Renew the leases ``batch`` (indexes into ``keys``) for ``ttl``; the indexes of those
        renewed. One statement, and a read of which were renewed only when not all were."""
        pairs = [value for index in batch for value in keys[index]]
        marks = ", ".join(["(%s, %s)"] * len(batch))
        with connection.cursor() as cursor:
            Replies.limit(connection, _left(deadline))
            _transaction(
                lambda: cursor.execute(self.sql["renew_many"].format(pairs=marks), (ttl, *pairs))
            )
            if cursor.rowcount == len(batch):
                return set(batch)
            Replies.limit(connection, _left(deadline))
            cursor.execute(self.sql["renewed"].format(pairs=marks), pairs)
            live = {(bytes(name).decode(), owner) for name, owner in cursor.fetchall()}
        return {index for index in batch if keys[index] in live}

    # -- release ---------------------------------------------------------------------------

    def release(self, name: str, owner: str) -> bool:
        # a grant handed over that its waiter gives back without taking it
        self.wakeups.handoffs.forget(name, owner)

        def remove(connection: Any) -> bool:
            removed, others_wait = _transaction(
                lambda: _one_row(connection, self.sql["release"], (name, owner_hash(owner)))
            )
            if others_wait and self.config.ring:
                self._wake(connection, name)
            return bool(removed)

        with translate_errors(self.url, name):
            return self.pool.run(remove)

    def _wake(self, connection: Any, name: str) -> None:
        """Wake the waiters of ``name`` that the grant rule lets through now (after a
        release that handed nothing over), reading the name's grants and the head of its
        line, and more of the line only while every waiter read goes through. A wake-up is a
        hint: one lost here costs the waiter a re-check."""
        with connection.cursor() as cursor:
            rows: list[Any] = []
            after, count = -1, WAKE_HEAD
            while True:
                arguments = {"name": name, "grants": after < 0, "after": after, "count": count}
                cursor.execute(self.sql["wake_line"], arguments)
                read = [
                    (owner, seq, bool(shared), lim, bool(fair), token, client)
                    for owner, seq, shared, lim, fair, token, client in cursor.fetchall()
                ]
                rows = sorted([*rows, *read], key=lambda row: row[1])
                woken, complete = to_wake(rows)
                waiters = [row for row in read if row[5] is None]
                if complete or len(waiters) < count:
                    break
                after, count = waiters[-1][1], count * 2
            for client, tag in woken:
                cursor.execute(self.sql["wake"], (client, f"{tag} {name}", client))
                if cursor.rowcount != 1:
                    continue  # its client no longer listens
                cursor.execute(self.sql["ring"], (client,))
                while cursor.nextset():
                    pass

    def watch(self, name: str, owner: str) -> MySQLWatch:
        return MySQLWatch(self, name, owner)

    # -- inspection and operators ----------------------------------------------------------

    def inspect(self, name: str) -> LockState:
        states = self._states(name)
        return states[0] if states else LockState(name=name, holders=(), waiters=0)

    def inspect_all(self) -> list[LockState]:
        return sorted(self._states(None), key=lambda state: state.name)

    def _states(self, name: str | None) -> list[LockState]:
        key = name

        def read(connection: Any) -> list[Any]:
            with connection.cursor() as cursor:
                cursor.execute(self.sql["states"], (key,))
                rows = list(cursor.fetchall())
                while cursor.nextset():
                    pass
            return rows

        with translate_errors(self.url, name):
            rows = self.pool.run(read, idempotent=True)
        builders: dict[str, LockStateBuilder] = {}
        for entry_name, shared, lim, token, expires_in, holder in rows:
            text = entry_name.decode() if isinstance(entry_name, bytes) else entry_name
            if text not in builders:
                builders[text] = LockStateBuilder(text)
            if expires_in is None:  # not written by tumbler (statements._UNUSABLE, _FAR)
                builders[text].malformed += 1
                continue
            builders[text].add(
                token=token,
                shared=bool(shared),
                limit=lim,
                expires_in=float(expires_in),
                holder=holder,
            )
        return [builder.build() for builder in builders.values()]

    def force_release(self, name: str, note: str) -> int:
        def force(connection: Any) -> int:
            evicted, others_wait = _transaction(
                lambda: _one_row(connection, self.sql["force_release"], (name, note, NOTE_GRACE))
            )
            if others_wait and self.config.ring:
                self._wake(connection, name)
            return int(evicted)

        with translate_errors(self.url, name):
            return self.pool.run(force)

    def evicted(self, name: str, owner: str) -> str | None:
        def read(connection: Any) -> Any:
            with connection.cursor() as cursor:
                cursor.execute(self.sql["evicted"], (name, owner_hash(owner)))
                return cursor.fetchone()

        with translate_errors(self.url, name):
            row = self.pool.run(read, idempotent=True)
        return None if row is None else str(row[0])

    def close(self) -> None:
        self.wakeups.close()
        self.pool.close()
