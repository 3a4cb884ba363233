"""``zookeeper://``: locks in ZooKeeper (extra ``tumbler-locks[zookeeper]``, client: kazoo).

URL grammar::

    zookeeper://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/BASE/PATH][?OPTIONS]
    zookeepers://...         TLS, to the ensemble's secure client port; the certificate is verified

The hosts are the ensemble's members (port 2181 by default); the path is the node under which
lock nodes live (default ``/tumbler``). Options: ``session_timeout`` (seconds, default 10),
``connect_timeout`` (seconds to wait for the first connection, default 10),
``request_timeout`` (seconds any one call may wait for the server, default 5) and
``max_waiters`` (default 10000: the most waiters one lock queues; an acquire whose entry finds
that many waiting ahead of it deletes it and gets ``TooManyWaiters``: each entry counts the
ones created before it, so entries that arrive together are counted too), and for
``zookeepers://``: ``ssl_ca_certs`` (the CA file that signed the servers' certificates; the
system's CAs otherwise), ``ssl_certfile`` and ``ssl_keyfile`` (a client certificate, for servers
with ``ssl.clientAuth=need``; the key may be in the certificate's file), ``ssl_check_hostname``
(default true: the certificate must name the host as the URL writes it).

``zookeeper://`` travels in clear: whoever sees the traffic reads the digest password, the lock
names and the holder descriptions, and can inject requests into the session. Use
``zookeepers://`` where the network is not trusted (ZooKeeper 3.5+ with
``secureClientPort`` and ``serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory``).

Credentials and ACLs
    With ``USER:PASSWORD`` the client authenticates with the ``digest`` scheme, and every node
    it creates is readable and writable by that user only; a client lacking rights on existing
    nodes gets ``PermissionDenied``. Nodes that exist already may have been made by someone
    else with open ACLs (``world:anyone``), and whoever may create or delete children of a lock
    node can delete a holder's entry or put one of their own ahead of it: take the lock. So a
    client with credentials checks the ACL of the base node when it connects and of each lock
    node the first time it uses it, and refuses (``ConfigurationError`` naming the node and its
    ACL) a node on which anyone but its own user may do more than read. The lock node's check
    travels in the same round trip as the grant (its answer is read before the grant is
    given, and a refused grant's entry is deleted at once); a lock node the client already
    checked costs nothing (see ``_entry`` in the backend). Without credentials nothing is
    checked: such a client's own nodes are open to everyone.

Node layout
    Lock ``name`` is the container node ``BASE/<name, percent-encoded>``. Each acquisition
    creates one ephemeral sequential child, named ``_c_<owner hash>-<kind><sequence>`` where
    kind is ``lock-`` (exclusive: a mutex or a write lock), ``__READ__`` (a read lock) or
    ``sem-<permits>-`` (a semaphore). The ``_c_<id>-`` prefix is the protection mode of
    Curator: a create whose reply was lost is found again by its owner hash on the next try
    rather than left behind as an orphan that blocks the line. The node's data is JSON with
    the holder's description and lease, for ``tumbler status``. The lock node is a
    *container* (ZooKeeper 3.5.3 and newer), which the server deletes once its last child is
    gone, so lock names that are no longer used do not pile up.

    ``force_release`` leaves its note for each owner it evicted in the persistent node
    ``BASE/#evicted/<name, percent-encoded>`` (no lock node can be named ``#evicted``: "#" is
    always encoded), as JSON: the notes' texts, and for each evicted owner's hash the index of
    its note and the wall-clock time after which it may be dropped: the evicted grant's
    session timeout, plus ``NOTE_GRACE`` for the hosts' clocks. The notes and the deletion of
    the entries are one transaction. Each ``force_release`` of the name drops the notes whose
    time has passed, and the node once none is left; with credentials it is made with the
    user's ACL, as every other node.

Lock-delay
    A grant made with a ``lock_delay`` (``GrantRequest.lock_delay`` above 0) has a
    *tombstone*: a persistent child of the lock node beside its entry, named ``~lapsed-``
    and the entry's sequence number (``TOMB_PREFIX``: no entry can be named so, Curator and
    kazoo's recipes sort a child without their kinds' names after every entry, and the
    line's parser skips it), with the user's ACL as every node, made after the grant is
    decided and before it is returned, with JSON data: ``entry`` (the entry's node name),
    ``holder``, ``lock_delay``, ``token`` (the entry's czxid), ``ttl`` (the lease granted)
    and ``lapsed`` (false). It is not the session's: when the entry goes other than by a
    release (the session ended; the client gave the hold up, ``lapse``) the tombstone stays,
    and a tombstone without its entry is a lapsed grant. A release deletes the entry and its
    tombstone in one transaction (``multi``), so a released grant leaves nothing behind;
    ``lapse`` deletes the entry and stamps the tombstone (sets ``lapsed``) in one. Otherwise
    the first client that finds the tombstone without its entry (a waiter woken by the
    entry's deletion, an acquirer, ``status``) stamps it, by a setData checked against the
    version it read: the stamp's ``mtime``, on the server's clock, is when the grant's end
    was noticed. The delay runs from that, but never from before the end of the lease
    granted (``ctime`` plus ``ttl``).

    The line's one read (the children of the lock node, which every decision makes anyway)
    lists the tombstones too, so a name without any costs nothing more, and a grant made
    without a lock-delay makes none: its acquire and release cost what they did before. The
    same listing tells a live grant's tombstone (its entry listed) from a lapsed one (its
    entry gone: entries never come back), so only lapsed ones are read. If the line would
    grant, each lapsed grant counts as the grant it was, ahead of the line. The delay left
    is measured against the server's clock: a write of empty data to the lock node (its
    ``mtime``) tells the server's time. A tombstone whose delay ended is deleted by whoever
    finds it (checked against its version). A waiter held back by lapsed grants only sets a
    timer for the first delay's end (nothing in the store announces it) and a children
    watch on the lock node (a force release deletes the tombstones; a holder may leave).
    Tombstones keep a container lock node alive while they last, and the server deletes it
    once the last is gone. Children watches on the lock node (the first semaphore waiter's,
    a state watcher's) fire at a tombstone's creation and deletion: only for names used
    with a lock-delay. ``status`` reports lapsed grants with the delay left as measured on
    its host's wall clock against the stamp (at most the delay). ``force_release`` deletes
    every tombstone of the name in its transaction. A tombstone whose data is not such a
    record blocks nothing, and a decision deletes it.

    A release whose transaction cannot reach the server leaves the entry to be deleted when
    the connection is back (as any release) and its tombstone: the grant then counts as
    lapsed, which it is (the holder could not tell the ensemble it was done). A holder that
    cannot reach the server when it gives its hold up leaves the tombstone unstamped, to be
    stamped when the entry's end is noticed: the delay starts later, never sooner.

Who holds the lock
    Grants follow the order of the sequence numbers, as in Curator's recipes: an exclusive
    entry holds the lock when no entry is ahead of it; a read entry when no exclusive entry is
    ahead; a semaphore entry when fewer than ``permits`` entries are ahead. An entry never
    loses that position (entries only ever leave the line ahead of it), so the decision made
    from one read of the children stays true. Every request is served in arrival order
    (``fair`` makes no difference here), and a waiter is woken by a watch on exactly the entry
    that blocks it (for a mutex its predecessor, for a reader the nearest writer ahead), so a
    release wakes one waiter, not all of them. The first semaphore waiter watches the line; the
    ones behind it watch their predecessor, which touches its node when it is granted.
    A member answers reads from what it has applied, which may be behind the leader: a waiter
    that reads the line again (woken, or retrying) sends a ``sync`` before the read, in the
    same round trip (one more request, to the leader), and a grant is never decided on a read
    made apart from its entry's creation without one, or it could take a lock the leader has
    given to another while its own session's expiry was on its way. Entries of the client's
    own session and owner that it does not know of (a create whose reply was lost, applied
    after the retry looked for it) are deleted when the line is read.

Fencing tokens
    The token of a grant is the creation zxid (``czxid``) of its entry: ZooKeeper numbers every
    change of the ensemble in one increasing sequence that survives restarts and leader
    elections, and grants follow creation order, so tokens strictly increase per name, also
    after the lock node was deleted and created again (its sequence numbers restart then).

Sessions and leases
    An entry lives as long as the client's session. The session ends when the client closes
    it, or when the ensemble has heard nothing from the client for ``session_timeout`` (the
    server may narrow the timeout to its ``minSessionTimeout``..``maxSessionTimeout``; the
    negotiated value is used). A lock's ``ttl`` is therefore capped at the session timeout:
    ``hold.ttl`` is ``min(ttl, session timeout)``, and ``inspect`` reports each holder as
    bound to its session (``HolderInfo.session``) with that session's timeout, which the entry
    records, as its ``expires_in``. Without renewals the client deletes its own entry when the
    lease runs out; if the client dies, the ensemble deletes it when the session expires, so a
    dead holder frees its locks after ``session_timeout``, whatever their ``ttl``.

Renewing
    So renewing a lease means confirming the session, not each entry: ``renew_all`` costs one
    round trip however many leases it renews. A grant is confirmed when its entry was made in
    the current session, a request sent after the renewal began was answered in that session
    (the server restarts the session's timeout when it hears a request, and answers a
    session's requests in order), and the entry has not been deleted since. Deletions are
    learnt without reads: each renewed entry of the client carries a deletion watch, and
    ZooKeeper delivers a watch event before any answer that reflects the change, so a deletion
    made before the probe was answered is known when it is. The watch is set by a grant's
    first renewal, not by the grant: that renewal reads the entry in its probe's round trip
    (an entry found with its czxid was never deleted, whatever happened before), so an
    uncontended acquire and release costs three requests (create, one read of the line,
    delete), not four. kazoo drops every watch when a connection breaks; the next renewal
    reads those entries the same way and watches them again. Concurrent renewals share one
    probe, never one sent before they began.

The shortest lease
    ``Capabilities.min_ttl`` is 0.5 s. A renewal is due a third of the way into the lease and
    has the other two thirds, less the drift margin (1% + 2 ms), to come back: 326 ms at
    0.5 s. Its probe waits behind the session's own writes still in the server's pipeline
    (each committed after an fsync of the transaction log and, in an ensemble, a quorum of
    acknowledgements) and behind a probe already on its way. Measured on a loaded 2-core VM,
    a renewal took at most 10 ms on an idle client and 85 ms while 10,000 leases were granted
    and renewed at once (``bench/many_leases.py``): 0.5 s leaves four times that, room for a
    stall of the server's JVM. A shorter lease buys nothing here: the server measures sessions
    in ticks (``tickTime``, 2 s by default) and ends one no sooner than two ticks after it last
    heard from the client, so a dead holder's locks are freed after the session timeout
    whatever the ``ttl``; a shorter ``ttl`` only makes a live holder give its hold up on any
    hiccup. For the same reason a ``session_timeout`` below 0.5 s is refused.

How a hold can be lost here
    When the connection drops (kazoo's SUSPENDED), the hold is *in doubt*: ``hold.held`` is
    False and ``hold.in_doubt`` True until a renewal on the reconnected session confirms it.
    When the session expires (LOST), every hold of the client is lost at once (``on_lost``,
    ``LockLost``). An operator's ``force_release`` deletes the entries; their holders learn it
    at their next renewal. A renewal is a read answered by the server the client is connected
    to; a member cut off from the quorum stops serving within ``syncLimit`` ticks, well before
    sessions it hosted can expire at the leader.

Connecting and logging
    The first connection waits up to ``connect_timeout``, but ends as soon as every host has
    refused it (nothing listens there) or, over TLS, a certificate (the client refused the
    server's, or the server the client's: neither mends itself), with a message that says so
    and names the hosts.
    kazoo logs the requests it sends at DEBUG, among them the digest credentials and the
    session's password: the logger tumbler gives it takes every credential out.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import functools
import hashlib
import json
import logging
import re
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar
from urllib.parse import quote, unquote

from kazoo import exceptions as kazoo_errors  # the driver: without it, MissingDependency
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.handlers.utils import create_tcp_connection
from kazoo.protocol.serialization import Create2
from kazoo.protocol.states import Callback, EventType, WatchedEvent
from kazoo.security import ACL, Permissions, make_digest_acl_credential

from ..._core import MAX_LOCK_DELAY, MAX_TTL, Entry
from ..._url import BackendURL
from ...errors import BackendUnavailable, ConfigurationError, InvalidURL, PermissionDenied
from ..kit.errors import ErrorMap, Rule
from ..kit.options import (
    DEFAULT_MAX_WAITERS,
    address,
    host_list,
    host_port,
    seconds,
    waiter_count,
)
from ..kit.tls import TLS_OPTIONS, TLSConfig, tls_options
from ..kit.tls import tls_context as kit_tls_context
from . import DEFAULT_PORT, DEFAULT_SESSION_TIMEOUT, MIN_TTL

T = TypeVar("T")

DEFAULT_BASE = "/tumbler"
_OPTIONS = ("session_timeout", "connect_timeout", "request_timeout", "max_waiters")
TLS_SCHEME = "zookeepers"


#: what kazoo's errors mean for a lock user
ERRORS = ErrorMap(
    Rule(
        (kazoo_errors.NoAuthError, kazoo_errors.AuthFailedError),
        PermissionDenied,
        "ZooKeeper refused access ({kind}): the URL's user lacks rights on the lock nodes, or "
        "gave wrong credentials",
    ),
    Rule(
        (KazooTimeoutError, kazoo_errors.ConnectionLoss, kazoo_errors.SessionExpiredError),
        BackendUnavailable,
        "cannot reach ZooKeeper: {text}",
    ),
    Rule(kazoo_errors.ZookeeperStoppedError, BackendUnavailable, "the ZooKeeper client is closed"),
    Rule(kazoo_errors.KazooException, BackendUnavailable, "ZooKeeper error: {text}"),
    # the class says what went wrong; many of kazoo's errors say nothing more
    text=lambda error: f"{type(error).__name__} {error}".rstrip(),
)


#: the driver's errors as tumbler's, at this one edge, keeping the cause:
#: ``with translate_errors(url, lock_name):``
translate_errors = ERRORS.at


@dataclass(frozen=True)
class ZooKeeperConfig:
    """A parsed ``zookeeper://`` URL: what both flavours need to connect."""

    url: str  # redacted
    hosts: tuple[tuple[str, int], ...]
    base: str
    session_timeout: float
    connect_timeout: float
    request_timeout: float
    #: ``user:password`` for the digest scheme (never log this)
    digest: str | None = field(repr=False)
    #: how to speak TLS to the secure client port; None: in clear
    tls: TLSConfig | None = None
    #: the most waiters one lock queues
    max_waiters: int = DEFAULT_MAX_WAITERS

    @property
    def connect_string(self) -> str:
        return host_list(self.hosts)


def parse_config(url: BackendURL) -> ZooKeeperConfig:
    url.allow_options(_OPTIONS + TLS_OPTIONS)
    tls = tls_options(url, TLS_SCHEME, "ZooKeeper's secure client port")
    hosts = tuple(host_port(part, url, DEFAULT_PORT) for part in url.hosts.split(",") if part)
    if not hosts:
        hosts = (("localhost", DEFAULT_PORT),)
    base = "/" + url.path.strip("/") if url.path.strip("/") else DEFAULT_BASE
    for part in base.split("/")[1:]:
        if part in ("", ".", "..") or base == "/zookeeper" or base.startswith("/zookeeper/"):
            raise InvalidURL(f"bad base path {base!r}", backend=url.redacted)
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in base):
        raise InvalidURL("the base path has control characters", backend=url.redacted)
    if url.password is not None and not url.username:
        raise InvalidURL("a password needs a user name: USER:PASSWORD@", backend=url.redacted)
    digest = None if url.username is None else f"{url.username}:{url.password or ''}"
    session_timeout = url.option("session_timeout", seconds, DEFAULT_SESSION_TIMEOUT)
    if session_timeout < MIN_TTL:
        raise InvalidURL(
            f"session_timeout must be at least {MIN_TTL:g} s, the shortest lease ZooKeeper can "
            f"keep renewed (not {session_timeout:g})",
            backend=url.redacted,
        )
    request_timeout = url.option("request_timeout", seconds, 5.0)
    return ZooKeeperConfig(
        url=url.redacted,
        hosts=hosts,
        base=base,
        session_timeout=session_timeout,
        connect_timeout=url.option("connect_timeout", seconds, 10.0),
        request_timeout=request_timeout,
        digest=digest,
        tls=tls,
        max_waiters=url.option("max_waiters", waiter_count, DEFAULT_MAX_WAITERS),
    )


def tls_context(config: ZooKeeperConfig) -> ssl.SSLContext | None:
    """The TLS context of a ``zookeepers://`` URL (None for ``zookeeper://``), made once per
    client (see :func:`..kit.tls.tls_context`)."""
    return None if config.tls is None else kit_tls_context(config.tls, config.url)


def tls_connector(context: ssl.SSLContext) -> Callable[..., ssl.SSLSocket]:
    """kazoo's ``create_connection`` for TLS, with the client's one context.

    kazoo's own makes a context (reading the files again) at every attempt, and leaves the
    socket of a failed handshake open; this one connects in clear with kazoo's helper, then
    does the handshake, and closes the socket if that fails. kazoo passes its own TLS
    settings too: the context already has them.
    """

    def create_connection(
        address: tuple[str, int],
        hostname: str | None = None,
        timeout: float | None = None,
        **_kazoo_settings: Any,
    ) -> ssl.SSLSocket:
        plain = create_tcp_connection(socket, address, timeout=timeout)
        try:
            # the handshake happens here, bounded by the socket's timeout
            return context.wrap_socket(plain, server_hostname=hostname)
        except BaseException:
            plain.close()
            raise

    return create_connection


# --------------------------------------------------------------------------------------------
# ACLs: with credentials, nobody else may change the nodes tumbler uses


#: what an ACL may grant others than the URL's user on a node tumbler uses
OTHERS_MAY = Permissions.READ
_PERMISSION_LETTERS = (
    (Permissions.CREATE, "c"),
    (Permissions.DELETE, "d"),
    (Permissions.READ, "r"),
    (Permissions.WRITE, "w"),
    (Permissions.ADMIN, "a"),
)


def digest_identity(digest: str) -> str:
    """The id the server gives a ``user:password`` digest session: ``user:<base64 sha1>``."""
    user, _, password = digest.partition(":")
    return str(make_digest_acl_credential(user, password))


def describe_acl(acls: Iterable[ACL]) -> str:
    """An ACL as zkCli writes it (``world:anyone:cdrwa``), digests without their hash (a hash
    of a password is as good as one to whoever can try passwords offline)."""
    entries = []
    for acl in acls:
        scheme, identity = str(acl.id.scheme), str(acl.id.id)
        if scheme == "digest":
            identity = identity.partition(":")[0] + ":<hash>"
        letters = "".join(letter for bit, letter in _PERMISSION_LETTERS if acl.perms & bit)
        text = f"{scheme}:{identity}:{letters or '-'}"
        # written by whoever made the node: shown, never obeyed, by a terminal
        entries.append(text if text.isprintable() else ascii(text)[1:-1])
    return ", ".join(entries) or "(empty)"


def acl_problem(path: str, acls: list[ACL], identity: str, url: str) -> ConfigurationError | None:
    """The refusal of node ``path`` if its ACL lets anyone but ``identity`` (the URL's user,
    from ``digest_identity``) do more than read it; None if only that user may."""
    foreign = [
        acl
        for acl in acls
        if acl.perms & ~OTHERS_MAY and (acl.id.scheme, acl.id.id) != ("digest", identity)
    ]
    if not foreign:
        return None
    user = identity.partition(":")[0]
    return ConfigurationError(
        f"the ZooKeeper node {path} may be changed by others than {user!r} "
        f"(its ACL: {describe_acl(acls)}): they could take locks from their holders. Give "
        f"it an ACL for {user!r} alone (in zkCli, as that user: addauth digest "
        f"{user}:PASSWORD, then setAcl -R {path} auth::cdrwa), or delete it",
        backend=url,
    )


# --------------------------------------------------------------------------------------------
# Connecting: give up as soon as every host refused, and say so


def _ended_in(error: BaseException | None, kinds: tuple[type[BaseException], ...]) -> bool:
    """Whether a connection attempt's error is, or was caused by, one of ``kinds`` (kazoo
    wraps the socket's error)."""
    while error is not None:
        if isinstance(error, kinds):
            return True
        error = error.__cause__ or error.__context__
    return False


def _refused(error: BaseException | None) -> bool:
    """Whether a connection attempt ended in ECONNREFUSED."""
    return _ended_in(error, (ConnectionRefusedError,))


#: the TLS alerts of a server that refuses the client's certificate (or its lack of one)
_CERTIFICATE_ALERTS = frozenset(
    {
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
        "SSLV3_ALERT_CERTIFICATE_REVOKED",
        "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
        "TLSV1_ALERT_UNKNOWN_CA",
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    }
)


def _hopeless(error: BaseException | None) -> bool:
    """Whether trying the host again cannot help: nothing listens there, or a certificate was
    refused, the server's by the client (a wrong CA or host name) or the client's by the
    server: neither mends itself."""
    while error is not None:
        if isinstance(error, (ConnectionRefusedError, ssl.SSLCertVerificationError)):
            return True
        if isinstance(error, ssl.SSLError) and error.reason in _CERTIFICATE_ALERTS:
            return True
        error = error.__cause__ or error.__context__
    return False


def _dropped_at_once(error: BaseException | None) -> bool:
    """Whether the host closed the connection without a reply: what a TLS-only port does
    with a client that speaks in clear (and a server that has too many clients)."""
    return isinstance(error, kazoo_errors.ConnectionDropped) and "broken" in str(error)


def _describe(error: BaseException) -> str:
    """The innermost cause of a failed attempt (kazoo's wrapper says less than the socket)."""
    inner: BaseException | None = error
    while inner is not None:
        error = inner
        inner = error.__cause__ or error.__context__
    return str(error) or type(error).__name__


class ConnectAttempts:
    """How the attempts to connect to each host ended while the client starts.

    kazoo retries a refused connection until ``start``'s timeout and then only says
    "Connection time-out". The backend wraps kazoo's connect step to record each attempt here,
    so that the start ends as soon as every host of the ensemble has refused (nothing listens
    there, and a TCP client that waits longer would not be helped) or, over TLS, failed the
    certificate check, with the real cause.
    """

    def __init__(self, hosts: Iterable[tuple[str, int]], tls: bool = False) -> None:
        self._lock = threading.Lock()
        self._hosts = list(dict.fromkeys(hosts))
        self._tls = tls
        self._last: dict[tuple[str, int], BaseException | None] = {}
        #: set once the start is decided: connected, refused (or failed the certificate check)
        #: by every host, or unauthorised
        self.settled = threading.Event()

    def record(self, host: str, port: int, error: BaseException | None) -> None:
        """One attempt's outcome (None: connected), from kazoo's connection thread."""
        with self._lock:
            self._last[(host, port)] = error
            decided = (
                error is None
                or isinstance(error, kazoo_errors.AuthFailedError)
                or self._every_host(_hopeless)
            )
        if decided:
            self.settled.set()

    def _every_host(self, ended: Callable[[BaseException | None], bool]) -> bool:
        return bool(self._hosts) and all(ended(self._last.get(h)) for h in self._hosts)

    def failure(self, timeout: float) -> str:
        """Why the start failed, naming the hosts (never credentials: they are not here)."""
        with self._lock:
            names = [address(h, p) for h, p in self._hosts]
            if self._every_host(_refused):
                return f"connection refused by every ZooKeeper host ({', '.join(names)})"
            hopeless = self._every_host(_hopeless)
            causes = []
            for name, host in zip(names, self._hosts, strict=True):
                if host not in self._last:
                    causes.append(f"{name}: no attempt ended")
                    continue
                error = self._last[host]
                causes.append(f"{name}: {'connected' if error is None else _describe(error)}")
            hint = ""
            if not self._tls and self._every_host(_dropped_at_once):
                hint = "; if the ensemble's port speaks only TLS, use zookeepers://"
        if hopeless:
            return (
                "every ZooKeeper host refused the connection or a TLS certificate "
                f"({'; '.join(causes)})"
            )
        return (
            f"no ZooKeeper host took the connection within {timeout:g} s "
            f"({'; '.join(causes)}){hint}"
        )


def start_client(client: Any, attempts: ConnectAttempts, timeout: float, url: str) -> None:
    """kazoo's ``start``, ending early when every host refused (blocking: run it on a thread)."""
    client.start_async()
    attempts.settled.wait(timeout)
    if client.connected:
        return
    client.stop()
    client.close()
    raise BackendUnavailable(f"cannot reach ZooKeeper: {attempts.failure(timeout)}", backend=url)


# --------------------------------------------------------------------------------------------
# Logging: kazoo logs its requests, credentials included; none of them reaches a log


_REDACTED = "<redacted>"


class RedactingLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The logger tumbler gives kazoo: kazoo's records with every credential taken out.

    At DEBUG kazoo logs each request it sends, among them the ``Auth`` packet whose ``auth`` is
    ``USER:PASSWORD``, and the ``Connect`` packet and its reply, whose ``passwd`` is the
    session's password (whoever has it can take the session over); at its BLATHER level (5) it
    logs that password in hex. Requests are redacted by their fields, ``passwd`` messages by
    their byte arguments, and then, whatever the message, the known secrets are cut out of the
    text, so a record kazoo adds in a later version cannot leak them either.
    """

    def __init__(self, logger: logging.Logger, secrets: Callable[[], Iterable[str]]) -> None:
        super().__init__(logger, {})
        self._secrets = secrets

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        if "passwd" in str(msg):
            args = tuple(_REDACTED if isinstance(arg, (bytes, bytearray)) else arg for arg in args)
        args = tuple(_redact_fields(arg) for arg in args)
        try:
            text = str(msg) % args if args else str(msg)
        except (TypeError, ValueError):  # a malformed record: still shown, still redacted
            text = " ".join(map(str, (msg, *args)))
        for secret in self._secrets():
            if secret:
                text = text.replace(secret, _REDACTED)
        kwargs.setdefault("stacklevel", 2)
        self.logger.log(level, "%s", text, **kwargs)


def _redact_fields(arg: object) -> object:
    fields = getattr(arg, "_fields", None)
    if not isinstance(fields, tuple):
        return arg
    secret_fields = {name: _REDACTED for name in ("auth", "passwd") if name in fields}
    return arg._replace(**secret_fields) if secret_fields else arg  # type: ignore[attr-defined]


def client_secrets(digest: str | None, client: Any) -> list[str]:
    """What must never be logged: the digest credentials and the session's password."""
    found = []
    if digest is not None:
        found.append(digest)
        found.append(digest.partition(":")[2])
    session_password = getattr(client, "_session_passwd", None)
    if session_password and any(session_password):
        found.append(binascii.hexlify(session_password).decode())
        found.append(repr(session_password))
    return found


# --------------------------------------------------------------------------------------------
# Node layout


class CreateContainer(Create2):
    """kazoo has no call for ZooKeeper's container nodes: its ``create2`` request, sent with the
    container opcode (19) and flag (4), makes one; the reply is create2's (path and stat)."""

    type = 19


CONTAINER_FLAG = 4
EPHEMERAL_SEQUENTIAL_FLAGS = 3

# ZooKeeper refuses these in node names; "%" is escaped so that decoding is exact
_SAFE = "-_~!$&'()*+,;=:@"


def encode_name(name: str) -> str:
    """The node name of lock ``name``: percent-encoded UTF-8, never ``.`` or ``..``."""
    encoded = quote(name, safe=_SAFE)
    if encoded in (".", ".."):
        encoded = encoded.replace(".", "%2E")
    return encoded


def decode_name(node: str) -> str:
    return unquote(node, errors="strict")


def node_owner(owner: str) -> str:
    """The owner as it appears in node names and notes (32 hex digits of its SHA-256, in place
    of Curator's UUID). Not ``kit.owners.owner_hash``: node names of this form are what every
    client of a ZooKeeper base reads and writes, so the form is part of the layout."""
    return hashlib.sha256(owner.encode()).hexdigest()[:32]


def entry_prefix(owner: str, shared: bool, limit: int) -> str:
    """The name of a new entry before the server appends its sequence number."""
    if not shared:
        kind = "lock-"
    elif limit == 0:
        kind = "__READ__"
    else:
        kind = f"sem-{limit}-"
    return f"_c_{node_owner(owner)}-{kind}"


#: The node under the base that keeps ``force_release``'s notes, one persistent child per lock
#: name (``BASE/#evicted/<encoded name>``). ``encode_name`` always escapes "#", so no lock
#: node can have this name, and the line of a lock never reads it.
EVICTED_NODE = "#evicted"
#: How much longer than the evicted grant would have lived its note is kept: the notes' times
#: are the wall clocks of the hosts that write and prune them, which may disagree.
NOTE_GRACE = 30.0
#: How many times ``force_release`` reads the line and notes again after a concurrent change.
FORCE_RELEASE_TRIES = 10


def read_notes(data: bytes) -> dict[str, tuple[str, float]]:
    """The notes of a lock: owner hash -> (note, wall-clock time after which it may go).

    Data that is not such a record (damaged, or written by someone else) reads as no notes:
    the next ``force_release`` overwrites it.
    """
    try:
        record = json.loads(data)
        texts, owners = record["notes"], record["evicted"]
        notes = {}
        for owner, (index, until) in owners.items():
            text = texts[index]
            if isinstance(text, str) and isinstance(until, (int, float)):
                notes[owner] = (text, float(until))
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return {}
    return notes


def prune_notes(notes: dict[str, tuple[str, float]], now: float) -> dict[str, tuple[str, float]]:
    """The notes whose time has not passed at wall-clock time ``now``."""
    return {owner: kept for owner, kept in notes.items() if kept[1] > now}


def notes_data(notes: dict[str, tuple[str, float]]) -> bytes:
    """The data of the notes' node: each text once, however many owners one force_release
    evicted (a semaphore's permits), as a node holds at most 1 MB (``jute.maxbuffer``)."""
    texts: dict[str, int] = {}
    owners = {
        owner: [texts.setdefault(text, len(texts)), until] for owner, (text, until) in notes.items()
    }
    record = {"notes": list(texts), "evicted": owners}
    return json.dumps(record, separators=(",", ":")).encode()


class Contender(NamedTuple):
    """One child of a lock node, parsed."""

    node: str
    #: the owner hash, or the protection id of a Curator client, or "" if unprotected
    owner: str
    seq: int
    shared: bool
    limit: int

    def entry(self) -> Entry:
        return Entry(self.owner, self.seq, self.shared, self.limit, True, None)


# Curator's kinds too: "lock-" (InterProcessMutex), "__READ__"/"__WRIT__" (its read/write lock)
_CHILD = re.compile(
    r"^(?:_c_(?P<owner>[0-9A-Za-z-]+?)-)?"
    r"(?P<kind>lock-|__READ__|__WRIT__|sem-(?P<limit>[1-9][0-9]*)-)"
    r"(?P<seq>-?[0-9]{10})$"
)


def parse_children(children: list[str]) -> list[Contender]:
    """The line of a lock node in grant order; children of other shapes are not contenders."""
    line = [contender for node in children if (contender := _contender(node)) is not None]
    line.sort(key=lambda contender: contender.seq)
    return line


# A child's name never changes while it lives, and a waiter reads the same line again at each
# wake-up: each name is parsed once, not at every read.
@functools.lru_cache(maxsize=4096)
def _contender(node: str) -> Contender | None:
    match = _CHILD.match(node)
    if match is None:
        return None
    kind = match["kind"]
    shared = kind == "__READ__" or kind.startswith("sem-")
    limit = int(match["limit"]) if match["limit"] else (0 if shared else 1)
    return Contender(node, match["owner"] or "", int(match["seq"]), shared, limit)


def entry_data(
    holder: str, ttl: float, granted: bool = False, session_timeout: float | None = None
) -> bytes:
    record: dict[str, Any] = {"holder": holder, "ttl": ttl}
    if session_timeout is not None:
        # how long the entry outlives its holder: what `tumbler status` shows
        record["session_timeout"] = session_timeout
    if granted:
        record["granted"] = True
    return json.dumps(record, separators=(",", ":")).encode()


class EntryData(NamedTuple):
    """What an entry's data says: its holder, lease, and holder's session timeout if known."""

    holder: str
    ttl: float
    session_timeout: float | None


def read_entry_data(data: bytes) -> EntryData:
    """The holder description and lease of an entry (foreign entries: what can be shown)."""
    try:
        record = json.loads(data)
        holder, ttl = str(record["holder"]), float(record["ttl"])
    except (ValueError, KeyError, TypeError):
        text = data.decode("utf-8", "replace") if data else ""
        return EntryData(text or "(not a tumbler client)", 0.0, None)
    session_timeout = record.get("session_timeout")
    if not isinstance(session_timeout, (int, float)) or not session_timeout > 0:
        session_timeout = None  # written by an older tumbler
    return EntryData(holder, ttl, session_timeout)


#: The name of a tombstone, a child of the lock node, before its entry's sequence number (see
#: "Lock-delay"): "~" sorts after the digits, so Curator's and kazoo's recipes, which sort a
#: child by what follows their kind's name ("lock-", "__READ__", "__WRIT__", "__lock__") or
#: else by its whole name, put it after every entry; and ``_CHILD`` never matches it.
TOMB_PREFIX = "~lapsed-"
_TOMB = re.compile(r"^~lapsed-(?P<seq>-?[0-9]{10})$")


def tomb_node(seq: int) -> str:
    """The node name of the tombstone of the entry with sequence number ``seq`` (formatted
    as the server formats it)."""
    return f"{TOMB_PREFIX}{seq:010d}"


def parse_tombs(children: list[str]) -> list[tuple[str, int]]:
    """The tombstones among a lock node's children: (node name, its entry's sequence)."""
    found = []
    for node in children:
        if node.startswith(TOMB_PREFIX):
            match = _TOMB.match(node)
            if match is not None:
                found.append((node, int(match["seq"])))
    return found


def tombstone_data(
    entry: str, holder: str, delay: float, token: int, lease: float, stamped: bool
) -> bytes:
    """The data of a grant's tombstone: the entry it stands for, what ``status`` shows of it
    once lapsed, its delay, the lease it was granted, and whether the end of its grant was
    noticed (stamped)."""
    record: dict[str, Any] = {
        "entry": entry,
        "holder": holder,
        "lock_delay": delay,
        "token": token,
        "ttl": lease,
        "lapsed": stamped,
    }
    return json.dumps(record, separators=(",", ":")).encode()


class TombstoneData(NamedTuple):
    """What a tombstone's data says (see ``tombstone_data``)."""

    contender: Contender
    holder: str
    delay: float
    token: int
    lease: float
    stamped: bool

    def stamp(self) -> bytes:
        return tombstone_data(
            self.contender.node, self.holder, self.delay, self.token, self.lease, True
        )

    def delay_left(self, ctime_ms: int, mtime_ms: int, now_ms: float) -> float:
        """Seconds of delay left at server time ``now_ms`` for a stamped tombstone: the delay
        counts from the stamp (``mtime``: when the end of the grant was first noticed), but
        never from before the end of the lease it was granted (``ctime`` plus the lease: the
        tombstone is made after the grant, so no sooner than its lease began)."""
        start = max(mtime_ms, ctime_ms + self.lease * 1000.0)
        return (start - now_ms) / 1000.0 + self.delay


class LapsedGrant(NamedTuple):
    """A grant in its lock-delay, as a decision or ``inspect`` found it."""

    #: as the grant rule counts it (``Entry.lapsed``)
    entry: Entry
    #: seconds of delay left
    left: float
    #: its tombstone's path
    tomb: str
    record: TombstoneData


def read_tombstone(data: bytes, seq: int) -> TombstoneData | None:
    """The data of the tombstone of the entry with sequence number ``seq``, or None if it is
    not one tumbler wrote for that entry (malformed: it blocks nothing, and a decision
    deletes it)."""
    try:
        record = json.loads(data)
        entry, holder, delay = record["entry"], record["holder"], record["lock_delay"]
        token, lease, stamped = record["token"], record["ttl"], record["lapsed"]
    except (ValueError, KeyError, TypeError):
        return None
    if not (
        isinstance(entry, str)
        and isinstance(holder, str)
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (delay, lease))
        and isinstance(token, int)
        and not isinstance(token, bool)
        and isinstance(stamped, bool)
        and 0 < delay <= MAX_LOCK_DELAY
        and 0 <= lease <= MAX_TTL
    ):
        return None
    contenders = parse_children([entry])
    if len(contenders) != 1 or contenders[0].seq != seq:
        return None
    return TombstoneData(contenders[0], holder, float(delay), token, float(lease), stamped)


# --------------------------------------------------------------------------------------------
# Renewing: the session keeps every entry; a watch says which were deleted


@dataclass(eq=False)
class OwnEntry:
    """This client's entry for one acquisition, and what is known of it without asking.

    The entry lives as long as the session that made it (``session``, its ephemeral owner)
    unless it is deleted. ``gone`` becomes True when it is known to be deleted (a release, an
    operator's force_release, the end of its session) and never becomes False again.
    ``watched`` says that a deletion watch is set on the node, so that ``gone`` would be set
    if it were deleted: a watch fires once, and kazoo drops every watch when a connection
    breaks, so it is set again when it fires for anything else (see ``DeletionWatches``).
    """

    path: str
    czxid: int
    session: int
    granted: bool = False
    #: the path of the grant's tombstone, once its create was sent (a grant with a
    #: lock-delay: it may exist from then on), and its data stamped (``lapse``)
    tombstone: str | None = None
    stamped_tombstone: bytes = field(default=b"", repr=False)
    #: the tombstone's create was answered (made, or found made by a try whose reply was lost)
    tomb_made: bool = False
    watched: bool = False
    gone: bool = False
    #: times the watch fired for something other than the deletion: the answer to a watch set
    #: before the last of them does not mean a watch is still set
    epoch: int = 0
    watcher: Callable[[WatchedEvent], None] | None = field(default=None, repr=False)

    @property
    def node(self) -> str:
        return self.path.rsplit("/", 1)[1]


class DeletionWatches:
    """Deletion watches on this client's own entries, so that a renewal needs no read per entry.

    kazoo runs the watch callbacks on its watch thread and the answers (``rawlink``) on its
    completion thread; the state they change is guarded here.
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()

    def arm(self, entry: OwnEntry) -> tuple[Any, int]:
        """Set the watch (again) with an ``exists`` call; returns kazoo's result for it, and
        the epoch to hand to ``settle`` with the answer."""
        with self._lock:
            epoch = entry.epoch
            if entry.watcher is None:
                # one callable per entry: kazoo keeps a set of them per path, so setting the
                # watch again never makes it fire twice
                entry.watcher = functools.partial(self._fired, entry)
            watcher = entry.watcher
        result = self._client.exists_async(entry.path, watch=watcher)
        result.rawlink(functools.partial(self._answered, entry, epoch))
        return result, epoch

    def _answered(self, entry: OwnEntry, epoch: int, result: Any) -> None:
        try:
            stat = result.get_nowait()
        except Exception:  # no answer: not watched, so the next renewal reads the entry
            return
        self.settle(entry, epoch, stat)

    def settle(self, entry: OwnEntry, epoch: int, stat: Any) -> bool:
        """Take in the answer to ``arm``'s read; returns whether the entry is still there."""
        with self._lock:
            if stat is None or stat.czxid != entry.czxid or stat.ephemeralOwner != entry.session:
                entry.gone = True
                entry.watched = False
            elif entry.epoch == epoch and not entry.gone:
                entry.watched = True
            return not entry.gone

    def forget(self, entry: OwnEntry) -> None:
        """The entry is deleted, or its session ended: nothing of it is left to renew."""
        with self._lock:
            entry.gone = True
            entry.watched = False

    def _fired(self, entry: OwnEntry, event: WatchedEvent) -> None:
        with self._lock:
            if event.type == EventType.DELETED:
                entry.gone = True
                entry.watched = False
                return
            # the data changed (a semaphore entry announcing its grant), or the connection
            # broke (kazoo drops every watch then): the watch is no longer set
            entry.epoch += 1
            entry.watched = False
            again = event.type == EventType.CHANGED and not entry.gone
        if again:
            self.arm(entry)


class SessionProbe:
    """Round trips that show this client's session is alive, shared by concurrent renewals.

    A renewal confirms its leases from the moment it began, so it may count only the answer
    to a request sent *after* it began (the server restarts the session's timeout when it
    hears the request): a caller never joins a probe already on its way. Callers that come
    while one is on its way share the next one, sent as soon as that one is answered (the
    server answers a session's requests in order, so sending it earlier would not make it
    come back sooner). Each answer is handed to its callers through kazoo's watch thread,
    behind every watch event that arrived before it: ZooKeeper delivers a watch event before
    any answer that reflects the change, so an entry deleted before the probe was answered
    is already marked gone (``DeletionWatches``) when its callers look.

    The result ``after_now`` returns is a kazoo result, settled with the id of the session
    the probe was sent in, or with the probe's error.
    """

    def __init__(self, client: Any, path: str) -> None:
        self._client = client
        self._path = path
        self._lock = threading.Lock()
        self._on_its_way = False
        self._next: Any = None

    def after_now(self) -> Any:
        with self._lock:
            if self._next is None:
                self._next = self._client.handler.async_result()
            shared = self._next
            if self._on_its_way:
                return shared
            self._on_its_way = True
            self._next = None
        self._send(shared)
        return shared

    def _send(self, shared: Any) -> None:
        session = self._client._session_id or -1
        try:
            request = self._client.exists_async(self._path)
        except Exception as error:  # kazoo reports its errors in the result; just in case
            request = self._client.handler.async_result()
            request.set_exception(error)
        request.rawlink(functools.partial(self._answered, shared, session))

    def _answered(self, shared: Any, session: int, request: Any) -> None:
        settle = functools.partial(self._settle, shared, session, request)
        handler = self._client.handler
        if handler.running:
            handler.dispatch_callback(Callback("watch", settle, ()))
        else:
            settle()  # the client is stopping: no watch event will come any more
        with self._lock:
            waiting = self._next
            self._next = None
            self._on_its_way = waiting is not None
        if waiting is not None:
            self._send(waiting)

    @staticmethod
    def _settle(shared: Any, session: int, request: Any) -> None:
        try:
            request.get_nowait()
        except BaseException as error:  # kazoo's error: the callers' to handle
            shared.set_exception(kazoo_error(error))
        else:
            shared.set(session)


# --------------------------------------------------------------------------------------------
# Waiting for kazoo's results: the one place where the two flavours differ

#: each seam's blocking twin, for the generator of the ``_sync`` code (tools/generate_sync.py,
#: which reads this from the source)
SYNC_RENAMES = {"kazoo_aresult": "kazoo_result", "arun_blocking": "run_blocking"}


def kazoo_error(error: BaseException) -> BaseException:
    """kazoo's error for one call, as a class that says what happened to it.

    A reply that is not the one kazoo waits for (one before it was lost) makes kazoo drop
    the connection and fail the call it waited for with a bare ``RuntimeError`` ("xids do
    not match"): the call met a lost connection, its outcome unknown, like any other
    ``ConnectionLoss``."""
    if type(error) is not RuntimeError or not error.args:
        return error
    template, *values = error.args
    if not str(template).startswith("xids do not match"):
        return error
    try:
        text = str(template) % tuple(values)
    except (TypeError, ValueError):
        text = " ".join(map(str, error.args))
    lost: BaseException = kazoo_errors.ConnectionLoss(
        f"the connection broke: a reply came out of order ({text})"
    )
    lost.__cause__ = error
    return lost


def drop_on_reply_out_of_order(connection: Any) -> None:
    """Make a reply out of order (ZOOKEEPER-1863, or one lost while later ones passed) end
    kazoo's ``connection`` as a broken one, made again with the same session, as the Java
    client does: kazoo raises it as a bare ``RuntimeError``, which ends its connection
    thread, and the client would never connect again. (The call that waited for the reply
    has kazoo's ``RuntimeError`` already: :func:`kazoo_error` names it.)"""
    read_response = connection._read_response

    def read_response_or_drop(header: Any, buffer: bytes, offset: int) -> Any:
        try:
            return read_response(header, buffer, offset)
        except RuntimeError as error:
            dropped = kazoo_error(error)
            if dropped is error:
                raise
            raise kazoo_errors.ConnectionDropped(str(dropped)) from error

    connection._read_response = read_response_or_drop


def kazoo_result(result: Any, timeout: float) -> Any:
    """The value of a kazoo ``*_async`` call, waiting at most ``timeout`` seconds."""
    try:
        return result.get(timeout=timeout)
    except RuntimeError as error:
        raise kazoo_error(error) from error


async def kazoo_aresult(result: Any, timeout: float) -> Any:
    """The value of a kazoo ``*_async`` call, awaited without blocking the event loop.

    kazoo completes the call on its own thread; the completion is handed to the loop. Timing
    out (``KazooTimeoutError``) or being cancelled abandons the call, not kazoo's connection.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(done: Any) -> None:
        if future.done():
            return
        try:
            future.set_result(done.get_nowait())
        except BaseException as error:  # kazoo's error for the call: the caller's to handle
            future.set_exception(kazoo_error(error))

    def on_done(done: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(settle, done)

    def expire() -> None:
        if not future.done():
            future.set_exception(KazooTimeoutError(f"no answer within {timeout} s"))

    timer = loop.call_later(timeout, expire)
    result.rawlink(on_done)
    try:
        return await future
    finally:
        timer.cancel()


def run_blocking(function: Callable[..., T], *args: Any) -> T:
    """Call one of kazoo's blocking methods (start, stop)."""
    return function(*args)


async def arun_blocking(function: Callable[..., T], *args: Any) -> T:
    """Call one of kazoo's blocking methods (start, stop) off the event loop."""
    return await asyncio.to_thread(function, *args)
