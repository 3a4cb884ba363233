"""The SQLite backend's deployment for the torture harness: a file, no server."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tumbler.torture.backends import WORKER_FAULTS, BackendSpec, Deployment, Settings


class _SQLiteDeployment(Deployment):
    def versions(self) -> dict[str, str]:
        return {"sqlite": sqlite3.sqlite_version}


def _start(directory: Path, settings: Settings) -> Deployment:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    url = f"sqlite://{directory / 'locks.db'}"
    return _SQLiteDeployment(url, url)


DEPLOYMENTS = (
    BackendSpec(
        name="sqlite",
        summary="SQLite file (no server)",
        scheme="sqlite",
        faults=WORKER_FAULTS,
        default_faults=WORKER_FAULTS,
        not_promised={},
        promise="exclusion and increasing tokens between processes of one machine; a "
        "dead holder's lease runs out",
        # a lease that runs out rings nobody: waiters find it at their next re-check (0.1 s
        # apart with doorbells, up to 50 ms polls without), and a busy machine delays them
        recovery_grace=2.0,
        start=_start,
    ),
)
