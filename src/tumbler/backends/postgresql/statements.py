"""The PostgreSQL backend's tables and statements, in the schema the URL names.

Tables (``{s}`` is the quoted schema)::

    {s}.tumbler_entries     one row per live grant or waiter of a lock name
    {s}.tumbler_evictions   the notes force_release leaves for the holders it evicted
    {s}.tumbler_tokens      the sequence every fencing token is drawn from

Why one sequence for every name, rather than a counter per name: a sequence never goes back
(not on rollback, not after a crash: it is logged ahead of use), so a token is above every
token ever given, for any name, also once every row of the name is gone. A counter per name
would have to keep a row for every name ever used, or restart from a floor (the server's
clock) that a clock stepped back would break. ``nextval`` takes no lock another transaction
waits for.

Every expiry is ``clock_timestamp()`` plus a lease, and every comparison is against
``clock_timestamp()``: the server's clock decides, never a client's. Each decision on a name
runs in a transaction that first takes ``pg_advisory_xact_lock`` on the name's 64-bit key
(:func:`name_key`): transactions on one name take turns, others run side by side, and the
lock ends with the transaction (nothing outlives it: safe behind a transaction-mode pooler).
Owners are stored as their SHA-1 (``common.owner_hash``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from psycopg import sql

#: how long a force-release note outlives the lease it ended: the evicted holder may learn
#: of its loss a little after that lease would have run out, and should still be told why
NOTE_GRACE = 60.0
#: expired rows of other names one sweep deletes (a sweep runs every SWEEP_EVERY grants)
SWEEP_ROWS = 100
SWEEP_EVERY = 64


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
        client     text,                  -- a waiter's client's NOTIFY channel
        UNIQUE (name, owner)
    )""",
    "CREATE INDEX IF NOT EXISTS tumbler_entries_expiry ON {s}.tumbler_entries (expires_at)",
    """CREATE TABLE IF NOT EXISTS {s}.tumbler_evictions (
        name       text NOT NULL,
        owner      text NOT NULL,         -- SHA-1 of the evicted grant's owner id
        note       text NOT NULL,         -- who forced it, from where, when, why
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (name, owner)
    )""",
    "CREATE INDEX IF NOT EXISTS tumbler_evictions_expiry ON {s}.tumbler_evictions (expires_at)",
    "CREATE SEQUENCE IF NOT EXISTS {s}.tumbler_tokens AS bigint",
)

_STATEMENTS = {
    # -- set-up -------------------------------------------------------------------------------
    "exists": "SELECT to_regclass(%(entries)s) IS NOT NULL AND to_regclass(%(evictions)s) "
    "IS NOT NULL AND to_regclass(%(tokens)s) IS NOT NULL",
    # -- a decision on one name ---------------------------------------------------------------
    "lock_name": "SELECT pg_advisory_xact_lock(%s)",
    "drop_expired": "DELETE FROM {s}.tumbler_entries "
    "WHERE name = %s AND expires_at <= clock_timestamp()",
    # The uncontended grant, in the same round trip as the lock: a name with no live entry
    # grants any request (the rule's answer on an empty line), so the grant is written
    # only if the name has none.
    "grant_if_free": "INSERT INTO {s}.tumbler_entries "
    "(name, owner, shared, lim, fair, token, expires_at, holder) "
    "SELECT %(name)s, %(owner)s, %(shared)s, %(lim)s, %(fair)s, nextval({tokens}), "
    "clock_timestamp() + %(ttl)s * interval '1 second', %(holder)s "
    "WHERE NOT EXISTS (SELECT 1 FROM {s}.tumbler_entries WHERE name = %(name)s) "
    "RETURNING token",
    "line": "SELECT owner, seq, shared, lim, fair, token FROM {s}.tumbler_entries "
    "WHERE name = %s AND expires_at > clock_timestamp() ORDER BY seq",
    "add": "INSERT INTO {s}.tumbler_entries "
    "(name, owner, shared, lim, fair, token, expires_at, holder, client) "
    "VALUES (%(name)s, %(owner)s, %(shared)s, %(lim)s, %(fair)s, "
    "CASE WHEN %(grant)s THEN nextval({tokens}) END, "
    "clock_timestamp() + %(ttl)s * interval '1 second', %(holder)s, %(client)s) "
    "RETURNING token",
    "grant_waiter": "UPDATE {s}.tumbler_entries SET token = nextval({tokens}), "
    "expires_at = clock_timestamp() + %(ttl)s * interval '1 second' "
    "WHERE seq = %(seq)s RETURNING token",
    "refresh_waiter": "UPDATE {s}.tumbler_entries "
    "SET expires_at = clock_timestamp() + %(ttl)s * interval '1 second', client = %(client)s "
    "WHERE seq = %(seq)s",
    # -- release: the second column says whether the removed entry was a live grant ----------
    "remove": "DELETE FROM {s}.tumbler_entries WHERE name = %s AND owner = %s "
    "RETURNING token IS NOT NULL AND expires_at > clock_timestamp()",
    # what a release needs to find the waiters it lets through: the live line, read only if
    # someone waits with a channel to notify
    "wake_line": "SELECT owner, seq, shared, lim, fair, token, client "
    "FROM {s}.tumbler_entries WHERE name = %(name)s AND expires_at > clock_timestamp() "
    "AND EXISTS (SELECT 1 FROM {s}.tumbler_entries WHERE name = %(name)s "
    "AND token IS NULL AND client IS NOT NULL) ORDER BY seq",
    "notify": "SELECT pg_notify(channel, payload) "
    "FROM unnest(%s::text[], %s::text[]) AS wake (channel, payload)",
    # -- leases -------------------------------------------------------------------------------
    # "expires_at > clock_timestamp()" is what keeps an expired lease dead
    "renew": "UPDATE {s}.tumbler_entries "
    "SET expires_at = clock_timestamp() + %s * interval '1 second' "
    "WHERE name = %s AND owner = %s AND token IS NOT NULL AND expires_at > clock_timestamp()",
    "renew_all": "UPDATE {s}.tumbler_entries AS entry "
    "SET expires_at = clock_timestamp() + due.ttl * interval '1 second' "
    "FROM unnest(%s::text[], %s::text[], %s::float8[]) AS due (name, owner, ttl) "
    "WHERE entry.name = due.name AND entry.owner = due.owner AND entry.token IS NOT NULL "
    "AND entry.expires_at > clock_timestamp() RETURNING entry.name, entry.owner",
    "bound": "SELECT set_config('statement_timeout', %s, true)",
    # behind a pooler, the first statement of every transaction: the client's bounds, for
    # this transaction only (SET LOCAL), since the next one may run on another session
    "settings": "SELECT set_config('statement_timeout', %s, true), "
    "set_config('lock_timeout', %s, true), "
    "set_config('idle_in_transaction_session_timeout', %s, true)",
    # -- operators ----------------------------------------------------------------------------
    "force_release": "WITH now AS (SELECT clock_timestamp() AS at), "
    "gone AS (DELETE FROM {s}.tumbler_entries WHERE name = %(name)s AND token IS NOT NULL "
    "RETURNING owner, expires_at), "
    "noted AS (INSERT INTO {s}.tumbler_evictions (name, owner, note, expires_at) "
    "SELECT %(name)s, owner, %(note)s, expires_at + %(grace)s * interval '1 second' "
    "FROM gone, now WHERE expires_at > now.at "
    "ON CONFLICT (name, owner) DO UPDATE SET note = EXCLUDED.note, "
    "expires_at = EXCLUDED.expires_at) "
    "SELECT count(*) FROM gone, now WHERE expires_at > now.at",
    "evicted": "SELECT note FROM {s}.tumbler_evictions "
    "WHERE name = %s AND owner = %s AND expires_at > clock_timestamp()",
    "states": "SELECT name, shared, lim, token, "
    "extract(epoch FROM expires_at - clock_timestamp())::float8, holder "
    "FROM {s}.tumbler_entries WHERE expires_at > clock_timestamp() "
    "AND (%(name)s::text IS NULL OR name = %(name)s) ORDER BY name, seq",
    # -- upkeep -------------------------------------------------------------------------------
    "sweep_entries": "DELETE FROM {s}.tumbler_entries WHERE seq IN (SELECT seq FROM "
    "{s}.tumbler_entries WHERE expires_at <= clock_timestamp() LIMIT %s)",
    "sweep_evictions": "DELETE FROM {s}.tumbler_evictions WHERE (name, owner) IN "
    "(SELECT name, owner FROM {s}.tumbler_evictions "
    "WHERE expires_at <= clock_timestamp() LIMIT %s)",
}


@dataclass(frozen=True)
class Statements:
    """The statements of one schema, composed once (the schema quoted as an identifier)."""

    schema: str
    create: tuple[sql.Composed, ...]
    text: dict[str, sql.Composed]
    #: the sequence's qualified name, for ``nextval``
    tokens: str
    entries: str
    evictions: str

    @classmethod
    def of(cls, schema: str) -> Statements:
        quoted = sql.Identifier(schema)

        qualified = quoted.as_string()
        tokens = sql.Literal(f"{qualified}.tumbler_tokens")

        def compose(text: str) -> sql.Composed:
            return sql.SQL(text).format(s=quoted, tokens=tokens)

        return cls(
            schema=schema,
            create=tuple(compose(text) for text in _CREATE),
            text={key: compose(text) for key, text in _STATEMENTS.items()},
            tokens=f"{qualified}.tumbler_tokens",
            entries=f"{qualified}.tumbler_entries",
            evictions=f"{qualified}.tumbler_evictions",
        )

    def __getitem__(self, key: str) -> sql.Composed:
        return self.text[key]
