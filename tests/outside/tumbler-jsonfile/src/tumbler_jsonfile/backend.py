"""``jsonfile://``: locks in one JSON file guarded by ``flock``, for the processes of one machine.

URL grammar::

    jsonfile:///absolute/path/store.json
    jsonfile:relative/path/store.json      resolved against the working directory at connect()
    ...?busy_timeout=5

Option: ``busy_timeout``, the seconds a call waits for other processes' calls on the file
before ``BackendUnavailable`` (default 5).

The store is the JSON file and a lock file beside it (``store.json.lock``, never replaced).
Every call takes ``flock(LOCK_EX)`` on the lock file, reads the JSON file, decides, and, if
anything changed, writes a new file and renames it over the old one: readers and a process
killed half-way never see half a file.

What it guarantees
    Mutual exclusion between every process and thread on this machine that opens the same
    file: a grant is decided (``tumbler.backends.kit.plan``) and recorded while the call holds
    the file lock. Fencing tokens come from one counter in the file (``last_token``): strictly
    increasing for every name, also after a name's entries are gone.

How leases are timed
    On the machine's boot-time clock (``CLOCK_BOOTTIME`` on Linux, which keeps counting
    through suspend; elsewhere the monotonic clock), which every process on the machine shares
    and which a wall-clock step cannot move. The file records which boot its times belong to:
    after a reboot every entry in it is void (its holder is gone) and the token counter jumps
    to the next multiple of 2**32, so that tokens stay increasing even if the last writes
    before a power loss were lost.

How a hold can be lost here
    Only by its lease running out (its holder stopped renewing: paused, or kept from the file
    for a whole lease) or by ``force_release``, which leaves a note per evicted owner in the
    file, found by ``evicted`` until that lease would have ended plus ``NOTE_GRACE``.

Not for
    Network file systems (flock does not exclude other machines there), many locks (every
    call rewrites the whole file) or a durable audit of tokens (nothing is fsynced: a power
    loss may undo the last writes; ``durable_fencing`` is False). Waiters in other processes
    poll; waiters in this process are woken by its releases.

asyncio
    ``open_async`` wraps the blocking backend in ``tumbler.backends.kit.AsyncAdapter``: every
    call runs on one worker thread, renewals and releases ahead of waiting tasks' polls.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from tumbler.backends.contract import (
    BackendURL,
    Clock,
    Grant,
    GrantRequest,
    LockState,
    Renewal,
    SessionEvents,
    SystemClock,
    WakeHub,
)
from tumbler.backends.kit import Decision, Entry, HubWatch, LockStateBuilder, Write, plan, seconds
from tumbler.backends.kit.boot import boot_id, boot_time_ns, token_after_reboot
from tumbler.errors import BackendUnavailable, ConfigurationError, InvalidURL, PermissionDenied

from . import CAPABILITIES

if TYPE_CHECKING:
    from tumbler.backends.kit import AsyncAdapter

__all__ = ["JsonFileBackend", "isolate", "open_async", "open_sync"]

T = TypeVar("T")

#: the ``format`` every store file carries: a file without it is not ours to overwrite
FORMAT = "tumbler-jsonfile 1"

#: how long a force-release note outlives the lease it ended: the evicted holder may learn of
#: its loss a little after that lease would have run out, and should still be told it was forced
NOTE_GRACE = 60.0

_NS = 1_000_000_000


def resolve_path(url: BackendURL) -> Path:
    """The store file a URL names (relative paths against the working directory)."""
    if url.hosts:
        raise InvalidURL(
            "jsonfile:// takes a path, not a host: jsonfile:///absolute/path/store.json",
            backend=url.redacted,
        )
    # "jsonfile:rel/store.json" has the path "rel/store.json"; "jsonfile:///abs" has "/abs"
    if not url.path or url.path.endswith("/"):
        raise InvalidURL("jsonfile:// needs the path of the store file", backend=url.redacted)
    return Path.cwd() / url.path


def isolate(url: BackendURL, token: str) -> str:
    """The descriptor's ``isolate``: a file beside the URL's own (``store-<token>.json`` next
    to ``store.json``), same options, so that the conformance suite can run against a URL given
    by hand: the same store kind, sharing no lock with any other token's file."""
    path = resolve_path(url)
    query = url.raw.partition("?")[2]
    isolated = path.with_name(f"{path.stem}-{token}{path.suffix or '.json'}")
    return f"jsonfile://{isolated}" + (f"?{query}" if query else "")


@dataclass
class _Row:
    """One stored entry of a name: a grant (``entry.token`` set) or a waiter, with its lease."""

    entry: Entry
    #: nanoseconds on ``boot_time_ns``'s clock
    expires_at: int
    holder: str


@dataclass
class _Store:
    """The file's content, as read at the start of a call."""

    boot_id: str
    last_token: int = 0
    last_seq: int = 0
    rows: dict[str, list[_Row]] = field(default_factory=dict)
    #: name -> owner -> (the force-release note, when it may go)
    evictions: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)

    def sweep(self, now: int) -> None:
        """Drop every expired entry and note (the whole file is rewritten anyway)."""
        for name in list(self.rows):
            live = [row for row in self.rows[name] if row.expires_at > now]
            if live:
                self.rows[name] = live
            else:
                del self.rows[name]
        for name in list(self.evictions):
            notes = {o: n for o, n in self.evictions[name].items() if n[1] > now}
            if notes:
                self.evictions[name] = notes
            else:
                del self.evictions[name]

    def live(self, name: str, now: int) -> list[_Row]:
        return [row for row in self.rows.get(name, ()) if row.expires_at > now]

    def encode(self) -> dict[str, object]:
        return {
            "format": FORMAT,
            "boot_id": self.boot_id,
            "last_token": self.last_token,
            "last_seq": self.last_seq,
            "locks": {
                name: [
                    {
                        "owner": row.entry.owner,
                        "seq": row.entry.seq,
                        "shared": row.entry.shared,
                        "limit": row.entry.limit,
                        "fair": row.entry.fair,
                        "token": row.entry.token,
                        "expires_at": row.expires_at,
                        "holder": row.holder,
                    }
                    for row in rows
                ]
                for name, rows in self.rows.items()
            },
            "evictions": {
                name: {owner: [note, until] for owner, (note, until) in notes.items()}
                for name, notes in self.evictions.items()
            },
        }

    @classmethod
    def decode(cls, data: Mapping[str, object]) -> _Store:
        """The store from the file's JSON; KeyError, TypeError or ValueError if malformed."""
        if data.get("format") != FORMAT:
            raise ValueError(f"no 'format': {FORMAT!r}")
        store = cls(
            boot_id=str(data["boot_id"]),
            last_token=_int(data["last_token"]),
            last_seq=_int(data["last_seq"]),
        )
        for name, rows in _mapping(data["locks"]).items():
            store.rows[name] = [_decode_row(_mapping(row)) for row in _list(rows)]
        for name, notes in _mapping(data["evictions"]).items():
            store.evictions[name] = {
                owner: (str(_list(note)[0]), _int(_list(note)[1]))
                for owner, note in _mapping(notes).items()
            }
        return store


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an int, not {value!r}")
    return value


def _mapping(value: object) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, not {type(value).__name__}")
    return value


def _list(value: object) -> list[object]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, not {type(value).__name__}")
    return value


def _decode_row(row: Mapping[str, object]) -> _Row:
    token = row["token"]
    entry = Entry(
        owner=str(row["owner"]),
        seq=_int(row["seq"]),
        shared=bool(row["shared"]),
        limit=_int(row["limit"]),
        fair=bool(row["fair"]),
        token=None if token is None else _int(token),
    )
    return _Row(entry, _int(row["expires_at"]), str(row["holder"]))


#: one wake-up hub per store file, shared by every client of it in this process, so that a
#: release by one client wakes the waiters of all of them at once (other processes poll)
_hubs: weakref.WeakValueDictionary[str, WakeHub] = weakref.WeakValueDictionary()
_hubs_lock = threading.Lock()


def _hub_for(path: Path) -> WakeHub:
    with _hubs_lock:
        hub = _hubs.get(str(path))
        if hub is None:
            hub = WakeHub()
            _hubs[str(path)] = hub
        return hub


class JsonFileBackend:
    """The blocking flavour (``tumbler.backends.contract.Backend``); ``open_async`` runs it on
    a worker thread."""

    capabilities = CAPABILITIES
    #: leases live on their own, not with a session
    session_events: SessionEvents | None = None

    def __init__(self, url: BackendURL) -> None:
        url.allow_options(("busy_timeout",))
        self.url = url.redacted
        self.busy_timeout = url.option("busy_timeout", seconds, 5.0)
        self.clock: Clock = SystemClock()
        self.path = resolve_path(url)
        self.hub = _hub_for(self.path)
        # flock excludes other open file descriptions of the lock file (other processes, and
        # other clients of this process); the threads of this client share one, so a mutex
        # excludes them
        self._mutex = threading.Lock()
        self._closed = False
        with self._errors():
            self._lock_fd = os.open(
                f"{self.path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
            )
        try:
            # fail now, not at the first lock, on a file that is not a store
            with self._store(write=False):
                pass
        except BaseException:
            self.close()
            raise

    # -- the file ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Convert OS errors to tumbler's at this one edge, keeping the cause."""
        try:
            yield
        except PermissionError as error:
            raise PermissionDenied(
                f"no permission to use {self.path}: {error}", backend=self.url
            ) from error
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as error:
            raise ConfigurationError(
                f"cannot use {self.path}: {error}", backend=self.url
            ) from error
        except OSError as error:
            raise BackendUnavailable(
                f"cannot use {self.path}: {error}", backend=self.url
            ) from error

    def _lock(self, timeout: float) -> None:
        """Take this client's mutex and the file lock within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        if not self._mutex.acquire(timeout=max(0.0, timeout)):
            raise self._busy(timeout)
        try:
            if self._closed:
                raise BackendUnavailable("the jsonfile backend is closed", backend=self.url)
            delay = 0.0005
            while True:
                try:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return
                except BlockingIOError:
                    # flock cannot wait with a bound: try again until the deadline (another
                    # process holds it for a read and a write, well under a millisecond,
                    # unless it is paused)
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise self._busy(timeout) from None
                    time.sleep(min(delay, left))
                    delay = min(delay * 2, 0.01)
        except BaseException:
            self._mutex.release()
            raise

    def _unlock(self) -> None:
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        finally:
            self._mutex.release()

    def _busy(self, waited: float) -> BackendUnavailable:
        return BackendUnavailable(
            f"{self.path} stayed locked by other calls for more than {waited:.3g} s",
            backend=self.url,
        )

    @contextlib.contextmanager
    def _store(self, *, write: bool, timeout: float | None = None) -> Iterator[tuple[_Store, int]]:
        """The store and the time now, under the file lock; with ``write``, what the block
        left in the store is written back (not if it raised)."""
        with self._errors():
            self._lock(self.busy_timeout if timeout is None else timeout)
            try:
                now = boot_time_ns()
                store, changed = self._read()
                yield store, now
                if write or changed:
                    self._write(store)
            finally:
                self._unlock()

    def _read(self) -> tuple[_Store, bool]:
        """The store in the file (a new one if there is no file), and whether it changed on
        reading: a store of another boot loses its entries, and its token counter jumps."""
        boot = boot_id()
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return _Store(boot_id=boot), True
        try:
            store = _Store.decode(_mapping(json.loads(text)))
        except (KeyError, TypeError, ValueError) as error:
            raise ConfigurationError(
                f"{self.path} is not a tumbler jsonfile store ({error})", backend=self.url
            ) from None
        if store.boot_id == boot:
            return store, False
        # the entries' holders died with that boot, and the times are of its clock
        return _Store(boot_id=boot, last_token=token_after_reboot(store.last_token)), True

    def _write(self, store: _Store) -> None:
        """Replace the file at once: a reader sees the old content or the new, never a mix."""
        fd, temporary = tempfile.mkstemp(
            dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp"
        )
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(store.encode(), handle, separators=(",", ":"))
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    # -- the contract ------------------------------------------------------------------------

    def try_grant(self, request: GrantRequest) -> Grant | None:
        with self._store(write=True) as (store, now):
            store.sweep(now)
            rows = store.rows.setdefault(request.name, [])
            # kit.plan decides (tumbler's grant rule) and says what to write; PermitsMismatch
            # comes from here, before anything is written
            decided = plan(
                [row.entry for row in rows],
                request.owner,
                request.shared,
                request.limit,
                request.fair,
                request.queue,
            )
            mine = next((row for row in rows if row.entry is decided.mine), None)
            if decided.decision is Decision.HELD:
                # a retry whose first reply was lost: the grant already made
                return Grant(request.name, request.owner, decided.held_token, request.ttl)
            waiter_expiry = now + round(self.capabilities.waiter_ttl * _NS)
            if decided.write is Write.REFRESH_WAITER:
                assert mine is not None
                mine.expires_at = waiter_expiry
                return None
            if decided.write is Write.ADD_WAITER:
                store.last_seq += 1
                entry = Entry(
                    request.owner, store.last_seq, request.shared, request.limit, request.fair, None
                )
                rows.append(_Row(entry, waiter_expiry, request.holder))
                return None
            if decided.write is Write.NOTHING:
                if not rows:
                    del store.rows[request.name]
                return None
            # ADD_GRANT or GRANT_WAITER: a fresh token; a waiter keeps its place in line
            store.last_token += 1
            expires_at = now + round(request.ttl * _NS)
            if mine is not None:
                mine.entry = Entry(
                    request.owner,
                    mine.entry.seq,
                    request.shared,
                    request.limit,
                    request.fair,
                    store.last_token,
                )
                mine.expires_at = expires_at
            else:
                store.last_seq += 1
                entry = Entry(
                    request.owner,
                    store.last_seq,
                    request.shared,
                    request.limit,
                    request.fair,
                    store.last_token,
                )
                rows.append(_Row(entry, expires_at, request.holder))
            return Grant(request.name, request.owner, store.last_token, request.ttl)

    def renew(self, name: str, owner: str, ttl: float) -> float | None:
        return self.renew_all([Renewal(name, owner, ttl)], self.busy_timeout)[0]

    def renew_all(self, renewals: Sequence[Renewal], timeout: float) -> list[float | None]:
        """Every renewal under one file lock, waiting at most ``timeout`` for it."""
        if not renewals:
            return []
        with self._store(write=True, timeout=min(timeout, self.busy_timeout)) as (store, now):
            # sweeping first is what keeps an expired lease dead: it is gone, not renewed
            store.sweep(now)
            results: list[float | None] = []
            for renewal in renewals:
                row = next(
                    (
                        row
                        for row in store.rows.get(renewal.name, ())
                        if row.entry.owner == renewal.owner and row.entry.token is not None
                    ),
                    None,
                )
                if row is None:
                    results.append(None)
                else:
                    row.expires_at = now + round(renewal.ttl * _NS)
                    results.append(renewal.ttl)
            return results

    def release(self, name: str, owner: str) -> bool:
        with self._store(write=True) as (store, now):
            rows = store.rows.get(name, [])
            mine = next((row for row in rows if row.entry.owner == owner), None)
            store.sweep(now)
            if mine is None:
                return False
            live = mine.expires_at > now
            if live:
                store.rows[name].remove(mine)
                if not store.rows[name]:
                    del store.rows[name]
        if live:
            # a hint for the waiters of this process; those of others find out by polling
            self.hub.notify(name)
        return live and mine.entry.token is not None

    def watch(self, name: str, owner: str) -> HubWatch:
        # made without I/O: it subscribes to the hub at once, so no release of this process
        # between now and the wait is missed; for the others, it returns at the poll timeout
        return HubWatch(self.clock, name, self.hub)

    def inspect(self, name: str) -> LockState:
        states = self._states(name)
        return states[0] if states else LockState(name=name, holders=(), waiters=0)

    def inspect_all(self) -> list[LockState]:
        return self._states(None)

    def _states(self, only: str | None) -> list[LockState]:
        with self._store(write=False) as (store, now):
            names = sorted(store.rows) if only is None else [only]
            states: list[LockState] = []
            for name in names:
                live = store.live(name, now)
                if not live:
                    continue
                builder = LockStateBuilder(name)
                for row in sorted(live, key=lambda row: row.entry.seq):
                    builder.add(
                        token=row.entry.token,
                        shared=row.entry.shared,
                        limit=row.entry.limit,
                        expires_in=(row.expires_at - now) / _NS,
                        holder=row.holder,
                    )
                states.append(builder.build())
            return states

    def force_release(self, name: str, note: str) -> int:
        with self._store(write=True) as (store, now):
            store.sweep(now)
            rows = store.rows.pop(name, [])
            grants = [row for row in rows if row.entry.token is not None]
            waiters = [row for row in rows if row.entry.token is None]
            if waiters:
                store.rows[name] = waiters
            notes = store.evictions.setdefault(name, {})
            for row in grants:
                notes[row.entry.owner] = (note, row.expires_at + round(NOTE_GRACE * _NS))
            if not notes:
                del store.evictions[name]
        if grants:
            self.hub.notify(name)
        return len(grants)

    def evicted(self, name: str, owner: str) -> str | None:
        with self._store(write=False) as (store, now):
            found = store.evictions.get(name, {}).get(owner)
            return found[0] if found is not None and found[1] > now else None

    def close(self) -> None:
        """Close the lock file; calls after this raise ``BackendUnavailable`` (again is
        harmless). What is held stays in the file until its lease runs out: the client
        releases its holds before it closes its backend."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            fd = getattr(self, "_lock_fd", None)
            if fd is not None:
                os.close(fd)


def open_sync(url: BackendURL) -> JsonFileBackend:
    """What ``tumbler.connect("jsonfile://...")`` calls."""
    return JsonFileBackend(url)


async def open_async(url: BackendURL) -> AsyncAdapter:
    """What ``tumbler.aio.connect("jsonfile://...")`` calls."""
    # opening may wait for other processes' calls: not on the event loop
    import asyncio  # the blocking flavour never needs it

    from tumbler.backends.kit import AsyncAdapter

    backend = await asyncio.to_thread(JsonFileBackend, url)
    return AsyncAdapter(backend, in_thread=True, hub=backend.hub)


if TYPE_CHECKING:
    # mypy checks here that this module has what tumbler.connect calls
    from tumbler.backends.descriptor import BackendOpener

    from . import backend as _this

    _checked: BackendOpener = _this
