"""The ZooKeeper backend (asyncio flavour, the source of the generated blocking twin).

See ``tumbler.backends.zookeeper.common`` for the URL grammar, the node layout and the guarantees.
kazoo runs its connection on threads of its own; every call here is one of its ``*_async``
requests, whose result is awaited (``kazoo_aresult``) or waited for (``kazoo_result``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from kazoo import exceptions as kazoo_errors
from kazoo.client import KazooClient, KazooState
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from ...._clock import SYSTEM_CLOCK, Clock
from ...._core import WATCH_LINE, Entry, check_limits, let_through, line_position
from ...._logs import logger
from ....errors import InvalidTimeout, PermitsMismatch
from ...contract import (
    STATE_TAG,
    Grant,
    GrantRequest,
    LockState,
    Renewal,
    SessionEvents,
    WakeHub,
)
from ...kit import AsyncBaseWatch, AsyncHubWatch, AsyncInspectEachName, LockStateBuilder
from ...kit.options import line_full
from .. import CAPABILITIES
from ..common import (
    CONTAINER_FLAG,
    EVICTED_NODE,
    FORCE_RELEASE_TRIES,
    NOTE_GRACE,
    ConnectAttempts,
    Contender,
    CreateContainer,
    DeletionWatches,
    LapsedGrant,
    OwnEntry,
    RedactingLogger,
    SessionProbe,
    TombstoneData,
    ZooKeeperConfig,
    acl_problem,
    arun_blocking,
    client_secrets,
    decode_name,
    digest_identity,
    drop_on_reply_out_of_order,
    encode_name,
    entry_data,
    entry_prefix,
    kazoo_aresult,
    node_owner,
    notes_data,
    parse_children,
    parse_tombs,
    prune_notes,
    read_entry_data,
    read_notes,
    read_tombstone,
    start_client,
    tls_connector,
    tls_context,
    tomb_node,
    tombstone_data,
    translate_errors,
)

_log = logger("tumbler.zookeeper")

#: how many lock nodes a client remembers having seen (``_remember_lock_node``)
LOCK_NODES_REMEMBERED = 10_000


class AsyncZooKeeperStateWatch(AsyncBaseWatch):
    """A state watcher's watch: a children watch on the lock's node, which fires at every
    entry made or deleted (a grant follows a deletion ahead of it; an expired session's
    entries are deleted by the server), or, while the node does not exist (it is a container,
    removed when empty), a watch for its creation.

    ZooKeeper's watches fire once: the watch is set again as it fires, before the watcher is
    woken, so that the read the watcher then makes comes after it on the session (whose
    requests the member answers in order) and no change between the two goes unseen. It is
    set again too at the backend's every wake-up of all (a new session has none of the old
    one's watches) and before a wait that finds it not set (the request that set it failed).
    """

    def __init__(self, backend: AsyncZooKeeperBackend, name: str) -> None:
        self._client = backend._client
        self._path = backend._lock_path(name)
        self._entered = False
        self._armed = False
        # one bound method, so that the watches kazoo keeps per path are one per watcher
        self._fired_callback = self._fired
        super().__init__(backend.clock, name, backend.hub, STATE_TAG)

    async def _subscribe(self) -> bool:
        self._entered = True
        self._arm()
        return False

    def _on_change(self) -> None:
        if self._entered:
            self._arm()
        super()._on_change()

    async def wait(self, timeout: float) -> None:
        if not self._armed:
            self._arm()
        await super().wait(timeout)

    def _fired(self, _event: Any) -> None:
        self._on_change()

    def _arm(self) -> None:
        """Ask for the watch (kazoo's thread may call this: it sends, and never waits)."""
        if self._closed:
            return
        self._armed = True
        listing = self._client.get_children_async(self._path, watch=self._fired_callback)
        listing.rawlink(self._listed)

    def _listed(self, result: Any) -> None:
        try:
            result.get()
        except kazoo_errors.NoNodeError:
            exists = self._client.exists_async(self._path, watch=self._fired_callback)
            exists.rawlink(self._looked)
        except Exception:  # not set (the connection is down): the next wait sets it again
            self._armed = False

    def _looked(self, result: Any) -> None:
        try:
            stat = result.get()
        except Exception:
            self._armed = False
            return
        if stat is not None:
            self._arm()  # made since the listing: watch its children


class AsyncZooKeeperBackend(AsyncInspectEachName):
    """The ZooKeeper backend contract over one kazoo client (one session)."""

    def __init__(self, config: ZooKeeperConfig) -> None:
        # first: unusable certificate files are refused before anything is made
        tls = tls_context(config)
        self.config = config
        self.url = config.url
        self.clock: Clock = SYSTEM_CLOCK
        self.hub = WakeHub()
        self.session_events = SessionEvents()
        #: the session timeout the ensemble agreed to (learnt at each connection)
        self.session_timeout = config.session_timeout
        self.max_waiters = config.max_waiters
        self.capabilities = dataclasses.replace(CAPABILITIES, max_ttl=config.session_timeout)
        acl = None
        auth = None
        #: the URL's user as ZooKeeper names it in ACLs (None: no credentials, no ACL checks)
        self._identity: str | None = None
        if config.digest is not None:
            user, _, password = config.digest.partition(":")
            acl = [make_digest_acl(user, password, all=True)]
            auth = [("digest", config.digest)]
            self._identity = digest_identity(config.digest)
        self._acl = acl
        self._client = KazooClient(
            hosts=config.connect_string,
            timeout=config.session_timeout,
            auth_data=auth,
            default_acl=acl,
            # reconnect for as long as the client lives; calls themselves are never retried
            # by kazoo: the lock logic decides what a lost reply means
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0),
            # kazoo logs its requests, the credentials among them
            logger=RedactingLogger(_log, lambda: client_secrets(config.digest, self._client)),
            use_ssl=tls is not None,
        )
        if tls is not None:
            self._client.handler.create_connection = tls_connector(tls)
        #: the outcome of each connection attempt while the client starts
        self._attempts: ConnectAttempts | None = ConnectAttempts(
            self._client.hosts, tls=config.tls is not None
        )
        self._wrap_connect()
        self._client.add_listener(self._on_state)
        self._guard = threading.Lock()
        self._entries: dict[tuple[str, str], OwnEntry] = {}
        self._watches = DeletionWatches(self._client)
        self._probe = SessionProbe(self._client, config.base)
        #: acquisitions whose create may have happened although its reply was lost
        self._uncertain: set[tuple[str, str]] = set()
        #: entries whose delete did not get through: deleted when the connection is back
        self._orphans: set[str] = set()
        #: (lock path, node-name prefix) of creates that may have happened, withdrawn while the
        #: server could not be reached: looked for and deleted when the connection is back
        self._lost_creates: set[tuple[str, str]] = set()
        self._containers = True
        #: lock nodes known to exist and, with credentials, whose ACL was checked (see
        #: _remember_lock_node)
        self._lock_nodes: OrderedDict[str, None] = OrderedDict()
        self._closing = False
        self._suspended = False
        #: how much longer than the evicted lease a force_release note is kept (NOTE_GRACE)
        self.note_grace = NOTE_GRACE
        #: a waiter held back by lapsed grants only, woken when the first of their delays ends
        #: (nothing in the store announces it): one timer per waiting owner
        self._delay_timers: dict[tuple[str, str], threading.Timer] = {}

    # -- connection ------------------------------------------------------------------------

    def _wrap_connect(self) -> None:
        # The ensemble may narrow the session timeout (to its maxSessionTimeout); a lease longer
        # than the real timeout would be unsafe. kazoo computes from the negotiated value but
        # does not keep it, so its connect step is wrapped to read it back. The wrapper also
        # records how each attempt ended while the client starts (ConnectAttempts).
        connection = self._client._connection
        connect = connection._connect

        def connect_and_learn(host: str, hostip: str, port: int) -> Any:
            attempts = self._attempts
            try:
                read_timeout, connect_timeout = connect(host, hostip, port)
            except BaseException as error:
                if attempts is not None:
                    attempts.record(host, port, error)
                raise
            if attempts is not None:
                attempts.record(host, port, None)
            negotiated = round(read_timeout * 1.5) / 1000.0  # kazoo: read = negotiated * 2/3
            if negotiated > 0:
                self.session_timeout = negotiated
                self.capabilities = dataclasses.replace(self.capabilities, max_ttl=negotiated)
            return read_timeout, connect_timeout

        connection._connect = connect_and_learn
        drop_on_reply_out_of_order(connection)

    def _on_state(self, state: str) -> None:
        """kazoo's connection states, reported on its thread: must not block."""
        if self._closing:
            return
        if state == KazooState.SUSPENDED:
            self._suspended = True
            _log.warning("ZooKeeper connection lost; holds are in doubt until it is back")
            self.session_events.notify(SessionEvents.SUSPENDED)
        elif state == KazooState.LOST:
            self._suspended = False
            _log.warning("ZooKeeper session expired: every hold of this client is lost")
            with self._guard:
                for entry in self._entries.values():
                    self._watches.forget(entry)
                self._entries.clear()
                self._uncertain.clear()
                # ephemeral: the server deleted them with the session
                self._orphans.clear()
                self._lost_creates.clear()
            self.session_events.notify(SessionEvents.EXPIRED)
            self.hub.notify_all()
        elif state == KazooState.CONNECTED:
            if self._suspended:
                self._suspended = False
                self.session_events.notify(SessionEvents.RECONNECTED)
            self._delete_orphans()
            self.hub.notify_all()

    def _delete_orphans(self) -> None:
        """Delete what withdrawals could not (runs on kazoo's thread: callbacks, no waiting)."""
        with self._guard:
            orphans = list(self._orphans)
            lost_creates = list(self._lost_creates)
        for node in orphans:
            result = self._client.delete_async(node)
            result.rawlink(functools.partial(self._orphan_deleted, node))
        for path, marker in lost_creates:
            listing = self._client.get_children_async(path)
            listing.rawlink(functools.partial(self._lost_create_listed, path, marker))

    def _lost_create_listed(self, path: str, marker: str, result: Any) -> None:
        if not result.successful() and not isinstance(result.exception, kazoo_errors.NoNodeError):
            return  # still unreachable: tried again at the next connection
        children = result.value if result.successful() else []
        with self._guard:
            self._lost_creates.discard((path, marker))
            found = [f"{path}/{child}" for child in children if child.startswith(marker)]
            self._orphans.update(found)
        for node in found:
            self._client.delete_async(node).rawlink(functools.partial(self._orphan_deleted, node))

    def _orphan_deleted(self, node: str, result: Any) -> None:
        if result.successful() or isinstance(result.exception, kazoo_errors.NoNodeError):
            with self._guard:
                self._orphans.discard(node)

    async def start(self) -> None:
        """Connect, and check that the base node can be used (made if missing)."""
        attempts = self._attempts
        assert attempts is not None, "started twice"
        with translate_errors(self.url):
            try:
                await arun_blocking(
                    start_client, self._client, attempts, self.config.connect_timeout, self.url
                )
            finally:
                self._attempts = None
            base = self.config.base
            await self._make_path(base)
            # with credentials, who else may change the base: its ACL comes in the same round
            # trip as the read below
            checking = None if self._identity is None else self._client.get_acls_async(base)
            # reading the base shows now, not at the first lock, whether the user may
            await self._call(self._client.get_children_async(base))
            if checking is not None:
                await self._check_acl(base, checking)

    async def close(self) -> None:
        """End the session: the ensemble deletes this client's entries at once."""
        self._closing = True
        with self._guard:
            timers = list(self._delay_timers.values())
            self._delay_timers.clear()
        for timer in timers:
            timer.cancel()
        with contextlib.suppress(kazoo_errors.KazooException):
            await arun_blocking(self._client.stop)
        await arun_blocking(self._client.close)

    async def _call(self, result: Any) -> Any:
        return await kazoo_aresult(result, self.config.request_timeout)

    # -- paths -----------------------------------------------------------------------------

    def _lock_path(self, name: str) -> str:
        return f"{self.config.base}/{encode_name(name)}"

    async def _make_path(self, path: str) -> None:
        """Make ``path`` and its missing parents as persistent nodes (kazoo's ensure_path)."""
        await self._call(self._client.ensure_path_async(path, acl=self._acl))

    def _send_lock_node(self, path: str) -> Any:
        """Send the create of a lock node (a container) without waiting for it; None if this
        server has no containers (then ``_make_lock_node`` makes a plain node)."""
        if not self._containers:
            return None
        acl = self._acl or OPEN_ACL_UNSAFE
        request = CreateContainer(path, b"", acl, CONTAINER_FLAG)
        result = self._client.handler.async_result()
        self._client._call(request, result)
        return result

    async def _lock_node_made(self, result: Any) -> bool:
        """Whether the lock node exists after ``_send_lock_node``'s create (made or there)."""
        try:
            await self._call(result)
        except kazoo_errors.NodeExistsError:
            pass
        except kazoo_errors.NoNodeError:
            return False  # the base node is missing
        except kazoo_errors.UnimplementedError:
            _log.warning("this ZooKeeper has no container nodes: empty lock nodes are deleted")
            self._containers = False
            return False
        return True

    async def _check_acl(self, path: str, checking: Any, entry: str | None = None) -> None:
        """Refuse node ``path`` (``ConfigurationError``) if others than the URL's user may
        change it; ``checking`` is the ``get_acls`` request already sent for it. ``entry`` is
        this client's entry made in it by the same round trip: deleted if the node is
        refused, so that it does not stay in a line that others can change."""
        identity = self._identity
        assert identity is not None, "only a client with credentials checks ACLs"
        try:
            acls, _stat = await self._call(checking)
            refusal = acl_problem(path, acls, identity, self.url)
            if refusal is not None:
                raise refusal
        except BaseException:
            if entry is not None:
                # not deleted now (the server is out of reach): _delete keeps it for later
                with contextlib.suppress(Exception):
                    await self._delete(entry)
            raise

    def _remember_lock_node(self, path: str) -> None:
        # Lock nodes this client has used lately (with credentials: whose ACL it checked): a
        # grant there need neither make the node nor check it first. Bounded, least recently
        # used first out; a node the server removed meanwhile (an idle container) costs one
        # more round trip, as before.
        with self._guard:
            self._lock_nodes[path] = None
            self._lock_nodes.move_to_end(path)
            if len(self._lock_nodes) > LOCK_NODES_REMEMBERED:
                self._lock_nodes.popitem(last=False)

    async def _make_lock_node(self, path: str) -> None:
        making = self._send_lock_node(path)
        if making is not None:
            if await self._lock_node_made(making):
                return
            if self._containers:  # the base node is missing
                await self._make_path(self.config.base)
                return await self._make_lock_node(path)
        await self._make_path(path)

    # -- the contract ----------------------------------------------------------------------

    def _tidy(self) -> None:
        """Retry pending clean-ups: a late reply does not always come with a reconnection."""
        if self._orphans or self._lost_creates:
            self._delete_orphans()

    async def try_grant(self, request: GrantRequest) -> Grant | None:
        self._tidy()
        key = (request.name, request.owner)
        path = self._lock_path(request.name)
        with translate_errors(self.url, request.name):
            mine, created, children = await self._entry(request, path)
            synced = False
            while True:
                if children is None and not created and not synced:
                    # A retry on an entry made earlier (a waiter woken, mostly first in line
                    # by then): its read goes after a sync (below) in the same round trip,
                    # rather than a plain read first and the synced one when it shows a grant.
                    children = await self._synced_children(path)
                    synced = True
                elif children is None:
                    children = await self._children(path)
                line = parse_children(children)
                index = next((i for i, c in enumerate(line) if c.node == mine.node), None)
                if index is None:
                    # our entry is gone (force-released, or the session ended): join again
                    with self._guard:
                        self._entries.pop(key, None)
                    self._watches.forget(mine)
                    mine, created, children = await self._entry(request, path)
                    continue
                own = line[index].owner
                strays = [c.node for c in line if c.owner == own and c.node != mine.node]
                if strays and await self._delete_strays(path, strays, mine):
                    children = None
                    continue
                entries = [contender.entry() for contender in line]
                try:
                    check_limits(entries, entries[index].owner, request.shared, request.limit)
                except PermitsMismatch:
                    await self._forget(key, path, mine)
                    raise
                blocker = line_position(entries, index)
                if blocker is None and not created and not synced:
                    # A grant decided on a read made apart from this entry's creation: the
                    # member this client is on may lag the leader, and show the entry first in
                    # a line the leader has moved on from (its session expired and the entry
                    # with it, another granted). The read again after a sync shows what the
                    # leader had committed when the sync reached it.
                    children = await self._synced_children(path)
                    synced = True
                    continue
                if blocker is not None and created and request.queue:
                    # A new waiter: every entry ahead of it was created before it, and is in
                    # the children read after its creation. Those that hold the lock are the
                    # head that the rule lets through (all entries are fair, in order).
                    holding, _ = let_through(entries[:index])
                    if index - len(holding) >= self.max_waiters:
                        await self._forget(key, path, mine)
                        raise line_full(self.max_waiters, request.name, self.url)
                lapsed: list[LapsedGrant] = []
                tombs = parse_tombs(children) if blocker is None else []
                if tombs:
                    # The line lets it through: so must the grants that lapsed (their entries
                    # gone, their tombstones kept for their lock-delay), counted ahead of it.
                    lapsed = await self._lapsed(request.name, line, tombs)
                    ahead = [grant.entry for grant in lapsed]
                    if line_position([*ahead, *entries], index + len(ahead)) is None:
                        lapsed = []
                    else:
                        blocker = WATCH_LINE
                if blocker is None:
                    if request.shared and request.limit and not created:
                        await self._announce_grant(mine, request)
                    ttl = min(request.ttl, self.session_timeout)
                    # the tombstone before the grant is returned: a holder that dies before
                    # this never had it, so had no writes in flight for a delay to wait out
                    if (
                        request.lock_delay
                        and not mine.tomb_made
                        and not await self._make_tombstone(request, mine, line[index], ttl)
                    ):
                        children = None  # the lock node is gone, and our entry with it
                        continue
                    mine.granted = True
                    return Grant(request.name, request.owner, mine.czxid, ttl)
                if not request.queue:
                    await self._forget(key, path, mine)
                    return None
                if lapsed:
                    children = await self._hold_back(path, line, index, lapsed, request)
                    if children is None:
                        return None  # woken when a delay ends, a tombstone goes or one leaves
                    continue
                children = await self._watch(path, line, index, blocker, request)
                if children is None:
                    return None  # watching what blocks us; the watch wakes the waiter

    async def _entry(
        self, request: GrantRequest, path: str
    ) -> tuple[OwnEntry, bool, list[str] | None]:
        """This acquisition's entry: known, found again after a lost reply, or created now;
        whether it was created now; and, if it was, the lock's children read just after (its
        line, and its tombstones: see "Lock-delay" in the module ``common``).

        No deletion watch is set on it here: the first renewal of the grant reads the entry
        and sets one (``renew_all``), in the round trip of its session probe. An uncontended
        acquire and release shorter than a third of the lease thus costs three requests
        (create, children, delete) where a watch set at the grant cost a fourth, and a
        deletion before that first renewal is still refused by it: the read finds the entry
        gone (or another in its place: its czxid tells).
        """
        key = (request.name, request.owner)
        with self._guard:
            known = self._entries.get(key)
            uncertain = key in self._uncertain
        if known is not None:
            return known, False, None
        if uncertain:
            found = await self._find(path, request.owner)
            if found is not None:
                stat = await self._call(self._client.exists_async(f"{path}/{found}"))
                if stat is not None:
                    if self._identity is not None and path not in self._lock_nodes:
                        # the reply that was lost carried this node's ACL as well
                        with self._guard:
                            self._uncertain.discard(key)
                        checking = self._client.get_acls_async(path)
                        await self._check_acl(path, checking, f"{path}/{found}")
                        self._remember_lock_node(path)
                    mine = OwnEntry(f"{path}/{found}", stat.czxid, stat.ephemeralOwner)
                    with self._guard:
                        self._entries[key] = mine
                        self._uncertain.discard(key)
                    return mine, False, None
        prefix = f"{path}/{entry_prefix(request.owner, request.shared, request.limit)}"
        data = entry_data(
            request.holder,
            min(request.ttl, self.session_timeout),
            session_timeout=self.session_timeout,
        )
        with self._guard:
            self._uncertain.add(key)
        for _ in range(3):
            # One round trip: the server handles a session's requests in the order they were
            # sent, so the lock node is made (if this client has not seen it yet) before the
            # entry is created in it, and the children are read after the entry is there.
            # With credentials, a lock node this client has not seen yet may have been made by
            # someone else, with an ACL that lets others take the lock: its ACL comes in the
            # same round trip, and is checked before the entry can count as a grant.
            seen = path in self._lock_nodes
            making = None if seen else self._send_lock_node(path)
            checking = None
            if not seen and self._identity is not None:
                checking = self._client.get_acls_async(path)
            creating = self._client.create_async(
                prefix, data, ephemeral=True, sequence=True, include_data=True
            )
            listing = self._client.get_children_async(path)
            if making is not None:
                await self._lock_node_made(making)
            try:
                created, stat = await self._call(creating)
            except kazoo_errors.NoNodeError:
                with self._guard:
                    self._lock_nodes.pop(path, None)
                await self._make_lock_node(path)  # the lock node was idle and removed
                continue
            if checking is not None:
                with self._guard:
                    self._uncertain.discard(key)  # its fate is known: kept, or deleted now
                await self._check_acl(path, checking, created)
            self._remember_lock_node(path)
            mine = OwnEntry(created, stat.czxid, stat.ephemeralOwner)
            with self._guard:
                self._entries[key] = mine
                self._uncertain.discard(key)
            try:
                children: list[str] = await self._call(listing)
            except kazoo_errors.NoNodeError:
                children = []
            return mine, True, children
        raise kazoo_errors.NoNodeError(f"the lock node {path} keeps disappearing")

    async def _children(self, path: str) -> list[str]:
        try:
            children: list[str] = await self._call(self._client.get_children_async(path))
        except kazoo_errors.NoNodeError:
            return []
        return children

    async def _synced_children(self, path: str) -> list[str]:
        """The children once this client's member has caught up with the leader: the sync
        and the read go together, and the member answers a session's requests in order."""
        syncing = self._client.sync_async(path)
        listing = self._client.get_children_async(path)
        await self._call(syncing)
        try:
            children: list[str] = await self._call(listing)
        except kazoo_errors.NoNodeError:
            return []
        return children

    async def _delete_strays(self, path: str, nodes: list[str], mine: OwnEntry) -> bool:
        """Delete the entries named ``nodes`` (of this acquisition's owner, not its entry) that
        this session made; whether any was. Such a one is a create whose reply was lost and
        that the server applied only after the retry had looked for it: ZooKeeper keeps a
        session's requests in order on one connection, not across a reconnection to another
        member. Left, it would hold the line up for as long as the session lives. An entry
        of another session (a client given the same owner) is that client's, and stays."""
        deleted = False
        for node in nodes:
            stat = await self._call(self._client.exists_async(f"{path}/{node}"))
            if stat is None or stat.ephemeralOwner != mine.session:
                continue
            with contextlib.suppress(kazoo_errors.NoNodeError):
                await self._call(self._client.delete_async(f"{path}/{node}"))
            deleted = True
        return deleted

    async def _find(self, path: str, owner: str) -> str | None:
        """The node of ``owner`` among the children, by the owner hash in its name."""
        marker = f"_c_{node_owner(owner)}-"
        return next((node for node in await self._children(path) if node.startswith(marker)), None)

    async def _watch(
        self, path: str, line: list[Contender], index: int, blocker: int, request: GrantRequest
    ) -> list[str] | None:
        """Set a watch on what blocks entry ``index``. Returns None once it is set on an
        unchanged state; otherwise the children as they are now, to decide again."""
        callback = functools.partial(self._wake, request.name, node_owner(request.owner))
        if blocker == WATCH_LINE:
            children: list[str] = await self._call(
                self._client.get_children_async(path, watch=callback)
            )
            ahead = {contender.node for contender in line[:index]}
            if ahead <= set(children):
                return None  # nobody ahead has left since we read the line
            return children
        stat = await self._call(
            self._client.exists_async(f"{path}/{line[blocker].node}", watch=callback)
        )
        if stat is None:
            return await self._children(path)  # it left in the meantime: decide again now
        return None

    def _wake(self, name: str, tag: str, _event: Any) -> None:
        self.hub.notify(name, (tag,))

    # -- lock-delay: tombstones ------------------------------------------------------------

    async def _make_tombstone(
        self, request: GrantRequest, mine: OwnEntry, entry: Contender, lease: float
    ) -> bool:
        """Make the tombstone of ``mine``'s grant: a persistent child of the lock node, which
        outlives the session, so that a grant that ends other than by a release is known to
        have ended so (its entry gone, its tombstone left). False if the lock node is gone
        (and the entry with it: its session ended)."""
        path = self._lock_path(request.name)
        tomb = f"{path}/{tomb_node(entry.seq)}"
        # From the create's sending on it may exist: a release or lapse deletes or stamps it
        # with the entry, and copes with its absence.
        mine.tombstone = tomb
        mine.stamped_tombstone = tombstone_data(
            mine.node, request.holder, request.lock_delay, mine.czxid, lease, True
        )
        data = tombstone_data(
            mine.node, request.holder, request.lock_delay, mine.czxid, lease, False
        )
        try:
            # the client's default ACL: with credentials, the user's alone, as an entry's
            await self._call(self._client.create_async(tomb, data))
        except kazoo_errors.NodeExistsError:
            pass  # made by a try whose reply was lost: sequence numbers are never reused
            # while a child is left, and the tombstone keeps the lock node
        except kazoo_errors.NoNodeError:
            mine.tombstone = None
            return False
        mine.tomb_made = True
        return True

    async def _lapsed(
        self,
        name: str,
        line: list[Contender],
        tombs: list[tuple[str, int]],
        inspecting: bool = False,
    ) -> list[LapsedGrant]:
        """The grants of ``name`` still in their lock-delay, from the tombstones ``tombs``
        listed with ``line`` (one read of the lock node's children): each as the grant rule
        counts it, with the seconds of delay left, its tombstone's path and what it says.

        A tombstone whose entry is in the line is a live grant's: the line counts it, and it
        is not read. One whose entry is not was a grant that ended other than by a release
        (entries never come back, and a release deletes its tombstone with it); if nobody
        stamped it yet, it is stamped now (a setData checked against the version read: the
        first to notice sets when the delay began, on the server's clock, as its ``mtime``).
        The delay left is measured against the server's clock (the ``mtime`` of a write to
        the lock node) for a decision, and once it ended the tombstone is deleted;
        ``inspecting`` measures it on this host's wall clock, as a report, and deletes
        nothing. A tombstone tumbler did not write blocks nothing; a decision deletes it.
        """
        path = self._lock_path(name)
        client = self._client
        live = {contender.seq for contender in line}
        ended = [(node, seq) for node, seq in tombs if seq not in live]
        if not ended:
            return []
        # one round trip for all: kazoo pipelines the requests
        reads = [(node, seq, client.get_async(f"{path}/{node}")) for node, seq in ended]
        found: list[tuple[TombstoneData, Any, str]] = []
        for node, seq, reading in reads:
            tomb = f"{path}/{node}"
            for _ in range(FORCE_RELEASE_TRIES):
                try:
                    data, stat = await self._call(reading)
                except kazoo_errors.NoNodeError:
                    break  # forced out, or its delay ended
                record = read_tombstone(data, seq)
                if record is None:
                    if not inspecting:
                        await self._drop_tombstone(tomb, stat.version)
                    break
                if record.stamped:
                    found.append((record, stat, tomb))
                    break
                try:
                    stat = await self._call(client.set_async(tomb, record.stamp(), stat.version))
                except (kazoo_errors.NoNodeError, kazoo_errors.BadVersionError):
                    reading = client.get_async(tomb)  # stamped or deleted meanwhile: again
                    continue
                except kazoo_errors.NoAuthError:
                    if not inspecting:
                        raise
                    stat = None  # a reader that may not stamp: the whole delay is left
                found.append((record, stat, tomb))
                break
        if not found:
            return []
        if inspecting:
            now = time.time() * 1000.0
        else:
            # the server's time: a write's mtime (the lock node's data is tumbler's, empty)
            probe = await self._call(client.set_async(path, b"", -1))
            now = probe.mtime
        lapsed = []
        for record, stat, tomb in found:
            left = record.delay if stat is None else record.delay_left(stat.ctime, stat.mtime, now)
            if left <= 0:
                if not inspecting:
                    await self._drop_tombstone(tomb, stat.version)
                continue
            contender = record.contender
            entry = Entry(
                contender.owner,
                contender.seq,
                contender.shared,
                contender.limit,
                True,
                record.token,
                lapsed=True,
            )
            lapsed.append(LapsedGrant(entry, left, tomb, record))
        return lapsed

    async def _drop_tombstone(self, tomb: str, version: int) -> None:
        """Delete a tombstone found over (its delay ended, or not tumbler's), unless it
        changed since it was read (stamped: then another saw it first)."""
        try:
            await self._call(self._client.delete_async(tomb, version))
        except (kazoo_errors.NoNodeError, kazoo_errors.BadVersionError):
            return
        if not self._containers:
            with contextlib.suppress(kazoo_errors.NotEmptyError, kazoo_errors.NoNodeError):
                await self._call(self._client.delete_async(tomb.rsplit("/", 1)[0]))

    async def _hold_back(
        self,
        path: str,
        line: list[Contender],
        index: int,
        lapsed: list[LapsedGrant],
        request: GrantRequest,
    ) -> list[str] | None:
        """Wait for lapsed grants that hold entry ``index`` back: a timer for the end of the
        first delay (nothing in the store announces it), and a children watch on the lock
        node for what may end it sooner (a force_release deleting the tombstones; for a
        semaphore, a holder leaving). Returns None once set on an unchanged state; otherwise
        the children as they are now, to decide again."""
        callback = functools.partial(self._wake, request.name, node_owner(request.owner))
        children: list[str] = await self._call(
            self._client.get_children_async(path, watch=callback)
        )
        kept = {contender.node for contender in line[:index]}
        kept.update(grant.tomb.rsplit("/", 1)[1] for grant in lapsed)
        if not kept <= set(children):
            return children
        self._wake_after(request, min(grant.left for grant in lapsed))
        return None

    def _wake_after(self, request: GrantRequest, seconds: float) -> None:
        key = (request.name, request.owner)
        tag = node_owner(request.owner)
        timer = threading.Timer(seconds, self._delay_ended, (key, tag))
        timer.daemon = True
        with self._guard:
            earlier = self._delay_timers.pop(key, None)
            self._delay_timers[key] = timer
        if earlier is not None:
            earlier.cancel()
        timer.start()

    def _delay_ended(self, key: tuple[str, str], tag: str) -> None:
        with self._guard:
            timer = self._delay_timers.get(key)
            if timer is not None and timer is threading.current_thread():
                del self._delay_timers[key]
        self.hub.notify(key[0], (tag,))

    async def lapse(self, name: str, owner: str) -> None:
        """End ``owner``'s grant of ``name`` as lost: delete its entry and stamp its tombstone
        in one transaction, so the name stays closed for its lock-delay from now. Without a
        tombstone (no lock-delay) this is a release."""
        key = (name, owner)
        with self._guard:
            mine = self._entries.pop(key, None)
        if mine is None:
            return  # its session ended (the tombstone stays, to be stamped), or released
        self._watches.forget(mine)
        with translate_errors(self.url, name):
            if mine.tombstone is None:
                with contextlib.suppress(kazoo_errors.SessionExpiredError):
                    await self._delete(mine.path)
                return
            transaction = self._client.transaction()
            transaction.delete(mine.path)
            transaction.set_data(mine.tombstone, mine.stamped_tombstone)
            try:
                results = await self._call(transaction.commit_async())
            except kazoo_errors.SessionExpiredError as error:
                if isinstance(error, kazoo_errors.ConnectionClosedError):
                    raise
                return  # the entry went with the session; its tombstone stays, unstamped
            except BaseException:
                # deleted when the connection is back; its tombstone, unstamped, is stamped
                # by the first who finds it: the delay starts later, never sooner
                with self._guard:
                    self._orphans.add(mine.path)
                raise
            if isinstance(results[1], kazoo_errors.NoNodeError) and not isinstance(
                results[0], kazoo_errors.NoNodeError
            ):
                await self._delete(mine.path)  # its tombstone was forced out: no delay left

    async def _delete_with_tombstone(self, mine: OwnEntry) -> bool:
        """Release a grant with a lock-delay: its entry and its tombstone in one transaction.
        False if the entry was gone (it lapsed, or was forced out): its tombstone stays."""
        assert mine.tombstone is not None
        transaction = self._client.transaction()
        transaction.delete(mine.path)
        transaction.delete(mine.tombstone)
        try:
            results = await self._call(transaction.commit_async())
        except BaseException:
            with self._guard:
                self._orphans.add(mine.path)
            raise
        if isinstance(results[0], kazoo_errors.NoNodeError):
            return False
        if isinstance(results[1], kazoo_errors.NoNodeError):
            return await self._delete(mine.path)  # its tombstone was forced out meanwhile
        failure = next((r for r in results if isinstance(r, Exception)), None)
        if failure is not None:
            raise failure
        if not self._containers:
            with contextlib.suppress(kazoo_errors.NotEmptyError, kazoo_errors.NoNodeError):
                await self._call(self._client.delete_async(mine.path.rsplit("/", 1)[0]))
        return True

    async def _announce_grant(self, mine: OwnEntry, request: GrantRequest) -> None:
        """Touch a semaphore entry granted after waiting: the waiter behind it watches it."""
        data = entry_data(
            request.holder,
            min(request.ttl, self.session_timeout),
            granted=True,
            session_timeout=self.session_timeout,
        )
        with contextlib.suppress(kazoo_errors.NoNodeError):
            await self._call(self._client.set_async(mine.path, data))

    async def _forget(self, key: tuple[str, str], path: str, mine: OwnEntry) -> None:
        with self._guard:
            self._entries.pop(key, None)
        self._watches.forget(mine)
        await self._delete(mine.path)

    async def _delete(self, node_path: str) -> bool:
        """Delete an entry; if the server cannot be told now, it is told when it is back."""
        try:
            await self._call(self._client.delete_async(node_path))
        except kazoo_errors.NoNodeError:
            return False
        except BaseException:
            with self._guard:
                self._orphans.add(node_path)
            raise
        if not self._containers:
            with contextlib.suppress(kazoo_errors.NotEmptyError, kazoo_errors.NoNodeError):
                await self._call(self._client.delete_async(node_path.rsplit("/", 1)[0]))
        return True

    async def renew(self, name: str, owner: str, ttl: float) -> float | None:
        (granted,) = await self.renew_all([Renewal(name, owner, ttl)], self.config.request_timeout)
        return granted

    async def renew_all(self, renewals: Sequence[Renewal], timeout: float) -> list[float | None]:
        """Confirm every lease in one round trip, however many there are.

        An entry lives as long as the session that made it, unless it is deleted. So a grant
        is confirmed when its entry was made in this session, a round trip sent after this call
        began shows the session is alive (``SessionProbe``, shared with concurrent callers),
        and the entry's deletion watch has not fired (``DeletionWatches``). Entries without a
        watch (a grant's first renewal sets it; kazoo drops them when a connection breaks) are
        read, and watched, in the probe's round trip. Raises ``BackendUnavailable`` once
        ``timeout`` (at most the request timeout) has passed without an answer.
        """
        if math.isnan(timeout):
            raise InvalidTimeout("the renewal timeout is NaN", backend=self.url)
        began = time.monotonic()
        deadline = began + max(0.0, min(timeout, self.config.request_timeout))
        self._tidy()
        with self._guard:
            mine = [self._entries.get((renewal.name, renewal.owner)) for renewal in renewals]
        refused: list[float | None] = [None] * len(renewals)
        if not any(entry is not None and entry.granted for entry in mine):
            return refused  # nothing to confirm: no need to ask the server
        name = renewals[0].name if len(renewals) == 1 else None
        with translate_errors(self.url, name):
            try:
                probe = self._probe.after_now()
                # Entries without a watch (never renewed yet, or dropped with a connection)
                # are read, and watched, in the probe's round trip: an entry that a read
                # sent after this call began finds, with its czxid, was there all along, and
                # its watch tells of a deletion after the read before the probe's answer.
                reads = {
                    id(entry): (entry, *self._watches.arm(entry))
                    for entry in mine
                    if entry is not None and entry.granted and not entry.watched and not entry.gone
                }
                session = await kazoo_aresult(probe, max(0.0, deadline - time.monotonic()))
                # what the watches say now is true up to the probe's answer; entries whose
                # watch went meanwhile (it fired for a change of data) are read again now
                confirmed: set[int] = set()
                for entry in mine:
                    if entry is None or not entry.granted or entry.session != session:
                        reads.pop(id(entry), None)
                    elif id(entry) in reads:
                        continue
                    elif entry.watched:
                        confirmed.add(id(entry))
                    elif not entry.gone:
                        reads[id(entry)] = (entry, *self._watches.arm(entry))
                for entry, result, epoch in reads.values():
                    stat = await kazoo_aresult(result, max(0.0, deadline - time.monotonic()))
                    if self._watches.settle(entry, epoch, stat):
                        confirmed.add(id(entry))
            except kazoo_errors.SessionExpiredError as error:
                if isinstance(error, kazoo_errors.ConnectionClosedError):
                    raise  # the client was closed: not news about the grants
                return refused  # the session, and every entry made in it, is gone
        return [
            min(renewal.ttl, self.session_timeout)
            if entry is not None and id(entry) in confirmed and not entry.gone
            else None
            for renewal, entry in zip(renewals, mine, strict=True)
        ]

    async def release(self, name: str, owner: str) -> bool:
        key = (name, owner)
        path = self._lock_path(name)
        with self._guard:
            mine = self._entries.pop(key, None)
            uncertain = key in self._uncertain
            timer = self._delay_timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        with translate_errors(self.url, name):
            if mine is not None:
                self._watches.forget(mine)
                try:
                    if mine.tombstone is not None:
                        return await self._delete_with_tombstone(mine) and mine.granted
                    return await self._delete(mine.path) and mine.granted
                except kazoo_errors.SessionExpiredError as error:
                    if isinstance(error, kazoo_errors.ConnectionClosedError):
                        raise
                    with self._guard:
                        self._orphans.discard(mine.path)
                    return False  # the session ended: its entries went with it
            if not uncertain:
                return False  # nothing of this owner was ever created
            try:
                found = await self._find(path, owner)
                if found is not None:
                    await self._delete(f"{path}/{found}")
            except BaseException:
                # Protection mode's other half: the create may have reached the server, and
                # nobody would ever retry it, so its node would block the line for as long
                # as the session lives. Look for it when the connection is back.
                with self._guard:
                    self._lost_creates.add((path, f"_c_{node_owner(owner)}-"))
                raise
            finally:
                with self._guard:
                    self._uncertain.discard(key)
            return False  # a lost create was never a grant its caller knew of

    def watch(self, name: str, owner: str) -> AsyncHubWatch:
        return AsyncHubWatch(self.clock, name, self.hub, node_owner(owner))

    def watch_state(self, name: str) -> AsyncZooKeeperStateWatch:
        return AsyncZooKeeperStateWatch(self, name)

    async def _holders(
        self, path: str, line: list[Contender], lapsed: Sequence[LapsedGrant] = ()
    ) -> list[tuple[Contender, Any]]:
        """The granted entries of ``line`` with their stats and data; an entry that
        ``lapsed`` grants hold back is a waiter."""
        entries = [grant.entry for grant in lapsed] + [contender.entry() for contender in line]
        ahead = len(lapsed)
        granted = [c for i, c in enumerate(line) if line_position(entries, ahead + i) is None]
        # one round trip for all: kazoo pipelines the requests
        pending = [self._client.get_async(f"{path}/{c.node}") for c in granted]
        holders = []
        for contender, result in zip(granted, pending, strict=True):
            with contextlib.suppress(kazoo_errors.NoNodeError):
                holders.append((contender, await self._call(result)))
        return holders

    async def _read_lock(
        self, name: str
    ) -> tuple[list[Contender], list[tuple[str, int]], list[LapsedGrant]]:
        """One read of the lock node's children: its line, its tombstones, and of these the
        lapsed grants (see ``_lapsed``)."""
        children = await self._children(self._lock_path(name))
        line, tombs = parse_children(children), parse_tombs(children)
        lapsed = await self._lapsed(name, line, tombs, inspecting=True) if tombs else []
        return line, tombs, lapsed

    async def inspect(self, name: str) -> LockState:
        with translate_errors(self.url, name):
            line, _tombs, lapsed = await self._read_lock(name)
            holders = await self._holders(self._lock_path(name), line, lapsed)
        state = LockStateBuilder(name)
        for grant in lapsed:
            # measured on this host's clock against the server's: never more than the delay
            state.add(
                token=grant.record.token,
                shared=grant.entry.shared,
                limit=grant.entry.limit,
                expires_in=min(grant.left, grant.record.delay),
                holder=grant.record.holder,
                lapsed=True,
            )
        granted = {contender.node for contender, _ in holders}
        for contender, (data, stat) in holders:
            recorded = read_entry_data(data)
            # A grant lives as long as its holder's session, whatever its lease: how long it
            # would outlive a dead holder is that session's timeout, which tumbler's entries
            # record (other programs' entries do not: this client's is the best guess).
            state.add(
                token=stat.czxid,
                shared=contender.shared,
                limit=contender.limit,
                expires_in=recorded.session_timeout or self.session_timeout,
                holder=recorded.holder,
                session=True,
            )
        for contender in line:
            if contender.node not in granted:
                state.add(
                    token=None,
                    shared=contender.shared,
                    limit=contender.limit,
                    expires_in=self.session_timeout,
                    holder="",
                )
        return state.build()

    async def lock_names(self) -> list[str]:
        with translate_errors(self.url):
            nodes = await self._children(self.config.base)
        names = []
        for node in nodes:
            try:
                name = decode_name(node)
            except UnicodeDecodeError:
                continue  # not a lock node of ours
            if encode_name(name) == node:  # else not a lock node either: the notes (EVICTED_NODE)
                names.append(name)
        return names

    def _notes_path(self, name: str) -> str:
        return f"{self.config.base}/{EVICTED_NODE}/{encode_name(name)}"

    async def force_release(self, name: str, note: str) -> int:
        """Delete every granted entry of ``name``, leaving ``note`` for each evicted owner.

        The notes and the deletions are one ZooKeeper transaction (``multi``): a holder whose
        entry is gone finds its note at once, and no note is left for an entry that was not
        removed here. Tried again when another client changed the notes or the line meanwhile.
        """
        path = self._lock_path(name)
        notes_path = self._notes_path(name)
        with translate_errors(self.url, name):
            await self._make_path(notes_path.rsplit("/", 1)[0])
            for _ in range(FORCE_RELEASE_TRIES):
                # every tombstone goes too: an operator's word ends a lock-delay
                line, tombs, lapsed = await self._read_lock(name)
                holders = await self._holders(path, line, lapsed)
                try:
                    data, stat = await self._call(self._client.get_async(notes_path))
                    notes = read_notes(data)
                except kazoo_errors.NoNodeError:
                    stat, notes = None, {}
                now = time.time()
                notes = prune_notes(notes, now)
                for contender, (entry, _stat) in holders:
                    if contender.owner:
                        # the grant would have outlived its holder by its session's timeout
                        left = read_entry_data(entry).session_timeout or self.session_timeout
                        notes[contender.owner] = (note, now + left + self.note_grace)
                if stat is None and not notes and not tombs:
                    return 0  # nothing removed, nothing recorded: no transaction needed
                transaction = self._client.transaction()
                if stat is None:
                    if notes:
                        acl = self._acl or OPEN_ACL_UNSAFE
                        transaction.create(notes_path, notes_data(notes), acl)
                elif notes:
                    transaction.set_data(notes_path, notes_data(notes), stat.version)
                else:
                    transaction.delete(notes_path, stat.version)
                for contender, _ in holders:
                    transaction.delete(f"{path}/{contender.node}")
                for tomb, _seq in tombs:
                    transaction.delete(f"{path}/{tomb}")
                results = await self._call(transaction.commit_async())
                failures = [r for r in results if isinstance(r, Exception)]
                if not failures:
                    break
                conflict = (
                    kazoo_errors.NoNodeError,  # an entry left, or the notes were deleted
                    kazoo_errors.NodeExistsError,  # another client made the notes first
                    kazoo_errors.BadVersionError,  # another client changed the notes
                    kazoo_errors.RolledBackError,
                )
                if not all(isinstance(failure, conflict) for failure in failures):
                    raise next(f for f in failures if not isinstance(f, conflict))
            else:
                raise kazoo_errors.ZookeeperError(
                    f"the line or notes of {name!r} kept changing during force_release"
                )
            if holders and not self._containers:
                with contextlib.suppress(kazoo_errors.NotEmptyError, kazoo_errors.NoNodeError):
                    await self._call(self._client.delete_async(path))
        return len(holders)

    async def evicted(self, name: str, owner: str) -> str | None:
        """The note ``force_release`` left for ``owner``'s grant of ``name``, if it is kept."""
        with translate_errors(self.url, name):
            try:
                data, _stat = await self._call(self._client.get_async(self._notes_path(name)))
            except kazoo_errors.NoNodeError:
                return None
        found = read_notes(data).get(node_owner(owner))
        return None if found is None else found[0]
