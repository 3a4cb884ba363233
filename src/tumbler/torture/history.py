"""The recorded history of a torture round: JSON Lines files, one per process.

Every process of a round writes its own file, one JSON object per line, flushed as it is
written, so a worker killed with SIGKILL loses at most the line it was writing. Readers skip a
truncated last line (and count it) instead of failing.

Times are ``time.monotonic_ns()``: every process on one machine reads the same
``CLOCK_MONOTONIC``, so stamps from different processes compare exactly (no clock skew), which
is what lets the checker decide overlaps between holders.

Worker events (``ev``):

``start``
    ``client``, ``pid``: the worker is connected and about to loop.
``acquire``
    ``acq`` (this attempt's id, unique in the round), ``side``: acquire invoked; a multi-lock's
    also ``names``, in the order the worker gave them.
``queued``
    the acquire under way took its place in line: the backend refused it a grant and kept
    its entry (the client's ``acquire_waiting`` observer event; at most once per acquire, or
    for a multi-lock, per name it waited for).
``grant``
    ``acq``, ``side``, ``token``, ``ttl`` (granted lease), ``deadline`` (the client's own
    deadline at grant time, ns): acquire returned a hold. A multi-lock's grant has ``tokens``
    (each name's token, by name) instead of ``token``, and the least of its parts' leases as
    ``ttl``.
``no_grant``
    ``acq``, ``why`` (``timeout`` or the error): acquire returned without a hold.
``op``
    ``acq``, ``token``, ``kind`` (``read`` / ``write``), ``t0`` (invoked; the hold's ``held``
    was sampled just before, as ``held``), ``t`` (answered), ``outcome`` (``ok`` /
    ``refused`` / ``error``), ``value`` (read: the counter; write: the value written);
    ``probe`` (true): the write a lost hold did not make, sent after its work stopped. A
    multi-lock holder's requests also have ``lock``, the name whose counter they are about,
    and ``token`` is that name's.
``lost``
    ``acq``, ``reason``: the hold's ``on_lost`` callback ran (stamped as it began).
``work_end``
    ``acq``, ``why`` (``done``: the write was accepted / ``lost``: ``on_lost`` ran /
    ``refused``: the resource had seen a newer token / ``error``: the resource failed): the
    holder stopped working; nothing it sends after this is work.
``release``
    ``acq``, ``t0``, ``t``, ``outcome`` (``ok`` / ``lost``: ``LockLost`` was raised /
    ``error``: the backend could not be reached / ``not_held``).
``error``
    ``what``: an unexpected exception in the worker (a bug in the library or the harness).
``stop``
    the worker stopped on request, after releasing what it held.

The resource's decisions are described in :mod:`tumbler.torture.resource`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = ["Event", "HistoryFile", "HistoryTail", "HistoryWriter", "read_history"]

#: one history record: a JSON object with at least ``ev`` (or ``op`` for the resource) and ``t``
Event = dict[str, Any]


class HistoryWriter:
    """Appends events to a JSON Lines file, one ``write`` and flush per event, thread-safe.

    Each line goes out in one ``os.write`` on an ``O_APPEND`` descriptor, so a process killed
    mid-event leaves at most one partial line, and concurrent threads (a hold's ``on_lost``
    callback runs in the renewal thread) never interleave within a line.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._guard = threading.Lock()

    def write(self, ev: str, **fields: Any) -> Event:
        """Record event ``ev`` stamped now (unless ``fields`` has ``t``); returns the record."""
        record: Event = {"ev": ev, "t": time.monotonic_ns(), **fields}
        self.write_record(record)
        return record

    def write_record(self, record: Event) -> None:
        """Append ``record`` as one line."""
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        with self._guard:
            if self._fd < 0:
                return
            os.write(self._fd, line)

    def close(self) -> None:
        with self._guard:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass
class HistoryFile:
    """The events read from one history file, and how many lines could not be read."""

    path: Path
    events: list[Event] = field(default_factory=list)
    #: lines that were not a JSON object: a truncated last line after a SIGKILL, normally
    damaged_lines: int = 0


def _parse(line: bytes) -> Event | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def read_history(path: str | Path) -> HistoryFile:
    """Read a history file, skipping (and counting) lines that are not whole JSON objects."""
    history = HistoryFile(Path(path))
    try:
        data = history.path.read_bytes()
    except FileNotFoundError:
        return history
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        record = _parse(line)
        if record is None:
            history.damaged_lines += 1
        else:
            history.events.append(record)
    return history


class HistoryTail:
    """Follows a growing history file: :meth:`new_events` returns the complete lines added
    since the last call (a partial last line waits until its newline arrives)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file: IO[bytes] | None = None
        self._partial = b""

    def new_events(self) -> Iterator[Event]:
        if self._file is None:
            try:
                self._file = self.path.open("rb")
            except FileNotFoundError:
                return
        data = self._partial + self._file.read()
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            record = _parse(line)
            if record is not None:
                yield record

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
