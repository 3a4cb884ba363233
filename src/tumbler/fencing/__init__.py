"""Fencing at the resource: writes that a stale holder of a lock cannot make.

A lease lock alone cannot keep a paused holder (GC, SIGSTOP, a blocked event loop) from
writing after its lease ran out and another holder took the lock. Every grant's
``hold.token`` is greater than every earlier grant's of that name; a resource that refuses a
token lower than the highest it has accepted refuses the stale holder's writes. Each module
here does that check at one kind of store, atomically with the write, and raises
:class:`~tumbler.errors.StaleToken` (and makes nothing of the write) for a stale token:

- :mod:`tumbler.fencing.sqlite`, :mod:`tumbler.fencing.postgresql`,
  :mod:`tumbler.fencing.mysql`: ``fence(conn, resource, token)`` inside the caller's own
  transaction, against a table of highest tokens (``tumbler_fences``, made once by
  ``create_table``); ``conn`` is the driver's connection, or an SQLAlchemy ``Connection``
  or ``Session`` (``AsyncConnection``/``AsyncSession`` for ``fence_async``) in its
  transaction;
- :mod:`tumbler.fencing.redis`: a guarded ``SET`` and ``HSET`` of the caller's key, in one
  script (``RedisFence``, ``AsyncRedisFence``);
- :mod:`tumbler.fencing.files`: a file replaced by rename only if its token is not stale.

Each works whichever lock backend issued the token; nothing of the lock layer is needed or
imported. docs/fencing.md says what fencing protects and what it does not.
"""

from __future__ import annotations

from ..errors import StaleToken
from ._checks import FENCE_TABLE

__all__ = ["FENCE_TABLE", "StaleToken"]
