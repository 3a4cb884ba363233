"""Lock-delay: a lost holder's writes in flight land before the next holder starts.

For a resource that cannot check fencing tokens (a file on a share, a mail server, a device
on a serial line): the lock alone must keep a lost holder's writes from landing after the
next holder's. The first worker takes the lock with a 0.5 s lease, sends a write that the
network holds up for 1.5 s (a retransmission, a slow proxy), and dies: its lease runs out.
With ``lock_delay=3``, nobody is granted the lock for 3 s after that, so the late write lands
before the second worker writes. With ``--no-delay`` the second worker has the lock as soon as
the lease ran out, writes, and the late write then overwrites its work.

    python examples/lock_delay.py [--no-delay]
"""

from __future__ import annotations

import sys
import threading
import time

import tumbler

LOCK = "printer"
LEASE = 0.5
IN_FLIGHT = 1.5  # how long the network holds the first worker's write
DELAY = 3.0  # at least as long as a write can be held up


def main(delay: float) -> list[str]:
    written: list[str] = []  # the resource: what landed, in order
    start = time.monotonic()

    def land(text: str) -> None:
        written.append(text)
        print(f"{time.monotonic() - start:4.1f} s: the resource receives {text!r}")

    # two workers: two clients of one in-process store (on servers: two processes, one URL)
    url = "memory://lock-delay"
    with tumbler.connect(url) as first, tumbler.connect(url) as second:
        lock = first.lock(LOCK, ttl=LEASE, renew=False, lock_delay=delay)
        assert lock.acquire()
        late = threading.Timer(IN_FLIGHT, land, ("page 1 from the first worker",))
        late.start()
        print(f"first worker: holds {LOCK!r} (lock_delay={delay:g} s), sends page 1, and dies")
        with second.lock(LOCK, timeout=30):
            print(f"{time.monotonic() - start:4.1f} s: second worker has the lock")
            land("page 1 from the second worker")
        late.join()
    print("the resource ends with", repr(written[-1]))
    return written


if __name__ == "__main__":
    main(0.0 if "--no-delay" in sys.argv[1:] else DELAY)
