"""The Redis backend's keys and Lua scripts, shared by its two flavours.

Every key of one lock carries the lock name as its hash tag (``tumbler:{orders:42}:e``), so a
lock lives in one hash slot and each script runs on one node, also in Redis Cluster. Keys:

``<prefix>:{<name>}:e``
    a hash: owner hash -> entry ``seq|shared|limit|fair|token|expires_ms|client|holder`` (token
    empty for a waiter): every grant and waiter of the lock. A grant made with a lock-delay
    (``GrantRequest.lock_delay``) has it in milliseconds, marked by a ``+``, before its client:
    ``seq|shared|limit|fair|token|expires_ms|+delay_ms|client|holder``; every other entry is
    written as before, so an entry without the field (as tumbler wrote them before lock-delays)
    has no delay. The mark cannot be taken for a client (a hex id, or empty), and a tumbler
    that knows no lock-delay still reads such an entry as the grant it is, until its lease's
    end (with ``+delay_ms|client`` in its holder text). Waiters' entries never carry one: a
    waiter's delay reaches its grant with its request, or with its hand-off terms (``g``).
    A grant whose lease ran out stays, *lapsed*, until ``expires_ms + delay_ms``: every
    decision counts it as the grant it was (a lapsed grant's own owner is refused too, and
    its request writes nothing), its renewal fails, its owner's release leaves it (returns 0),
    ``INSPECT`` returns it, and only a force release removes it early (without counting it).
``<prefix>:{<name>}:t``, ``:h``, ``:w``, ``:wf``, ``:wx``, ``:ws``
    sorted sets of owner hashes that index the entries, so that no script reads the whole line:
    ``t`` every entry by the time it stops counting (its lease's end, and for a grant with a
    lock-delay that much later), ``h`` the grants (lapsed ones too) by token, and the waiters in
    arrival order (by ``seq``): ``w`` all of them, ``wf`` the fair ones, ``wx`` the fair
    exclusive ones, ``ws`` the shared ones. A grant looks at the holders and at the head of
    the line (or counts the fair waiters ahead of it), in O(holders + log waiters) whatever
    the line's length; a release wakes from the head of the line and stops as soon as nobody
    behind can go (and after ``WAKE_SCAN`` waiters in any case: the others re-check by
    themselves). Expired entries are dropped through ``t`` (a lapsed grant only once its
    delay too has passed). Every key of the lock expires with its longest-lived entry (``t``'s
    last: a lapsed grant's delay included), so the entries of holders that all crashed vanish
    by themselves, and a lock left with no entry has its keys deleted.
``<prefix>:{<name>}:n``
    the name's sequence: fencing tokens and arrival numbers come from it. Each value is
    ``max(previous + 1, server time in microseconds)``, and the key expires a day after the
    name's last grant: a name used once leaves nothing behind for long, and a token given after
    the key expired still exceeds every earlier one unless the server's clock stepped back by
    more than the time since that name's last grant.
``<prefix>:{<name>}:g``
    a hash: owner hash -> ``ttl_ms|stamp|written_us|1``, the terms on which a waiter takes the
    lock straight from a release (*hand-off*): the lease it asked for, the client's clock
    reading sent with the request that last wrote its entry, and the server's time of that
    write; the ``1`` says that the waiter renews the grant it takes (terms without it, left by
    a tumbler before provisional grants, get the whole lease). A waiter that asks for a
    lock-delay adds it (``ttl_ms|stamp|written_us|1|delay_ms``), and the grant handed over
    carries it; a tumbler that knows no lock-delay does not read such terms, and only wakes
    that waiter (whose own try then grants it, delay and all). Written for a waiter whose
    client listens to its channel and whose hold will be renewed; gone with its entry.
``<prefix>:{<name>}:evicted``
    a hash: owner hash -> ``keep_until_ms|note``, the note an operator's force release left
    for each holder it evicted (who, where, when, why: written by the lock logic), so that
    the holder's next renewal or release can tell it from an expiry. A note is kept until its
    grant's lease would have run out plus ``EVICTED_GRACE_MS``; the key expires with its
    longest-kept note, and the force releases of the name drop the notes whose time passed,
    so notes never pile up. Never read by a grant or release: it costs the line nothing.
``<prefix>:{<name>}:watched``
    a string that lives while a client watches the lock's state (``locks.watch``, set again by
    the watcher before it runs out); while it lives, every grant, release and force release
    that changes the lock's entries publishes on the channel of the same name, which the
    watchers' clients subscribe to. Without it nothing is published.
``<prefix>:c:<client>``
    each client's pub/sub channel (not a key). A release publishes ``<owner hash> <name>`` to
    the channel of each client whose waiter it lets through: only that client wakes, and in it
    only that waiter; the other processes waiting on the lock hear nothing. A waiter entry
    names its client's channel once the client has subscribed to it (before, ``client`` is
    empty: the waiter tries again by itself as soon as it has subscribed). On a single server,
    a wake-up that reached no subscriber tells the release that the waiter's client is gone
    (its process died and the server closed its connections): the release removes that
    waiter and lets the next one through at once, instead of leaving the line to wait for the
    dead waiter's entry to run out. There, a waiter with hand-off terms is not merely woken
    but granted by the release itself: the release publishes
    ``=<token>,<stamp>,<elapsed_us>,<lease_ms>:<owner hash> <name>`` and, if the waiter's
    client heard it, makes the waiter's entry a grant with that token and that lease. So a
    hand-off costs one push, not a push and a grant's round trip. The waiter's lease began
    at the release; its client counts it from ``stamp + elapsed_us`` on its own clock (its
    request was sent at ``stamp``, reached the server no earlier, and the release came
    ``elapsed_us`` of server time after that), which is never later than the release.

    A client that heard the wake-up may still be dead: the kernel closes a killed process's
    sockets only after tearing its memory down, and the server sees the close later still
    (8 and 18 ms measured), so a waiter killed just before a release still listens. A grant
    handed to it would hold the line up for a whole lease. So the grant a release hands over
    is *provisional*: its lease is the one the waiter asked for cut to ``backup_ms`` (the
    release's argument on a single server: ``common.HAND_OFF_CONFIRM_MS``, a second), and
    the wake-up says so (``lease_ms``). A live waiter's first renewal, due at a third of
    that lease, asks for the whole lease; a waiter whose hold will not be renewed leaves no
    terms, and is only woken (its own try grants it the whole lease). A woken fair waiter
    may be just as dead, and holds the fair waiters behind it until its entry runs out: when
    the first waiter not let through is fair, the woken fair waiters' entries are cut to run
    out in ``backup_ms`` (a live one renews its entry when it tries, at once). (A client
    that dies between hearing a hand-off and renewing its grant leaves a grant that runs out
    with its provisional lease, and then stays lapsed for its lock-delay, if it asked for one:
    the release cannot tell that its client never acted on it.)

    The waiter behind learns of it by a *backup* wake-up, ``~<ms>:<owner hash> <name>``: the
    release sends it to the first waiter it does not let through, which tries again ``ms``
    later (and a little more, ``common.BACKUP_SLACK``: its clock is not the server's), and
    takes the lock if the provisional grant or the cut entry ran out meanwhile. A backup that
    reaches nobody where that tells (a single server) tells what a wake-up does: that waiter's
    client is gone, so the release removes it and tells the next waiter it holds back instead
    (else a dead waiter right behind a dying one would hold the line up until its own entry
    ran out, ``waiter_ttl``). On a single server a release sends it, with ``ms = backup_ms``,
    after a provisional grant or a cut only: a waiter behind nothing but woken waiters that
    are not fair is not held up by their entries, and re-checks within a second anyway. A
    backup that comes once its waiter has the lock (the holder let go sooner, and its release
    handed the lock on) wakes nobody: it costs no call. On Redis Cluster PUBLISH counts only
    the subscribers on the node that runs the script, so there nobody is judged by it and no
    release hands over (it would hand a grant to a waiter that died long ago as readily as to
    a live one); instead every release that lets a waiter through sends the backup wake-up:
    after ``backup_ms`` when the waiter held back and a woken one are both fair (the woken
    fair waiters' entries cut as above: a live one renews its entry when it tries again, and
    that is within a re-check even if the wake-up is lost), else after ``retry_ms``.

Malformed data: an entry that does not parse (written by hand, by another program, by a bug; a
lock-delay that is no number of milliseconds up to ``_core.MAX_LOCK_DELAY``'s, or one on a
waiter's entry, does not either) is ignored by every script and dropped by the next grant,
release or force release of its lock; ``INSPECT`` counts them. So is a key of the lock that
holds another type than tumbler keeps there (``call`` deletes it and runs the command again, on
no key; ``INSPECT`` counts it as one), and a sequence that is no number of at most 2**53 - 1
counts as none (the next token comes from the server's clock): no arithmetic leaves the integers
a double holds. A lock holding nothing but such entries has its keys deleted, so they never
outlive the lock. A well-formed entry that no index knows, or whose lease was extended without
its index (as tumbler before the indexes wrote them, so both can run side by side during an
upgrade), is indexed anew when found: the hash is the truth, the indexes are rebuilt from it.

Owners are stored as SHA-1 hashes (``redis.sha1hex``), so a client that can read the keys
cannot release or renew another client's grant. Times are the server's (``TIME``): client
clocks never decide an expiry. Every script returns its own decision; none trusts the client.
A command the ACL refuses inside a script fails the script with ``NOPERM <COMMAND>: ...``,
naming the command; ``PROBE`` lists the commands the user may not run without running any.
"""

from __future__ import annotations

from typing import NamedTuple

from ..._core import MAX_LOCK_DELAY

#: the longest lock-delay an entry carries; a longer one is no entry these scripts wrote
MAX_LOCK_DELAY_MS = round(MAX_LOCK_DELAY * 1000)
#: how long a name's sequence outlives its last grant
SEQUENCE_TTL_MS = 24 * 3600 * 1000
#: the most waiters one release looks at (from the head of the line) to wake those it lets
#: through: the rest re-check within a second anyway, and the server runs nothing else
#: while a script runs
WAKE_SCAN = 64
#: how long a force release's note outlives the lease of the grant it evicted: the holder
#: asks for the note (``EVICTED``) right after the renewal or release that found its grant
#: gone, which reached the server before that lease ran out; this covers that one more call
#: and its round trip, even a slow one (the client's ``socket_timeout`` is 5 s by default)
EVICTED_GRACE_MS = 5000

#: the commands the scripts run, as ACL rules (checked at connect by ``PROBE``)
SCRIPT_COMMANDS = (
    "time",
    "hget",
    "hset",
    "hdel",
    "hgetall",
    "hlen",
    "get",
    "set",
    "del",
    "pexpireat",
    "pexpiretime",
    "exists",
    "publish",
    "zadd",
    "zrem",
    "zrange",
    "zrangebyscore",
    "zcard",
    "zcount",
    "zscore",
)

# What every script starts with: what the fast paths of GRANT and RELEASE need. Redis runs a
# script's whole chunk on every call, so the rest (``_LINE``) comes after those fast paths:
# a call that returns early does not make its functions.
_BASE = (
    f"local WAKE_SCAN = {WAKE_SCAN}\nlocal SEQUENCE_TTL_MS = {SEQUENCE_TTL_MS}\n"
    f"local MAX_LOCK_DELAY_MS = {MAX_LOCK_DELAY_MS}\n"
    + """
-- whether a key of the lock that holds another type than tumbler writes there goes (see
-- call); INSPECT, which changes nothing, counts it instead
local replace_wrong_types = true

-- redis.call that names the command when the ACL refuses it (Redis's own error does not),
-- and that treats a key of the lock holding another type than tumbler writes there (which
-- tumbler did not write) as an entry that does not parse: it goes, and the command, which
-- changed nothing, runs again on no key
local function call(command, ...)
    local reply = redis.pcall(command, ...)
    if type(reply) == 'table' and reply.err then
        if string.find(reply.err, 'The user executing the script', 1, true) then
            error({err = 'NOPERM ' .. string.upper(command) .. ': ' .. reply.err})
        end
        if replace_wrong_types and string.sub(reply.err, 1, 9) == 'WRONGTYPE' then
            redis.call('DEL', (...))
            return call(command, ...)
        end
        error(reply)
    end
    return reply
end

-- a counter as tumbler stores it (a sequence, a floor), or nil: one that is no decimal
-- number, or one past the integers a double holds exactly (which counting up from the
-- clock in microseconds reaches in the year 2255), was not written by tumbler
local MAX_COUNTER = 9007199254740991
local function counter(value)
    if type(value) ~= 'string' or not string.match(value, '^%d+$') or #value > 16 then
        return nil
    end
    local number = tonumber(value)
    if number > MAX_COUNTER then return nil end
    return number
end

local now = call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
-- the least value the name's sequence takes next (see next_value); a script that is given
-- its own floor sets it before any value is drawn
local sequence_floor = now_us

-- an entry, or nil if the value is not one these scripts wrote (numbers of at most 16
-- digits stay exact in Lua's doubles and in sorted-set scores). A grant's lock-delay comes
-- before its client, marked '+' (no client starts so); without one, its delay is 0.
local function decode(owner, value)
    if type(value) ~= 'string' then return nil end
    local seq, shared, limit, fair, token, expires, client, holder =
        string.match(value, '^(%d+)|([01])|(%d+)|([01])|(%d*)|(%d+)|([^|]*)|(.*)$')
    if not seq or #seq > 16 or #limit > 9 or #token > 16 or #expires > 16 then return nil end
    local delay = 0
    if string.sub(client, 1, 1) == '+' then
        delay = string.match(client, '^%+(%d+)$')
        if not delay or #delay > 10 or token == '' then return nil end
        delay = tonumber(delay)
        if delay > MAX_LOCK_DELAY_MS then return nil end
        client, holder = string.match(holder, '^([^|]*)|(.*)$')
        if not client then return nil end
    end
    return {owner = owner, seq = tonumber(seq), shared = shared == '1', limit = tonumber(limit),
            fair = fair == '1', token = tonumber(token), expires = tonumber(expires),
            delay = delay, client = client, holder = holder}
end

local function encode(e)
    local token, client = '', e.client
    if e.token then
        token = string.format('%d', e.token)
        if e.delay > 0 then client = string.format('+%d|%s', e.delay, client) end
    end
    return string.format('%d|%d|%d|%d|%s|%d|%s|%s', e.seq, e.shared and 1 or 0, e.limit,
                         e.fair and 1 or 0, token, e.expires, client, e.holder)
end

local function score(n) return string.format('%d', n) end

-- tell the lock's state watchers (``locks.watch``) that its entries changed, on the channel
-- named as their marker key: only while one watches (the key lives), so that no grant or
-- release pays a PUBLISH (on a cluster, a message to every node) for a lock nobody watches
local function tell_watchers(watched)
    if watched and call('EXISTS', watched) == 1 then call('PUBLISH', watched, '') end
end

-- the keys of the lock whose keys start at KEYS[first] (see lock_keys())
local function lock_keys(first)
    return {e = KEYS[first], n = KEYS[first + 1], t = KEYS[first + 2], h = KEYS[first + 3],
            w = KEYS[first + 4], wf = KEYS[first + 5], wx = KEYS[first + 6],
            ws = KEYS[first + 7], g = KEYS[first + 8]}
end

-- the name's next fencing token or arrival number (see the sequence key above)
local function next_value(K)
    -- a sequence tumbler did not write counts as none: the floor (the clock) decides
    local value = math.max((counter(call('GET', K.n)) or 0) + 1, sequence_floor)
    call('SET', K.n, string.format('%d', value), 'PX', SEQUENCE_TTL_MS)
    return value
end
"""
)

# The functions that work on a lock's line.
_LINE = """
local INDEXES = {'t', 'h', 'w', 'wf', 'wx', 'ws'}

-- when an entry stops counting (its score in t): its lease's end, and a grant's lock-delay
-- after that (it is lapsed meanwhile)
local function ends(e)
    if e.token then return e.expires + e.delay end
    return e.expires
end

-- the line indexes that list a waiter of e's kind (an entry's kind never changes)
local function line_indexes(e)
    local found = {'w'}
    if e.fair then found[#found + 1] = 'wf' end
    if e.fair and not e.shared then found[#found + 1] = 'wx' end
    if e.shared then found[#found + 1] = 'ws' end
    return found
end

-- drop owner's entry (e: its decoded value, nil if it does not parse) and the index members
-- that list it: those of its kind (a grant's in t and h, a waiter's in t and its line
-- indexes), every index's for an entry that does not parse. A member that an index of
-- another kind still has (put there by hand) goes when a script meets it there: get,
-- holders and first_after drop such members.
local function remove(K, owner, e)
    call('HDEL', K.e, owner)
    if not e then
        for _, index in ipairs(INDEXES) do call('ZREM', K[index], owner) end
        call('HDEL', K.g, owner)
        return
    end
    call('ZREM', K.t, owner)
    if e.token then
        call('ZREM', K.h, owner)
    else
        for _, index in ipairs(line_indexes(e)) do call('ZREM', K[index], owner) end
        call('HDEL', K.g, owner)
    end
end

-- store e and index it; a grant that was waiting (left_line) leaves its line indexes and
-- its hand-off terms
local function put(K, e, left_line)
    call('HSET', K.e, e.owner, encode(e))
    call('ZADD', K.t, score(ends(e)), e.owner)
    if e.token then
        call('ZADD', K.h, score(e.token), e.owner)
        if left_line then
            for _, index in ipairs(line_indexes(e)) do call('ZREM', K[index], e.owner) end
            call('HDEL', K.g, e.owner)
        end
    else
        call('ZADD', K.w, score(e.seq), e.owner)
        if e.fair then call('ZADD', K.wf, score(e.seq), e.owner) end
        if e.fair and not e.shared then call('ZADD', K.wx, score(e.seq), e.owner) end
        if e.shared then call('ZADD', K.ws, score(e.seq), e.owner) end
    end
end

-- owner's live entry or lapsed grant (e.lapsed), or nil; one that is malformed or expired is
-- dropped, one that no index knows (written by an older tumbler, which kept no indexes, or
-- by a free lock's grant) is indexed
local function get(K, owner)
    local value = call('HGET', K.e, owner)
    local indexed = call('ZSCORE', K.t, owner)
    if not value and not indexed then return nil end  -- nothing to drop: the usual case
    local e = decode(owner, value)
    if e and ends(e) > now_ms then
        e.lapsed = e.expires <= now_ms
        if not indexed then put(K, e, true) end
        return e
    end
    remove(K, owner, e)
    return nil
end

-- drop the expired entries (each once: amortised, whatever the line's length); an entry
-- whose lease was extended without its index (by an older tumbler), or a lapsed grant
-- indexed by its lease alone (by hand), is timed anew instead
local function purge(K)
    local removed = false
    for _, owner in ipairs(call('ZRANGEBYSCORE', K.t, '-inf', score(now_ms))) do
        local e = decode(owner, call('HGET', K.e, owner))
        if e and ends(e) > now_ms then
            call('ZADD', K.t, score(ends(e)), owner)
        else
            remove(K, owner, e)
            removed = true
        end
    end
    return removed
end

-- every field of the hash: drop the malformed and expired ones, index the live ones (and
-- lapsed grants) no index knows; returns how many were malformed
local function sweep_all(K)
    local raw, malformed = call('HGETALL', K.e), 0
    for i = 1, #raw, 2 do
        local e = decode(raw[i], raw[i + 1])
        if not e then malformed = malformed + 1 end
        if not e or ends(e) <= now_ms then
            remove(K, raw[i], e)
        elseif not call('ZSCORE', K.t, raw[i]) then
            put(K, e, true)
        end
    end
    return malformed
end

-- sweep_all, when the hash has fields that no index knows (it has more than the index)
local function sweep(K)
    if call('HLEN', K.e) > call('ZCARD', K.t) then sweep_all(K) end
end

-- the grants, lapsed ones included (each counts as the grant it was), oldest token first
local function holders(K)
    local result = {}
    for _, owner in ipairs(call('ZRANGE', K.h, 0, -1)) do
        local e = get(K, owner)
        if e and e.token then
            result[#result + 1] = e
        else
            call('ZREM', K.h, owner)  -- gone, or a waiter listed as a grant
        end
    end
    return result
end

-- the first live entry of a line index after score `after` (nil: from the start), or nil
local function first_after(K, index, after)
    local low = '-inf'
    if after then low = '(' .. score(after) end
    while true do
        local found = call('ZRANGEBYSCORE', K[index], low, '+inf', 'LIMIT', 0, 1)
        if #found == 0 then return nil end
        local e = get(K, found[1])
        if e and not e.token then return e end
        call('ZREM', K[index], found[1])  -- gone, or a grant still listed in line
    end
end

-- every key of the lock expires with its longest-lived entry; with none left, they go
local function set_expiry(K)
    local last = call('ZRANGE', K.t, -1, -1, 'WITHSCORES')
    if #last == 0 then
        call('DEL', K.e, K.t, K.h, K.w, K.wf, K.wx, K.ws, K.g)
        return
    end
    for _, key in ipairs({K.e, K.t, K.h, K.w, K.wf, K.wx, K.ws, K.g}) do
        call('PEXPIREAT', key, last[2])
    end
end

-- tell a waiter's client that the waiter may go now (or, with prefix '~<ms>:', that it try
-- again ms from now: a backup wake-up); false if the client is known to be gone (judge:
-- PUBLISH reached nobody on a server that sees every subscriber, see above)
local function wake(e, channel_prefix, name, judge, prefix)
    if e.client == '' then
        return true  -- not subscribed yet: it tries again by itself once it is
    end
    local message = (prefix or '') .. e.owner .. ' ' .. name
    local heard = call('PUBLISH', channel_prefix .. e.client, message)
    return heard > 0 or not judge
end

-- grant waiter e at once and tell its client so, on the terms it left (see the ``g`` key);
-- nil if it left none (it is woken instead), false if its client is gone, else true and
-- whether the grant is provisional: one that runs out confirm_ms from now unless its waiter
-- renews it (terms that say the waiter renews its hold, and confirm_ms > 0). Only where a
-- wake-up that reaches nobody tells that the client is gone (judge): elsewhere a grant handed
-- to a dead client would hold the lock for a whole lease. Even there a client that is dying
-- still listens for a few milliseconds, hence the provisional grant.
local function hand_off(K, e, channel_prefix, name, confirm_ms)
    local terms = call('HGET', K.g, e.owner)
    if not terms then return nil end
    local ttl_ms, stamp, written_us = string.match(terms, '^(%d+)|(%d+)|(%d+)|1$')
    local delay_ms = '0'
    if not ttl_ms then
        -- a waiter that asked for a lock-delay: its grant carries it
        ttl_ms, stamp, written_us, delay_ms = string.match(terms, '^(%d+)|(%d+)|(%d+)|1|(%d+)$')
    end
    local provisional = ttl_ms ~= nil and confirm_ms > 0
    if not ttl_ms then
        -- left by a tumbler before provisional grants, whose waiter may never renew
        ttl_ms, stamp, written_us = string.match(terms, '^(%d+)|(%d+)|(%d+)$')
        delay_ms = '0'
    end
    if not ttl_ms or #ttl_ms > 12 or #stamp > 16 or #written_us > 16 or #delay_ms > 10
            or tonumber(delay_ms) > MAX_LOCK_DELAY_MS then
        return nil
    end
    local lease_ms = tonumber(ttl_ms)
    local token = next_value(K)
    local elapsed_us = math.max(0, now_us - tonumber(written_us))
    local message
    if provisional then
        lease_ms = math.min(lease_ms, confirm_ms)
        message = string.format('=%d,%s,%d,%d:%s %s', token, stamp, elapsed_us, lease_ms,
                                e.owner, name)
    else
        message = string.format('=%d,%s,%d:%s %s', token, stamp, elapsed_us, e.owner, name)
    end
    if call('PUBLISH', channel_prefix .. e.client, message) == 0 then return false end
    e.token = token
    e.expires = now_ms + lease_ms
    e.delay = tonumber(delay_ms)
    put(K, e, true)
    return true, provisional
end

-- send the backup wake-up to waiter e, the first held back; one that reaches nobody where
-- that tells the client is gone (judge) removes e, as a wake-up would, and goes to the next
-- waiter held back (not among the woken) instead: else a dead waiter right behind a dying
-- one would hold the line until its own entry ran out, not the dying one's cut lease
local function tell_backup(K, channel_prefix, name, judge, e, woken, delay_ms)
    local skipped = {}
    for _, w in ipairs(woken) do skipped[w.owner] = true end
    local prefix = '~' .. delay_ms .. ':'
    for _ = 1, WAKE_SCAN do
        if not e or wake(e, channel_prefix, name, judge, prefix) then return end
        remove(K, e.owner, e)
        repeat e = first_after(K, 'w', e.seq) until not e or not skipped[e.owner]
    end
end

-- wake the waiters that can go now, in arrival order (just them: no herd). A waiter whose
-- client is gone is removed, and the next one considered in its place, in the same pass.
-- With backup_ms, the first waiter not let through is told to try again later in case a
-- waiter let through is dead (above): after backup_ms when a grant was handed over
-- provisionally (it runs out by then unless renewed) or, when it is fair, the woken include
-- a fair waiter, whose entry is cut to run out by then; else after retry_ms (none if 0).
local function wake_admissible(K, channel_prefix, name, judge, backup_ms, retry_ms)
    local ahead, exclusive_ahead, limit = 0, false, nil
    for _, e in ipairs(holders(K)) do
        ahead = ahead + 1
        if e.shared then limit = e.limit else exclusive_ahead = true end
    end
    local woken, backup, after, examined, fair_held = {}, nil, nil, 0, false
    local provisional = false
    while examined < WAKE_SCAN do
        local e = first_after(K, 'w', after)
        if not e then break end
        after, examined = e.seq, examined + 1
        if e.shared then limit = e.limit end
        local admitted
        if fair_held and e.fair then
            admitted = false
        elseif e.shared then
            admitted = not exclusive_ahead and (e.limit == 0 or ahead < e.limit)
        else
            admitted = ahead == 0
        end
        if admitted then
            local through, cut = nil, false
            if judge and e.client ~= '' then
                through, cut = hand_off(K, e, channel_prefix, name, backup_ms)
            end
            if through == nil then through = wake(e, channel_prefix, name, judge) end
            if through then
                ahead = ahead + 1
                if not e.shared then exclusive_ahead = true end
                if cut then provisional = true end
                woken[#woken + 1] = e
            else
                remove(K, e.owner, e)
            end
        else
            backup = backup or e
            -- nobody behind can go once an exclusive grant is ahead or the (shared) limit is
            -- reached; a fair waiter that cannot go holds the fair ones behind it, but not the
            -- others, which wait only behind grants (_core.decide)
            if exclusive_ahead or (limit and limit > 0 and ahead >= limit) then break end
            if e.fair then fair_held = true end
        end
    end
    if backup_ms > 0 and backup and #woken > 0 and backup.client ~= '' then
        local delay_ms = retry_ms
        if provisional then delay_ms = backup_ms end
        if backup.fair then
            for _, e in ipairs(woken) do
                -- a waiter woken, not a grant handed over: a grant's lease is its holder's
                if e.fair and not e.token then
                    delay_ms = backup_ms
                    if e.expires > now_ms + backup_ms then
                        e.expires = now_ms + backup_ms
                        put(K, e)
                    end
                end
            end
        end
        if delay_ms > 0 then
            tell_backup(K, channel_prefix, name, judge, backup, woken, delay_ms)
        end
    end
end

-- set the lease of owner's live grant to ttl_ms from now; false if it has none (a lapsed
-- grant is not revived)
local function renew_entry(e_key, t_key, h_key, owner, ttl_ms)
    local e = decode(owner, call('HGET', e_key, owner))
    if not e or not e.token or e.expires <= now_ms then return false end
    e.expires = now_ms + ttl_ms
    local until_ms = ends(e)  -- its lock-delay after its lease: the keys must outlive both
    call('HSET', e_key, owner, encode(e))
    call('ZADD', t_key, score(until_ms), owner)
    if call('PEXPIRETIME', e_key) < until_ms then
        -- only the keys that hold grants: the line's hold waiters, whose entries end sooner
        -- (and every grant or release sets them all again)
        for _, key in ipairs({e_key, t_key, h_key}) do call('PEXPIREAT', key, until_ms) end
    end
    return true
end
"""

_COMMON = _BASE + _LINE

#: KEYS: the lock's keys (``Keys.lock_keys``), then its watchers' marker (``Keys.watched``;
#: optional). ARGV: owner, shared (0/1), limit, fair (0/1),
#: ttl_ms, holder, queue (0/1), waiter_ttl_ms, client (whose channel wakes this waiter; empty
#: while the client has not subscribed to it yet), max_waiters, stamp (the client's clock in
#: microseconds when it sent this call: with a client, the waiter takes a hand-off on these
#: terms, and renews the grant it takes, which may be provisional; empty: it is only woken),
#: lock_delay_ms (how long the grant stays lapsed once its lease ran out; empty or 0: none).
#: Returns
#: {1, token} if granted now, {1, token, ms_left} if the owner held it already (its lease
#: began earlier and has ms_left to run), {0} if not (also, writing nothing, to the owner of
#: a lapsed grant: a grant once lost is not revived); an error reply
#: "PERMITS_MISMATCH <limit>" if a shared request's limit differs from the live ones', and
#: "TOO_MANY_WAITERS <max_waiters>" if it would queue behind max_waiters waiters.
#: The decision is tumbler._core.decide(), restated in Lua over the indexes: the entries
#: ahead of a request are the grants (lapsed ones too) and, for a fair request, the fair
#: waiters that came before it.
GRANT = (
    _BASE
    + """
local K = lock_keys(1)
local owner = redis.sha1hex(ARGV[1])
local shared, limit, fair = ARGV[2] == '1', tonumber(ARGV[3]), ARGV[4] == '1'
local ttl_ms, holder, queue = tonumber(ARGV[5]), ARGV[6], ARGV[7] == '1'
local waiter_ttl_ms, client, max_waiters = tonumber(ARGV[8]), ARGV[9], tonumber(ARGV[10])
local stamp = ARGV[11]
local lock_delay_ms = tonumber(ARGV[12]) or 0
if lock_delay_ms ~= 0 then  -- only then: the usual none is the fast path's
    lock_delay_ms = math.max(0, math.min(lock_delay_ms, MAX_LOCK_DELAY_MS))
end
local watched = KEYS[10]

-- The usual case, a lock nobody holds or waits for: its hash, the truth of who holds and
-- waits, has no entry (a lock left with none has its keys deleted), so there is nothing to
-- purge, sweep, look at or unlist, and every request is granted: the entry and its place
-- among the grants (``h``, which every decision reads), with their expiry. Its expiry index
-- ``t`` waits for a script that needs it: any script that finds the lock with more than
-- this entry meets the grant through ``h`` (holders -> get) or the hash (sweep) first, and
-- indexes it there, before it purges by ``t`` or sets the keys' expiry from it; a renewal
-- indexes it too. (An index member that no entry backs, left by hand, is dropped by the
-- script that next meets it, as ever.) The keys outlive the lease by its lock-delay: a grant
-- that lapses stays.
if call('HLEN', K.e) == 0 then
    local token = next_value(K)
    local kept_until = score(now_ms + ttl_ms + lock_delay_ms)
    call('HSET', K.e, owner, encode({seq = token, shared = shared, limit = limit, fair = fair,
                                     token = token, expires = now_ms + ttl_ms,
                                     delay = lock_delay_ms, client = client, holder = holder}))
    call('ZADD', K.h, score(token), owner)
    call('PEXPIREAT', K.e, kept_until)
    call('PEXPIREAT', K.h, kept_until)
    tell_watchers(watched)
    return {1, token}
end
"""
    + _LINE
    + """
local changed = purge(K)
sweep(K)
local mine = get(K, owner)
if mine and mine.token then
    if changed then tell_watchers(watched) end
    -- lost, and kept for its lock-delay: its owner waits, in no line (_core.plan writes
    -- nothing for it), as everyone else does
    if mine.lapsed then return {0} end
    -- granted already (by a release's hand-off, or a try whose reply was lost): the lease
    -- runs from then, not from this request
    return {1, mine.token, mine.expires - now_ms}
end
local granted_ones = holders(K)
if shared then
    -- the live shared entries all have one limit (each was checked against them when it
    -- came), so a grant and the first other shared waiter stand for all of them
    local others = {}
    for _, e in ipairs(granted_ones) do
        if e.shared then others[#others + 1] = e end
    end
    local first = first_after(K, 'ws', nil)
    if first and first.owner == owner then first = first_after(K, 'ws', first.seq) end
    if first then others[#others + 1] = first end
    for _, e in ipairs(others) do
        if e.limit ~= limit then
            if changed then tell_watchers(watched) end
            return redis.error_reply('PERMITS_MISMATCH ' .. e.limit)
        end
    end
end
local ahead, exclusive_ahead = 0, false
for _, e in ipairs(granted_ones) do
    ahead = ahead + 1
    if not e.shared then exclusive_ahead = true end
end
if fair then
    -- the fair waiters that came before this request (all of them if it has no entry yet)
    local below = '+inf'
    if mine then below = '(' .. score(mine.seq) end
    if shared then
        local exclusive = first_after(K, 'wx', nil)
        if exclusive and (not mine or exclusive.seq < mine.seq) then exclusive_ahead = true end
        ahead = ahead + call('ZCOUNT', K.wf, '-inf', below)
    elseif first_after(K, 'wf', nil) and call('ZCOUNT', K.wf, '-inf', below) > 0 then
        ahead = ahead + 1
    end
end
local granted
if shared then
    granted = not exclusive_ahead and (limit == 0 or ahead < limit)
else
    granted = ahead == 0
end

local result = {0}
if granted then
    local token = next_value(K)
    local was_waiting = mine ~= nil  -- (a grant it held returned above)
    if not mine then
        mine = {owner = owner, seq = token, shared = shared, limit = limit, fair = fair,
                client = client, holder = holder}
    end
    mine.token = token
    mine.expires = now_ms + ttl_ms
    mine.delay = lock_delay_ms
    put(K, mine, was_waiting)
    result = {1, token}
    changed = true
elseif mine or queue then
    if not mine then
        if call('ZCARD', K.w) >= max_waiters then
            set_expiry(K)
            if changed then tell_watchers(watched) end
            return redis.error_reply('TOO_MANY_WAITERS ' .. max_waiters)
        end
        mine = {owner = owner, seq = next_value(K), shared = shared, limit = limit,
                fair = fair, client = client, holder = holder}
        changed = true
    end
    mine.client = client  -- subscribed since its last try, or subscribed anew
    mine.expires = now_ms + waiter_ttl_ms
    put(K, mine)
    if client ~= '' and string.match(stamp, '^%d+$') and #stamp <= 16 then
        -- the 1: this waiter renews the grant it takes (see hand_off), which keeps its
        -- lock-delay, if any, after it
        local terms = string.format('%d|%s|%d|1', ttl_ms, stamp, now_us)
        if lock_delay_ms > 0 then terms = terms .. string.format('|%d', lock_delay_ms) end
        call('HSET', K.g, owner, terms)
    else
        call('HDEL', K.g, owner)
    end
end
set_expiry(K)
if changed then tell_watchers(watched) end
return result
"""
)

#: KEYS: the lock's entries, expiries and grants (``e``, ``t``, ``h``). ARGV: owner, ttl_ms.
#: Returns 1 if the owner's live grant now runs ttl_ms from now, 0 if it has no live grant
#: (an expired one is never revived).
RENEW = (
    _COMMON
    + """
if renew_entry(KEYS[1], KEYS[2], KEYS[3], redis.sha1hex(ARGV[1]), tonumber(ARGV[2])) then
    return 1
end
return 0
"""
)

#: KEYS: the entries, expiries and grants keys (``e``, ``t``, ``h``) of each lease to renew,
#: 3 per lease (a lock may come more than once: several grants of one lock). ARGV: owner and
#: ttl_ms of each lease, in the same order (2 per lease). Returns one 1 or 0 per lease, as
#: RENEW would: every lease of a client in one call (on Redis Cluster, all the keys of one
#: call share a hash slot).
RENEW_ALL = (
    _COMMON
    + """
local renewed = {}
for i = 1, #ARGV / 2 do
    local owner = redis.sha1hex(ARGV[2 * i - 1])
    local ok = renew_entry(KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], owner,
                           tonumber(ARGV[2 * i]))
    renewed[i] = ok and 1 or 0
end
return renewed
"""
)

#: KEYS: the lock's keys, then its watchers' marker (optional). ARGV: owner, client channel
#: prefix, lock name, judge (1: a wake-up
#: that reaches nobody means the waiter's client is gone; 0 on Redis Cluster), backup_ms and
#: retry_ms (see above: with judge, backup_ms also cuts the grants handed over; 0 and 0: no
#: backup wake-up, and whole leases handed over). Removes the owner's entry (grant or
#: waiter) and nobody else's; wakes the waiters that can now go, removing those whose client
#: is gone. Returns 1 if a live grant was removed. A lapsed grant stays for its lock-delay:
#: its owner's release changes nothing and returns 0.
RELEASE = (
    _BASE
    + """
local K = lock_keys(1)
local watched = KEYS[10]
local owner = redis.sha1hex(ARGV[1])
local value = call('HGET', K.e, owner)
local e = decode(owner, value)
local released = e and e.token and e.expires > now_ms
if not released and e and e.token and e.expires + e.delay > now_ms then return 0 end
-- The usual case: the owner's entry is the lock's only one, so nobody waits behind it and
-- the lock is left with no entry: its keys go at once (index members that no entry backs
-- with them), with nothing to purge, sweep or wake.
if value and call('HLEN', K.e) == 1 then
    call('DEL', K.e, K.t, K.h, K.w, K.wf, K.wx, K.ws, K.g)
    tell_watchers(watched)
    return released and 1 or 0
end
if not value and not call('ZSCORE', K.t, owner) then return 0 end
"""
    + _LINE
    + """
remove(K, owner, e)
purge(K)
sweep(K)
wake_admissible(K, ARGV[2], ARGV[3], ARGV[4] == '1', tonumber(ARGV[5]), tonumber(ARGV[6]))
set_expiry(K)
tell_watchers(watched)
return released and 1 or 0
"""
)

#: KEYS: the lock's keys, then its evicted notes (``Keys.evicted``), then its watchers'
#: marker (optional). ARGV: client channel
#: prefix, lock name, judge, backup_ms and retry_ms (as for RELEASE), the note, grace_ms.
#: Removes every grant (for operators), lapsed ones too, and every entry it cannot parse,
#: leaves the note for each owner whose live grant it removed until that lease's end plus
#: grace_ms (and drops the notes whose time passed), and wakes the waiters that can now go,
#: removing those whose client is gone; returns how many live grants were removed.
FORCE_RELEASE = (
    _COMMON
    + """
local K = lock_keys(1)
local notes, note, grace_ms = KEYS[10], ARGV[6], tonumber(ARGV[7])
purge(K)
sweep_all(K)
-- the notes of earlier force releases that nobody may ask for any more go; the key lives as
-- long as the longest-kept note left
local keep_all = 0
local raw = call('HGETALL', notes)
for i = 1, #raw, 2 do
    local keep = tonumber(string.match(raw[i + 1], '^(%d+)|') or '0')
    if keep > now_ms then
        keep_all = math.max(keep_all, keep)
    else
        call('HDEL', notes, raw[i])
    end
end
local removed = 0
for _, e in ipairs(holders(K)) do
    remove(K, e.owner, e)
    -- a lapsed grant's holder lost it before: it asks for no note, and held nothing now
    if not e.lapsed then
        removed = removed + 1
        local keep = e.expires + grace_ms
        call('HSET', notes, e.owner, score(keep) .. '|' .. note)
        keep_all = math.max(keep_all, keep)
    end
end
if keep_all > 0 then call('PEXPIREAT', notes, score(keep_all)) end
wake_admissible(K, ARGV[1], ARGV[2], ARGV[3] == '1', tonumber(ARGV[4]), tonumber(ARGV[5]))
set_expiry(K)
tell_watchers(KEYS[11])
return removed
"""
)

#: KEYS: the lock's evicted notes (``Keys.evicted``). ARGV: owner. Returns the note a force
#: release left for the owner's grant while it is kept (see FORCE_RELEASE), else nil; changes
#: nothing.
EVICTED = (
    _COMMON
    + """
local value = call('HGET', KEYS[1], redis.sha1hex(ARGV[1]))
if not value then return false end
local keep, note = string.match(value, '^(%d+)|(.*)$')
if not keep or tonumber(keep) <= now_ms then return false end
return note
"""
)

#: KEYS: the lock's entries (``e``). Returns {now_ms, malformed, owner1, entry1, ...}: the
#: live entries and lapsed grants, and how many entries it could not parse (the next grant
#: or release drops them); changes nothing.
INSPECT = (
    _COMMON
    + """
replace_wrong_types = false
local read, raw = pcall(call, 'HGETALL', KEYS[1])
if not read then return {now_ms, 1} end  -- another type than a hash: one thing unreadable
local result = {now_ms, 0}
for i = 1, #raw, 2 do
    local e = decode(raw[i], raw[i + 1])
    if not e then
        result[2] = result[2] + 1
    elseif ends(e) > now_ms then
        result[#result + 1] = raw[i]
        result[#result + 1] = raw[i + 1]
    end
end
return result
"""
)

#: KEYS: the lock's keys, then its evicted notes (of any name: nothing is read or written;
#: ``Keys.probe_keys``). ARGV: the client's
#: channel, and 1 if grants wait for replicas (WAIT). Runs no command itself (so that a
#: missing one does not hide the others). Returns the commands (with what they
#: would touch) that the user may not run, as ``COMMAND`` or ``COMMAND key-or-channel``;
#: empty if it may run them all. ``redis.acl_check_cmd`` checks keys and channels as well as
#: commands, with the rights of the user that runs the script.
PROBE = """
local e, n, t = KEYS[1], KEYS[2], KEYS[3]
local channel, replicas = ARGV[1], ARGV[2] == '1'
local checks = {
    {'TIME'}, {'HGET', e, 'f'}, {'HSET', e, 'f', 'v'}, {'HDEL', e, 'f'}, {'HGETALL', e},
    {'HLEN', e}, {'GET', n}, {'SET', n, 'v', 'PX', '1'}, {'DEL', e}, {'PEXPIREAT', e, '1'},
    {'PEXPIRETIME', e}, {'PUBLISH', channel, 'm'}, {'ZADD', t, '1', 'm'}, {'ZREM', t, 'm'},
    {'ZRANGE', t, '0', '-1'}, {'ZRANGEBYSCORE', t, '0', '1'}, {'ZCARD', t},
    {'ZCOUNT', t, '0', '1'}, {'ZSCORE', t, 'm'}, {'SUBSCRIBE', channel}, {'SCAN', '0'},
}
for i = 4, 8 do checks[#checks + 1] = {'ZSCORE', KEYS[i], 'm'} end  -- every index key
for _, check in ipairs({{'HGET', KEYS[9], 'f'}, {'HSET', KEYS[9], 'f', 'v'},
                        {'HDEL', KEYS[9], 'f'}}) do  -- the hand-off terms
    checks[#checks + 1] = check
end
-- the evicted notes: a user whose key patterns leave them out could force-release, but its
-- holders could not tell why they lost their grants
local notes = KEYS[10]
for _, check in ipairs({{'HGET', notes, 'f'}, {'HSET', notes, 'f', 'v'}, {'HDEL', notes, 'f'},
                        {'HGETALL', notes}, {'PEXPIREAT', notes, '1'}}) do
    checks[#checks + 1] = check
end
-- the state watchers' marker, and its channel (``locks.watch``)
local watched = KEYS[11]
for _, check in ipairs({{'EXISTS', watched}, {'SET', watched, 'v', 'PX', '1'},
                        {'PUBLISH', watched, 'm'}, {'SUBSCRIBE', watched}}) do
    checks[#checks + 1] = check
end
if replicas then checks[#checks + 1] = {'WAIT', '1', '0'} end
local refused = {}
for _, check in ipairs(checks) do
    if not redis.acl_check_cmd(unpack(check)) then
        local what = check[1]
        if #check > 1 and check[1] ~= 'SCAN' and check[1] ~= 'WAIT' then
            what = what .. ' ' .. check[2]
        end
        refused[#refused + 1] = what
    end
end
return refused
"""


def escape_name(name: str) -> str:
    """The name as it appears inside a key's hash tag: braces would end the tag early."""
    return name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def unescape_name(text: str) -> str:
    return text.replace("%7D", "}").replace("%7B", "{").replace("%25", "%")


class Keys:
    """The keys and channel of lock names under one prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def entries(self, name: str) -> str:
        return f"{self.prefix}:{{{escape_name(name)}}}:e"

    def sequence(self, name: str) -> str:
        return f"{self.prefix}:{{{escape_name(name)}}}:n"

    def lock_keys(self, name: str) -> list[str]:
        """Every key of the lock, in the order the scripts take them (``lock_keys`` in Lua):
        entries, sequence, the indexes ``t h w wf wx ws``, then the hand-off terms ``g``."""
        base = f"{self.prefix}:{{{escape_name(name)}}}:"
        return [base + suffix for suffix in ("e", "n", "t", "h", "w", "wf", "wx", "ws", "g")]

    def watched(self, name: str) -> str:
        """The marker that the lock has state watchers (``locks.watch``): while it lives, a
        grant, a release and a force release publish on the channel of the same name."""
        return f"{self.prefix}:{{{escape_name(name)}}}:watched"

    def evicted(self, name: str) -> str:
        """The notes force releases left for the holders they evicted (FORCE_RELEASE's last
        key, EVICTED's only one)."""
        return f"{self.prefix}:{{{escape_name(name)}}}:evicted"

    def probe_keys(self, name: str) -> list[str]:
        """The keys PROBE checks the user's rights on: every key of the lock, its notes and
        its state watchers' marker."""
        return [*self.lock_keys(name), self.evicted(name), self.watched(name)]

    def renewal_keys(self, name: str) -> list[str]:
        """The keys a renewal touches (RENEW, RENEW_ALL): entries, expiries, grants."""
        base = f"{self.prefix}:{{{escape_name(name)}}}:"
        return [base + "e", base + "t", base + "h"]

    def client_channel_prefix(self) -> str:
        return f"{self.prefix}:c:"

    def client_channel(self, client: str) -> str:
        return f"{self.prefix}:c:{client}"

    def name_of(self, key: str) -> str | None:
        """The lock name in an entries key, or None if it is none."""
        head = f"{self.prefix}:{{"
        if not key.startswith(head) or not key.endswith("}:e"):
            return None
        return unescape_name(key[len(head) : -3])

    def entries_pattern(self) -> str:
        """A SCAN pattern matching every entries key (glob characters in the prefix escaped)."""
        escaped = "".join("\\" + ch if ch in "*?[]\\" else ch for ch in self.prefix)
        return f"{escaped}:{{*}}:e"


class StoredEntry(NamedTuple):
    """What tumbler reads of an entry of a lock's hash (see ``<prefix>:{<name>}:e``)."""

    seq: int
    shared: bool
    limit: int
    #: None for a waiter
    token: int | None
    #: the end of its lease (a waiter's entry: of its place in line), server time
    expires_ms: int
    #: how long a grant stays lapsed after its lease's end (0: none)
    delay_ms: int
    holder: str

    def lapsed(self, now_ms: int) -> bool:
        """A grant whose lease ran out and that its lock-delay keeps (INSPECT returns only
        those, of the entries whose lease ran out)."""
        return self.token is not None and self.expires_ms <= now_ms


def parse_entry(owner: str, value: str) -> StoredEntry:
    """A stored entry (one INSPECT returned: the script has checked its form)."""
    seq, shared, limit, _fair, token, expires, client, holder = value.split("|", 7)
    delay = 0
    if client.startswith("+"):  # a grant's lock-delay, then its client
        delay = int(client[1:])
        _client, holder = holder.split("|", 1)
    return StoredEntry(
        int(seq),
        shared == "1",
        int(limit),
        int(token) if token else None,
        int(expires),
        delay,
        holder,
    )


def with_prelude(script: str, prelude: str) -> str:
    """``script`` (one that starts as every script here does) with ``prelude`` run first, after
    the common definitions: for a backend that builds on these scripts (Redlock) and must
    check or set something before the script decides."""
    if not script.startswith(_BASE):
        raise ValueError("the script does not start with the common definitions")
    return _BASE + prelude + script[len(_BASE) :]


def script(body: str, *, line: bool = True) -> str:
    """A script of ``body`` after the common definitions (with the functions that work on a
    lock's line unless ``line`` is False): for a backend that builds on these scripts."""
    return (_COMMON if line else _BASE) + body
