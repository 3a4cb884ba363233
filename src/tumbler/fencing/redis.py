"""Guarded writes of a Redis key: ``SET`` and ``HSET`` that a stale fencing token cannot make
(redis-py's ``redis.Redis``, ``redis.asyncio.Redis`` and their cluster clients).

::

    fence = tumbler.fencing.redis.RedisFence(client)
    fence.set("account:7", "90", hold.token)                  # StaleToken if stale
    fence.hset("order:42", {"state": "paid"}, hold.token)

Each write is one Lua script (loaded once, then called by its SHA, through redis-py's own
``Script``): it compares the token with the highest accepted for the key, and only if the
token is not lower records it and writes the key. The highest token is kept in a key of its
own beside the user's key, :func:`fence_key`: ``{TAG}:tumbler-fence:KEY``, where TAG is the
key's hash tag if it has one and else the whole key, so that both are in one Redis Cluster
hash slot. The fence key has no expiry (delete it with the key if the resource goes away:
without it, any token is accepted again).

Only the write is fenced: a value read with a plain ``GET`` may be overwritten by a newer
holder before a read-modify-write stores its result, which the fence then accepts if no newer
holder has written yet. docs/fencing.md says how to fence the read too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgument, MissingDependency, StaleToken
from ._checks import checked_name, checked_token

try:
    import redis
except ImportError as error:  # pragma: no cover - the redis extra is not installed
    raise MissingDependency(None, "redis", "redis", needed_by="tumbler.fencing.redis") from error

if TYPE_CHECKING:
    import redis.asyncio
    import redis.cluster
    from redis.commands.core import AsyncScript, Script

__all__ = ["AsyncRedisFence", "RedisFence", "fence_key"]

Value = bytes | str | int | float

# The token is compared as decimal text (the longer string, else the greater one, is the
# greater number): exact for tokens of any size, where Lua's doubles are exact to 2**53 only.
# A hash is type-checked before anything is written: a script's error leaves its earlier
# writes in place.
_GUARDED_WRITE = """
local highest = redis.call('GET', KEYS[2])
local token = ARGV[1]
if highest and (#highest > #token or (#highest == #token and highest > token)) then
    return highest
end
if ARGV[2] == 'hset' then
    local kind = redis.call('TYPE', KEYS[1])['ok']
    if kind ~= 'hash' and kind ~= 'none' then
        return redis.error_reply('WRONGTYPE the fenced key holds a ' .. kind .. ', not a hash')
    end
end
redis.call('SET', KEYS[2], token)
if ARGV[2] == 'set' then
    redis.call('SET', KEYS[1], ARGV[3])
else
    redis.call('HSET', KEYS[1], unpack(ARGV, 3))
end
return false
"""


def fence_key(key: str) -> str:
    """The key that keeps ``key``'s highest accepted token: in ``key``'s Cluster hash slot,
    and no other key's fence (the whole of ``key`` is in it)."""
    key = checked_name(key, "fenced key")
    opening = key.find("{")
    closing = key.find("}", opening + 1) if opening >= 0 else -1
    if opening >= 0 and closing > opening + 1:
        tag = key[opening + 1 : closing]  # Redis Cluster hashes only this
    elif "}" in key:
        # the whole key is hashed, and no hash tag can name it: "{" + key + "}" would end early
        raise InvalidArgument(
            f"a fenced key with '}}' but no hash tag has no fence key in its slot: {key!r}; "
            "give it a hash tag ('{...}')"
        )
    else:
        tag = key
    return f"{{{tag}}}:tumbler-fence:{key}"


def _arguments(key: str, token: int, values: list[Value]) -> tuple[list[str], list[Value]]:
    token = checked_token(token)
    return [key, fence_key(key)], [str(token), *values]


def _mapping(mapping: Mapping[str, Value]) -> list[Value]:
    if not isinstance(mapping, Mapping) or not mapping:
        raise InvalidArgument(f"hset() takes a non-empty mapping of fields, not {mapping!r}")
    return ["hset", *(item for pair in mapping.items() for item in pair)]


def _decided(key: str, token: int, reply: Any) -> None:
    if reply is not None:
        raise StaleToken(key, token, int(reply))


class RedisFence:
    """Guarded writes through one ``redis.Redis`` (or ``RedisCluster``) client.

    Each method raises :class:`~tumbler.errors.StaleToken`, and writes nothing, if a higher
    token than ``token`` has been accepted for the key; an equal token is accepted. Refused
    with InvalidArgument before anything is sent: a token that is not a positive int, a key
    that is not non-empty text (or has ``}`` without a hash tag, see :func:`fence_key`), an
    empty mapping.
    """

    def __init__(self, client: redis.Redis | redis.cluster.RedisCluster) -> None:
        self._write: Script = client.register_script(_GUARDED_WRITE)

    def set(self, key: str, value: Value, token: int) -> None:
        """``SET key value`` if ``token`` is not stale for ``key``."""
        keys, args = _arguments(key, token, ["set", value])
        _decided(key, token, self._write(keys=keys, args=args))

    def hset(self, key: str, mapping: Mapping[str, Value], token: int) -> None:
        """``HSET key field value ...`` (every item of ``mapping``) if ``token`` is not stale
        for ``key``. The key must hold a hash or nothing (else a ``ResponseError``, and
        nothing written)."""
        keys, args = _arguments(key, token, _mapping(mapping))
        _decided(key, token, self._write(keys=keys, args=args))


class AsyncRedisFence:
    """:class:`RedisFence` through one ``redis.asyncio.Redis`` (or its ``RedisCluster``)."""

    def __init__(self, client: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster) -> None:
        self._write: AsyncScript = client.register_script(_GUARDED_WRITE)

    async def set(self, key: str, value: Value, token: int) -> None:
        """``SET key value`` if ``token`` is not stale for ``key``."""
        keys, args = _arguments(key, token, ["set", value])
        _decided(key, token, await self._write(keys=keys, args=args))

    async def hset(self, key: str, mapping: Mapping[str, Value], token: int) -> None:
        """``HSET key field value ...`` if ``token`` is not stale for ``key``."""
        keys, args = _arguments(key, token, _mapping(mapping))
        _decided(key, token, await self._write(keys=keys, args=args))
