# Generated from src/tumbler/backends/mysql/_async/backend.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""The MySQL / MariaDB backend (asyncio flavour on aiomysql, the source of the generated
blocking twin on PyMySQL).

See ``tumbler.backends.mysql.common`` for the URL grammar and the guarantees, and
``tumbler.backends.mysql.statements`` for the tables and stored procedures.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pymysql

from ...._logs import logger
from ....errors import BackendUnavailable, ConfigurationError, TumblerError
from ...contract import GrantRequest, Renewal, SessionEvents
from ...kit._sync.sql import SQLBackend, SQLListener, SQLPool, Try, decide
from ...kit.options import line_full
from ...kit.owners import owner_hash
from .. import CAPABILITIES
from ..common import (
    MySQLConfig,
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

_log = logger("tumbler.mysql")

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


class Pool(SQLPool[Any, "float | None"]):
    """The client's connections for calls (see ``AsyncSQLPool``), at most
    ``max_connections`` in use at once, a call waiting up to ``socket_timeout`` for one (or
    its own deadline's time). A call given up on while its statement may still run on the
    server has its connection ended before the next call (``_kill_abandoned``)."""

    def __init__(self, config: MySQLConfig) -> None:
        wait = (config.socket_timeout, "socket_timeout")
        super().__init__(config.url, "MySQL", config.max_connections, wait)
        self._config = config
        #: server thread ids of connections given up while a statement may still run there
        self._abandoned: list[int] = []

    def connect(self, deadline: float | None = None) -> Any:
        """A new connection, tried again for up to ``connect_timeout`` while the server
        refuses connections for a moment (see ``AsyncSQLPool._connect``). ``deadline``
        (``time.monotonic()``): a call's own, which bounds each try too."""
        until = time.monotonic() + self._config.connect_timeout
        if deadline is not None:
            until = min(until, deadline)
        return self._connect(until, deadline)

    @contextlib.contextmanager
    def connection(self, deadline: float | None = None) -> Iterator[Any]:
        """A connection for one call; ``deadline`` (``time.monotonic()``): the call's own,
        which bounds its wait for a place and a connection, and for each reply."""
        socket_timeout = self._config.socket_timeout
        with self._using(
            lambda: self.connect(deadline),
            lambda connection: deadline,
            None if deadline is None else lambda: min(_left(deadline), socket_timeout),
        ) as connection:
            yield connection

    def run(
        self,
        call: Callable[[Any], T],
        *,
        idempotent: bool = False,
        deadline: float | None = None,
        limit: float | None = None,
    ) -> T:
        """``call`` on a connection of :meth:`connection`, bounded by ``socket_timeout``;
        tried again on a fresh connection for up to ``connect_timeout`` when it is
        ``idempotent`` and its connection was found gone (an idle one the server closed).
        ``deadline`` (``time.monotonic()``): the call's own, which bounds all of it;
        ``limit``: the seconds it may take instead of ``socket_timeout`` (set-up's DDL)."""
        until = time.monotonic() + self._config.connect_timeout
        if deadline is not None:
            until = min(until, deadline)
        while True:
            ends = (deadline, None if limit is None else time.monotonic() + limit)
            within = min((end for end in ends if end is not None), default=None)
            try:
                with self.connection(within) as connection:
                    bound = self._config.socket_timeout if limit is None else limit
                    if deadline is not None:
                        bound = min(bound, _left(deadline))
                    return bounded(call(connection), bound)
            except pymysql.err.OperationalError as error:
                retry = idempotent and _code(error) in _LOST and not isinstance(error, NoReply)
                if self._closed or time.monotonic() >= until or not retry:
                    raise

    def _open(self, deadline: float | None) -> Any:
        return open_connection(self._config, None if deadline is None else _left(deadline))

    def _close(self, connection: Any) -> None:
        close_connection(connection)

    def _closed_by_server(self, connection: Any) -> bool:
        return closed_by_server(connection)

    def _refused_now(self, error: Exception) -> bool:
        return isinstance(error, pymysql.err.OperationalError) and _code(error) in _REFUSED_NOW

    def _lost(self, error: BaseException) -> bool:
        return isinstance(error, pymysql.err.OperationalError)

    def _closed_error(self) -> Exception:
        return pymysql.err.OperationalError(2006, "the client is closed")

    def _ready(self, connection: Any, deadline: float | None) -> None:
        if deadline is not None:
            Replies.limit(connection, _left(deadline))
        if self._abandoned:
            until = time.monotonic() + self._config.socket_timeout
            if deadline is not None:
                until = min(until, deadline)
            self._kill_abandoned(connection, until)

    def _failed(
        self, connection: Any, deadline: float | None, error: BaseException
    ) -> BaseException | None:
        if not _answered(error):
            with contextlib.suppress(Exception), self._lock:
                self._abandoned.append(int(connection.thread_id()))
        return None

    def _reusable(self, connection: Any, deadline: float | None) -> bool:
        if deadline is not None:
            Replies.limit(connection, self._config.socket_timeout)
        return True

    def _kill_abandoned(self, connection: Any, deadline: float) -> None:
        """End the connections calls gave up on (a cancellation, no reply in time, a lost
        connection), before this call runs. The server runs a statement to its end also when
        its client has hung up: a grant a caller gave up on, then withdrew, could otherwise
        land after the withdrawal and hold the lock for a whole lease. Once killed, such a
        statement has either taken the name's row (and whatever runs next on the name waits
        for it) or never will. Given up at ``deadline`` (``time.monotonic()``), as the call
        would be; those not ended by then stay listed for the next call."""
        with self._lock:
            abandoned, self._abandoned = self._abandoned, []
        try:
            with connection.cursor() as cursor:
                while abandoned:
                    try:
                        # bounded as the call is (the asyncio driver has no timeout of its
                        # own): a reply lost on the network must not hold the call up
                        left = _left(deadline)
                        bounded(cursor.execute("KILL CONNECTION %s", (abandoned[0],)), left)
                    except pymysql.Error as error:
                        if _code(error) in _LOST:
                            raise
                        # gone already (1094), or not ours to end
                        _log.debug("could not end connection %s: %s", abandoned[0], error)
                    abandoned.pop(0)
        finally:
            if abandoned:  # the next call ends them (this one's connection failed)
                with self._lock:
                    self._abandoned[:0] = abandoned


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


def _execute(connection: Any, statement: str, args: Sequence[Any] | Mapping[str, Any]) -> int:
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


class Wakeups(SQLListener):
    """The client's one listening connection: it holds the client's listener lock and waits
    for the client's doorbell, which a second connection holds, and a release that wakes one
    of this client's waiters leaves a wake-up row and interrupts that wait (see
    ``statements``). The reader reads its wake-ups, keeps the grants handed over, and wakes
    just those waiters; a wake-up ``* <name>``, which a change of the entries of a name this
    client watches the state of leaves (``statements``, "State watchers"), wakes the name's
    state watchers."""

    _backend: MySQLBackend

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
            self.deliver(message.decode() if isinstance(message, bytes) else str(message))
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
        goes, the delete waits for); and the client's rows of watched names, if it watched."""
        sql = self._backend.sql
        _uninterrupted(connection, sql["unlisten"], (self.key,), limit)
        _uninterrupted(connection, sql["forget_wakeups"], (self.key,), limit)
        if self._backend.watching:
            _uninterrupted(connection, sql["unwatch"], (self.key,), limit)

    def _interrupt(self) -> None:
        # end the reader's wait now rather than at its end
        with contextlib.suppress(pymysql.Error, BackendUnavailable, OSError):
            sql = self._backend.sql

            def ring(connection: Any) -> None:
                _execute(connection, sql["ring"], (self.key,))

            self._backend.pool.run(ring)


class MySQLBackend(SQLBackend[Any]):
    """The MySQL / MariaDB backend contract: a small pool of connections for calls, and one
    listening connection for wake-ups."""

    session_events: SessionEvents | None = None
    sweep_every = SWEEP_EVERY

    def __init__(self, config: MySQLConfig) -> None:
        self.config = config
        super().__init__(config.url, CAPABILITIES, listens=config.ring)
        self.sql = Statements.of(config.prefix)
        self.pool: Pool = Pool(config)
        self.wakeups: Wakeups = Wakeups(
            self, label="MySQL", log=_log, patience=config.connect_timeout + config.socket_timeout
        )

    def _translated(self, name: str | None = None) -> contextlib.AbstractContextManager[None]:
        return translate_errors(self.url, name)

    def _tumbler_error(self, error: Exception, name: str) -> TumblerError | None:
        return tumbler_error(error, self.url, name) if isinstance(error, pymysql.Error) else None

    # -- set-up ----------------------------------------------------------------------------

    def is_set_up(self, connection: Any) -> bool:
        """Check that the server is one this backend's promises hold on; whether the tables
        and procedures are there, as this version makes them."""
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
        return self._tables_exist(connection)

    def set_up(self, connection: Any) -> bool | None:
        """Make the tables and procedures, or bring those an earlier version made up to this
        one's (its indexes added, its procedures made again); whether it did, or None while
        another client holds the named lock that makers take turns on."""
        lock = f"tumbler-schema-{self.config.prefix}"
        if _one_row(connection, self.sql["schema_lock"], (lock,)) != (1,):
            return None
        try:
            if self._tables_exist(connection):
                return False
            with connection.cursor() as cursor:
                made = self._indexes(cursor)
                if made is not None:
                    # tables of an earlier version: what this one reads by and keeps, and its
                    # procedures
                    present = self._columns(cursor)
                    if "unusable" not in made and "unusable" not in present:
                        cursor.execute(self.sql["add_unusable"])
                    if "lock_delay" not in present:
                        cursor.execute(self.sql["add_lock_delay"])
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

    def _columns(self, cursor: Any) -> set[str]:
        """The names of the entries table's columns (in lower case)."""
        cursor.execute(self.sql["columns"], (f"{self.config.prefix}entries",))
        return {str(name).lower() for (name,) in cursor.fetchall()}

    def _tables_exist(self, connection: Any) -> bool:
        """Whether the tables and procedures are there, as this version makes them: the
        procedure made last names this version. (A user that may only read sees that
        procedure, and nothing of the tables.)"""
        row = _one_row(connection, self.sql["made"], (f"{self.config.prefix}states",))
        return bool(row[0] == VERSION)

    # -- grants ----------------------------------------------------------------------------

    def _claim(self, connection: Any) -> None:
        """Take the client's waiter lock on ``connection``, for a waiter's entry that names
        the client's key though the client does not listen yet (see
        ``AsyncSQLBackend._claims``; ``{p}hand_off`` tells a waiter dead by its key's
        locks). ``{p}grant`` takes it itself where it writes such an entry."""
        _one_row(connection, self.sql["claim"], (self.wakeups.key,))

    def _waiter_terms(
        self, request: GrantRequest, stamp: int, claimed: bool = False
    ) -> dict[str, Any]:
        """What a waiter's entry stores besides the request: its own short lease, refreshed
        by each try, and what a release needs to hand it the lock and wake it (its client's
        key: see ``AsyncSQLBackend._names_listener``, and ``{p}hand_off``)."""
        listening = self._names_listener(claimed)
        return {
            "ttl": self.capabilities.waiter_ttl,
            "client": self.wakeups.key if listening else None,
            "lease": request.ttl,
            "stamp": stamp,
        }

    def _grant(
        self, connection: Any, request: GrantRequest, owner: str, stamp: int
    ) -> tuple[int, float] | None:
        claims = self._claims(request)
        waiter = self._waiter_terms(request, stamp, claims)
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
            float(request.lock_delay),
        )
        token, left, undecided, full = _transaction(
            lambda: _one_row(connection, self.sql["grant"], arguments)
        )
        if full:
            raise line_full(self.config.max_waiters, request.name, self.url)
        if undecided:
            if claims:  # the decision made here may write the waiter's entry
                self._claim(connection)
            attempt = Try(request, owner, waiter)
            line = _Line(self, connection, attempt)
            return _transaction(lambda: decide(line, attempt, self.config.max_waiters, self.url))
        return None if token is None else (int(token), float(left))

    def _take_up(
        self, connection: Any, name: str, owner: str, token: int, ttl: float, lock_delay: float
    ) -> bool:
        arguments = {
            "ttl": ttl,
            "lock_delay": lock_delay,
            "name": name,
            "owner": owner,
            "token": token,
        }
        changed = _transaction(lambda: _execute(connection, self.sql["take_up"], arguments))
        return changed == 1

    def _sweep(self, connection: Any) -> None:
        _transaction(lambda: _execute(connection, self.sql["sweep"], (SWEEP_ROWS,)))

    # -- leases ----------------------------------------------------------------------------

    def _renew(self, connection: Any, name: str, owner: str, ttl: float) -> bool:
        return _execute(connection, self.sql["renew"], (ttl, name, owner)) == 1

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

    def _release(self, connection: Any, name: str, owner: str) -> bool:
        removed, others_wait = _transaction(
            lambda: _one_row(connection, self.sql["release"], (name, owner))
        )
        if others_wait and self.config.ring:
            self._wake(connection, name)
        return bool(removed)

    def _wake_line(self, connection: Any, name: str, after: int, count: int) -> list[Any]:
        with connection.cursor() as cursor:
            arguments = {"name": name, "grants": after < 0, "after": after, "count": count}
            cursor.execute(self.sql["wake_line"], arguments)
            return list(cursor.fetchall())

    def _tell(self, connection: Any, name: str, woken: list[tuple[Any, str]]) -> None:
        with connection.cursor() as cursor:
            for client, tag in woken:
                cursor.execute(self.sql["wake"], (client, f"{tag} {name}", client))
                if cursor.rowcount != 1:
                    continue  # its client no longer listens
                cursor.execute(self.sql["ring"], (client,))
                while cursor.nextset():
                    pass

    # -- inspection and operators ----------------------------------------------------------

    def _read_states(self, connection: Any, name: str | None) -> list[Any]:
        with connection.cursor() as cursor:
            cursor.execute(self.sql["states"], (name,))
            rows = list(cursor.fetchall())
            while cursor.nextset():
                pass
        return rows

    def _force_release(self, connection: Any, name: str, note: str) -> int:
        evicted, others_wait = _transaction(
            lambda: _one_row(connection, self.sql["force_release"], (name, note, NOTE_GRACE))
        )
        if others_wait and self.config.ring:
            self._wake(connection, name)
        return int(evicted)

    def _read_evicted(self, connection: Any, name: str, owner: str) -> Any:
        with connection.cursor() as cursor:
            cursor.execute(self.sql["evicted"], (name, owner))
            return cursor.fetchone()

    def _mark_watched(self, connection: Any, name: str, ttl: float) -> None:
        arguments = (name, self.wakeups.key, ttl)
        _transaction(lambda: _execute(connection, self.sql["watch"], arguments))


class _Line:
    """A name's line as MySQL's decision reads and writes it (``kit decide``): in one
    transaction the client begins and ends on one cursor; a grant's token comes from the
    token counter as it is written."""

    def __init__(self, backend: MySQLBackend, connection: Any, attempt: Try) -> None:
        self._backend = backend
        self._connection = connection
        self.attempt = attempt
        self._cursor: Any = None
        #: whether the decision changed the name's entries: its commit then tells the
        #: name's state watchers (``{p}commit_change``, in the same round trip)
        self._changed = False

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self._connection.cursor() as cursor:
            self._cursor = cursor
            self._run("begin")
            try:
                yield
                if self._changed:
                    self._run("commit_change", (self.attempt.request.name,))
                    while cursor.nextset():
                        pass
                else:
                    self._run("commit")
            except BaseException:
                with contextlib.suppress(pymysql.Error):
                    self._connection.rollback()
                raise

    def _run(self, statement: str, arguments: Any = None) -> None:
        self._cursor.execute(self._backend.sql[statement], arguments)

    def read(self) -> list[Any]:
        request, owner = self.attempt.request, self.attempt.owner
        self._run("lock_name", (request.name,))
        # The owner's own entry may have run out since {p}grant deleted the expired
        # ones: missing from the live line read below yet still in the table, where
        # writing it anew would break the by_name key. Deleted first, as there.
        self._run("drop_expired", (request.name,))
        self._run("place", (request.name, owner))
        place = self._cursor.fetchone()
        before = _LAST_SEQ if place is None else place[0]
        terms = {**self.attempt.line_terms(), "count": max(1, request.limit), "before": before}
        self._run("line", terms)
        return list(self._cursor.fetchall())

    def take_up(self, token: int) -> int | None:
        # unless it ran out this very moment: the owner's next try asks anew
        entry = self.attempt.entry()
        self._run("take_up", {**entry, "ttl": self.attempt.request.ttl, "token": token})
        return token if self._cursor.rowcount == 1 else None

    def refresh_waiter(self, seq: int) -> None:
        self._run("refresh_waiter", {"seq": seq, **self.attempt.waiter})

    def _new_token(self) -> int:
        self._run("new_token")
        token = int(self._cursor.lastrowid)
        self._run("drop_token")
        return token

    def grant_waiter(self, seq: int) -> int:
        token = self._new_token()
        lock_delay = self.attempt.entry()["lock_delay"]
        terms = {"seq": seq, "ttl": self.attempt.request.ttl, "token": token}
        self._run("grant_waiter", {**terms, "lock_delay": lock_delay})
        self._changed = True
        return token

    def add_grant(self) -> int:
        token = self._new_token()
        entry = self.attempt.entry()
        terms = {"token": token, "ttl": self.attempt.request.ttl}
        self._run("add", {**entry, **terms, "client": None, "lease": None, "stamp": None})
        self._changed = True
        return token

    def waiting(self) -> int:
        self._run("waiting", (self.attempt.request.name, self._backend.config.max_waiters))
        counted = self._cursor.fetchone()
        return 0 if counted is None else int(counted[0])

    def add_waiter(self) -> None:
        entry = self.attempt.entry()
        # a waiter has no grant to lose: it keeps no lock-delay
        terms = {"token": None, **self.attempt.waiter, "lock_delay": 0.0}
        self._run("add", {**entry, **terms})
        self._changed = True

    def token(self, written: int) -> int | None:
        return written
