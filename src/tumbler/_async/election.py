"""Leader election, built on the fair mutex that torture proves.

An election named ``name`` is the lock ``name``: a candidate campaigns by waiting for the lock
in a fair line, with its ``value`` (what the others should know of the leader: an address, a
host name) as the grant's holder, and leads while it holds the grant. So everything a hold
promises, leadership promises:

- **one leader per term**: the term is the grant's fencing token, which no other grant of the
  name ever had and which every later grant exceeds;
- **told before another leads**: a leader whose lease ran out (its process paused, the
  backend out of reach) finds its leadership lost on its own clock before the backend could
  grant the name to anyone else, and its ``on_lost`` callbacks run then;
- **a dead leader is replaced** once its grant ends: its lease runs out, or, where grants
  live with the client's session or lease (ZooKeeper's session timeout, etcd's client lease:
  ``capabilities.max_ttl``), that session ends;
- candidates lead in the order they began campaigning.

The leader, read by anyone (``leader()``, ``observe()``, ``tumbler status NAME``), is the
lock's exclusive holder: its holder text is the value, its token the term.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from .. import _core as core
from ..backends.contract import Leader
from ..errors import AcquireTimeout
from .changes import AsyncStateChanges
from .hold import AsyncHold
from .primitives import release_on_leaving

if TYPE_CHECKING:
    from .client import AsyncLocks


class AsyncLeadership(AsyncHold):
    """The leadership of one candidate: a hold of the election's lock, whose ``term`` (its
    fencing token) no other leader ever had and every later one exceeds.

    ``held``, ``lost``, ``on_lost``, ``wait_lost`` and ``check()`` are the hold's: a leader
    that may have been replaced is told so (``lost``) before another can lead. ``resign()``
    (or leaving ``async with``) ends it; leaving raises ``LockLost`` if it had been lost
    meanwhile, as a lock's block does.
    """

    @property
    def value(self) -> str:
        """What the leader campaigned with, as the others read it."""
        return self._request.holder

    @property
    def term(self) -> int:
        """This leadership's term: the grant's fencing token."""
        return self.token

    async def resign(self) -> None:
        """Stop leading (the next candidate in line leads). Raises ``LockLost`` (after
        resigning) if the leadership had been lost, ``NotHeld`` if it had ended already."""
        await self.release()

    async def __aenter__(self) -> AsyncLeadership:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await release_on_leaving(self, exc_type is not None, f"election {self.name!r}")

    def _detail(self) -> str:
        return f" value={self.value!r}"


class AsyncElection:
    """A leader election named ``name`` (made by ``locks.election()``); see the module's
    notes for what it promises. Its lock is ``name``: do not use it as a lock besides."""

    def __init__(
        self,
        locks: AsyncLocks,
        name: str,
        *,
        ttl: core.Seconds | None,
        lock_delay: core.Seconds = 0.0,
    ) -> None:
        #: the election's name, which is its lock's (canonical NFC form)
        self.name: str = core.validate_name(name)
        #: the lease of a leadership, in seconds: a dead leader is replaced this long after
        #: its last renewal (renewed every third of it while the leader lives), or when its
        #: client's session ends where grants live with it (see the module's notes)
        self.ttl: float = locks._lease_for(ttl)
        #: seconds nobody leads after a leader lost its lease (0: none)
        self.lock_delay: float = locks._lock_delay_for(lock_delay)
        self._locks = locks

    async def campaign(self, value: str, *, timeout: core.Seconds | None = None) -> AsyncLeadership:
        """Wait until this candidate leads, and return its leadership.

        ``value`` (one line, what ``leader()`` tells the others) is the leader's holder text.
        ``timeout``: how long to wait (None: for ever; 0: lead only if nobody leads or waits
        ahead now); raises ``AcquireTimeout`` when it runs out first. Candidates lead in the
        order they began to campaign; a waiting candidate rides out a backend that stops
        answering, as a lock's waiter does.
        """
        holder = core.validate_holder(value)
        seconds = core.validate_timeout(timeout)
        leadership = await self._locks._acquire_hold(
            (self.name,),
            AsyncLeadership,
            lock_name=self.name,
            shared=False,
            limit=1,
            fair=True,
            ttl=self.ttl,
            timeout=seconds,
            renew=True,
            holder=holder,
            lock_delay=self.lock_delay,
        )
        if leadership is None:
            raise AcquireTimeout(
                f"election {self.name!r}: not elected within {seconds} s",
                lock_name=self.name,
                backend=self._locks.url,
            )
        return leadership

    async def leader(self) -> Leader | None:
        """The leader now (its value and term), or None while nobody leads."""
        return Leader.of(await self._locks.status(self.name))

    def observe(self) -> AsyncLeaderChanges:
        """Who leads now, then at each change of leadership: ``async for leader in
        election.observe()`` (``for`` in the blocking flavour), a leader or None while
        nobody leads, never an older term than one already given. ``close()`` the iterator,
        or use it in a ``with`` block, to stop watching."""
        return AsyncLeaderChanges(self._locks.watch(self.name))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} ttl={self.ttl}>"


class AsyncLeaderChanges:
    """The leader of an election now, then at each change of leadership: a new leader, or
    None while nobody leads (``election.observe()``).

    Never a term older than one already given (a read from a member behind the others).
    Woken by the backend where it tells of changes (``capabilities.state_wakeups``), else by
    polling, as ``locks.watch()`` is; changes that come and go while the caller is busy
    elsewhere are seen as one. ``close()``, or leaving ``async with``, stops watching,
    and ends the iteration. Raises ``ClientClosed`` when the client closes.
    """

    def __init__(self, states: AsyncStateChanges) -> None:
        self._states = states
        self._given = False
        self._last: Leader | None = None
        self._newest = 0

    def __aiter__(self) -> AsyncLeaderChanges:
        return self

    async def __anext__(self) -> Leader | None:
        while True:
            leader = Leader.of(await self._states.__anext__())
            if leader is not None and leader.term < self._newest:
                continue
            if self._given and leader == self._last:
                continue
            self._given, self._last = True, leader
            if leader is not None:
                self._newest = leader.term
            return leader

    def close(self) -> None:
        """Stop watching (again is harmless): the iteration ends."""
        self._states.close()

    async def __aenter__(self) -> AsyncLeaderChanges:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
