"""The PostgreSQL backend's tables and statements, in the schema the URL names.

Tables (``{s}`` is the quoted schema)::

    {s}.tumbler_entries     one row per live grant or waiter of a lock name
    {s}.tumbler_evictions   the notes force_release leaves for the holders it evicted
    {s}.tumbler_tokens      the sequence every fencing token is drawn from
    {s}.tumbler_names       one row per name in use, which decisions on the name lock
    {s}.tumbler_watched     one row per client that watches a name's state, while it does

Why one sequence for every name, rather than a counter per name: a sequence never goes back
(not on rollback, not after a crash: it is logged ahead of use), so a token is above every
token ever given, for any name, also once every row of the name is gone. A counter per name
would have to keep a row for every name ever used, or restart from a floor (the server's
clock) that a clock stepped back would break. ``nextval`` takes no lock another transaction
waits for.

Every expiry is ``clock_timestamp()`` plus a lease, and every comparison is against
``clock_timestamp()``: the server's clock decides, never a client's. Each decision on a name
runs in a transaction that first locks the name's row in ``{s}.tumbler_names`` (by its
64-bit key, :func:`name_key`; ``tumbler_take_name``): transactions on one name take turns,
others run side by side, and the lock ends with the transaction (nothing outlives it: safe
behind a transaction-mode pooler). A row lock, not an advisory lock: it needs the UPDATE
privilege on the table, so a role that may only read cannot take it and hold grants up.
Owners are stored as their SHA-1 (``kit.owners.owner_hash``).

Nothing runs with a search path another role can write to: a role that may create objects
in the database (a schema named like the lock user, which ``"$user"`` puts first in the
default path) could otherwise plant a function that resolves better than the built-in one
(``nextval(text)`` beside ``pg_catalog.nextval(regclass)``) and have it run inside every
grant, with the lock user's rights. So every session (a startup option) and, behind a
pooler, every transaction sets ``search_path`` to :data:`SEARCH_PATH`, every function is
made with it pinned (``SET search_path``), and every object of the schema is named with it.

The hot paths are functions in the schema (PL/pgSQL), each called as one statement, so that
the name's advisory lock is never held across a round trip to the client and a call costs
one round trip: ``tumbler_grant`` (a request answered where the rule's answer is plain, else
sent back for the client to decide on the whole line with ``_core.plan``), ``tumbler_release``
and ``tumbler_hand_off`` (a release grants the lock to the next waiter itself).

State watchers (``locks.watch``, ``election.observe``): a client that watches a name's state
keeps a row in ``{s}.tumbler_watched`` (the name, the client's ``NOTIFY`` channel, and when
the row runs out unless the watcher sets it again: ``kit sql.WATCHED_TTL``), written in a
transaction that takes the name's row first, as every decision does. Every function and
transaction that changes a name's entries (``tumbler_grant`` where it grants, adds a waiter or
revokes a grant nobody will take up; ``tumbler_release``; a forced release; a decision in the
client that grants or adds a waiter) then sends ``* <name>`` to the channel of each live row
of the name (:data:`_TELL_WATCHERS`), delivered with the commit. Where nobody watches, that is
one lookup by the table's key that finds nothing, inside a statement the call runs anyway.
Entries that ran out are not announced: they are gone from ``inspect``'s reading the moment
they run out (its watcher reads again when the lease it read ends), before any statement
deletes them.

Lock-delay: a grant made with one keeps it in its row (``lock_delay``, seconds; 0 for a waiter
and for a grant without one), and the row's ``expires_at`` is the end of its lease plus that
delay, so that the row outlives its lease by it: its lease ends at ``expires_at - lock_delay``
(:data:`_LEASE_END`). Every statement that drops or skips rows by ``expires_at`` (a decision's
clean-up of its name, the sweep, a client of an older version, which sees the lapsed grant as
a live one) so keeps a lapsed grant for its delay without knowing of it; what tells a lapsed
grant from a live one (a renewal, a release, a take-up, the decision's read of the line,
``inspect``, ``force_release``) compares the lease's end. The column came after the table: a
client of this version adds it to a table an older one made, its rows reading 0 (the
column's default). A delay tumbler never writes (below 0, above an hour, NaN, infinite) makes
its entry unreadable, as a lease past any tumbler grants does.

Which commits wait for the disk: a grant's, a renewal's and a take-up's (a waiter taking the
grant a release handed it) do (a crash of the server must not forget a grant or a lease, nor
a token in use). A release and a waiter's entry do not (``synchronous_commit`` off for their
transaction): a crash that forgets a release leaves the lock held to the end of its lease, as
a crash of its holder would; one that forgets a hand-off costs its waiter another request
(the grant counts only once taken up); one that forgets a waiter's entry costs that waiter a
re-check; the next commit that waits writes them out first.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from psycopg import sql

from ..._core import MAX_LOCK_DELAY, MAX_TTL

#: a lock-delay tumbler never writes (NaN and infinity among them: NaN is above every
#: number to PostgreSQL): the predicate of the partial index that finds such entries
_BAD_DELAY = f"NOT lock_delay BETWEEN 0 AND {MAX_LOCK_DELAY:.0f}"


def _unreadable(at: str) -> str:
    """Whether an entry is unreadable at time ``at``: one whose lease ends later than any
    tumbler grants (``_core.MAX_TTL``, and a day: more than any lock-delay adds) was not
    written by tumbler (``infinity``, which no arithmetic takes, or a far future that would
    hold the name for ever), nor was one whose lock-delay is none tumbler gives
    (``_BAD_DELAY``). Decisions drop it as if expired; ``inspect`` counts it. Where ``at``
    is a value (a variable, ``now()``), not ``clock_timestamp()``, indexes find such
    entries: the one on ``expires_at`` the far future, the partial one of bad delays the
    rest."""
    return f"(expires_at > {at} + interval '{round(MAX_TTL + 86400)} seconds' OR {_BAD_DELAY})"


_UNREADABLE = _unreadable("clock_timestamp()")
#: an entry's lock-delay, as an interval (0 but for a grant made with one). Bounded, so that
#: a delay tumbler never writes (an unreadable entry, which its name's next decision drops)
#: fails no arithmetic meanwhile: NaN and infinity would.
_DELAY = f"(least(greatest(lock_delay, 0), {MAX_LOCK_DELAY:.0f}) * interval '1 second')"
#: when an entry's lease ends: its row's end less its lock-delay
_LEASE_END = f"(expires_at - {_DELAY})"
#: what a function that changed ``lock_name``'s entries runs, in its transaction: ``* <name>``
#: to the channel of each client that watches the name's state (delivered with the commit);
#: where nobody watches, one lookup by the table's key that finds nothing
_TELL_WATCHERS = (
    "PERFORM pg_notify(watcher.channel, '* ' || lock_name) "
    "FROM {s}.tumbler_watched AS watcher "
    "WHERE watcher.name = lock_name AND watcher.expires_at > clock_timestamp()"
)
#: the only search path tumbler's statements and functions run with: the built-ins, then
#: the session's own temporary objects (searched for tables only, never for functions)
SEARCH_PATH = "pg_catalog, pg_temp"
#: how long a force-release note outlives the lease it ended: the evicted holder may learn
#: of its loss a little after that lease would have run out, and should still be told why
NOTE_GRACE = 60.0
#: expired rows of other names one sweep deletes (a sweep runs every SWEEP_EVERY grants)
SWEEP_ROWS = 100
SWEEP_EVERY = 64


#: the parts the statements name (``{unreadable}`` ...), each written once; the version of
#: the tables and functions is that of the statements with these, so that a change of a part
#: alone makes the functions again too
_PARTS = {
    "unreadable": _UNREADABLE,
    "unreadable_at": _unreadable("at"),
    "unreadable_now": _unreadable("now()"),
    "bad_delay": _BAD_DELAY,
    "lease_end": _LEASE_END,
    "delay": _DELAY,
    "tell_watchers": _TELL_WATCHERS,
}


def _version(statements: tuple[str, ...]) -> str:
    """What a schema's comment says once these statements made it."""
    return "tumbler " + hashlib.sha1("\0".join(statements).encode()).hexdigest()[:16]


def name_key(schema: str, name: str) -> int:
    """The advisory lock key of lock ``name`` in ``schema``: 64 bits of a SHA-1, so two
    names share a key (and take turns needlessly) about never."""
    digest = hashlib.sha1(f"tumbler\0{schema}\0{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def schema_key(schema: str) -> int:
    """The advisory lock key that clients racing to make ``schema``'s tables take turns on."""
    return name_key(schema, "\0schema")


_CREATE = (
    "CREATE SCHEMA IF NOT EXISTS {s}",
    """CREATE TABLE IF NOT EXISTS {s}.tumbler_entries (
        seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- arrival order
        name       text NOT NULL,
        owner      text NOT NULL,         -- SHA-1 of the owner id
        shared     boolean NOT NULL,
        lim        integer NOT NULL,      -- shared holders admitted, 0 = any number
        fair       boolean NOT NULL,
        token      bigint,                -- fencing token of a grant, NULL for a waiter
        expires_at timestamptz NOT NULL,  -- on the server's clock
        holder     text NOT NULL,         -- host and pid, for operators
        -- a waiter's, for a release to hand it the lock (see "hand_off"):
        client     text,                  -- its client's NOTIFY channel
        listener   bigint,                -- its client's listener key (see "hold_listener")
        lease      float8,                -- the lease it asked for, in seconds
        stamp      bigint,                -- its client's clock (µs) when its request was sent
        written_at timestamptz,           -- when the server wrote that request
        -- a grant's lock-delay, in seconds: its row outlives its lease by it (expires_at is
        -- the lease's end plus the delay); 0 for a waiter and a grant without one
        lock_delay float8 NOT NULL DEFAULT 0,
        UNIQUE (name, owner)
    )""",
    # the same column, for a table an older version made: its rows read 0, no delay (a
    # default that needs no rewrite of the table)
    "ALTER TABLE {s}.tumbler_entries ADD COLUMN IF NOT EXISTS lock_delay float8 NOT NULL DEFAULT 0",
    "CREATE INDEX IF NOT EXISTS tumbler_entries_expiry ON {s}.tumbler_entries (expires_at)",
    # What a decision and a release read of a name, each found without passing over the rest
    # of its line: its expired entries (each decision deletes them first); its grants; its
    # waiters in arrival order (the head of the line); its fair exclusive waiters (one ahead
    # keeps every fair request waiting); its shared entries by permit count (one with another
    # count refuses a shared request).
    "CREATE INDEX IF NOT EXISTS tumbler_entries_name_expiry ON {s}.tumbler_entries "
    "(name, expires_at)",
    "CREATE INDEX IF NOT EXISTS tumbler_entries_grants ON {s}.tumbler_entries (name) "
    "WHERE token IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS tumbler_entries_line ON {s}.tumbler_entries (name, seq) "
    "WHERE token IS NULL",
    "CREATE INDEX IF NOT EXISTS tumbler_entries_fair_writers ON {s}.tumbler_entries "
    "(name, seq) WHERE token IS NULL AND fair AND NOT shared",
    "CREATE INDEX IF NOT EXISTS tumbler_entries_limits ON {s}.tumbler_entries (name, lim) "
    "WHERE shared",
    # the entries with a lock-delay tumbler never writes, which each decision deletes: none,
    # but for a row written by hand
    "CREATE INDEX IF NOT EXISTS tumbler_entries_bad_delay ON {s}.tumbler_entries (name) "
    "WHERE {bad_delay}",
    """CREATE TABLE IF NOT EXISTS {s}.tumbler_evictions (
        name       text NOT NULL,
        owner      text NOT NULL,         -- SHA-1 of the evicted grant's owner id
        note       text NOT NULL,         -- who forced it, from where, when, why
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (name, owner)
    )""",
    "CREATE INDEX IF NOT EXISTS tumbler_evictions_expiry ON {s}.tumbler_evictions (expires_at)",
    "CREATE SEQUENCE IF NOT EXISTS {s}.tumbler_tokens AS bigint",
    # One row per name in use, locked (FOR UPDATE) by every transaction that decides on the
    # name, so that they take turns. A row lock needs the UPDATE privilege, which a role that
    # may only read (or only connect) lacks: such a role cannot hold up grants, releases or
    # a forced release, as it could by taking the name's advisory lock (which every role may
    # take, on a key anyone can compute).
    """CREATE TABLE IF NOT EXISTS {s}.tumbler_names (
        key        bigint PRIMARY KEY,    -- statements.name_key
        name       text NOT NULL
    )""",
    # One row per client that watches a name's state, while it does: the watcher writes it
    # (taking the name's row first) and sets it again before it runs out; the changes of the
    # name's entries notify the channel of each live one (see "State watchers" above).
    """CREATE TABLE IF NOT EXISTS {s}.tumbler_watched (
        name       text NOT NULL,
        channel    text NOT NULL,         -- the watching client's NOTIFY channel
        expires_at timestamptz NOT NULL,  -- on the server's clock
        PRIMARY KEY (name, channel)
    )""",
    "CREATE INDEX IF NOT EXISTS tumbler_watched_expiry ON {s}.tumbler_watched (expires_at)",
    # The name's row, locked till the commit; made if missing, and made again if a sweep
    # deleted it meanwhile (a lock that then finds no row did not lock it).
    """CREATE OR REPLACE FUNCTION {s}.tumbler_take_name(lock_key bigint, lock_name text)
    RETURNS void LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp AS $$
    BEGIN
        LOOP
            PERFORM FROM {s}.tumbler_names WHERE key = lock_key FOR UPDATE;
            EXIT WHEN FOUND;
            INSERT INTO {s}.tumbler_names (key, name) VALUES (lock_key, lock_name)
                ON CONFLICT DO NOTHING;
        END LOOP;
    END $$""",
    # A grant request, answered here where the grant rule's answer needs no more than the
    # request and a glance at the line (tumbler._core.decide): a name with no live entry
    # grants any request; an owner with a live grant holds it already, and takes it up (its
    # lease set to the one asked, from now); an exclusive request waits while another owner
    # holds a live grant (its waiter entry written or refreshed, a commit that need not wait
    # for the disk: a crash that forgets it costs its waiter a re-check). Any other request
    # comes back "undecided", for the client to decide by the rule on the part of the line it
    # looks at.
    # A new waiter is not written where "max_waiters" wait already: "line_full" says so. One
    # statement: the name's advisory lock is held for no client round trip. A grant keeps
    # "delay_asked", its lock-delay (a waiter keeps none); a lapsed grant counts as a grant,
    # and its owner's request finds no live lease to take up: nothing is written for it.
    # (Earlier versions' functions, without max_waiters or without delay_asked, are dropped.)
    "DROP FUNCTION IF EXISTS {s}.tumbler_grant(bigint, text, text, boolean, integer, boolean, "
    "float8, text, boolean, float8, text, bigint, bigint)",
    "DROP FUNCTION IF EXISTS {s}.tumbler_grant(bigint, text, text, boolean, integer, boolean, "
    "float8, text, boolean, float8, text, bigint, bigint, integer)",
    """CREATE OR REPLACE FUNCTION {s}.tumbler_grant(
        lock_key bigint, lock_name text, lock_owner text, is_shared boolean, permits integer,
        is_fair boolean, lease_asked float8, holder_info text, queue boolean,
        waiter_lease float8, waiter_client text, waiter_listener bigint, waiter_stamp bigint,
        max_waiters integer, delay_asked float8,
        OUT granted bigint, OUT lease_left float8, OUT undecided boolean, OUT line_full boolean
    ) LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp AS $$
    DECLARE
        mine record;
        waiting boolean;
        at timestamptz;
    BEGIN
        undecided := false;
        line_full := false;
        PERFORM {s}.tumbler_take_name(lock_key, lock_name);
        -- a value, not clock_timestamp() itself, so that the indexes find the expired and
        -- unreadable entries: a volatile call is no index bound
        at := clock_timestamp();
        DELETE FROM {s}.tumbler_entries
            WHERE name = lock_name AND (expires_at <= at OR {unreadable_at});
        -- A grant a release handed to a waiter that has not taken it up yet (see
        -- tumbler_hand_off), whose client no longer listens (its listener key is free: the
        -- process died, or its connection closed, in the moment after the release saw it
        -- listen): nobody will take it up, and it would hold the lock to the end of the
        -- waiter's lease. Revoked. (The key is taken till the commit, harmlessly.)
        DELETE FROM {s}.tumbler_entries
            WHERE name = lock_name AND token IS NOT NULL AND stamp IS NULL
            AND listener IS NOT NULL AND owner <> lock_owner
            AND pg_try_advisory_xact_lock((listener >> 32)::integer,
                                          (listener & 2147483647)::integer);
        IF FOUND THEN
            {tell_watchers};
        END IF;
        INSERT INTO {s}.tumbler_entries
            (name, owner, shared, lim, fair, token, expires_at, holder, lock_delay)
            SELECT lock_name, lock_owner, is_shared, permits, is_fair, {next_token},
                clock_timestamp() + (lease_asked + delay_asked) * interval '1 second',
                holder_info, delay_asked
            WHERE NOT EXISTS (SELECT 1 FROM {s}.tumbler_entries WHERE name = lock_name)
            RETURNING token INTO granted;
        IF granted IS NOT NULL THEN
            lease_left := lease_asked;
            {tell_watchers};
            RETURN;
        END IF;
        SELECT seq, token, extract(epoch FROM expires_at - clock_timestamp())::float8 AS left
            INTO mine FROM {s}.tumbler_entries WHERE name = lock_name AND owner = lock_owner;
        waiting := FOUND AND mine.token IS NULL;
        IF FOUND AND NOT waiting THEN
            -- the owner asks for a grant it has (a release handed it over, or the reply to
            -- its last try was lost): it takes it up, with the lease it asks for from now
            -- (and the lock-delay: a grant handed over keeps one from its take-up on)
            UPDATE {s}.tumbler_entries
                SET expires_at = clock_timestamp()
                    + (lease_asked + delay_asked) * interval '1 second',
                listener = NULL, lock_delay = delay_asked
                WHERE seq = mine.seq AND {lease_end} > clock_timestamp();
            IF FOUND THEN
                granted := mine.token;
                lease_left := lease_asked;
            END IF;
            -- or it ran out this very moment, or before (a lapsed grant, kept for its
            -- lock-delay): the owner's next try asks anew
            RETURN;
        END IF;
        IF is_shared OR NOT EXISTS (
            SELECT 1 FROM {s}.tumbler_entries WHERE name = lock_name
            AND owner <> lock_owner AND token IS NOT NULL
        ) THEN
            undecided := true;
            RETURN;
        END IF;
        IF waiting THEN
            UPDATE {s}.tumbler_entries
                SET expires_at = clock_timestamp() + waiter_lease * interval '1 second',
                client = waiter_client, listener = waiter_listener, lease = lease_asked,
                stamp = waiter_stamp, written_at = clock_timestamp()
                WHERE seq = mine.seq;
        ELSIF queue THEN
            -- every waiter left is live (the expired ones were deleted above): counted by the
            -- index of the line alone, up to the cap
            IF (SELECT count(*) FROM (SELECT 1 FROM {s}.tumbler_entries
                WHERE name = lock_name AND token IS NULL LIMIT max_waiters) AS line)
                >= max_waiters THEN
                line_full := true;
                RETURN;
            END IF;
            INSERT INTO {s}.tumbler_entries (name, owner, shared, lim, fair, token,
                expires_at, holder, client, listener, lease, stamp, written_at)
                VALUES (lock_name, lock_owner, is_shared, permits, is_fair, NULL,
                clock_timestamp() + waiter_lease * interval '1 second', holder_info,
                waiter_client, waiter_listener, lease_asked, waiter_stamp, clock_timestamp());
            {tell_watchers};
        ELSE
            RETURN;
        END IF;
        PERFORM set_config('synchronous_commit', 'off', true);
    END $$""",
    # A release hands the lock to the first waiter of a line left with no live grant, if that
    # waiter is exclusive (the grant rule grants it then, fair or not) and its client still
    # listens: the grant is written here, and the waiter is told in a NOTIFY that goes with
    # the commit (tumbler.backends.kit.handoffs): "=<token>,<stamp>,<elapsed µs>:<owner>
    # <name>", elapsed from its request's write to the grant, on the server's clock. Whether
    # it handed the lock over. Any other line is left to the grant rule in the client
    # (wake_line).
    # The grant lives on the waiter's own short lease (its entry's, waiter_ttl at most; or the
    # lease it asked for, if that is shorter) until the waiter takes it up ("take_up", or
    # tumbler_grant when it asks), which sets the lease it asked for: a waiter that died in
    # the moment after this saw it listen never does, and its grant runs out with its
    # liveness, or sooner where another request finds its client gone (tumbler_grant).
    # Marked so till then: stamp cleared, listener kept. Nothing of it counts before the
    # take-up, whose commit waits for the disk: this one need not.
    # First, the waiters at the head of the line whose client no longer listens (its
    # listener key is free: the process died, or its connection closed) are deleted: each
    # would hold up every fair waiter behind it until its entry ran out, and one handed the
    # lock would hold it for a whole lease. A waiter with no listener key (its client polls,
    # or did not listen yet when it wrote its entry) cannot be told dead, and stays.
    """CREATE OR REPLACE FUNCTION {s}.tumbler_hand_off(lock_name text)
    RETURNS boolean LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp AS $$
    DECLARE
        first record;
        at timestamptz;
        granted bigint;
    BEGIN
        at := clock_timestamp();
        LOOP
            SELECT seq, shared, owner, client, listener, lease, stamp, written_at INTO first
                FROM {s}.tumbler_entries WHERE name = lock_name AND token IS NULL
                AND expires_at > at ORDER BY seq LIMIT 1;
            IF NOT FOUND THEN
                RETURN false;
            END IF;
            -- taken till the commit when free, harmlessly: a client that begins to listen
            -- meanwhile waits for the commit
            EXIT WHEN first.listener IS NULL
                OR NOT pg_try_advisory_xact_lock((first.listener >> 32)::integer,
                                                 (first.listener & 2147483647)::integer);
            DELETE FROM {s}.tumbler_entries WHERE seq = first.seq;
        END LOOP;
        IF first.shared OR first.client IS NULL OR first.stamp IS NULL
           OR EXISTS (SELECT 1 FROM {s}.tumbler_entries WHERE name = lock_name
                      AND token IS NOT NULL AND expires_at > at) THEN
            RETURN false;
        END IF;
        UPDATE {s}.tumbler_entries SET token = {next_token}, stamp = NULL,
            expires_at = least(expires_at, at + first.lease * interval '1 second')
            WHERE seq = first.seq RETURNING token INTO granted;
        PERFORM pg_notify(first.client, '=' || granted || ',' || first.stamp || ','
            || floor(extract(epoch FROM at - first.written_at) * 1e6)::bigint || ':'
            || first.owner || ' ' || lock_name);
        RETURN true;
    END $$""",
    # A release: the owner's entry deleted, the lock handed to the next waiter where
    # tumbler_hand_off can; "removed" says whether the entry was a live grant, "others_wait"
    # whether waiters are left, whom the client then finds by the rule (wake_line). The
    # name's state watchers are told (also of a release that changed nothing: a hint).
    """CREATE OR REPLACE FUNCTION {s}.tumbler_release(
        lock_key bigint, lock_name text, lock_owner text,
        OUT removed boolean, OUT others_wait boolean
    ) LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp AS $$
    DECLARE
        at timestamptz;
    BEGIN
        PERFORM {s}.tumbler_take_name(lock_key, lock_name);
        at := clock_timestamp();  -- a value, an index bound (see tumbler_grant)
        DELETE FROM {s}.tumbler_entries WHERE name = lock_name AND {unreadable_at};
        -- a lapsed grant stays: its owner's release does not end its lock-delay
        DELETE FROM {s}.tumbler_entries WHERE name = lock_name AND owner = lock_owner
            AND (lock_delay = 0 OR {lease_end} > clock_timestamp())
            RETURNING token IS NOT NULL AND {lease_end} > clock_timestamp() INTO removed;
        removed := coalesce(removed, false);
        -- The commit need not wait for the disk. A release that a crash of the server
        -- forgets leaves the lock held to the end of its lease, as a holder's crash would; a
        -- hand-off counts only once its waiter takes it up, whose commit writes this one out
        -- first; so does a later grant's.
        PERFORM set_config('synchronous_commit', 'off', true);
        IF {s}.tumbler_hand_off(lock_name) THEN
            others_wait := false;
        ELSE
            others_wait := EXISTS (
                SELECT 1 FROM {s}.tumbler_entries WHERE name = lock_name AND token IS NULL
                AND expires_at > clock_timestamp());
        END IF;
        {tell_watchers};
    END $$""",
    # last: the schema is as this version makes it only once everything above is made
    "COMMENT ON SCHEMA {s} IS {version}",
)

_STATEMENTS = {
    # -- set-up -------------------------------------------------------------------------------
    "begin": "BEGIN",
    "commit": "COMMIT",
    # whether the schema is as this version makes it (its comment names the version of its
    # tables and functions): a schema made by another version is made again, its tables
    # kept and its functions replaced
    "exists": "SELECT obj_description(to_regnamespace(%(schema)s), 'pg_namespace') "
    "IS NOT DISTINCT FROM %(version)s",
    # -- a decision on one name ---------------------------------------------------------------
    "lock_name": "SELECT {s}.tumbler_take_name(%s, %s)",
    # clients racing to make the schema take turns (no name's row exists yet)
    "try_lock_schema": "SELECT pg_try_advisory_xact_lock(%s)",
    # A client's listening connection holds its listener key (62 random bits, as two 31-bit
    # halves: the two-integer advisory locks are apart from the names' 64-bit ones) for as
    # long as it listens, so a release can tell whether a waiter's client still does.
    "hold_listener": "SELECT pg_advisory_lock_shared((%(key)s >> 32)::integer, "
    "(%(key)s & 2147483647)::integer)",
    # now() (the transaction's start) rather than clock_timestamp(), which is no index bound:
    # the name's expired and unreadable entries are found by the indexes
    "drop_expired": "DELETE FROM {s}.tumbler_entries "
    "WHERE name = %s AND (expires_at <= now() OR {unreadable_now})",
    "grant": "SELECT granted, lease_left, undecided, line_full FROM {s}.tumbler_grant(%(key)s, "
    "%(name)s, %(owner)s, %(shared)s, %(lim)s, %(fair)s, %(lease)s, %(holder)s, %(queue)s, "
    "%(ttl)s, %(client)s, %(listener)s, %(stamp)s, %(max_waiters)s, %(lock_delay)s)",
    # the live waiters of a name, up to a cap (the expired ones deleted before, in the same
    # transaction): counted by the index of the line alone
    "waiting": "SELECT count(*) FROM (SELECT 1 FROM {s}.tumbler_entries "
    "WHERE name = %s AND token IS NULL LIMIT %s) AS line",
    # The part of a name's live line the grant rule looks at for one request (``plan`` gives
    # the same answer on it as on the whole line): every grant; the owner's own entry; for a
    # fair request, the first fair waiters ahead of it (as many as the request's permits,
    # or one: more than that changes no answer) and the first fair exclusive one ahead (any
    # keeps a fair request waiting); for a shared one, an entry of another permit count (any
    # refuses it). Each found by an index, whatever the length of the line. "before": the
    # owner's place in line, read first in the same transaction. The last column: whether
    # the entry is a lapsed grant (its lease over, its lock-delay not).
    "line": "WITH mine AS (SELECT coalesce((SELECT seq FROM {s}.tumbler_entries "
    "WHERE name = %(name)s AND owner = %(owner)s), 9223372036854775807) AS before) "
    "SELECT DISTINCT ON (seq) owner, seq, shared, lim, fair, token, "
    "token IS NOT NULL AND lock_delay > 0 AND {lease_end} <= clock_timestamp() FROM (("
    "SELECT * FROM {s}.tumbler_entries WHERE name = %(name)s AND token IS NOT NULL"
    ") UNION ALL ("
    "SELECT * FROM {s}.tumbler_entries WHERE name = %(name)s AND owner = %(owner)s"
    ") UNION ALL ("
    "SELECT entry.* FROM {s}.tumbler_entries AS entry, mine WHERE %(fair)s "
    "AND name = %(name)s AND token IS NULL AND fair AND seq < mine.before "
    "AND expires_at > clock_timestamp() ORDER BY seq LIMIT greatest(%(lim)s, 1)"
    ") UNION ALL ("
    "SELECT entry.* FROM {s}.tumbler_entries AS entry, mine WHERE %(fair)s "
    "AND name = %(name)s AND token IS NULL AND fair AND NOT shared AND seq < mine.before "
    "AND expires_at > clock_timestamp() ORDER BY seq LIMIT 1"
    ") UNION ALL ("
    "SELECT * FROM {s}.tumbler_entries WHERE %(shared)s "
    "AND name = %(name)s AND shared AND (lim < %(lim)s OR lim > %(lim)s) "
    "AND owner <> %(owner)s AND expires_at > clock_timestamp() LIMIT 1"
    ")) AS relevant WHERE expires_at > clock_timestamp() ORDER BY seq",
    # a grant's row outlives its lease by its lock-delay (a waiter's is 0)
    "add": "INSERT INTO {s}.tumbler_entries "
    "(name, owner, shared, lim, fair, token, expires_at, holder, client, listener, lease, "
    "stamp, written_at, lock_delay) "
    "VALUES (%(name)s, %(owner)s, %(shared)s, %(lim)s, %(fair)s, "
    "CASE WHEN %(grant)s THEN {next_token} END, "
    "clock_timestamp() + (%(ttl)s + %(lock_delay)s) * interval '1 second', %(holder)s, "
    "%(client)s, %(listener)s, %(lease)s, %(stamp)s, clock_timestamp(), %(lock_delay)s) "
    "RETURNING token",
    "grant_waiter": "UPDATE {s}.tumbler_entries SET token = {next_token}, "
    "expires_at = clock_timestamp() + (%(ttl)s + %(lock_delay)s) * interval '1 second', "
    "lock_delay = %(lock_delay)s WHERE seq = %(seq)s RETURNING token",
    # A grant a wake-up says was handed to this owner, taken up: the lease it asked for, from
    # now, and its lock-delay (which a grant handed over keeps from its take-up on), if the
    # owner's entry is a grant with that token and a live lease (one row); no row otherwise.
    # The lease the hand-off gave ends with the waiter's liveness (tumbler_hand_off).
    "take_up": "UPDATE {s}.tumbler_entries "
    "SET expires_at = clock_timestamp() + (%(ttl)s + %(lock_delay)s) * interval '1 second', "
    "lock_delay = %(lock_delay)s, listener = NULL "
    "WHERE name = %(name)s AND owner = %(owner)s AND token = %(token)s "
    "AND {lease_end} > clock_timestamp() RETURNING token",
    "refresh_waiter": "UPDATE {s}.tumbler_entries "
    "SET expires_at = clock_timestamp() + %(ttl)s * interval '1 second', client = %(client)s, "
    "listener = %(listener)s, lease = %(lease)s, stamp = %(stamp)s, "
    "written_at = clock_timestamp() WHERE seq = %(seq)s",
    # -- release -------------------------------------------------------------------------------
    "release": "SELECT removed, others_wait FROM {s}.tumbler_release(%s, %s, %s)",
    "hand_off": "SELECT {s}.tumbler_hand_off(%s)",
    # what a release needs to find the waiters it lets through (kit.to_wake): the name's live
    # grants and the head of its line, "count" waiters from the one after "after" (a seq) on,
    # each part found by an index
    "wake_line": "(SELECT owner, seq, shared, lim, fair, token, client FROM {s}.tumbler_entries "
    "WHERE %(grants)s AND name = %(name)s AND token IS NOT NULL "
    "AND expires_at > clock_timestamp()) "
    "UNION ALL (SELECT owner, seq, shared, lim, fair, token, client FROM {s}.tumbler_entries "
    "WHERE name = %(name)s AND token IS NULL AND seq > %(after)s "
    "AND expires_at > clock_timestamp() ORDER BY seq LIMIT %(count)s) ORDER BY seq",
    "notify": "SELECT pg_notify(channel, payload) "
    "FROM unnest(%s::text[], %s::text[]) AS wake (channel, payload)",
    # -- state watchers -------------------------------------------------------------------------
    # a decision in the client, or a forced release, that changed the name's entries: as
    # _TELL_WATCHERS, in the same transaction
    "tell_watchers": "SELECT pg_notify(channel, '* ' || %(name)s) FROM {s}.tumbler_watched "
    "WHERE name = %(name)s AND expires_at > clock_timestamp()",
    # after "lock_name", in its transaction: a watcher's row, written or set again
    "watch": "INSERT INTO {s}.tumbler_watched (name, channel, expires_at) "
    "VALUES (%s, %s, clock_timestamp() + %s * interval '1 second') "
    "ON CONFLICT (name, channel) DO UPDATE SET expires_at = EXCLUDED.expires_at",
    # a client's rows, deleted as its listener stops (a client that dies leaves them to run
    # out and the sweep)
    "unwatch": "DELETE FROM {s}.tumbler_watched WHERE channel = %s",
    # -- leases -------------------------------------------------------------------------------
    # "the lease ends after clock_timestamp()" is what keeps an expired lease dead, and a
    # lapsed grant lapsed; the row's end moves with the lease, its lock-delay after it
    "renew": "UPDATE {s}.tumbler_entries "
    "SET expires_at = clock_timestamp() + %s * interval '1 second' + {delay} "
    "WHERE name = %s AND owner = %s AND token IS NOT NULL AND {lease_end} > clock_timestamp()",
    "renew_all": "UPDATE {s}.tumbler_entries AS entry "
    "SET expires_at = clock_timestamp() + due.ttl * interval '1 second' + {delay} "
    "FROM unnest(%s::text[], %s::text[], %s::float8[]) AS due (name, owner, ttl) "
    "WHERE entry.name = due.name AND entry.owner = due.owner AND entry.token IS NOT NULL "
    "AND {lease_end} > clock_timestamp() RETURNING entry.name, entry.owner",
    "bound": "SELECT set_config('statement_timeout', %s, true)",
    "no_wait": "SELECT set_config('synchronous_commit', 'off', true)",
    "ping": "SELECT 1",
    # behind a pooler, the first statement of every transaction: the client's bounds, for
    # this transaction only (SET LOCAL), since the next one may run on another session
    "settings": "SELECT pg_catalog.set_config('search_path', %s, true), "
    "pg_catalog.set_config('statement_timeout', %s, true), "
    "pg_catalog.set_config('lock_timeout', %s, true), "
    "pg_catalog.set_config('idle_in_transaction_session_timeout', %s, true)",
    # -- operators ----------------------------------------------------------------------------
    # Every grant goes, lapsed ones too (an operator's word ends a lock-delay); only those
    # whose lease was live are counted and noted: nothing else was taken from a holder.
    "force_release": "WITH now AS (SELECT clock_timestamp() AS at), "
    "gone AS (DELETE FROM {s}.tumbler_entries WHERE name = %(name)s AND token IS NOT NULL "
    "RETURNING owner, {lease_end} AS lease_end), "
    "noted AS (INSERT INTO {s}.tumbler_evictions (name, owner, note, expires_at) "
    "SELECT %(name)s, owner, %(note)s, lease_end + %(grace)s * interval '1 second' "
    "FROM gone, now WHERE lease_end > now.at "
    "ON CONFLICT (name, owner) DO UPDATE SET note = EXCLUDED.note, "
    "expires_at = EXCLUDED.expires_at) "
    "SELECT count(*) FROM gone, now WHERE lease_end > now.at",
    "evicted": "SELECT note FROM {s}.tumbler_evictions "
    "WHERE name = %s AND owner = %s AND expires_at > clock_timestamp()",
    # the rows of kit.state.states_of: each entry's time left is its row's, its lock-delay
    # included (one reading of the clock tells a lapsed grant by both)
    "states": "SELECT name, shared, lim, token, CASE WHEN {unreadable} THEN NULL "
    "ELSE extract(epoch FROM expires_at - clock_timestamp())::float8 END, holder, lock_delay "
    "FROM {s}.tumbler_entries WHERE expires_at > clock_timestamp() "
    "AND (%(name)s::text IS NULL OR name = %(name)s) ORDER BY name, seq",
    # -- upkeep -------------------------------------------------------------------------------
    # only rows no other transaction has locked: a sweep never waits for a transaction on a
    # name, so none can wait for it in turn (a deadlock); the name's next grant deletes the rest
    "sweep_entries": "DELETE FROM {s}.tumbler_entries WHERE seq IN (SELECT seq FROM "
    "{s}.tumbler_entries WHERE expires_at <= now() OR {unreadable_now} LIMIT %s "
    "FOR UPDATE SKIP LOCKED)",
    # names no entry uses; a transaction about to lock one makes it again (tumbler_take_name)
    "sweep_names": "DELETE FROM {s}.tumbler_names WHERE key IN (SELECT key FROM "
    "{s}.tumbler_names AS n WHERE NOT EXISTS (SELECT FROM {s}.tumbler_entries AS e "
    "WHERE e.name = n.name) LIMIT %s FOR UPDATE SKIP LOCKED)",
    # and, in the same statement, the watchers' rows that ran out
    "sweep_evictions": "WITH watched AS (DELETE FROM {s}.tumbler_watched "
    "WHERE (name, channel) IN (SELECT name, channel FROM {s}.tumbler_watched "
    "WHERE expires_at <= clock_timestamp() LIMIT %(rows)s FOR UPDATE SKIP LOCKED)) "
    "DELETE FROM {s}.tumbler_evictions WHERE (name, owner) IN "
    "(SELECT name, owner FROM {s}.tumbler_evictions "
    "WHERE expires_at <= clock_timestamp() LIMIT %(rows)s FOR UPDATE SKIP LOCKED)",
}


@dataclass(frozen=True)
class Statements:
    """The statements of one schema, composed and encoded once (the schema quoted as an
    identifier): a call sends them as they are."""

    schema: str
    #: the schema as an identifier (quoted), for ``to_regnamespace``
    schema_identifier: str
    create: tuple[bytes, ...]
    text: dict[str, bytes]
    #: the sequence's qualified name, for ``nextval``
    tokens: str
    entries: str
    evictions: str
    names: str
    #: what the schema's comment says once this version made it
    version: str

    @classmethod
    def of(cls, schema: str) -> Statements:
        quoted = sql.Identifier(schema)

        qualified = quoted.as_string()
        tokens = sql.Literal(f"{qualified}.tumbler_tokens")
        version = _version((*_CREATE, *_PARTS.values()))
        parts = {key: sql.SQL(text).format(s=quoted) for key, text in _PARTS.items()}

        def compose(text: str) -> bytes:
            return (
                sql.SQL(text)
                .format(
                    s=quoted,
                    next_token=sql.SQL("pg_catalog.nextval({}::regclass)").format(tokens),
                    version=sql.Literal(version),
                    **parts,
                )
                .as_bytes(None)
            )

        return cls(
            schema=schema,
            schema_identifier=qualified,
            create=tuple(compose(text) for text in _CREATE),
            text={key: compose(text) for key, text in _STATEMENTS.items()},
            tokens=f"{qualified}.tumbler_tokens",
            entries=f"{qualified}.tumbler_entries",
            evictions=f"{qualified}.tumbler_evictions",
            names=f"{qualified}.tumbler_names",
            version=version,
        )

    def __getitem__(self, key: str) -> bytes:
        return self.text[key]
