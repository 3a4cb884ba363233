"""ZooKeeper ``force_release`` notes: each evicted owner, and only them, finds the note that
``evicted`` reads, for at least as long as its grant would have outlived it; later force
releases of the name drop the notes whose time has passed, and the notes' node once it is
empty. The node (``BASE/#evicted/<name>``) is never taken for a lock, and with credentials
it carries the user's ACL. Both flavours.

Every case runs against a real ZooKeeper started by the fixtures in tests/servers.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest
from tumbler.backends.zookeeper import common as zookeeper
from tumbler.backends.zookeeper import opener
from tumbler.testing.backends.zookeeper.server import ZooKeeperServer
from tumbler.testing.conformance.compat import eventually

#: short: the notes of a test outlive the evicted grants by about this
SESSION = 1.0
NOTE = "force-released by ops@host-1 (pid 4242) at 2026-11-24T10:00:00Z: stuck deploy"
USER, PASSWORD = "app", "evicted-Pa55word"


class Flavour:
    """Backends of one flavour: blocking calls, or coroutines run on one event loop."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.loop = asyncio.new_event_loop() if name == "asyncio" else None
        self.backends: list[Any] = []

    def run(self, step: Any) -> Any:
        return step if self.loop is None else self.loop.run_until_complete(step)

    def open(self, url: str) -> Any:
        opening = opener.open_sync if self.loop is None else opener.open_async
        backend = self.run(opening(parse_url(url)))
        self.backends.append(backend)
        return backend

    def call(self, backend: Any, method: str, *args: Any) -> Any:
        return self.run(getattr(backend, method)(*args))

    def close(self) -> None:
        for backend in self.backends:
            self.run(backend.close())
        if self.loop is not None:
            self.loop.close()


@pytest.fixture(params=["sync", "asyncio"])
def flavour(request: pytest.FixtureRequest) -> Iterator[Flavour]:
    made = Flavour(request.param)
    yield made
    made.close()


@pytest.fixture
def base() -> str:
    return f"/tumbler-evicted-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def url(zookeeper_server: ZooKeeperServer, base: str) -> str:
    return f"{zookeeper_server.url_for(base)}?session_timeout={SESSION:g}"


def grant(flavour: Flavour, backend: Any, name: str, shared: bool = False, limit: int = 1) -> Any:
    owner = secrets.token_urlsafe(18)
    request = GrantRequest(name, owner, shared, limit, False, SESSION, "test")
    return owner, flavour.call(backend, "try_grant", request)


def test_each_evicted_owner_and_only_them_finds_the_note(flavour: Flavour, url: str) -> None:
    holder_side, waiter_side, other_side, operator = (flavour.open(url) for _ in range(4))
    released, granted = grant(flavour, other_side, "job")
    assert granted is not None
    assert flavour.call(other_side, "release", "job", released)
    holder, granted = grant(flavour, holder_side, "job")
    assert granted is not None
    waiter, queued = grant(flavour, waiter_side, "job")
    assert queued is None  # waiting in the line behind the holder

    assert flavour.call(operator, "force_release", "job", NOTE) == 1

    assert flavour.call(operator, "evicted", "job", holder) == NOTE
    # the holder's own client learns of it at its next renewal, and finds the note
    assert flavour.call(holder_side, "renew", "job", holder, SESSION) is None
    assert flavour.call(holder_side, "evicted", "job", holder) == NOTE
    for owner in (waiter, released, "nobody-ever"):
        assert flavour.call(operator, "evicted", "job", owner) is None
    assert flavour.call(operator, "evicted", "never-forced", holder) is None
    # the waiter's entry was left in the line: it is the holder now
    (holder_info,) = flavour.call(operator, "inspect", "job").holders
    assert holder_info.token == queued_token(flavour, waiter_side, waiter)


def queued_token(flavour: Flavour, backend: Any, owner: str) -> int:
    request = GrantRequest("job", owner, False, 1, False, SESSION, "test")
    granted = flavour.call(backend, "try_grant", request)
    assert granted is not None
    return int(granted.token)


def test_every_evicted_reader_gets_the_note(flavour: Flavour, url: str) -> None:
    clients = [flavour.open(url) for _ in range(3)]
    readers = [grant(flavour, client, "table", shared=True, limit=0) for client in clients[:2]]
    assert all(granted is not None for _, granted in readers)

    assert flavour.call(clients[2], "force_release", "table", NOTE) == 2

    for owner, _ in readers:
        assert flavour.call(clients[2], "evicted", "table", owner) == NOTE


def test_a_note_outlives_the_grant_then_goes_with_its_node(
    flavour: Flavour, url: str, base: str, raw: KazooClient
) -> None:
    holder_side, operator = flavour.open(url), flavour.open(url)
    operator.note_grace = 0.0  # only the lease: the test need not wait for the clocks' margin
    holder, granted = grant(flavour, holder_side, "job")
    assert granted is not None
    session = holder_side.session_timeout  # as negotiated: what the entry records
    forced = time.time()
    assert flavour.call(operator, "force_release", "job", NOTE) == 1
    notes = f"{base}/#evicted/job"
    assert raw.exists(notes) is not None

    # a later force_release within the lease prunes, but keeps this note
    assert flavour.call(operator, "force_release", "job", "another note") == 0
    assert flavour.call(operator, "evicted", "job", holder) == NOTE

    def pruned() -> bool:
        flavour.call(operator, "force_release", "job", "another note")
        return flavour.call(operator, "evicted", "job", holder) is None

    eventually(pruned, "the note is dropped")
    assert time.time() >= forced + session
    assert raw.exists(notes) is None  # nothing left in it: deleted


def test_notes_of_other_names_and_owners_are_kept_apart(flavour: Flavour, url: str) -> None:
    first_side, second_side, operator = (flavour.open(url) for _ in range(3))
    first, _ = grant(flavour, first_side, "a")
    second, _ = grant(flavour, second_side, "b")

    assert flavour.call(operator, "force_release", "a", "note a") == 1
    assert flavour.call(operator, "force_release", "b", "note b") == 1

    assert flavour.call(operator, "evicted", "a", first) == "note a"
    assert flavour.call(operator, "evicted", "b", second) == "note b"
    assert flavour.call(operator, "evicted", "a", second) is None


@pytest.mark.parametrize("name", ["#evicted", ".evicted", "%23evicted"])
def test_the_notes_node_is_never_a_lock(flavour: Flavour, url: str, name: str) -> None:
    holder_side, operator = flavour.open(url), flavour.open(url)
    other, _ = grant(flavour, holder_side, "other")
    assert flavour.call(operator, "force_release", "other", NOTE) == 1
    holder, granted = grant(flavour, holder_side, name)
    assert granted is not None

    states = flavour.call(operator, "inspect_all")
    assert [state.name for state in states] == [name]
    assert flavour.call(operator, "force_release", name, NOTE) == 1
    assert flavour.call(operator, "evicted", name, holder) == NOTE
    assert flavour.call(operator, "evicted", "other", other) == NOTE


def test_with_credentials_the_notes_carry_the_users_acl(
    flavour: Flavour, zookeeper_server: ZooKeeperServer, base: str
) -> None:
    url = f"zookeeper://{USER}:{PASSWORD}@{zookeeper_server.connect_string}{base}?session_timeout=3"
    holder_side, operator = flavour.open(url), flavour.open(url)
    holder, _ = grant(flavour, holder_side, "job")
    assert flavour.call(operator, "force_release", "job", NOTE) == 1

    digest = make_digest_acl(USER, PASSWORD, all=True)
    # the super user, who may read every ACL
    operator_view = KazooClient(
        hosts=zookeeper_server.connect_string, auth_data=[zookeeper_server.super_auth]
    )
    operator_view.start(timeout=10)
    try:
        for node in (f"{base}/#evicted", f"{base}/#evicted/job"):
            acls, _stat = operator_view.get_acls(node)
            assert acls == [digest], node
    finally:
        operator_view.stop()
        operator_view.close()
    assert flavour.call(holder_side, "evicted", "job", holder) == NOTE
    # the lock is still usable by clients that check ACLs
    _again, granted = grant(flavour, flavour.open(url), "job")
    assert granted is not None


def test_damaged_notes_read_as_none_and_are_overwritten(
    flavour: Flavour, url: str, base: str, raw: KazooClient
) -> None:
    raw.create(f"{base}/#evicted/job", b"not json", makepath=True)
    holder_side, operator = flavour.open(url), flavour.open(url)
    holder, _ = grant(flavour, holder_side, "job")
    assert flavour.call(operator, "evicted", "job", holder) is None

    assert flavour.call(operator, "force_release", "job", NOTE) == 1

    assert flavour.call(operator, "evicted", "job", holder) == NOTE
    data, _stat = raw.get(f"{base}/#evicted/job")
    assert list(json.loads(data)["evicted"]) == [zookeeper.node_owner(holder)]
