"""The MySQL / MariaDB backend's tables and stored procedures, in the dialect both accept
(MariaDB 10.6+, MySQL 8.0+), named with the URL's table prefix (default ``tumbler_``).

Tables (``{p}`` is the prefix)::

    {p}names       one row per lock name with live entries: the row a decision on the name locks
    {p}entries     one row per live grant or waiter of a lock name
    {p}tokens      the counter every fencing token is drawn from (AUTO_INCREMENT, no rows kept)
    {p}evictions   the notes force_release leaves for the holders it evicted
    {p}wakeups     wake-ups a release leaves for a client's listener, read and deleted by it
                   (and the rest deleted as it stops listening)
    {p}watched     one row per client that watches a name's state, while it does

Why a table of names: each decision on a name runs in one short transaction that first locks
the name's row (``INSERT ... ON DUPLICATE KEY UPDATE``: it is made if missing, and its lock is
held to the commit), so transactions on one name take turns and others run side by side. A
row lock rather than ``GET_LOCK``: it ends with the transaction (nothing outlives it, also
when the connection dies), and Galera replicates it. The transactions run at ``READ
COMMITTED``: no gap locks (which would make transactions on neighbouring names wait on each
other), and every statement after the name's lock reads what was committed before it.

Why an AUTO_INCREMENT table for tokens, emptied at once: its counter never goes back (InnoDB
keeps it in the redo log: MariaDB 10.2.4+, MySQL 8.0+), not on rollback, not across a crash,
so a token is above every token ever given, for any name, also once every row of the name is
gone; and taking a value holds no lock another transaction waits for, unlike a counter row.

Names are compared as bytes (``VARBINARY``: MariaDB's default collations ignore case and
trailing spaces); owners are stored as their SHA-1 (``kit.owners.owner_hash``). Every expiry is
``UTC_TIMESTAMP(6)`` plus a lease, and every comparison is against ``UTC_TIMESTAMP(6)``: the
server's clock decides, never a client's, and the session's time zone plays no part.

Every read of a name's line goes by an index and reads only what the rule looks at: the
name's grants, the head of its line, its first fair waiters, an entry of another permit count
(the entries' keys below); ``{p}drop_expired`` deletes a name's expired entries. A table an
earlier version made lacks the keys: a client adds them and makes every procedure again.

Who may read: ``{p}states`` (what ``inspect`` reads) runs with its definer's rights, so a user
that may only read gets EXECUTE on it alone. SELECT on the tables is a right to lock their
rows (MariaDB asks no more for ``FOR UPDATE``, and InnoDB locks what any read of a
SERIALIZABLE transaction reads) and so to hold every grant, release and forced release of a
name up: it is for lock users only.

Lock-delay: a grant made with one keeps it in its row (``lock_delay``, seconds; 0 for a waiter
and for a grant without one), and the row's ``expires_at`` is the end of its lease plus that
delay, so that the row outlives its lease by it: its lease ends at ``expires_at - lock_delay``
(``_ROW_LEASE_END``). Every statement that drops or skips rows by ``expires_at`` (a decision's
clean-up of its name, the sweep, a client of an older version, which sees the lapsed grant as
a live one) so keeps a lapsed grant for its delay without knowing of it; what tells a lapsed
grant from a live one (a renewal, a release, a take-up, the decision's read of the line,
``inspect``, ``force_release``) compares the lease's end. The column came after the table: a
client of this version adds it to a table an older one made, its rows reading 0 (the
column's default). A grant whose delay is none tumbler writes (below 0 or above an hour: the
column takes no NaN nor infinity) is dropped by its name's next decision, and counted by
``inspect``, as an unusable entry is.

State watchers (``locks.watch``, ``election.observe``): a client that watches a name's state
keeps a row in ``{p}watched`` (the name, the client's listener key, and when the row runs out
unless the watcher sets it again: ``kit sql.WATCHED_TTL``), written by ``{p}watch`` in a
transaction that takes the name's row first, as every decision does. Every procedure and
transaction that changes a name's entries (``{p}grant`` where it grants, adds a waiter or
revokes a grant nobody will take up; ``{p}release``; ``{p}force_release``; a decision in the
client that grants or adds a waiter, which commits with ``{p}commit_change``) looks the name
up in ``{p}watched`` before it commits (:data:`_TELL_WATCHERS`: one lookup by the table's key,
which finds nothing unless someone watches), and where it finds a live row leaves each
watching client that listens a wake-up ``* <name>`` (``{p}tell_watchers``) and rings it after
the commit (``{p}ring_watchers``), as a release wakes a waiter. Entries that ran out are not
announced: they are gone from ``inspect``'s reading the moment they run out (its watcher reads
again when the lease it read ends), before any statement deletes them.

The hot paths are procedures, each one ``CALL`` and one round trip, their transaction inside:
``{p}grant`` (a request answered where the rule's answer is plain, else sent back for the
client to decide on the whole line with ``_core.plan``) and ``{p}release`` (which hands the
lock to the next exclusive waiter itself and wakes it). Which commits wait for the disk is
the server's ``innodb_flush_log_at_trx_commit``: 1 (the default) for a grant that survives a
crash of the server.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..._core import MAX_LOCK_DELAY, MAX_PERMITS, MAX_TTL, MIN_TTL

#: expired rows of other names one sweep deletes (a sweep runs every SWEEP_EVERY grants)
SWEEP_ROWS = 100
SWEEP_EVERY = 64
#: how long a force-release note outlives the lease it ended (see the PostgreSQL backend)
NOTE_GRACE = 60.0
#: leases one statement of renew_all renews: the statement stays far below the server's
#: max_allowed_packet (16 MB by default) with names of the longest (255 bytes)
RENEW_ROWS = 500

#: an entry whose lease ends later than any tumbler grants (``_core.MAX_TTL``, and a day) was
#: not written by tumbler: one at the end of DATETIME's range, to which no arithmetic adds,
#: or a far future that would hold the name for ever. Decisions drop it as if expired;
#: ``inspect`` counts it.
_FAR = f"UTC_TIMESTAMP(6) + INTERVAL {round(MAX_TTL + 86400)} SECOND"
#: an entry with numbers tumbler never writes: permits out of range, or a waiter whose
#: client listens (so a release would hand it the lock) without the lease and the time of
#: its request that a hand-off computes with. Decisions drop it; ``inspect`` counts it. A
#: column the server computes, so that a decision finds a name's such entries by an index.
_UNUSABLE = (
    f"unusable BOOLEAN AS (lim < 0 OR lim > {MAX_PERMITS} OR (token IS NULL "
    "AND client IS NOT NULL AND (lease IS NULL OR written_at IS NULL "
    f"OR NOT lease BETWEEN {MIN_TTL} AND {MAX_TTL:.0f}))) VIRTUAL"
)

# What a decision and a release read of a name, each found without passing over the rest of
# its line (InnoDB ends each key with the primary key, seq: the arrival order): its expired
# entries (each decision deletes them first); its grants, and its waiters in arrival order
# (the head of the line); its fair exclusive waiters in arrival order (one ahead keeps every
# fair request waiting); its shared entries by permit count (one with another count refuses a
# shared request); its unusable entries (each decision deletes them first).
INDEXES = {
    "name_expiry": "(name, expires_at)",
    "line": "(name, token)",
    "fair_writers": "(name, token, fair, shared)",
    "limits": "(name, shared, lim)",
    "unusable": "(name, unusable)",
}
_INDEXES = ",\n        ".join(f"KEY {key} {columns}" for key, columns in INDEXES.items())
#: the procedures, each made again by a version that changes one (see ``make_tables``)
PROCEDURES = (
    "drop_expired",
    "grant",
    "hand_off",
    "release",
    "force_release",
    "ring",
    "watch",
    "tell_watchers",
    "ring_watchers",
    "commit_change",
    "sweep",
    "states",
)


#: a grant whose lock-delay is none tumbler writes (see "Lock-delay" above): found among the
#: name's grants, which every decision reads whole anyway
_BAD_DELAY = f"(token IS NOT NULL AND NOT lock_delay BETWEEN 0 AND {MAX_LOCK_DELAY:.0f})"
#: an entry's lock-delay in seconds, bounded, so that one tumbler never writes (dropped by
#: its name's next decision) makes no arithmetic overflow meanwhile
_DELAY = f"LEAST(GREATEST(lock_delay, 0), {MAX_LOCK_DELAY:.0f})"
#: when an entry's lease ends: its row's end less its lock-delay
_ROW_LEASE_END = f"(expires_at - INTERVAL ROUND({_DELAY} * 1000000) MICROSECOND)"

_NAME = "VARBINARY(255)"  # tumbler's names are at most 255 UTF-8 bytes (_core.MAX_NAME_BYTES)
# the column's type, also for a procedure's parameter or variable: one of another character
# set or collation is compared after a conversion, which no index on the column serves
_OWNER = "CHAR(40) CHARACTER SET ascii COLLATE ascii_bin"
_LEASE_END = "UTC_TIMESTAMP(6) + INTERVAL ROUND({seconds} * 1000000) MICROSECOND"
#: what a transaction that changed ``lock_name``'s entries runs before its commit (in a
#: procedure that declares ``watching BOOLEAN``): whether anyone watches the name's state, one
#: lookup by the key of ``{p}watched`` that finds nothing unless someone does; and if so, a
#: wake-up left for each watching client
_TELL_WATCHERS = (
    "SET watching = EXISTS (SELECT 1 FROM {p}watched WHERE name = lock_name "
    "AND expires_at > UTC_TIMESTAMP(6)); "
    "IF watching THEN CALL {p}tell_watchers(lock_name); END IF;"
)
#: ... and after it: their listeners rung (a ring before the commit would wake a listener
#: to read wake-ups it cannot see yet)
_RING_WATCHERS = "IF watching THEN CALL {p}ring_watchers(lock_name); END IF;"
#: what {p}grant runs before it writes a waiter's entry that names its client's key while
#: the client does not listen yet (nobody holds the key's listener lock): this connection
#: takes the key's waiter lock, which says the client lives till its listener does, so that
#: a release does not take the waiter for dead (see {p}hand_off). Taken here, where a waiter
#: is written, a grant pays nothing for it.
_CLAIM = (
    "IF waiter_client IS NOT NULL "
    "AND IS_USED_LOCK(CONCAT('tumbler-listener-', waiter_client)) IS NULL THEN "
    "DO GET_LOCK(CONCAT('tumbler-waiter-', waiter_client), 0); END IF;"
)
#: the rows of kit.state.states_of: each entry's time left is its row's, its lock-delay
#: included (one reading of the clock tells a lapsed grant by both)
_STATE_COLUMNS = (
    f"name, shared, lim, token, CASE WHEN unusable OR expires_at > {_FAR} OR {_BAD_DELAY} "
    "THEN NULL ELSE TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1e6 END, "
    "holder, lock_delay"
)
#: the rows of kit sql.line_entries: the last column says whether the entry is a lapsed grant
#: (its lease over, its lock-delay not)
_LINE_COLUMNS = (
    "owner, seq, shared, lim, fair, token, "
    f"token IS NOT NULL AND lock_delay > 0 AND {_ROW_LEASE_END} <= UTC_TIMESTAMP(6)"
)
#: the lock-delay column, as a table of this version makes it and as one of an earlier
#: version gains it (its rows reading 0: no delay)
_LOCK_DELAY = "lock_delay DOUBLE NOT NULL DEFAULT 0"

_CREATE = (
    f"""CREATE TABLE IF NOT EXISTS {{p}}names (
        name {_NAME} NOT NULL PRIMARY KEY
    ) ENGINE=InnoDB""",
    f"""CREATE TABLE IF NOT EXISTS {{p}}entries (
        seq        BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,  -- arrival order
        name       {_NAME} NOT NULL,
        owner      {_OWNER} NOT NULL,            -- SHA-1 of the owner id
        shared     BOOLEAN NOT NULL,
        lim        INT NOT NULL,                 -- shared holders admitted, 0 = any number
        fair       BOOLEAN NOT NULL,
        token      BIGINT UNSIGNED NULL,         -- fencing token of a grant, NULL for a waiter
        expires_at DATETIME(6) NOT NULL,         -- UTC, on the server's clock
        holder     VARCHAR(255) NOT NULL,        -- host and pid, for operators
        -- a waiter's, for a release to hand it the lock and wake it:
        client     BIGINT UNSIGNED NULL,         -- its client's listening connection id
        lease      DOUBLE NULL,                  -- the lease it asked for, in seconds
        stamp      BIGINT NULL,                  -- its client's clock (µs) when it asked
        written_at DATETIME(6) NULL,             -- when the server wrote that request
        {_UNUSABLE},
        -- a grant's lock-delay, in seconds: its row outlives its lease by it (expires_at is
        -- the lease's end plus the delay); 0 for a waiter and a grant without one
        {_LOCK_DELAY},
        UNIQUE KEY by_name (name, owner),
        KEY (expires_at),
        {_INDEXES}
    ) ENGINE=InnoDB""",
    """CREATE TABLE IF NOT EXISTS {p}tokens (
        token BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY
    ) ENGINE=InnoDB""",
    f"""CREATE TABLE IF NOT EXISTS {{p}}evictions (
        name       {_NAME} NOT NULL,
        owner      {_OWNER} NOT NULL,
        note       VARCHAR(1024) NOT NULL,       -- who forced it, from where, when, why
        expires_at DATETIME(6) NOT NULL,
        PRIMARY KEY (name, owner),
        KEY (expires_at)
    ) ENGINE=InnoDB""",
    """CREATE TABLE IF NOT EXISTS {p}wakeups (
        seq     BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
        client  BIGINT UNSIGNED NOT NULL,        -- the listening connection to wake
        message VARBINARY(400) NOT NULL,         -- "[=terms:]<owner> <name>", "* <name>"
        KEY (client)
    ) ENGINE=InnoDB""",
    # One row per client that watches a name's state, while it does: written by {p}watch and
    # set again before it runs out; the changes of the name's entries wake each live one's
    # client (see "State watchers" above).
    f"""CREATE TABLE IF NOT EXISTS {{p}}watched (
        name       {_NAME} NOT NULL,
        client     BIGINT UNSIGNED NOT NULL,     -- the watching client's listener key
        expires_at DATETIME(6) NOT NULL,         -- UTC, on the server's clock
        PRIMARY KEY (name, client),
        KEY (expires_at)
    ) ENGINE=InnoDB""",
    # The expired entries of one name, in a transaction that holds the name's row, and those
    # it cannot use (_FAR, _UNUSABLE, _BAD_DELAY): found by the name's index on expiry, its
    # index of unusable entries and its grants in a read that locks nothing, and each
    # deleted by its seq.
    # A DELETE by a range of that index would lock the first entry past the range too, which
    # may be another name's, and wait for (or deadlock with) a transaction on that name; one
    # by the index on expires_at alone would lock other names' expired entries; one by the
    # name's unique key would pass over its whole line.
    f"""CREATE PROCEDURE IF NOT EXISTS {{p}}drop_expired(IN lock_name {_NAME})
    SQL SECURITY INVOKER
    BEGIN
        DECLARE gone BIGINT UNSIGNED;
        DECLARE ended BOOLEAN DEFAULT FALSE;
        DECLARE expired CURSOR FOR
            SELECT seq FROM {{p}}entries FORCE INDEX (name_expiry)
            WHERE name = lock_name AND (expires_at <= UTC_TIMESTAMP(6) OR expires_at > {_FAR})
            UNION
            SELECT seq FROM {{p}}entries FORCE INDEX (unusable)
            WHERE name = lock_name AND unusable = TRUE
            UNION
            SELECT seq FROM {{p}}entries FORCE INDEX (line)
            WHERE name = lock_name AND {_BAD_DELAY};
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET ended = TRUE;
        OPEN expired;
        entries: LOOP
            FETCH expired INTO gone;
            IF ended THEN LEAVE entries; END IF;
            DELETE FROM {{p}}entries WHERE seq = gone;
        END LOOP;
        CLOSE expired;
    END""",
    # A grant request, answered here where the grant rule's answer needs no more than the
    # request and a glance at the line (tumbler._core.decide): a name with no live entry
    # grants any request; an owner with a live grant holds it already, and takes it up (its
    # lease set to the one asked, from now); an exclusive request waits while another owner
    # holds a live grant (its waiter entry written or refreshed). Any other request comes
    # back undecided, for the client to decide by the rule on the part of the line it looks
    # at. A new waiter is not written where "max_waiters" wait already. A grant keeps
    # "delay_asked", its lock-delay (a waiter keeps none); a lapsed grant counts as a grant,
    # and its owner's request finds no live lease to take up: nothing is written for it.
    # The answer is one row: (token, lease left, undecided, full). The name's state
    # watchers are told of a grant, a new waiter and a grant revoked (_TELL_WATCHERS).
    f"""CREATE PROCEDURE IF NOT EXISTS {{p}}grant(
        IN lock_name {_NAME}, IN lock_owner {_OWNER}, IN is_shared BOOLEAN,
        IN permits INT,
        IN is_fair BOOLEAN, IN lease_asked DOUBLE, IN holder_info VARCHAR(255),
        IN queue BOOLEAN, IN waiter_lease DOUBLE, IN waiter_client BIGINT UNSIGNED,
        IN waiter_stamp BIGINT, IN max_waiters INT, IN delay_asked DOUBLE
    ) SQL SECURITY INVOKER
    body: BEGIN
        DECLARE granted BIGINT UNSIGNED DEFAULT NULL;
        DECLARE mine_seq BIGINT UNSIGNED DEFAULT NULL;
        DECLARE mine_token BIGINT UNSIGNED DEFAULT NULL;
        DECLARE mine_left DOUBLE DEFAULT NULL;
        DECLARE untaken BIGINT UNSIGNED DEFAULT NULL;
        -- whether the entries changed, and whether anyone watches the name's state then
        DECLARE changed BOOLEAN DEFAULT FALSE;
        DECLARE watching BOOLEAN DEFAULT FALSE;
        -- a SELECT ... INTO that finds no row leaves its variables NULL, without a warning
        DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
        DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        START TRANSACTION;
        INSERT INTO {{p}}names (name) VALUES (lock_name) ON DUPLICATE KEY UPDATE name = name;
        -- a name with no entry (an uncontended grant) has none to drop: one read by the
        -- name's index, where the clean-up's cursor over three reads costs some 200 µs
        IF EXISTS (SELECT 1 FROM {{p}}entries WHERE name = lock_name) THEN
            CALL {{p}}drop_expired(lock_name);
        END IF;
        -- A grant a release handed to a waiter that has not taken it up yet ({{p}}hand_off),
        -- whose client no longer listens (nobody holds its listener lock: the process died,
        -- or its connection closed, in the moment after the release saw it listen): nobody
        -- will take it up, and it would hold the lock to the end of the waiter's lease.
        -- Revoked, each found by the name's grants and deleted by its seq.
        untaken_grants: LOOP
            SET untaken = NULL;
            SELECT seq INTO untaken FROM {{p}}entries FORCE INDEX (line)
                WHERE name = lock_name AND token IS NOT NULL AND stamp IS NULL
                AND client IS NOT NULL AND owner <> lock_owner
                AND IS_USED_LOCK(CONCAT('tumbler-listener-', client)) IS NULL
                AND IS_USED_LOCK(CONCAT('tumbler-waiter-', client)) IS NULL LIMIT 1;
            IF untaken IS NULL THEN LEAVE untaken_grants; END IF;
            DELETE FROM {{p}}entries WHERE seq = untaken;
            SET changed = TRUE;
        END LOOP;
        IF NOT EXISTS (SELECT 1 FROM {{p}}entries WHERE name = lock_name) THEN
            INSERT INTO {{p}}tokens () VALUES ();
            SET granted = LAST_INSERT_ID();
            DELETE FROM {{p}}tokens WHERE token = granted;
            INSERT INTO {{p}}entries (name, owner, shared, lim, fair, token, expires_at, holder,
                                      lock_delay)
                VALUES (lock_name, lock_owner, is_shared, permits, is_fair, granted,
                        {_LEASE_END.format(seconds="(lease_asked + delay_asked)")}, holder_info,
                        delay_asked);
            SET changed = TRUE;
            IF changed THEN {_TELL_WATCHERS} END IF; COMMIT; {_RING_WATCHERS}
            SELECT granted, lease_asked, FALSE, FALSE;
            LEAVE body;
        END IF;
        SELECT seq, token, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1e6
            INTO mine_seq, mine_token, mine_left
            FROM {{p}}entries WHERE name = lock_name AND owner = lock_owner;
        IF mine_token IS NOT NULL THEN
            -- the owner asks for a grant it has (a release handed it over, or the reply to
            -- its last try was lost): it takes it up, with the lease it asks for from now
            -- (and the lock-delay: a grant handed over keeps one from its take-up on)
            UPDATE {{p}}entries
                SET expires_at = {_LEASE_END.format(seconds="(lease_asked + delay_asked)")},
                    client = NULL, lock_delay = delay_asked
                WHERE seq = mine_seq AND {_ROW_LEASE_END} > UTC_TIMESTAMP(6);
            IF ROW_COUNT() = 0 THEN
                -- it ran out this very moment, or before (a lapsed grant, kept for its
                -- lock-delay): the next try asks anew
                SET mine_token = NULL;
            END IF;
            IF changed THEN {_TELL_WATCHERS} END IF; COMMIT; {_RING_WATCHERS}
            SELECT mine_token, IF(mine_token IS NULL, NULL, lease_asked), FALSE, FALSE;
            LEAVE body;
        END IF;
        IF is_shared OR NOT EXISTS (
            SELECT 1 FROM {{p}}entries FORCE INDEX (line) WHERE name = lock_name
            AND token IS NOT NULL AND owner <> lock_owner
        ) THEN
            IF changed THEN {_TELL_WATCHERS} END IF; COMMIT; {_RING_WATCHERS}
            SELECT NULL, NULL, TRUE, FALSE;
            LEAVE body;
        END IF;
        IF mine_seq IS NOT NULL THEN
            {_CLAIM}
            UPDATE {{p}}entries
                SET expires_at = {_LEASE_END.format(seconds="waiter_lease")},
                    client = waiter_client, lease = lease_asked, stamp = waiter_stamp,
                    written_at = UTC_TIMESTAMP(6)
                WHERE seq = mine_seq;
        ELSEIF queue THEN
            -- every waiter left is live (the expired ones were deleted above): counted by
            -- the index of the line alone, up to the cap
            IF (SELECT COUNT(*) FROM (SELECT 1 FROM {{p}}entries FORCE INDEX (line)
                WHERE name = lock_name AND token IS NULL LIMIT max_waiters) AS line)
                >= max_waiters THEN
                IF changed THEN {_TELL_WATCHERS} END IF; COMMIT; {_RING_WATCHERS}
                SELECT NULL, NULL, FALSE, TRUE;
                LEAVE body;
            END IF;
            {_CLAIM}
            INSERT INTO {{p}}entries (name, owner, shared, lim, fair, token, expires_at, holder,
                                      client, lease, stamp, written_at)
                VALUES (lock_name, lock_owner, is_shared, permits, is_fair, NULL,
                        {_LEASE_END.format(seconds="waiter_lease")}, holder_info,
                        waiter_client, lease_asked, waiter_stamp, UTC_TIMESTAMP(6));
            SET changed = TRUE;
        END IF;
        IF changed THEN {_TELL_WATCHERS} END IF; COMMIT; {_RING_WATCHERS}
        SELECT NULL, NULL, FALSE, FALSE;
    END""",
    # In a transaction that holds the name's lock and may have freed it. First, the waiters
    # at the head of the line whose client no longer listens (nobody holds its listener lock,
    # nor its waiter lock, which a connection that wrote an entry before the client listened
    # holds: the process died, or its connections closed) are deleted: each would hold up every fair
    # waiter behind it until its entry ran out, and one handed the lock would hold it for a
    # whole lease. A waiter with no client (one that polls, or whose client did not listen
    # yet when it wrote its entry) cannot be told dead, and stays. Then, if the name has no
    # live grant left and its first waiter is exclusive and listens, the lock is granted to
    # that waiter here, and the waiter is told in a wake-up row for its client's listener
    # (tumbler.backends.kit.handoffs): "=<token>,<stamp>,<elapsed µs>:<owner> <name>",
    # elapsed from its request's write to the grant, on the server's clock. Its caller rings
    # "handed_to" after the commit. The grant lives on the waiter's own short lease (its
    # entry's, waiter_ttl at most; or the lease it asked for, if shorter) until the waiter
    # takes it up ("take_up", or {p}grant when it asks), which sets the lease it asked for: a
    # waiter that died in the moment after this saw it listen never does, and its grant runs
    # out with its liveness, or sooner where another request finds its client gone
    # ({p}grant). Marked so till then: stamp cleared, client kept.
    # "others_wait": waiters are left, whom the client finds by the rule (reading the head of
    # the line). A name left with no entry loses its row. Each read is of the head of the
    # line, by an index: none passes over the line.
    f"""CREATE PROCEDURE IF NOT EXISTS {{p}}hand_off(
        IN lock_name {_NAME}, OUT handed_to BIGINT UNSIGNED, OUT others_wait BOOLEAN
    ) SQL SECURITY INVOKER
    BEGIN
        DECLARE handed BIGINT UNSIGNED DEFAULT NULL;
        DECLARE first_seq BIGINT UNSIGNED DEFAULT NULL;
        DECLARE first_shared BOOLEAN;
        DECLARE first_owner {_OWNER};
        DECLARE first_client BIGINT UNSIGNED;
        DECLARE first_lease DOUBLE;
        DECLARE first_stamp BIGINT;
        DECLARE waited BIGINT;
        DECLARE at DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
        DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
        SET handed_to = NULL, others_wait = FALSE;
        head: LOOP
            -- a SELECT ... INTO that finds no row leaves its variables as they were
            SET first_seq = NULL;
            SELECT seq, shared, owner, client, lease, stamp,
                   TIMESTAMPDIFF(MICROSECOND, written_at, at)
                INTO first_seq, first_shared, first_owner, first_client, first_lease,
                     first_stamp, waited
                FROM {{p}}entries FORCE INDEX (line)
                WHERE name = lock_name AND token IS NULL AND expires_at > at
                ORDER BY seq LIMIT 1;
            IF first_seq IS NULL OR first_client IS NULL
               OR IS_USED_LOCK(CONCAT('tumbler-listener-', first_client)) IS NOT NULL
               OR IS_USED_LOCK(CONCAT('tumbler-waiter-', first_client)) IS NOT NULL THEN
                LEAVE head;
            END IF;
            DELETE FROM {{p}}entries WHERE seq = first_seq;
        END LOOP;
        IF first_seq IS NOT NULL AND NOT first_shared AND first_client IS NOT NULL
           AND first_stamp IS NOT NULL AND NOT EXISTS (
               SELECT 1 FROM {{p}}entries FORCE INDEX (line)
               WHERE name = lock_name AND token IS NOT NULL AND expires_at > at) THEN
            INSERT INTO {{p}}tokens () VALUES ();
            SET handed = LAST_INSERT_ID();
            DELETE FROM {{p}}tokens WHERE token = handed;
            UPDATE {{p}}entries
                SET token = handed, stamp = NULL, expires_at = LEAST(expires_at,
                    at + INTERVAL ROUND(first_lease * 1000000) MICROSECOND)
                WHERE seq = first_seq;
            INSERT INTO {{p}}wakeups (client, message) VALUES (first_client, CONCAT(
                '=', handed, ',', first_stamp, ',', waited, ':', first_owner, ' ',
                lock_name));
            SET handed_to = first_client;
        END IF;
        IF handed IS NULL THEN
            SET others_wait = first_seq IS NOT NULL;
            IF NOT EXISTS (SELECT 1 FROM {{p}}entries WHERE name = lock_name) THEN
                DELETE FROM {{p}}names WHERE name = lock_name;
            END IF;
        END IF;
    END""",
    # A release: the owner's entry deleted, the lock handed over where {p}hand_off can. The
    # answer is one row: (removed, others_wait), "removed": the entry was a live grant. The
    # name's state watchers are told (also of a release that changed nothing: a hint).
    f"""CREATE PROCEDURE IF NOT EXISTS {{p}}release(
        IN lock_name {_NAME}, IN lock_owner {_OWNER}
    ) SQL SECURITY INVOKER
    BEGIN
        DECLARE removed BOOLEAN DEFAULT FALSE;
        DECLARE handed_to BIGINT UNSIGNED;
        DECLARE others_wait BOOLEAN DEFAULT FALSE;
        DECLARE watching BOOLEAN DEFAULT FALSE;
        -- a SELECT ... INTO that finds no row leaves its variables NULL, without a warning
        DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
        DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        START TRANSACTION;
        INSERT INTO {{p}}names (name) VALUES (lock_name) ON DUPLICATE KEY UPDATE name = name;
        DELETE FROM {{p}}entries WHERE name = lock_name AND owner = lock_owner
            AND token IS NOT NULL AND {_ROW_LEASE_END} > UTC_TIMESTAMP(6);
        SET removed = ROW_COUNT() > 0;
        IF NOT removed THEN
            -- a waiter's entry, or a grant that ran out; a lapsed grant stays: its owner's
            -- release does not end its lock-delay
            DELETE FROM {{p}}entries WHERE name = lock_name AND owner = lock_owner
                AND (token IS NULL OR lock_delay = 0);
        END IF;
        -- a name left with no entry needs no clean-up and no hand-off, only its row deleted
        IF EXISTS (SELECT 1 FROM {{p}}entries WHERE name = lock_name) THEN
            CALL {{p}}drop_expired(lock_name);
            CALL {{p}}hand_off(lock_name, handed_to, others_wait);
        ELSE
            DELETE FROM {{p}}names WHERE name = lock_name;
        END IF;
        {_TELL_WATCHERS}
        COMMIT;
        IF handed_to IS NOT NULL THEN
            CALL {{p}}ring(handed_to);
        END IF;
        {_RING_WATCHERS}
        SELECT removed, others_wait;
    END""",
    # A forced release: every grant of the name removed, lapsed ones too (an operator's word
    # ends a lock-delay), a note left for each holder of a live one (kept until its lease
    # would have ended, and "grace" seconds more), the lock handed over where {p}hand_off
    # can, the name's state watchers told. The answer is one row: (evicted: the live grants,
    # others_wait).
    f"""CREATE PROCEDURE IF NOT EXISTS {{p}}force_release(
        IN lock_name {_NAME}, IN note_text VARCHAR(1024), IN grace DOUBLE
    ) SQL SECURITY INVOKER
    BEGIN
        DECLARE evicted INT DEFAULT 0;
        DECLARE handed_to BIGINT UNSIGNED;
        DECLARE others_wait BOOLEAN;
        DECLARE watching BOOLEAN DEFAULT FALSE;
        DECLARE at DATETIME(6);
        -- a SELECT ... INTO that finds no row leaves its variables NULL, without a warning
        DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
        DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        START TRANSACTION;
        INSERT INTO {{p}}names (name) VALUES (lock_name) ON DUPLICATE KEY UPDATE name = name;
        CALL {{p}}drop_expired(lock_name);
        SET at = UTC_TIMESTAMP(6);
        SELECT COUNT(*) INTO evicted FROM {{p}}entries
            WHERE name = lock_name AND token IS NOT NULL AND {_ROW_LEASE_END} > at;
        INSERT INTO {{p}}evictions (name, owner, note, expires_at)
            SELECT name, owner, note_text,
                   {_ROW_LEASE_END} + INTERVAL ROUND(grace * 1000000) MICROSECOND
            FROM {{p}}entries WHERE name = lock_name AND token IS NOT NULL
            AND {_ROW_LEASE_END} > at
            ON DUPLICATE KEY UPDATE note = VALUES(note), expires_at = VALUES(expires_at);
        DELETE FROM {{p}}entries WHERE name = lock_name AND token IS NOT NULL;
        CALL {{p}}hand_off(lock_name, handed_to, others_wait);
        {_TELL_WATCHERS}
        COMMIT;
        IF handed_to IS NOT NULL THEN
            CALL {{p}}ring(handed_to);
        END IF;
        {_RING_WATCHERS}
        SELECT evicted, others_wait;
    END""",
    # Wake a client's listener: it waits for its doorbell ("sleep"), which this interrupts
    # (KILL QUERY of the connection that holds the client's listener lock). A client that is
    # not listening, or one this account may not interrupt (another database user, without
    # CONNECTION ADMIN), is not woken: it finds its wake-ups at its next re-check.
    """CREATE PROCEDURE IF NOT EXISTS {p}ring(IN listener BIGINT UNSIGNED)
    SQL SECURITY INVOKER
    BEGIN
        DECLARE target BIGINT UNSIGNED DEFAULT NULL;
        DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
        SET target = IS_USED_LOCK(CONCAT('tumbler-listener-', listener));
        IF target IS NOT NULL THEN
            KILL QUERY target;
        END IF;
    END""",
    # A client says, for "seconds", that it watches the name's state: its row written or set
    # again, in a transaction that takes the name's row first, as a decision does, so that
    # what the watcher reads next shows every change committed before, and every change
    # committed after tells it. A name with no entry keeps no row in {p}names.
    f"""CREATE PROCEDURE IF NOT EXISTS {{p}}watch(
        IN lock_name {_NAME}, IN watcher BIGINT UNSIGNED, IN seconds DOUBLE
    ) SQL SECURITY INVOKER
    BEGIN
        DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        START TRANSACTION;
        INSERT INTO {{p}}names (name) VALUES (lock_name) ON DUPLICATE KEY UPDATE name = name;
        INSERT INTO {{p}}watched (name, client, expires_at)
            VALUES (lock_name, watcher, {_LEASE_END.format(seconds="seconds")})
            ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at);
        IF NOT EXISTS (SELECT 1 FROM {{p}}entries WHERE name = lock_name) THEN
            DELETE FROM {{p}}names WHERE name = lock_name;
        END IF;
        COMMIT;
    END""",
    # In a transaction that changed the name's entries (_TELL_WATCHERS): a wake-up "* <name>"
    # for each client that watches the name's state and listens (as "wake": one that closed
    # reads no more), seen by its listener once the transaction commits.
    f"""CREATE PROCEDURE IF NOT EXISTS {{p}}tell_watchers(IN lock_name {_NAME})
    SQL SECURITY INVOKER
    BEGIN
        INSERT INTO {{p}}wakeups (client, message)
            SELECT client, CONCAT('* ', lock_name) FROM {{p}}watched
            WHERE name = lock_name AND expires_at > UTC_TIMESTAMP(6)
            AND IS_USED_LOCK(CONCAT('tumbler-listener-', client)) IS NOT NULL;
    END""",
    # After that commit: the listener of each client that watches the name's state rung.
    f"""CREATE PROCEDURE IF NOT EXISTS {{p}}ring_watchers(IN lock_name {_NAME})
    SQL SECURITY INVOKER
    BEGIN
        DECLARE done BOOLEAN DEFAULT FALSE;
        DECLARE watcher BIGINT UNSIGNED;
        DECLARE watchers CURSOR FOR
            SELECT client FROM {{p}}watched
            WHERE name = lock_name AND expires_at > UTC_TIMESTAMP(6);
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET done = TRUE;
        OPEN watchers;
        ring: LOOP
            FETCH watchers INTO watcher;
            IF done THEN LEAVE ring; END IF;
            CALL {{p}}ring(watcher);
        END LOOP;
        CLOSE watchers;
    END""",
    # The commit of a decision made in the client that changed the name's entries (a grant,
    # a new waiter), its state watchers told.
    f"""CREATE PROCEDURE IF NOT EXISTS {{p}}commit_change(IN lock_name {_NAME})
    SQL SECURITY INVOKER
    BEGIN
        DECLARE watching BOOLEAN DEFAULT FALSE;
        {_TELL_WATCHERS}
        COMMIT;
        {_RING_WATCHERS}
    END""",
    # Upkeep: up to "most" expired entries, eviction notes and watchers' rows of any names
    # deleted, oldest first, and as many wake-ups for clients that no longer listen (a
    # client deletes its own as it stops listening: these are what a release left for it in
    # that moment, or for a client that died). It takes only rows no other transaction has
    # locked (SKIP LOCKED), and deletes each by its primary key: it never waits for a
    # transaction on a name, so none can wait for it in turn (a deadlock); what it skips,
    # the name's own next grant deletes.
    f"""CREATE PROCEDURE IF NOT EXISTS {{p}}sweep(IN most INT)
    SQL SECURITY INVOKER
    BEGIN
        DECLARE done BOOLEAN DEFAULT FALSE;
        DECLARE expired_seq BIGINT UNSIGNED;
        DECLARE noted_name {_NAME};
        DECLARE noted_owner {_OWNER};
        DECLARE unheard_seq BIGINT UNSIGNED;
        DECLARE unwatched_name {_NAME};
        DECLARE unwatched_client BIGINT UNSIGNED;
        DECLARE expired_entries CURSOR FOR
            SELECT seq FROM {{p}}entries
            WHERE expires_at <= UTC_TIMESTAMP(6) OR expires_at > {_FAR}
            ORDER BY expires_at LIMIT most FOR UPDATE SKIP LOCKED;
        DECLARE expired_notes CURSOR FOR
            SELECT name, owner FROM {{p}}evictions WHERE expires_at <= UTC_TIMESTAMP(6)
            ORDER BY expires_at LIMIT most FOR UPDATE SKIP LOCKED;
        DECLARE unwatched CURSOR FOR
            SELECT name, client FROM {{p}}watched WHERE expires_at <= UTC_TIMESTAMP(6)
            ORDER BY expires_at LIMIT most FOR UPDATE SKIP LOCKED;
        DECLARE unheard CURSOR FOR
            SELECT seq FROM {{p}}wakeups
            WHERE IS_USED_LOCK(CONCAT('tumbler-listener-', client)) IS NULL
            ORDER BY seq LIMIT most FOR UPDATE SKIP LOCKED;
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET done = TRUE;
        DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        START TRANSACTION;
        OPEN expired_entries;
        entries: LOOP
            FETCH expired_entries INTO expired_seq;
            IF done THEN LEAVE entries; END IF;
            DELETE FROM {{p}}entries WHERE seq = expired_seq;
        END LOOP;
        CLOSE expired_entries;
        SET done = FALSE;
        OPEN expired_notes;
        notes: LOOP
            FETCH expired_notes INTO noted_name, noted_owner;
            IF done THEN LEAVE notes; END IF;
            DELETE FROM {{p}}evictions WHERE name = noted_name AND owner = noted_owner;
        END LOOP;
        CLOSE expired_notes;
        SET done = FALSE;
        OPEN unwatched;
        watchers: LOOP
            FETCH unwatched INTO unwatched_name, unwatched_client;
            IF done THEN LEAVE watchers; END IF;
            DELETE FROM {{p}}watched WHERE name = unwatched_name AND client = unwatched_client;
        END LOOP;
        CLOSE unwatched;
        SET done = FALSE;
        OPEN unheard;
        wakeups: LOOP
            FETCH unheard INTO unheard_seq;
            IF done THEN LEAVE wakeups; END IF;
            DELETE FROM {{p}}wakeups WHERE seq = unheard_seq;
        END LOOP;
        CLOSE unheard;
        COMMIT;
    END""",
    # What ``inspect`` reads: the live entries of one name (of every name if NULL), with the
    # seconds left on each, NULL for one tumbler cannot use (_FAR, _UNUSABLE). It runs with
    # its definer's rights (who made the tables), so a user that may only read gets EXECUTE
    # on it and nothing on the tables: SELECT on a table lets a user lock its rows (FOR
    # UPDATE and LOCK IN SHARE MODE need no more on MariaDB, and any read in a SERIALIZABLE
    # transaction locks what it reads) and hold every decision on a name up for as long as
    # its transaction stays open. It reads in a transaction of its own at READ COMMITTED,
    # which locks nothing, and ends it: the caller's transaction is committed first (the
    # isolation level cannot change inside one), so no caller's isolation level or open
    # transaction makes the read lock rows. The last object made: its comment names the
    # version of every object (``VERSION``).
    f"""CREATE PROCEDURE IF NOT EXISTS {{p}}states(IN lock_name {_NAME})
    SQL SECURITY DEFINER COMMENT '{{version}}'
    BEGIN
        COMMIT;
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        START TRANSACTION READ ONLY;
        IF lock_name IS NULL THEN
            SELECT {_STATE_COLUMNS} FROM {{p}}entries
                WHERE expires_at > UTC_TIMESTAMP(6) ORDER BY name, seq;
        ELSE
            SELECT {_STATE_COLUMNS} FROM {{p}}entries FORCE INDEX (name_expiry)
                WHERE name = lock_name AND expires_at > UTC_TIMESTAMP(6) ORDER BY seq;
        END IF;
        COMMIT;
    END""",
)
#: what the comment of the last object made says once this version made the tables and
#: procedures: a client that finds another makes its procedures again (and adds the indexes
#: its tables lack)
VERSION = "tumbler " + hashlib.sha1("\0".join(_CREATE).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Statements:
    """The statements of one table prefix, with the prefix filled in once."""

    prefix: str
    create: tuple[str, ...]
    text: dict[str, str]

    @classmethod
    def of(cls, prefix: str) -> Statements:
        return cls(
            prefix=prefix,
            create=tuple(
                text.replace("{p}", prefix).replace("{version}", VERSION) for text in _CREATE
            ),
            text={key: text.replace("{p}", prefix) for key, text in _STATEMENTS.items()},
        )

    def __getitem__(self, key: str) -> str:
        return self.text[key]


_STATEMENTS = {
    "grant": "CALL {p}grant(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
    "release": "CALL {p}release(%s, %s)",
    "force_release": "CALL {p}force_release(%s, %s, %s)",
    # -- state watchers -----------------------------------------------------------------------
    "watch": "CALL {p}watch(%s, %s, %s)",
    # a client's rows, deleted as its listener stops (a client that dies leaves them to run
    # out and the sweep)
    "unwatch": "DELETE FROM {p}watched WHERE client = %s",
    # the end of a decision in the client that changed the name's entries, instead of "commit"
    "commit_change": "CALL {p}commit_change(%s)",
    # -- the listener: one connection per client, holding the client's listener lock --------
    "listen": "SELECT GET_LOCK(CONCAT('tumbler-listener-', %s), 0)",
    # Taken by a connection that writes a waiter's entry before the client listens (which
    # names the client's key all the same): till the listener holds its lock, this one says
    # the client lives. 0 when another connection of the client holds it already.
    "claim": "SELECT GET_LOCK(CONCAT('tumbler-waiter-', %s), 0)",
    # the client's doorbell, held by a connection of its own that does nothing else
    "doorbell": "SELECT GET_LOCK(CONCAT('tumbler-doorbell-', %s), 0)",
    # Waits up to the given seconds unless a wake-up for the client is there already (then
    # 2): for the doorbell, which its holder keeps, so the wait ends by its timeout (0), a
    # ring (NULL: KILL QUERY ends a GET_LOCK's wait), or the holder's end (1: the listener
    # took the doorbell). One statement, so that no wake-up is lost: a ring that comes while
    # it runs interrupts it, and one that came before it started left its row, which it
    # sees. Not SLEEP: a KILL QUERY that meets a thread entering SLEEP() can stall both for
    # seconds on MariaDB (SLEEP waits on one mutex all sleepers share), a named lock's wait
    # is the thread's own.
    # Wake-ups the listener has delivered are deleted in batches, not one by one (each
    # deletion a commit that waits for the disk): until then the wait and the read pass over
    # them. "seqs" is a placeholder for each delivered seq (or the seq 0, which none has).
    "sleep": "SELECT IF(EXISTS (SELECT 1 FROM {p}wakeups WHERE client = %s "
    "AND seq NOT IN ({seqs})), 2, GET_LOCK(CONCAT('tumbler-doorbell-', %s), %s))",
    "wakeups": "SELECT seq, message FROM {p}wakeups WHERE client = %s "
    "AND seq NOT IN ({seqs}) ORDER BY seq",
    # the ones delivered, by their seq (one committed meanwhile with a lower seq is kept)
    "read_wakeups": "DELETE FROM {p}wakeups WHERE client = %s AND seq IN ({seqs})",
    "forget_wakeups": "DELETE FROM {p}wakeups WHERE client = %s",
    "unlisten": "SELECT RELEASE_LOCK(CONCAT('tumbler-listener-', %s))",
    # A grant a wake-up says was handed to this owner, taken up: the lease it asked for, from
    # now, and its lock-delay (which a grant handed over keeps from its take-up on), if the
    # owner's entry (by its key) is a grant with that token and a live lease (one row
    # changed); none otherwise. The lease the hand-off gave ends with the waiter's liveness
    # ({p}hand_off).
    "take_up": "UPDATE {p}entries SET expires_at = "
    + _LEASE_END.format(seconds="(%(ttl)s + %(lock_delay)s)")
    + ", client = NULL, lock_delay = %(lock_delay)s WHERE name = %(name)s "
    f"AND owner = %(owner)s AND token = %(token)s AND {_ROW_LEASE_END} > UTC_TIMESTAMP(6)",
    # -- a decision by the rule in the client (after "grant" came back undecided) -----------
    "begin": "START TRANSACTION",
    "commit": "COMMIT",
    "lock_name": "INSERT INTO {p}names (name) VALUES (%s) ON DUPLICATE KEY UPDATE name = name",
    # The part of a name's live line the grant rule looks at for one request (``plan`` gives
    # the same answer on it as on the whole line): every grant; the owner's own entry; for a
    # fair request, the first fair waiters ahead of it ("count": as many as the request's
    # permits, or one: more change no answer) and the first fair exclusive one ahead (any
    # keeps a fair request waiting); for a shared one, an entry of another permit count (any
    # refuses it). Each found by an index, whatever the length of the line; "before": the
    # owner's place in line.
    "line": "SELECT " + _LINE_COLUMNS + " FROM {p}entries FORCE INDEX (line) "
    "WHERE name = %(name)s AND token IS NOT NULL AND expires_at > UTC_TIMESTAMP(6) "
    "UNION SELECT " + _LINE_COLUMNS + " FROM {p}entries "
    "WHERE name = %(name)s AND owner = %(owner)s AND expires_at > UTC_TIMESTAMP(6) "
    "UNION (SELECT " + _LINE_COLUMNS + " FROM {p}entries FORCE INDEX (line) "
    "WHERE %(fair)s AND name = %(name)s AND token IS NULL AND fair AND seq < %(before)s "
    "AND expires_at > UTC_TIMESTAMP(6) ORDER BY seq LIMIT %(count)s) "
    "UNION (SELECT " + _LINE_COLUMNS + " FROM {p}entries FORCE INDEX (fair_writers) "
    "WHERE %(fair)s AND name = %(name)s AND token IS NULL AND fair = TRUE AND shared = FALSE "
    "AND seq < %(before)s AND expires_at > UTC_TIMESTAMP(6) ORDER BY seq LIMIT 1) "
    "UNION (SELECT " + _LINE_COLUMNS + " FROM {p}entries FORCE INDEX (limits) "
    "WHERE %(shared)s AND name = %(name)s AND shared = TRUE "
    "AND (lim < %(lim)s OR lim > %(lim)s) "
    "AND owner <> %(owner)s AND expires_at > UTC_TIMESTAMP(6) LIMIT 1) ORDER BY seq",
    "place": "SELECT seq FROM {p}entries WHERE name = %s AND owner = %s",
    "drop_expired": "CALL {p}drop_expired(%s)",
    # the live waiters of a name, up to a cap (the expired ones deleted before, in the same
    # transaction): counted by the index of the line alone
    "waiting": "SELECT COUNT(*) FROM (SELECT 1 FROM {p}entries FORCE INDEX (line) "
    "WHERE name = %s AND token IS NULL LIMIT %s) AS line",
    "new_token": "INSERT INTO {p}tokens () VALUES ()",
    "drop_token": "DELETE FROM {p}tokens WHERE token = LAST_INSERT_ID()",
    # a grant's row outlives its lease by its lock-delay (a waiter's is 0)
    "add": "INSERT INTO {p}entries (name, owner, shared, lim, fair, token, expires_at, holder, "
    "client, lease, stamp, written_at, lock_delay) VALUES (%(name)s, %(owner)s, %(shared)s, "
    "%(lim)s, %(fair)s, %(token)s, "
    + _LEASE_END.format(seconds="(%(ttl)s + %(lock_delay)s)")
    + ", %(holder)s, %(client)s, %(lease)s, %(stamp)s, UTC_TIMESTAMP(6), %(lock_delay)s)",
    "grant_waiter": "UPDATE {p}entries SET token = %(token)s, expires_at = "
    + _LEASE_END.format(seconds="(%(ttl)s + %(lock_delay)s)")
    + ", lock_delay = %(lock_delay)s WHERE seq = %(seq)s",
    "refresh_waiter": "UPDATE {p}entries SET expires_at = "
    + _LEASE_END.format(seconds="%(ttl)s")
    + ", client = %(client)s, lease = %(lease)s, stamp = %(stamp)s, "
    "written_at = UTC_TIMESTAMP(6) WHERE seq = %(seq)s",
    # what a release that handed nothing over needs to find the waiters it lets through
    # (kit.to_wake): the name's live grants and the head of its line, "count" waiters from
    # the one after "after" (a seq) on, each part found by an index
    "wake_line": "(SELECT owner, seq, shared, lim, fair, token, client "
    "FROM {p}entries FORCE INDEX (line) WHERE %(grants)s AND name = %(name)s "
    "AND token IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)) "
    "UNION ALL (SELECT owner, seq, shared, lim, fair, token, client "
    "FROM {p}entries FORCE INDEX (line) WHERE name = %(name)s AND token IS NULL "
    "AND seq > %(after)s AND expires_at > UTC_TIMESTAMP(6) ORDER BY seq LIMIT %(count)s) "
    "ORDER BY seq",
    # only for a client that listens (as {p}hand_off): one that closed reads no more
    "wake": "INSERT INTO {p}wakeups (client, message) SELECT %s, %s FROM DUAL "
    "WHERE IS_USED_LOCK(CONCAT('tumbler-listener-', %s)) IS NOT NULL",
    "ring": "CALL {p}ring(%s)",
    # -- leases -------------------------------------------------------------------------------
    # "the lease ends after UTC_TIMESTAMP(6)" is what keeps an expired lease dead, and a
    # lapsed grant lapsed; the row's end moves with the lease, its lock-delay after it
    "renew": "UPDATE {p}entries SET expires_at = "
    + _LEASE_END.format(seconds=f"(%s + {_DELAY})")
    + " WHERE name = %s AND owner = %s AND token IS NOT NULL "
    f"AND {_ROW_LEASE_END} > UTC_TIMESTAMP(6)",
    # Many leases in one statement, all of one ttl: "pairs" is a "(%s, %s)" per (name,
    # owner), found by the name's unique key. Which were renewed, when not all were: the
    # live grants among them after the renewal (one it did not renew had run out, and no
    # lease comes back to life)
    "renew_many": "UPDATE {p}entries SET expires_at = "
    + _LEASE_END.format(seconds=f"(%s + {_DELAY})")
    + " WHERE (name, owner) IN ({pairs}) AND token IS NOT NULL "
    f"AND {_ROW_LEASE_END} > UTC_TIMESTAMP(6)",
    "renewed": "SELECT name, owner FROM {p}entries WHERE (name, owner) IN ({pairs}) "
    f"AND token IS NOT NULL AND {_ROW_LEASE_END} > UTC_TIMESTAMP(6)",
    # -- operators ----------------------------------------------------------------------------
    "states": "CALL {p}states(%s)",
    "evicted": "SELECT note FROM {p}evictions WHERE name = %s AND owner = %s "
    "AND expires_at > UTC_TIMESTAMP(6)",
    # -- upkeep -------------------------------------------------------------------------------
    "sweep": "CALL {p}sweep(%s)",
    # Galera (MariaDB, Percona XtraDB Cluster): no rows where the variable does not exist
    "cluster": "SHOW GLOBAL VARIABLES LIKE 'wsrep_on'",
    # clients racing to make the tables take turns, each only trying (a name of 64
    # characters at most)
    "schema_lock": "SELECT GET_LOCK(LEFT(CONCAT('tumbler-schema-', MD5(CONCAT(DATABASE(), "
    "'.', %s))), 64), 0)",
    "schema_unlock": "SELECT RELEASE_LOCK(LEFT(CONCAT('tumbler-schema-', MD5(CONCAT(DATABASE(), "
    "'.', %s))), 64))",
    # the version the last object made names (see VERSION), '' if it is not there
    "made": "SELECT COALESCE(MAX(ROUTINE_COMMENT), '') FROM information_schema.ROUTINES "
    "WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = %s",
    # the entries' indexes, by name
    "indexes": "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS "
    "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
    "add_index": "ALTER TABLE {p}entries ADD KEY {key} {columns}",
    # the column an index of an earlier version's table may need first
    "columns": "SELECT COLUMN_NAME FROM information_schema.COLUMNS "
    "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
    "add_unusable": f"ALTER TABLE {{p}}entries ADD COLUMN {_UNUSABLE}",
    "add_lock_delay": f"ALTER TABLE {{p}}entries ADD COLUMN {_LOCK_DELAY}",
    "drop_procedure": "DROP PROCEDURE IF EXISTS {p}{procedure}",
}
