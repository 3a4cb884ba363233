"""``mysql://``, ``mariadb://``: locks in MySQL / MariaDB tables (extra ``tumbler-locks[mysql]``).

URL grammar::

    mysql://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE][?OPTIONS]
    mariadb://...                                        the same

Percent-encode ``@ : / ? #`` in a password. Options: ``table_prefix`` (the tables' and
procedures' names begin with it, default ``tumbler_``; made on first use), ``ssl_ca`` (a CA
file: the connection takes TLS and checks the server's certificate and name; a server that
does not offer TLS is refused, ``ConfigurationError``, before the client says anything),
``ssl_cert`` and ``ssl_key`` (a client certificate), ``connect_timeout`` (seconds, default 5),
``socket_timeout`` (seconds, default 5: the most a call waits for the server's replies; then
its connection is dropped and the call raises ``BackendUnavailable``), ``lock_timeout``
(seconds, default 2, rounded up to whole seconds, which is what the server takes: how long a
call waits for another client's transaction on the same name, then ``BackendUnavailable``),
``max_connections`` (default 10: the most calls one client has under way at once),
``max_waiters`` (default 10000: the most waiters one lock queues; one more acquire that would
wait gets ``TooManyWaiters``, and leaves nothing behind) and ``wakeups`` (``ring``, the
default: a release wakes the waiters it lets through, see below; ``poll``: waiters poll with
a short bounded backoff).

What it guarantees
    Every grant, release and forced release is one short InnoDB transaction that first locks
    the lock name's row (``statements``), decides by tumbler's grant rule, and commits.
    Leases are timed on the server's clock (``UTC_TIMESTAMP(6)``), never the client's.
    Fencing tokens come from one AUTO_INCREMENT counter, which never goes back (MariaDB 10.2.4+
    and MySQL 8.0+ keep it across restarts), so they strictly increase for every name, also
    once the name's rows are gone. A release that frees a lock whose first waiter is
    exclusive grants it to that waiter in the same transaction. Grants survive a crash of the
    server when it flushes its log at each commit (``innodb_flush_log_at_trx_commit=1``, the
    default). The client's renewals go in one ``UPDATE`` per 500 leases of one length, and
    wait for the server no longer than the renewal worker allows them (the least lease time
    left among them), however long ``socket_timeout`` is: a stalled server costs them that
    time, not ``socket_timeout``.

Waking waiters
    MySQL has no ``LISTEN``/``NOTIFY``. Each client keeps one listening connection, which
    holds the client's listener lock (``GET_LOCK``) and waits for the client's doorbell, a
    named lock that a second connection of the client holds, for at most the re-check
    interval. A release that hands the lock to a waiter, or lets one through, leaves
    a wake-up row for the waiter's client and interrupts that wait (``KILL QUERY`` of the
    connection that holds the listener lock); the listener reads its wake-ups and wakes just
    those waiters. Wake-ups go only to a client that listens; one that stops deletes what is
    left for it, and the sweep deletes the wake-ups of a client that died. ``KILL QUERY`` of
    another connection is allowed to its own database user (or to one with ``CONNECTION
    ADMIN``): clients of one deployment that log in as different users are not woken by each
    other's releases, and find a release at their next re-check.
    A release deletes the waiters at the head of the line whose client no longer listens
    (nobody holds its listener lock: its process died, its connection closed), so a waiter
    killed while it waits holds a fair line up for no longer than the server takes to see its
    connection close, not until its entry runs out (``waiter_ttl``, 3 s). A waiter names its
    client once the client listens, or means to (its watch is made: the connection that
    writes its entry then holds the client's waiter lock, till the listener holds its own);
    one whose client polls cannot be told dead.
    State watchers (``locks.watch``, ``election.observe``) are woken the same way: a client
    that watches a name keeps a row in ``{p}watched`` while it does (30 s unless set again;
    deleted as the client stops listening), and each grant, release, forced release and
    waiter arriving or leaving leaves a wake-up ``* <name>`` for the client of each live row
    of the name, in its own transaction, and rings its listener after the commit (see
    ``statements``, "State watchers"). Where nobody watches, that costs one lookup by the
    table's key inside a procedure the call runs anyway, and no round trip. A user that may
    only read cannot write that row: its watcher reads every quarter second, as on a backend
    that wakes no watcher; so does one whose client polls (``wakeups=poll``).
    A release reads the name's grants and the head of its line, each by an index, and a
    decision in the client the part of the line the rule looks at: neither costs more with
    a longer line.
    A wake-up carries no authority (any user who may write the tables may write one): a
    waiter that a wake-up says was handed the lock takes the grant only by one write to its
    own entry that finds it a live grant with that token, and sets the lease it asked for;
    otherwise it asks for the lock as any try does. Until that write the grant lives on the
    waiter's own short lease (its entry's): a waiter that dies in the moment after the
    release saw it listen never takes it up, and a request that finds its client gone
    revokes it (``{p}grant``).

A server out of connections
    A client uses up to ``max_connections`` connections for calls and, once one of its
    waiters waits, two more (the doorbell's and the listener's). A server that refuses a
    connection because it has every one it allows in use ("Too many connections") fails the
    call that needed it at once with ``OutOfConnections`` (a ``BackendUnavailable``), the
    server's refusal for its cause (it is not tried again as a restart is): a waiter whose
    client cannot listen is told so, not left to wait.

What it cannot promise
    Replication is asynchronous by default: a failover to a replica that had not received a
    grant forgets it. A Galera node (``wsrep_on``) is refused at connect: a node grants on
    what it has applied, so a grant another node certified but this one has not applied yet
    goes unseen, and ``GET_LOCK`` (the listener) is local to a node. Group Replication is not
    checked (no MySQL server is tested). Use one primary.

Transactions
    Every session runs at ``READ COMMITTED``; a transaction InnoDB rolls back to break a
    deadlock is run again. A call given up on (cancelled, no reply in time) may still run on
    the server: its connection is ended (``KILL CONNECTION``) before the client's next call.

Lock-delay
    A grant made with a ``lock_delay`` keeps it in its row (``lock_delay``, in seconds), whose
    ``expires_at`` is then the end of its lease plus the delay (see ``statements``): the
    row, and with it the name's closure, outlives the lease by the delay, on the server's
    clock like the lease, and whatever drops rows that ran out leaves it until then. A grant
    a release hands to a waiter takes its delay at the take-up, not before: a waiter that
    dies before it takes the grant up had no grant to lose. Nothing announces a delay's end:
    its waiters find it at their next re-check (``recheck_interval``). Tables made before
    the column existed gain it at the next client's start, their rows reading as no delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import select
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pymysql  # the driver (aiomysql is built on it): without it, MissingDependency
from pymysql.constants import CLIENT, CR

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

__all__ = [
    "DEFAULT_PORT",
    "AsyncReplies",
    "MySQLConfig",
    "NoReply",
    "Replies",
    "abounded",
    "aclose_connection",
    "aclosed_by_server",
    "aopen_connection",
    "bounded",
    "close_connection",
    "closed_by_server",
    "open_connection",
    "parse_config",
    "translate_errors",
    "tumbler_error",
]

T = TypeVar("T")

DEFAULT_PORT = 3306
DEFAULT_PREFIX = "tumbler_"
DEFAULT_MAX_CONNECTIONS = 10
MAX_CONNECTIONS = 1000
#: the longest prefix that leaves room for the longest name it prefixes (64 characters)
MAX_PREFIX = 40

_OPTIONS = frozenset(
    {
        "table_prefix",
        "ssl_ca",
        "ssl_cert",
        "ssl_key",
        "connect_timeout",
        "socket_timeout",
        "lock_timeout",
        "max_connections",
        "max_waiters",
        "wakeups",
    }
)

#: the server's errors that mean "this account may not": access denied, for a table or a
#: command, and a user who may not interrupt another's connection
_REFUSED = frozenset({1044, 1045, 1142, 1143, 1227, 1370, 1698})
#: the database or a table is missing, the server is not set up for us, or the user that
#: made the procedures (whose rights one of them runs with) is gone
_MISCONFIGURED = frozenset({1049, 1146, 1449, 3159})
#: the server has all the connections it allows: max_connections (1040), or the account's
#: max_user_connections (1203)
_NO_ROOM = frozenset({1040, 1203})
#: the drivers' code for a TLS connection that could not be made as asked
_NO_TLS = CR.CR_SSL_CONNECTION_ERROR


def _prefix(text: str) -> str:
    if not (1 <= len(text) <= MAX_PREFIX) or not all(c.isalnum() or c == "_" for c in text):
        raise ValueError(f"expected 1 to {MAX_PREFIX} letters, digits or underscores")
    if not text.isascii():
        raise ValueError("expected ASCII letters, digits or underscores")
    return text


def _connection_count(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_CONNECTIONS:
        raise ValueError(f"expected a whole number of connections from 1 to {MAX_CONNECTIONS}")
    return int(text)


def _wakeups(text: str) -> str:
    if text not in ("ring", "poll"):
        raise ValueError("expected ring or poll")
    return text


@dataclass(frozen=True)
class MySQLConfig:
    """A parsed ``mysql://`` URL: what both flavours need to connect."""

    url: str  # redacted
    prefix: str
    database: str
    ring: bool
    max_connections: int
    #: the most waiters one lock queues
    max_waiters: int
    connect_timeout: float
    socket_timeout: float
    lock_timeout: float
    #: keyword arguments both drivers take (the password among them: never log this); the
    #: database goes by the name each driver gives it (``aiomysql``: ``db``)
    connect_options: dict[str, Any] = field(repr=False)


def parse_config(url: BackendURL) -> MySQLConfig:
    """Read a ``mysql://`` URL; InvalidURL (without the password) for a bad one."""
    url.allow_options(_OPTIONS)
    if not url.hosts or "," in url.hosts:
        raise InvalidURL("give one host", backend=url.redacted)
    host, port = host_port(url.hosts, url, DEFAULT_PORT)
    database = url.path.strip("/")
    if not database or "/" in database:
        raise InvalidURL(
            "give the database the tables go in, as the URL's path (mysql://HOST/DATABASE)",
            backend=url.redacted,
        )
    options: dict[str, Any] = {"host": host, "port": port, "charset": "utf8mb4"}
    if url.username is not None:
        options["user"] = url.username
    if url.password is not None:
        options["password"] = url.password
    files = {}
    for name in ("ssl_ca", "ssl_cert", "ssl_key"):
        path = url.query.get(name)
        if path is None:
            continue
        if not Path(path).is_file():
            raise ConfigurationError(f"{name}: {path} is not a file", backend=url.redacted)
        files[name] = path
    if ("ssl_cert" in files) != ("ssl_key" in files):
        raise InvalidURL("give ssl_cert and ssl_key together", backend=url.redacted)
    if files and "ssl_ca" not in files:
        raise InvalidURL("TLS needs the server's CA: give ssl_ca=PATH", backend=url.redacted)
    if files:
        context = ssl.create_default_context(cafile=files["ssl_ca"])
        if "ssl_cert" in files:
            context.load_cert_chain(files["ssl_cert"], files["ssl_key"])
        options["ssl"] = context
    connect_timeout = url.option("connect_timeout", seconds, 5.0)
    socket_timeout = url.option("socket_timeout", seconds, 5.0)
    lock_timeout = url.option("lock_timeout", seconds, 2.0)
    if lock_timeout >= socket_timeout:
        raise InvalidURL(
            "lock_timeout must be shorter than socket_timeout (the client would give up on a "
            "reply before the server gives up waiting for the name)",
            backend=url.redacted,
        )
    options["connect_timeout"] = connect_timeout
    # how long a statement waits for another transaction's row lock (the lock name's row);
    # the server takes whole seconds
    options["init_command"] = (
        f"SET SESSION innodb_lock_wait_timeout = {max(1, math.ceil(lock_timeout))}"
    )
    return MySQLConfig(
        url=url.redacted,
        prefix=url.option("table_prefix", _prefix, DEFAULT_PREFIX),
        database=database,
        ring=url.option("wakeups", _wakeups, "ring") == "ring",
        max_connections=url.option("max_connections", _connection_count, DEFAULT_MAX_CONNECTIONS),
        max_waiters=url.option("max_waiters", waiter_count, DEFAULT_MAX_WAITERS),
        connect_timeout=connect_timeout,
        socket_timeout=socket_timeout,
        lock_timeout=lock_timeout,
        connect_options=options,
    )


def _code(error: pymysql.Error) -> int:
    return error.args[0] if error.args and isinstance(error.args[0], int) else 0


def _text(error: BaseException) -> str:
    return str(error.args[1]) if len(error.args) > 1 else str(error)


def _code_in(codes: frozenset[int]) -> Callable[[pymysql.Error], bool]:
    return lambda error: _code(error) in codes


#: what the driver's errors mean for a lock user
ERRORS = ErrorMap(
    Rule(pymysql.Error, PermissionDenied, "MySQL refused: {text}", when=_code_in(_REFUSED)),
    Rule(pymysql.Error, ConfigurationError, "MySQL: {text}", when=_code_in(_MISCONFIGURED)),
    Rule(
        pymysql.Error,
        OutOfConnections,
        "MySQL refused a connection: it has as many as it allows (its max_connections, or the "
        "account's max_user_connections); each client uses up to max_connections (in the "
        "URL) for calls and two more to listen for releases: {text}",
        when=_code_in(_NO_ROOM),
    ),
    Rule(
        pymysql.Error,
        ConfigurationError,
        "the MySQL server does not offer TLS, which the URL asks for (ssl_ca): refused rather "
        "than talk in clear",
        when=_code_in(frozenset({_NO_TLS})),
    ),
    Rule(
        pymysql.Error,
        BackendUnavailable,
        "another client held the lock's name past lock_timeout: {text}",
        when=_code_in(frozenset({1205})),
    ),
    Rule(pymysql.Error, BackendUnavailable, "MySQL: {text}"),
    Rule(OSError, BackendUnavailable, "cannot reach MySQL: {error}"),
    text=_text,
)


#: the tumbler error a driver error means for a lock user: ``tumbler_error(error, url, name)``
tumbler_error = ERRORS.error_at


#: the driver's errors as tumbler's, at this one edge, keeping the cause:
#: ``with translate_errors(url, lock_name):``
translate_errors = ERRORS.at


#: every transaction of a client's sessions, its procedures' and its one-statement ones alike:
#: no gap locks (a sweep or a listener's delete would hold transactions on other names back,
#: or deadlock with them), and each statement reads what was committed before it
SESSION_ISOLATION = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"


class NoReply(pymysql.err.OperationalError):
    """A call got no reply within ``socket_timeout``; its connection was dropped."""


def _refuses_clear_text(connection: Any) -> None:
    """Refuse a server that does not offer TLS to a client that asks for it: a server set up
    without it, or a man in the middle that struck TLS from the greeting. Called between the
    server's greeting and the client's answer, so the client has said nothing yet (its user
    name, the lock names after it)."""
    if getattr(connection, "_ssl_context", None) and not connection.server_capabilities & (
        CLIENT.SSL
    ):
        raise pymysql.err.OperationalError(_NO_TLS, "the server does not offer TLS")


_strict_connection: type | None = None


def _abort(connection: Any) -> None:
    """Close an aiomysql connection's socket at once (no goodbye to the server)."""
    writer = connection._writer
    connection._reader = connection._writer = None
    if writer is not None:
        writer.transport.abort()


def _aiomysql_connection() -> type:
    """aiomysql's connection, made to refuse clear text where TLS is asked for (it falls
    back to clear text when the server does not offer TLS; PyMySQL refuses, from 1.2), and
    to leave no socket open behind a connect that failed or was cancelled.

    aiomysql closes a TLS connection that failed by saying goodbye in TLS, which waits for the
    server's answer: from a stalled server that never comes, and the socket stays open until
    the garbage collector finds it (or for ever, if the event loop ends first). A connect
    cancelled part way (its time was up) it does not close at all. Both are aborted instead.
    """
    global _strict_connection
    if _strict_connection is None:
        import aiomysql

        class StrictConnection(aiomysql.Connection):  # type: ignore[misc]
            async def _connect(self) -> None:
                try:
                    await super()._connect()
                except BaseException:
                    _abort(self)
                    raise

            async def _request_authentication(self) -> None:
                _refuses_clear_text(self)
                # aiomysql moves to TLS on a copy of the socket, in a transport it holds only
                # once the handshake is done: cut short before that, asyncio closes that
                # transport with a TLS goodbye. A copy of our own shuts the socket down under it.
                sock = self._writer.transport.get_extra_info("socket")
                spare = sock.dup() if self._ssl_context and sock is not None else None
                try:
                    await super()._request_authentication()
                except BaseException:
                    if spare is not None:
                        with contextlib.suppress(OSError):
                            spare.shutdown(socket.SHUT_RDWR)
                    _abort(self)  # before aiomysql's own close, with its TLS goodbye
                    raise
                finally:
                    if spare is not None:
                        spare.close()

            def close(self) -> None:
                writer = self._writer
                super().close()
                if writer is not None:
                    writer.transport.abort()

        _strict_connection = StrictConnection
    return _strict_connection


# -- the two drivers' seams: aiomysql for asyncio, PyMySQL for the blocking twin ---------------

#: each seam's blocking twin, for the generator of the ``_sync`` code (tools/generate_sync.py,
#: which reads this from the source)
SYNC_RENAMES = {
    "aopen_connection": "open_connection",
    "abounded": "bounded",
    "aclose_connection": "close_connection",
    "aclosed_by_server": "closed_by_server",
}


async def aopen_connection(config: MySQLConfig, limit: float | None = None) -> Any:
    """A new aiomysql connection (autocommit: each call says where its transaction begins);
    ``limit``: a shorter bound than ``connect_timeout`` and ``socket_timeout`` on the whole."""
    connection = _aiomysql_connection()(
        db=config.database, autocommit=True, **config.connect_options
    )
    connect_timeout = config.connect_timeout + 1
    # aiomysql.connect() makes its own connection class; this is what it does with it
    await asyncio.wait_for(
        connection._connect(), connect_timeout if limit is None else min(limit, connect_timeout)
    )
    try:
        async with connection.cursor() as cursor:
            await abounded(cursor.execute(SESSION_ISOLATION), config.socket_timeout)
    except BaseException:
        await aclose_connection(connection)
        raise
    return connection


def open_connection(config: MySQLConfig, limit: float | None = None) -> Any:
    """A new PyMySQL connection, its replies waited for at most ``socket_timeout``;
    ``limit``: a shorter bound on the connect and on each reply, until :class:`Replies`
    sets another."""
    connect_timeout, socket_timeout = config.connect_timeout, config.socket_timeout
    if limit is not None:
        connect_timeout, socket_timeout = min(limit, connect_timeout), min(limit, socket_timeout)
    connection = pymysql.connect(
        database=config.database,
        autocommit=True,
        read_timeout=socket_timeout,
        write_timeout=socket_timeout,
        **{**config.connect_options, "connect_timeout": connect_timeout},
    )
    try:
        with connection.cursor() as cursor:
            cursor.execute(SESSION_ISOLATION)
    except BaseException:
        connection.close()
        raise
    return connection


async def aclose_connection(connection: Any) -> None:
    """Close an aiomysql connection now: its transport is aborted (no TLS goodbye, see
    :func:`_aiomysql_connection`) and the loop turned once, so that the socket is closed
    before this returns. The server sees the connection end either way."""
    open_before = connection._writer is not None
    connection.close()
    if open_before:
        await asyncio.sleep(0)


def aclosed_by_server(connection: Any) -> bool:
    """Whether an idle aiomysql connection has heard the server hang up (a restart, a KILL,
    ``wait_timeout``): its reader saw the end of the stream while the loop ran."""
    reader = getattr(connection, "_reader", None)
    return reader is None or reader.at_eof() or bool(getattr(reader, "_buffer", b""))


def closed_by_server(connection: Any) -> bool:
    """Whether an idle PyMySQL connection's socket has something to read: an idle
    connection has nothing to read unless the server hung up (its last words, or the end of
    the stream, are waiting there)."""
    sock = getattr(connection, "_sock", None)
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def close_connection(connection: Any) -> None:
    """Close a PyMySQL connection (the socket is closed at once)."""
    connection.close()


async def abounded(call: Awaitable[T], limit: float) -> T:
    """``call``, given up after ``limit`` seconds (``NoReply``); its connection is then in
    doubt, and the pool closes it."""
    try:
        return await asyncio.wait_for(call, limit)
    except asyncio.TimeoutError:
        raise NoReply(2013, f"no reply from MySQL within {limit:.3g} s (socket_timeout)") from None


def bounded(call: T, limit: float) -> T:
    """The blocking twin: PyMySQL's own read and write timeouts bound the call (each reply
    within ``socket_timeout``, or the limit :class:`Replies` set)."""
    return call


class AsyncReplies:
    """How long a connection waits for each of the server's replies (asyncio): aiomysql has
    no timeout of its own, every call is bounded as a whole (:func:`abounded`), so there is
    nothing to set."""

    @staticmethod
    def limit(connection: Any, seconds: float) -> None:
        """Nothing: see the class."""


class Replies:
    """Blocking twin of :class:`AsyncReplies`: PyMySQL waits for each reply, and for each
    write to go out, at most its read and write timeouts, which a call with a bound of its
    own (``renew_all``'s ``timeout``) sets to the time it has left before each statement,
    and the pool sets back to ``socket_timeout`` after."""

    @staticmethod
    def limit(connection: Any, seconds: float) -> None:
        # the connection's own settings, which it applies to the socket at its next read
        # or write
        connection._read_timeout = seconds
        connection._write_timeout = seconds
