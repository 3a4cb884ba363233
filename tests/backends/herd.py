"""One client holds a lock and four others queue for it, one after another: the herd cases of
the backends that wake only the next waiter (ZooKeeper, etcd) share the line and the count of
what each waiting client's hub is told."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import tumbler
from tumbler.testing.conformance.compat import eventually


def count_wakeups(clients: list[tumbler.Locks]) -> list[int]:
    """The wake-ups each client's backend tells its hub of from now on (re-checks are not
    told), one count per client, kept up to date in the list returned."""
    woken = [0] * len(clients)
    for index, client in enumerate(clients):
        hub = client._backend.hub
        original = hub.notify

        def counting(name, tags=None, index=index, original=original):
            woken[index] += 1
            original(name, tags)

        hub.notify = counting
    return woken


@dataclass
class Line:
    #: set when the first waiter is granted; it holds until ``proceed`` is set
    first_granted: threading.Event = field(default_factory=threading.Event)
    proceed: threading.Event = field(default_factory=threading.Event)
    #: the waiters' indexes, in the order they were granted
    order: list[int] = field(default_factory=list)


@contextmanager
def queued(
    holder: tumbler.Locks, waiters: list[tumbler.Locks], name: str, patience: float
) -> Iterator[Line]:
    """A thread per waiter acquires ``name``, each started once the one before it waits (as
    ``holder`` sees it), and releases at once but for the first, which holds until
    ``proceed``. On leaving, ``proceed`` is set and the threads are joined, whatever the case
    asserted: a failed check leaves no waiter behind for the cases that follow."""
    line = Line()

    def wait(index: int) -> None:
        mine = waiters[index].lock(name)
        assert mine.acquire(timeout=patience)
        line.order.append(index)
        if index == 0:
            line.first_granted.set()
            line.proceed.wait(patience)
        mine.release()

    threads: list[threading.Thread] = []
    try:
        for index in range(len(waiters)):
            thread = threading.Thread(target=wait, args=(index,))
            thread.start()
            threads.append(thread)
            eventually(lambda n=index + 1: holder.status(name).waiters == n, f"{index + 1} waiting")
        yield line
    finally:
        line.proceed.set()
        for thread in threads:
            thread.join(timeout=patience)
