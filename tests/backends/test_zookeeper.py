"""ZooKeeper backend cases beyond the contract suite: URLs, node layout, protection mode,
fencing across a re-created lock node, sessions (in doubt, expired), digest ACLs, the
negotiated session timeout, herd-free wake-ups, Curator's node names, and a 3-node ensemble
whose leader is killed while locks are held and waited for.

Every case runs against a real ZooKeeper started by the fixtures in tests/servers.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

import tumbler
import tumbler.aio
from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest
from tumbler.backends.zookeeper.common import encode_name, entry_data, entry_prefix, parse_config
from tumbler.errors import BackendUnavailable, HoldInDoubt, InvalidURL, PermissionDenied
from tumbler.testing.backends.zookeeper.server import ZooKeeperEnsemble, ZooKeeperServer
from tumbler.testing.conformance.compat import background, eventually
from tumbler.testing.servers import free_port
from tumbler.torture.proxy import FaultProxy

from .herd import count_wakeups, queued

PATIENCE = 30.0


def base_path() -> str:
    return f"/tumbler-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def url(zookeeper_server: ZooKeeperServer) -> str:
    return f"{zookeeper_server.url_for(base_path())}?session_timeout=3"


@pytest.fixture
def connect(url: str) -> Iterator[Callable[..., tumbler.Locks]]:
    clients: list[tumbler.Locks] = []

    def make(target: str = url) -> tumbler.Locks:
        client = tumbler.connect(target)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def base_of(url: str) -> str:
    return parse_config(parse_url(url)).base


# -- URLs ------------------------------------------------------------------------------------


def test_url_options_and_defaults() -> None:
    config = parse_config(parse_url("zookeeper://a,b:2182,[::1]:2183/locks/app?session_timeout=7"))
    assert config.hosts == (("a", 2181), ("b", 2182), ("::1", 2183))
    assert config.connect_string == "a:2181,b:2182,[::1]:2183"
    assert config.base == "/locks/app"
    assert config.session_timeout == 7.0
    assert parse_config(parse_url("zookeeper://zk")).base == "/tumbler"
    secret = parse_config(parse_url("zookeeper://app:s%40cret@zk/x"))
    assert secret.digest == "app:s@cret"
    assert "s@cret" not in repr(secret)
    assert "s%40cret" not in secret.url


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("zookeeper://zk:0", "bad port"),
        ("zookeeper://zk:99999", "bad port"),
        ("zookeeper://zk?session_timeout=0", "session_timeout"),
        ("zookeeper://zk?session_timeout=nan", "session_timeout"),
        ("zookeeper://zk?session_timeout=0.4", "at least 0.5 s"),
        ("zookeeper://zk?sessiontimeout=3", "unknown URL option"),
        ("zookeeper://zk/zookeeper", "bad base path"),
        ("zookeeper://zk/a/../b", "bad base path"),
        ("zookeeper://:pw@zk", "needs a user name"),
    ],
)
def test_bad_urls_are_refused(url: str, message: str) -> None:
    with pytest.raises(InvalidURL, match=message):
        parse_config(parse_url(url))


@pytest.mark.parametrize(
    ("name", "node"),
    [("orders", "orders"), ("a/b", "a%2Fb"), (".", "%2E"), ("..", "%2E%2E"), ("é", "%C3%A9")],
)
def test_lock_names_are_encoded_into_one_node_name(name: str, node: str) -> None:
    assert encode_name(name) == node


# -- node layout -----------------------------------------------------------------------------


def test_an_entry_is_an_ephemeral_sequential_child_of_a_container(connect, url, raw) -> None:
    locks = connect()
    with locks.lock("orders/42") as hold:
        path = f"{base_of(url)}/orders%2F42"
        assert raw.exists(path) is not None
        (child,) = raw.get_children(path)
        assert child.startswith("_c_")
        assert "-lock-" in child
        assert child[-10:].isdigit()
        data, stat = raw.get(f"{path}/{child}")
        assert stat.ephemeralOwner == locks._backend._client.client_id[0]  # the holder's session
        assert stat.czxid == hold.token
        assert b"pid=" in data
    assert raw.get_children(path) == []


def test_idle_lock_nodes_are_removed_by_the_server(tmp_path) -> None:
    # containers are swept every minute by default; this server sweeps every 100 ms
    sweeping = ZooKeeperServer(tmp_path, jvm_options=["-Dznode.container.checkIntervalMs=100"])
    with sweeping as server:
        locks = tumbler.connect(server.url_for("/sweep"))
        raw = KazooClient(hosts=server.connect_string)
        raw.start(timeout=10)
        try:
            for name in ("a", "b", "c"):
                with locks.lock(name):
                    assert raw.exists(f"/sweep/{name}") is not None
            eventually(lambda: raw.get_children("/sweep") == [], "the idle lock nodes are gone")
            # and a lock whose node was swept works as before
            with locks.lock("a") as hold:
                assert hold.held
        finally:
            raw.stop()
            raw.close()
            locks.close()


def test_read_and_semaphore_entries_carry_their_kind(connect, url, raw) -> None:
    locks = connect()
    with locks.rwlock("rw").read(), locks.semaphore("sem", 3):
        base = base_of(url)
        assert "-__READ__" in raw.get_children(f"{base}/rw")[0]
        assert "-sem-3-" in raw.get_children(f"{base}/sem")[0]


def test_tokens_increase_after_the_lock_node_is_deleted_and_made_again(connect, url, raw) -> None:
    locks = connect()
    lock = locks.lock("reborn")
    with lock as first:
        pass
    path = f"{base_of(url)}/reborn"
    raw.delete(path)  # as the server does with an empty container
    with lock as second:
        (child,) = raw.get_children(path)
        assert child.endswith("0000000000")  # the sequence started again ...
    assert second.token > first.token  # ... the creation zxid did not


def test_a_lost_create_reply_leaves_no_orphan(connect, url, raw) -> None:
    """Protection mode: the create reached the server, its reply did not; the retry finds the
    node by the owner hash in its name instead of blocking the line with an orphan."""
    locks = connect()
    backend = locks._backend
    request = locks._request("orphan", False, 1, False, 30)
    path = f"{base_of(url)}/orphan"
    raw.ensure_path(path)
    # what a lost reply leaves: the node exists, the client does not know its name
    raw.create(
        f"{path}/{entry_prefix(request.owner, False, 1)}",
        entry_data("lost reply", 3.0),
        sequence=True,
    )
    backend._uncertain.add((request.name, request.owner))
    grant = backend.try_grant(request)
    assert grant is not None
    assert len(raw.get_children(path)) == 1  # found again, not created twice
    assert backend.release(request.name, request.owner)
    assert raw.get_children(path) == []


def test_a_withdrawn_uncertain_create_is_cleaned_up(connect, url, raw) -> None:
    locks = connect()
    backend = locks._backend
    request = locks._request("withdrawn", False, 1, False, 30)
    path = f"{base_of(url)}/withdrawn"
    raw.ensure_path(path)
    raw.create(
        f"{path}/{entry_prefix(request.owner, False, 1)}", entry_data("x", 3.0), sequence=True
    )
    backend._uncertain.add((request.name, request.owner))
    assert backend.release(request.name, request.owner) is False  # never a known grant
    assert raw.get_children(path) == []
    assert connect().lock("withdrawn").acquire(blocking=False)


def test_a_create_whose_reply_is_lost_on_the_network_leaves_no_orphan(
    zookeeper_server, raw
) -> None:
    """The real fault: replies stop reaching the client while it acquires, then the connection
    breaks (as TCP loses data: with the connection, never in the middle of it). The create
    happened on the server, the client gave up without knowing its node; once the connection
    is back the client finds the node by its owner hash and deletes it."""
    base = base_path()
    host, port = zookeeper_server.host, zookeeper_server.port
    with FaultProxy((host, port)) as proxy:
        url = f"zookeeper://127.0.0.1:{proxy.port}{base}?session_timeout=6&request_timeout=0.5"
        locks = tumbler.connect(url)
        try:
            lock = locks.lock("lost-reply")
            path = f"{base}/lost-reply"
            raw.ensure_path(path)  # so that the create succeeds on the server
            proxy.blackhole("downstream")
            with pytest.raises(BackendUnavailable):
                lock.acquire(timeout=5)
            # the create reached the server: an entry nobody knows about is in the line
            assert len(raw.get_children(path)) == 1
            proxy.reset_connections()  # the held replies go with the connection
            proxy.heal()
            eventually(lambda: raw.get_children(path) == [], "the orphan is deleted")
            assert lock.acquire(timeout=PATIENCE)
            lock.release()
        finally:
            locks.close()


# -- Curator's node names --------------------------------------------------------------------


def test_a_curator_style_mutex_entry_and_tumbler_exclude_each_other(connect, url, raw) -> None:
    locks = connect()
    path = f"{base_of(url)}/shared-with-java"
    raw.ensure_path(path)
    # what Curator's InterProcessMutex creates in protection mode
    curator = raw.create(
        f"{path}/_c_{uuid.uuid4()}-lock-", b"10.0.0.7", ephemeral=True, sequence=True
    )
    lock = locks.lock("shared-with-java")
    assert not lock.acquire(blocking=False)
    state = locks.status("shared-with-java")
    assert len(state.holders) == 1
    assert state.holders[0].holder == "10.0.0.7"
    raw.delete(curator)
    assert lock.acquire(timeout=PATIENCE)
    # and a Curator client, which sorts by the digits after "lock-", sees tumbler ahead of it
    late = raw.create(f"{path}/_c_{uuid.uuid4()}-lock-", b"", ephemeral=True, sequence=True)
    children = sorted(raw.get_children(path), key=lambda node: node.rsplit("lock-", 1)[1])
    assert children[-1] == late.rsplit("/", 1)[1]
    lock.release()


# -- waking waiters --------------------------------------------------------------------------


def test_a_release_wakes_only_the_next_waiter(connect) -> None:
    holder = connect()
    lock = holder.lock("herd")
    assert lock.acquire()
    waiters = [connect() for _ in range(4)]
    # what ZooKeeper's watches deliver to each waiting client (re-checks do not count)
    woken = count_wakeups(waiters)
    with queued(holder, waiters, "herd", PATIENCE) as line:
        assert woken == [0, 0, 0, 0]
        lock.release()
        assert line.first_granted.wait(PATIENCE)
        # The next in line was woken; nobody behind it was. Its re-check may have let it in
        # before its client's event thread delivered the watch that the release fired (a
        # loaded machine): the watch comes all the same.
        eventually(lambda: woken[0] >= 1, "the watch of the next in line fired")
        assert woken[1:] == [0, 0, 0]
    assert line.order == [0, 1, 2, 3]


# -- sessions --------------------------------------------------------------------------------


def expire_session(locks: tumbler.Locks | tumbler.aio.AsyncLocks, server_hosts: str) -> None:
    """End a client's session from outside, as the ensemble does when it times out: a second
    connection with the same session id and password closes it."""
    session_id, password = locks._backend._client.client_id
    twin = KazooClient(hosts=server_hosts, client_id=(session_id, password))
    twin.start(timeout=10)
    twin.stop()
    twin.close()


def test_an_expired_session_loses_every_hold_at_once(connect, zookeeper_server) -> None:
    locks, other = connect(), connect()
    lost: list[tumbler.Hold] = []
    first = locks.lock("expired-a", ttl=30)
    second = locks.lock("expired-b", ttl=30)
    assert first.acquire()
    assert second.acquire()
    first.hold.on_lost(lost.append)
    expire_session(locks, zookeeper_server.connect_string)
    assert first.hold.wait_lost(timeout=PATIENCE)
    assert second.hold.wait_lost(timeout=PATIENCE)
    assert "session expired" in first.hold.lost_reason
    assert lost == [first.hold]
    # the ensemble deleted the entries with the session: others may take the locks at once
    assert other.lock("expired-a").acquire(blocking=False)
    # and the client goes on with a new session (calls made while kazoo makes it are
    # BackendUnavailable, as for any reconnection)
    later = locks.lock("expired-c")

    def acquired() -> bool:
        try:
            return later.acquire(blocking=False)
        except BackendUnavailable:
            return False

    eventually(acquired, "the client has a new session")


def test_a_waiter_is_granted_on_a_read_made_after_a_sync_with_the_leader(
    zookeeper_server: ZooKeeperServer,
) -> None:
    """A member answers reads from what it has applied, which may be behind the leader: a
    waiter that finds itself first in such a read could be granted a lock the leader has
    given to another (its own session expired and its entry with it). A woken waiter sends a
    sync and its one read of the line together, and is granted on that read; an acquire that
    is granted by its own creation needs none (the member has applied at least that)."""
    base = base_path()
    url = f"{zookeeper_server.url_for(base)}?session_timeout=10"
    with tumbler.connect(url) as holder, tumbler.connect(url) as waiter:
        sent: list[tuple[str, str]] = []
        client = waiter._backend._client
        sync_async = client.sync_async
        get_children_async = client.get_children_async

        def syncing(path: str) -> Any:
            sent.append(("sync", path))
            return sync_async(path)

        def listing(path: str, *args: Any, **kwargs: Any) -> Any:
            sent.append(("children", path))
            return get_children_async(path, *args, **kwargs)

        client.sync_async = syncing
        client.get_children_async = listing
        answers: list[object] = []
        try_grant = waiter._backend.try_grant

        def answered(request: GrantRequest) -> Any:
            answers.append(try_grant(request))
            return answers[-1]

        waiter._backend.try_grant = answered
        assert waiter.lock("free").acquire(timeout=0)
        assert ("sync", f"{base}/{encode_name('free')}") not in sent
        lock = holder.lock("busy")
        assert lock.acquire(timeout=0)
        waiting = background(lambda: waiter.lock("busy").acquire(timeout=PATIENCE))
        eventually(lambda: None in answers, "the waiter waits, its watch set")
        busy = f"{base}/{encode_name('busy')}"
        assert ("sync", busy) not in sent
        sent.clear()
        lock.release()
        assert waiting.result() is True
        assert sent == [("sync", busy), ("children", busy)]


@pytest.mark.asyncio
async def test_asyncio_a_waiter_is_granted_on_a_read_made_after_a_sync_with_the_leader(
    zookeeper_server: ZooKeeperServer,
) -> None:
    """The same in the asyncio flavour: a woken waiter sends its sync and its one read of
    the line together, and is granted on that read."""
    base = base_path()
    url = f"{zookeeper_server.url_for(base)}?session_timeout=10"
    async with await tumbler.aio.connect(url) as holder, await tumbler.aio.connect(url) as waiter:
        sent: list[tuple[str, str]] = []
        client = waiter._backend._client
        sync_async = client.sync_async
        get_children_async = client.get_children_async

        def syncing(path: str) -> Any:
            sent.append(("sync", path))
            return sync_async(path)

        def listing(path: str, *args: Any, **kwargs: Any) -> Any:
            sent.append(("children", path))
            return get_children_async(path, *args, **kwargs)

        client.sync_async = syncing
        client.get_children_async = listing
        waits = asyncio.Event()
        try_grant = waiter._backend.try_grant

        async def answered(request: GrantRequest) -> Any:
            answer = await try_grant(request)
            if answer is None:
                waits.set()
            return answer

        waiter._backend.try_grant = answered
        lock = holder.lock("busy")
        assert await lock.acquire(timeout=0)
        waiting = asyncio.ensure_future(waiter.lock("busy").acquire(timeout=PATIENCE))
        await asyncio.wait_for(waits.wait(), PATIENCE)
        busy = f"{base}/{encode_name('busy')}"
        assert ("sync", busy) not in sent
        sent.clear()
        await lock.release()
        assert await waiting is True
        assert sent == [("sync", busy), ("children", busy)]


def test_an_entry_of_its_own_session_left_by_a_lost_create_is_cleared_from_the_line(
    zookeeper_server: ZooKeeperServer, raw: KazooClient
) -> None:
    """A create whose reply was lost with a member, applied by the ensemble only after the
    retry had looked for it and made a second entry: the first is this session's, of this
    owner, and unknown to the client. It is deleted when the line is read, not left to hold
    every waiter up for as long as the session lives; an entry of the same owner made by
    another session (another client given that owner) is left alone."""
    base = base_path()
    with tumbler.connect(f"{zookeeper_server.url_for(base)}?session_timeout=10") as locks:
        backend = locks._backend
        request = GrantRequest("stray", "a", False, 1, True, 10.0, "test")
        prefix = f"{base}/stray/{entry_prefix('a', False, 1)}"
        stray = backend._client.create(prefix, b"", ephemeral=True, sequence=True, makepath=True)
        grant = backend.try_grant(request)
        assert grant is not None
        assert raw.exists(stray) is None
        assert backend.release("stray", "a")
        # the same owner's entry from another session stays, ahead of this one's
        theirs = raw.create(prefix, b"", ephemeral=True, sequence=True)
        assert backend.try_grant(request) is None
        assert raw.exists(theirs) is not None
        raw.delete(theirs)
        eventually(lambda: backend.try_grant(request) is not None, "the lock is granted")


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_reply_out_of_order_fails_the_call_as_a_lost_connection(
    zookeeper_server: ZooKeeperServer, flavour: str
) -> None:
    """One reply lost while the next ones pass: kazoo meets a reply to a later request, drops
    the connection and fails the call it waited for with a bare ``RuntimeError`` ("xids do
    not match"). Its caller is told what it met, a lost connection (``BackendUnavailable``),
    and the client goes on."""
    upstream = (zookeeper_server.host, zookeeper_server.port)
    with FaultProxy(upstream) as proxy:
        url = f"zookeeper://127.0.0.1:{proxy.port}{base_path()}?session_timeout=20"
        if flavour == "sync":
            locks = tumbler.connect(url)
            status, close = locks.status, locks.close
        else:
            loop = asyncio.new_event_loop()
            alocks = loop.run_until_complete(tumbler.aio.connect(url))

            def status(name: str) -> Any:
                return asyncio.run_coroutine_threadsafe(alocks.status(name), loop).result()

            running = threading.Thread(target=loop.run_forever, daemon=True)
            running.start()

            def close() -> None:
                asyncio.run_coroutine_threadsafe(alocks.close(), loop).result()
                loop.call_soon_threadsafe(loop.stop)
                running.join()
                loop.close()

        try:
            assert status("before").holders == ()
            proxy.drop("downstream")
            first = background(lambda: status("first"))
            eventually(lambda: proxy.stats().downstream.dropped > 0, "the first reply is lost")
            proxy.heal()
            second = background(lambda: status("second"))
            with pytest.raises(BackendUnavailable, match="reply came out of order"):
                first.result()
            with contextlib.suppress(BackendUnavailable):  # it met the lost connection, or not
                second.result()

            def answers() -> bool:
                try:
                    return status("after").holders == ()
                except BackendUnavailable:
                    return False  # still connecting again

            eventually(answers, "the client answers again")
        finally:
            close()


def test_a_dropped_connection_puts_holds_in_doubt_until_confirmed(
    zookeeper_server: ZooKeeperServer,
) -> None:
    # The connection is cut at a proxy, not by killing the server: ZooKeeper 3.8.0 may leave
    # a client that reconnects while it is starting up without an answer for a whole read
    # timeout, which would test that bug rather than tumbler.
    upstream = (zookeeper_server.host, zookeeper_server.port)
    with FaultProxy(upstream) as proxy:
        url = f"zookeeper://127.0.0.1:{proxy.port}{base_path()}?session_timeout=20"
        locks = tumbler.connect(url)
        try:
            lock = locks.lock("doubt", ttl=20)
            assert lock.acquire()
            hold = lock.hold
            token = hold.token
            proxy.refuse_new()
            proxy.reset_connections()
            eventually(lambda: hold.in_doubt, "the hold is in doubt")
            assert not hold.held
            assert not hold.lost
            with pytest.raises(HoldInDoubt):
                hold.check()
            proxy.allow_new()  # the session outlives a break shorter than its timeout
            eventually(lambda: hold.held, "the hold is confirmed again")
            assert not hold.in_doubt
            assert hold.token == token
            lock.release()
        finally:
            locks.close()


@pytest.mark.asyncio
async def test_asyncio_holds_learn_of_an_expired_session(url, zookeeper_server) -> None:
    locks = await tumbler.aio.connect(url)
    try:
        lock = locks.lock("expired-async", ttl=30)
        assert await lock.acquire()
        hold = lock.hold
        expire_session(locks, zookeeper_server.connect_string)
        assert await hold.wait_lost(timeout=PATIENCE)
        assert "session expired" in hold.lost_reason
    finally:
        await locks.close()


def test_status_shows_a_holder_bound_to_its_session_and_the_session_timeout(
    zookeeper_server,
) -> None:
    """A grant here outlives its holder by the holder's session timeout, not by its lease."""
    base = base_path()
    holder = tumbler.connect(f"{zookeeper_server.url_for(base)}?session_timeout=3")
    operator = tumbler.connect(f"{zookeeper_server.url_for(base)}?session_timeout=7")
    try:
        with holder.lock("session-bound", ttl=2):
            (info,) = operator.status("session-bound").holders
            assert info.session is True
            assert info.expires_in == 3.0  # the holder's session timeout, not the 2 s lease
            (state,) = operator.status_all()
            assert state.holders == (info,)
    finally:
        holder.close()
        operator.close()


@pytest.mark.asyncio
async def test_asyncio_status_shows_a_holder_bound_to_its_session(zookeeper_server) -> None:
    url = f"{zookeeper_server.url_for(base_path())}?session_timeout=3"
    locks = await tumbler.aio.connect(url)
    try:
        async with locks.lock("session-bound", ttl=2):
            (info,) = (await locks.status("session-bound")).holders
            assert (info.session, info.expires_in) == (True, 3.0)
    finally:
        await locks.close()


def test_the_lease_is_capped_by_the_negotiated_session_timeout(tmp_path) -> None:
    # the server allows at most 2 s; the client asks for 10 and must not believe in 10
    with ZooKeeperServer(tmp_path, max_session_timeout=2000) as server:
        locks = tumbler.connect(f"{server.url_for(base_path())}?session_timeout=10")
        try:
            assert locks.capabilities.max_ttl == 2.0
            with locks.lock("capped", ttl=30) as hold:
                assert hold.ttl == 2.0
        finally:
            locks.close()


def test_an_unreachable_ensemble_is_backend_unavailable() -> None:
    with pytest.raises(BackendUnavailable):
        tumbler.connect(f"zookeeper://127.0.0.1:{free_port()}?connect_timeout=0.5")


# connect_timeout is long: refused connections must end the start long before it
REFUSED_URL = "zookeeper://app:pa55word@127.0.0.1:{},127.0.0.1:{}/x?connect_timeout=10"


def check_refused(error: BackendUnavailable, ports: tuple[int, int], seconds: float) -> None:
    message = str(error)
    assert "connection refused" in message
    for port in ports:
        assert f"127.0.0.1:{port}" in message
    assert "pa55word" not in message
    assert seconds < 10  # it did not wait for connect_timeout


def test_when_every_host_refuses_connecting_fails_at_once_and_says_so() -> None:
    ports = (free_port(), free_port())  # nothing listens there
    began = time.monotonic()
    with pytest.raises(BackendUnavailable) as caught:
        tumbler.connect(REFUSED_URL.format(*ports))
    check_refused(caught.value, ports, time.monotonic() - began)


@pytest.mark.asyncio
async def test_asyncio_when_every_host_refuses_connecting_fails_at_once_and_says_so() -> None:
    ports = (free_port(), free_port())
    began = time.monotonic()
    with pytest.raises(BackendUnavailable) as caught:
        await tumbler.aio.connect(REFUSED_URL.format(*ports))
    check_refused(caught.value, ports, time.monotonic() - began)


def test_a_host_that_refuses_does_not_end_the_start_while_another_answers(
    zookeeper_server,
) -> None:
    url = f"zookeeper://127.0.0.1:{free_port()},{zookeeper_server.connect_string}{base_path()}"
    locks = tumbler.connect(url)
    try:
        with locks.lock("one-host-up") as hold:
            assert hold.held
    finally:
        locks.close()


# -- credentials never reach a log -----------------------------------------------------------


def test_no_credential_reaches_any_log(zookeeper_server, caplog) -> None:
    """kazoo logs every request it sends at DEBUG, the Auth packet with USER:PASSWORD and the
    Connect packet with the session's password among them, and that password in hex at its
    level 5: tumbler's logger for kazoo takes them out, at every level."""
    caplog.set_level(1)
    locks = tumbler.connect(f"zookeeper://app:s3cr3t-pw@{zookeeper_server.connect_string}/cred")
    try:
        session_password = locks._backend._client._session_passwd
        with locks.lock("logged") as hold:
            assert hold.held
    finally:
        locks.close()
    text = caplog.text
    assert "Sending request(xid=-4): Auth(" in text  # the packet was logged, redacted
    assert "s3cr3t-pw" not in text
    assert binascii.hexlify(session_password).decode() not in text
    assert repr(session_password) not in text


# -- digest ACLs -----------------------------------------------------------------------------


def test_digest_credentials_protect_the_nodes(zookeeper_server) -> None:
    base = base_path()
    host = zookeeper_server.connect_string
    owner = tumbler.connect(f"zookeeper://app:right@{host}{base}")
    try:
        with owner.lock("secret"):
            raw = KazooClient(hosts=host, auth_data=[("digest", "app:right")])
            raw.start(timeout=10)
            try:
                assert raw.get_acls(base)[0] == [make_digest_acl("app", "right", all=True)]
            finally:
                raw.stop()
                raw.close()
        for stranger in (f"zookeeper://app:wrong@{host}{base}", f"zookeeper://{host}{base}"):
            with pytest.raises(PermissionDenied, match="refused access"):
                tumbler.connect(stranger)
    finally:
        owner.close()


# -- a 3-node ensemble -----------------------------------------------------------------------


def test_killing_the_leader_keeps_the_lock_exclusive_and_waiters_go_on(
    zookeeper_ensemble: ZooKeeperEnsemble,
) -> None:
    ensemble = zookeeper_ensemble
    url = f"{ensemble.url_for(base_path())}?session_timeout=10"
    holder, waiter, checker = (tumbler.connect(url) for _ in range(3))
    try:
        lock = holder.lock("election", ttl=10)
        assert lock.acquire()
        hold = lock.hold
        result: list[tumbler.Hold] = []
        started = threading.Event()

        def wait() -> None:
            mine = waiter.lock("election")
            started.set()
            if mine.acquire(timeout=60):
                result.append(mine.hold)

        thread = threading.Thread(target=wait)
        thread.start()
        started.wait(PATIENCE)
        eventually(lambda: checker.status("election").waiters == 1, "the waiter is in line")
        leader = ensemble.leader()
        assert leader is not None
        ensemble.kill(leader)
        new_leader = ensemble.wait_for_quorum(timeout=60)
        assert new_leader != leader
        # exclusive throughout: the hold is confirmed on the new leader, the waiter still waits
        eventually(lambda: hold.held, "the holder's hold is confirmed")
        assert not result
        assert not checker.lock("election").acquire(blocking=False)
        token = hold.token
        lock.release()
        thread.join(timeout=60)
        assert result
        assert result[0].token > token
        result[0].release()
        # the killed member comes back and the ensemble serves on
        ensemble.restart(leader)
        ensemble.wait_for_quorum(timeout=60)
        assert checker.lock("election").acquire(timeout=PATIENCE)
    finally:
        for client in (holder, waiter, checker):
            client.close()
