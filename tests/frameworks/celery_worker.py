"""The app that tests/frameworks/test_celery.py's worker runs: examples/celery_recipe.py as it
is, with its work recorded in a journal file ($RECIPE_JOURNAL): when each run of a task's body
began and ended (``time.monotonic()``, one clock for every process of the machine), and in
which process; when each worker process found its client made and, at its shutdown, closed.

$RECIPE_WITHOUT_LOCK=1 takes the lock out (a client whose locks never exclude), so the test can
show what the lock prevents; $RECIPE_CONNECT_BEFORE_FORK=1 makes the client in the worker's
main process, at import, as a recipe that ignores the fork would.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from celery.signals import worker_process_init, worker_process_shutdown

import celery_recipe
import tumbler
from tumbler.errors import ClientClosed

app = celery_recipe.app

JOURNAL = Path(os.environ["RECIPE_JOURNAL"])
#: how long a run's work lasts: what a second run at the same time would overlap
WORK_SECONDS = float(os.environ.get("RECIPE_WORK_SECONDS", "0.4"))


def note(*fields: object) -> None:
    # one short write on a file opened for appending: lines of several processes never mix
    with JOURNAL.open("a") as journal:
        journal.write(" ".join(str(field) for field in fields) + "\n")


def recorded_work(what: str) -> None:
    began = time.monotonic()
    time.sleep(WORK_SECONDS)
    note("ran", what.replace(" ", "-"), os.getpid(), began, time.monotonic())


celery_recipe.work = recorded_work


class NoLock:
    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        return True

    def release(self) -> None:
        pass

    def __enter__(self) -> NoLock:
        return self

    def __exit__(self, *_: object) -> None:
        pass


class NoLocks:
    def lock(self, name: str, **_: object) -> NoLock:
        return NoLock()


if os.environ.get("RECIPE_WITHOUT_LOCK"):
    celery_recipe.locks = NoLocks

if os.environ.get("RECIPE_CONNECT_BEFORE_FORK"):
    celery_recipe.open_lock_client()
    # the recipe's own receiver would replace the parent's client in each child
    worker_process_init.disconnect(celery_recipe.open_lock_client)


# connected after the recipe's receivers, so these run after them
@worker_process_init.connect
def client_made(**_: Any) -> None:
    if celery_recipe._locks is not None:
        note("opened", os.getpid())


@worker_process_shutdown.connect
def client_closed(**_: Any) -> None:
    locks = celery_recipe._locks
    if locks is None:
        return
    try:
        locks.status("settle-payments")
    except ClientClosed:
        note("closed", os.getpid())
    except tumbler.TumblerError as error:
        note("not-closed", os.getpid(), type(error).__name__)
    else:
        note("not-closed", os.getpid())
