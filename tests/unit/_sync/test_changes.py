# Generated from tests/unit/_async/test_changes.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""Watching a lock's state and an election's leader through the lock layer, on ``memory://``
(asyncio source of the blocking twin in ``tests/unit/_sync/test_changes.py``).

The conformance suite holds every backend to the same; here is what the lock layer adds on
its own: an expiry no backend announces is read when the lease ends, bad input is refused at
the call, and closing ends a watch.
"""

from __future__ import annotations

import dataclasses

import pytest

from tumbler import ClientClosed, InvalidArgument, InvalidLockName
from tumbler._sync.client import Locks
from tumbler._url import parse_url
from tumbler.backends.contract import GrantRequest
from tumbler.backends.memory.backend import open_sync
from tumbler.testing.conformance.compat import PATIENCE, background

from ..clients import connect, fresh_url


def client() -> Locks:
    return connect(fresh_url())


def test_a_watch_reads_an_expiry_when_the_lease_ends() -> None:
    """A grant nobody renews nor gives back (its holder died): the memory backend tells
    nobody of its expiry, and the watcher's re-reads are an hour apart, so only the read timed
    by the holder's lease sees it end."""
    url = fresh_url()
    locks = connect(url)
    backend = locks._backend
    backend.capabilities = dataclasses.replace(backend.capabilities, recheck_interval=3600.0)
    dead = open_sync(parse_url(url))
    request = GrantRequest("expiring", "dead", False, 1, False, ttl=0.3, holder="dead")
    assert dead.try_grant(request) is not None
    with locks.watch("expiring") as changes:
        held = changes.__next__()
        assert len(held.holders) == 1
        freed = background(changes.__next__).result()
        assert freed.holders == ()
    locks.close()


def test_a_watch_reads_the_end_of_a_lock_delay_when_it_ends() -> None:
    """A grant with a lock-delay that nobody renews: its lease runs out, then its delay, and
    the memory backend announces neither; with re-reads an hour apart, only the reads timed
    by the lease and by the delay see the lock lapse and then free."""
    url = fresh_url()
    locks = connect(url)
    backend = locks._backend
    backend.capabilities = dataclasses.replace(backend.capabilities, recheck_interval=3600.0)
    dead = open_sync(parse_url(url))
    request = GrantRequest(
        "delayed", "dead", False, 1, False, ttl=0.3, holder="dead", lock_delay=0.3
    )
    assert dead.try_grant(request) is not None
    with locks.watch("delayed") as changes:
        held = changes.__next__()
        assert len(held.holders) == 1
        lapsed = background(changes.__next__).result()
        assert (lapsed.holders, len(lapsed.lapsed)) == ((), 1)
        freed = background(changes.__next__).result()
        assert (freed.holders, freed.lapsed) == ((), ())
    locks.close()


def test_closing_ends_a_watch_and_closing_the_client_ends_it_with_an_error() -> None:
    locks = client()
    changes = locks.watch("watched")
    assert (changes.__next__()).holders == ()
    waiting = background(changes.__next__)
    changes.close()
    with pytest.raises(StopIteration):
        waiting.result()
    assert not locks._watches  # nothing of it is left with the client

    observed = locks.election("elected").observe()
    assert observed.__next__() is None
    waiting = background(observed.__next__)
    locks.close()
    with pytest.raises(ClientClosed):
        waiting.result()


def test_bad_input_is_refused_at_the_call_and_changes_nothing() -> None:
    locks = client()
    with pytest.raises(InvalidLockName):
        locks.watch("")
    with pytest.raises(InvalidLockName):
        locks.election("bad\nname")
    election = locks.election("elected")
    for value in ("", "two\nlines", "x" * 1000):
        with pytest.raises(InvalidArgument):
            election.campaign(value, timeout=PATIENCE)
    assert locks.status_all() == []
    assert not locks._watches
    locks.close()
