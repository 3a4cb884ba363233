"""tumbler in Celery: tasks that run one at a time across every worker process and machine.

    pip install 'tumbler-locks[redis]' 'celery[redis]'
    TUMBLER_URL=redis://127.0.0.1:6379/0 CELERY_BROKER_URL=redis://127.0.0.1:6379/1 \\
        celery --workdir examples -A celery_recipe worker --concurrency 4

- Each worker process makes its own client, in Celery's ``worker_process_init`` signal, and
  closes it in ``worker_process_shutdown``. The prefork pool forks its children from the
  worker's main process: a client made there (at import, say) would be the parent's, and its
  first call in a child raises ``ForkedClient``; its connections and renewal thread do not
  survive a fork. Closing at shutdown releases what the process still holds, rather than
  leaving it to run out its lease.
- ``settle_payments`` waits its turn: a second run started while one is running blocks on the
  lock (up to an hour here) and then runs.
- ``refresh_prices`` is skipped instead: a run that finds the lock taken (``timeout=0``: one
  try) returns at once and says so, for work where a run already under way will do.

Both leases (``ttl``) are renewed while the task runs; if the worker dies, other workers can
have the lock a minute after its last renewal. ``work`` stands for the tasks' real work.
tests/frameworks/test_celery.py runs this app in a real worker on a real Redis broker.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown

import tumbler

log = logging.getLogger(__name__)

BROKER = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/1")
app = Celery(
    "celery_recipe", broker=BROKER, backend=os.environ.get("CELERY_RESULT_BACKEND", BROKER)
)

#: this worker process's lock client, made when the process starts (see the module's doc)
_locks: tumbler.Locks | None = None


@worker_process_init.connect
def open_lock_client(**_: Any) -> None:
    global _locks
    _locks = tumbler.connect(os.environ.get("TUMBLER_URL"))


@worker_process_shutdown.connect
def close_lock_client(**_: Any) -> None:
    if _locks is not None:
        _locks.close()


def locks() -> tumbler.Locks:
    """This process's lock client."""
    if _locks is None:
        raise RuntimeError(
            "no lock client in this process: it is made in worker_process_init, which only "
            "the prefork pool sends (with --pool solo or threads, connect in worker_init)"
        )
    return _locks


def work(what: str) -> None:
    """Stands for the task's real work."""
    log.info("%s: working", what)
    time.sleep(1.0)


@app.task
def settle_payments() -> str:
    with locks().lock("settle-payments", ttl=60, timeout=3600):
        work("settle payments")
    return "settled"


@app.task
def refresh_prices() -> str:
    lock = locks().lock("refresh-prices", ttl=60)
    if not lock.acquire(timeout=0):
        return "skipped: another run is refreshing the prices"
    try:
        work("refresh prices")
    finally:
        lock.release()
    return "refreshed"
