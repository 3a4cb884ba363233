"""A lock client in its own OS process, for the contract cases about processes.

    python worker.py count URL NAME COUNTER_FILE TOKENS_FILE N FLAVOUR [--no-lock]
    python worker.py hold  URL NAME MARKER_FILE TTL FLAVOUR [--fair]
    python worker.py forget URL NAME MARKER_FILE TTL FLAVOUR

``count`` does N read-modify-write increments of a counter file that is not atomic by itself,
each under the lock (or, with --no-lock, under nothing: the negative control), appending each
grant's fencing token to TOKENS_FILE. With --no-lock it first says it is ready (a line in
COUNTER_FILE.ready) and waits for COUNTER_FILE.go, so that the control's workers run at once
however long each took to start. ``hold`` acquires, writes its token to MARKER_FILE, and
then blocks until killed. ``forget`` acquires, writes its token, and ends the program without
releasing or closing anything.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

import tumbler
import tumbler.aio

THINK = 0.002  # between read and write: wide enough that an unlocked run certainly races


def append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def increment(counter: str) -> None:
    """Read the counter, think, write it plus one: a race without a lock, by design.

    The new value replaces the file whole (written aside, then renamed over it). Rewriting it
    in place would let two unlocked writers mix their digits (one truncates, the other writes
    "100", the first then writes "9" over its start: "900"), and the control run's counter
    could then come out above the number of increments instead of below it.
    """
    with open(counter) as handle:
        value = int(handle.read() or 0)
    time.sleep(THINK)
    aside = f"{counter}.{os.getpid()}.{threading.get_ident()}"
    with open(aside, "w") as handle:
        handle.write(str(value + 1))
    os.replace(aside, counter)


def wait_for_the_others(counter: str) -> None:
    """Say this worker is ready, then wait until the test says go (it does once every worker
    is ready): unlocked workers that ran one after the other would race with nobody."""
    append(f"{counter}.ready", str(os.getpid()))
    deadline = time.monotonic() + 120
    while not os.path.exists(f"{counter}.go"):
        if time.monotonic() > deadline:
            raise SystemExit("no go from the test within 120 s")
        time.sleep(0.001)


def count_sync(url: str, name: str, counter: str, tokens: str, n: int, use_lock: bool) -> None:
    with tumbler.connect(url) as locks:
        lock = locks.lock(name, ttl=10)
        if not use_lock:
            wait_for_the_others(counter)
        for _ in range(n):
            if not use_lock:
                increment(counter)
                continue
            with lock as hold:
                increment(counter)
                append(tokens, str(hold.token))


async def count_async(url: str, name: str, counter: str, tokens: str, n: int) -> None:
    async with await tumbler.aio.connect(url) as locks:
        lock = locks.lock(name, ttl=10)
        for _ in range(n):
            async with lock as hold:
                increment(counter)
                append(tokens, str(hold.token))


def hold_sync(url: str, name: str, marker: str, ttl: float, fair: bool) -> None:
    locks = tumbler.connect(url)
    lock = locks.lock(name, ttl=ttl, fair=fair)
    lock.acquire(timeout=None)
    assert lock.hold is not None
    append(marker, str(lock.hold.token))
    while True:
        time.sleep(3600)


async def hold_async(url: str, name: str, marker: str, ttl: float, fair: bool) -> None:
    locks = await tumbler.aio.connect(url)
    lock = locks.lock(name, ttl=ttl, fair=fair)
    await lock.acquire(timeout=None)
    assert lock.hold is not None
    append(marker, str(lock.hold.token))
    await asyncio.Event().wait()


def forget_sync(url: str, name: str, marker: str, ttl: float) -> None:
    locks = tumbler.connect(url)
    lock = locks.lock(name, ttl=ttl)
    lock.acquire(timeout=None)
    assert lock.hold is not None
    append(marker, str(lock.hold.token))


async def forget_async(url: str, name: str, marker: str, ttl: float) -> None:
    locks = await tumbler.aio.connect(url)
    lock = locks.lock(name, ttl=ttl)
    await lock.acquire(timeout=None)
    assert lock.hold is not None
    append(marker, str(lock.hold.token))


def main(argv: list[str]) -> None:
    mode, url, name, *rest = argv
    flags = {arg for arg in rest if arg.startswith("--")}
    args = [arg for arg in rest if not arg.startswith("--")]
    if mode == "count":
        counter, tokens, n, flavour = args
        use_lock = "--no-lock" not in flags
        if flavour == "async":
            if not use_lock:
                raise SystemExit("the unlocked control runs in the blocking flavour only")
            asyncio.run(count_async(url, name, counter, tokens, int(n)))
        else:
            count_sync(url, name, counter, tokens, int(n), use_lock)
    elif mode == "hold":
        marker, ttl, flavour = args
        if flavour == "async":
            asyncio.run(hold_async(url, name, marker, float(ttl), "--fair" in flags))
        else:
            hold_sync(url, name, marker, float(ttl), "--fair" in flags)
    elif mode == "forget":
        marker, ttl, flavour = args
        if flavour == "async":
            asyncio.run(forget_async(url, name, marker, float(ttl)))
        else:
            forget_sync(url, name, marker, float(ttl))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
