"""Leader election with ``locks.election()``: one scheduler of three leads, the others stand by.

Three candidate processes campaign for the election ``scheduler``. The leader does its work
(here, it writes its term to a file every 50 ms); the example kills it with SIGKILL after a
while, as a crash would, and the next candidate in line leads once the dead leader's lease
(1 s) has run out, with a greater term. The main process follows it all through
``election.observe()``, woken by the backend where it tells of changes.

    python examples/election.py [--url URL]   # default: an SQLite file in a temporary directory

It prints each leader as the observer sees it, and how long each failover took.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import tempfile
import time
from pathlib import Path

import tumbler

CANDIDATES = 3
#: a dead leader is replaced this long after its last renewal
LEASE = 1.0
#: how long each leader leads before the example kills it
REIGN = 0.5


def candidate(url: str, value: str, diary: Path) -> None:
    """Campaign, then work as the leader until killed."""
    with (
        tumbler.connect(url) as locks,
        locks.election("scheduler", ttl=LEASE).campaign(value) as leadership,
    ):
        while leadership.held:
            with diary.open("a") as entries:
                entries.write(f"{leadership.term} {value}\n")
            time.sleep(0.05)


def kill(process: multiprocessing.process.BaseProcess, signum: int) -> None:
    assert process.pid is not None
    os.kill(process.pid, signum)
    process.join()


def worked_in(diary: Path, term: int, patience: float = 30.0) -> None:
    """Wait until the diary shows work done in ``term``."""
    end = time.monotonic() + patience
    while not (
        diary.exists() and str(term) in (line.split()[0] for line in diary.read_text().splitlines())
    ):
        if time.monotonic() > end:
            raise SystemExit(f"the leader of term {term} did no work within {patience:g} s")
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        url = args.url or f"sqlite://{scratch}/locks.db"
        diary = Path(scratch) / "diary"
        context = multiprocessing.get_context("spawn")
        candidates = {
            f"scheduler-{i}": context.Process(target=candidate, args=(url, f"scheduler-{i}", diary))
            for i in range(CANDIDATES)
        }
        with tumbler.connect(url) as locks, locks.election("scheduler").observe() as leaders:
            for process in candidates.values():
                process.start()
            killed_at = None
            reigns = []
            for leader in leaders:
                if leader is None:
                    print("nobody leads")
                    continue
                now = time.monotonic()
                after = "" if killed_at is None else f", {now - killed_at:.2f} s after the kill"
                print(f"{leader.value} leads, term {leader.term}{after}")
                reigns.append(leader.value)
                # the observer hears of a grant as soon as it is made: let the leader work in
                # its term before it is killed
                worked_in(diary, leader.term)
                if len(reigns) == CANDIDATES:
                    break
                time.sleep(REIGN)
                kill(candidates[leader.value], signal.SIGKILL)
                killed_at = time.monotonic()
            kill(candidates[reigns[-1]], signal.SIGTERM)
        terms = [int(line.split()[0]) for line in diary.read_text().splitlines()]
    print(f"{len(set(terms))} terms worked in, in order: {terms == sorted(terms)}")


if __name__ == "__main__":
    main()
