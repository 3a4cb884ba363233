"""The bench's view of Redlock: pottery's ``Redlock`` beside tumbler's rows on the same
masters, the floor, and the masters' request counters and version.

The peer, ``pottery-Redlock`` (the reference of the ``x peer`` column): pottery's ``Redlock``
over one ``redis.Redis`` per master of the URL. An acquire sends ``SET NX PX`` to every master
from a thread pool it makes for the call and is granted once a majority said yes within the
lease (less its drift allowance); a waiter retries after a random pause of up to 0.2 s. A
release runs its Lua compare-and-delete on every master the same way. Its driver is imported
in ``open()``, inside the bench's workers: importing this module needs neither it nor redis-py.

The floor (``redlock-floor-sync``, ``redlock-floor-async``): what a grant and a release fanned
out over the masters cost at least through redis-py, excluding nothing. Acquire writes one
``EVALSHA`` of a trivial script (one key, one argument, as a lock's call has) on the
connection of every master, and only then reads the N replies; release does the same again.
The masters work on their requests at once, so a pair costs about two of the slowest master's
round trips, plus redis-py's cost of N commands each way: what a client that waits for every
master (or for the majority, which on idle loopback masters is not sooner) pays at the least.
The blocking floor uses redis-py's connections, the asyncio one ``redis.asyncio``'s; the
``x floor`` column divides by the one of the row's flavour.

The figures: the request counter is ``total_commands_processed`` of ``INFO stats`` summed
over the masters (a Lua script's commands count one by one, as on one Redis server), and the
version is the first master's, with how many masters there are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from tumbler.testing.bench import (
    AsyncContender,
    AsyncSession,
    StoreBench,
    SyncContender,
    SyncSession,
    TimeoutLockSession,
)

from ..redis.bench import unannounced

__all__ = [
    "BENCH",
    "PotteryRedlock",
    "RedlockBench",
    "RedlockFloor",
    "RedlockFloorAsync",
    "master_options",
]

#: the URL schemes the peer and the floors take: the Redlock backend's own
PEER_SCHEMES = ("redlock", "redlocks")
#: the floor's script: one key and one argument, as a lock's call has, and nothing done
FLOOR_SCRIPT = "return 1"
_DEFAULT_PORT = 6379


def master_options(url: str) -> list[dict[str, Any]]:
    """Keyword arguments for one ``redis.Redis`` (or ``redis.asyncio.Redis``) per master of a
    ``redlock[s]://`` URL, in the URL's order: its host and port, the database, the user and
    password, the timeouts, and on ``redlocks://`` the TLS files. The options only tumbler
    reads (the key prefix, ``node_timeout``, ...) are left out."""
    from tumbler._url import parse_url
    from tumbler.backends.kit.options import flag, host_port, seconds

    parsed = parse_url(url)
    common: dict[str, Any] = {}
    database = parsed.path.strip("/") or parsed.query.get("db", "")
    if database:
        common["db"] = int(database)
    if parsed.username:
        common["username"] = parsed.username
    if parsed.password is not None:
        common["password"] = parsed.password
    query = parsed.query
    if "socket_timeout" in query:
        common["socket_timeout"] = seconds(query["socket_timeout"])
    if "connect_timeout" in query:
        common["socket_connect_timeout"] = seconds(query["connect_timeout"])
    if parsed.scheme == "redlocks":
        common["ssl"] = True
        for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
            if name in query:
                common[name] = query[name]
        if "ssl_check_hostname" in query:
            common["ssl_check_hostname"] = flag(query["ssl_check_hostname"])
    masters = []
    for address in parsed.hosts.split(","):
        host, port = host_port(address, parsed, _DEFAULT_PORT)
        masters.append({"host": host, "port": port, **common})
    return masters


def _sum_over_masters(url: str, read: Any) -> list[Any] | None:
    """``read(client)`` on a plain client of each master of ``url``; None for other URLs, or
    if any master cannot be read (the bench goes on without the figure then)."""
    from urllib.parse import urlsplit

    if urlsplit(url).scheme.lower() not in PEER_SCHEMES:
        return None
    try:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        found = []
        for options in master_options(url):
            # no retries: a master that does not answer leaves the figure out at once
            client = redis.Redis(**options, **unannounced(), retry=Retry(NoBackoff(), 0))
            try:
                found.append(read(client))
            finally:
                client.close()
        return found
    except Exception:
        return None


@dataclass(frozen=True)
class RedlockBench(StoreBench):
    """pottery's ``Redlock`` and the floors, and ``INFO`` of every master for the figures."""

    def request_count(self, url: str) -> int | None:
        """``total_commands_processed`` of ``INFO stats``, summed over the masters. A reading
        costs each master's counter one command, counted after it has run."""
        counts = _sum_over_masters(
            url, lambda client: int(client.info("stats")["total_commands_processed"])
        )
        return None if counts is None else sum(counts)

    def version(self, url: str) -> str | None:
        """``Redis 7.0.15 x 5 masters``, and ``no persistence`` where no master saves."""
        about = _sum_over_masters(
            url,
            lambda client: (
                client.info("server")["redis_version"],
                bool(client.config_get("save").get("save"))
                or client.config_get("appendonly").get("appendonly") == "yes",
            ),
        )
        if not about:
            return None
        shown = f"Redis {about[0][0]} x {len(about)} masters"
        return shown if any(persists for _, persists in about) else f"{shown}, no persistence"


@dataclass(frozen=True)
class PotteryRedlock(SyncContender):
    """pottery's ``Redlock`` on every master of the URL."""

    name: ClassVar[str] = "pottery-Redlock"
    mechanism: ClassVar[str] = (
        "pottery Redlock(key, masters={Redis per master}, auto_release_time=ttl), "
        "acquire(timeout): SET NX PX on every master from a thread pool made per call, "
        "granted by a majority within the lease; a waiter retries after a random pause of up "
        "to 0.2 s; Lua release on every master"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (
        ("pottery", "pottery"),
        ("redis-py", "redis"),
    )

    def open(self, lock_name: str) -> SyncSession:
        import redis
        from pottery import Redlock

        clients = [redis.Redis(**options) for options in master_options(self.url)]

        def close() -> None:
            for client in clients:
                client.close()

        try:
            lock = Redlock(key=lock_name, masters=set(clients), auto_release_time=self.options.ttl)
        except BaseException:
            close()
            raise
        return TimeoutLockSession(lock, lock_name, self.options.timeout, close)


class _FloorSession:
    def __init__(self, clients: list[Any], lock_name: str) -> None:
        self._clients = clients
        self._key = f"bench-floor:{lock_name}"
        self._sha = ""
        for client in clients:
            self._sha = client.script_load(FLOOR_SCRIPT)
        # the connection of each single-connection client, written to and read directly, so
        # that every master has its request before the first reply is waited for
        self._connections = [client.connection for client in clients]

    def _fan_out(self) -> None:
        for connection in self._connections:
            connection.send_command("EVALSHA", self._sha, 1, self._key, "owner")
        for connection in self._connections:
            connection.read_response()

    def acquire(self) -> None:
        self._fan_out()

    def release(self) -> None:
        self._fan_out()

    def close(self) -> None:
        for client in self._clients:
            client.close()


@dataclass(frozen=True)
class RedlockFloor(SyncContender):
    """One ``EVALSHA`` written to every master, then the N replies read, twice per pair, on one
    blocking redis-py connection per master."""

    name: ClassVar[str] = "redlock-floor-sync"
    mechanism: ClassVar[str] = (
        "floor: EVALSHA of 'return 1' (one key, one argument) sent on the redis-py connection "
        "of every master before the first reply is read, as acquire and again as release; "
        "excludes nothing, timed uncontended only"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("redis-py", "redis"),)
    floor: ClassVar[bool] = True

    def open(self, lock_name: str) -> SyncSession:
        import redis

        clients: list[Any] = []
        try:
            for options in master_options(self.url):
                clients.append(redis.Redis(**options, single_connection_client=True))
            return _FloorSession(clients, lock_name)
        except BaseException:
            for client in clients:
                client.close()
            raise


class _AsyncFloorSession:
    def __init__(self, clients: list[Any], connections: list[Any], key: str, sha: str) -> None:
        self._clients = clients
        self._connections = connections
        self._key = key
        self._sha = sha

    async def _fan_out(self) -> None:
        for connection in self._connections:
            await connection.send_command("EVALSHA", self._sha, 1, self._key, "owner")
        for connection in self._connections:
            await connection.read_response()

    async def acquire(self) -> None:
        await self._fan_out()

    async def release(self) -> None:
        await self._fan_out()

    async def close(self) -> None:
        for client in self._clients:
            await client.aclose()


@dataclass(frozen=True)
class RedlockFloorAsync(AsyncContender):
    """The same on one ``redis.asyncio`` connection per master."""

    name: ClassVar[str] = "redlock-floor-async"
    mechanism: ClassVar[str] = (
        "floor: the same through redis.asyncio on an asyncio loop (each request written, "
        "then each reply awaited, with no task per master)"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("redis-py", "redis"),)
    floor: ClassVar[bool] = True

    async def open(self, lock_name: str) -> AsyncSession:
        import redis.asyncio

        clients: list[Any] = []
        try:
            sha = ""
            for options in master_options(self.url):
                client = redis.asyncio.Redis(**options, single_connection_client=True)
                clients.append(client)
                sha = await client.script_load(FLOOR_SCRIPT)
            connections = [client.connection for client in clients]
        except BaseException:
            for client in clients:
                await client.aclose()
            raise
        return _AsyncFloorSession(clients, connections, f"bench-floor:{lock_name}", sha)


BENCH = RedlockBench(
    peers=(PotteryRedlock,),
    schemes=PEER_SCHEMES,
    floors=(RedlockFloor, RedlockFloorAsync),
    reference=PotteryRedlock.name,
)
