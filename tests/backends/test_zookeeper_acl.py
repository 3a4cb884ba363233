"""ZooKeeper ACLs: a client with credentials refuses base and lock nodes that others may
change, accepts the nodes tumbler makes, and checks each lock node once; a client without
credentials is refused on nodes that carry digest ACLs. Both flavours.

The attack these cases stand for (issue 19): a base or lock node made with open ACLs
(``world:anyone``) by a client without credentials, which can then delete a holder's entry,
or put one of its own ahead of it, and take the lock. Nodes are made "the way another
program would" by plain kazoo clients; the super user of the test server sets ACLs the way
an operator would. Every case runs against a real ZooKeeper started by the fixtures in
tests/servers.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE, make_acl, make_digest_acl

import tumbler
import tumbler.aio
from tumbler.backends.zookeeper.common import entry_data, entry_prefix
from tumbler.errors import ConfigurationError, PermissionDenied
from tumbler.testing.backends.zookeeper.server import ZooKeeperServer

USER, PASSWORD = "app", "acl-Pa55word"
DIGEST = make_digest_acl(USER, PASSWORD, all=True)


def base_path() -> str:
    return f"/tumbler-acl-{uuid.uuid4().hex[:12]}"


class Runner:
    """A test's clients in one flavour: blocking calls, or coroutines run on one event loop
    (an asyncio client belongs to the loop it was made on)."""

    def __init__(self, flavour: str) -> None:
        self.flavour = flavour
        self.loop = asyncio.new_event_loop() if flavour == "asyncio" else None
        self.clients: list[Any] = []

    def run(self, step: Any) -> Any:
        return step if self.loop is None else self.loop.run_until_complete(step)

    def connect(self, url: str) -> Any:
        opening = tumbler.connect(url) if self.loop is None else tumbler.aio.connect(url)
        client = self.run(opening)
        self.clients.append(client)
        return client

    def take(self, client: Any, name: str) -> Any:
        """The hold of lock ``name`` of ``client`` if it is free (one try); None if not."""
        lock = client.lock(name)
        if self.loop is None:
            return lock.hold if lock.acquire(blocking=False) else None

        async def atake() -> Any:
            # the hold is the task's: asked for in the task that acquired it
            return lock.hold if await lock.acquire(blocking=False) else None

        return self.loop.run_until_complete(atake())

    def release(self, hold: Any) -> None:
        # the hold, not the lock: each asyncio step is a task of its own
        self.run(hold.release())

    def close(self) -> None:
        for client in self.clients:
            self.run(client.close())
        if self.loop is not None:
            self.loop.close()


@pytest.fixture(params=["sync", "asyncio"])
def runner(request: pytest.FixtureRequest) -> Iterator[Runner]:
    running = Runner(request.param)
    yield running
    running.close()


def kazoo(server: ZooKeeperServer, *auth: tuple[str, str]) -> Iterator[KazooClient]:
    client = KazooClient(hosts=server.connect_string, auth_data=list(auth) or None)
    client.start(timeout=20)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def anonymous(zookeeper_server: ZooKeeperServer) -> Iterator[KazooClient]:
    """A client without credentials: what it makes has kazoo's default, open, ACL."""
    yield from kazoo(zookeeper_server)


@pytest.fixture
def operator(zookeeper_server: ZooKeeperServer) -> Iterator[KazooClient]:
    """The super user, who passes every ACL."""
    yield from kazoo(zookeeper_server, zookeeper_server.super_auth)


def url_of(server: ZooKeeperServer, base: str, credentials: bool = True) -> str:
    userinfo = f"{USER}:{PASSWORD}@" if credentials else ""
    return f"zookeeper://{userinfo}{server.connect_string}{base}?session_timeout=3"


def check_refusal(error: ConfigurationError, node: str) -> None:
    text = str(error)
    assert f"the ZooKeeper node {node} may be changed by others than 'app'" in text
    assert "world:anyone:cdrwa" in text  # the ACL that lets them
    assert PASSWORD not in text


# -- refused with credentials ------------------------------------------------------------------


def test_an_open_base_node_is_refused(
    runner: Runner, zookeeper_server: ZooKeeperServer, anonymous: KazooClient
) -> None:
    base = base_path()
    anonymous.create(base)
    with pytest.raises(ConfigurationError) as refused:
        runner.connect(url_of(zookeeper_server, base))
    check_refusal(refused.value, base)
    # nothing changed
    assert anonymous.get_acls(base)[0] == OPEN_ACL_UNSAFE
    assert anonymous.get_children(base) == []


def test_an_open_lock_node_is_refused_and_left_as_it_was(
    runner: Runner,
    zookeeper_server: ZooKeeperServer,
    anonymous: KazooClient,
    operator: KazooClient,
) -> None:
    # made open by someone without credentials; the base was locked down since, not its child
    base = base_path()
    anonymous.create(f"{base}/orders", makepath=True)
    operator.set_acls(base, [DIGEST])
    locks = runner.connect(url_of(zookeeper_server, base))
    for _ in range(2):  # a refused node is checked again: not remembered as good
        with pytest.raises(ConfigurationError) as refused:
            runner.take(locks, "orders")
        check_refusal(refused.value, f"{base}/orders")
        assert anonymous.get_children(f"{base}/orders") == []  # the entry made is gone
        assert anonymous.get_acls(f"{base}/orders")[0] == OPEN_ACL_UNSAFE
    # lock nodes the client makes itself are its own; and once the operator has put the
    # refused one right, it is used
    assert runner.take(locks, "invoices") is not None
    operator.set_acls(f"{base}/orders", [DIGEST])
    assert runner.take(locks, "orders") is not None


def test_any_right_beyond_reading_is_refused(
    runner: Runner, zookeeper_server: ZooKeeperServer, operator: KazooClient
) -> None:
    base = base_path()
    others = {
        "c": make_acl("world", "anyone", create=True),
        "d": make_acl("ip", "127.0.0.1", delete=True),
        "w": make_acl("digest", "someone:aGFzaA==", write=True),
        "a": make_acl("world", "anyone", admin=True),
    }
    operator.create(base, acl=[DIGEST])
    for letter, acl in others.items():
        operator.set_acls(base, [DIGEST, acl])
        with pytest.raises(ConfigurationError) as refused:
            runner.connect(url_of(zookeeper_server, base))
        shown = f"{acl.id.scheme}:{acl.id.id.partition(':')[0]}"
        assert f"{shown}{':<hash>' if acl.id.scheme == 'digest' else ''}:{letter}" in str(
            refused.value
        )
        assert "aGFzaA==" not in str(refused.value)  # a digest's hash is not shown


# -- accepted --------------------------------------------------------------------------------


def test_nodes_made_by_tumbler_with_the_same_credentials_are_accepted(
    runner: Runner, zookeeper_server: ZooKeeperServer, operator: KazooClient
) -> None:
    url = url_of(zookeeper_server, base_path())
    first = runner.connect(url)  # makes the base
    held = runner.take(first, "shared")  # makes the lock node
    assert held is not None
    second = runner.connect(url)
    assert runner.take(second, "shared") is None  # busy, not refused
    runner.release(held)
    assert runner.take(second, "shared") is not None


def test_others_may_read(
    runner: Runner, zookeeper_server: ZooKeeperServer, operator: KazooClient
) -> None:
    base = base_path()
    readable = [DIGEST, make_acl("world", "anyone", read=True)]
    operator.create(f"{base}/report", acl=readable, makepath=True)
    operator.set_acls(base, readable)
    locks = runner.connect(url_of(zookeeper_server, base))
    assert runner.take(locks, "report") is not None


# -- without credentials ---------------------------------------------------------------------


def test_without_credentials_nodes_with_digest_acls_are_refused(
    runner: Runner, zookeeper_server: ZooKeeperServer, operator: KazooClient
) -> None:
    """Not new: a client without credentials is not checked (its nodes are open to all),
    and ZooKeeper refuses it what the digest ACLs do not give it."""
    base = base_path()
    operator.create(base)  # open: anyone may make lock nodes here
    operator.create(f"{base}/guarded", acl=[DIGEST])
    for kazoo_client in kazoo(zookeeper_server, ("digest", f"{USER}:{PASSWORD}")):
        kazoo_client.create(f"{base}/guarded/_c_holder-lock-", ephemeral=True, sequence=True)
        (entry,) = operator.get_children(f"{base}/guarded")
        stranger = runner.connect(url_of(zookeeper_server, base, credentials=False))
        with pytest.raises(PermissionDenied):
            runner.take(stranger, "guarded")
        assert operator.get_children(f"{base}/guarded") == [entry]
        assert runner.take(stranger, "open") is not None  # its own lock node, open


# -- checked once per client -----------------------------------------------------------------


def test_a_lock_node_is_checked_once_per_client(
    runner: Runner, zookeeper_server: ZooKeeperServer
) -> None:
    locks = runner.connect(url_of(zookeeper_server, base_path()))
    client = locks._backend._client
    checked: list[str] = []
    get_acls_async = client.get_acls_async

    def counted(path: str) -> Any:
        checked.append(path.rsplit("/", 1)[1])
        return get_acls_async(path)

    client.get_acls_async = counted
    for name in ("a", "a", "b", "a", "b"):
        hold = runner.take(locks, name)
        assert hold is not None
        runner.release(hold)
    assert checked == ["a", "b"]


def test_an_entry_found_again_after_a_lost_reply_is_checked_too(
    runner: Runner,
    zookeeper_server: ZooKeeperServer,
    anonymous: KazooClient,
    operator: KazooClient,
) -> None:
    """The reply that was lost carried the lock node's ACL as well: the entry found again by
    its owner hash (protection mode) is no grant until the node is checked, and is deleted if
    the node is refused."""
    base = base_path()
    anonymous.create(f"{base}/orphan", makepath=True)
    operator.set_acls(base, [DIGEST])
    locks = runner.connect(url_of(zookeeper_server, base))
    backend = locks._backend
    request = locks._request("orphan", False, 1, False, 30)
    # what a lost reply leaves: the entry exists, the client does not know its name
    operator.create(
        f"{base}/orphan/{entry_prefix(request.owner, False, 1)}",
        entry_data("lost reply", 3.0),
        acl=[DIGEST],
        ephemeral=True,
        sequence=True,
    )
    backend._uncertain.add((request.name, request.owner))
    with pytest.raises(ConfigurationError) as refused:
        runner.run(backend.try_grant(request))
    check_refusal(refused.value, f"{base}/orphan")
    assert anonymous.get_children(f"{base}/orphan") == []
    assert (request.name, request.owner) not in backend._uncertain
