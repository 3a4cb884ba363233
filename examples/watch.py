"""Watching a lock: its state now, then at each change (``locks.watch``).

A watcher thread follows the lock ``orders:42`` while two workers use it: the first takes it,
the second queues behind it, the first releases (the second is granted), the second releases.
The watcher prints each state it is told of; ``tumbler status NAME --watch`` is built on the
same call. Each step waits until the watcher has seen what the one before did, so that every
change is shown (a watcher that reads slower than the lock changes sees the latest state).

    python examples/watch.py
"""

from __future__ import annotations

import queue
import threading

import tumbler
from tumbler import LockState

LOCK = "orders:42"


def describe(state: LockState) -> str:
    holders = ", ".join(f"token {holder.token}" for holder in state.holders) or "nobody"
    return f"held by {holders}; {state.waiters} waiting"


def main() -> list[str]:
    seen: queue.Queue[str] = queue.Queue()
    url = "memory://watch-example"  # on servers: any backend's URL, in any process
    with (
        tumbler.connect(url) as watcher,
        tumbler.connect(url) as first,
        tumbler.connect(url) as second,
    ):
        changes = watcher.watch(LOCK)

        def follow() -> None:
            for state in changes:  # ends when the watch is closed
                print(f"watcher: {describe(state)}")
                seen.put(describe(state))

        following = threading.Thread(target=follow)
        following.start()
        shown = [seen.get(timeout=30)]  # the state when the watch began

        def until(state: str) -> None:
            """Wait until the watcher was told of ``state`` (and of any on the way to it)."""
            while shown[-1] != state:
                shown.append(seen.get(timeout=30))

        one = first.lock(LOCK)
        print("first worker: takes the lock")
        one.acquire()
        until("held by token 1; 0 waiting")
        granted: queue.Queue[tumbler.Hold] = queue.Queue()

        def wait_for_it() -> None:
            two = second.lock(LOCK)
            two.acquire()
            assert two.hold is not None
            granted.put(two.hold)  # a hold may be released from another thread

        print("second worker: waits for it")
        threading.Thread(target=wait_for_it).start()
        until("held by token 1; 1 waiting")
        print("first worker: releases it, and the second has it")
        one.release()
        until("held by token 2; 0 waiting")
        print("second worker: releases it")
        granted.get(timeout=30).release()
        until("held by nobody; 0 waiting")
        changes.close()
        following.join()
    return shown


if __name__ == "__main__":
    main()
