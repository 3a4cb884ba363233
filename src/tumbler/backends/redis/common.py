"""``redis://``, ``rediss://``, ``redis+unix://``: locks in Redis (extra ``tumbler-locks[redis]``).

URL grammar::

    redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?OPTIONS]
    rediss://...                                   TLS; the server's certificate is verified
    redis+unix://[[USER]:PASSWORD@]/path/to/redis.sock[?db=N&OPTIONS]
    redis://HOST:PORT,HOST:PORT,...?cluster=true   Redis Cluster (the nodes to start from)

Percent-encode ``@ : / ? #`` in a password. Options: ``prefix`` (of every key, default
``tumbler``), ``cluster`` (``true`` for Redis Cluster), ``socket_timeout`` and
``connect_timeout`` (seconds, default 5: no call waits longer for the server),
``max_connections`` (default 100: the most calls one client has under way at once; more wait
for a free connection, up to ``socket_timeout``), ``max_waiters`` (default 10000: the most
waiters one lock queues; one more acquire that would wait gets ``TooManyWaiters``),
``wait_replicas`` and ``wait_timeout`` (see replication below), and for ``rediss://``:
``ssl_ca_certs`` (the CA the server's certificate must chain to; the system's CAs without
it), ``ssl_certfile`` and ``ssl_keyfile`` (a client certificate), ``ssl_check_hostname``
(default true). A client reads these files once, when it connects (unusable ones fail the
connect with ``ConfigurationError``), and its connections share what it read; on Redis
Cluster, redis-py's cluster client reads them for each connection, and trusts the system's
CAs beside ``ssl_ca_certs``.
Needs Redis 7.0 or newer (Lua scripts use ``PEXPIRETIME`` and ``redis.acl_check_cmd``).

With ACLs, the user needs the keys and channels under the prefix and exactly these commands
(``ACL_RULES``): ``~tumbler:* &tumbler:* +evalsha +script|load +info +subscribe +scan``
(called by the client) ``+time +hget +hset +hdel +hgetall +hlen +get +set +del +pexpireat
+pexpiretime +exists +publish +zadd +zrem +zrange +zrangebyscore +zcard +zcount +zscore``
(called by its scripts), and ``+wait`` with ``wait_replicas``. The connect checks them all, keys and
channels included, and refuses a user that lacks any with ``PermissionDenied`` naming what
it lacks; a right taken away later fails the call that needs it with ``PermissionDenied``
naming the command. (On Redis Cluster, redis-py's client also sends ``CLUSTER SLOTS`` or
``CLUSTER SHARDS`` and ``COMMAND`` when it starts.)

What it guarantees
    Each grant, renewal and release is one Lua script, run atomically by the server: a grant
    is one round trip; nobody can release or renew another owner's grant (owners are stored
    hashed); an expired grant is never revived. Leases are timed on the server's clock.
    Fencing tokens strictly increase per lock name (see ``.lua`` for how they survive
    the name's keys expiring). Every key of a lock shares one hash slot, so it works on Redis
    Cluster. Waiters are woken by the server (pub/sub, one connection per client), with a
    re-check every second in case a message is lost; on a single server the release grants
    the lock to the waiters it lets through itself, and the wake-up carries the grant (the
    waiter takes it without a round trip; see ``.lua``), unless ``wait_replicas`` is set
    (each grant must then be the waiter's own write, which its WAIT covers) or the hold will
    not be renewed (``renew=False``). A grant so handed over lasts a second, until the
    waiter's first renewal (due a third of a second later) gives it the lease asked for. A
    grant attempt costs the server the same however long the lock's line is (the line is
    kept in sorted sets, see ``.lua``), and a line is at most ``max_waiters`` long. Entries
    of a lock's hash that do not parse block nothing: the scripts skip and drop them
    (``status`` counts them: ``LockState.malformed``). A release that wakes a waiter whose
    client no longer listens (its process died, and the server closed its connections)
    drops that waiter and wakes the next at once, on a single server; a waiter killed a
    moment before the release still listens, and holds the line up for the second its grant
    (or, fair, its cut entry) lasts, after which the waiter behind tries again, told by a
    backup wake-up (a dead waiter behind it, which that backup reaches not, is dropped then,
    and the backup goes to the next). On Redis Cluster, where a release cannot tell, it also
    wakes the next waiter as a backup, which tries 0.2 s later (0.6 s if both are fair: the
    woken one's entry is cut to run out by then), and a waiter's entry lives 1 s
    (``waiter_ttl``; its re-checks, every third of that, renew it), so a dead waiter anywhere
    in a line (two in a row, say) holds it up for a second at most. A waiter whose host
    vanished without closing its connections holds a fair line up on a single server until
    its entry runs out, within ``waiter_ttl`` (3 s). All the leases of a client are renewed
    together: one script call per 500 of them (per hash slot on Redis Cluster), all
    pipelined, within the time their leases have left. A grant made with a ``lock_delay``
    keeps it in its entry (see ``.lua``): once its lease ran out on the server's clock, it
    stays, lapsed, for that long (the scripts' drop of expired entries, and the expiry of the
    lock's keys, wait for it), a grant that a release hands to a waiter keeps the waiter's,
    and a grant without one is stored and costs as before.

What it cannot promise
    Redis replicates asynchronously. If the primary fails after acknowledging a grant but
    before a replica has it, the promoted replica does not know the grant and can give the
    lock to another client: two holders. ``wait_replicas=N`` makes every grant wait until N
    replicas acknowledged it (``WAIT``; up to ``wait_timeout`` seconds, default 1) and gives
    the grant up otherwise (``BackendUnavailable``); that narrows the window but does not close
    it: WAIT does not make Redis strongly consistent. A Redis restarted without persistence
    forgets every grant, and its fencing sequence restarts from the server's clock. Fencing
    tokens let the protected resource refuse a stale holder in these cases; for locks that
    must survive failures, use a consensus backend (ZooKeeper, etcd). ``maxmemory-policy``
    must not evict lock keys: use ``noeviction`` on a Redis that holds locks. A lapsed grant
    is kept as a grant is, and lost the same ways (the name may then be granted before its
    delay has passed); a client of a tumbler from before lock-delays counts such a grant
    until its lease's end only, and may be granted the name during its delay.

How a hold can be lost here
    Its lease runs out before a renewal reaches the server (the client paused or could not
    reach Redis for the whole lease, or, for a grant a release handed over, for its first
    second); an operator force-released it (the force release leaves
    its note for each evicted holder under the lock's ``:evicted`` key, where ``evicted``
    finds it until that lease would have run out, and a little longer); Redis lost it (above).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import ssl
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import redis.asyncio.connection as redis_async_connection
import redis.connection as redis_connection
import redis.exceptions as redis_errors  # the driver: without it, MissingDependency

from ..._url import BackendURL
from ...errors import (
    BackendUnavailable,
    ConfigurationError,
    InvalidURL,
    PermissionDenied,
    PermitsMismatch,
    TumblerError,
)
from ..kit.errors import ErrorMap, Rule, Site, mentions
from ..kit.options import (
    DEFAULT_MAX_WAITERS,
    flag,
    host_port,
    line_full,
    seconds,
    waiter_count,
)
from ..kit.tls import TLSConfig, tls_options
from . import DEFAULT_PORT
from .lua import SCRIPT_COMMANDS

if TYPE_CHECKING:
    import redis
    import redis.asyncio


CLIENT_COMMANDS = ("evalsha", "script|load", "info", "subscribe", "scan")
#: the ACL rules a user needs under the default prefix (``+wait`` too with ``wait_replicas``)
ACL_RULES = "~tumbler:* &tumbler:* " + " ".join(
    "+" + command for command in CLIENT_COMMANDS + SCRIPT_COMMANDS
)

# ``max_waiters`` (kit.options): a grant attempt's cost does not grow with the line, but
# each waiter re-checks about once a second: 10,000 waiters on one lock are 10,000 script
# calls a second, a fair share of one Redis core.

#: ``max_connections`` when the URL does not say: redis-py's own default pool size
DEFAULT_MAX_CONNECTIONS = 100
#: the most ``max_connections`` may be: each is a socket on the client and on the server
MAX_CONNECTIONS = 10_000
#: leases renewed by one script call: the server runs nothing else while a script runs, and
#: 500 renewals take it about a millisecond
RENEWALS_PER_CALL = 500
#: lock names whose keys a backend keeps encoded (a client's working set of names; past it,
#: the cache starts again)
KEYS_CACHED = 1024
#: Redis Cluster, where a release cannot tell a dead waiter (see ``.lua``): how long a
#: fair waiter that a release woke has to come before the fair waiter behind it may pass it.
#: Longer than a re-check there (a third of its 1 s waiter entries) and its round trip, so
#: that a live waiter whose wake-up was lost still comes in time.
BACKUP_FAIR_MS = 600
#: ... and when the waiter behind is not held up by the woken one's entry, how long after the
#: release it tries anyway (a live woken waiter has taken the lock within milliseconds)
BACKUP_RETRY_MS = 200
#: A single server, where a release hands the lock to a waiter itself (see ``.lua``): the
#: longest lease of a grant so handed over, until the waiter's first renewal gives it the
#: lease it asked for; and how long a woken fair waiter has to come before the fair waiter
#: behind it may pass it. A release cannot tell a waiter whose process is dying from a live
#: one (the server sees its connections close only milliseconds later), so this is how long
#: such a waiter holds the line up: with the backup wake-up's try behind it, within the
#: 1.5 s the torture allows a dead waiter (``torture.backends.DEAD_WAITER_BOUND``). And it
#: must leave a live waiter's renewal, due at a third of it, the time any lease gives its
#: renewals: a second is ``min_ttl`` (see ``CAPABILITIES``), two thirds of it for one round
#: trip, the client's scheduling delays and a second try.
HAND_OFF_CONFIRM_MS = 1000
#: how much later than a backup wake-up says its waiter tries again: the provisional grant
#: or cut entry it waits behind runs out on the server's clock, and the wait, counted from
#: the wake-up's arrival (after the release), is timed on the client's; 2% of a second
#: covers twice the 1% drift between the two that every lease allows (``drift_margin``), so
#: that the try does not come a moment early and wait a whole re-check more
BACKUP_SLACK = 0.02
#: what a pool (or a Cluster gate) says when no connection came free in time
NO_CONNECTION = "No connection available."

MINIMUM_SERVER = (7, 0)

_TAKES_DRIVER_INFO = (
    "driver_info" in inspect.signature(redis_connection.AbstractConnection.__init__).parameters
)
#: the connection options that make redis-py send no CLIENT SETINFO when it connects
#: (``driver_info`` in the newer redis-py, ``lib_name`` and ``lib_version`` before)
NO_CLIENT_INFO: dict[str, None] = (
    {"driver_info": None} if _TAKES_DRIVER_INFO else {"lib_name": None, "lib_version": None}
)


def _client_info() -> dict[str, Any]:
    """The connection option that names the driver in CLIENT SETINFO, made once: given none,
    the newer redis-py (``driver_info``) makes it anew for each connection it opens, reading its
    own version from the installed package's metadata every time: 1 to 2 ms of CPU per
    connection (9.5 of the 130 s of a profiled Redlock conformance run, 4,340 connections).
    The older one reads it once, when it is imported."""
    if not _TAKES_DRIVER_INFO:
        return {}
    from redis.driver_info import DriverInfo

    return {"driver_info": DriverInfo()}


#: what every connection the backend opens says of its driver (the same as redis-py's own)
CLIENT_INFO = _client_info()

T = TypeVar("T")


def _script_refusal(error: redis_errors.NoPermissionError, site: Site) -> TumblerError:
    command, _, detail = str(error).partition(": ")
    return PermissionDenied(
        f"the Redis user may not run {command} (its ACL needs +{command.lower()}): {detail}",
        lock_name=site.lock_name,
        backend=site.backend,
    )


def _names_a_command(error: redis_errors.NoPermissionError) -> bool:
    """Whether a refusal is a script's, which names the command first (see .lua)."""
    command, colon, _ = str(error).partition(": ")
    return bool(colon) and command.replace("|", "").isalpha() and command.isupper()


def _fewer_databases(error: redis_errors.ResponseError, site: Site) -> TumblerError:
    return ConfigurationError(
        f"the Redis server has fewer databases: {error}", backend=site.backend
    )


def _line_full(error: redis_errors.ResponseError, site: Site) -> TumblerError:
    return line_full(int(str(error).split()[1]), site.lock_name, site.backend)


def _permits_mismatch(error: redis_errors.ResponseError, site: Site) -> TumblerError:
    limit = int(str(error).rsplit(" ", 1)[-1])
    kind = "a read lock" if limit == 0 else f"a semaphore of {limit} permits"
    return PermitsMismatch(
        f"the lock is in use as {kind}", lock_name=site.lock_name, backend=site.backend
    )


def _not_a_cluster(error: redis_errors.RedisClusterException, site: Site) -> TumblerError:
    return ConfigurationError(
        "the Redis server is not a cluster node: drop cluster=true from the URL",
        backend=site.backend,
    )


def _failed_for_a_reason(error: redis_errors.RedisClusterException) -> bool:
    """Whether a failed cluster start (not a RedisError) has the last startup node's own
    failure as its cause, which says more."""
    return isinstance(error.__cause__, redis_errors.RedisError | OSError)


def _for_its_reason(error: redis_errors.RedisClusterException, site: Site) -> TumblerError:
    return ERRORS.tumbler_error(cast(Exception, error.__cause__), site)


#: what redis-py's errors mean for a lock user
ERRORS = ErrorMap(
    Rule(redis_errors.NoPermissionError, _script_refusal, when=_names_a_command),
    Rule(
        redis_errors.NoPermissionError,
        PermissionDenied,
        "the Redis user lacks a permission tumbler needs: {error}",
    ),
    Rule(
        redis_errors.AuthenticationError, PermissionDenied, "Redis refused the credentials: {error}"
    ),
    Rule(redis_errors.ResponseError, _fewer_databases, when=mentions("DB index is out of range")),
    Rule(
        redis_errors.ResponseError,
        _line_full,
        when=lambda error: str(error).startswith("TOO_MANY_WAITERS "),
    ),
    Rule(redis_errors.ResponseError, _permits_mismatch, when=mentions("PERMITS_MISMATCH")),
    Rule(
        redis_errors.ResponseError,
        PermissionDenied,
        "Redis refused: {error}",
        when=mentions("NOPERM", "NOAUTH", "WRONGPASS", "The user executing the script can't"),
    ),
    Rule(redis_errors.ResponseError, BackendUnavailable, "Redis error: {error}"),
    Rule(
        redis_errors.ConnectionError,
        BackendUnavailable,
        "every connection of this client to Redis stayed busy for socket_timeout; the client "
        "makes more calls at once than max_connections (in the URL) allows",
        when=lambda error: str(error) == NO_CONNECTION,
    ),
    Rule(
        (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError),
        BackendUnavailable,
        "cannot reach Redis: {error}",
    ),
    # redis-py's cluster client reports a failed start as this, which is not a RedisError
    Rule(
        redis_errors.RedisClusterException,
        _not_a_cluster,
        when=mentions("Cluster mode is not enabled"),
    ),
    Rule(redis_errors.RedisClusterException, _for_its_reason, when=_failed_for_a_reason),
    Rule(redis_errors.RedisClusterException, BackendUnavailable, "Redis Cluster: {error}"),
    Rule(redis_errors.RedisError, BackendUnavailable, "Redis error: {error}"),
)


#: the driver's errors as tumbler's, at this one edge, keeping the cause:
#: ``with translate_errors(url, lock_name):``
translate_errors = ERRORS.at


#: the tumbler error a driver error means for a lock user: ``tumbler_error(error, url, name)``
tumbler_error = ERRORS.error_at


#: redis-py's asyncio clients close with ``aclose()``, its blocking ones with ``close()``: for
#: the generator of the ``_sync`` code (tools/generate_sync.py, which reads this from the source)
SYNC_RENAMES = {"aclose": "close"}


class AsyncClosings:
    """Connection closes that redis-py's asyncio client starts without waiting for them.

    After a read fails (a refused AUTH or HELLO, a timeout, a cancelled call) redis-py closes
    the connection with ``nowait`` and forgets it. Over TLS that close waits for the server's
    reply; if the event loop ends first (``asyncio.run`` around a connect that was refused),
    the socket is never closed. This follows those closes so that ``finish()`` at the
    backend's close can end them.
    """

    def __init__(self) -> None:
        self._pending: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    def follow(self, pool: redis.asyncio.ConnectionPool) -> None:
        """Follow the closes of ``pool``'s connections (made from now on)."""
        pool.connection_class = self._followed(pool.connection_class)

    def follow_cluster(self, client: redis.asyncio.RedisCluster) -> None:
        """Follow the closes of the connections ``client``'s nodes make from now on: those
        of the nodes it knows, and of the nodes it learns of (made from its nodes manager's
        connection options)."""
        options = client.nodes_manager.connection_kwargs
        options["connection_class"] = self._followed(options["connection_class"])
        for node in client.nodes_manager.startup_nodes.values():
            node.connection_class = options["connection_class"]

    def _followed(self, base: type[Any]) -> type[Any]:
        closings = self

        class FollowedConnection(base):  # type: ignore[misc]
            async def disconnect(self, nowait: bool = False, **options: Any) -> None:
                writer = self._writer
                finished = False
                try:
                    await super().disconnect(nowait=nowait, **options)
                    finished = not nowait
                finally:
                    if writer is not None and not finished:
                        closings._follow(writer)

        return FollowedConnection

    def _follow(self, writer: asyncio.StreamWriter) -> None:
        async def closed() -> None:
            with contextlib.suppress(Exception):  # how it ends does not matter, only that
                await writer.wait_closed()

        task = asyncio.ensure_future(closed())
        self._pending[task] = writer
        task.add_done_callback(self._pending.pop)

    async def finish(self) -> None:
        """End the closes still under way: cut them short (no goodbye to the server)."""
        pending = dict(self._pending)
        for writer in pending.values():
            writer.transport.abort()
        if pending:
            await asyncio.wait(pending, timeout=1.0)


class Closings:
    """Blocking twin of :class:`AsyncClosings`: redis-py's blocking client closes its sockets
    at once, so there is nothing to follow."""

    def follow(self, pool: object) -> None:
        pass

    def follow_cluster(self, client: object) -> None:
        pass

    def finish(self) -> None:
        pass


class AsyncTLSConnection(redis_async_connection.SSLConnection):
    """redis-py's asyncio TLS connection, on the client's TLS context (``tls_context``).

    redis-py's own builds a context per connection object (its blocking one, each time it
    connects), and building one loads the CA certificates: 30-45 ms of CPU with the system's
    store, paid again for each new connection, five times over for five Redlock masters.
    One context serves any number of connections at once.
    """

    def __init__(self, *, tls_context: ssl.SSLContext, **options: Any) -> None:
        super().__init__(**options)
        self.tls_context = tls_context

    def _connection_arguments(self) -> Any:
        # the plain connection's arguments: redis-py's SSLConnection would build a context
        arguments = dict(redis_async_connection.Connection._connection_arguments(self))
        arguments["ssl"] = self.tls_context
        return arguments


class TLSConnection(redis_connection.SSLConnection):
    """Blocking twin of :class:`AsyncTLSConnection`."""

    def __init__(self, *, tls_context: ssl.SSLContext, **options: Any) -> None:
        super().__init__(**options)
        self.tls_context = tls_context

    def _wrap_socket_with_ssl(self, sock: Any) -> Any:
        return self.tls_context.wrap_socket(sock, server_hostname=self.host)


def no_connection() -> redis_errors.ConnectionError:
    """What a call gets when no connection came free in time: redis-py's own error for a full
    pool, so that one translation (``tumbler_error``) serves both."""
    return redis_errors.ConnectionError(NO_CONNECTION)


class AsyncTurn:
    """Who may use the connection a backend keeps for grants and releases: one call at a
    time, and a call that finds it taken does not wait for it (it takes one from the pool).
    One event loop: a flag will do."""

    def __init__(self) -> None:
        self._taken = False

    def take(self) -> bool:
        """Take the connection if it is free; False if another call has it."""
        if self._taken:
            return False
        self._taken = True
        return True

    def give_back(self) -> None:
        self._taken = False


class Turn:
    """Blocking twin of :class:`AsyncTurn`: any thread may call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Take the connection if it is free; False if another thread has it."""
        return self._lock.acquire(blocking=False)

    def give_back(self) -> None:
        self._lock.release()


class AsyncBound:
    """How ``renew_all`` keeps within its timeout (asyncio): the whole call is cancelled when
    the time is up. redis-py drops a connection whose read was cancelled (and the call drops
    the others it sent on), so no connection is left with replies still to come."""

    async def run(self, call: Callable[[], Awaitable[T]], timeout: float) -> T:
        try:
            return await asyncio.wait_for(call(), timeout)
        except asyncio.TimeoutError:
            raise redis_errors.TimeoutError(f"no reply within {timeout:.3g} s") from None

    async def borrow(self, pool: redis.asyncio.ConnectionPool) -> Any:
        return await pool.get_connection()  # type: ignore[no-untyped-call]

    async def read(self, connection: Any) -> Any:
        return await connection.read_response()


class Bound:
    """Blocking twin of :class:`AsyncBound`: a deadline every step takes its timeout from.

    A connection made during the call connects and greets the server within the time left
    (and keeps that timeout for its writes; after any failure the call's pools are replaced,
    so no connection reconnects with the timeout of an earlier call), and each reply is read
    within the time left: redis-py drops a connection whose read timed out (and the call
    drops the others it sent on).
    """

    def __init__(self) -> None:
        self._local = threading.local()

    def run(self, call: Callable[[], T], timeout: float) -> T:
        self._local.deadline = time.monotonic() + timeout
        try:
            return call()
        finally:
            self._local.deadline = None

    def _left(self) -> float:
        left: float = self._local.deadline - time.monotonic()
        if left <= 0:
            raise redis_errors.TimeoutError("no reply in time")
        return left

    def borrow(self, pool: redis.ConnectionPool) -> Any:
        left = self._left()
        pool.connection_kwargs.update(socket_timeout=left, socket_connect_timeout=left)
        return pool.get_connection()

    def read(self, connection: Any) -> Any:
        return connection.read_response(timeout=self._left())


_OPTIONS = (
    "prefix",
    "cluster",
    "db",
    "socket_timeout",
    "connect_timeout",
    "max_connections",
    "max_waiters",
    "wait_replicas",
    "wait_timeout",
    "ssl_ca_certs",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_check_hostname",
)


def connection_count(text: str) -> int:
    """``max_connections``: a whole number of connections, 1 to MAX_CONNECTIONS."""
    # int() would take "1_0", " 10" and other scripts' digits: refuse what a reader would not
    # read as the number
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_CONNECTIONS:
        raise ValueError(f"expected a whole number of connections from 1 to {MAX_CONNECTIONS}")
    return int(text)


#: the prefix of every key when the URL names none
DEFAULT_PREFIX = "tumbler"


@dataclass(frozen=True)
class RedisConfig:
    """A parsed ``redis://`` URL: what both flavours need to connect."""

    url: str  # redacted
    prefix: str
    cluster: bool
    nodes: tuple[tuple[str, int], ...]
    unix_path: str | None
    db: int
    wait_replicas: int
    wait_timeout: float
    #: the most calls under way at once (connections per node on Redis Cluster)
    max_connections: int
    #: the most waiters one lock queues
    max_waiters: int
    #: keyword arguments for redis-py's clients (credentials included: never log this)
    client_options: dict[str, Any] = field(repr=False)
    #: the URL's TLS settings; None in clear, and for a client given in place of a URL,
    #: whose connections keep redis-py's own TLS (its every ``ssl_*`` setting, copied)
    tls: TLSConfig | None = None
    #: a master that Sentinels name, for a client given in place of a URL: the service's
    #: name and the application's ``Sentinel`` (tumbler asks it for the master, never closes
    #: it); None: the URL's servers
    sentinel: tuple[str, Any] | None = field(default=None, repr=False)


def parse_config(url: BackendURL) -> RedisConfig:
    url.allow_options(_OPTIONS)
    tls = tls_options(url, "rediss", "the server's TLS port")
    unix = url.scheme == "redis+unix"
    prefix = url.option("prefix", str, DEFAULT_PREFIX)
    if not prefix or any(ch in prefix for ch in "{}") or len(prefix) > 100:
        raise InvalidURL("prefix must be 1 to 100 characters without braces", backend=url.redacted)
    cluster = url.option("cluster", flag, False)
    options: dict[str, Any] = {
        "username": url.username,
        "password": url.password,
        "socket_timeout": url.option("socket_timeout", seconds, 5.0),
        "socket_connect_timeout": url.option("connect_timeout", seconds, 5.0),
        **CLIENT_INFO,
    }
    unix_path = None
    db_text = url.query.get("db")
    if unix:
        if url.hosts:
            raise InvalidURL(
                "redis+unix:// takes a socket path: redis+unix:///run/redis.sock",
                backend=url.redacted,
            )
        if not url.path:
            raise InvalidURL("redis+unix:// needs the socket's path", backend=url.redacted)
        unix_path = url.path
        nodes: tuple[tuple[str, int], ...] = ()
    else:
        nodes = tuple(
            host_port(part, url, DEFAULT_PORT) for part in url.hosts.split(",") if part
        ) or (("localhost", DEFAULT_PORT),)
        if len(nodes) > 1 and not cluster:
            raise InvalidURL(
                "several hosts are for Redis Cluster: add ?cluster=true", backend=url.redacted
            )
        path = url.path.strip("/")
        if path:
            if db_text is not None:
                raise InvalidURL(
                    "give the database in the path or as db=, not both", backend=url.redacted
                )
            db_text = path
    try:
        if db_text is not None and not (db_text.isascii() and db_text.isdigit()):
            raise ValueError(db_text)
        db = int(db_text) if db_text is not None else 0
    except ValueError:
        raise InvalidURL(f"bad database number {db_text!r}", backend=url.redacted) from None
    if not 0 <= db <= 10_000:
        raise InvalidURL(f"bad database number {db}", backend=url.redacted)
    if cluster and db != 0:
        raise InvalidURL("Redis Cluster has only database 0", backend=url.redacted)
    if tls is not None:
        # what redis-py's own clients take (Redis Cluster's, Sentinel's), on the same files
        options.update(
            ssl=True,
            ssl_cert_reqs="required",
            ssl_ca_certs=tls.ca_certs,
            ssl_certfile=tls.certfile,
            ssl_keyfile=tls.keyfile,
            ssl_check_hostname=tls.check_hostname,
        )
    max_connections = url.option("max_connections", connection_count, DEFAULT_MAX_CONNECTIONS)
    max_waiters = url.option("max_waiters", waiter_count, DEFAULT_MAX_WAITERS)
    wait_timeout = url.option("wait_timeout", seconds, 1.0)
    wait_replicas = url.option("wait_replicas", int, 0)
    if wait_replicas and wait_timeout >= options["socket_timeout"]:
        raise InvalidURL(
            "wait_timeout must be shorter than socket_timeout (the WAIT would time out first)",
            backend=url.redacted,
        )
    if not 0 <= wait_replicas <= 100:
        raise InvalidURL("wait_replicas must be between 0 and 100", backend=url.redacted)
    if wait_replicas and cluster:
        raise InvalidURL("wait_replicas is not supported on Redis Cluster", backend=url.redacted)
    return RedisConfig(
        url=url.redacted,
        prefix=prefix,
        cluster=cluster,
        nodes=nodes,
        unix_path=unix_path,
        db=db,
        wait_replicas=wait_replicas,
        wait_timeout=wait_timeout,
        max_connections=max_connections,
        max_waiters=max_waiters,
        client_options=options,
        tls=tls,
    )
