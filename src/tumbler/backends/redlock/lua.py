"""The Redlock backend's scripts: each master runs the Redis backend's scripts (see
``tumbler.backends.redis.lua`` for the keys of a lock), with what Redlock adds.

``<prefix>:serving-from``
    a master's marker (no expiry): the server time, in milliseconds, from which it may grant.
    A master without one has lost its data (it restarted without persistence) or was never
    used; the client decides which (see ``.common``) and writes it (``MARK``). A grant on a
    master whose marker is missing or still in the future is refused, so a master restarted
    empty stays out for ``restart_delay``, longer than any lease it could have forgotten (and
    its lock-delay, see ``longest-lease``).

``<prefix>:token-floor``, ``<prefix>:longest-lease``
    what a master remembers of the whole deployment (no expiry): the greatest value it drew
    or was raised to for any name, below which it draws nothing (so a master restarted empty
    and given the floor of the others draws above every token they hold), and the longest
    ``restart_delay`` of any client that was granted a lease on it, plus the grant's
    lock-delay (how long a grant it may have forgotten could still count: its lease, then
    lapsed). ``MARK`` gives a master that lost its data both, as the others have them.

``<prefix>:{<name>}:watched``
    the Redis backend's marker that a client watches the lock's state, set on each master by
    the watchers' clients (see ``._async.backend``, ``follow_state``): while it lives there,
    that master's grants, raised tokens (``RAISE_TOKEN``), releases, hand-backs (``REQUEUE``)
    and force releases of the lock publish on its channel. A watcher needs only the hint:
    whichever master tells it, it reads the lock again (``inspect``, from a quorum).

A grant's fencing token is the greatest of the tokens its masters drew; the masters that drew
less take it too (``RAISE_TOKEN``, where they never gave it out) before the grant counts, so
that a quorum of masters keeps each name's sequence at or above every token granted, and no
two grants share one (the argument is in ``.common``).
A grant that no quorum made goes back in line where it was (``REQUEUE``): the masters draw
arrival numbers from the client's proposal too, so they keep their lines in the same order,
and the waiter that was first on them is first again at the next try. Each
master draws from ``max(sequence + 1, the client's proposal)``, the proposal being the
client's clock in microseconds: masters with the same history draw the same value, and the
common grant needs no second round trip.
"""

from __future__ import annotations

from ..redis import lua as redis_lua

#: GRANT with the marker check first. KEYS: the lock's keys, its state watchers' marker (as
#: GRANT's: the grant publishes its change there while the marker lives), then the master's
#: marker, its token floor and its longest lease. ARGV: as GRANT (its lock_delay_ms included:
#: each master keeps a lapsed grant as one Redis server does), then the client's proposal for the
#: sequence (microseconds) and its restart_delay plus the request's lock-delay (ms). Returns as
#: GRANT, or {-1} if the master has no marker, {-2, ms} if it may grant only in ms milliseconds.
#: Every value drawn, for any name, is above the floor and becomes it.
GRANT = redis_lua.with_prelude(
    redis_lua.GRANT,
    """
local serving_from = call('GET', KEYS[11])
if not serving_from then return {-1} end
serving_from = tonumber(serving_from) or 0
if serving_from > now_ms then return {-2, serving_from - now_ms} end
local floor = counter(call('GET', KEYS[12])) or 0
if counter(ARGV[13]) then
    sequence_floor = math.max(counter(ARGV[13]), floor + 1)
else
    sequence_floor = math.max(sequence_floor, floor + 1)
end
local draw = next_value
next_value = function(K)
    local value = draw(K)
    call('SET', KEYS[12], string.format('%d', value))
    return value
end
if (counter(call('GET', KEYS[13])) or 0) < tonumber(ARGV[14]) then
    call('SET', KEYS[13], ARGV[14])
end
""",
)

#: KEYS: the lock's keys, then the master's token floor. ARGV: owner, token. No state watcher is
#: told: the grant's token changes on this master only, to the one ``inspect`` already reads for
#: it (the greatest its quorum holds). If the owner holds
#: a live grant (not a lapsed one) and the name's sequence is below ``token`` (this master never
#: gave it out), the grant's token becomes ``token``, and the name's sequence and the master's
#: floor at least ``token``: returns 1, as it does if the grant has the token already. Returns 0
#: (and changes nothing) if the owner holds no grant here, or the sequence is at ``token`` or
#: past it: the master drew it, or was raised to it, for another grant, which may hold beside
#: this one (a semaphore's, a reader's), and two holders must not share a token. KEYS: the
#: lock's keys, the token floor, then the state watchers' marker: a raised token changes the
#: holder a quorum shows, so the watchers are told (a watcher that read the lock between the
#: grant and the raise would otherwise keep the state before it).
RAISE_TOKEN = redis_lua.script(
    """
local K = lock_keys(1)
local owner = redis.sha1hex(ARGV[1])
local token = tonumber(ARGV[2])
local e = get(K, owner)
if not e or not e.token or e.lapsed then return 0 end
if e.token == token then return 1 end
if e.token > token or (counter(call('GET', K.n)) or 0) >= token then return 0 end
e.token = token
put(K, e)
call('SET', K.n, string.format('%d', token), 'PX', SEQUENCE_TTL_MS)
if (counter(call('GET', KEYS[10])) or 0) < token then
    call('SET', KEYS[10], string.format('%d', token))
end
tell_watchers(KEYS[11])
return 1
"""
)

#: KEYS: the lock's keys, then its state watchers' marker (optional, as RELEASE's). ARGV:
#: owner, waiter_ttl_ms, client (as GRANT's), the client channel prefix and the lock name (as
#: RELEASE's). The owner's grant, one that did not count (no quorum), goes back in line where
#: it was (its arrival number kept) as a waiter entry, the waiters that can go now are woken,
#: and the state watchers told. Returns 1, or 0 (changing nothing) if the owner holds no grant
#: here, or a lapsed one: given back too late, it stays for its lock-delay, as after a release.
REQUEUE = redis_lua.script(
    """
local K = lock_keys(1)
local owner = redis.sha1hex(ARGV[1])
local e = get(K, owner)
if not e or not e.token or e.lapsed then return 0 end
remove(K, owner, e)
e.token = nil
e.expires = now_ms + tonumber(ARGV[2])
e.client = ARGV[3]
put(K, e)
wake_admissible(K, ARGV[4], ARGV[5], true, 0, 0)
set_expiry(K)
tell_watchers(KEYS[10])
return 1
"""
)

#: a marker younger than this does not tell a master that lost its data from a new deployment
#: whose first clients are marking its masters at this moment (see ``.common``)
NEW_DEPLOYMENT_MS = 1000

#: KEYS: the master's marker, token floor and longest lease. ARGV: delay_ms, floor and
#: longest lease (ms), or three empty strings to only read. Unless it has a marker, sets it
#: to the server's time plus delay_ms, and its floor and longest lease to at least those
#: given. Returns {1, ms, floor, longest} if it has a marker (it serves in ms milliseconds:
#: negative once it serves, as many as it has served), {0, 0, floor, longest} if it has none.
MARK = redis_lua.script(
    """
if ARGV[1] ~= '' and call('SET', KEYS[1], string.format('%d', now_ms + tonumber(ARGV[1])), 'NX')
then
    for i = 2, 3 do
        if (counter(call('GET', KEYS[i])) or 0) < tonumber(ARGV[i]) then
            call('SET', KEYS[i], ARGV[i])
        end
    end
end
local floor = counter(call('GET', KEYS[2])) or 0
local longest = counter(call('GET', KEYS[3])) or 0
local serving_from = call('GET', KEYS[1])
if not serving_from then return {0, 0, floor, longest} end
return {1, (tonumber(serving_from) or 0) - now_ms, floor, longest}
""",
    line=False,
)


def master_keys(prefix: str) -> list[str]:
    """A master's own keys under ``prefix``: its marker, token floor and longest lease."""
    return [f"{prefix}:serving-from", f"{prefix}:token-floor", f"{prefix}:longest-lease"]
