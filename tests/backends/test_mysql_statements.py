"""The MySQL / MariaDB backend's stored procedures, on a real MariaDB, before any client.

- ``{p}grant`` is held to ``tumbler._core.plan`` on random lines, as PostgreSQL's function is
  (``test_postgresql_rule.py``): an answer it gives is the rule's, with the write the rule
  names; an "undecided" answer writes nothing; the plain cases are answered. Some grants of
  a line are lapsed (their lease over, kept for a lock-delay): the rule counts them as
  grants, and their owners get nothing back.
- ``{p}release`` hands the lock to the first exclusive waiter whose client listens, leaves
  that client a wake-up with the hand-off terms, interrupts its listener's sleep, and leaves
  no row of a name nobody holds or waits for; a waiter whose client does not listen is not
  handed the lock.
- The listener's wait loses no wake-up: one left before it starts ends it at once; it ends
  at once, saying so, when the doorbell's holder is gone.
- Tokens keep increasing after every row of every name is gone.
- Upkeep never waits on a transaction on a name: a sweep skips the rows one holds, and a
  grant deletes its own name's expired rows without touching another name's. A sweep
  deletes entries whose lease ends past any tumbler grants, of any name.

Everything runs as the tests' database user, not as an administrator: a release interrupts
another connection of its own user. Each test has a table prefix of its own.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

import pymysql
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tumbler._core import Entry
from tumbler.backends.kit.owners import owner_hash
from tumbler.backends.mysql.statements import Statements
from tumbler.testing.backends.mysql.server import MariaDBServer
from tumbler.testing.conformance.compat import PATIENCE

from .grant_oracle import (
    LEASE,
    Request,
    Row,
    check_answer,
    entries_of,
    limits,
    lines,
    long_lines,
    requests,
    same_plan,
)

#: the listener key of the tests' one listening client
LISTENER = 4242

#: which owners' grants in a line are lapsed (an owner whose entry waits is unaffected)
lapsing = st.sets(st.sampled_from(("o0", "o1", "o2", "o3", "o4")), max_size=2)

#: a hand-written row's expiry and lock-delay: live for an hour, or a lapsed grant (its lease
#: over half an hour ago, its hour's delay not), whose row lives as long
_LIVE_OR_LAPSED = (
    "UTC_TIMESTAMP(6) + INTERVAL IF(%(lapsed)s, 30, 60) MINUTE, 'test', IF(%(lapsed)s, 3600, 0)"
)


def connect(server: MariaDBServer) -> pymysql.connections.Connection[Any]:
    """A connection as the tests' user, with the URL's credentials."""
    parts = urlsplit(server.url)
    return pymysql.connect(
        host=parts.hostname,
        port=parts.port,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        database=parts.path.strip("/"),
        autocommit=True,
    )


@pytest.fixture(scope="module")
def statements(mariadb_server: MariaDBServer) -> Statements:
    made = Statements.of(f"t{uuid.uuid4().hex[:10]}_")
    with connect(mariadb_server) as connection, connection.cursor() as cursor:
        for statement in made.create:
            cursor.execute(statement)
    return made


@pytest.fixture
def cursor(mariadb_server: MariaDBServer) -> Iterator[Any]:
    with connect(mariadb_server) as connection, connection.cursor() as opened:
        yield opened


def call(cursor: Any, statement: str, *args: Any) -> tuple[Any, ...]:
    cursor.execute(statement, args)
    row = cursor.fetchone()
    assert row is not None
    while cursor.nextset():  # a CALL ends with a result of its own
        pass
    return tuple(row)


def grant(
    cursor: Any,
    statements: Statements,
    name: bytes,
    owner: str,
    *,
    shared: bool = False,
    limit: int = 1,
    fair: bool = False,
    queue: bool = True,
    client: int | None = None,
    lock_delay: float = 0.0,
) -> tuple[Any, ...]:
    return call(
        cursor,
        statements["grant"],
        name,
        owner_hash(owner),
        shared,
        limit,
        fair,
        LEASE,
        "test",
        queue,
        3.0,
        client,
        1,
        10_000,  # max_waiters: a line never fills here
        lock_delay,
    )


# -- the grant procedure against the rule ----------------------------------------------------


def _entries(cursor: Any, statements: Statements, name: bytes) -> dict[str, tuple[Any, ...]]:
    """owner hash -> (seq, token, expires_at) of the name's rows."""
    cursor.execute(
        f"SELECT owner, seq, token, expires_at FROM {statements.prefix}entries WHERE name = %s",
        (name,),
    )
    return {owner: (seq, token, expires) for owner, seq, token, expires in cursor.fetchall()}


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(line=lines, request=requests, limit=limits, lapsed=lapsing, delay=st.sampled_from((0, 5)))
def test_the_grant_procedure_answers_as_the_rule_or_not_at_all(
    cursor: Any,
    statements: Statements,
    line: list[Row],
    request: Request,
    limit: int,
    lapsed: set[str],
    delay: float,
) -> None:
    name = uuid.uuid4().hex.encode()  # a name of the example's own: nothing to clean up
    for row in line:
        cursor.execute(
            f"INSERT INTO {statements.prefix}entries (name, owner, shared, lim, fair, token, "
            "expires_at, holder, lock_delay) VALUES (%(name)s, %(owner)s, %(shared)s, "
            f"%(lim)s, %(fair)s, %(token)s, {_LIVE_OR_LAPSED})",
            {
                "name": name,
                "owner": owner_hash(row.owner),
                "shared": row.shared,
                "lim": limit if row.shared else 1,
                "fair": row.fair,
                "token": next(_TOKENS) if row.granted else None,
                "lapsed": row.granted and row.owner in lapsed,
            },
        )
    before = _entries(cursor, statements, name)
    answer = grant(
        cursor,
        statements,
        name,
        request.owner,
        shared=request.shared,
        limit=request.asked_limit,
        fair=request.fair,
        queue=request.queue,
        client=LISTENER,
        lock_delay=delay,
    )
    after = _entries(cursor, statements, name)
    cursor.execute(
        f"SELECT owner, lock_delay FROM {statements.prefix}entries WHERE name = %s", (name,)
    )
    delays = dict(cursor.fetchall())
    lapsed_owners = {owner_hash(owner) for owner in lapsed}
    entries = [
        entry._replace(lapsed=entry.granted and entry.owner in lapsed_owners)
        for entry in entries_of(line, limit, before, owner_hash)
    ]
    *answered, full = answer
    assert not full  # a line never fills here
    check_answer(entries, owner_hash(request.owner), request, tuple(answered), before, after)
    if answered[0] is not None:
        # a grant made or taken up keeps the delay asked
        assert delays[owner_hash(request.owner)] == delay


#: tokens for hand-written grants, far above any the counter gives in these tests
_TOKENS = iter(range(10**12, 10**13))


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(case=long_lines(), lapsed=st.sets(st.sampled_from([f"o{i}" for i in range(12)])))
def test_a_decision_reads_the_part_of_the_line_the_rule_looks_at(
    cursor: Any, statements: Statements, case: tuple[list[Any], Request], lapsed: set[str]
) -> None:
    """The client decides a request the procedure sends back on the part of the line its
    ``line`` statement reads (each part found by an index, whatever the line's length), and
    tells lapsed grants from live ones: ``plan`` must answer on it as on the whole line."""
    rows, request = case
    name = uuid.uuid4().hex.encode()
    for owner, shared, lim, fair, granted in rows:
        cursor.execute(
            f"INSERT INTO {statements.prefix}entries (name, owner, shared, lim, fair, token, "
            "expires_at, holder, lock_delay) VALUES (%(name)s, %(owner)s, %(shared)s, "
            f"%(lim)s, %(fair)s, %(token)s, {_LIVE_OR_LAPSED})",
            {
                "name": name,
                "owner": owner_hash(owner),
                "shared": shared,
                "lim": lim,
                "fair": fair,
                "token": next(_TOKENS) if granted else None,
                "lapsed": granted and owner in lapsed,
            },
        )
    cursor.execute(
        f"SELECT owner, seq, shared, lim, fair, token, lock_delay > 0 "
        f"FROM {statements.prefix}entries WHERE name = %s ORDER BY seq",
        (name,),
    )
    full = cursor.fetchall()
    owner = owner_hash(request.owner)
    cursor.execute(statements["place"], (name, owner))
    place = cursor.fetchone()
    cursor.execute(
        statements["line"],
        {
            "name": name,
            "owner": owner,
            "fair": request.fair,
            "shared": request.shared,
            "lim": request.asked_limit,
            "count": max(1, request.asked_limit),
            "before": 2**64 - 1 if place is None else place[0],
        },
    )
    part = cursor.fetchall()

    def entries(found: Any) -> list[Entry]:
        return [
            Entry(row[0], row[1], bool(row[2]), row[3], bool(row[4]), row[5], bool(row[6]))
            for row in found
        ]

    same_plan(entries(full), entries(part), owner, request)


# -- release, hand-off and the listener ------------------------------------------------------


class Listener:
    """A client's listening connection: it holds the client's listener lock and waits for
    the client's doorbell, which a second connection holds."""

    def __init__(self, server: MariaDBServer, statements: Statements, key: int) -> None:
        self.doorbell = connect(server)
        self.connection = connect(server)
        self.cursor = self.connection.cursor()
        self.statements = statements
        self.key = key
        with self.doorbell.cursor() as holder:
            assert call(holder, statements["doorbell"], key) == (1,)
        assert call(self.cursor, statements["listen"], key) == (1,)

    def sleep(self, seconds: float, delivered: tuple[int, ...] = ()) -> str:
        """'woken' (interrupted), 'pending' (a wake-up not ``delivered`` was there), 'slept',
        or 'rang out' (the doorbell's holder is gone)."""
        seqs = delivered or (0,)  # none delivered: the seq 0, which no wake-up has
        statement = self.statements["sleep"].format(seqs=", ".join(["%s"] * len(seqs)))
        try:
            (slept,) = call(self.cursor, statement, self.key, *seqs, self.key, seconds)
        except pymysql.err.OperationalError as error:
            if error.args[0] != 1317:  # query execution was interrupted: the ring
                raise
            return "woken"
        return {None: "woken", 0: "slept", 1: "rang out", 2: "pending"}[slept]

    def wakeups(self, delivered: tuple[int, ...] = ()) -> list[bytes]:
        seqs = delivered or (0,)
        statement = self.statements["wakeups"].format(seqs=", ".join(["%s"] * len(seqs)))
        self.cursor.execute(statement, (self.key, *seqs))
        return [message for _, message in self.cursor.fetchall()]

    def close(self) -> None:
        self.connection.close()
        self.doorbell.close()


def test_a_release_hands_the_lock_over_and_wakes_the_waiters_listener(
    mariadb_server: MariaDBServer, statements: Statements, cursor: Any
) -> None:
    listener = Listener(mariadb_server, statements, LISTENER + 1)
    try:
        first = grant(cursor, statements, b"stock", "a")
        assert first[0] is not None
        assert grant(cursor, statements, b"stock", "b", client=listener.key) == (None, None, 0, 0)
        outcome: list[str] = []
        started = threading.Event()

        def sleep() -> None:
            started.set()
            outcome.append(listener.sleep(PATIENCE))

        sleeper = threading.Thread(target=sleep)
        sleeper.start()
        started.wait()
        # the release must find the sleep under way to interrupt it: wait until it shows
        deadline = time.monotonic() + PATIENCE
        while not _sleeping(cursor, listener):
            assert time.monotonic() < deadline, "the listener never started sleeping"
        assert call(cursor, statements["release"], b"stock", owner_hash("a")) == (1, 0)
        sleeper.join(PATIENCE)
        assert outcome == ["woken"]
        (message,) = listener.wakeups()
        terms, _, rest = message.decode().partition(":")
        token, stamp, elapsed = (int(part) for part in terms.lstrip("=").split(","))
        assert token > first[0]
        assert stamp == 1
        assert elapsed >= 0
        assert rest == f"{owner_hash('b')} stock"
        # granted by the release: the waiter's next try finds its grant
        held = grant(cursor, statements, b"stock", "b", client=listener.key)
        assert held[0] == token
        assert 0 < held[1] <= 30.0
        assert call(cursor, statements["release"], b"stock", owner_hash("b")) == (1, 0)
        cursor.execute(f"SELECT COUNT(*) FROM {statements.prefix}names WHERE name = 'stock'")
        assert cursor.fetchone() == (0,)  # a name nobody holds or waits for leaves no row
    finally:
        listener.close()


def _sleeping(cursor: Any, listener: Listener) -> bool:
    cursor.execute(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %s AND INFO LIKE %s",
        (listener.connection.thread_id(), "%tumbler-doorbell-%"),
    )
    row = cursor.fetchone()
    return bool(row and row[0])


def test_a_wake_up_left_before_the_sleep_ends_it_at_once(
    mariadb_server: MariaDBServer, statements: Statements, cursor: Any
) -> None:
    listener = Listener(mariadb_server, statements, LISTENER + 2)
    try:
        assert grant(cursor, statements, b"early", "a")[0] is not None
        assert grant(cursor, statements, b"early", "b", client=listener.key)[0] is None
        # the release rings while the listener is between statements: the ring is lost,
        # the wake-up row is not
        assert call(cursor, statements["release"], b"early", owner_hash("a")) == (1, 0)
        assert listener.sleep(PATIENCE) == "pending"
        assert len(listener.wakeups()) == 1
    finally:
        listener.close()


def test_a_waiter_whose_client_does_not_listen_is_not_handed_the_lock(
    statements: Statements, cursor: Any
) -> None:
    assert grant(cursor, statements, b"deaf", "a")[0] is not None
    assert grant(cursor, statements, b"deaf", "b", client=LISTENER + 3)[0] is None
    assert grant(cursor, statements, b"deaf", "c", client=LISTENER + 4)[0] is None
    assert grant(cursor, statements, b"deaf", "d")[0] is None  # a client that polls
    # the waiter locks the grant took for the two, their clients not listening, end with
    # those clients (here: this connection lets them go)
    for client in (LISTENER + 3, LISTENER + 4):
        cursor.execute("SELECT RELEASE_LOCK(CONCAT('tumbler-waiter-', %s))", (client,))
        assert cursor.fetchone() == (1,)
    # nothing holds those clients' listener locks: the release deletes the entries of the
    # waiters at the head of the line whose client is gone (each would hold a fair line up
    # until it ran out), hands the lock to nobody, and says that a waiter is left (the one
    # whose client polls: nothing tells whether it is gone)
    assert call(cursor, statements["release"], b"deaf", owner_hash("a")) == (1, 1)
    cursor.execute(f"SELECT owner, token FROM {statements.prefix}entries WHERE name = 'deaf'")
    assert cursor.fetchall() == ((owner_hash("d"), None),)


def test_tokens_keep_increasing_after_every_row_is_gone(
    statements: Statements, cursor: Any
) -> None:
    first = grant(cursor, statements, b"gone", "a")[0]
    assert call(cursor, statements["release"], b"gone", owner_hash("a")) == (1, 0)
    for table in ("entries", "names"):
        cursor.execute(f"SELECT COUNT(*) FROM {statements.prefix}{table} WHERE name = 'gone'")
        assert cursor.fetchone() == (0,)
    cursor.execute(f"SELECT COUNT(*) FROM {statements.prefix}tokens")
    assert cursor.fetchone() == (0,)  # the counter keeps no rows
    second = grant(cursor, statements, b"gone", "a")[0]
    assert second > first


# -- upkeep never waits on a transaction on a name -------------------------------------------


def _expired_entry(cursor: Any, statements: Statements, name: bytes, owner: str) -> int:
    """An entry of ``name`` whose lease ended a minute ago; its seq."""
    cursor.execute(
        f"INSERT INTO {statements.prefix}entries (name, owner, shared, lim, fair, token, "
        "expires_at, holder) VALUES (%s, %s, FALSE, 1, FALSE, %s, "
        "UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE, 'test')",
        (name, owner_hash(owner), next(_TOKENS)),
    )
    return int(cursor.lastrowid)


@contextmanager
def row_locked(server: MariaDBServer, statements: Statements, seq: int) -> Iterator[None]:
    """An entry's row locked by another transaction, as one on the entry's name locks it,
    until the block ends."""
    with connect(server) as connection, connection.cursor() as holder:
        holder.execute("START TRANSACTION")
        holder.execute(
            f"SELECT seq FROM {statements.prefix}entries WHERE seq = %s FOR UPDATE", (seq,)
        )
        try:
            yield
        finally:
            connection.rollback()


@pytest.fixture
def impatient(mariadb_server: MariaDBServer) -> Iterator[Any]:
    """A cursor whose statements wait at most a second for a row lock: a wait there fails."""
    with connect(mariadb_server) as connection, connection.cursor() as opened:
        opened.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        opened.execute("SET SESSION innodb_lock_wait_timeout = 1")
        yield opened


def _seqs(cursor: Any, statements: Statements, *names: bytes) -> set[int]:
    marks = ", ".join(["%s"] * len(names))
    cursor.execute(f"SELECT seq FROM {statements.prefix}entries WHERE name IN ({marks})", names)
    return {seq for (seq,) in cursor.fetchall()}


def test_a_sweep_skips_rows_a_transaction_holds_and_deletes_the_others(
    mariadb_server: MariaDBServer, statements: Statements, cursor: Any, impatient: Any
) -> None:
    busy, idle = uuid.uuid4().hex.encode(), uuid.uuid4().hex.encode()
    held = _expired_entry(cursor, statements, busy, "a")
    _expired_entry(cursor, statements, idle, "b")
    with row_locked(mariadb_server, statements, held):
        # waiting for the held row could deadlock with the transaction that holds it
        impatient.execute(statements["sweep"], (100,))
        while impatient.nextset():
            pass
        assert _seqs(cursor, statements, busy, idle) == {held}
    impatient.execute(statements["sweep"], (100,))
    assert _seqs(cursor, statements, busy, idle) == set()


def test_a_sweep_deletes_entries_whose_lease_ends_past_any_tumbler_grants(
    statements: Statements, cursor: Any
) -> None:
    """Such an entry (written by hand: tumbler never grants a lease that long) of a name no
    decision comes to any more goes with the next sweep; a live one stays."""
    far, live = uuid.uuid4().hex.encode(), uuid.uuid4().hex.encode()
    for name, expires_at in (
        (far, "'9999-12-31 23:59:59.999999'"),
        (live, "UTC_TIMESTAMP(6) + INTERVAL 300 DAY"),
    ):
        cursor.execute(
            f"INSERT INTO {statements.prefix}entries (name, owner, shared, lim, fair, token, "
            f"expires_at, holder) VALUES (%s, REPEAT('a', 40), FALSE, 1, TRUE, 7, {expires_at}, "
            "'by hand')",
            (name,),
        )
    (kept,) = _seqs(cursor, statements, live)
    cursor.execute(statements["sweep"], (100,))
    assert _seqs(cursor, statements, far, live) == {kept}
    cursor.execute(f"DELETE FROM {statements.prefix}entries WHERE seq = %s", (kept,))


@pytest.fixture
def fresh_statements(mariadb_server: MariaDBServer) -> Statements:
    """Tables of their own, nearly empty: where the optimizer is likeliest to read a range of
    expiries by their index rather than a name's rows by theirs."""
    made = Statements.of(f"t{uuid.uuid4().hex[:10]}_")
    with connect(mariadb_server) as connection, connection.cursor() as cursor:
        for statement in made.create:
            cursor.execute(statement)
    return made


def test_a_grant_deletes_its_names_expired_rows_without_waiting_on_other_names(
    mariadb_server: MariaDBServer, fresh_statements: Statements, cursor: Any, impatient: Any
) -> None:
    statements = fresh_statements
    mine, other = uuid.uuid4().hex.encode(), uuid.uuid4().hex.encode()
    _expired_entry(cursor, statements, mine, "a")
    held = _expired_entry(cursor, statements, other, "b")
    with row_locked(mariadb_server, statements, held):
        token, _, undecided, _ = grant(impatient, statements, mine, "c")
    assert token is not None
    assert not undecided
    assert len(_seqs(cursor, statements, mine)) == 1  # the grant's own; the expired one gone
    assert _seqs(cursor, statements, other) == {held}


def test_a_release_deletes_its_names_expired_rows_and_the_names_row_with_the_last(
    fresh_statements: Statements, cursor: Any
) -> None:
    """A release that leaves entries of its name deletes the expired ones (and the name's
    row once none is left); one that leaves none skips that clean-up and deletes the row."""
    statements = fresh_statements
    names_row = f"SELECT COUNT(*) FROM {statements.prefix}names WHERE name = %s"
    for expired in (True, False):
        name = uuid.uuid4().hex.encode()
        token, *_ = grant(cursor, statements, name, "holder")
        assert token is not None
        if expired:
            _expired_entry(cursor, statements, name, "gone")
        assert call(cursor, statements["release"], name, owner_hash("holder")) == (1, 0)
        assert _seqs(cursor, statements, name) == set()
        cursor.execute(names_row, (name,))
        assert cursor.fetchone() == (0,)


def test_the_wait_ends_at_once_when_the_doorbells_holder_is_gone(
    mariadb_server: MariaDBServer, statements: Statements
) -> None:
    """The listener's wait is for a named lock another connection holds: once that one is
    gone the wait would take the lock and end at once, every time, so it says so."""
    listener = Listener(mariadb_server, statements, LISTENER + 3)
    try:
        assert listener.sleep(0.01) == "slept"
        listener.doorbell.close()
        assert listener.sleep(PATIENCE) == "rang out"
    finally:
        listener.connection.close()


def test_the_wait_and_the_read_pass_over_wake_ups_delivered(
    mariadb_server: MariaDBServer, statements: Statements, cursor: Any
) -> None:
    """A listener deletes the wake-ups it delivered in batches: until then its wait and its
    read pass over them, and see the others."""
    listener = Listener(mariadb_server, statements, LISTENER + 4)
    try:
        add = f"INSERT INTO {statements.prefix}wakeups (client, message) VALUES (%s, %s)"
        cursor.execute(add, (listener.key, "a stock"))
        delivered = (int(cursor.lastrowid),)
        assert listener.sleep(0.01) == "pending"
        assert listener.sleep(0.01, delivered) == "slept"
        assert listener.wakeups(delivered) == []
        cursor.execute(add, (listener.key, "b stock"))
        assert listener.sleep(PATIENCE, delivered) == "pending"
        assert listener.wakeups(delivered) == [b"b stock"]
    finally:
        listener.close()


def test_a_sweep_deletes_the_wake_ups_of_clients_that_no_longer_listen(
    mariadb_server: MariaDBServer, fresh_statements: Statements, cursor: Any
) -> None:
    """A wake-up for a client that stopped listening (it died, or a release wrote it as the
    client stopped) is read by nobody: the sweep deletes it, and leaves the listening
    client's."""
    statements = fresh_statements
    listening = Listener(mariadb_server, statements, LISTENER + 6)
    gone = Listener(mariadb_server, statements, LISTENER + 7)
    try:
        for key in (listening.key, gone.key):
            cursor.execute(
                f"INSERT INTO {statements.prefix}wakeups (client, message) VALUES (%s, 'x')",
                (key,),
            )
        assert call(gone.cursor, statements["unlisten"], gone.key) == (1,)
        cursor.execute(statements["sweep"], (100,))
        cursor.execute(f"SELECT client FROM {statements.prefix}wakeups")
        assert cursor.fetchall() == ((listening.key,),)
    finally:
        listening.close()
        gone.close()


# -- tables an earlier version made ----------------------------------------------------------


def test_tables_an_earlier_version_made_get_its_indexes_and_procedures(
    mariadb_server: MariaDBServer,
) -> None:
    """An earlier version's entries table lacked the indexes a release and a decision read
    the head of a line by (and the column of entries tumbler cannot use), and its procedures
    read the whole line: a client of this version adds them and makes every procedure
    again."""
    from tumbler._url import parse_url
    from tumbler.backends.mysql.opener import open_sync
    from tumbler.backends.mysql.statements import INDEXES

    prefix = f"t{uuid.uuid4().hex[:10]}_"
    url = f"{mariadb_server.url}?table_prefix={prefix}"
    open_sync(parse_url(url)).close()
    with connect(mariadb_server) as connection, connection.cursor() as cursor:
        cursor.execute(
            f"ALTER TABLE {prefix}entries DROP KEY limits, DROP KEY line, DROP KEY unusable, "
            "DROP COLUMN unusable"
        )
        cursor.execute(f"DROP PROCEDURE {prefix}hand_off")
        cursor.execute(f"CREATE PROCEDURE {prefix}hand_off() BEGIN END")
        # nor had it the procedure made last, whose comment names the version
        cursor.execute(f"DROP PROCEDURE {prefix}states")
        open_sync(parse_url(url)).close()
        cursor.execute(
            "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
            (f"{prefix}entries",),
        )
        assert set(INDEXES) <= {name for (name,) in cursor.fetchall()}
        cursor.execute(f"SELECT COUNT(*) FROM {prefix}entries WHERE unusable")
        assert cursor.fetchone() == (0,)
        cursor.execute(
            "SELECT COUNT(*) FROM information_schema.PARAMETERS WHERE SPECIFIC_SCHEMA = "
            "DATABASE() AND SPECIFIC_NAME = %s",
            (f"{prefix}hand_off",),
        )
        assert cursor.fetchone() == (3,)  # made again, as this version makes it
