# Generated from src/tumbler/backends/redlock/_async/backend.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""The Redlock backend (asyncio flavour, the source of the generated blocking twin).

See ``tumbler.backends.redlock.common`` for the URL grammar, the algorithm and its promises,
and ``tumbler.backends.redlock.lua`` for what each master runs besides the Redis backend's
scripts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import random
import secrets
import threading
import time
from collections.abc import Sequence
from typing import Any

import redis.exceptions as redis_errors

from .... import _core as core
from ...._acompat import Worker, join, sleep_real, spawn
from ...._clock import SYSTEM_CLOCK, Clock
from ...._logs import logger
from ....errors import BackendUnavailable, ConfigurationError, TumblerError
from ...contract import (
    STATE_TAG,
    Grant,
    GrantRequest,
    LockState,
    Renewal,
    SessionEvents,
    WakeHub,
)
from ...kit import BaseWatch, InspectEachName, LockStateBuilder, MarkedWatch
from ...kit.owners import owner_hash
from ...kit.tls import tls_context
from ...redis import lua as redis_lua
from ...redis._sync.backend import WATCHED_MS, RedisBackend
from ...redis.common import (
    KEYS_CACHED,
    RENEWALS_PER_CALL,
    Turn,
    translate_errors,
    tumbler_error,
)
from .. import CAPABILITIES, lua
from ..common import (
    BACKOFF_FIRST,
    BACKOFF_LONGEST,
    ROUNDS,
    Reader,
    RedlockConfig,
    quorum,
)

_log = logger("tumbler.redlock")

#: the least time a reply is read for, even after node_timeout: a reply already on its way
#: is not thrown away because the client itself was slow to read it
READ_GRACE = 0.005
#: what a master's GRANT says when it has no marker (see .lua), or may not grant yet
_NO_MARKER = -1
_NOT_YET = -2


class _Script:
    """A script's source and SHA-1, sent by SHA-1 and loaded where a master lacks it."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def call(
        self, keys: Sequence[str | bytes], args: Sequence[str | bytes | int]
    ) -> tuple[Any, ...]:
        """The EVALSHA command that runs the script."""
        return ("EVALSHA", self.sha, len(keys), *keys, *args)


_GRANT = _Script(lua.GRANT)
_RAISE_TOKEN = _Script(lua.RAISE_TOKEN)
_MARK = _Script(lua.MARK)
_REQUEUE = _Script(lua.REQUEUE)
_RELEASE = _Script(redis_lua.RELEASE)
_RENEW_ALL = _Script(redis_lua.RENEW_ALL)
_FORCE_RELEASE = _Script(redis_lua.FORCE_RELEASE)
_EVICTED = _Script(redis_lua.EVICTED)
_INSPECT = _Script(redis_lua.INSPECT)
_SCRIPTS = {
    script.sha: script
    for script in (
        _GRANT,
        _RAISE_TOKEN,
        _MARK,
        _REQUEUE,
        _RELEASE,
        _RENEW_ALL,
        _FORCE_RELEASE,
        _EVICTED,
        _INSPECT,
    )
}

#: a master's replies to the commands it was sent, or why it gave none
_Replies = list[Any] | Exception


class _Contended(enum.Enum):
    """A grant that had its quorum while another grant drew its token first."""

    CONTENDED = "contended"


_CONTENDED = _Contended.CONTENDED


class _Master:
    """One master: the Redis backend that speaks to it (connections, wake-ups), and whether it
    is left out for now after a failure."""

    def __init__(self, index: int, backend: RedisBackend) -> None:
        self.index = index
        self.backend = backend
        # its connections are typed loosely by redis-py
        self.pool: Any = backend.quick_pool()
        self._own: Any = None
        self._turn = Turn()
        self.out_until = 0.0
        self._failures = 0
        self.subscriber: Worker | None = None

    @property
    def address(self) -> str:
        host, port = self.backend.config.nodes[0]
        return f"{host}:{port}"

    def take(self) -> Any:
        """A connection for one call: the master's own when no other call has it (no
        check-out from the pool: its locks, its checks, its bookkeeping), else the pool's."""
        if self._turn.take():
            own = self._own
            if own is None:
                try:
                    own = self._own = self.pool.get_connection()
                except BaseException:
                    self._turn.give_back()
                    raise
            return own
        return self.pool.get_connection()

    def give_back(self, connection: Any) -> None:
        if connection is self._own:
            self._turn.give_back()
        else:
            self.pool.release(connection)

    def close(self) -> None:
        """Close the Redis backend, with the master's own connection (back to the pool)."""
        own, self._own = self._own, None
        if own is not None:
            self.pool.release(own)
        with contextlib.suppress(redis_errors.RedisError, OSError):
            self.pool.disconnect()
        self.backend.close()

    def answered(self) -> None:
        self._failures = 0
        self.out_until = 0.0

    def failed(self) -> None:
        self._failures += 1
        pause = min(BACKOFF_LONGEST, BACKOFF_FIRST * 2 ** min(self._failures - 1, 16))
        self.out_until = time.monotonic() + pause


class RedlockWatch(BaseWatch):
    """A waiter's view of the wake-ups of every master.

    Any master's release wakes it (the masters' wake-up connections share one hub). Entering
    starts the subscriptions that are not made yet, in the background: a master that does not
    answer must not hold the waiter up. Until a master's subscription is confirmed, the
    waiter's entry there names no client, so that master's releases do not wake it; the
    confirmation wakes every waiter to try again, which names the client in the entry.
    """

    def __init__(self, backend: RedlockBackend, name: str, owner: str) -> None:
        super().__init__(backend.clock, name, backend.hub, owner_hash(owner))
        self._backend = backend

    def _subscribe(self) -> bool:
        self._backend.subscribe_in_background(self.name)
        return False


class RedlockStateWatch(MarkedWatch):
    """A state watcher's watch: every master publishes the lock's changes while its marker
    says someone watches (the Redis backend's ``<prefix>:{<name>}:watched``), and any
    master's message wakes it (the masters' wake-up connections share one hub). Entering
    subscribes the client to that channel and sets the marker on the masters
    (the backend's ``follow_state``: a majority at least, so that every change that
    counts, made on a quorum, is published by one of them); the kit's marked watch does so
    again while it waits, so the markers outlive the watch by at most ``WATCHED_MS``, and a
    master missed before (down, or left out after a failure) is subscribed to then."""

    mark_life = WATCHED_MS / 1000

    def __init__(self, backend: RedlockBackend, name: str) -> None:
        super().__init__(backend.clock, name, backend.hub, STATE_TAG)
        self._backend = backend

    def _set_mark(self) -> None:
        self._backend.follow_state(self.name)


class RedlockBackend(InspectEachName):
    """The backend contract over N Redis masters (see ``.common``)."""

    session_events: SessionEvents | None = None

    def __init__(self, config: RedlockConfig) -> None:
        self.config = config
        self.url = config.url
        self.clock: Clock = SYSTEM_CLOCK
        self.capabilities = dataclasses.replace(CAPABILITIES, max_ttl=config.restart_delay or None)
        self.hub = WakeHub()
        self.keys = redis_lua.Keys(config.prefix)
        #: the master's own keys: marker, token floor, longest lease (see .lua)
        self._master_keys = lua.master_keys(config.prefix)
        self._restart_delay_ms = round(config.restart_delay * 1000)
        client_id = secrets.token_hex(8)
        # the masters' URLs are one URL's: one TLS context serves them all
        tls = config.masters[0].tls
        shared = None if tls is None else tls_context(tls, config.url)
        self.masters = [
            _Master(index, RedisBackend(master, hub=self.hub, client_id=client_id, tls=shared))
            for index, master in enumerate(config.masters)
        ]
        #: the quorum of a lock, a read lock and a semaphore of one permit
        self._majority = quorum(len(self.masters), False, 1)
        self._channel_prefix = self.keys.client_channel_prefix().encode()
        self._client = client_id.encode()
        first = self.masters[0].backend.config
        self._waiter_ttl = str(round(self.capabilities.waiter_ttl * 1000)).encode()
        self._max_waiters = str(first.max_waiters).encode()
        #: how long setting up a master's connection may take (see _Master.pool)
        self._connect_timeout: float = first.client_options["socket_connect_timeout"]
        self._keys_cache: dict[str, list[bytes]] = {}
        #: the request of each hold, for its renewals: the quorum it needs (a semaphore's is
        #: larger), and what to grant where a master lost it
        self._held: dict[tuple[str, str], GrantRequest] = {}
        self._guard = threading.Lock()
        self._closed = False

    # -- connecting ------------------------------------------------------------------------

    def start(self) -> None:
        """Check every master that answers (a Redis of 7.0 or newer, a master, not a member of
        a Redis Cluster, a user with the rights tumbler needs, each a server of its own), and
        that a majority answers."""
        run_ids: dict[str, str] = {}
        answered = 0
        failures: list[str] = []
        for master in self.masters:
            try:
                with translate_errors(master.backend.url):
                    info: Any = master.backend.client.info()
                master.backend.start()
            except BackendUnavailable as error:
                master.failed()
                failures.append(f"{master.address}: {error.message}")
                continue
            answered += 1
            if info.get("role") != "master":
                raise ConfigurationError(
                    f"{master.address} is a replica: Redlock needs independent masters",
                    backend=self.url,
                )
            if info.get("cluster_enabled"):
                raise ConfigurationError(
                    f"{master.address} is a Redis Cluster node: Redlock needs independent masters",
                    backend=self.url,
                )
            run_id = str(info.get("run_id"))
            if run_id in run_ids:
                raise ConfigurationError(
                    f"{run_ids[run_id]} and {master.address} are one server: each master must "
                    "be a server of its own",
                    backend=self.url,
                )
            run_ids[run_id] = master.address
        needed = self._majority
        if answered < needed:
            raise BackendUnavailable(
                f"{answered} of {len(self.masters)} Redis masters answered, a majority is "
                f"{needed}: {'; '.join(failures)}",
                backend=self.url,
            )

    # -- calling every master at once ------------------------------------------------------

    def _targets(self, needed: int) -> list[_Master]:
        """The masters a call goes to: those not left out after a failure, unless too few."""
        now = time.monotonic()
        ready = [master for master in self.masters if master.out_until <= now]
        return ready if len(ready) >= needed else list(self.masters)

    def _fan_out(
        self, calls: dict[int, list[tuple[Any, ...]]], timeout: float | None = None
    ) -> dict[int, _Replies]:
        """Each master's replies to its commands: every master's commands written first, then
        the replies read, each within ``timeout`` (``node_timeout``) of the start. A master
        that lacks a script is given it, and its commands that failed for it are sent again."""
        results = self._send_and_read(calls, timeout)
        again: dict[int, list[tuple[Any, ...]]] = {}
        for index, replies in results.items():
            if isinstance(replies, Exception):
                continue
            missing = [
                position
                for position, reply in enumerate(replies)
                if isinstance(reply, redis_errors.NoScriptError)
            ]
            if missing:
                again[index] = [calls[index][position] for position in missing]
        if not again:
            return results
        # a master restarted or flushed its scripts: load what it lacks (SCRIPT LOAD, not
        # EVAL: the ACL rights the Redis backend asks for)
        loads = {
            index: [("SCRIPT", "LOAD", _SCRIPTS[command[1]].source) for command in commands]
            + commands
            for index, commands in again.items()
        }
        retried = self._send_and_read(loads, timeout)
        for index, replies in retried.items():
            if isinstance(replies, Exception):
                results[index] = replies
                continue
            answers = replies[len(again[index]) :]
            merged = list(results[index])  # type: ignore[arg-type]
            missing = [
                position
                for position, reply in enumerate(merged)
                if isinstance(reply, redis_errors.NoScriptError)
            ]
            for position, answer in zip(missing, answers, strict=True):
                merged[position] = answer
            results[index] = merged
        return results

    def _send_and_read(
        self, calls: dict[int, list[tuple[Any, ...]]], timeout: float | None
    ) -> dict[int, _Replies]:
        deadline = time.monotonic() + (self.config.node_timeout if timeout is None else timeout)
        setup = self._connect_timeout
        results: dict[int, _Replies] = {}
        sent: list[tuple[_Master, Any, int]] = []
        # the masters are mostly sent the same commands: each is packed once
        packed: dict[tuple[tuple[Any, ...], ...], list[bytes]] = {}
        connection: Any
        try:
            for index, commands in calls.items():
                master = self.masters[index]
                connection = None
                try:
                    connection = master.take()
                    key = tuple(commands)
                    data = packed.get(key)
                    if data is None:
                        data = packed[key] = connection.pack_commands(commands)
                    if connection.is_connected:
                        connection.send_packed_command(data, check_health=False)
                    else:
                        # one that a failure closed is set up again by this send (TCP, TLS,
                        # the login): within what the call has left, not connect_timeout each,
                        # or stopped masters would hold the call up one after another
                        bound = min(setup, max(deadline - time.monotonic(), READ_GRACE))
                        connection.socket_connect_timeout = connection.socket_timeout = bound
                        try:
                            connection.send_packed_command(data, check_health=False)
                        finally:
                            connection.socket_connect_timeout = setup
                            connection.socket_timeout = setup
                except (redis_errors.RedisError, OSError) as error:
                    if connection is not None:
                        connection.disconnect()
                        master.give_back(connection)
                    master.failed()
                    results[index] = error
                    continue
                sent.append((master, connection, len(commands)))
            while sent:
                master, connection, count = sent[0]
                replies: list[Any] = []
                try:
                    for _ in range(count):
                        left = max(deadline - time.monotonic(), READ_GRACE)
                        try:
                            replies.append(Reader.read(connection, left))
                        except redis_errors.ResponseError as error:  # read whole: in step
                            replies.append(error)
                except (redis_errors.RedisError, OSError) as error:
                    # replies may still come: nobody may read them as theirs
                    connection.disconnect()
                    master.failed()
                    results[master.index] = error
                else:
                    master.answered()
                    results[master.index] = replies
                sent.pop(0)
                master.give_back(connection)
        finally:
            # cancelled part way: the connections still owed replies are closed
            for master, connection, _count in sent:
                connection.disconnect()
                master.give_back(connection)
        return results

    def _client_on(self, master: _Master) -> bytes:
        """The client a waiter's entry on ``master`` names: none until the client listens to
        that master, whose releases would otherwise judge the waiter gone."""
        return self._client if master.backend.wakeups.subscribed() else b""

    def _lock_keys(self, name: str) -> list[bytes]:
        """``keys.lock_keys(name)`` and its state watchers' marker (the keys of GRANT, before
        the master's own, of RELEASE and of REQUEUE), encoded once for the last names used."""
        found = self._keys_cache.get(name)
        if found is None:
            if len(self._keys_cache) >= KEYS_CACHED:
                self._keys_cache.clear()
            keys = [*self.keys.lock_keys(name), self.keys.watched(name)]
            found = [key.encode() for key in keys]
            self._keys_cache[name] = found
        return found

    def _unavailable(
        self,
        answered: int,
        needed: int,
        results: dict[int, _Replies],
        name: str | None,
        within: float | None = None,
    ) -> BackendUnavailable:
        """The error for a call that fewer masters than ``needed`` answered within ``within``
        seconds (``node_timeout`` unless said), naming why each other one did not."""
        reasons = "; ".join(
            f"{self.masters[index].address}: {tumbler_error(reply, self.url, name).message}"
            for index, reply in sorted(results.items())
            if isinstance(reply, redis_errors.RedisError | OSError)
        )
        return BackendUnavailable(
            f"{answered} of {len(self.masters)} Redis masters answered within "
            f"{self.config.node_timeout if within is None else within:g} s, {needed} are needed"
            + (f" ({reasons})" if reasons else ""),
            lock_name=name,
            backend=self.url,
        )

    # -- grants ----------------------------------------------------------------------------

    def try_grant(self, request: GrantRequest) -> Grant | None:
        needed = quorum(len(self.masters), request.shared, request.limit)
        rounds = 0
        # Masters that refuse connections are down: three tries tell. A quorum that is slow
        # for a moment (a busy machine) is waited for as long as any other call to the
        # masters would be: socket_timeout.
        patience = self.masters[0].backend.config.client_options["socket_timeout"]
        give_up = time.monotonic()
        contended = 0
        while True:
            outcome = self._grant_once(request, needed)
            if isinstance(outcome, Grant):
                with self._guard:
                    self._held[(request.name, request.owner)] = request
                return outcome
            if outcome is None:
                return None
            if outcome is _CONTENDED:
                # a try that does not queue goes again at once, after a pause of its own
                contended += 1
                if contended > ROUNDS:
                    return None
                sleep_real(random.uniform(0, self.config.node_timeout))
                continue
            answered, results, new = outcome
            if rounds == 0 and any(_timed_out(reply) for reply in results.values()):
                give_up += patience
            marked = bool(new) and self._mark(new, needed, request.name)
            rounds += 1
            if rounds >= ROUNDS and time.monotonic() >= give_up:
                if new and answered >= needed:
                    raise BackendUnavailable(
                        f"{len(new)} of {len(self.masters)} Redis masters have no marker (see "
                        f"redlock.lua) and could not be marked: {answered} answered within "
                        f"{self.config.node_timeout:g} s, {needed} are needed",
                        lock_name=request.name,
                        backend=self.url,
                    )
                raise self._unavailable(answered, needed, results, request.name)
            if not marked:
                sleep_real(random.uniform(0, self.config.node_timeout))

    def _grant_once(
        self, request: GrantRequest, needed: int
    ) -> Grant | tuple[int, dict[int, _Replies], list[int]] | _Contended | None:
        """One grant attempt on every master: the grant, None if a quorum answered without
        granting, ``_CONTENDED`` if a try that does not queue had its quorum but another grant
        drew its token first (see ``_raise_token``), else (how many answered, the replies, the
        masters that have no marker)."""
        proposal = time.time_ns() // 1000
        calls = {
            master.index: [
                self._grant_call(request, request.ttl, request.queue, master.index, proposal)
            ]
            for master in self._targets(needed)
        }
        sent_at = self.clock.now()
        results = self._fan_out(calls)
        granted: dict[int, int] = {}
        lease = request.ttl
        answered = 0
        new: list[int] = []
        refusal: TumblerError | None = None
        refusals = 0
        for index, replies in results.items():
            if isinstance(replies, Exception):
                continue
            reply = replies[0]
            answered += 1
            if isinstance(reply, redis_errors.ResponseError):
                refusal = refusal or tumbler_error(reply, self.url, request.name)
                refusals += 1
                continue
            status = int(reply[0])
            if status == 1:
                granted[index] = int(reply[1])
                if len(reply) > 2:  # held already: its lease began earlier
                    lease = min(lease, int(reply[2]) / 1000)
            elif status == _NO_MARKER:
                new.append(index)
        if refusal is not None and refusals > len(self.masters) - needed:
            # Refused where no quorum can form without the masters that refused. Every master
            # asked, those whose reply came too late too, may have queued the request: a
            # refused acquire leaves nothing in any line. A minority's refusal counts as its
            # not granting, as any other master's answer does: a line that a waiter left
            # there a little longer than elsewhere (a try that reached it late) is full on
            # that master alone, and the waiter it would refuse is in line on the others.
            self._release_on(request.name, request.owner, list(results))
            raise refusal
        contended = False
        if len(granted) >= needed:
            token = max(granted.values())
            holding = self._raise_token(request, granted, token)
            contended = holding < needed
            # the lease counts from before the request went out (the lock layer times the
            # hold from then, less the same allowance): none may be left already
            left = lease - (self.clock.now() - sent_at) - core.drift_margin(request.ttl)
            if holding >= needed and left > 0:
                if new:
                    # now, while the masters that kept their data answer: its restart delay
                    # runs from here, and it takes their token floor (see .common)
                    self._mark(new, needed, request.name)
                return Grant(request.name, request.owner, token, lease)
        if answered < needed or new or not request.queue:
            self._release_on(request.name, request.owner, list(granted))
            if answered < needed or new:
                return answered, results, new
            return _CONTENDED if contended else None
        if granted:
            # The masters were split between clients (or masters ran out of time): the grants
            # go back in line, keeping their places, and the next try comes after a pause of
            # its own, so that one of the clients comes first.
            self._requeue(request, list(granted))
            sleep_real(random.uniform(0, self.config.node_timeout))
        return None

    def _grant_call(
        self, request: GrantRequest, ttl: float, queue: bool, index: int, proposal: int
    ) -> tuple[Any, ...]:
        """The GRANT (see ``.lua``) of ``request`` with a lease of ``ttl`` on master ``index``,
        leaving a waiter entry if ``queue``; ``proposal``: the sequence's (µs)."""
        keys: list[str | bytes] = [*self._lock_keys(request.name), *self._master_keys]
        delay_ms = round(request.lock_delay * 1000)
        args: list[str | bytes | int] = [
            request.owner,
            b"1" if request.shared else b"0",
            request.limit,
            b"1" if request.fair else b"0",
            max(1, round(ttl * 1000)),
            request.holder,
            b"1" if queue else b"0",
            self._waiter_ttl,
            self._client_on(self.masters[index]),
            self._max_waiters,
            b"",
            delay_ms or b"",
            proposal,
            # a master that lost its data stays out for as long as a grant it forgot may
            # count: its lease, then its lock-delay (see .common)
            self._restart_delay_ms + delay_ms if self._restart_delay_ms else 0,
        ]
        return _GRANT.call(keys, args)

    def _requeue(self, request: GrantRequest, indexes: list[int]) -> None:
        keys = self._lock_keys(request.name)
        calls = {}
        for index in indexes:
            args: list[str | bytes | int] = [
                request.owner,
                self._waiter_ttl,
                self._client_on(self.masters[index]),
                self._channel_prefix,
                request.name,
            ]
            calls[index] = [_REQUEUE.call(keys, args)]
        self._fan_out(calls)

    def _raise_token(self, request: GrantRequest, granted: dict[int, int], token: int) -> int:
        """Give ``token`` to the grants that drew less; how many masters hold it then. A
        master that gave ``token`` out itself (to a grant that reached it first, which may
        hold beside this one) refuses: the grant does not count, and is tried again."""
        lower = [index for index, drawn in granted.items() if drawn < token]
        holding = len(granted) - len(lower)
        if not lower:
            return holding
        # the lock's keys, the token floor, then the watchers' marker (see .lua)
        *lock_keys, watched = self._lock_keys(request.name)
        keys: list[str | bytes] = [*lock_keys, self._master_keys[1], watched]
        call = _RAISE_TOKEN.call(keys, [request.owner, token])
        results = self._fan_out({index: [call] for index in lower})
        for replies in results.values():
            if not isinstance(replies, Exception) and replies[0] == 1:
                holding += 1
        return holding

    def _mark(self, new: list[int], needed: int, name: str) -> bool:
        """Mark the masters that have no marker (see ``.common``); whether any was marked.
        Where another master has served for a while, they lost their data: they wait for the
        longest restart_delay any client of the deployment has, with the longest lock-delay
        granted with it (the longest a grant they may have forgotten could count), and take
        the greatest token floor of the others. Where none has, the deployment is new: they
        serve at once."""
        read = _MARK.call(self._master_keys, [b"", b"", b""])
        results = self._fan_out({master.index: [read] for master in self._targets(needed)})
        answered = marked = 0
        established = False
        floor = 0
        longest = self._restart_delay_ms
        for replies in results.values():
            if isinstance(replies, Exception) or isinstance(replies[0], Exception):
                continue
            answered += 1
            exists, serving_in = int(replies[0][0]), int(replies[0][1])
            marked += exists
            if exists and (serving_in > 0 or serving_in < -lua.NEW_DEPLOYMENT_MS):
                established = True
            floor = max(floor, int(replies[0][2]))
            longest = max(longest, int(replies[0][3]))
        if established:
            delay = longest
            _log.warning(
                "Redlock masters %s have lost their data (restarted without persistence?): "
                "they grant nothing for restart_delay (%g s)",
                ", ".join(self.masters[index].address for index in new),
                delay / 1000,
            )
            if marked < self._majority:
                _log.warning(
                    "only %d of the %d Redlock masters that kept their data answered: the "
                    "fencing tokens of the masters that lost theirs now rest on the clients' "
                    "clocks",
                    marked,
                    len(self.masters),
                )
        elif answered >= needed:
            delay = 0
        else:
            return False
        write = _MARK.call(self._master_keys, [delay, floor, longest])
        self._fan_out({index: [write] for index in new})
        return True

    def _release_on(self, name: str, owner: str, indexes: list[int]) -> tuple[int, int]:
        """Release ``owner``'s entries of ``name`` on the masters ``indexes``: (how many
        answered, how many removed a live grant)."""
        if not indexes:
            return 0, 0
        call = _RELEASE.call(self._lock_keys(name), [owner, self._channel_prefix, name, 1, 0, 0])
        results = self._fan_out({index: [call] for index in indexes})
        answered = removed = 0
        for replies in results.values():
            if isinstance(replies, Exception) or isinstance(replies[0], Exception):
                continue
            answered += 1
            removed += int(replies[0])
        return answered, removed

    def release(self, name: str, owner: str) -> bool:
        with self._guard:
            request = self._held.pop((name, owner), None)
        needed = self._majority if request is None else self._quorum_of(request)
        # every master, those left out after a failure too: one of them may hold the grant,
        # and a release that did not ask it would report a hold lost that was not
        everyone = [master.index for master in self.masters]
        answered, removed = self._release_on(name, owner, everyone)
        if answered < needed:
            raise BackendUnavailable(
                f"{answered} of {len(self.masters)} Redis masters answered the release, "
                f"{needed} are needed to tell whether it held; the others' entries run out",
                lock_name=name,
                backend=self.url,
            )
        return removed >= needed

    # -- leases ----------------------------------------------------------------------------

    def renew(self, name: str, owner: str, ttl: float) -> float | None:
        (granted,) = self.renew_all([Renewal(name, owner, ttl)], self.config.node_timeout)
        return granted

    def renew_all(self, renewals: Sequence[Renewal], timeout: float) -> list[float | None]:
        """Every lease on every master at once (one script call per ``RENEWALS_PER_CALL``
        leases, pipelined); a lease is kept where a quorum renewed it in time."""
        if not renewals:
            return []
        with self._guard:
            held = [self._held.get((renewal.name, renewal.owner)) for renewal in renewals]
        needs = [
            self._majority if request is None else self._quorum_of(request) for request in held
        ]
        commands = []
        for start in range(0, len(renewals), RENEWALS_PER_CALL):
            chunk = renewals[start : start + RENEWALS_PER_CALL]
            keys = [key for renewal in chunk for key in self.keys.renewal_keys(renewal.name)]
            args: list[str | int] = []
            for renewal in chunk:
                args += [renewal.owner, max(1, round(renewal.ttl * 1000))]
            commands.append(_RENEW_ALL.call(keys, args))
        least = min(needs)
        # Every master, as for a release: a renewal that left out a master holding the grant
        # could count too few and report the hold lost. Each round waits node_timeout; while
        # fewer than a quorum answered, those that answered late are asked again (a renewal
        # sets the lease anew: asking twice does no harm), for as long as any other call to
        # the masters would wait and within the leases' time, as a quorum slow for a moment
        # (a busy machine) must not cost the holds, nor a stopped master hold every renewal up.
        wait = min(timeout, self.masters[0].backend.config.client_options["socket_timeout"])
        sent_at = self.clock.now()
        pending = [master.index for master in self.masters]
        renewed = [0] * len(renewals)
        #: per lease, the masters that answered without renewing it
        lacking: list[list[int]] = [[] for _ in renewals]
        answered = 0
        results: dict[int, _Replies] = {}
        while True:
            left = wait - (self.clock.now() - sent_at)
            rounds = self._fan_out(
                {index: commands for index in pending}, min(self.config.node_timeout, left)
            )
            results.update(rounds)
            for index, replies in rounds.items():
                if isinstance(replies, Exception) or any(
                    isinstance(reply, Exception) for reply in replies
                ):
                    if not _timed_out(replies):
                        pending.remove(index)  # down (or refusing): asking again is no use
                    continue
                answered += 1
                pending.remove(index)
                flags = [flag for reply in replies for flag in reply]
                for position, flag in enumerate(flags):
                    if int(flag):
                        renewed[position] += 1
                    else:
                        lacking[position].append(index)
            if answered >= least or not pending or self.clock.now() - sent_at >= wait:
                break
        if answered < least:
            name = renewals[0].name if len(renewals) == 1 else None
            raise self._unavailable(answered, least, results, name, wait)
        # a lease some master that answered lacks is granted there anew (where its rule
        # allows): a hold granted by a bare quorum (the others left out after a failure, or
        # back from one) spreads to every master that serves, and survives the next loss.
        # Not a hold that so many masters say they lack that a quorum cannot be left without
        # them: it was lost (its leases ran out, or a force release took it), and granting it
        # anew would bring it back.
        short = [
            position
            for position, request in enumerate(held)
            if request is not None
            and renewed[position]
            and 0 < len(lacking[position]) <= len(self.masters) - needs[position]
        ]
        if short:
            regranted = self._grant_again(
                [(renewals[position], held[position], lacking[position]) for position in short]
            )
            for position, count in zip(short, regranted, strict=True):
                renewed[position] += count
        elapsed = self.clock.now() - sent_at
        return [
            renewal.ttl
            if count >= needed and elapsed + core.drift_margin(renewal.ttl) < renewal.ttl
            else None
            for renewal, count, needed in zip(renewals, renewed, needs, strict=True)
        ]

    def _quorum_of(self, request: GrantRequest) -> int:
        return quorum(len(self.masters), request.shared, request.limit)

    def _grant_again(
        self, leases: Sequence[tuple[Renewal, GrantRequest | None, list[int]]]
    ) -> list[int]:
        """For each lease some masters answered without (they missed its grant, were left out
        after a failure, lost it, or resumed after it ran out there) while others still hold
        it: grant it anew on those masters, where each can (the name is free there, the master
        serves), so that the loss of one master of a bare quorum does not cost the hold while
        a majority answers. How many masters granted each. A master grants only what its
        own grant rule allows, so this never makes a second holder; the token it draws is its
        own, above the hold's, which keeps later grants above both."""
        calls: dict[int, list[tuple[Any, ...]]] = {}
        asked: list[list[int]] = []
        proposal = time.time_ns() // 1000
        for renewal, request, masters in leases:
            assert request is not None
            asked.append(masters)
            for index in masters:
                # no place in line: granted now or not at all
                call = self._grant_call(request, renewal.ttl, False, index, proposal)
                calls.setdefault(index, []).append(call)
        results = self._fan_out(calls)
        sent = {index: 0 for index in calls}
        counts = []
        for masters in asked:
            count = 0
            for index in masters:
                replies = results.get(index)
                position = sent[index]
                sent[index] += 1
                if replies is None or isinstance(replies, Exception):
                    continue
                reply = replies[position]
                if not isinstance(reply, Exception) and int(reply[0]) == 1:
                    count += 1
            counts.append(count)
        return counts

    # -- waiting ---------------------------------------------------------------------------

    def watch(self, name: str, owner: str) -> RedlockWatch:
        return RedlockWatch(self, name, owner)

    def subscribe_in_background(self, name: str) -> None:
        """Start the wake-up subscriptions not made yet, one worker per master at most."""
        with self._guard:
            if self._closed:
                return
            for master in self.masters:
                if master.subscriber is None and not master.backend.wakeups.subscribed():
                    master.subscriber = spawn(
                        functools.partial(self._subscribe, master, name),
                        f"tumbler-redlock-subscribe-{master.index}",
                    )

    def _subscribe(self, master: _Master, name: str) -> None:
        try:
            master.backend.wakeups.subscribe(name)
        except Exception as error:  # a worker's end: whatever went wrong, waiters re-check
            _log.debug("Redlock master %s: no wake-ups for now: %s", master.address, error)
        else:
            # the waiters try again, now naming the client in their entries on this master
            self.hub.notify_all()
        finally:
            with self._guard:
                master.subscriber = None

    # -- watching a lock's state -------------------------------------------------------------

    def watch_state(self, name: str) -> RedlockStateWatch:
        return RedlockStateWatch(self, name)

    def follow_state(self, name: str) -> None:
        """Subscribe to the channel on which each master publishes the lock ``name``'s changes
        (once per master and client, confirmed by the master: see the Redis backend's
        ``follow_state``), then set the marker that makes them publish, for ``WATCHED_MS``, on
        every master that answers. Masters left out after a failure are skipped (the next
        call, a third of ``WATCHED_MS`` later, tries them again), and one whose subscription
        fails is left out as after any failed call. ``BackendUnavailable`` if
        fewer than a majority could be subscribed or marked: a change made on a quorum might
        then reach no master the client hears."""
        needed = self._majority
        now = time.monotonic()
        followed = 0
        failures: list[str] = []
        for master in self.masters:
            if master.out_until > now:
                failures.append(f"{master.address}: left out after a failure")
                continue
            try:
                master.backend.wakeups.follow_state(name)
            except BackendUnavailable as error:
                master.failed()
                failures.append(f"{master.address}: {error.message}")
                continue
            followed += 1
        if followed < needed:
            raise BackendUnavailable(
                f"{followed} of {len(self.masters)} Redis masters could be subscribed to for "
                f"the lock's changes, {needed} are needed: {'; '.join(failures)}",
                lock_name=name,
                backend=self.url,
            )
        self._everywhere(name, ("SET", self.keys.watched(name), b"1", "PX", WATCHED_MS))

    # -- operators -------------------------------------------------------------------------

    def _everywhere(self, name: str | None, call: tuple[Any, ...]) -> list[Any]:
        """``call``'s reply from every master that answered, a majority at least."""
        needed = self._majority
        wait = self.masters[0].backend.config.client_options["socket_timeout"]
        results = self._fan_out({master.index: [call] for master in self._targets(needed)}, wait)
        replies = []
        for answer in results.values():
            if isinstance(answer, Exception):
                continue
            if isinstance(answer[0], redis_errors.ResponseError):
                raise tumbler_error(answer[0], self.url, name)
            replies.append(answer[0])
        if len(replies) < needed:
            raise self._unavailable(len(replies), needed, results, name, wait)
        return replies

    def inspect(self, name: str) -> LockState:
        """The holders a quorum of masters agree on (with the lease a quorum still gives each),
        and the waiters in line on a quorum of the masters: an entry left on fewer (by a try
        that reached them later than the others, then stopped, or that is still on its way to
        the others) holds up no grant, and runs out. A waiter is counted once it is in line
        where it can be granted, so that a request made after that cannot be ahead of it on
        a quorum (the arrival order a fair lock keeps). A grant that a quorum keeps, though
        live on fewer (lapsed on the others: see the Redis backend's ``.lua``), is lapsed,
        with the time a quorum still keeps it."""
        replies = self._everywhere(name, _INSPECT.call([self.keys.entries(name)], []))
        # per grant's owner, from each master that has it: (token, shared, limit, seconds
        # its lease has left or None once it lapsed, seconds the master keeps it, holder)
        grants: dict[str, list[tuple[int, bool, int, float | None, float, str]]] = {}
        waiting: dict[str, tuple[bool, int, int]] = {}
        malformed = 0
        for raw in replies:
            now_ms, malformed = int(raw[0]), max(malformed, int(raw[1]))
            for index in range(2, len(raw), 2):
                owner = _text(raw[index])
                entry = redis_lua.parse_entry(owner, _text(raw[index + 1]))
                if entry.token is None:
                    lines = waiting.get(owner, (entry.shared, entry.limit, 0))[2]
                    waiting[owner] = (entry.shared, entry.limit, lines + 1)
                    continue
                live = (entry.expires_ms - now_ms) / 1000
                kept = (entry.expires_ms + entry.delay_ms - now_ms) / 1000
                grants.setdefault(owner, []).append(
                    (
                        entry.token,
                        entry.shared,
                        entry.limit,
                        None if entry.lapsed(now_ms) else live,
                        kept,
                        entry.holder,
                    )
                )
        state = LockStateBuilder(name)
        state.malformed = malformed
        found = []
        for owner, seen in grants.items():
            token, shared, limit, _live, _kept, holder = max(seen, key=lambda grant: grant[0])
            needed = quorum(len(self.masters), shared, limit)
            waiting.pop(owner, None)  # a grant on some masters: not a waiter for anyone
            if len(seen) < needed:
                continue
            lives = sorted((grant[3] for grant in seen if grant[3] is not None), reverse=True)
            if len(lives) >= needed:
                found.append((token, shared, limit, lives[needed - 1], holder, False))
            else:
                kepts = sorted((grant[4] for grant in seen), reverse=True)
                found.append((token, shared, limit, kepts[needed - 1], holder, True))
        for token, shared, limit, left, holder, lapsed in sorted(found):
            state.add(
                token=token,
                shared=shared,
                limit=limit,
                expires_in=left,
                holder=holder,
                lapsed=lapsed,
            )
        for shared, limit, lines in waiting.values():
            if lines >= quorum(len(self.masters), shared, limit):
                state.add(token=None, shared=shared, limit=limit, expires_in=0.0, holder="")
        return state.build()

    def lock_names(self) -> set[str]:
        names: set[str] = set()
        answered = 0
        for master in self.masters:
            try:
                names |= master.backend.lock_names()
            except BackendUnavailable:
                continue
            answered += 1
        needed = self._majority
        if answered < needed:
            raise BackendUnavailable(
                f"{answered} of {len(self.masters)} Redis masters answered, {needed} are needed",
                backend=self.url,
            )
        return names

    def force_release(self, name: str, note: str) -> int:
        """Remove every grant of ``name`` on every master that answers (a majority at least);
        how many holds that ended, as the master that removed most counts them."""
        keys = [*self.keys.lock_keys(name), self.keys.evicted(name), self.keys.watched(name)]
        args: list[str | int] = [
            self.keys.client_channel_prefix(),
            name,
            1,
            0,
            0,
            note,
            redis_lua.EVICTED_GRACE_MS,
        ]
        replies = self._everywhere(name, _FORCE_RELEASE.call(keys, args))
        return max(int(reply) for reply in replies)

    def evicted(self, name: str, owner: str) -> str | None:
        replies = self._everywhere(name, _EVICTED.call([self.keys.evicted(name)], [owner]))
        for reply in replies:
            if reply is not None:
                return _text(reply)
        return None

    def close(self) -> None:
        with self._guard:
            self._closed = True
        # the subscriptions under way end before the connections they use are closed: one
        # that went on after would make a connection that nobody closes
        for master in self.masters:
            master.backend.wakeups.stop()
        for master in self.masters:
            subscriber = master.subscriber
            if subscriber is not None:
                join(subscriber)
        for master in self.masters:
            master.close()


def _timed_out(reply: _Replies) -> bool:
    """Whether a master's reply is that it did not answer in time (not that it is down)."""
    return isinstance(reply, redis_errors.TimeoutError | TimeoutError)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
