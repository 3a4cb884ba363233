"""A client of etcd's v3 JSON gateway (``/v3/...``): what the etcd backend asks of etcd, in
etcd's own terms (ranges, transactions, leases, watches), over the HTTP seam
(:mod:`..http`). No gRPC and no protobuf: the gateway takes and gives JSON.

What the gateway does that a client must know: keys and values are base64; 64-bit numbers
come back as JSON strings, and fields that are zero or false are left out; an error is a
reply with an HTTP error status and ``{"error", "message", "code"}``, ``code`` a gRPC status;
a watch is one long request whose reply is one JSON object per line, and cannot be cancelled
but by closing its connection (so each watch stream has a connection of its own).

A gateway knows every member's URL. A call goes to the member that answered last (at first,
one picked at random) and has a budget (the client's request timeout, or the caller's); each
attempt of a call that may be tried again gets a share of it (:func:`attempt_bound`), so
that a member that takes a request and never answers (stopped, cut off, or waiting for a
leader that died) costs a part of the budget, not all of it. A member that failed is left
for the next (also by the calls that follow), and the members are tried in turn, again and
again after a short pause, until the budget is spent: a call that could not be sent (its
connection refused) always, and one the caller marks ``idempotent`` (a read, a keep-alive,
a transaction guarded so that doing it twice is doing it once) also when its reply was lost
or etcd answered that it has no leader or timed out. With a user and password the gateway
logs in (``/v3/auth/authenticate``) and sends the token with each call, logging in again
when etcd says the token is no longer valid.
"""

from __future__ import annotations

import contextlib
import json
import random
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, NamedTuple

from ...._acompat import asleep_real
from ..http import (
    HTTPFailure,
    LineStream,
    aclose_client,
    aopen_client,
    apost,
    astream_lines,
    interrupt,
    not_sent,
)
from ..wire import (
    NOT_FOUND,
    OUT_OF_RANGE,
    UNAUTHENTICATED,
    UNAVAILABLE,
    EtcdError,
    GatewayUnavailable,
    WatchEvent,
    WatchNews,
    WatchRequest,
    b64,
    code_of,
    error_of,
    kv_of,
    kvs,
)

__all__ = ["AsyncGateway", "AsyncWatchStream", "LeaseAnswer", "attempt_bound"]

#: the most attempts a call's budget is shared among: with three members or more, a silent
#: member leaves two thirds of the budget to the others
ATTEMPTS_PER_BUDGET = 3
#: the pause after a round in which no member answered, doubled each round up to the last
ROUND_PAUSES = (0.05, 0.1, 0.2, 0.4)


def attempt_bound(budget: float, members: int) -> float:
    """How long one attempt of a call that may be tried again, with ``budget`` seconds, may
    wait for its reply: a share that leaves time for an attempt on another of the
    ``members``; the whole budget with one member (its reply is as likely to come late as an
    answer to the same request sent again, which would only add to its load)."""
    return budget / min(members, ATTEMPTS_PER_BUDGET)


class LeaseAnswer(NamedTuple):
    """etcd's answer to a lease's grant or keep-alive."""

    id: int
    #: the TTL granted, in whole seconds; 0: the lease is gone
    ttl: int
    #: the raft term of the member that answered (0 if it did not say): one leader per term,
    #: and only the leader keeps leases, so the term names the leader that timed this TTL
    term: int


def _term(reply: dict[str, Any]) -> int:
    return int(reply.get("header", {}).get("raft_term", 0))


class AsyncGateway:
    """The members' gateway, as one client (``endpoints``: ``http[s]://HOST:PORT`` each)."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        tls: ssl.SSLContext | None = None,
        credentials: tuple[str, str] | None = None,
        timeout: float = 5.0,
    ) -> None:
        if not endpoints:
            raise ValueError("give at least one endpoint")
        self.endpoints = list(endpoints)
        self._tls = tls
        self._credentials = credentials
        self._timeout = timeout
        # clients start on a member picked at random, so that they spread over the cluster
        self._current = random.randrange(len(self.endpoints))
        self._clients: dict[tuple[str, str], Any] = {}
        self._token: str | None = None
        self._lock = threading.Lock()
        self._closed = False
        #: called with a member's index when a call finds it failing (from any thread)
        self._leaving: list[Callable[[int], None]] = []
        #: the highest raft term any reply of a member has carried
        self.term = 0
        #: the highest revision any reply of a member has carried: every write etcd applies
        #: from now on gets a higher one
        self.revision = 0

    # -- calls -----------------------------------------------------------------------------

    def _client(self, endpoint: str, purpose: str = "calls") -> Any:
        """The client for ``purpose`` (``"calls"``, or ``"watches"``, whose connections
        each carry one stream and are closed to end it) on ``endpoint``: made once, so that
        the calls that follow reuse its connections."""
        with self._lock:
            if self._closed:
                # a client made now would never be closed, nor its connections
                raise GatewayUnavailable("the client is closed")
            client = self._clients.get((endpoint, purpose))
            if client is None:
                client = aopen_client(endpoint, self._tls, self._timeout)
                self._clients[(endpoint, purpose)] = client
        return client

    async def _headers(
        self, endpoint: str, fresh: bool = False, timeout: float | None = None
    ) -> dict[str, str]:
        if self._credentials is None:
            return {}
        if self._token is None or fresh:
            user, password = self._credentials
            status, reply = await apost(
                self._client(endpoint),
                "/v3/auth/authenticate",
                {"name": user, "password": password},
                {},
                timeout,
            )
            if status != 200:
                raise error_of(reply)
            self._token = str(reply["token"])
        return {"Authorization": self._token}

    async def call(
        self,
        path: str,
        body: Any,
        *,
        idempotent: bool = False,
        timeout: float | None = None,
        unanswered: Callable[[], None] | None = None,
    ) -> Any:
        """POST ``body`` to ``path`` on a member; etcd's reply, or :class:`EtcdError`.
        ``timeout`` (the client's request timeout if None) bounds the whole call; tried on
        the members in turn while it lasts, when the attempt could not be sent or, for an
        ``idempotent`` call, when its reply was lost or etcd could not serve it then.

        ``unanswered`` is called at each attempt that may yet take effect although the call
        goes on without it (or fails, or is cancelled): one sent whose reply did not come,
        and one etcd could not serve then, which it may still apply (a proposal that timed
        out). A request held on a silent path reaches its member when the path comes back,
        however long after: the caller's guards must keep it from undoing what came since."""
        if self._closed:
            raise GatewayUnavailable("the client is closed")
        budget = self._timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        # a call that cannot be tried again after a lost reply waits for its reply as long
        # as the budget allows: moving on early would only fail it sooner
        bound = attempt_bound(budget, len(self.endpoints)) if idempotent else budget
        failures: list[str] = []
        index = self._current
        pauses = iter(ROUND_PAUSES)
        pause = ROUND_PAUSES[0]
        tried = 0
        while True:
            if tried and tried % len(self.endpoints) == 0:
                # a whole round without an answer: the members may be electing a leader
                pause = next(pauses, pause)
                if deadline - time.monotonic() <= pause:
                    break
                await asleep_real(pause)
            left = deadline - time.monotonic()
            if left <= 0:
                break
            endpoint = self.endpoints[index]
            tried += 1
            try:
                reply = await self._call_once(endpoint, path, body, min(left, bound))
            except HTTPFailure as failure:
                if unanswered is not None and not not_sent(failure):
                    unanswered()
                failures.append(f"{endpoint}: {failure!r}")
                self.leave(index)
                if not (idempotent or not_sent(failure)):
                    raise GatewayUnavailable(f"{path}: the reply was lost ({failure!r})") from None
            except EtcdError as error:
                if unanswered is not None and error.code == UNAVAILABLE:
                    unanswered()
                if not (idempotent and error.code == UNAVAILABLE):
                    raise
                failures.append(f"{endpoint}: {error.message}")
                self.leave(index)
            except BaseException:
                # cancelled (or interrupted) while the request may be on its way
                if unanswered is not None:
                    unanswered()
                raise
            else:
                self._current = index
                self._saw(reply)
                return reply
            index = (index + 1) % len(self.endpoints)
        raise GatewayUnavailable(
            f"{path}: no member answered within {budget:g} s: {'; '.join(failures[-6:])}"
        )

    def _saw(self, reply: Any) -> None:
        if isinstance(reply, dict):
            answer = reply.get("result", reply)
            term = _term(answer)
            if term > self.term:
                self.term = term
            revision = int(answer.get("header", {}).get("revision", 0))
            if revision > self.revision:
                self.revision = revision

    def leave(self, index: int) -> None:
        """Member ``index`` failed: the calls that follow start on the next one, and what
        :meth:`on_leave` registered learns of it."""
        if self._current == index:
            self._current = (index + 1) % len(self.endpoints)
        for listener in list(self._leaving):
            listener(index)

    def on_leave(self, listener: Callable[[int], None]) -> None:
        """Call ``listener`` with a member's index whenever a call finds that member failing
        (a watch stream on it may be as silent as the call was); it must not block."""
        self._leaving.append(listener)

    async def _call_once(self, endpoint: str, path: str, body: Any, timeout: float | None) -> Any:
        client = self._client(endpoint)
        headers = await self._headers(endpoint, timeout=timeout)
        status, reply = await apost(client, path, body, headers, timeout)
        if status != 200 and code_of(reply) == UNAUTHENTICATED and self._credentials is not None:
            # the token ran out (or the member restarted): log in again, once
            headers = await self._headers(endpoint, True, timeout)
            status, reply = await apost(client, path, body, headers, timeout)
        if status != 200:
            raise error_of(reply)
        return reply

    # -- etcd's requests, in its own terms --------------------------------------------------

    async def range(
        self, key: bytes, range_end: bytes | None = None, *, by_creation: bool = False
    ) -> tuple[int, list[dict[str, Any]]]:
        """The revision read at, and the keys from ``key`` to ``range_end`` (``key`` alone
        if None), by creation order if asked, each ``{"key", "value", "create_revision",
        "mod_revision", "lease"}`` decoded. The creation order is made here: etcd sorts a
        range it is asked to sort in memory, all of it, whatever the limit."""
        body: dict[str, Any] = {"key": b64(key)}
        if range_end is not None:
            body["range_end"] = b64(range_end)
        reply = await self.call("/v3/kv/range", body, idempotent=True)
        found = kvs(reply)
        if by_creation:
            found.sort(key=lambda kv: int(kv["create_revision"]))
        return int(reply["header"]["revision"]), found

    async def txn(
        self,
        compare: list[dict[str, Any]],
        success: list[dict[str, Any]],
        failure: list[dict[str, Any]],
        *,
        idempotent: bool = False,
        timeout: float | None = None,
        unanswered: Callable[[], None] | None = None,
    ) -> tuple[bool, int, list[dict[str, Any]]]:
        """One transaction: whether ``compare`` held, the revision after it, and the
        responses of the branch that ran (as the gateway gives them). Tried again after a
        lost reply only if ``idempotent``: the caller's guards make a second run of it give
        the answer the first would have (a read; a put only if the key does not exist, with
        a read of what is there either way). ``unanswered``: as :meth:`call` says."""
        reply = await self.call(
            "/v3/kv/txn",
            {"compare": compare, "success": success, "failure": failure},
            idempotent=idempotent,
            timeout=timeout,
            unanswered=unanswered,
        )
        return (
            bool(reply.get("succeeded", False)),
            int(reply["header"]["revision"]),
            list(reply.get("responses", [])),
        )

    async def grant_lease(self, ttl: int) -> tuple[int, int]:
        """A new lease of ``ttl`` seconds: its id and the TTL etcd granted. Tried again after
        a lost reply: a lease granted unheard has nothing attached and runs out by itself."""
        answer = await self.lease_grant(ttl)
        return answer.id, answer.ttl

    async def lease_grant(self, ttl: int) -> LeaseAnswer:
        """:meth:`grant_lease`, with the raft term of the member that answered."""
        reply = await self.call("/v3/lease/grant", {"TTL": ttl}, idempotent=True)
        if reply.get("error"):
            raise EtcdError(0, str(reply["error"]))
        return LeaseAnswer(int(reply["ID"]), int(reply["TTL"]), _term(reply))

    async def keep_alive(self, lease: int, timeout: float | None = None) -> int:
        """Renew ``lease``; the TTL it has now, 0 if it is gone (expired or revoked)."""
        return (await self.lease_keep_alive(lease, timeout)).ttl

    async def lease_keep_alive(self, lease: int, timeout: float | None = None) -> LeaseAnswer:
        """:meth:`keep_alive`, with the raft term of the member that answered (``ttl`` 0:
        gone)."""
        reply = await self.call(
            "/v3/lease/keepalive", {"ID": lease}, idempotent=True, timeout=timeout
        )
        result = reply.get("result", {})
        return LeaseAnswer(lease, int(result.get("TTL", 0)), _term(result))

    async def revoke(self, lease: int) -> bool:
        """Revoke ``lease`` (every key attached to it is deleted); False if it was gone."""
        try:
            await self.call("/v3/lease/revoke", {"ID": lease}, idempotent=True)
        except EtcdError as error:
            if error.code == NOT_FOUND:
                return False
            raise
        return True

    async def leases(self) -> list[int]:
        """Every lease the cluster has."""
        reply = await self.call("/v3/lease/leases", {}, idempotent=True)
        return [int(lease["ID"]) for lease in reply.get("leases", [])]

    def watch_stream(self) -> AsyncWatchStream:
        """A watch stream, not yet open (no I/O): its ``interrupt()`` works from now on."""
        return AsyncWatchStream(self)

    @contextlib.asynccontextmanager
    async def watch(self, requests: Sequence[WatchRequest]) -> AsyncIterator[AsyncWatchStream]:
        """Watch every one of ``requests`` on one new stream, open for the block."""
        stream = self.watch_stream()
        async with stream.open(requests):
            yield stream

    async def close(self) -> None:
        with self._lock:
            self._closed = True
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await aclose_client(client)


class AsyncWatchStream:
    """One watch stream of an :class:`AsyncGateway`: several watches on one connection of
    its own (the gateway cannot cancel a watch but by closing its connection)."""

    def __init__(self, gateway: AsyncGateway) -> None:
        self._gateway = gateway
        self._stream = LineStream()
        #: how many of its watches etcd has confirmed
        self.created = 0
        #: the index of the member it is opened on (once :meth:`open` has begun)
        self.member: int | None = None

    def interrupt(self) -> None:
        """End the stream now, from any thread, at whatever point it is: opening it or
        ``events()`` fails at once (``HTTPFailure``)."""
        interrupt(self._stream)

    @contextlib.asynccontextmanager
    async def open(self, requests: Sequence[WatchRequest]) -> AsyncIterator[None]:
        """Watch every one of ``requests`` from their revisions, for the block (the
        connection is closed at its end)."""
        gateway = self._gateway
        self.member = gateway._current
        endpoint = gateway.endpoints[self.member]
        client = gateway._client(endpoint, "watches")
        headers = await gateway._headers(endpoint)
        messages = [request.message() for request in requests]
        async with astream_lines(client, "/v3/watch", messages, headers, self._stream):
            yield

    async def events(self) -> AsyncIterator[WatchNews]:
        """What the stream's watches tell, as it comes: each watch's creation, then the
        batches of events it sees (progress notes are left out); raises :class:`EtcdError`
        for a cancelled watch (its start revision was compacted away)."""
        async for news in _events(self._stream.lines, self):
            yield news


async def _events(lines: AsyncIterator[str], stream: AsyncWatchStream) -> AsyncIterator[WatchNews]:
    async for line in lines:
        if not line.strip():
            continue
        message = json.loads(line)
        if "error" in message:
            raise error_of(message["error"])
        result = message.get("result", {})
        if result.get("canceled"):
            compacted = int(result.get("compact_revision", 0))
            raise EtcdError(OUT_OF_RANGE, f"the watch was cancelled (compacted to {compacted})")
        watch_id = int(result.get("watch_id", 0))
        revision = int(result.get("header", {}).get("revision", 0))
        if result.get("created"):
            stream.created += 1
            yield WatchNews(watch_id, revision, created=True)
            continue
        events = []
        for event in result.get("events", []):
            kv = kv_of(event.get("kv", {}))
            events.append(
                WatchEvent(
                    key=kv["key"],
                    deleted=event.get("type") == "DELETE",
                    revision=kv["mod_revision"],
                    create_revision=kv["create_revision"],
                    value=kv["value"],
                )
            )
        if events:  # not a progress note
            yield WatchNews(watch_id, revision, created=False, events=tuple(events))
