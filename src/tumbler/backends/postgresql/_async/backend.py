"""The PostgreSQL backend (asyncio flavour, the source of the generated blocking twin).

See ``tumbler.backends.postgresql.common`` for the URL grammar and the guarantees, and
``tumbler.backends.postgresql.statements`` for the tables and statements.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import select
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection, AsyncCursor, sql
from psycopg.pq import TransactionStatus

from ...._acompat import asleep_real
from ...._clock import SYSTEM_CLOCK, Clock
from ....errors import (
    BackendUnavailable,
    ConfigurationError,
    OutOfConnections,
    PermissionDenied,
    TumblerError,
)
from ...contract import Grant, GrantRequest, LockState, Renewal, SessionEvents, WakeHub
from ...kit import (
    AsyncBaseWatch,
    Decision,
    Entry,
    LockStateBuilder,
    Write,
    WritePlan,
    plan,
    to_wake,
)
from ...kit._async.listener import AsyncListener
from ...kit.options import line_full
from ...kit.owners import owner_hash
from ...kit.slots import AsyncSlots
from .. import CAPABILITIES
from ..common import (
    AsyncBound,
    NoConnection,
    NoReply,
    PostgreSQLConfig,
    capabilities_for,
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

_log = logging.getLogger("tumbler.postgresql")


class _Full:
    """A decision that refused a new waiter: the line has ``max_waiters`` already."""


FULL = _Full()

#: waiters a release reads at the head of a line to find whom it lets through; more (twice as
#: many each time) only while every one read goes through (a run of readers)
WAKE_HEAD = 16

T = TypeVar("T")


def _entry_of(request: GrantRequest, owner: str) -> dict[str, Any]:
    """What an entry of ``request`` stores of it (``owner``: the owner's hash)."""
    return {
        "name": request.name,
        "owner": owner,
        "shared": request.shared,
        "lim": request.limit,
        "fair": request.fair,
        "holder": request.holder,
    }


def _closed_by_server(connection: AsyncConnection[Any]) -> bool:
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


class AsyncPool:
    """The client's connections for calls: at most ``max_connections`` in use at once, idle
    ones kept for the next call. Every call on a connection waits for the server's replies
    for at most ``socket_timeout`` (or the call's own limit): then its connection is shut
    down and the call raises ``NoReply``. A connection a call left in doubt (an error, a
    cancellation, a limit run out, a transaction still open) is closed rather than reused;
    after a connection failed, the idle ones are dropped too (a restarted server has closed
    them all, and a network that dropped one's replies may have dropped theirs)."""

    def __init__(self, config: PostgreSQLConfig) -> None:
        self._config = config
        self._idle: list[AsyncConnection[Any]] = []
        self._lock = threading.Lock()
        self._slots = AsyncSlots(config.max_connections, config.statement_timeout, NoConnection)
        self._closed = False
        self.bound = AsyncBound()
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

    async def connect(self, patience: float | None = None) -> AsyncConnection[Any]:
        """A new connection (autocommit: each call says where its transaction begins).

        A server that refuses connections for a moment (restarting: shutting down, starting
        up, not listening yet) is tried again for up to ``patience`` seconds (default
        ``connect_timeout``): a connection that failed ran nothing, so trying again is safe,
        and a restart then costs callers a wait rather than an error.
        """
        patience = self._config.connect_timeout if patience is None else patience
        deadline = time.monotonic() + patience
        pause = 0.02
        while True:
            try:
                return await AsyncConnection.connect(
                    autocommit=True, **self._options, **self._config.connect_options
                )
            except psycopg.OperationalError as error:
                left = deadline - time.monotonic()
                if self._closed or left <= 0 or not _transient(error):
                    raise
                await asleep_real(min(pause, left))
                pause = min(pause * 2, 0.5)

    @contextlib.asynccontextmanager
    async def connection(
        self, patience: float | None = None, limit: float | None = None
    ) -> AsyncIterator[AsyncConnection[Any]]:
        """A connection for one call; ``patience``: see :meth:`connect`; ``limit``: how long
        the call may wait for replies (default ``socket_timeout``)."""
        if self._closed:
            raise psycopg.OperationalError("the client is closed")
        try:
            async with self._slots:
                connection = await self._idle_connection()
                if connection is None:
                    connection = await self.connect(patience)
                deadline = self.bound.arm(
                    connection, self._config.socket_timeout if limit is None else limit
                )
                try:
                    yield connection
                except BaseException as error:
                    # disarmed first: the deadline never touches a closed (reusable) socket
                    fired = deadline.disarm()
                    await connection.close()
                    if isinstance(error, psycopg.OperationalError):
                        await self._drop_idle()
                    if fired:
                        raise deadline.no_reply() from error
                    raise
                if (
                    deadline.disarm()
                    or self._closed
                    or connection.closed
                    or connection.info.transaction_status != TransactionStatus.IDLE
                ):
                    await connection.close()
                    return
                with self._lock:
                    self._idle.append(connection)
        except NoConnection:
            raise BackendUnavailable(
                "every connection of this client to PostgreSQL stayed busy for "
                "statement_timeout; the client makes more calls at once than max_connections "
                "(in the URL) allows",
                backend=self._config.url,
            ) from None

    async def run(
        self,
        call: Callable[[AsyncConnection[Any]], Awaitable[T]],
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
                async with self.connection(patience, limit) as connection:
                    called = True
                    return await call(connection)
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
                await asleep_real(min(pause, left))
                pause = min(pause * 2, 0.5)

    async def _idle_connection(self) -> AsyncConnection[Any] | None:
        """An idle connection the server has not closed, if there is one.

        An idle connection has nothing to read unless the server closed it (a restart, an
        administrator's ``pg_terminate_backend``, ``idle_session_timeout``): its last words
        are waiting in the socket. Such a connection would fail the call that used it, so it
        is dropped here, and so are the other idle ones (a restart closed them all).
        """
        while True:
            with self._lock:
                if not self._idle:
                    return None
                connection = self._idle.pop()
            if not _closed_by_server(connection):
                return connection
            await connection.close()
            await self._drop_idle()

    async def _drop_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            await connection.close()

    async def close(self) -> None:
        self._closed = True
        await self._drop_idle()
        self.bound.close()


class AsyncWakeups(AsyncListener):
    """The client's one listening connection: ``LISTEN`` on the client's own channel.

    A release sends ``NOTIFY`` to the channel of each client whose waiter it lets through,
    with ``<owner hash> <name>``; the reader turns that into ``hub.notify(name, [owner
    hash])``, which wakes just that waiter.
    """

    def __init__(self, backend: AsyncPostgreSQLBackend) -> None:
        config = backend.config
        super().__init__(
            backend.clock,
            backend.hub,
            backend.url,
            label="PostgreSQL",
            log=_log,
            patience=config.connect_timeout + config.statement_timeout,
        )
        self._backend = backend
        #: the key the listening connection holds while it listens (``hold_listener``): a
        #: release hands the lock only to a waiter whose client's key is held
        self.listener_key = secrets.randbits(62)

    async def _listen(self) -> None:
        backend = self._backend
        connection: AsyncConnection[Any] | None = None
        try:
            connection = await backend.pool.connect()
            await self._bounded(
                connection,
                (sql.SQL("LISTEN {}").format(sql.Identifier(backend.channel)), None),
                (backend.sql["hold_listener"], {"key": self.listener_key}),
            )
            self._now_listening()
            ping_due = time.monotonic() + backend.config.socket_timeout
            while not self._closed:
                if time.monotonic() >= ping_due:
                    # A connection whose peer went silent (a network that drops its packets,
                    # a server paused) gets no notification and no error: a statement that
                    # gets no reply in time tells, and the reader then listens on a new
                    # connection.
                    await self._bounded(connection, (backend.sql["ping"], None))
                    ping_due = time.monotonic() + backend.config.socket_timeout
                async for notification in connection.notifies(timeout=1.0):
                    self.handoffs.deliver(notification.payload, backend.hub)
                    if self._closed:
                        break
        finally:
            if connection is not None:
                await connection.close()

    async def _bounded(self, connection: AsyncConnection[Any], *statements: Any) -> None:
        """Run ``statements`` (each ``(query, params)``) on the listening connection, within
        ``socket_timeout``: past it, the connection is shut down and ``NoReply`` raised."""
        bound = self._backend.pool.bound
        deadline = bound.arm(connection, self._backend.config.socket_timeout)
        try:
            for query, params in statements:
                await connection.execute(query, params)
        finally:
            # before the connection is closed: a deadline never touches a closed socket
            fired = deadline.disarm()
        if fired:
            raise deadline.no_reply()

    def _refused(self, failure: Exception, name: str) -> TumblerError | None:
        # what waiting for the next attempt will not mend soon: a server out of connections,
        # refused credentials, a database or schema that is not there
        if isinstance(failure, psycopg.Error):
            error = tumbler_error(failure, self._backend.url, name)
            if isinstance(error, (OutOfConnections, PermissionDenied, ConfigurationError)):
                return error
        return None

    async def _interrupt(self) -> None:
        # end the reader's wait for notifications now rather than at its next timeout
        with contextlib.suppress(psycopg.Error, BackendUnavailable):
            async with self._backend.pool.connection() as connection:
                await connection.execute("SELECT pg_notify(%s, '')", (self._backend.channel,))


class AsyncPostgreSQLWatch(AsyncBaseWatch):
    """A waiter's view of its client's wake-up channel.

    Made before the first try, it registers for local wake-ups at once; if the client listens
    already, nothing after that try can be missed and entering costs nothing. Otherwise
    entering starts listening and asks for a retry.
    """

    def __init__(self, backend: AsyncPostgreSQLBackend, name: str, owner: str) -> None:
        super().__init__(backend.clock, name, backend.hub, owner_hash(owner))
        self._backend = backend
        self._listening = not backend.config.listen or backend.wakeups.subscribed()

    async def _subscribe(self) -> bool:
        if self._listening:
            return False
        await self._backend.wakeups.subscribe(self.name)
        return True


class AsyncPostgreSQLBackend:
    """The PostgreSQL backend contract over psycopg 3: a small pool of connections for calls,
    and one listening connection for wake-ups."""

    session_events: SessionEvents | None = None

    def __init__(self, config: PostgreSQLConfig) -> None:
        self.config = config
        self.url = config.url
        self.capabilities = capabilities_for(CAPABILITIES, config)
        self.clock: Clock = SYSTEM_CLOCK
        self.hub = WakeHub()
        #: this client's NOTIFY channel; stored with each of its waiters
        self.channel = f"tumbler_{secrets.token_hex(8)}"
        self.sql = Statements.of(config.schema)
        self.pool = AsyncPool(config)
        self.wakeups = AsyncWakeups(self)
        self._grants = 0

    # -- transactions ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def transaction(self, connection: AsyncConnection[Any]) -> AsyncIterator[None]:
        """A transaction with this client's bounds. Behind a pooler they are set in it first
        (``SET LOCAL``): a session's settings would not follow the client to the next server
        connection, and would stay behind with whichever client gets this one next."""
        async with connection.transaction():
            if self.config.pooled:
                await connection.execute(self.sql["settings"], self.pool.transaction_settings)
            yield

    @contextlib.asynccontextmanager
    async def batch(self, connection: AsyncConnection[Any]) -> AsyncIterator[None]:
        """A transaction with this client's bounds whose statements are sent together, in
        one round trip (psycopg's pipeline mode), unless the block reads a result before its
        end (one more round trip each time). Read the other results after the block.

        ``BEGIN`` and ``COMMIT`` go as statements of the pipeline: psycopg's
        ``transaction()`` costs round trips of its own there. A block that raises leaves the
        transaction unfinished, and the pool closes its connection.
        """
        async with connection.pipeline():
            await connection.execute(self.sql["begin"])
            if self.config.pooled:
                await connection.execute(self.sql["settings"], self.pool.transaction_settings)
            yield
            await connection.execute(self.sql["commit"])

    @contextlib.asynccontextmanager
    async def alone(self, connection: AsyncConnection[Any]) -> AsyncIterator[None]:
        """Where a call of one statement runs: on its own (autocommit, bounded by the
        session's settings) on a connection of its own; behind a pooler, in a pipelined
        transaction that sets the bounds first (the same one round trip). Read its results
        after the block."""
        if not self.config.pooled:
            yield
            return
        async with self.batch(connection):
            yield

    # -- set-up ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, and make the schema's tables if they are missing (idempotent; clients
        racing to make them take turns on a transaction-scoped advisory lock)."""
        with translate_errors(self.url):
            await self.pool.run(self.make_tables, idempotent=True)

    async def make_tables(self, connection: AsyncConnection[Any]) -> bool:
        """Make the schema's tables and sequence if one is missing; whether it did."""
        if await self._tables_exist(connection):
            return False
        try:
            async with self.transaction(connection):
                await connection.execute(self.sql["lock_schema"], (schema_key(self.sql.schema),))
                for statement in self.sql.create:
                    await connection.execute(statement)
        except psycopg.Error as error:
            # Another client made them while this one waited for the advisory lock: the
            # waiting statement's catalog snapshot (which "IF NOT EXISTS" consults) can
            # predate the other's commit, as the wait for an advisory lock does not refresh
            # it, and the CREATE then collides with the rows the other committed.
            if error.sqlstate not in _MADE_MEANWHILE or not await self._tables_exist(connection):
                raise
            return False
        return True

    async def _tables_exist(self, connection: AsyncConnection[Any]) -> bool:
        async with self.alone(connection):
            cursor = await connection.execute(
                self.sql["exists"],
                {"schema": self.sql.schema_identifier, "version": self.sql.version},
            )
        row = await cursor.fetchone()
        return bool(row and row[0])

    # -- grants ----------------------------------------------------------------------------

    async def try_grant(self, request: GrantRequest) -> Grant | None:
        owner = owner_hash(request.owner)
        taken = await self.wakeups.take_handed(
            request, lambda token: self._take_up(request.name, owner, token, request.ttl)
        )
        if taken is not None:
            return taken
        # when this try was sent, on this client's clock: a release that hands the lock to
        # this waiter says when its lease began in those terms (kit.handoffs)
        stamp = round(self.clock.now() * 1e6)

        # tried again whole if a pooler refused it: a retry by the same owner is idempotent
        async def grant(connection: AsyncConnection[Any]) -> tuple[int, float] | None:
            claimed = await self._claim_listener(connection, request)
            waiter = self._waiter_terms(request, stamp, claimed)
            async with self.alone(connection):
                cursor = await connection.execute(
                    self.sql["grant"],
                    {
                        "key": name_key(self.sql.schema, request.name),
                        "queue": request.queue,
                        "max_waiters": self.config.max_waiters,
                        **_entry_of(request, owner),
                        **waiter,
                    },
                )
            row = await cursor.fetchone()
            assert row is not None
            token, left, undecided, full = row
            if full:
                raise line_full(self.config.max_waiters, request.name, self.url)
            if undecided:
                return await self._decide(connection, request, owner, waiter)
            return None if token is None else (int(token), float(left))

        with translate_errors(self.url, request.name):
            granted = await self.pool.run(grant, idempotent=True)
            self._grants += 1
            if self._grants % SWEEP_EVERY == 0:
                await self.pool.run(self._sweep, idempotent=True)
        if granted is None:
            return None
        token, left = granted
        return Grant(request.name, request.owner, token, left)

    async def _sweep(self, connection: AsyncConnection[Any]) -> None:
        async with self.alone(connection):
            await connection.execute(self.sql["sweep_entries"], (SWEEP_ROWS,))
        async with self.alone(connection):
            await connection.execute(self.sql["sweep_evictions"], (SWEEP_ROWS,))
        async with self.alone(connection):
            await connection.execute(self.sql["sweep_names"], (SWEEP_ROWS,))

    async def _claim_listener(
        self, connection: AsyncConnection[Any], request: GrantRequest
    ) -> bool:
        """Whether ``connection`` holds the client's listener key for ``request``'s entry
        to name, though the client does not listen yet: taken (shared, for the session) when
        the request would queue and its waiter means to wait (its watch is made: the locks
        make it before the first try, and enter it, which starts listening, only once that
        try failed). Until the listener holds the key too, this connection's hold says the
        client lives: a release takes a waiter whose key nobody holds for one whose client
        is gone (``tumbler_hand_off``), and without a key at all its entry held a fair line up
        for its whole lease when the waiter died in that moment."""
        if not (
            request.queue
            and self.config.listen
            and not self.wakeups.subscribed()
            and not self.wakeups.failing()  # a client that cannot listen is not told
            and self.hub.subscribers(request.name)
        ):
            return False
        async with self.alone(connection):
            await connection.execute(self.sql["hold_listener"], {"key": self.wakeups.listener_key})
        return True

    def _waiter_terms(
        self, request: GrantRequest, stamp: int, claimed: bool = False
    ) -> dict[str, Any]:
        """What a waiter's entry stores besides the request: its own short lease, refreshed
        by each try, and what a release needs to hand it the lock (``tumbler_hand_off``)."""
        # Only once the client listens, or the connection that writes the entry holds the
        # key (``claimed``): a release takes a waiter whose listener key nobody holds for one
        # whose client is gone, and deletes its entry (tumbler_hand_off).
        listen = self.config.listen and (claimed or self.wakeups.subscribed())
        return {
            "ttl": self.capabilities.waiter_ttl,
            "client": self.channel if listen else None,
            "listener": self.wakeups.listener_key if listen else None,
            "lease": request.ttl,
            "stamp": stamp,
        }

    async def _decide(
        self,
        connection: AsyncConnection[Any],
        request: GrantRequest,
        owner: str,
        waiter: dict[str, Any],
    ) -> tuple[int, float] | None:
        """Decide by the grant rule on the name's live line, and write what it says: the
        token and the lease left of a grant; None if none; ``TooManyWaiters`` for a new
        waiter behind ``max_waiters`` (nothing written). Two round trips: the line, then the
        write and the commit (three for a new waiter, counted first)."""
        decided = await self._decided(connection, request, owner, waiter)
        if decided is FULL:
            raise line_full(self.config.max_waiters, request.name, self.url)
        assert not isinstance(decided, _Full)
        return decided

    async def _decided(
        self,
        connection: AsyncConnection[Any],
        request: GrantRequest,
        owner: str,
        waiter: dict[str, Any],
    ) -> tuple[int, float] | _Full | None:
        async with self.batch(connection):
            await connection.execute(
                self.sql["lock_name"], (name_key(self.sql.schema, request.name), request.name)
            )
            # The owner's own entry may have run out since tumbler_grant deleted the expired
            # ones: missing from the live line read below yet still in the table, where
            # writing it anew would break the (name, owner) key. Deleted first, as there.
            await connection.execute(self.sql["drop_expired"], (request.name,))
            cursor = await connection.execute(
                self.sql["line"],
                {
                    "name": request.name,
                    "owner": owner,
                    "fair": request.fair,
                    "shared": request.shared,
                    "lim": request.limit,
                },
            )
            rows = await cursor.fetchall()
            line = [
                Entry(entry_owner, seq, shared, lim, fair, token)
                for entry_owner, seq, shared, lim, fair, token, _ in rows
            ]
            decided = plan(line, owner, request.shared, request.limit, request.fair, request.queue)
            if decided.decision is Decision.HELD:
                # granted already, by a release that handed it over or by a try whose reply
                # was lost: taken up, with the lease asked for from now
                cursor = await connection.execute(
                    self.sql["take_up"], (request.ttl, request.name, owner, decided.held_token)
                )
            else:
                written = await self._write(connection, request, owner, waiter, decided)
                if written is None or isinstance(written, _Full):
                    return written
                cursor = written
        row = await cursor.fetchone()
        # no row: a grant taken up that ran out this very moment (the owner's next try asks)
        return None if row is None or row[0] is None else (int(row[0]), request.ttl)

    async def _write(
        self,
        connection: AsyncConnection[Any],
        request: GrantRequest,
        owner: str,
        waiter: dict[str, Any],
        decided: WritePlan,
    ) -> AsyncCursor[Any] | _Full | None:
        """Write what the grant rule ``decided`` for ``request`` (not held already), in the
        caller's transaction: the cursor whose row has the token (None for a waiter); None
        for nothing to read; ``FULL`` for a new waiter behind ``max_waiters``."""
        write = decided.write
        if write is Write.ADD_WAITER:
            cursor = await connection.execute(
                self.sql["waiting"], (request.name, self.config.max_waiters)
            )
            counted = await cursor.fetchone()
            if counted is not None and counted[0] >= self.config.max_waiters:
                return FULL  # nothing written: the transaction commits empty
        if write is Write.NOTHING:
            return None
        if write in (Write.ADD_WAITER, Write.REFRESH_WAITER):
            # a waiter's entry: one that a crash of the server forgets costs its waiter a
            # re-check, so the commit need not wait for the disk
            await connection.execute(self.sql["no_wait"])
        if write is Write.REFRESH_WAITER:
            assert decided.mine is not None
            await connection.execute(
                self.sql["refresh_waiter"], {"seq": decided.mine.seq, **waiter}
            )
            return None
        if write is Write.GRANT_WAITER:
            assert decided.mine is not None
            return await connection.execute(
                self.sql["grant_waiter"],
                {"seq": decided.mine.seq, "ttl": request.ttl},
            )
        # ADD_GRANT or ADD_WAITER
        entry = _entry_of(request, owner)
        if write is Write.ADD_GRANT:
            entry.update(
                grant=True,
                ttl=request.ttl,
                client=None,
                listener=None,
                lease=None,
                stamp=None,
            )
        else:
            entry.update(grant=False, **waiter)
        return await connection.execute(self.sql["add"], entry)

    # -- leases ----------------------------------------------------------------------------

    async def renew(self, name: str, owner: str, ttl: float) -> float | None:
        async def renew(connection: AsyncConnection[Any]) -> bool:
            async with self.alone(connection):
                cursor = await connection.execute(self.sql["renew"], (ttl, name, owner_hash(owner)))
            return cursor.rowcount == 1

        with translate_errors(self.url, name):
            renewed = await self.pool.run(renew, idempotent=True)
        return ttl if renewed else None

    async def renew_all(self, renewals: Sequence[Renewal], timeout: float) -> list[float | None]:
        """Every renewal in one statement, the server cancelling it past ``timeout`` and the
        client giving up on its reply then."""
        if not renewals:
            return []
        with translate_errors(self.url):
            renewed = await self._renew_all(renewals, timeout)
        return [r.ttl if (r.name, owner_hash(r.owner)) in renewed else None for r in renewals]

    async def _renew_all(self, renewals: Sequence[Renewal], timeout: float) -> set[tuple[str, str]]:
        async def renew(connection: AsyncConnection[Any]) -> set[tuple[str, str]]:
            async with self.batch(connection):
                await connection.execute(self.sql["bound"], (str(max(1, round(timeout * 1000))),))
                cursor = await connection.execute(
                    self.sql["renew_all"],
                    (
                        [r.name for r in renewals],
                        [owner_hash(r.owner) for r in renewals],
                        [r.ttl for r in renewals],
                    ),
                )
            return {(name, owner) for name, owner in await cursor.fetchall()}

        return await self.pool.run(renew, patience=timeout, idempotent=True, limit=timeout)

    # -- release ---------------------------------------------------------------------------

    async def release(self, name: str, owner: str) -> bool:
        # a grant handed over that its waiter gives back without taking it
        self.wakeups.handoffs.forget(name, owner)

        async def remove(connection: AsyncConnection[Any]) -> bool:
            async with self.alone(connection):
                cursor = await connection.execute(
                    self.sql["release"],
                    (name_key(self.sql.schema, name), name, owner_hash(owner)),
                )
            row = await cursor.fetchone()
            assert row is not None
            removed, others_wait = row
            if others_wait and self.config.listen:  # not handed over: the rule says whom to wake
                await self._wake(connection, name)
            return bool(removed)

        with translate_errors(self.url, name):
            return await self.pool.run(remove)

    async def _wake(self, connection: AsyncConnection[Any], name: str) -> None:
        """Notify the waiters of ``name`` that the grant rule lets through now (after the
        commit that let them: a woken waiter tries at once), reading the name's grants and
        the head of its line, and more of the line only while every waiter read goes
        through. A wake-up is a hint: one lost here costs the waiter a re-check."""
        rows: list[Any] = []
        after, count = -1, WAKE_HEAD
        while True:
            async with self.alone(connection):
                cursor = await connection.execute(
                    self.sql["wake_line"],
                    {"name": name, "grants": after < 0, "after": after, "count": count},
                )
            read = await cursor.fetchall()
            rows = sorted([*rows, *read], key=lambda row: row[1])
            woken, complete = to_wake(rows)
            waiters = [row for row in read if row[5] is None]
            if complete or len(waiters) < count:
                break
            after, count = waiters[-1][1], count * 2
        await self._notify(connection, name, woken)

    async def _notify(
        self, connection: AsyncConnection[Any], name: str, woken: list[tuple[str, str]]
    ) -> None:
        """Send each of ``woken`` (``(channel, owner)``) its wake-up."""
        if woken:
            await connection.execute(
                self.sql["notify"],
                ([channel for channel, _ in woken], [f"{tag} {name}" for _, tag in woken]),
            )

    def watch(self, name: str, owner: str) -> AsyncPostgreSQLWatch:
        return AsyncPostgreSQLWatch(self, name, owner)

    # -- inspection and operators ----------------------------------------------------------

    async def inspect(self, name: str) -> LockState:
        states = await self._states(name)
        return states[0] if states else LockState(name=name, holders=(), waiters=0)

    async def inspect_all(self) -> list[LockState]:
        return sorted(await self._states(None), key=lambda state: state.name)

    async def _states(self, name: str | None) -> list[LockState]:
        async def read(connection: AsyncConnection[Any]) -> list[Any]:
            async with self.alone(connection):
                cursor = await connection.execute(self.sql["states"], {"name": name})
            return await cursor.fetchall()

        with translate_errors(self.url, name):
            rows = await self.pool.run(read, idempotent=True)
        builders: dict[str, LockStateBuilder] = {}
        for entry_name, shared, lim, token, expires_in, holder in rows:
            if entry_name not in builders:
                builders[entry_name] = LockStateBuilder(entry_name)
            if expires_in is None:  # not written by tumbler (statements._UNREADABLE)
                builders[entry_name].malformed += 1
                continue
            builders[entry_name].add(
                token=token, shared=shared, limit=lim, expires_in=expires_in, holder=holder
            )
        return [builder.build() for builder in builders.values()]

    async def force_release(self, name: str, note: str) -> int:
        async def force(connection: AsyncConnection[Any]) -> int:
            async with self.batch(connection):
                await connection.execute(
                    self.sql["lock_name"], (name_key(self.sql.schema, name), name)
                )
                await connection.execute(self.sql["drop_expired"], (name,))
                counted = await connection.execute(
                    self.sql["force_release"],
                    {"name": name, "note": note, "grace": NOTE_GRACE},
                )
                await connection.execute(self.sql["hand_off"], (name,))
            row = await counted.fetchone()
            if self.config.listen:
                await self._wake(connection, name)
            return int(row[0]) if row else 0

        with translate_errors(self.url, name):
            return await self.pool.run(force)

    async def _take_up(self, name: str, owner: str, token: int, ttl: float) -> bool:
        """Take up the grant with ``token`` a release handed to ``owner`` (its hash): its
        lease set to ``ttl`` from now, if the owner's entry is a live grant with that token
        (see ``AsyncListener.take_handed``, and ``tumbler_hand_off``)."""

        async def write(connection: AsyncConnection[Any]) -> bool:
            async with self.alone(connection):
                cursor = await connection.execute(self.sql["take_up"], (ttl, name, owner, token))
            return cursor.rowcount == 1

        with translate_errors(self.url, name):
            return await self.pool.run(write, idempotent=True)

    async def evicted(self, name: str, owner: str) -> str | None:
        async def read(connection: AsyncConnection[Any]) -> Any:
            async with self.alone(connection):
                cursor = await connection.execute(self.sql["evicted"], (name, owner_hash(owner)))
            return await cursor.fetchone()

        with translate_errors(self.url, name):
            row = await self.pool.run(read, idempotent=True)
        return None if row is None else str(row[0])

    async def close(self) -> None:
        await self.wakeups.close()
        await self.pool.close()
