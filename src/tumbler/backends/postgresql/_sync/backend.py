# Generated from src/tumbler/backends/postgresql/_async/backend.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""The PostgreSQL backend (asyncio flavour, the source of the generated blocking twin).

See ``tumbler.backends.postgresql.common`` for the URL grammar and the guarantees, and
``tumbler.backends.postgresql.statements`` for the tables and statements.
"""

from __future__ import annotations

import contextlib
import secrets
import select
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import Connection, Cursor, sql
from psycopg.pq import TransactionStatus

from ...._acompat import sleep_real
from ...._logs import logger
from ....errors import BackendUnavailable, TumblerError
from ...contract import GrantRequest, Renewal, SessionEvents
from ...kit._sync.sql import SQLBackend, SQLListener, SQLPool, Try, decide
from ...kit.options import line_full
from ...kit.owners import owner_hash
from .. import CAPABILITIES
from ..common import (
    Bound,
    Deadline,
    NoReply,
    PostgreSQLConfig,
    translate_errors,
    tumbler_error,
)
from ..statements import (
    NOTE_GRACE,
    SEARCH_PATH,
    SWEEP_EVERY,
    SWEEP_ROWS,
    Statements,
    name_key,
    schema_key,
)

_log = logger("tumbler.postgresql")

T = TypeVar("T")


def _closed_by_server(connection: Connection[Any]) -> bool:
    """Whether an idle connection's socket has something to read: the server's goodbye."""
    if connection.closed:
        return True
    try:
        readable, _, _ = select.select([connection.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _transient(error: psycopg.OperationalError) -> bool:
    """Whether a failed connect says the server is not there for the moment (restarting),
    rather than that this client may not connect (credentials, database)."""
    if error.sqlstate is not None:
        return error.sqlstate == "57P03"  # cannot_connect_now: starting up, shutting down
    text = str(error)
    return any(
        reason in text
        for reason in (
            "the database system is",  # starting up, shutting down, in recovery mode
            "Connection refused",
            "server closed the connection unexpectedly",
        )
    )


def _pooler_waits_for_server(error: psycopg.OperationalError) -> bool:
    """Whether PgBouncer refused a transaction because it cannot log in to the server now
    (``server_login_retry``): it then forwarded nothing, and the call may be tried again."""
    return "server login has been failing" in str(error)


#: what making a schema's tables meets when another client made them first: unique_violation
#: (on a catalog), duplicate_schema, duplicate_table, duplicate_object
_MADE_MEANWHILE = ("23505", "42P06", "42P07", "42710")


def _connection_lost(error: psycopg.OperationalError) -> bool:
    """Whether the connection failed under the call (closed, reset, the server shutting
    down): what the call did is unknown, though nothing else went wrong with it. (A pooler
    that refuses a transaction closes the connection too, and in pipeline mode its reason
    may be lost with it.)"""
    state = error.sqlstate
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


class Pool(SQLPool[Connection[Any], Deadline]):
    """The client's connections for calls (see ``AsyncSQLPool``), at most
    ``max_connections`` in use at once, a call waiting up to ``statement_timeout`` for one.
    Every call on a connection waits for the server's replies for at most ``socket_timeout``
    (or the call's own limit): then its connection is shut down and the call raises
    ``NoReply``. A connection a transaction was left open on is closed rather than reused."""

    def __init__(self, config: PostgreSQLConfig) -> None:
        wait = (config.statement_timeout, "statement_timeout")
        super().__init__(config.url, "PostgreSQL", config.max_connections, wait)
        self._config = config
        self.bound = Bound()
        milliseconds = str(round(config.statement_timeout * 1000))
        #: the bounds every transaction runs with: statement_timeout, lock_timeout,
        #: idle_in_transaction_session_timeout (in milliseconds)
        self.settings = (milliseconds, str(round(config.lock_timeout * 1000)), milliseconds)
        #: what behind a pooler every transaction sets first (see ``.statements``)
        self.transaction_settings = (SEARCH_PATH, *self.settings)
        self._options: dict[str, Any] = {}
        if config.pooled:
            # A pooler refuses startup options or forgets them at the next transaction, and a
            # statement prepared in one server session is unknown to the next: the bounds are
            # set in each transaction instead (AsyncPostgreSQLBackend.transaction)
            self._options["prepare_threshold"] = None
        else:
            names = ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")
            self._options["options"] = " ".join(
                [f"-c search_path={SEARCH_PATH.replace(' ', '')}"]
                + [f"-c {name}={value}" for name, value in zip(names, self.settings, strict=True)]
            )

    def connect(self, patience: float | None = None) -> Connection[Any]:
        """A new connection (autocommit: each call says where its transaction begins), tried
        again for up to ``patience`` seconds (default ``connect_timeout``) while the server
        refuses connections for a moment (see ``AsyncSQLPool._connect``)."""
        patience = self._config.connect_timeout if patience is None else patience
        return self._connect(time.monotonic() + patience)

    @contextlib.contextmanager
    def connection(
        self, patience: float | None = None, limit: float | None = None
    ) -> Iterator[Connection[Any]]:
        """A connection for one call; ``patience``: see :meth:`connect`; ``limit``: how long
        the call may wait for replies (default ``socket_timeout``)."""
        bound = self._config.socket_timeout if limit is None else limit
        with self._using(
            lambda: self.connect(patience), lambda connection: self.bound.arm(connection, bound)
        ) as connection:
            yield connection

    def run(
        self,
        call: Callable[[Connection[Any]], T],
        patience: float | None = None,
        *,
        idempotent: bool = False,
        limit: float | None = None,
    ) -> T:
        """``call`` on a connection of :meth:`connection`, tried again on a fresh connection
        for up to ``patience`` seconds (default ``connect_timeout``) when it surely ran
        nothing, or when it is ``idempotent`` (a second try gives the answer the first would
        have: a grant asked again by its owner, a renewal, a read) and its connection failed
        under it. That is what makes a server restart cost callers a wait rather than an
        error, also behind a pooler, which refuses every transaction for a moment after it
        failed to log in to the restarting server (PgBouncer's ``server_login_retry``) and
        then closes the connection, the reason often lost in pipeline mode. A release is not
        idempotent in this sense (a second try of one that went through answers "nothing to
        release"): it raises ``BackendUnavailable`` then, as every backend's does when the
        store cannot be reached. A call that ran out of its ``limit`` (see :meth:`connection`)
        is not tried again: its time is spent."""
        patience = self._config.connect_timeout if patience is None else patience
        deadline = time.monotonic() + patience
        pause = 0.02
        while True:
            called = False  # a failed connect was tried again already, if it could be
            try:
                with self.connection(patience, limit) as connection:
                    called = True
                    return call(connection)
            except psycopg.OperationalError as error:
                left = deadline - time.monotonic()
                lost = idempotent and _connection_lost(error)
                retry = (
                    called
                    and not isinstance(error, NoReply)
                    and (_pooler_waits_for_server(error) or lost)
                )
                if self._closed or left <= 0 or not retry:
                    raise
                sleep_real(min(pause, left))
                pause = min(pause * 2, 0.5)

    def _open(self, deadline: float | None) -> Connection[Any]:
        return Connection.connect(autocommit=True, **self._options, **self._config.connect_options)

    def _close(self, connection: Connection[Any]) -> None:
        connection.close()

    def _closed_by_server(self, connection: Connection[Any]) -> bool:
        # An idle connection has nothing to read unless the server closed it: its last words
        # are waiting in the socket.
        return _closed_by_server(connection)

    def _refused_now(self, error: Exception) -> bool:
        return isinstance(error, psycopg.OperationalError) and _transient(error)

    def _lost(self, error: BaseException) -> bool:
        return isinstance(error, psycopg.OperationalError)

    def _closed_error(self) -> Exception:
        return psycopg.OperationalError("the client is closed")

    def _failed(
        self, connection: Connection[Any], bound: Deadline, error: BaseException
    ) -> BaseException | None:
        # disarmed before the connection is closed: a deadline never touches a closed socket
        return bound.no_reply() if bound.disarm() else None

    def _reusable(self, connection: Connection[Any], bound: Deadline) -> bool:
        return (
            not bound.disarm()
            and not connection.closed
            and connection.info.transaction_status == TransactionStatus.IDLE
        )

    def close(self) -> None:
        super().close()
        self.bound.close()


class Wakeups(SQLListener):
    """The client's one listening connection: ``LISTEN`` on the client's own channel, the
    client's listener key held (``hold_listener``).

    A release sends ``NOTIFY`` to the channel of each client whose waiter it lets through,
    with ``<owner hash> <name>``; the reader turns that into ``hub.notify(name, [owner
    hash])``, which wakes just that waiter. A change of the entries of a name this client
    watches the state of sends ``* <name>`` to the same channel (see ``statements``, "State
    watchers"), which wakes the name's state watchers. A client that watched deletes its rows
    of watched names as its listener stops.
    """

    _backend: PostgreSQLBackend

    def _listen(self) -> None:
        backend = self._backend
        connection: Connection[Any] | None = None
        try:
            connection = backend.pool.connect()
            self._bounded(
                connection,
                (sql.SQL("LISTEN {}").format(sql.Identifier(backend.channel)), None),
                (backend.sql["hold_listener"], {"key": self.key}),
            )
            self._now_listening()
            ping_due = time.monotonic() + backend.config.socket_timeout
            while not self._closed:
                if time.monotonic() >= ping_due:
                    # A connection whose peer went silent (a network that drops its packets,
                    # a server paused) gets no notification and no error: a statement that
                    # gets no reply in time tells, and the reader then listens on a new
                    # connection.
                    self._bounded(connection, (backend.sql["ping"], None))
                    ping_due = time.monotonic() + backend.config.socket_timeout
                for notification in connection.notifies(timeout=1.0):
                    self.deliver(notification.payload)
                    if self._closed:
                        break
            if backend.watching:
                # nobody will read what the changes of the names it watched send it
                with contextlib.suppress(psycopg.Error, BackendUnavailable):
                    self._bounded(connection, (backend.sql["unwatch"], (backend.channel,)))
        finally:
            if connection is not None:
                connection.close()

    def _bounded(self, connection: Connection[Any], *statements: Any) -> None:
        """Run ``statements`` (each ``(query, params)``) on the listening connection, within
        ``socket_timeout``: past it, the connection is shut down and ``NoReply`` raised."""
        bound = self._backend.pool.bound
        deadline = bound.arm(connection, self._backend.config.socket_timeout)
        try:
            for query, params in statements:
                connection.execute(query, params)
        finally:
            # before the connection is closed: a deadline never touches a closed socket
            fired = deadline.disarm()
        if fired:
            raise deadline.no_reply()

    def _interrupt(self) -> None:
        # end the reader's wait for notifications now rather than at its next timeout
        with contextlib.suppress(psycopg.Error, BackendUnavailable):
            with self._backend.pool.connection() as connection:
                connection.execute("SELECT pg_notify(%s, '')", (self._backend.channel,))


class PostgreSQLBackend(SQLBackend[Connection[Any]]):
    """The PostgreSQL backend contract over psycopg 3: a small pool of connections for calls,
    and one listening connection for wake-ups."""

    session_events: SessionEvents | None = None
    sweep_every = SWEEP_EVERY

    def __init__(self, config: PostgreSQLConfig) -> None:
        self.config = config
        super().__init__(config.url, CAPABILITIES, listens=config.listen)
        #: this client's NOTIFY channel; stored with each of its waiters
        self.channel = f"tumbler_{secrets.token_hex(8)}"
        self.sql = Statements.of(config.schema)
        self.pool: Pool = Pool(config)
        self.wakeups: Wakeups = Wakeups(
            self,
            label="PostgreSQL",
            log=_log,
            patience=config.connect_timeout + config.statement_timeout,
        )

    def _translated(self, name: str | None = None) -> contextlib.AbstractContextManager[None]:
        return translate_errors(self.url, name)

    def _tumbler_error(self, error: Exception, name: str) -> TumblerError | None:
        return tumbler_error(error, self.url, name) if isinstance(error, psycopg.Error) else None

    # -- transactions ----------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, connection: Connection[Any]) -> Iterator[None]:
        """A transaction with this client's bounds. Behind a pooler they are set in it first
        (``SET LOCAL``): a session's settings would not follow the client to the next server
        connection, and would stay behind with whichever client gets this one next."""
        with connection.transaction():
            if self.config.pooled:
                connection.execute(self.sql["settings"], self.pool.transaction_settings)
            yield

    @contextlib.contextmanager
    def batch(self, connection: Connection[Any]) -> Iterator[None]:
        """A transaction with this client's bounds whose statements are sent together, in
        one round trip (psycopg's pipeline mode), unless the block reads a result before its
        end (one more round trip each time). Read the other results after the block.

        ``BEGIN`` and ``COMMIT`` go as statements of the pipeline: psycopg's
        ``transaction()`` costs round trips of its own there. A block that raises leaves the
        transaction unfinished, and the pool closes its connection.

        Behind a pooler the ``COMMIT`` goes after the pipeline, on a round trip of its own.
        psycopg ends a pipeline with a Sync, then a Flush to fetch the replies; PgBouncer
        (transaction pooling) takes a Flush that reaches it after the ReadyForQuery that
        ended the transaction for the start of another one, and keeps a server connection
        for this client, which no reply releases, while the client is idle: the Flush must
        reach it inside the transaction.
        """
        with connection.pipeline():
            connection.execute(self.sql["begin"])
            if self.config.pooled:
                connection.execute(self.sql["settings"], self.pool.transaction_settings)
            yield
            if not self.config.pooled:
                connection.execute(self.sql["commit"])
        if self.config.pooled:
            connection.execute(self.sql["commit"])

    @contextlib.contextmanager
    def alone(self, connection: Connection[Any]) -> Iterator[None]:
        """Where a call of one statement runs: on its own (autocommit, bounded by the
        session's settings) on a connection of its own; behind a pooler, in a pipelined
        transaction that sets the bounds first (one round trip, and the commit's: see
        :meth:`batch`). Read its results after the block."""
        if not self.config.pooled:
            yield
            return
        with self.batch(connection):
            yield

    # -- set-up ----------------------------------------------------------------------------

    def is_set_up(self, connection: Connection[Any]) -> bool:
        """Whether the schema's tables and functions are there, as this version makes them."""
        return self._tables_exist(connection)

    def set_up(self, connection: Connection[Any]) -> bool | None:
        """Make the schema's tables, sequence and functions; whether it did, or None while
        another client holds the transaction-scoped advisory lock that makers take turns
        on."""
        try:
            with self.transaction(connection):
                cursor = connection.execute(
                    self.sql["try_lock_schema"], (schema_key(self.sql.schema),)
                )
                row = cursor.fetchone()
                if not (row and row[0]):
                    return None
                for statement in self.sql.create:
                    connection.execute(statement)
        except psycopg.Error as error:
            # Another client made them in the moment between this one's look and its lock:
            # the statement's catalog snapshot (which "IF NOT EXISTS" consults) can predate
            # the other's commit, and the CREATE then collides with the rows it committed.
            if error.sqlstate not in _MADE_MEANWHILE or not self._tables_exist(connection):
                raise
            return False
        return True

    def _tables_exist(self, connection: Connection[Any]) -> bool:
        with self.alone(connection):
            cursor = connection.execute(
                self.sql["exists"],
                {"schema": self.sql.schema_identifier, "version": self.sql.version},
            )
        row = cursor.fetchone()
        return bool(row and row[0])

    # -- grants ----------------------------------------------------------------------------

    def _grant(
        self, connection: Connection[Any], request: GrantRequest, owner: str, stamp: int
    ) -> tuple[int, float] | None:
        claimed = self._claims(request)
        attempt = Try(request, owner, self._waiter_terms(request, stamp, claimed))
        with self.alone(connection), self._sent_together(connection, claimed):
            if claimed:
                connection.execute(self.sql["hold_listener"], {"key": self.wakeups.key})
            cursor = connection.execute(
                self.sql["grant"],
                {
                    "key": name_key(self.sql.schema, request.name),
                    "queue": request.queue,
                    "max_waiters": self.config.max_waiters,
                    **attempt.entry(),
                    **attempt.waiter,
                },
            )
        row = cursor.fetchone()
        assert row is not None
        token, left, undecided, full = row
        if full:
            raise line_full(self.config.max_waiters, request.name, self.url)
        if undecided:
            # Two round trips: the line, then the write and the commit (three for a new
            # waiter, counted first)
            line = _Line(self, connection, attempt)
            return decide(line, attempt, self.config.max_waiters, self.url)
        return None if token is None else (int(token), float(left))

    def _sweep(self, connection: Connection[Any]) -> None:
        with self.alone(connection):
            connection.execute(self.sql["sweep_entries"], (SWEEP_ROWS,))
        with self.alone(connection):
            connection.execute(self.sql["sweep_evictions"], {"rows": SWEEP_ROWS})
        with self.alone(connection):
            connection.execute(self.sql["sweep_names"], (SWEEP_ROWS,))

    @contextlib.contextmanager
    def _sent_together(self, connection: Connection[Any], claimed: bool) -> Iterator[None]:
        """Where a grant's statement goes with the one before it that holds the client's
        listener key (shared, for the session) for the entry to name though the client does
        not listen yet (``claimed``: see ``AsyncSQLBackend._claims``, and
        ``tumbler_hand_off``): in one round trip, a pipeline (behind a pooler ``alone``
        makes one already)."""
        if not claimed or self.config.pooled:
            yield
            return
        with connection.pipeline():
            yield

    def _waiter_terms(
        self, request: GrantRequest, stamp: int, claimed: bool = False
    ) -> dict[str, Any]:
        """What a waiter's entry stores besides the request: its own short lease, refreshed
        by each try, and what a release needs to hand it the lock (``tumbler_hand_off``)."""
        listen = self._names_listener(claimed)
        return {
            "ttl": self.capabilities.waiter_ttl,
            "client": self.channel if listen else None,
            "listener": self.wakeups.key if listen else None,
            "lease": request.ttl,
            "stamp": stamp,
        }

    def _take_up(
        self,
        connection: Connection[Any],
        name: str,
        owner: str,
        token: int,
        ttl: float,
        lock_delay: float,
    ) -> bool:
        with self.alone(connection):
            cursor = connection.execute(
                self.sql["take_up"],
                {
                    "ttl": ttl,
                    "lock_delay": lock_delay,
                    "name": name,
                    "owner": owner,
                    "token": token,
                },
            )
        return cursor.rowcount == 1

    # -- leases ----------------------------------------------------------------------------

    def _renew(self, connection: Connection[Any], name: str, owner: str, ttl: float) -> bool:
        with self.alone(connection):
            cursor = connection.execute(self.sql["renew"], (ttl, name, owner))
        return cursor.rowcount == 1

    def renew_all(self, renewals: Sequence[Renewal], timeout: float) -> list[float | None]:
        """Every renewal in one statement, the server cancelling it past ``timeout`` and the
        client giving up on its reply then."""
        if not renewals:
            return []
        with translate_errors(self.url):
            renewed = self._renew_all(renewals, timeout)
        return [r.ttl if (r.name, owner_hash(r.owner)) in renewed else None for r in renewals]

    def _renew_all(self, renewals: Sequence[Renewal], timeout: float) -> set[tuple[str, str]]:
        def renew(connection: Connection[Any]) -> set[tuple[str, str]]:
            with self.batch(connection):
                connection.execute(self.sql["bound"], (str(max(1, round(timeout * 1000))),))
                cursor = connection.execute(
                    self.sql["renew_all"],
                    (
                        [r.name for r in renewals],
                        [owner_hash(r.owner) for r in renewals],
                        [r.ttl for r in renewals],
                    ),
                )
            return {(name, owner) for name, owner in cursor.fetchall()}

        return self.pool.run(renew, patience=timeout, idempotent=True, limit=timeout)

    # -- release ---------------------------------------------------------------------------

    def _release(self, connection: Connection[Any], name: str, owner: str) -> bool:
        with self.alone(connection):
            cursor = connection.execute(
                self.sql["release"], (name_key(self.sql.schema, name), name, owner)
            )
        row = cursor.fetchone()
        assert row is not None
        removed, others_wait = row
        if others_wait and self.config.listen:  # not handed over: the rule says whom to wake
            self._wake(connection, name)
        return bool(removed)

    def _wake_line(
        self, connection: Connection[Any], name: str, after: int, count: int
    ) -> list[Any]:
        with self.alone(connection):
            cursor = connection.execute(
                self.sql["wake_line"],
                {"name": name, "grants": after < 0, "after": after, "count": count},
            )
        return cursor.fetchall()

    def _tell(self, connection: Connection[Any], name: str, woken: list[tuple[Any, str]]) -> None:
        if woken:
            connection.execute(
                self.sql["notify"],
                ([channel for channel, _ in woken], [f"{tag} {name}" for _, tag in woken]),
            )

    # -- inspection and operators ----------------------------------------------------------

    def _read_states(self, connection: Connection[Any], name: str | None) -> list[Any]:
        with self.alone(connection):
            cursor = connection.execute(self.sql["states"], {"name": name})
        return cursor.fetchall()

    def _force_release(self, connection: Connection[Any], name: str, note: str) -> int:
        with self.batch(connection):
            connection.execute(self.sql["lock_name"], (name_key(self.sql.schema, name), name))
            connection.execute(self.sql["drop_expired"], (name,))
            counted = connection.execute(
                self.sql["force_release"], {"name": name, "note": note, "grace": NOTE_GRACE}
            )
            connection.execute(self.sql["hand_off"], (name,))
            connection.execute(self.sql["tell_watchers"], {"name": name})
        row = counted.fetchone()
        if self.config.listen:
            self._wake(connection, name)
        return int(row[0]) if row else 0

    def _read_evicted(self, connection: Connection[Any], name: str, owner: str) -> Any:
        with self.alone(connection):
            cursor = connection.execute(self.sql["evicted"], (name, owner))
        return cursor.fetchone()

    def _mark_watched(self, connection: Connection[Any], name: str, ttl: float) -> None:
        # one round trip: the name's turn, then the row
        with self.batch(connection):
            connection.execute(self.sql["lock_name"], (name_key(self.sql.schema, name), name))
            connection.execute(self.sql["watch"], (name, self.channel, ttl))


class _Line:
    """A name's line as PostgreSQL's decision reads and writes it (``kit decide``): in one
    pipelined transaction (``batch``); a write's token is read after the commit, from the
    cursor the write left."""

    def __init__(
        self, backend: PostgreSQLBackend, connection: Connection[Any], attempt: Try
    ) -> None:
        self._backend = backend
        self._connection = connection
        self.attempt = attempt

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self._backend.batch(self._connection):
            yield

    def _run(self, statement: str, arguments: Any = None) -> Cursor[Any]:
        return self._connection.execute(self._backend.sql[statement], arguments)

    def _tell_watchers(self) -> None:
        """Tell the name's state watchers of the write just made (with the commit; in the
        same round trip)."""
        self._run("tell_watchers", {"name": self.attempt.request.name})

    def read(self) -> list[Any]:
        name = self.attempt.request.name
        self._run("lock_name", (name_key(self._backend.sql.schema, name), name))
        # The owner's own entry may have run out since tumbler_grant deleted the expired
        # ones: missing from the live line read below yet still in the table, where
        # writing it anew would break the (name, owner) key. Deleted first, as there.
        self._run("drop_expired", (name,))
        cursor = self._run("line", self.attempt.line_terms())
        return cursor.fetchall()

    def take_up(self, token: int) -> Cursor[Any]:
        entry = self.attempt.entry()
        return self._run("take_up", {**entry, "ttl": self.attempt.request.ttl, "token": token})

    def refresh_waiter(self, seq: int) -> None:
        # a waiter's entry: one that a crash of the server forgets costs its waiter a
        # re-check, so the commit need not wait for the disk
        self._run("no_wait")
        self._run("refresh_waiter", {"seq": seq, **self.attempt.waiter})

    def grant_waiter(self, seq: int) -> Cursor[Any]:
        written = self._run(
            "grant_waiter",
            {
                "seq": seq,
                "ttl": self.attempt.request.ttl,
                "lock_delay": self.attempt.entry()["lock_delay"],
            },
        )
        self._tell_watchers()
        return written

    def add_grant(self) -> Cursor[Any]:
        entry = self.attempt.entry()
        entry.update(
            grant=True,
            ttl=self.attempt.request.ttl,
            client=None,
            listener=None,
            lease=None,
            stamp=None,
        )
        written = self._run("add", entry)
        self._tell_watchers()
        return written

    def waiting(self) -> int:
        limit = self._backend.config.max_waiters
        cursor = self._run("waiting", (self.attempt.request.name, limit))
        counted = cursor.fetchone()
        return 0 if counted is None else int(counted[0])

    def add_waiter(self) -> None:
        # as refresh_waiter's
        self._run("no_wait")
        entry = self.attempt.entry()
        # a waiter has no grant to lose: it keeps no lock-delay
        self._run("add", {**entry, "grant": False, **self.attempt.waiter, "lock_delay": 0.0})
        self._tell_watchers()

    def token(self, written: Cursor[Any]) -> int | None:
        row = written.fetchone()
        # no row: a grant taken up that ran out this very moment (the owner's next try asks)
        return None if row is None or row[0] is None else int(row[0])
