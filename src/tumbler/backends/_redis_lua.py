"""The Redis backend's keys and Lua scripts, shared by its two flavours.

Every key of one lock carries the lock name as its hash tag (``tumbler:{orders:42}:e``), so a
lock lives in one hash slot and each script runs on one node, also in Redis Cluster. Keys:

``<prefix>:{<name>}:e``
    a hash: owner hash -> entry ``seq|shared|limit|fair|token|expires_ms|client|holder`` (token
    empty for a waiter). The hash expires with its longest-lived entry, so the entries of
    holders that all crashed vanish by themselves.
``<prefix>:{<name>}:n``
    the name's sequence: fencing tokens and arrival numbers come from it. Each value is
    ``max(previous + 1, server time in microseconds)``, and the key expires a day after the
    name's last grant: a name used once leaves nothing behind for long, and a token given after
    the key expired still exceeds every earlier one unless the server's clock stepped back by
    more than the time since that name's last grant.
``<prefix>:c:<client>``
    each client's pub/sub channel (not a key). A release publishes ``<owner hash> <name>`` to
    the channel of each client whose waiter it lets through: only that client wakes, and in it
    only that waiter; the other processes waiting on the lock hear nothing. A waiter entry
    names its client's channel once the client has subscribed to it (before, ``client`` is
    empty: the waiter tries again by itself as soon as it has subscribed). On a single server,
    a wake-up that reached no subscriber tells the release that the waiter's client is gone
    (its process died and the server closed its connections): the release removes that
    waiter and lets the next one through at once, instead of leaving the line to wait for the
    dead waiter's entry to run out. On Redis Cluster PUBLISH counts only the subscribers on
    the node that runs the script, so there nobody is judged by it; instead a release also
    sends a *backup* wake-up, ``~<ms>:<owner hash> <name>``, to the first waiter it does not
    let through: that waiter tries again ``ms`` later, and takes the lock if the woken one
    never came. A fair waiter cannot pass a fair waiter ahead of it, so then the release also
    cuts the woken fair waiters' entries to run out in that time (a live one renews its entry
    when it tries again, and that is within a re-check even if the wake-up is lost).

Owners are stored as SHA-1 hashes (``redis.sha1hex``), so a client that can read the keys
cannot release or renew another client's grant. Times are the server's (``TIME``): client
clocks never decide an expiry. Every script returns its own decision; none trusts the client.
"""

from __future__ import annotations

SEQUENCE_TTL_MS = 24 * 3600 * 1000

_COMMON = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)

local function decode(owner, value)
    local seq, shared, limit, fair, token, expires, client, holder =
        string.match(value, '^(%d+)|(%d)|(%d+)|(%d)|(%d*)|(%d+)|([^|]*)|(.*)$')
    return {owner = owner, seq = tonumber(seq), shared = shared == '1', limit = tonumber(limit),
            fair = fair == '1', token = tonumber(token), expires = tonumber(expires),
            client = client, holder = holder}
end

local function encode(e)
    local token = ''
    if e.token then token = string.format('%d', e.token) end
    return string.format('%d|%d|%d|%d|%s|%d|%s|%s', e.seq, e.shared and 1 or 0, e.limit,
                         e.fair and 1 or 0, token, e.expires, e.client, e.holder)
end

-- tell a waiter's client that the waiter may go now; false if the client is known to be
-- gone (judge: PUBLISH reached nobody on a server that sees every subscriber, see above)
local function wake(e, channel_prefix, name, judge)
    if e.client == '' then
        return true  -- not subscribed yet: it tries again by itself once it is
    end
    local heard = redis.call('PUBLISH', channel_prefix .. e.client, e.owner .. ' ' .. name)
    return heard > 0 or not judge
end

-- the live entries of the hash, dropping expired ones on the way
local function live_entries(key)
    local raw = redis.call('HGETALL', key)
    local entries = {}
    for i = 1, #raw, 2 do
        local e = decode(raw[i], raw[i + 1])
        if e.expires > now_ms then
            entries[#entries + 1] = e
        else
            redis.call('HDEL', key, raw[i])
        end
    end
    return entries
end

-- wake the waiters that can go now, in arrival order (just them: no herd). A waiter whose
-- client is gone is removed, and the next one considered in its place, in the same pass.
-- With backup_ms (when nobody is judged), the first waiter not let through is told to try
-- again later in case the woken ones are dead (above); a fair one after backup_ms, when the
-- woken include a fair waiter, whose entry is cut to run out by then; else after retry_ms.
local function wake_admissible(key, entries, channel_prefix, name, judge, backup_ms, retry_ms)
    table.sort(entries, function(a, b) return a.seq < b.seq end)
    local ahead, exclusive_ahead = 0, false
    for _, e in ipairs(entries) do
        if e.token then
            ahead = ahead + 1
            if not e.shared then exclusive_ahead = true end
        end
    end
    local woken, backup = {}, nil
    for _, e in ipairs(entries) do
        if not e.token then
            local admitted
            if e.shared then
                admitted = not exclusive_ahead and (e.limit == 0 or ahead < e.limit)
            else
                admitted = ahead == 0
            end
            if admitted then
                if wake(e, channel_prefix, name, judge) then
                    ahead = ahead + 1
                    if not e.shared then exclusive_ahead = true end
                    woken[#woken + 1] = e
                else
                    redis.call('HDEL', key, e.owner)
                end
            else
                backup = backup or e
                if e.fair then
                    break  -- a fair waiter that cannot go yet holds those behind it
                end
            end
        end
    end
    if backup_ms > 0 and backup and #woken > 0 and backup.client ~= '' then
        local delay_ms = retry_ms
        if backup.fair then
            for _, e in ipairs(woken) do
                if e.fair then
                    delay_ms = backup_ms
                    if e.expires > now_ms + backup_ms then
                        e.expires = now_ms + backup_ms
                        redis.call('HSET', key, e.owner, encode(e))
                    end
                end
            end
        end
        redis.call('PUBLISH', channel_prefix .. backup.client,
                   '~' .. delay_ms .. ':' .. backup.owner .. ' ' .. name)
    end
end

-- set the lease of owner's live grant in key to ttl_ms from now; false if it has none
local function renew_entry(key, owner, ttl_ms)
    local value = redis.call('HGET', key, owner)
    if not value then return false end
    local e = decode(owner, value)
    if not e.token or e.expires <= now_ms then return false end
    e.expires = now_ms + ttl_ms
    redis.call('HSET', key, owner, encode(e))
    if redis.call('PEXPIRETIME', key) < e.expires then
        redis.call('PEXPIREAT', key, e.expires)
    end
    return true
end

-- the hash lives as long as its longest-lived entry
local function set_key_expiry(key, entries)
    local last = 0
    for _, e in ipairs(entries) do
        if e.expires > last then last = e.expires end
    end
    if last > now_ms then
        redis.call('PEXPIREAT', key, last)
    else
        redis.call('DEL', key)
    end
end
"""

#: KEYS: entries, sequence. ARGV: owner, shared (0/1), limit, fair (0/1), ttl_ms, holder,
#: queue (0/1), waiter_ttl_ms, sequence_ttl_ms, client (whose channel wakes this waiter;
#: empty while the client has not subscribed to it yet). Returns {1, token} if granted (or
#: already held by the owner), {0} if not; an error reply
#: "PERMITS_MISMATCH <limit>" if a shared request's limit differs from the live ones'.
#: The decision is tumbler._core.decide(), restated in Lua.
GRANT = (
    _COMMON
    + """
local entries_key, sequence_key = KEYS[1], KEYS[2]
local owner = redis.sha1hex(ARGV[1])
local shared, limit, fair = ARGV[2] == '1', tonumber(ARGV[3]), ARGV[4] == '1'
local ttl_ms, holder, queue = tonumber(ARGV[5]), ARGV[6], ARGV[7] == '1'
local waiter_ttl_ms, sequence_ttl_ms = tonumber(ARGV[8]), tonumber(ARGV[9])
local client = ARGV[10]

local function next_value()
    local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
    local value = math.max(tonumber(redis.call('GET', sequence_key) or '0') + 1, floor)
    redis.call('SET', sequence_key, string.format('%d', value), 'PX', sequence_ttl_ms)
    return value
end

local entries = live_entries(entries_key)
local mine = nil
for _, e in ipairs(entries) do
    if e.owner == owner then mine = e end
end
if mine and mine.token then
    return {1, mine.token}
end
if shared then
    for _, e in ipairs(entries) do
        if e.shared and e.owner ~= owner and e.limit ~= limit then
            return redis.error_reply('PERMITS_MISMATCH ' .. e.limit)
        end
    end
end
local my_seq = math.huge
if mine then my_seq = mine.seq end
local ahead, exclusive_ahead = 0, false
for _, e in ipairs(entries) do
    if e.owner ~= owner and (e.token or (fair and e.fair and e.seq < my_seq)) then
        ahead = ahead + 1
        if not e.shared then exclusive_ahead = true end
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
    local token = next_value()
    if not mine then
        mine = {owner = owner, seq = token, shared = shared, limit = limit, fair = fair,
                client = client, holder = holder}
        entries[#entries + 1] = mine
    end
    mine.token = token
    mine.expires = now_ms + ttl_ms
    redis.call('HSET', entries_key, owner, encode(mine))
    result = {1, token}
elseif mine or queue then
    if not mine then
        mine = {owner = owner, seq = next_value(), shared = shared, limit = limit, fair = fair,
                client = client, holder = holder}
        entries[#entries + 1] = mine
    end
    mine.client = client  -- subscribed since its last try, or subscribed anew
    mine.expires = now_ms + waiter_ttl_ms
    redis.call('HSET', entries_key, owner, encode(mine))
end
set_key_expiry(entries_key, entries)
return result
"""
)

#: KEYS: entries. ARGV: owner, ttl_ms. Returns 1 if the owner's live grant now runs ttl_ms
#: from now, 0 if it has no live grant (an expired one is never revived).
RENEW = (
    _COMMON
    + """
if renew_entry(KEYS[1], redis.sha1hex(ARGV[1]), tonumber(ARGV[2])) then return 1 end
return 0
"""
)

#: KEYS: the entries of each lease to renew (a key may come more than once: several grants
#: of one lock). ARGV: owner and ttl_ms of each, in the order of KEYS (2 per key). Returns one
#: 1 or 0 per key, as RENEW would: every lease of a client in one call (on Redis Cluster, all
#: the keys of one call share a hash slot).
RENEW_ALL = (
    _COMMON
    + """
local renewed = {}
for i, key in ipairs(KEYS) do
    local owner = redis.sha1hex(ARGV[2 * i - 1])
    renewed[i] = renew_entry(key, owner, tonumber(ARGV[2 * i])) and 1 or 0
end
return renewed
"""
)

#: KEYS: entries. ARGV: owner, client channel prefix, lock name, judge (1: a wake-up that
#: reaches nobody means the waiter's client is gone; 0 on Redis Cluster), backup_ms and
#: retry_ms (0 and 0: no backup wake-up; see above). Removes the owner's entry (grant or
#: waiter) and nobody else's; wakes the waiters that can now go, removing those whose client
#: is gone. Returns 1 if a live grant was removed.
RELEASE = (
    _COMMON
    + """
local owner = redis.sha1hex(ARGV[1])
local value = redis.call('HGET', KEYS[1], owner)
if not value then return 0 end
redis.call('HDEL', KEYS[1], owner)
local e = decode(owner, value)
wake_admissible(KEYS[1], live_entries(KEYS[1]), ARGV[2], ARGV[3], ARGV[4] == '1',
                tonumber(ARGV[5]), tonumber(ARGV[6]))
if e.token and e.expires > now_ms then return 1 end
return 0
"""
)

#: KEYS: entries. ARGV: client channel prefix, lock name, judge (as for RELEASE). Removes
#: every grant (for operators) and wakes every waiter, removing those whose client is gone;
#: returns how many grants were removed.
FORCE_RELEASE = (
    _COMMON
    + """
local entries = live_entries(KEYS[1])
local removed, kept = 0, {}
for _, e in ipairs(entries) do
    if e.token then
        redis.call('HDEL', KEYS[1], e.owner)
        removed = removed + 1
    elseif wake(e, ARGV[1], ARGV[2], ARGV[3] == '1') then
        kept[#kept + 1] = e
    else
        redis.call('HDEL', KEYS[1], e.owner)
    end
end
set_key_expiry(KEYS[1], kept)
return removed
"""
)

#: KEYS: entries. Returns {now_ms, owner1, entry1, ...} of the live entries; changes nothing.
INSPECT = (
    _COMMON
    + """
local raw = redis.call('HGETALL', KEYS[1])
local result = {now_ms}
for i = 1, #raw, 2 do
    if decode(raw[i], raw[i + 1]).expires > now_ms then
        result[#result + 1] = raw[i]
        result[#result + 1] = raw[i + 1]
    end
end
return result
"""
)


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


def parse_entry(owner: str, value: str) -> tuple[int, bool, int, int | None, int, str]:
    """(seq, shared, limit, token, expires_ms, holder) of a stored entry."""
    seq, shared, limit, _fair, token, expires, _client, holder = value.split("|", 7)
    return int(seq), shared == "1", int(limit), int(token) if token else None, int(expires), holder
