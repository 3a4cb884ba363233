"""``zookeeper://``: locks in ZooKeeper (extra ``tumbler[zookeeper]``, client: kazoo).

URL grammar::

    zookeeper://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/BASE/PATH][?OPTIONS]

The hosts are the ensemble's members (port 2181 by default); the path is the node under which
lock nodes live (default ``/tumbler``). Options: ``session_timeout`` (seconds, default 10),
``connect_timeout`` (seconds to wait for the first connection, default 10) and
``request_timeout`` (seconds any one call may wait for the server, default 5). With
``USER:PASSWORD`` the client authenticates with the ``digest`` scheme and every node it creates
is readable and writable by that user only; a client lacking rights on existing nodes gets
``PermissionDenied``.

Node layout
    Lock ``name`` is the container node ``BASE/<name, percent-encoded>``. Each acquisition
    creates one ephemeral sequential child, named ``_c_<owner hash>-<kind><sequence>`` where
    kind is ``lock-`` (exclusive: a mutex or a write lock), ``__READ__`` (a read lock) or
    ``sem-<permits>-`` (a semaphore). The ``_c_<id>-`` prefix is the protection mode of
    Curator: a create whose reply was lost is found again by its owner hash on the next try
    rather than left behind as an orphan that blocks the line. The node's data is JSON with
    the holder's description and lease, for ``tumbler status``. The lock node is a
    *container* (ZooKeeper 3.5.3 and newer), which the server deletes once its last child is
    gone, so lock names that are no longer used do not pile up.

Who holds the lock
    Grants follow the order of the sequence numbers, as in Curator's recipes: an exclusive
    entry holds the lock when no entry is ahead of it; a read entry when no exclusive entry is
    ahead; a semaphore entry when fewer than ``permits`` entries are ahead. An entry never
    loses that position (entries only ever leave the line ahead of it), so the decision made
    from one read of the children stays true. Every request is served in arrival order
    (``fair`` makes no difference here), and a waiter is woken by a watch on exactly the entry
    that blocks it (for a mutex its predecessor, for a reader the nearest writer ahead), so a
    release wakes one waiter, not all of them. The first semaphore waiter watches the line; the
    ones behind it watch their predecessor, which touches its node when it is granted.

Fencing tokens
    The token of a grant is the creation zxid (``czxid``) of its entry: ZooKeeper numbers every
    change of the ensemble in one increasing sequence that survives restarts and leader
    elections, and grants follow creation order, so tokens strictly increase per name, also
    after the lock node was deleted and created again (its sequence numbers restart then).

Sessions and leases
    An entry lives as long as the client's session. The session ends when the client closes
    it, or when the ensemble has heard nothing from the client for ``session_timeout`` (the
    server may narrow the timeout to its ``minSessionTimeout``..``maxSessionTimeout``; the
    negotiated value is used). A lock's ``ttl`` is therefore capped at the session timeout:
    ``hold.ttl`` is ``min(ttl, session timeout)``. A renewal checks that the entry still exists,
    which also shows the session was alive when it was read. Without renewals the client
    deletes its own entry when the lease runs out; if the client dies, the ensemble deletes
    it when the session expires, so a dead holder frees its locks after ``session_timeout``,
    whatever their ``ttl``.

How a hold can be lost here
    When the connection drops (kazoo's SUSPENDED), the hold is *in doubt*: ``hold.held`` is
    False and ``hold.in_doubt`` True until a renewal on the reconnected session confirms it.
    When the session expires (LOST), every hold of the client is lost at once (``on_lost``,
    ``LockLost``). An operator's ``force_release`` deletes the entries; their holders learn it
    at their next renewal. A renewal is a read answered by the server the client is connected
    to; a member cut off from the quorum stops serving within ``syncLimit`` ticks, well before
    sessions it hosted can expire at the leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar
from urllib.parse import quote, unquote

from kazoo import exceptions as kazoo_errors  # the driver: without it, MissingDependency
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import Create2

from .._core import Entry
from .._url import BackendURL
from ..errors import BackendUnavailable, InvalidURL, PermissionDenied
from ._options import host_port, seconds

if TYPE_CHECKING:
    from ._async.zookeeper import AsyncZooKeeperBackend
    from ._sync.zookeeper import ZooKeeperBackend

T = TypeVar("T")

DEFAULT_BASE = "/tumbler"
DEFAULT_PORT = 2181
_OPTIONS = ("session_timeout", "connect_timeout", "request_timeout")


@contextlib.contextmanager
def translate_errors(url: str, name: str | None = None) -> Iterator[None]:
    """Convert kazoo's errors to tumbler's at this one edge, keeping the cause."""
    try:
        yield
    except (kazoo_errors.NoAuthError, kazoo_errors.AuthFailedError) as error:
        raise PermissionDenied(
            f"ZooKeeper refused access ({type(error).__name__}): the URL's user lacks rights "
            "on the lock nodes, or gave wrong credentials",
            lock_name=name,
            backend=url,
        ) from error
    except (KazooTimeoutError, kazoo_errors.ConnectionLoss, kazoo_errors.SessionExpiredError) as e:
        raise BackendUnavailable(
            f"cannot reach ZooKeeper: {type(e).__name__} {e}".rstrip(), lock_name=name, backend=url
        ) from e
    except kazoo_errors.ZookeeperStoppedError as error:
        raise BackendUnavailable(
            "the ZooKeeper client is closed", lock_name=name, backend=url
        ) from error
    except kazoo_errors.KazooException as error:
        raise BackendUnavailable(
            f"ZooKeeper error: {type(error).__name__} {error}".rstrip(),
            lock_name=name,
            backend=url,
        ) from error


@dataclass(frozen=True)
class ZooKeeperConfig:
    """A parsed ``zookeeper://`` URL: what both flavours need to connect."""

    url: str  # redacted
    hosts: tuple[tuple[str, int], ...]
    base: str
    session_timeout: float
    connect_timeout: float
    request_timeout: float
    #: ``user:password`` for the digest scheme (never log this)
    digest: str | None = field(repr=False)

    @property
    def connect_string(self) -> str:
        return ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.hosts)


def parse_config(url: BackendURL) -> ZooKeeperConfig:
    url.allow_options(_OPTIONS)
    hosts = tuple(host_port(part, url, DEFAULT_PORT) for part in url.hosts.split(",") if part)
    if not hosts:
        hosts = (("localhost", DEFAULT_PORT),)
    base = "/" + url.path.strip("/") if url.path.strip("/") else DEFAULT_BASE
    for part in base.split("/")[1:]:
        if part in ("", ".", "..") or base == "/zookeeper" or base.startswith("/zookeeper/"):
            raise InvalidURL(f"bad base path {base!r}", backend=url.redacted)
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in base):
        raise InvalidURL("the base path has control characters", backend=url.redacted)
    if url.password is not None and not url.username:
        raise InvalidURL("a password needs a user name: USER:PASSWORD@", backend=url.redacted)
    digest = None if url.username is None else f"{url.username}:{url.password or ''}"
    session_timeout = url.option("session_timeout", seconds, 10.0)
    request_timeout = url.option("request_timeout", seconds, 5.0)
    return ZooKeeperConfig(
        url=url.redacted,
        hosts=hosts,
        base=base,
        session_timeout=session_timeout,
        connect_timeout=url.option("connect_timeout", seconds, 10.0),
        request_timeout=request_timeout,
        digest=digest,
    )


# --------------------------------------------------------------------------------------------
# Node layout


class CreateContainer(Create2):
    """kazoo has no call for ZooKeeper's container nodes: its ``create2`` request, sent with the
    container opcode (19) and flag (4), makes one; the reply is create2's (path and stat)."""

    type = 19


CONTAINER_FLAG = 4
EPHEMERAL_SEQUENTIAL_FLAGS = 3

# ZooKeeper refuses these in node names; "%" is escaped so that decoding is exact
_SAFE = "-_~!$&'()*+,;=:@"


def encode_name(name: str) -> str:
    """The node name of lock ``name``: percent-encoded UTF-8, never ``.`` or ``..``."""
    encoded = quote(name, safe=_SAFE)
    if encoded in (".", ".."):
        encoded = encoded.replace(".", "%2E")
    return encoded


def decode_name(node: str) -> str:
    return unquote(node, errors="strict")


def owner_hash(owner: str) -> str:
    """The owner as it appears in node names (32 hex digits, in place of Curator's UUID)."""
    return hashlib.sha256(owner.encode()).hexdigest()[:32]


def entry_prefix(owner: str, shared: bool, limit: int) -> str:
    """The name of a new entry before the server appends its sequence number."""
    if not shared:
        kind = "lock-"
    elif limit == 0:
        kind = "__READ__"
    else:
        kind = f"sem-{limit}-"
    return f"_c_{owner_hash(owner)}-{kind}"


class Contender(NamedTuple):
    """One child of a lock node, parsed."""

    node: str
    #: the owner hash, or the protection id of a Curator client, or "" if unprotected
    owner: str
    seq: int
    shared: bool
    limit: int

    def entry(self) -> Entry:
        return Entry(self.owner, self.seq, self.shared, self.limit, True, None)


# Curator's kinds too: "lock-" (InterProcessMutex), "__READ__"/"__WRIT__" (its read/write lock)
_CHILD = re.compile(
    r"^(?:_c_(?P<owner>[0-9A-Za-z-]+?)-)?"
    r"(?P<kind>lock-|__READ__|__WRIT__|sem-(?P<limit>[1-9][0-9]*)-)"
    r"(?P<seq>-?[0-9]{10})$"
)


def parse_children(children: list[str]) -> list[Contender]:
    """The line of a lock node in grant order; children of other shapes are not contenders."""
    line = []
    for node in children:
        match = _CHILD.match(node)
        if match is None:
            continue
        kind = match["kind"]
        shared = kind == "__READ__" or kind.startswith("sem-")
        limit = int(match["limit"]) if match["limit"] else (0 if shared else 1)
        line.append(Contender(node, match["owner"] or "", int(match["seq"]), shared, limit))
    line.sort(key=lambda contender: contender.seq)
    return line


def entry_data(holder: str, ttl: float, granted: bool = False) -> bytes:
    record: dict[str, Any] = {"holder": holder, "ttl": ttl}
    if granted:
        record["granted"] = True
    return json.dumps(record, separators=(",", ":")).encode()


def read_entry_data(data: bytes) -> tuple[str, float]:
    """The holder description and lease of an entry (foreign entries: what can be shown)."""
    try:
        record = json.loads(data)
        return str(record["holder"]), float(record["ttl"])
    except (ValueError, KeyError, TypeError):
        text = data.decode("utf-8", "replace") if data else ""
        return (text or "(not a tumbler client)"), 0.0


# --------------------------------------------------------------------------------------------
# Waiting for kazoo's results: the one place where the two flavours differ


def kazoo_result(result: Any, timeout: float) -> Any:
    """The value of a kazoo ``*_async`` call, waiting at most ``timeout`` seconds."""
    return result.get(timeout=timeout)


async def kazoo_aresult(result: Any, timeout: float) -> Any:
    """The value of a kazoo ``*_async`` call, awaited without blocking the event loop.

    kazoo completes the call on its own thread; the completion is handed to the loop. Timing
    out (``KazooTimeoutError``) or being cancelled abandons the call, not kazoo's connection.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(done: Any) -> None:
        if future.done():
            return
        try:
            future.set_result(done.get_nowait())
        except BaseException as error:  # kazoo's error for the call: the caller's to handle
            future.set_exception(error)

    def on_done(done: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(settle, done)

    def expire() -> None:
        if not future.done():
            future.set_exception(KazooTimeoutError(f"no answer within {timeout} s"))

    timer = loop.call_later(timeout, expire)
    result.rawlink(on_done)
    try:
        return await future
    finally:
        timer.cancel()


def run_blocking(function: Callable[..., T], *args: Any) -> T:
    """Call one of kazoo's blocking methods (start, stop)."""
    return function(*args)


async def arun_blocking(function: Callable[..., T], *args: Any) -> T:
    """Call one of kazoo's blocking methods (start, stop) off the event loop."""
    return await asyncio.to_thread(function, *args)


def open_sync(url: BackendURL) -> ZooKeeperBackend:
    from ._sync.zookeeper import ZooKeeperBackend

    backend = ZooKeeperBackend(parse_config(url))
    try:
        backend.start()
    except BaseException:
        backend.close()
        raise
    return backend


async def open_async(url: BackendURL) -> AsyncZooKeeperBackend:
    from ._async.zookeeper import AsyncZooKeeperBackend

    backend = AsyncZooKeeperBackend(parse_config(url))
    try:
        await backend.start()
    except BaseException:
        await backend.close()
        raise
    return backend
