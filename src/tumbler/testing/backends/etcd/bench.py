"""The bench's view of etcd: the Python etcd locks of peer-bench.md beside tumbler's rows, the
floor, the server's request and watch-event counters, its leases, and the server the bench
starts.

The peers, on the same server as tumbler's rows:

- ``etcd-sdk-python``, the reference of the ``x peer`` column: the ``Lock`` of
  etcd-sdk-python (imported as ``pyetcd``), over gRPC. Each attempt grants a lease and puts
  the key if it has no create revision yet; a waiter watches the key for its deletion, so
  every waiter wakes at each release. The leases it grants are never revoked. Its generated
  protobuf code needs ``protobuf``, which the package does not declare (the ``dev`` extra
  lists it).
- ``tooz-etcd3gw``: tooz's ``etcd3+http://`` driver (etcd3gw, over the JSON gateway),
  ``blocking=True``: the same transaction, retried with an exponential pause of up to a
  second; a lease per attempt, never revoked.

Their drivers are imported in ``open()``, inside the bench's workers: importing this module
needs neither.

The floor (``etcd-floor-sync``, ``etcd-floor-async``): the round trips a lock on etcd cannot
do without, through the client tumbler's backend uses (the gateway client, over the
backend's HTTP seam on h11), that exclude nothing. A session grants one lease when it opens
and revokes it when it closes (and keeps it alive before an acquire once a third of it has
gone, as a lock's client must); acquire is one transaction that puts the session's key with
that lease if the key is absent and reads the lock's line of keys by create revision (the
key's place in it is what a grant decides on), and release is one transaction that deletes
the key if its create revision is still the one the acquire made. The blocking floor uses
``Gateway``, the asyncio one ``AsyncGateway``; the ``x floor`` column divides by the one of
the row's flavour. ``etcd-grpc-floor-sync``, run only when named, sends the same two
transactions over gRPC (etcd-sdk-python's channel and generated messages): what a gRPC
transport would cost, shown beside the peer (``same_client`` False: no row is divided by it).

The server's figures, read over HTTP from every member the URL names (summed): the request
counter (``request_count``) is the gRPC messages the members have received
(``grpc_server_msg_received_total`` of ``/metrics``, summed over the methods), which counts a
call through the JSON gateway as one too (the gateway hands it on as a gRPC call), each
message on a stream (a keep-alive, a watch's creation) as one, and a reading of ``/metrics``
not at all; the pushes (``push_count``) are the watch events the members have sent to
watchers (``etcd_debugging_mvcc_events_total``: one per changed key a watch sees), so a lock
that wakes only the next waiter at a release shows about one per acquisition and one that
wakes every waiter about one per waiter; ``leases`` is the ids of the leases the cluster
holds (``/v3/lease/leases``), from which the bench counts those a run leaves behind.

The bench's server is one etcd member with etcd's own write-ahead log, fsynced at every
commit, as in production (there is no setting that turns it off here); its keys live under
``/bench``. The test targets' servers may be set up for speed, so the bench starts its own
under the target's name (``etcd``).
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tumbler.testing.bench import (
    AsyncContender,
    AsyncSession,
    StoreBench,
    SyncContender,
    SyncSession,
    TimeoutLockSession,
    tooz_session,
)
from tumbler.testing.targets import TestTarget

__all__ = [
    "BENCH",
    "EtcdBench",
    "EtcdFloor",
    "EtcdFloorAsync",
    "EtcdGrpcFloor",
    "EtcdSdkPythonLock",
    "ToozEtcd3gw",
]

#: how long a reading of the server's figures may take before the bench goes without it
_READING_TIMEOUT = 5.0
#: the metric that counts the requests a member has received, over its methods
_RECEIVED = "grpc_server_msg_received_total"
#: the metric that counts the watch events a member has sent to watchers
_EVENTS_SENT = "etcd_debugging_mvcc_events_total"


def _config(url: str) -> Any:
    from tumbler._url import parse_url
    from tumbler.backends.etcd.common import parse_config

    return parse_config(parse_url(url))


def _host_port(endpoint: str) -> tuple[str, int]:
    """``http://HOST:PORT`` as a host and a port (an IPv6 host without its brackets)."""
    from urllib.parse import urlsplit

    from tumbler.backends.etcd.common import DEFAULT_PORT

    parts = urlsplit(endpoint)
    return parts.hostname or "localhost", parts.port or DEFAULT_PORT


def _pyetcd_client(config: Any) -> Any:
    """An etcd-sdk-python client (gRPC) of the URL's first member, with its credentials."""
    import pyetcd

    host, port = _host_port(config.endpoints[0])
    user, password = config.credentials or (None, None)
    return pyetcd.client(
        host=host, port=port, timeout=config.request_timeout, user=user, password=password
    )


# -- the peers ------------------------------------------------------------------------------


@dataclass(frozen=True)
class EtcdSdkPythonLock(SyncContender):
    """etcd-sdk-python's ``Lock``, over gRPC, on the URL's first member."""

    name: ClassVar[str] = "etcd-sdk-python"
    mechanism: ClassVar[str] = (
        "pyetcd client.lock(name, ttl).acquire(timeout): lease grant + txn (create "
        "revision 0 -> put with the lease) over gRPC; a waiter watches the key for a delete "
        "(every waiter wakes at each release); its leases are never revoked"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (
        ("etcd-sdk-python", "etcd-sdk-python"),
        ("grpcio", "grpcio"),
        ("protobuf", "protobuf"),
    )

    def open(self, lock_name: str) -> SyncSession:
        client = _pyetcd_client(_config(self.url))
        try:
            lock = client.lock(f"bench-{lock_name}", ttl=math.ceil(self.options.ttl))
        except BaseException:
            client.close()
            raise
        return TimeoutLockSession(lock, lock_name, self.options.timeout, client.close)


@dataclass(frozen=True)
class ToozEtcd3gw(SyncContender):
    """tooz's etcd driver (``etcd3+http://``: etcd3gw, over the JSON gateway)."""

    name: ClassVar[str] = "tooz-etcd3gw"
    mechanism: ClassVar[str] = (
        "tooz etcd3+http:// get_lock(name).acquire(blocking=True): lease grant + txn "
        "(create revision 0 -> put with the lease) over the JSON gateway (etcd3gw), retried "
        "with an exponential pause of up to 1 s; its leases are never revoked"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (
        ("tooz", "tooz"),
        ("etcd3gw", "etcd3gw"),
    )

    def open(self, lock_name: str) -> SyncSession:
        config = _config(self.url)
        host, port = _host_port(config.endpoints[0])
        # lock_timeout is the TTL of the lease each attempt grants
        url = f"etcd3+http://{host}:{port}?lock_timeout={math.ceil(self.options.ttl)}"
        return tooz_session(url, lock_name)


# -- the floor ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FloorPlan:
    """What a floor session sends: its key, its lock's line, and the two transactions."""

    key: bytes
    line: bytes

    @classmethod
    def make(cls, prefix: bytes, lock_name: str) -> _FloorPlan:
        line = prefix + f"bench-floor/{lock_name}/".encode()
        return cls(line + uuid.uuid4().hex.encode(), line)

    def acquire(self, lease: int) -> tuple[list[Any], list[Any], list[Any]]:
        from tumbler.backends.etcd.wire import compare, put, read_by_creation

        read_line = read_by_creation(self.line)
        return (
            [compare(self.key, "CREATE", 0)],
            [put(self.key, b"floor", lease), read_line],
            [read_line],
        )

    def created(self, responses: list[Any]) -> int:
        """The key's create revision, from the line the acquire read."""
        from tumbler.backends.etcd.wire import ranged

        for response in responses:
            for kv in ranged(response):
                if kv["key"] == self.key:
                    return int(kv["create_revision"])
        raise RuntimeError(f"the floor's key {self.key!r} is not in its line")

    def release(self, revision: int) -> tuple[list[Any], list[Any], list[Any]]:
        from tumbler.backends.etcd.wire import compare, delete

        return [compare(self.key, "CREATE", revision)], [delete(self.key)], []


def _gateway_options(config: Any) -> dict[str, Any]:
    from tumbler.backends.kit.tls import tls_context

    tls = None if config.tls is None else tls_context(config.tls, config.url)
    return {"tls": tls, "credentials": config.credentials, "timeout": config.request_timeout}


class _FloorSession:
    """A blocking floor session: its lease kept alive before an acquire once a third of it
    has gone, its key put and deleted; the transport's methods say how."""

    def __init__(self, plan: _FloorPlan, lease: int, ttl: int) -> None:
        self._plan = plan
        self._lease = lease
        self._ttl = ttl
        self._kept = time.monotonic()
        self._revision: int | None = None

    def acquire(self) -> None:
        if time.monotonic() - self._kept > self._ttl / 3:
            self._kept = time.monotonic()
            self._keep_alive()
        self._revision = self._put()

    def release(self) -> None:
        assert self._revision is not None, "released before acquired"
        if not self._delete(self._revision):
            raise RuntimeError(f"the floor's key {self._plan.key!r} was not there to delete")
        self._revision = None

    def close(self) -> None:
        try:
            self._revoke()
        finally:
            self._close()

    def _refused(self) -> RuntimeError:
        return RuntimeError(f"the floor's key {self._plan.key!r} is there already")

    def _keep_alive(self) -> None:
        raise NotImplementedError

    def _put(self) -> int:
        """Put the key if absent and read the line: the key's create revision."""
        raise NotImplementedError

    def _delete(self, revision: int) -> bool:
        """Delete the key if its create revision is ``revision``: whether it did."""
        raise NotImplementedError

    def _revoke(self) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError


class _GatewayFloorSession(_FloorSession):
    def __init__(self, gateway: Any, plan: _FloorPlan, lease: int, ttl: int) -> None:
        super().__init__(plan, lease, ttl)
        self._gateway = gateway

    def _keep_alive(self) -> None:
        self._gateway.keep_alive(self._lease)

    def _put(self) -> int:
        succeeded, _revision, responses = self._gateway.txn(*self._plan.acquire(self._lease))
        if not succeeded:
            raise self._refused()
        return self._plan.created(responses)

    def _delete(self, revision: int) -> bool:
        succeeded, _revision, _responses = self._gateway.txn(*self._plan.release(revision))
        return bool(succeeded)

    def _revoke(self) -> None:
        self._gateway.revoke(self._lease)

    def _close(self) -> None:
        self._gateway.close()


@dataclass(frozen=True)
class EtcdFloor(SyncContender):
    """The floor's two transactions on one blocking gateway client."""

    name: ClassVar[str] = "etcd-floor-sync"
    mechanism: ClassVar[str] = (
        "floor: one lease per client (granted at open, revoked at close); acquire is one txn "
        "(key absent -> put it with the lease; the lock's line read by create revision), "
        "release one txn (create revision unchanged -> delete), through tumbler's gateway "
        "client (its HTTP seam, on h11); excludes nothing, timed uncontended only"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("h11", "h11"),)
    floor: ClassVar[bool] = True

    def open(self, lock_name: str) -> SyncSession:
        from tumbler.backends.etcd._sync.gateway import Gateway

        config = _config(self.url)
        gateway = Gateway(config.endpoints, **_gateway_options(config))
        try:
            lease, ttl = gateway.grant_lease(config.lease_ttl)
        except BaseException:
            gateway.close()
            raise
        return _GatewayFloorSession(gateway, _FloorPlan.make(config.prefix, lock_name), lease, ttl)


class _AsyncFloorSession:
    def __init__(self, gateway: Any, plan: _FloorPlan, lease: int, ttl: int) -> None:
        self._gateway = gateway
        self._plan = plan
        self._lease = lease
        self._ttl = ttl
        self._kept = time.monotonic()
        self._revision: int | None = None

    async def acquire(self) -> None:
        if time.monotonic() - self._kept > self._ttl / 3:
            self._kept = time.monotonic()
            await self._gateway.keep_alive(self._lease)
        succeeded, _revision, responses = await self._gateway.txn(*self._plan.acquire(self._lease))
        if not succeeded:
            raise RuntimeError(f"the floor's key {self._plan.key!r} is there already")
        self._revision = self._plan.created(responses)

    async def release(self) -> None:
        assert self._revision is not None, "released before acquired"
        succeeded, _revision, _responses = await self._gateway.txn(
            *self._plan.release(self._revision)
        )
        if not succeeded:
            raise RuntimeError(f"the floor's key {self._plan.key!r} was not there to delete")
        self._revision = None

    async def close(self) -> None:
        try:
            await self._gateway.revoke(self._lease)
        finally:
            await self._gateway.close()


@dataclass(frozen=True)
class EtcdFloorAsync(AsyncContender):
    """The same, on tumbler's asyncio gateway client."""

    name: ClassVar[str] = "etcd-floor-async"
    mechanism: ClassVar[str] = (
        "floor: the same through the asyncio gateway client (its HTTP seam, on h11)"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = (("h11", "h11"),)
    floor: ClassVar[bool] = True

    async def open(self, lock_name: str) -> AsyncSession:
        from tumbler.backends.etcd._async.gateway import AsyncGateway

        config = _config(self.url)
        gateway = AsyncGateway(config.endpoints, **_gateway_options(config))
        try:
            lease, ttl = await gateway.grant_lease(config.lease_ttl)
        except BaseException:
            await gateway.close()
            raise
        return _AsyncFloorSession(gateway, _FloorPlan.make(config.prefix, lock_name), lease, ttl)


class _GrpcFloorSession(_FloorSession):
    """The floor's two transactions over gRPC, built with etcd-sdk-python's generated
    messages and sent through its channel's stub: what a gRPC transport would cost."""

    def __init__(self, client: Any, plan: _FloorPlan, lease: int, ttl: int) -> None:
        from pyetcd import etcdrpc
        from pyetcd.utils import prefix_range_end

        super().__init__(plan, lease, ttl)
        self._client = client
        self._rpc = etcdrpc
        line = client._build_get_range_request(
            plan.line, prefix_range_end(plan.line), sort_order="ascend", sort_target="create"
        )
        self._read_line = etcdrpc.RequestOp(request_range=line)
        self._put_key = etcdrpc.RequestOp(
            request_put=client._build_put_request(plan.key, b"floor", lease)
        )
        self._delete_key = etcdrpc.RequestOp(
            request_delete_range=client._build_delete_request(plan.key)
        )

    def _txn(self, compare: Any, success: list[Any], failure: list[Any]) -> Any:
        request = self._rpc.TxnRequest(
            compare=[compare.build_message()], success=success, failure=failure
        )
        client = self._client
        return client.kvstub.Txn(
            request, client.timeout, credentials=client.call_credentials, metadata=client.metadata
        )

    def _keep_alive(self) -> None:
        for _ in self._client.refresh_lease(self._lease):
            pass

    def _put(self) -> int:
        create = self._client.transactions.create(self._plan.key)
        reply = self._txn(create == 0, [self._put_key, self._read_line], [self._read_line])
        if not reply.succeeded:
            raise self._refused()
        for kv in reply.responses[1].response_range.kvs:
            if kv.key == self._plan.key:
                return int(kv.create_revision)
        raise RuntimeError(f"the floor's key {self._plan.key!r} is not in its line")

    def _delete(self, revision: int) -> bool:
        create = self._client.transactions.create(self._plan.key)
        return bool(self._txn(create == revision, [self._delete_key], []).succeeded)

    def _revoke(self) -> None:
        self._client.revoke_lease(self._lease)

    def _close(self) -> None:
        self._client.close()


@dataclass(frozen=True)
class EtcdGrpcFloor(SyncContender):
    """The floor's two transactions over gRPC (etcd-sdk-python's channel and generated
    messages), not through tumbler's client: run only when named."""

    name: ClassVar[str] = "etcd-grpc-floor-sync"
    mechanism: ClassVar[str] = (
        "floor over another transport: the same two txns as etcd-floor-sync, sent over gRPC "
        "through etcd-sdk-python's channel and generated messages (what a gRPC transport "
        "would cost); not the x floor of tumbler's rows; excludes nothing, timed uncontended "
        "only, run only when named"
    )
    libraries: ClassVar[tuple[tuple[str, str], ...]] = EtcdSdkPythonLock.libraries
    floor: ClassVar[bool] = True
    default: ClassVar[bool] = False
    same_client: ClassVar[bool] = False

    def open(self, lock_name: str) -> SyncSession:
        config = _config(self.url)
        client = _pyetcd_client(config)
        try:
            lease = client.lease(config.lease_ttl)
            plan = _FloorPlan.make(config.prefix, lock_name)
            return _GrpcFloorSession(client, plan, lease.id, config.lease_ttl)
        except BaseException:
            client.close()
            raise


# -- the server -----------------------------------------------------------------------------


def _get(url: str, path: str) -> list[Any] | None:
    """GET ``path`` from each member ``url`` names: the replies (text, or JSON for a JSON
    reply); None if one cannot be read (down, or the URL unusable)."""
    try:
        import httpx

        config = _config(url)
        tls = _gateway_options(config)["tls"]
        replies = []
        with httpx.Client(verify=True if tls is None else tls, timeout=_READING_TIMEOUT) as client:
            for endpoint in config.endpoints:
                reply = client.get(f"{endpoint}{path}")
                reply.raise_for_status()
                is_json = reply.headers.get("content-type", "").startswith("application/json")
                replies.append(reply.json() if is_json else reply.text)
        return replies
    except Exception:  # the bench goes on without the figure
        return None


def _metric(url: str, name: str) -> int | None:
    """The metric ``name`` of ``/metrics`` summed over its labels and the URL's members."""
    pages = _get(url, "/metrics")
    if pages is None:
        return None
    total = 0.0
    found = False
    for page in pages:
        for line in str(page).splitlines():
            metric, _, value = line.rpartition(" ")
            if metric == name or metric.startswith(name + "{"):
                total += float(value)
                found = True
    return round(total) if found else None


class _Running:
    def __init__(self, directory: Path) -> None:
        from .server import EtcdServer

        self.server = EtcdServer(directory).start()
        self._urls = 0

    def fresh_url(self) -> str:
        self._urls += 1
        path = "/bench" if self._urls == 1 else f"/bench-{self._urls}"
        return f"etcd://{self.server.host}:{self.server.port}{path}"

    def close(self) -> None:
        self.server.close()


@dataclass(frozen=True)
class EtcdBench(StoreBench):
    """etcd-sdk-python and tooz, the floors, ``/metrics`` for the server's figures, its
    leases, and the server with its log fsynced."""

    def request_count(self, url: str) -> int | None:
        """The gRPC messages the URL's members have received, a gateway call one of them
        (``grpc_server_msg_received_total``, summed); a reading adds none."""
        return _metric(url, _RECEIVED)

    def push_count(self, url: str) -> int | None:
        """The watch events the URL's members have sent to watchers
        (``etcd_debugging_mvcc_events_total``, summed)."""
        return _metric(url, _EVENTS_SENT)

    def leases(self, url: str) -> frozenset[str] | None:
        """The ids of the leases the cluster holds now."""
        try:
            from tumbler.backends.etcd._sync.gateway import Gateway

            config = _config(url)
            gateway = Gateway(config.endpoints, **_gateway_options(config))
            try:
                return frozenset(str(lease) for lease in gateway.leases())
            finally:
                gateway.close()
        except Exception:  # the bench goes on without the figure
            return None

    def version(self, url: str) -> str | None:
        """``etcd 3.4.23``, from the first member's ``/version``."""
        replies = _get(url, "/version")
        if not replies or not isinstance(replies[0], dict):
            return None
        number = replies[0].get("etcdserver")
        return None if number is None else f"etcd {number}"

    def lease_url(self, url: str, ttl: float) -> str:
        """``url`` with a client lease of ``ttl`` (in whole seconds, at least etcd's least):
        every hold of a client lives with its lease."""
        from tumbler.backends.etcd.common import MIN_LEASE_TTL

        seconds = max(MIN_LEASE_TTL, math.ceil(ttl))
        return f"{url}{'&' if '?' in url else '?'}lease_ttl={seconds}"


BENCH = EtcdBench(
    peers=(EtcdSdkPythonLock, ToozEtcd3gw),
    # etcds:// needs the TLS files the peers are not given
    schemes=("etcd",),
    targets=(TestTarget("etcd", _Running),),
    floors=(EtcdFloor, EtcdFloorAsync, EtcdGrpcFloor),
    reference=EtcdSdkPythonLock.name,
)
