"""Grants a release hands straight to the waiters it lets through, for a backend whose store
can tell a waiter so in the wake-up itself (Redis's pub/sub message, PostgreSQL's ``NOTIFY``
payload): the waiter's next try takes its grant from here instead of asking the store.

The lease began at the release, which the waiter learns of later; so a waiter leaves with
its entry the time it sent its request, on its own clock (``stamp``), and the release tells
it the server's time from that entry's write to the release (``elapsed``): the lease began
no earlier than ``stamp + elapsed`` on the waiter's clock, whatever the two clocks say. A
release may hand over a shorter lease than the waiter asked for (Redis's, to a waiter whose
hold will be renewed: until its first renewal the grant is provisional) and then says how
long (``lease``).
(PostgreSQL and MySQL hand a grant over on the waiter's own short lease, and the waiter's
try takes it up with a write that sets its lease anew: for them a grant kept here only says
which token to take up.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..contract import Grant, GrantRequest, WakeHub
from .owners import owner_hash

__all__ = ["HANDED_KEPT", "HandOffs"]

#: how long a grant handed to a waiter of this client is kept for it to take: a waiter takes
#: its grant as soon as the wake-up reaches it; one nobody takes (its waiter had the grant
#: from a try of its own before the wake-up came) goes after this, and a waiter that comes
#: later still finds its grant by asking the server
HANDED_KEPT = 60.0


class HandOffs:
    """Grants that releases handed straight to this client's waiters, kept until each
    waiter's next try takes its own: that try then needs no round trip.

    The wake-up reader puts them in; waiters take them, on the loop or on their threads.
    Only a cache: the server's entries are the truth, and a try that finds nothing here asks
    the server, which answers with the same grant.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._now = clock
        self._lock = threading.Lock()
        #: (name, owner hash) -> (fencing token, local time the lease began, the lease handed
        #: over in seconds or None for the one asked, kept until)
        self._handed: dict[tuple[str, str], tuple[int, float, float | None, float]] = {}

    def __bool__(self) -> bool:
        return bool(self._handed)

    def put(self, name: str, tag: str, terms: str) -> None:
        """Keep the grant a release handed over: ``terms`` is ``<token>,<stamp>,<elapsed>``,
        the token, the client's clock (µs) when the waiter's last request was sent, and the
        server's time (µs) from that request's arrival to the release, then ``,<lease>`` (ms)
        if the release handed over a lease shorter than the one asked for. The lease began at
        the release, so no earlier than ``stamp + elapsed`` on this client's clock."""
        try:
            token, stamp, elapsed, *rest = (int(part) for part in terms.split(","))
        except ValueError:
            return  # not ours to parse: the waiter asks the server instead
        if len(rest) > 1:
            return
        lease = rest[0] / 1000 if rest else None
        began = (stamp + elapsed) / 1e6
        now = self._now()
        with self._lock:
            for key in [key for key, kept in self._handed.items() if kept[-1] <= now]:
                del self._handed[key]
            self._handed[name, tag] = (token, began, lease, now + HANDED_KEPT)

    def deliver(self, message: str, hub: WakeHub) -> None:
        """Act on a wake-up ``<tag> <name>`` (``tag``: the waiter's owner as its entry stores
        it, :func:`~tumbler.backends.kit.owners.owner_hash`), which a
        release that granted the waiter marks ``=<terms>:<tag>``: keep that grant for the
        waiter's next try (:meth:`put`), and wake the waiter. An empty tag wakes nobody (a
        reader's nudge to itself)."""
        tag, _, name = message.partition(" ")
        if tag.startswith("="):  # granted by the release: the waiter's try takes it here
            terms, _, tag = tag[1:].partition(":")
            self.put(name, tag, terms)
        if tag:
            hub.notify(name, (tag,))

    def forget(self, name: str, owner: str) -> None:
        """Drop a grant handed to ``owner`` that it gives back without taking it."""
        if self._handed:
            self.take(name, owner_hash(owner))

    def take(self, name: str, tag: str) -> tuple[int, float] | None:
        """The (token, lease start) handed to the waiter ``tag`` of lock ``name``, if any."""
        found = self._take(name, tag)
        return None if found is None else found[:2]

    def _take(self, name: str, tag: str) -> tuple[int, float, float | None] | None:
        with self._lock:
            found = self._handed.pop((name, tag), None)
        return None if found is None else found[:3]

    def grant(self, request: GrantRequest) -> Grant | None:
        """The grant handed to ``request``'s waiter, with what is left of its lease (the one
        handed over, if shorter than the one asked for); None if none came, or if its lease
        has run out on this clock (the server then says what is left, if anything)."""
        if not self._handed:
            return None
        handed = self._take(request.name, owner_hash(request.owner))
        if handed is None:
            return None
        token, began, lease = handed
        left = (request.ttl if lease is None else min(request.ttl, lease)) - (self._now() - began)
        if left <= 0:
            return None
        return Grant(request.name, request.owner, token, left)
