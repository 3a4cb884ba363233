"""The Redlock backend's scripts: each master runs the Redis backend's scripts (see
``tumbler.backends.redis.lua`` for the keys of a lock), with what Redlock adds.

``<prefix>:serving-from``
    a master's marker (no expiry): the server time, in milliseconds, from which it may grant.
    A master without one has lost its data (it restarted without persistence) or was never
    used; the client decides which (see ``.common``) and writes it (``MARK``). A grant on a
    master whose marker is missing or still in the future is refused, so a master restarted
    empty stays out for ``restart_delay``, longer than any lease it could have forgotten.

A grant's fencing token is the greatest of the tokens its masters drew; the masters that drew
less take it too (``RAISE_TOKEN``) before the grant counts, so that a quorum of masters keeps
each name's sequence at or above every token granted (the argument is in ``.common``).
A grant that no quorum made goes back in line where it was (``REQUEUE``): the masters draw
arrival numbers from the client's proposal too, so they keep their lines in the same order,
and the waiter that was first on them is first again at the next try. Each
master draws from ``max(sequence + 1, the client's proposal)``, the proposal being the
client's clock in microseconds: masters with the same history draw the same value, and the
common grant needs no second round trip.
"""

from __future__ import annotations

from ..redis import lua as redis_lua

#: GRANT with the marker check first. KEYS: the lock's keys, then the master's marker. ARGV:
#: as GRANT, then the client's proposal for the sequence (microseconds). Returns as GRANT, or
#: {-1} if the master has no marker, {-2, ms} if it may grant only in ms milliseconds.
GRANT = redis_lua.with_prelude(
    redis_lua.GRANT,
    """
local serving_from = call('GET', KEYS[10])
if not serving_from then return {-1} end
serving_from = tonumber(serving_from) or 0
if serving_from > now_ms then return {-2, serving_from - now_ms} end
if string.match(ARGV[12], '^%d+$') and #ARGV[12] <= 16 then
    sequence_floor = tonumber(ARGV[12])
end
""",
)

#: KEYS: the lock's keys. ARGV: owner, token. If the owner holds a live grant, its token
#: becomes ``token`` (if that is greater) and the name's sequence at least ``token``: returns
#: 1. Returns 0 (and changes nothing) if it holds none.
RAISE_TOKEN = redis_lua.script(
    """
local K = lock_keys(1)
local owner = redis.sha1hex(ARGV[1])
local token = tonumber(ARGV[2])
local e = get(K, owner)
if not e or not e.token then return 0 end
if e.token < token then
    e.token = token
    put(K, e)
end
if tonumber(call('GET', K.n) or '0') < token then
    call('SET', K.n, string.format('%d', token), 'PX', SEQUENCE_TTL_MS)
end
return 1
"""
)

#: KEYS: the lock's keys. ARGV: owner, waiter_ttl_ms, client (as GRANT's), the client channel
#: prefix and the lock name (as RELEASE's). The owner's grant, one that did not count (no
#: quorum), goes back in line where it was (its arrival number kept) as a waiter entry, and
#: the waiters that can go now are woken. Returns 1, or 0 (changing nothing) if the owner
#: holds no grant here.
REQUEUE = redis_lua.script(
    """
local K = lock_keys(1)
local owner = redis.sha1hex(ARGV[1])
local e = get(K, owner)
if not e or not e.token then return 0 end
remove(K, owner, e)
e.token = nil
e.expires = now_ms + tonumber(ARGV[2])
e.client = ARGV[3]
put(K, e)
wake_admissible(K, ARGV[4], ARGV[5], true, 0, 0)
set_expiry(K)
return 1
"""
)

#: a marker younger than this does not tell a master that lost its data from a new deployment
#: whose first clients are marking its masters at this moment (see ``.common``)
NEW_DEPLOYMENT_MS = 1000

#: KEYS: the master's marker. ARGV: delay_ms, or empty to only read. Sets the marker to the
#: server's time plus delay_ms unless it has one. Returns {1, ms} if it has a marker (it
#: serves in ms milliseconds: negative once it serves, as many as it has served), {0, 0} if
#: it has none.
MARK = redis_lua.script(
    """
if ARGV[1] ~= '' then
    call('SET', KEYS[1], string.format('%d', now_ms + tonumber(ARGV[1])), 'NX')
end
local serving_from = call('GET', KEYS[1])
if not serving_from then return {0, 0} end
return {1, (tonumber(serving_from) or 0) - now_ms}
""",
    line=False,
)


def marker(prefix: str) -> str:
    """The master's marker key under ``prefix``."""
    return f"{prefix}:serving-from"
