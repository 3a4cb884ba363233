"""The Redis backend (asyncio flavour, the source of the generated blocking twin).

See ``tumbler.backends.redis.common`` for the URL grammar and the guarantees, and
``tumbler.backends.redis.lua`` for the keys and scripts.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import secrets
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis.exceptions as redis_errors
from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.backoff import NoBackoff
from redis.crc import key_slot

from ...._acompat import AsyncEvent, AsyncMutex, AsyncWorker, ajoin, asleep_real, aspawn
from ...._clock import SYSTEM_CLOCK, Clock
from ...._logs import logger
from ....errors import BackendUnavailable, ConfigurationError, PermissionDenied
from ...contract import (
    STATE_TAG,
    Grant,
    GrantRequest,
    LockState,
    Renewal,
    SessionEvents,
    WakeHub,
)
from ...kit import AsyncBaseWatch, AsyncInspectEachName, AsyncMarkedWatch, LockStateBuilder
from ...kit.handoffs import HandOffs
from ...kit.owners import owner_hash
from ...kit.slots import AsyncSlots
from ...kit.tls import tls_context
from .. import CAPABILITIES, CLUSTER_CAPABILITIES, lua
from ..common import (
    ACL_RULES,
    BACKUP_FAIR_MS,
    BACKUP_RETRY_MS,
    BACKUP_SLACK,
    HAND_OFF_CONFIRM_MS,
    KEYS_CACHED,
    MINIMUM_SERVER,
    NO_CLIENT_INFO,
    RENEWALS_PER_CALL,
    AsyncBound,
    AsyncClosings,
    AsyncTLSConnection,
    AsyncTurn,
    RedisConfig,
    no_connection,
    translate_errors,
)

_log = logger("tumbler.redis")

T = TypeVar("T")

#: how long the marker that a lock's state is watched lives unless set again: publishing
#: goes on at most this long after its last watcher stopped
WATCHED_MS = 30_000


class AsyncScript:
    """A Lua script run by SHA-1, loaded again if the server forgot it (restart, SCRIPT FLUSH)."""

    def __init__(self, client: Redis | RedisCluster, source: str) -> None:
        self._client = client
        self._source = source
        self._sha: str | None = None

    async def __call__(
        self,
        keys: Sequence[str | bytes],
        args: Sequence[str | bytes | int],
        client: Redis | RedisCluster | None = None,
    ) -> Any:
        """Run the script (on ``client``, a connection of the same server, if given)."""
        runner = self._client if client is None else client
        if self._sha is None:
            self._sha = await self._client.script_load(self._source)
        try:
            return await runner.evalsha(self._sha, len(keys), *keys, *args)
        except redis_errors.NoScriptError:
            self._sha = await self._client.script_load(self._source)
            return await runner.evalsha(self._sha, len(keys), *keys, *args)


class AsyncWakeups:
    """The client's one pub/sub connection, subscribed to the client's own channel.

    A release publishes ``<owner hash> <name>`` on the channel of each client whose waiter it
    lets through; this connection's reader turns that into ``hub.notify(name, [owner hash])``,
    which wakes just that waiter. Clients with nobody to wake hear nothing, however many wait
    on the same lock. The subscription is made at the first wait and kept until close().
    A release that granted the waiter itself says so in the wake-up (``=<terms>:``): the
    reader keeps that grant in ``handoffs`` for the waiter's next try.
    """

    def __init__(self, backend: AsyncRedisBackend) -> None:
        self._backend = backend
        self._channel = backend.keys.client_channel(backend.client_id)
        self._pubsub: PubSub | None = None
        self._reader: AsyncWorker | None = None
        self._lock = threading.Lock()
        # the first SUBSCRIBE goes out once: redis-py makes a PubSub's connection lazily, and
        # two first calls at once could each make one, and one would go unread
        self._sending = AsyncMutex()
        self._confirmed: AsyncEvent | None = None
        self._refused: str | None = None
        self._closed = False
        self.handoffs = HandOffs(backend.clock.now)
        #: the lock state channels subscribed to (``follow_state``): channel -> lock name,
        #: and the server's confirmation of each
        self._state_names: dict[str, str] = {}
        self._state_confirmed: dict[str, AsyncEvent] = {}

    def subscribed(self) -> bool:
        """Whether the server has confirmed the subscription (wake-ups reach us from then)."""
        confirmed = self._confirmed
        return confirmed is not None and confirmed.is_set() and self._refused is None

    async def subscribe(self, name: str) -> None:
        """Return once the server confirmed the subscription (``name``: for errors)."""
        async with self._sending:
            self._check_open(name)
            if self._confirmed is None or self._refused is not None:
                self._refused = None
                self._confirmed = confirmed = AsyncEvent()
                pubsub = self._pubsub_connection()
                try:
                    with translate_errors(self._backend.url, name):
                        await pubsub.subscribe(self._channel)
                except BaseException:
                    self._confirmed = None
                    raise
                self._start_reader()
            confirmed = self._confirmed
        # a release after this point is heard; the caller tries again after it
        timeout = self._backend.config.client_options["socket_timeout"]
        if not await confirmed.wait(timeout) or self._closed:
            self._confirmed = None  # the next wait subscribes anew
            raise self._unconfirmed(name)
        refused = self._refused
        if refused is not None:
            raise PermissionDenied(
                f"Redis refused to subscribe to the client's wake-up channel: {refused}",
                lock_name=name,
                backend=self._backend.url,
            )

    async def follow_state(self, name: str) -> None:
        """Subscribe to the channel on which the lock ``name``'s changes are published while
        its state is watched (once per client: a lock's watchers share it), and return once
        the server confirmed it."""
        channel = self._backend.keys.watched(name)
        async with self._sending:
            self._check_open(name)
            with self._lock:
                confirmed = self._state_confirmed.get(channel)
            if confirmed is None:
                confirmed = AsyncEvent()
                with self._lock:
                    self._state_confirmed[channel] = confirmed
                    self._state_names[channel] = name
                try:
                    with translate_errors(self._backend.url, name):
                        await self._pubsub_connection().subscribe(channel)
                except BaseException:
                    with self._lock:
                        del self._state_confirmed[channel], self._state_names[channel]
                    raise
                self._start_reader()
        timeout = self._backend.config.client_options["socket_timeout"]
        if not await confirmed.wait(timeout) or self._closed:
            with self._lock:
                if self._state_confirmed.get(channel) is confirmed and not confirmed.is_set():
                    del self._state_confirmed[channel], self._state_names[channel]
            raise self._unconfirmed(name)

    def _check_open(self, name: str) -> None:
        if self._closed:  # a connection made now would never be closed
            raise BackendUnavailable(
                "the client is closed", lock_name=name, backend=self._backend.url
            )

    def _start_reader(self) -> None:
        with self._lock:
            if self._reader is None and not self._closed:
                self._reader = aspawn(self._read, "tumbler-redis-wakeups")

    def _unconfirmed(self, name: str) -> BackendUnavailable:
        return BackendUnavailable(
            "Redis did not confirm a subscription in time (or the client closed)",
            lock_name=name,
            backend=self._backend.url,
        )

    def _refuse_pending(self, reason: str) -> None:
        """The server refused the subscription: its waiters raise PermissionDenied."""
        confirmed = self._confirmed
        if confirmed is not None and not confirmed.is_set():
            self._refused = reason
            confirmed.set_threadsafe()

    def _pubsub_connection(self) -> PubSub:
        if self._pubsub is None:
            self._pubsub = self._backend.pubsub_client.pubsub()
        return self._pubsub

    async def _read(self) -> None:
        pubsub = self._pubsub_connection()
        hub = self._backend.hub
        failures = 0
        #: backup wake-ups not yet due: (when, name, owner hash)
        backups: list[tuple[float, str, str]] = []
        while not self._closed:
            now = time.monotonic()
            while backups and backups[0][0] <= now:
                _due, name, tag = heapq.heappop(backups)
                hub.notify(name, (tag,))
            wait = min(1.0, backups[0][0] - now) if backups else 1.0
            try:
                message = await pubsub.get_message(timeout=wait)
            except (redis_errors.NoPermissionError, redis_errors.ResponseError) as error:
                if "NOPERM" in str(error) or "permission" in str(error).lower():
                    self._refuse_pending(str(error))
                else:
                    _log.warning("Redis wake-up connection: %s", error)
                continue
            except Exception as error:  # the reader must outlive any failure but close()
                if self._closed:
                    return  # close() pulled the connection from under the read
                failures += 1
                _log.warning("Redis wake-up connection failed (waiters re-check): %s", error)
                await asleep_real(min(1.0, 0.05 * 2**failures))
                continue
            failures = 0
            if message is None:
                continue
            channel = _text(message.get("channel"))
            with self._lock:
                state_confirmed = self._state_confirmed.get(channel)
                state_name = self._state_names.get(channel)
            if message["type"] == "subscribe":
                confirmed = self._confirmed if state_confirmed is None else state_confirmed
                if confirmed is not None:
                    confirmed.set_threadsafe()
            elif message["type"] == "message" and state_name is not None:
                hub.notify(state_name, (STATE_TAG,))
            elif message["type"] == "message":
                data = message["data"]
                text = data.decode() if isinstance(data, bytes) else str(data)
                tag, _, name = text.partition(" ")
                if tag.startswith("~"):  # a backup: try later, in case one let through was dead
                    delay_ms, _, tag = tag[1:].partition(":")
                    due = time.monotonic() + int(delay_ms) / 1000 + BACKUP_SLACK
                    heapq.heappush(backups, (due, name, tag))
                else:
                    self.handoffs.deliver(text, hub)

    def stop(self) -> None:
        """Make no subscription from now on; a subscribe still waiting for its confirmation
        gives up now."""
        with self._lock:
            self._closed = True
            pending = [self._confirmed, *self._state_confirmed.values()]
        for confirmed in pending:
            if confirmed is not None:
                confirmed.set_threadsafe()

    async def close(self) -> None:
        self.stop()
        with self._lock:
            reader, self._reader = self._reader, None
        if self._pubsub is not None:
            with contextlib.suppress(redis_errors.RedisError, OSError):
                await self._pubsub.aclose()
        if reader is not None:
            await ajoin(reader)


class AsyncRedisWatch(AsyncBaseWatch):
    """A waiter's view of its client's wake-up channel.

    Made before the first try, it registers for local wake-ups at once; if the client's
    channel is subscribed already, nothing after that try can be missed and entering costs
    nothing. Otherwise entering subscribes (confirmed by the server) and asks for a retry.
    """

    def __init__(self, backend: AsyncRedisBackend, name: str, owner: str) -> None:
        # releases wake the waiters they let through, named by their owner's hash
        super().__init__(backend.clock, name, backend.hub, owner_hash(owner))
        self._backend = backend
        self._subscribed = backend.wakeups.subscribed()

    async def _subscribe(self) -> bool:
        if self._subscribed:
            return False
        await self._backend.wakeups.subscribe(self.name)
        return True


class AsyncRedisStateWatch(AsyncMarkedWatch):
    """A state watcher's watch: the lock's changes are published on a channel while a marker
    key says someone watches (see ``lua``, ``<prefix>:{<name>}:watched``). Entering
    subscribes the client to that channel (confirmed by the server) and sets the marker,
    which the kit's marked watch sets again while it waits (it outlives the watch by at
    most :data:`WATCHED_MS`)."""

    mark_life = WATCHED_MS / 1000

    def __init__(self, backend: AsyncRedisBackend, name: str) -> None:
        super().__init__(backend.clock, name, backend.hub, STATE_TAG)
        self._backend = backend

    async def _subscribe(self) -> bool:
        await self._backend.wakeups.follow_state(self.name)
        return await super()._subscribe()

    async def _set_mark(self) -> None:
        await self._backend.mark_watched(self.name)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


#: a renewal script call: where it goes (a node's address on Redis Cluster, else None),
#: its keys and its arguments
_RenewalCall = tuple["tuple[str, int] | None", list[str], list["str | int"]]


class AsyncRedisBackend(AsyncInspectEachName):
    """The Redis backend contract over redis-py.

    Per client: the pool of ``max_connections`` for calls (they wait for a free connection,
    up to ``socket_timeout``), one pub/sub connection for wake-ups, and one connection (per
    node on Redis Cluster) for renewals, so that a busy pool never holds them up.
    """

    capabilities = CAPABILITIES
    session_events: SessionEvents | None = None

    def __init__(
        self,
        config: RedisConfig,
        *,
        hub: WakeHub | None = None,
        client_id: str | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """``hub`` and ``client_id``: shared with other backends of one client (Redlock's
        masters), so that a wake-up from any of their servers reaches the client's waiters;
        ``tls``: their TLS context, made from ``config.tls`` when not given (which refuses
        unusable files with ``ConfigurationError`` before anything connects)."""
        if tls is None and config.tls is not None:
            tls = tls_context(config.tls, config.url)
        #: the context of the connections tumbler makes (None in clear, and for a client given
        #: in place of a URL, whose connections redis-py makes as the client's)
        self.tls = tls
        self.config = config
        self.url = config.url
        self.capabilities = CLUSTER_CAPABILITIES if config.cluster else CAPABILITIES
        self.clock: Clock = SYSTEM_CLOCK
        self.hub = WakeHub() if hub is None else hub
        self.keys = lua.Keys(config.prefix)
        #: names this client's wake-up channel; stored with each of its waiters
        self.client_id = secrets.token_hex(8) if client_id is None else client_id
        wait = config.client_options["socket_timeout"]
        # What redis-py closes without waiting, close() finishes.
        self.closings = AsyncClosings()
        self.client: Redis | RedisCluster
        if config.cluster:
            # No retries inside redis-py: a retried release whose first reply was lost would
            # look like a lost hold. tumbler's lock logic decides what to retry.
            options = dict(config.client_options, retry=Retry(NoBackoff(), 0))
            startup_nodes = [ClusterNode(host, port) for host, port in config.nodes]
            try:
                with translate_errors(self.url):
                    self.client = RedisCluster(
                        startup_nodes=startup_nodes,
                        max_connections=config.max_connections,
                        **options,
                    )
            except BaseException:
                # The blocking RedisCluster asks its startup nodes for the slots in its
                # constructor; when that fails, the connections it made are not closed, and
                # their sockets warn (unclosed) whenever the garbage collector gets to them.
                for node in startup_nodes:
                    connection = getattr(node, "redis_connection", None)
                    if connection is not None:
                        connection.close()
                raise
            self.closings.follow_cluster(self.client)
            # its node pools fail a call at once when full: the gate keeps them from filling
            self._gate = AsyncSlots(config.max_connections, wait, no_connection)
        elif config.sentinel is not None:
            # A Sentinel's pool fails a call at once when full: the gate keeps the calls to
            # max_connections, and the pool has room for one more, the connection start()
            # keeps for grants and releases, outside the gate.
            pool = self._pool(None, max_connections=config.max_connections + 1)
            self.client = Redis.from_pool(pool)
            self._gate = AsyncSlots(config.max_connections, wait, no_connection)
        else:
            connection_class, options = self._connection_options(None)
            pool = BlockingConnectionPool(
                connection_class=connection_class,
                max_connections=config.max_connections,
                timeout=wait,
                **options,
            )
            self.closings.follow(pool)
            self.client = Redis.from_pool(pool)
            self._gate = AsyncSlots(None, wait, no_connection)  # the pool itself waits
        # Classic pub/sub reaches every node of a cluster, so one node's connection will do.
        self.pubsub_client: Redis = Redis.from_pool(
            self._pool(config.nodes[0] if config.nodes else None)
        )
        self._renewal_pools: dict[tuple[str, int] | None, ConnectionPool] = {}
        self._bound = AsyncBound()
        # how a release finds dead waiters: by the wake-up reaching nobody (a single server
        # sees every subscriber), and by a backup wake-up once the grant it handed over or
        # the entry it cut runs out, in case the waiter was dying (see .lua)
        self._wake_args: list[str | int] = (
            [0, BACKUP_FAIR_MS, BACKUP_RETRY_MS] if config.cluster else [1, HAND_OFF_CONFIRM_MS, 0]
        )
        self.wakeups = AsyncWakeups(self)
        self._grant = AsyncScript(self.client, lua.GRANT)
        self._renew = AsyncScript(self.client, lua.RENEW)
        self._release = AsyncScript(self.client, lua.RELEASE)
        self._force_release = AsyncScript(self.client, lua.FORCE_RELEASE)
        self._evicted = AsyncScript(self.client, lua.EVICTED)
        self._inspect = AsyncScript(self.client, lua.INSPECT)
        self._probe = AsyncScript(self.client, lua.PROBE)
        self._renew_all_sha = hashlib.sha1(lua.RENEW_ALL.encode()).hexdigest()
        # the arguments every grant passes alike, encoded once: waiter_ttl_ms, client (or
        # none while its channel is not subscribed), max_waiters
        waiter_ttl = str(round(self.capabilities.waiter_ttl * 1000)).encode()
        waiters = str(config.max_waiters).encode()
        self._grant_tail = [waiter_ttl, self.client_id.encode(), waiters]
        self._grant_tail_unsubscribed = [waiter_ttl, b"", waiters]
        # Hand-offs (see lua) only where they keep every promise: not on Redis Cluster, where
        # releases hand nothing over anyway, and not with wait_replicas, where a grant counts
        # once this client's WAIT saw it replicated, and a WAIT covers only the writes of the
        # connection it runs on: a hand-off is written by the releasing client's.
        self._takes_hand_offs = not config.cluster and not config.wait_replicas
        self._channel_prefix = self.keys.client_channel_prefix().encode()
        self._keys_cache: dict[str, list[bytes]] = {}
        #: a connection of the pool kept for grants and releases (see _run); made by start()
        #: on a single server whose pool has room for it and one more
        self._direct: Redis | None = None
        self._turn = AsyncTurn()

    def _connection_options(
        self, address: tuple[str, int] | None
    ) -> tuple[type[AbstractConnection], dict[str, Any]]:
        """The connection class and keyword arguments for a pool of connections to ``address``
        (None: the URL's server)."""
        # No retries inside redis-py (see the cluster client above).
        options = dict(self.config.client_options, retry=Retry(NoBackoff(), 0))
        tls = options.pop("ssl", False)
        if self.config.unix_path is not None:
            options.update(path=self.config.unix_path, db=self.config.db)
            return UnixDomainSocketConnection, options
        host, port = address if address is not None else self.config.nodes[0]
        options.update(host=host, port=port, db=self.config.db)
        if not tls:
            return Connection, options
        if self.tls is None:
            return SSLConnection, options
        return AsyncTLSConnection, dict(options, tls_context=self.tls)

    def _pool(self, address: tuple[str, int] | None, **limits: Any) -> ConnectionPool:
        """A pool of its own, which never waits, for connections to ``address`` (None: the
        URL's server, or the master its Sentinels name at each connection)."""
        if self.config.sentinel is not None:
            service, sentinels = self.config.sentinel
            options = dict(self.config.client_options, retry=Retry(NoBackoff(), 0))
            pool: ConnectionPool = SentinelConnectionPool(
                service, sentinels, db=self.config.db, **options, **limits
            )
        else:
            connection_class, options = self._connection_options(address)
            pool = ConnectionPool(connection_class=connection_class, **options, **limits)
        self.closings.follow(pool)
        return pool

    def quick_pool(self) -> BlockingConnectionPool:
        """A pool of ``max_connections`` to the server for calls that read their replies
        within a timeout of their own (Redlock's masters): a connection is set up (TCP, TLS,
        authentication) within ``connect_timeout`` and greets the server with nothing more,
        so that a server that stopped answering costs a new connection no longer. Closed by
        its user."""
        connection_class, options = self._connection_options(None)
        # Neither CLIENT SETINFO nor HELLO (RESP2: the scripts' replies read the same).
        setup = self.config.client_options["socket_connect_timeout"]
        options.update(socket_timeout=setup, protocol=2, **NO_CLIENT_INFO)
        pool = BlockingConnectionPool(
            connection_class=connection_class,
            max_connections=self.config.max_connections,
            timeout=self.config.client_options["socket_timeout"],
            **options,
        )
        self.closings.follow(pool)
        return pool

    async def start(self) -> None:
        """Check that the server answers, is recent enough, lets the user run every command
        tumbler needs, and will not evict lock keys."""
        with translate_errors(self.url):
            info: Any = await self.client.info("server")
            if self.config.cluster:  # RedisCluster answers per node
                info = next(iter(info.values())) if "redis_version" not in info else info
            version = tuple(int(part) for part in str(info["redis_version"]).split(".")[:2])
            if version < MINIMUM_SERVER:
                raise ConfigurationError(
                    f"tumbler needs Redis {'.'.join(map(str, MINIMUM_SERVER))} or newer, "
                    f"the server is {info['redis_version']}",
                    backend=self.url,
                )
            with contextlib.suppress(redis_errors.ResponseError):  # CONFIG may be forbidden
                policy: Any = await self.client.config_get("maxmemory-policy")
                if self.config.cluster and "maxmemory-policy" not in policy:
                    policy = next(iter(policy.values()))
                value = policy.get("maxmemory-policy", "noeviction")
                # lock keys carry TTLs, so the volatile-* policies evict them too (first, even)
                if value != "noeviction":
                    _log.warning(
                        "Redis maxmemory-policy is %s: it may evict lock keys (use noeviction)",
                        value,
                    )
        # outside translate_errors, which would take PermissionDenied (an OSError) for a
        # network failure
        await self._check_rights()
        if isinstance(self.client, Redis) and self.config.max_connections >= 2:
            # the pool keeps the others' calls going while this one is taken
            with translate_errors(self.url):
                self._direct = Redis(
                    connection_pool=self.client.connection_pool, single_connection_client=True
                )

    async def _check_rights(self) -> None:
        """Refuse a user whose ACL lacks a command, key or channel that tumbler needs, now
        rather than at the first release that has a waiter to wake (PUBLISH) or the first
        renewal (PEXPIRETIME)."""
        keys = self.keys.probe_keys("probe")
        channel = self.keys.client_channel(self.client_id)
        replicas = int(bool(self.config.wait_replicas))
        with translate_errors(self.url):
            refused = await self._probe(keys, [channel, replicas])
        if refused:
            what = ", ".join(part.decode() if isinstance(part, bytes) else part for part in refused)
            raise PermissionDenied(
                f"the Redis user may not run {what}: tumbler needs the ACL rules "
                f"{ACL_RULES}{' +wait' if self.config.wait_replicas else ''} (for the key "
                f"prefix {self.config.prefix!r})",
                backend=self.url,
            )

    async def _call(self, name: str | None, call: Callable[[], Awaitable[T]]) -> T:
        with translate_errors(self.url, name):
            async with self._gate:
                return await call()

    async def _run(
        self,
        name: str,
        script: AsyncScript,
        keys: Sequence[str | bytes],
        args: Sequence[str | bytes | int],
    ) -> Any:
        """A grant's or release's script call: on the connection kept for them when no other
        call has it (no check-out from the pool: its lock, its poll of the socket, its
        check-in), else as every other call."""
        direct = self._direct
        if direct is not None and self._turn.take():
            try:
                with translate_errors(self.url, name):
                    await self._make_ready(direct)
                    return await script(keys, args, direct)
            finally:
                self._turn.give_back()
        return await self._call(name, lambda: script(keys, args))

    @staticmethod
    async def _make_ready(direct: Redis) -> None:
        """What the pool does to a connection before it hands it out: one the server closed
        (it restarted, say) or that has a stray reply on it is closed, and the call opens it
        again, instead of failing on the dead socket."""
        connection = direct.connection
        if connection is None or not connection.is_connected:
            return  # redis-py connects it for the call
        try:
            stale = await connection.can_read()
        except (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError):
            stale = True
        if stale:
            await connection.disconnect()

    def _lock_keys(self, name: str) -> list[bytes]:
        """``keys.lock_keys(name)`` and its state watchers' marker (GRANT's and RELEASE's
        keys), encoded once for the last names used (a client locks a few names again and
        again)."""
        found = self._keys_cache.get(name)
        if found is None:
            if len(self._keys_cache) >= KEYS_CACHED:
                self._keys_cache.clear()
            keys = [*self.keys.lock_keys(name), self.keys.watched(name)]
            found = [key.encode() for key in keys]
            self._keys_cache[name] = found
        return found

    async def try_grant(self, request: GrantRequest) -> Grant | None:
        if self.config.wait_replicas:
            return await self._grant_replicated(request)
        grant = self.wakeups.handoffs.grant(request)
        if grant is None:
            grant = await self._ask_grant(request)
        return grant

    async def _grant_replicated(self, request: GrantRequest) -> Grant | None:
        """A grant that counts once ``wait_replicas`` replicas have it. WAIT counts the writes
        of the connection it is sent on, so the grant's script and the WAIT share one,
        checked out of the pool for the two (no release hands over a grant: see
        ``_takes_hand_offs``)."""
        assert isinstance(self.client, Redis), "wait_replicas is refused on Redis Cluster"
        with translate_errors(self.url, request.name):
            async with self._gate:
                own = Redis(
                    connection_pool=self.client.connection_pool, single_connection_client=True
                )
                try:
                    grant = await self._ask_grant(request, own)
                    if grant is None:
                        return None
                    acknowledged = await own.wait(
                        self.config.wait_replicas, round(self.config.wait_timeout * 1000)
                    )
                finally:
                    await own.aclose()
        if acknowledged < self.config.wait_replicas:
            await self.release(request.name, request.owner)
            raise BackendUnavailable(
                f"only {acknowledged} of {self.config.wait_replicas} replicas acknowledged the "
                f"grant within {self.config.wait_timeout} s; it was given up",
                lock_name=request.name,
                backend=self.url,
            )
        return grant

    async def _ask_grant(self, request: GrantRequest, on: Redis | None = None) -> Grant | None:
        """The grant script's answer; ``on``: the client to send it on, if not the usual."""
        keys = self._lock_keys(request.name)
        subscribed = self.wakeups.subscribed()
        args: list[str | bytes | int] = [
            request.owner,
            b"1" if request.shared else b"0",
            request.limit,
            b"1" if request.fair else b"0",
            max(1, round(request.ttl * 1000)),
            request.holder,
            b"1" if request.queue else b"0",
            # until the client's channel is subscribed, a release must not take a wake-up
            # that reaches nobody for a sign that this waiter is gone
            *(self._grant_tail if subscribed else self._grant_tail_unsubscribed),
            # when this was sent: a release that hands this waiter the lock tells it when the
            # lease began, on this clock (see lua); only for a hold that will be renewed, as
            # the grant handed over lasts until the first renewal confirms it
            round(self.clock.now() * 1e6)
            if subscribed and request.queue and request.renewed and self._takes_hand_offs
            else b"",
            round(request.lock_delay * 1000) if request.lock_delay else b"",
        ]
        if on is None:
            result = await self._run(request.name, self._grant, keys, args)
        else:
            result = await self._grant(keys, args, on)
        if not result[0]:
            return None
        if len(result) > 2:
            # held already (granted by a release, or by a try whose reply was lost): the
            # lease began then, and has this much left
            left = min(request.ttl, int(result[2]) / 1000)
            return Grant(request.name, request.owner, int(result[1]), left)
        return Grant(request.name, request.owner, int(result[1]), request.ttl)

    async def renew(self, name: str, owner: str, ttl: float) -> float | None:
        keys = self.keys.renewal_keys(name)
        renewed = await self._call(name, lambda: self._renew(keys, [owner, round(ttl * 1000)]))
        return ttl if renewed else None

    async def renew_all(self, renewals: Sequence[Renewal], timeout: float) -> list[float | None]:
        """Every lease in one pipelined round trip per connection: one script call per
        ``RENEWALS_PER_CALL`` leases (on Redis Cluster, per hash slot, sent to the slot's
        node), on the client's renewal connections, all within ``timeout``."""
        if not renewals:
            return []
        names = {renewal.name for renewal in renewals}
        name = names.pop() if len(names) == 1 else None
        with translate_errors(self.url, name):
            renewed = await self._bound.run(lambda: self._renew_in_calls(renewals), timeout)
        return [renewal.ttl if ok else None for renewal, ok in zip(renewals, renewed, strict=True)]

    async def _renew_in_calls(self, renewals: Sequence[Renewal]) -> list[bool]:
        load = False  # until a server says it does not know the script
        for _attempt in range(3):
            calls, places = self._renewal_calls(renewals)
            replies = await self._send_renewals(calls, load)
            errors = [reply for reply in replies if isinstance(reply, Exception)]
            if not errors:
                renewed = [False] * len(renewals)
                for reply, indexes in zip(replies, places, strict=True):
                    for index, ok in zip(indexes, reply, strict=True):
                        renewed[index] = bool(ok)
                return renewed
            # A server restarted or flushed its scripts: load it again (SCRIPT LOAD, not EVAL:
            # the ACL rights the module docstring lists). A slot moved to another node:
            # follow it, as the cluster client does.
            for error in errors:
                if isinstance(error, redis_errors.NoScriptError):
                    load = True
                elif isinstance(error, redis_errors.MovedError) and isinstance(
                    self.client, RedisCluster
                ):
                    await self.client.nodes_manager.move_slot(error)
                else:
                    raise error
        raise errors[0]

    def _renewal_calls(
        self, renewals: Sequence[Renewal]
    ) -> tuple[list[_RenewalCall], list[list[int]]]:
        """The script calls that renew ``renewals``, and which renewals each call carries."""
        calls: list[_RenewalCall] = []
        places: list[list[int]] = []
        if isinstance(self.client, RedisCluster):
            by_slot: dict[int, list[int]] = {}
            for index, renewal in enumerate(renewals):
                slot = key_slot(self.keys.entries(renewal.name).encode())
                by_slot.setdefault(slot, []).append(index)
            for slot, indexes in by_slot.items():
                node = self.client.nodes_manager.get_node_from_slot(slot)
                self._add_calls(renewals, (node.host, int(node.port)), indexes, calls, places)
        else:
            self._add_calls(renewals, None, list(range(len(renewals))), calls, places)
        return calls, places

    def _add_calls(
        self,
        renewals: Sequence[Renewal],
        address: tuple[str, int] | None,
        indexes: list[int],
        calls: list[_RenewalCall],
        places: list[list[int]],
    ) -> None:
        for start in range(0, len(indexes), RENEWALS_PER_CALL):
            chunk = indexes[start : start + RENEWALS_PER_CALL]
            keys = [key for index in chunk for key in self.keys.renewal_keys(renewals[index].name)]
            args: list[str | int] = []
            for index in chunk:
                args += [renewals[index].owner, max(1, round(renewals[index].ttl * 1000))]
            calls.append((address, keys, args))
            places.append(chunk)

    async def _send_renewals(self, calls: list[_RenewalCall], load: bool) -> list[Any]:
        """Each call's reply (or error reply): every call for one connection written at once
        (after SCRIPT LOAD if ``load``), then the replies read, connection by connection."""
        sha = self._renew_all_sha
        by_address: dict[tuple[str, int] | None, list[int]] = {}
        for index, (address, _keys, _args) in enumerate(calls):
            by_address.setdefault(address, []).append(index)
        replies: list[Any] = [None] * len(calls)
        borrowed: list[tuple[ConnectionPool, Any, list[int]]] = []
        used: dict[tuple[str, int] | None, ConnectionPool] = {}
        failed = True
        try:
            for address, indexes in by_address.items():
                pool = self._renewal_pools.get(address)
                if pool is None:
                    pool = self._renewal_pools[address] = self._pool(address)
                used[address] = pool
                connection = await self._bound.borrow(pool)
                borrowed.append((pool, connection, indexes))
                commands: list[tuple[Any, ...]] = (
                    [("SCRIPT", "LOAD", lua.RENEW_ALL)] if load else []
                )
                commands += [
                    ("EVALSHA", sha, len(calls[i][1]), *calls[i][1], *calls[i][2]) for i in indexes
                ]
                await connection.send_packed_command(
                    connection.pack_commands(commands), check_health=False
                )
            for _pool, connection, indexes in borrowed:
                if load:
                    await self._bound.read(connection)  # the SHA-1, known already
                for index in indexes:
                    try:
                        replies[index] = await self._bound.read(connection)
                    except redis_errors.ResponseError as error:  # read whole: still in step
                        replies[index] = error
            failed = False
        finally:
            for pool, connection, _indexes in borrowed:
                if failed:  # replies may still be on their way: nobody may read them as theirs
                    await connection.disconnect()
                await pool.release(connection)
            if failed:
                # A pool's connections keep the timeouts they were made with and reconnect
                # with them: the next call makes new ones, with the time it has left.
                for address, pool in used.items():
                    del self._renewal_pools[address]
                    with contextlib.suppress(redis_errors.RedisError, OSError):
                        await pool.disconnect()
        return replies

    async def release(self, name: str, owner: str) -> bool:
        # a grant handed over that its waiter gives back without taking it
        self.wakeups.handoffs.forget(name, owner)
        keys = self._lock_keys(name)
        args = [owner, self._channel_prefix, name, *self._wake_args]
        return bool(await self._run(name, self._release, keys, args))

    def watch(self, name: str, owner: str) -> AsyncRedisWatch:
        return AsyncRedisWatch(self, name, owner)

    def watch_state(self, name: str) -> AsyncRedisStateWatch:
        return AsyncRedisStateWatch(self, name)

    async def mark_watched(self, name: str) -> None:
        """Say, for :data:`WATCHED_MS`, that the lock's state is watched (the scripts publish
        its changes while the marker lives)."""
        key = self.keys.watched(name)
        await self._call(name, lambda: self.client.set(key, b"1", px=WATCHED_MS))

    async def inspect(self, name: str) -> LockState:
        keys = [self.keys.entries(name)]
        raw = await self._call(name, lambda: self._inspect(keys, []))
        now_ms, malformed = int(raw[0]), int(raw[1])
        if malformed:
            _log.warning(
                "lock %r: %d entries of its Redis hash do not parse (written by hand, by "
                "another program, by a bug); its next grant or release drops them",
                name,
                malformed,
            )
        entries = []
        for index in range(2, len(raw), 2):
            owner = raw[index].decode() if isinstance(raw[index], bytes) else raw[index]
            value = raw[index + 1]
            value = value.decode() if isinstance(value, bytes) else value
            entries.append(lua.parse_entry(owner, value))
        state = LockStateBuilder(name)
        state.malformed = malformed
        # holders in grant order: a token grows with every grant
        for entry in sorted(entries, key=lambda entry: entry.token or 0):
            lapsed = entry.lapsed(now_ms)
            # a lapsed grant's time left is its delay's
            ends_ms = entry.expires_ms + entry.delay_ms if lapsed else entry.expires_ms
            state.add(
                token=entry.token,
                shared=entry.shared,
                limit=entry.limit,
                expires_in=(ends_ms - now_ms) / 1000,
                holder=entry.holder,
                lapsed=lapsed,
            )
        return state.build()

    async def lock_names(self) -> set[str]:
        names = set()
        async for key in self._scan():
            name = self.keys.name_of(key.decode() if isinstance(key, bytes) else key)
            if name is not None:
                names.add(name)
        return names

    async def _scan(self) -> AsyncIterator[Any]:
        with translate_errors(self.url):
            async with self._gate:
                async for key in self.client.scan_iter(
                    match=self.keys.entries_pattern(), count=500
                ):
                    yield key

    async def force_release(self, name: str, note: str) -> int:
        """Remove every grant of ``name``; leave ``note`` for each evicted holder, where
        ``evicted`` finds it until that holder's lease would have run out (and a little
        longer: ``lua.EVICTED_GRACE_MS``). Returns how many live grants it removed."""
        keys = [*self.keys.lock_keys(name), self.keys.evicted(name), self.keys.watched(name)]
        args: list[str | int] = [
            self.keys.client_channel_prefix(),
            name,
            *self._wake_args,
            note,
            lua.EVICTED_GRACE_MS,
        ]
        return int(await self._call(name, lambda: self._force_release(keys, args)))

    async def evicted(self, name: str, owner: str) -> str | None:
        """The note a force release left when it removed ``owner``'s grant of ``name``, or
        None if none did (or its note is no longer kept)."""
        keys = [self.keys.evicted(name)]
        note = await self._call(name, lambda: self._evicted(keys, [owner]))
        if note is None:
            return None
        return note.decode() if isinstance(note, bytes) else str(note)

    async def close(self) -> None:
        await self.wakeups.close()
        # each on its own: one failing must not leave the others open; the kept connection
        # goes back to its pool before the pool is closed
        direct, self._direct = self._direct, None
        for client in (direct, self.client, self.pubsub_client):
            if client is None:
                continue
            with contextlib.suppress(redis_errors.RedisError, OSError):
                await client.aclose()
        for pool in self._renewal_pools.values():
            with contextlib.suppress(redis_errors.RedisError, OSError):
                await pool.disconnect()
        await self.closings.finish()
