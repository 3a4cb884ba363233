"""``sqlite://``: locks in an SQLite file, for processes on one machine. No server needed.

URL grammar::

    sqlite://                          the default file: <user cache dir>/tumbler/locks.db
    sqlite:///absolute/path/locks.db
    sqlite:relative/path/locks.db      resolved against the working directory at connect()
    ...?busy_timeout=5&synchronous=normal&max_waiters=10000

Options: ``busy_timeout`` (seconds a transaction waits for another process's write lock
before ``BackendUnavailable``; default 5), ``synchronous`` (``normal``, the default, or
``full``: see durability below), ``max_waiters`` (default 10000: the most waiters one lock
queues; one more acquire that would wait gets ``TooManyWaiters``, and leaves nothing behind).

What it guarantees
    Mutual exclusion between every process and thread on this machine that opens the same
    file: each grant is decided and recorded in one short ``BEGIN IMMEDIATE`` transaction
    (write-ahead log, so readers never block). Fencing tokens come from one counter in the
    file: strictly increasing for every name, also after a name's rows are gone.

How leases are timed
    On the machine's boot-time clock (``CLOCK_BOOTTIME`` on Linux: it keeps counting through
    suspend), never on wall-clock time, so a clock step cannot expire or prolong a lease. The
    file records which boot it belongs to: after a reboot every lease in it is void (their
    holders are gone) and the fencing counter jumps to the next multiple of 2**32, so that
    tokens stay increasing even if a power loss took the last transactions with it.

Durability
    Grants, leases and tokens survive a crash (SIGKILL) of any client: SQLite's journal is
    atomic. With ``synchronous=normal`` a power loss or OS crash can undo the last few
    transactions; the boot jump above keeps tokens increasing across it. ``synchronous=full``
    syncs every transaction (slower).

Waking waiters
    On Linux each client has a doorbell: a datagram socket in the abstract namespace (no file
    to leave behind), named in its waiters' entries (column ``wake``). A release (or forced
    release) that frees something reads the name's line after its commit and rings the
    doorbells of the waiters the grant rule now lets through, in arrival order (one for a
    mutex: no herd); the rung client's waiter tries again at once. A ring is a hint: waiters
    still poll every ``recheck_interval`` (0.1 s), which is what a lease that ran out by
    itself, a release by an older tumbler, or a lost ring costs them; so does a release by a
    process in another network namespace (a container sharing the file: abstract sockets
    belong to a namespace). Anyone who can read the database learns the doorbells' names and
    can ring them: a ring only makes a waiter try again. Elsewhere waiters poll with a
    jittered backoff (2 to 50 ms).

Waking state watchers (``locks.watch``, elections' ``observe``)
    A state watcher registers its client's doorbell for the name in ``tumbler_watchers`` (a
    row of name, doorbell and expiry, set again by the watch every ``WATCHER_TTL / 3``, so a
    watcher that went away stops being rung within ``WATCHER_TTL``, 30 s; rows that ran out
    go at the next registration, and every row at a new boot). Every transaction that
    changes a name's entries (a grant, a waiter arriving, a release, a withdrawal, a forced
    release, the removal of rows that ran out: by a grant of the name, or the sweep of
    others) rings, after its commit, the doorbells registered for that name, with a mark that
    wakes the client's state watchers only (``STATE_TAG``), not its waiters. The uncontended
    pair learns of them with its changes: the grant's draw of a token and the release's
    DELETE return them from a subquery on the table's primary key, so a name nobody watches
    costs them no statement more (under a microsecond each); a waiter's arrival, the removal
    of rows that ran out and a forced release look them up with a statement of their own
    before the commit (the sweep reads the expired rows first, and deletes only if it found
    any). A ring is a hint, as for waiters: the watcher reads the name again, and again every
    ``recheck_interval`` anyway (a lease that ran out with nobody to remove its row, a change
    by an older tumbler, a watcher in another network namespace). Without doorbells (not
    Linux) nobody could ring a watcher in another process, so ``state_wakeups`` is off
    there, and watchers poll.

How a hold can be lost here
    Only by its lease running out (the holder stopped renewing: paused, or unable to get the
    file's write lock within ``busy_timeout`` for a whole lease) or by ``force_release``.
    A forced release leaves its note for each holder it evicted (table ``tumbler_evictions``,
    written in the transaction that removes the grants), where ``evicted`` finds it until
    that lease would have ended plus ``NOTE_GRACE``; expired notes are swept with the grants'
    rows, and a new boot clears them with the leases.

Lock-delay
    A grant made with a ``lock_delay`` keeps it in its row (column ``lock_delay``, in ns), and
    its row's ``expires_at`` is the end of its lease plus that delay: the lease ends at
    ``expires_at - lock_delay``. So the row lives, and closes the name, until the delay is over,
    and everything that drops rows whose ``expires_at`` is past (a grant's clean-up of its
    name, the sweep of other names, a client of an older tumbler, which sees the lapsed grant
    as a live one and leaves it be) keeps it that long. Renewing moves both ends and needs the
    lease live; a release leaves a lapsed grant in place; ``status`` tells it by the lease's
    end. A waiter's row, and a grant made without a delay, have ``lock_delay`` 0: the column
    changes nothing for them. Rows written before the column was added read as 0 (its
    default); a value outside 0 to an hour is refused by the file itself (a ``CHECK``), so none
    can be stored. A new boot clears lapsed grants with the rest: a delay is for the writes of
    a holder, and every holder on this machine ended with its boot.

Not for
    Network file systems (NFS, SMB, 9p, sshfs, ...): their locking breaks SQLite, and so this
    backend refuses them. ``:memory:`` databases are refused too: each connection would get a
    database of its own, so nothing would be excluded. Each poll refreshes the waiter's entry
    (a 1 s lease), so a waiter that dies holds up a fair line for at most 1 s. Leases are at
    least 0.5 s (``capabilities.min_ttl``).

asyncio
    An asyncio client runs its SQLite calls on one thread of its own (``kit/adapter.py``),
    where renewals and releases go before the waiting tasks' polls, and queued polls are
    decided in one transaction (``try_grant_many``). Grants, releases and renewals run on the
    event loop itself when nothing is queued for that thread and no other task of the client
    polls (``call_nowait``): through a connection of the loop's own whose busy timeout is 0, so
    that a write lock held by anyone else sends the call to the thread instead of making the
    loop wait. That connection never checkpoints the WAL (a checkpoint fsyncs): every
    ``NOWAIT_UPKEEP``-th call goes to the thread, whose connection does, and with
    ``synchronous=full`` (an fsync per commit) none runs inline.

Waiting for the write lock
    SQLite's busy handler pauses a whole millisecond at first, where another client's grant
    or release holds the write lock for some tens of microseconds. So a blocking grant or
    release (the asyncio client's thread's too) tries on a no-wait connection first and again
    after pauses of 50 µs doubling to 0.8 ms (``SHORT_PAUSES``), and only then waits in the
    busy handler, up to ``busy_timeout``; one call in ``NOWAIT_UPKEEP`` goes straight to the
    usual connection, which checkpoints.

Who else can touch the database
    Whoever can write the database, one of its companions (``-wal``, ``-shm``, ``-journal``)
    or a directory on its path can release anyone's locks in it. So at every connect, for the
    default file and for a path you name alike, tumbler refuses (``ConfigurationError``, naming
    the path and what is wrong: "writable by other users (mode 0666)", "owned by uid 1001")
    what someone other than root, you and a group you are in could change:

    - the database or a companion owned by another user (but see groups below), or writable
      by other users or by a group you are not in; a symlink in place of either (never
      followed: it could lead to another database), or anything but a regular file;
    - the database's directory on the same terms, and also when it is sticky (``/tmp``): there
      others could plant the companions before SQLite makes them;
    - any directory above it, or symlink on the way, on the same terms, except that a sticky
      directory others may write (``/tmp``) may be passed through to an entry of yours or
      root's: they cannot rename or remove that.

    Sharing between users is what groups are for, and is allowed: a database owned by a
    member of a group you are in, writable by that group, in a directory of the same group
    (make it setgid, ``chmod 2770``, so that the companions get the group too). Every member
    can then take and release the others' locks; a group that every account is in
    (``users``) protects nothing. Create the shared file yourself with the mode it needs
    (``install -m 660 -g GROUP /dev/null /srv/app/locks.db``): tumbler makes a missing
    database 0600, whatever the umask, and SQLite gives the companions the database's mode. The
    default file is private: its directory (``<user cache dir>/tumbler``, made 0700 with any
    missing parents) and the file must be yours and writable by you alone. No option weakens
    these checks: each setup they refuse has a safe form (a directory of your own, or a
    group's).

    The checks come before SQLite opens the file by its path (SQLite cannot be handed an open
    file; Python's sqlite3 cannot ask it not to follow symlinks), and each thread's connection
    opens it again later. What closes that gap is the rule above: nobody but root, you and your
    group can rename, replace or add anything on the path, so nobody else can swap the file or
    a directory between the check and the open. The database file itself is opened with
    ``O_NOFOLLOW`` and checked on the open file. POSIX ACLs are not read: an ACL that lets
    someone else write is its owner's decision.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import math
import os
import re
import sqlite3
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

if sys.platform != "win32":
    import grp
    import pwd

from ... import _core as core
from ..._clock import SYSTEM_CLOCK, Clock
from ..._logs import logger
from ..._url import BackendURL
from ...errors import (
    BackendUnavailable,
    ConfigurationError,
    InvalidURL,
    PermissionDenied,
    PermitsMismatch,
    TooManyWaiters,
    TumblerError,
)
from ..contract import (
    STATE_TAG,
    Grant,
    GrantRequest,
    LockState,
    Renewal,
    SessionEvents,
    WakeHub,
)
from ..kit import HubWatch, LockStateBuilder, MarkedWatch
from ..kit.boot import boot_id, boot_time_ns, token_after_reboot
from ..kit.errors import ErrorMap, Rule, Site, mentions
from ..kit.options import DEFAULT_MAX_WAITERS, line_full, waiter_count
from . import CAPABILITIES

if TYPE_CHECKING:
    import socket

_log = logger("tumbler.sqlite")

T = TypeVar("T")

SCHEMA_VERSION = 1

NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "9p",
        "sshfs",
        "fuse.sshfs",
        "ceph",
        "glusterfs",
        "fuse.glusterfs",
        "lustre",
        "afs",
        "gpfs",
        "davfs",
        "fuse.davfs2",
        "fuse.s3fs",
        "ncpfs",
    }
)

# Sweep a few expired rows of other names with each grant, so that rows of names nobody asks
# for again do not pile up.
_SWEEP = 8

#: one call in this many that could run on the event loop goes to the adapter's thread
#: instead, whose connection checkpoints the WAL when it has grown (the loop's never does:
#: a checkpoint fsyncs). SQLite's own checkpoint threshold is 1000 pages, a few hundred of
#: our transactions.
NOWAIT_UPKEEP = 64

#: the pauses a blocking grant or release takes while another connection holds the write
#: lock, before it leaves the wait to SQLite's busy handler: that handler's first pause is a
#: whole millisecond, where another client's grant or release holds the lock for some tens
#: of microseconds. A waiter that a release has just woken meets the releaser's next try
#: often, and would otherwise sleep through a millisecond per hand-off.
SHORT_PAUSES = (0.00005, 0.0001, 0.0002, 0.0004, 0.0008)
#: how a short pause is taken (a seam for the test that shows the pauses are taken)
_pause = time.sleep

#: how long a force-release note outlives the lease it ended: the evicted holder may learn of
#: its loss a little after that lease would have run out (a renewal that waited for the write
#: lock, a release that finds the grant gone), and should still be told it was forced
NOTE_GRACE = 60.0

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS tumbler_meta (
        key   TEXT PRIMARY KEY,
        value
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS tumbler_entries (
        seq        INTEGER PRIMARY KEY AUTOINCREMENT,  -- arrival order
        name       TEXT NOT NULL,
        owner      TEXT NOT NULL,
        shared     INTEGER NOT NULL,
        lim        INTEGER NOT NULL,    -- shared holders admitted, 0 = any number
        fair       INTEGER NOT NULL,
        token      INTEGER,             -- fencing token of a grant, NULL for a waiter
        expires_at INTEGER NOT NULL,    -- ns on the boot-time clock of boot meta.boot_id
        holder     TEXT NOT NULL,       -- host and pid, for operators
        UNIQUE (name, owner)
    )""",
    "CREATE INDEX IF NOT EXISTS tumbler_entries_expiry ON tumbler_entries (expires_at)",
    # Added after schema 1 was released: IF NOT EXISTS adds it to older files at connect, and
    # a client of an older tumbler simply never writes or reads it.
    """CREATE TABLE IF NOT EXISTS tumbler_evictions (
        id         INTEGER PRIMARY KEY,
        name       TEXT NOT NULL,
        owner      TEXT NOT NULL,       -- the owner of the grant force_release removed
        note       TEXT NOT NULL,       -- who forced it, from where, when, why
        expires_at INTEGER NOT NULL,    -- ns on the boot-time clock of boot meta.boot_id
        UNIQUE (name, owner)
    )""",
    "CREATE INDEX IF NOT EXISTS tumbler_evictions_expiry ON tumbler_evictions (expires_at)",
    # Added after schema 1 was released, as tumbler_evictions was; a client of an older
    # tumbler never reads it (its changes ring no state watcher: they see them at a re-check).
    # No index on expires_at: only a watcher's own upkeep looks rows up by it.
    """CREATE TABLE IF NOT EXISTS tumbler_watchers (
        name       TEXT NOT NULL,
        wake       TEXT NOT NULL,       -- the doorbell of a client that watches the name's state
        expires_at INTEGER NOT NULL,    -- ns on the boot-time clock of boot meta.boot_id
        PRIMARY KEY (name, wake)
    ) WITHOUT ROWID""",
)

#: how long a state watcher's row lives unless its watch sets it again (at a third of it, as
#: it waits): a watcher that went away costs the name's changes a ring to nobody for at most
#: this long
WATCHER_TTL = 30.0

#: the doorbells of the state watchers of a name (parameters: name, now), space-separated, or
#: NULL if nobody watches it: a subquery that a grant's draw of its token and a release return
#: beside their own results, so that a pair on a name nobody watches costs no statement more
#: (one look into the table's primary key, inside each statement)
_WATCHERS = (
    "(SELECT group_concat(wake, ' ') FROM tumbler_watchers WHERE name = ? AND expires_at > ?)"
)


def filesystem_type(path: str, mountinfo: str) -> str | None:
    """The type of the file system holding ``path``, read from /proc/self/mountinfo text."""
    best: tuple[int, str] | None = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        # the kernel writes space, tab, newline and backslash as octal escapes (\040 ...)
        mount_point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        fs_type = line.split(" - ", 1)[1].split()[0]
        prefix = mount_point.rstrip("/") + "/"
        if (path == mount_point or path.startswith(prefix) or mount_point == "/") and (
            best is None or len(mount_point) >= best[0]  # a later mount hides an earlier one
        ):
            best = (len(mount_point), fs_type)
    return best[1] if best else None


def _refuse_network_filesystem(path: Path, url: str) -> None:
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return
    fs_type = filesystem_type(str(path.parent), mountinfo)
    if fs_type in NETWORK_FILESYSTEMS:
        raise ConfigurationError(
            f"{path} is on a network file system ({fs_type}), where SQLite's locking does not "
            "work; use a local file or a server backend",
            backend=url,
        )


def _is_directory_or_hidden(path: Path) -> bool:
    """False only if ``path`` certainly is no directory (a search we may not make: True)."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except PermissionError:
        return True
    except OSError:
        return False


def _quietly(check: Callable[[], bool]) -> bool:
    """A path check, False where the path cannot be looked at: opening it says why."""
    try:
        return check()
    except OSError:
        return False


def default_path() -> Path:
    """The default lock file: in the user's cache directory, private to the user."""
    import platformdirs  # only the default file needs it

    return Path(platformdirs.user_cache_dir("tumbler")) / "locks.db"


#: the files SQLite keeps beside the database, named after it (WAL mode; the rollback journal)
COMPANIONS = ("-wal", "-shm", "-journal")

_MAX_SYMLINKS = 40  # as many as Linux follows in one path
_O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK: int = getattr(os, "O_NONBLOCK", 0)


def _user(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (KeyError, NameError):
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return f"group {gid} ({grp.getgrgid(gid).gr_name})"
    except (KeyError, NameError):
        return f"group {gid}"


def _mode(mode: int) -> str:
    return f"mode {stat.S_IMODE(mode):04o}"


class _Trust(NamedTuple):
    """Who may be able to change the database, its companions, and the directories above it:
    root (who can anyway), this process's user, and, where a location may be shared, the
    members of a group this process is in. Anyone else could release its holders' locks."""

    uid: int
    groups: frozenset[int]

    @classmethod
    def of_this_process(cls) -> _Trust | None:
        """None where there are no POSIX users (Windows): no ownership to check."""
        if not hasattr(os, "geteuid"):
            return None
        return cls(os.geteuid(), frozenset({os.getegid(), *os.getgroups()}))

    def problem(self, info: os.stat_result, *, shared: bool, sticky: bool) -> str | None:
        """What lets someone else change this file, directory or symlink; None if nothing.

        ``shared``: a group this process is in may own and write it (a shared setup: only a
        member can give a file its group, so its owner is a member too, or root made it so).
        ``sticky``: a sticky directory that others may write is acceptable (an ancestor such as
        /tmp: they may add entries beside ours, not rename or remove ours, whose owner is
        checked in turn); never for the database's own directory, where they could plant the
        companions before SQLite makes them.
        """
        ours = shared and info.st_gid in self.groups
        if info.st_uid not in (0, self.uid) and not ours:
            return f"is owned by {_user(info.st_uid)}"
        if stat.S_ISLNK(info.st_mode):
            return None  # a symlink's mode means nothing: only its owner can change it
        excused = sticky and info.st_mode & stat.S_ISVTX
        if info.st_mode & stat.S_IWOTH and not excused:
            return f"is writable by other users ({_mode(info.st_mode)})"
        if info.st_mode & stat.S_IWGRP and not ours and not excused:
            member = "" if info.st_gid in self.groups else ", which you are not in"
            return f"is writable by {_group(info.st_gid)}{member} ({_mode(info.st_mode)})"
        return None


def _make_private_dirs(directory: Path, url: str) -> None:
    """``directory`` and its missing parents, made 0700 (``mkdir -p`` makes the parents by the
    umask: 0777 under umask 0, which the checks would then refuse)."""
    missing = []
    for candidate in (directory, *directory.parents):
        if os.path.lexists(candidate):
            break
        missing.append(candidate)
    for candidate in reversed(missing):
        try:
            # the umask can only take bits away from 0700
            os.mkdir(candidate, 0o700)
        except FileExistsError:
            pass  # made meanwhile: checked below like any other
        except PermissionError as error:
            raise PermissionDenied(f"cannot make {candidate}: {error}", backend=url) from error
        except OSError as error:
            raise ConfigurationError(f"cannot make {candidate}: {error}", backend=url) from error


def _lstat(entry: Path, database: Path, url: str) -> os.stat_result:
    try:
        return os.lstat(entry)
    except (FileNotFoundError, NotADirectoryError):
        raise ConfigurationError(
            f"cannot use {database}: {entry} is not an existing directory", backend=url
        ) from None
    except PermissionError as error:
        raise PermissionDenied(
            f"cannot use {database}: no permission to look at {entry}", backend=url
        ) from error
    except OSError as error:
        raise ConfigurationError(f"cannot use {database}: {entry}: {error}", backend=url) from error


def _secure_directory(database: Path, trust: _Trust | None, url: str, *, private: bool) -> Path:
    """The directory holding ``database`` (an absolute path), resolved as the kernel resolves
    it, having checked every directory and symlink on the way from /: owned by root, this user
    or (unless ``private``) a group of its, and writable by no one else; a sticky directory
    others may write only above the database's own.

    This is what makes the check safe to act on: SQLite opens the database by its path (and
    again for each thread's connection), after the check; nobody but those trusted can swap a
    directory or plant a symlink on the path in between.
    """

    def check(directory: Path, info: os.stat_result, *, final: bool) -> None:
        if trust is None:
            return
        if final:
            problem = trust.problem(info, shared=not private, sticky=False)
            why = "another user could replace the database or plant its -wal, -shm or -journal file"
        else:
            problem = trust.problem(info, shared=True, sticky=True)
            why = "another user could replace what is below it"
        if problem is not None:
            raise ConfigurationError(
                f"refusing {database}: {directory} {problem}; {why}", backend=url
            )

    current = Path(database.anchor)
    current_info = _lstat(current, database, url)
    check(current, current_info, final=False)
    pending = list(reversed(database.parent.parts[1:]))
    links = 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            # current is a real directory, so its parent is where ".." leads; every directory
            # above it was checked on the way down
            current = current.parent
            current_info = _lstat(current, database, url)
            continue
        child = current / name
        info = _lstat(child, database, url)
        if stat.S_ISLNK(info.st_mode):
            problem = trust.problem(info, shared=True, sticky=True) if trust else None
            if problem is not None:
                raise ConfigurationError(
                    f"refusing {database}: {child}, a symlink, {problem}"
                    "; its owner could point it anywhere",
                    backend=url,
                )
            links += 1
            if links > _MAX_SYMLINKS:
                raise ConfigurationError(
                    f"cannot resolve {database}: too many symlinks (a loop?)", backend=url
                )
            try:
                target = Path(os.readlink(child))
            except OSError as error:  # gone since the lstat
                raise _open_error(database, error, url) from error
            if target.is_absolute():
                current = Path(target.anchor)
                current_info = _lstat(current, database, url)
            pending.extend(reversed(target.parts[1:] if target.is_absolute() else target.parts))
            continue
        if not stat.S_ISDIR(info.st_mode):
            raise ConfigurationError(
                f"cannot use {database}: {child} is not an existing directory", backend=url
            )
        check(child, info, final=False)
        current, current_info = child, info
    check(current, current_info, final=True)
    return current


def _check_file(
    entry: Path,
    info: os.stat_result,
    database: Path,
    trust: _Trust | None,
    url: str,
    *,
    private: bool,
) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise ConfigurationError(
            f"refusing {database}: {entry} is a symlink; tumbler never follows one to the "
            "database or its companions (it could lead to another database); name the file itself",
            backend=url,
        )
    if not stat.S_ISREG(info.st_mode):
        raise ConfigurationError(f"refusing {database}: {entry} is not a regular file", backend=url)
    problem = trust.problem(info, shared=not private, sticky=False) if trust else None
    if problem is not None:
        raise ConfigurationError(
            f"refusing {database}: {entry} {problem}; another user could release your locks",
            backend=url,
        )


def secure_database(database: Path, url: str, *, private: bool) -> Path:
    """Check where the database ``database`` (an absolute path) is and make it if missing
    (0600, whatever the umask); return its path with the directories resolved.

    Refused with ``ConfigurationError``: a database, companion or directory on its path that a
    user other than root, this one and (unless ``private``) the members of its groups could
    change, a symlink in place of the database or a companion, anything but a regular file.
    The companions SQLite makes later get the database file's mode (SQLite copies it).
    """
    trust = _Trust.of_this_process()
    directory = _secure_directory(database, trust, url, private=private)
    path = directory / database.name
    _refuse_network_filesystem(path, url)
    # before the database is made, so that a refusal leaves nothing behind
    for suffix in COMPANIONS:
        companion = path.with_name(path.name + suffix)
        info = _lstat_file(companion, database, url)
        if info is not None:
            _check_file(companion, info, database, trust, url, private=private)
    # O_NONBLOCK: a FIFO put there must not hang the open before it is refused
    flags = os.O_RDONLY | _O_NONBLOCK | _O_NOFOLLOW | getattr(os, "O_NOCTTY", 0)
    for _ in range(3):  # it may come or go between the tries; more often is an attack
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        except OSError as error:
            raise _open_error(database, error, url) from error
        else:
            try:
                if hasattr(os, "fchmod"):
                    os.fchmod(fd, 0o600)  # the umask may have taken bits away from 0600
            finally:
                os.close(fd)
            return path
        # it exists: refused if a symlink, else checked again on the file opened
        info = _lstat_file(path, database, url)
        if info is None:
            continue
        _check_file(path, info, database, trust, url, private=private)
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            continue
        except OSError as error:
            raise _open_error(database, error, url) from error  # ELOOP: a symlink since
        try:
            _check_file(path, os.fstat(fd), database, trust, url, private=private)
        finally:
            os.close(fd)
        return path
    raise ConfigurationError(f"{database} keeps appearing and disappearing", backend=url)


def _lstat_file(entry: Path, database: Path, url: str) -> os.stat_result | None:
    """``lstat(entry)``, None if there is no such file."""
    try:
        return os.lstat(entry)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise _open_error(database, error, url) from error


def _open_error(database: Path, error: OSError, url: str) -> TumblerError:
    if isinstance(error, PermissionError):
        return PermissionDenied(f"no permission to use {database}: {error}", backend=url)
    return ConfigurationError(f"cannot use {database} safely: {error}", backend=url)


def resolve_path(url: BackendURL) -> tuple[Path, bool]:
    """The database path a URL names (absolute; symlinks are resolved by ``secure_database``,
    which checks them), and whether it is the default one."""
    if url.hosts:
        raise InvalidURL(
            "sqlite:// takes a file path, not a host: sqlite:///absolute/path/locks.db",
            backend=url.redacted,
        )
    if url.username is not None or url.password is not None:
        raise InvalidURL(
            "sqlite:// takes no credentials: file permissions guard the database",
            backend=url.redacted,
        )
    raw = url.path
    if raw in ("", "/"):
        return default_path(), True
    bare = raw.lstrip("/")
    if bare == ":memory:" or bare.startswith("file:"):
        raise InvalidURL(
            "in-memory SQLite databases (and URI filenames) are refused: each connection "
            "would get a database of its own, so nothing would be excluded; use memory:// "
            "for in-process tests",
            backend=url.redacted,
        )
    path = Path.cwd() / Path(raw).expanduser()
    if path.name in ("", "..") or _quietly(lambda: stat.S_ISDIR(os.lstat(path).st_mode)):
        raise ConfigurationError(
            f"{path} is a directory: name the database file in it", backend=url.redacted
        )
    return path, False


def isolate(url: BackendURL, token: str) -> str:
    """The descriptor's ``isolate``: a file beside the URL's own (``locks-<token>.db`` next to
    ``locks.db``), same options."""
    path, _ = resolve_path(url)
    query = url.raw.partition("?")[2]
    isolated = path.with_name(f"{path.stem}-{token}{path.suffix or '.db'}")
    return f"sqlite://{isolated}" + (f"?{query}" if query else "")


class _Line:
    """One name's live entries during a transaction (those that decisions can need: see
    ``SQLiteBackend._line``), indexed so that deciding a request costs what the decision
    needs, not a pass over every waiter: a batch of polls from hundreds of waiting tasks would
    otherwise cost hundreds of passes over hundreds of entries.

    ``relevant(request)`` is the part of the line ``core.decide`` looks at for that request:
    every grant, the owner's own entry, the fair waiters ahead of it (fair requests only), and
    for a shared request two waiters of each shared limit (``check_limits`` needs one that is
    not the owner's). ``core.decide`` gives the same answer on it as on the whole line.
    """

    def __init__(self, entries: list[core.Entry]) -> None:
        self.by_owner: dict[str, core.Entry] = {}
        self.grants: list[core.Entry] = []
        self.fair_waiters: list[core.Entry] = []  # in arrival order
        self.shared_waiters: dict[int, list[core.Entry]] = {}  # by limit, at most two each
        for entry in entries:
            self.add(entry)

    def add(self, entry: core.Entry) -> None:
        """A new entry, arriving after every other one."""
        self.by_owner[entry.owner] = entry
        if entry.granted:
            self.grants.append(entry)
            return
        if entry.fair:
            self.fair_waiters.append(entry)
        if entry.shared:
            kept = self.shared_waiters.setdefault(entry.limit, [])
            if len(kept) < 2:
                kept.append(entry)

    def granted(self, waiter: core.Entry, token: int) -> None:
        """The owner of ``waiter`` was granted: its entry keeps its place and gets ``token``."""
        entry = waiter._replace(token=token)
        self.by_owner[entry.owner] = entry
        self.grants.append(entry)
        if waiter in self.fair_waiters:
            self.fair_waiters.remove(waiter)
        kept = self.shared_waiters.get(waiter.limit, [])
        if waiter in kept:
            # the grant itself now stands for its limit in check_limits
            kept.remove(waiter)

    def relevant(self, request: GrantRequest) -> list[core.Entry]:
        mine = self.by_owner.get(request.owner)
        chosen: dict[int, core.Entry] = {}
        if request.fair:
            my_seq = mine.seq if mine is not None else math.inf
            for entry in self.fair_waiters:
                if entry.seq >= my_seq:
                    break
                chosen[entry.seq] = entry
        if request.shared:
            for kept in self.shared_waiters.values():
                for entry in kept:
                    chosen[entry.seq] = entry
        # last, so that they win over any copy from before a grant
        for entry in self.grants:
            chosen[entry.seq] = entry
        if mine is not None:
            chosen[mine.seq] = mine
        return [chosen[seq] for seq in sorted(chosen)]


#: the column a waiter's entry names its client's doorbell in (added after schema 1 was
#: released: added to older files at connect; a client of an older tumbler leaves it NULL and
#: rings nobody, and its waiters poll)
_WAKE_COLUMN = "ALTER TABLE tumbler_entries ADD COLUMN wake TEXT"

#: the column a grant keeps its lock-delay in, ns (see "Lock-delay" above; added after schema
#: 1 was released, as ``wake`` was: older rows, and a client of an older tumbler, get the
#: default 0). The CHECK keeps anything but such a number out of the file, for a row that
#: could not be read as a delay would close a name, or not, by accident.
_LOCK_DELAY_COLUMN = (
    "ALTER TABLE tumbler_entries ADD COLUMN lock_delay INTEGER NOT NULL DEFAULT 0 "
    f"CHECK (typeof(lock_delay) = 'integer' AND lock_delay BETWEEN 0 AND "
    f"{round(core.MAX_LOCK_DELAY * 1e9)})"
)

#: doorbells are Linux abstract-namespace datagram sockets: no file to clean up after a
#: crash, and a dead client's name simply refuses (ECONNREFUSED)
DOORBELLS = sys.platform.startswith("linux")


class _Doorbell:
    """A client's doorbell: a datagram socket other processes ring, after a release, with the
    name of a lock whose waiter of this client the grant rule now lets through; a thread of its
    own turns each ring into ``hub.notify(name)``. A ring is a hint, never a grant: the waiter
    tries again, and keeps polling (``recheck_interval``) in case a ring was lost (a full
    buffer, a releaser of an older tumbler, a lease that ran out by itself). A ring for this
    client's state watchers (``_STATE_RING`` before the name) wakes them alone:
    ``hub.notify(name, (STATE_TAG,))``.

    Anyone on the machine who reads the database can ring it: that costs the waiter a try.
    """

    def __init__(self, hub: WakeHub) -> None:
        import socket

        self._hub = hub
        #: the socket's abstract name without its leading NUL, as the waiter rows store it
        self.address = f"tumbler-sqlite-{os.urandom(12).hex()}"
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind("\0" + self.address)
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._closed = False

    def listen(self) -> None:
        """Start the reader, if not yet (rings sent before wait in the socket's buffer)."""
        if self._reader is not None:
            return
        with self._lock:
            if self._reader is None and not self._closed:
                self._reader = threading.Thread(
                    target=self._read, name="tumbler-sqlite-doorbell", daemon=True
                )
                self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                ring = self._socket.recv(65536)
            except OSError:
                return
            if self._closed:
                return
            if ring.startswith(_STATE_RING):
                self._hub.notify(ring[1:].decode("utf-8", "replace"), (STATE_TAG,))
            elif ring:
                self._hub.notify(ring.decode("utf-8", "replace"))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            reader = self._reader
        if reader is not None:
            # shutting the socket down makes the reader's recv return at once, whatever its
            # buffer holds (a ring of our own could find the buffer full and be dropped)
            import socket

            with contextlib.suppress(OSError):
                self._socket.shutdown(socket.SHUT_RDWR)
            reader.join()
        self._socket.close()


#: what a ring for state watchers starts with, before the name (a lock name has no control
#: characters, so a waiter's ring never does)
_STATE_RING = b"\0"

#: the socket rings go out through (one per process: sendto needs no connection)
_SENDER: socket.socket | None = None
_SENDER_LOCK = threading.Lock()


def _ring(address: str, payload: bytes) -> None:
    """Send one ring, never waiting: a full buffer or a closed doorbell drops it (OSError)."""
    global _SENDER
    sender = _SENDER
    if sender is None:
        import socket

        with _SENDER_LOCK:
            if _SENDER is None:
                _SENDER = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                _SENDER.setblocking(False)
                # the process's one sender lives as long as the process: closed at its exit
                atexit.register(_SENDER.close)
            sender = _SENDER
    sender.sendto(payload, "\0" + address)


#: the most owners a line's read lists as parameters; more go as one JSON array
_LISTED_OWNERS = 8


@functools.cache
def _line_query(owners: int) -> str:
    """The statement that reads what decisions on a name for ``owners`` owners need: a
    parameter for each (one in nearly every call), a statement for each count, which SQLite
    prepares once per connection; for 0, one JSON array of them (a batch of the asyncio
    client's polls with more owners on one name)."""
    listed = ", ".join("?" * owners) if owners else "SELECT value FROM json_each(?)"
    return (
        "SELECT owner, seq, shared, lim, fair, token, expires_at - lock_delay <= ? "
        "FROM tumbler_entries WHERE name = ? AND (token IS NOT NULL OR fair OR shared "
        f"OR owner IN ({listed})) ORDER BY seq"
    )


def _json_list(values: Sequence[object]) -> str:
    """``values`` as a JSON array, for SQLite's ``json_each``: made only where waiters' rows
    are renewed or expire, or a batch reads a line for many owners (a client that never
    waits needs no :mod:`json`)."""
    import json

    return json.dumps(values)


def _to_wake(rows: Sequence[tuple[str, int, int, int, int, int | None, str | None]]) -> set[str]:
    """The doorbells of the waiters the grant rule lets through now (``core.let_through``:
    each counts as granted for those behind it, so a mutex wakes one waiter, not the herd).
    ``rows``: the name's live entries, ``(owner, seq, shared, lim, fair, token, wake)`` by
    seq."""
    line = [
        core.Entry(owner, seq, bool(shared), lim, bool(fair), token)
        for owner, seq, shared, lim, fair, token, _ in rows
    ]
    through, _ = core.let_through(line)
    return {wake for i in through if (wake := rows[i][6]) is not None}


class _Changes:
    """The names whose entries one transaction changed, and the doorbells of their state
    watchers: said by the statement that made the change where it can (``_WATCHERS`` in its
    ``RETURNING``), else looked up once before the commit (``read_rest``). Rung after the
    commit (``SQLiteBackend._tell``). The write lock keeps the watchers as they are until
    then: one that registers after the commit reads the change itself."""

    __slots__ = ("bells", "unread")

    def __init__(self) -> None:
        #: name -> its watchers' doorbells, space-separated (None: nobody watches it)
        self.bells: dict[str, str | None] = {}
        #: names changed whose watchers are not read yet
        self.unread: set[str] = set()

    def said(self, name: str, bells: str | None) -> None:
        """``name`` changed, and a statement returned its watchers (``_WATCHERS``)."""
        self.bells[name] = bells
        self.unread.discard(name)

    def changed(self, name: str) -> None:
        """``name`` changed; its watchers are read before the commit."""
        if name not in self.bells:
            self.unread.add(name)

    def read_rest(self, db: sqlite3.Connection, now: int) -> None:
        for name in self.unread:
            (self.bells[name],) = db.execute(f"SELECT {_WATCHERS}", (name, now)).fetchone()
        self.unread.clear()


class _Busy(Exception):
    """A statement on a no-wait connection found the database locked (nothing was done)."""


class _FileSite(Site):
    """Where an sqlite3 error came up: a backend (its file, its ``busy_timeout``, whether this
    thread's call waits at all) and how long the call waited for the write lock, if not
    ``busy_timeout``."""

    __slots__ = ("db", "waited")

    def __init__(self, db: SQLiteBackend, waited: float | None) -> None:
        super().__init__(db.url)
        self.db = db
        self.waited = waited


def _locked(error: sqlite3.OperationalError, site: _FileSite) -> Exception:
    if getattr(site.db._local, "nowait", False):
        return _Busy()
    return BackendUnavailable(
        "the database stayed locked by another process for more than "
        + (
            f"{site.db.busy_timeout} s (busy_timeout)"
            if site.waited is None
            else f"{site.waited:.3g} s (the call's timeout)"
        ),
        backend=site.backend,
    )


def _unusable(error: sqlite3.OperationalError, site: _FileSite) -> Exception:
    """What an error of the file itself means: its directory gone, no permission to use it
    (said by SQLite, or seen on the file), or else a failure of SQLite's."""
    message, path = str(error), site.db.path
    if "readonly" not in message and not _is_directory_or_hidden(path.parent):
        return ConfigurationError(
            f"cannot use {path}: {path.parent} is not an existing directory", backend=site.backend
        )
    if (
        "readonly" in message
        or not os.access(path.parent, os.W_OK)
        or (path.exists() and not os.access(path, os.R_OK | os.W_OK))
    ):
        return PermissionDenied(f"no permission to use {path}: {message}", backend=site.backend)
    return BackendUnavailable(f"SQLite error: {message}", backend=site.backend)


#: whether SQLite refused a statement because another connection held a lock
_BUSY = mentions("locked", "busy")

#: what sqlite3's errors mean for a lock user
_ERRORS = ErrorMap(
    Rule(sqlite3.OperationalError, _locked, when=_BUSY),
    Rule(sqlite3.OperationalError, _unusable),
    Rule(
        sqlite3.DatabaseError,
        ConfigurationError,
        "{site.db.path} is not a usable tumbler database: {error}",
    ),
)


class SQLiteStateWatch(MarkedWatch):
    """A state watcher's watch (``locks.watch``): entering registers the client's doorbell as
    a watcher of the name (``SQLiteBackend.follow_state``), which the kit's marked watch
    registers again while it waits, so its row outlives the watch by at most
    ``WATCHER_TTL``. Every change of the name's entries rings the doorbell from then on;
    the hub, subscribed at construction, passes the rings on (``STATE_TAG``: no waiter's)."""

    mark_life = WATCHER_TTL

    def __init__(self, backend: SQLiteBackend, name: str) -> None:
        super().__init__(backend.clock, name, backend.hub, STATE_TAG)
        self._backend = backend

    def _set_mark(self) -> None:
        self._backend.follow_state(self.name)


class SQLiteBackend:
    """The blocking flavour; the asyncio one (``opener.open_async``) runs it on a worker
    thread."""

    capabilities = CAPABILITIES
    session_events: SessionEvents | None = None
    clock: Clock = SYSTEM_CLOCK

    def __init__(self, url: BackendURL) -> None:
        url.allow_options(("busy_timeout", "synchronous", "max_waiters"))
        self.url = url.redacted
        self.max_waiters = url.option("max_waiters", waiter_count, DEFAULT_MAX_WAITERS)
        self.busy_timeout = url.option("busy_timeout", float, 5.0)
        if not 0 <= self.busy_timeout <= 3600:
            raise InvalidURL("busy_timeout must be between 0 and 3600 seconds", backend=self.url)
        self.synchronous = url.option("synchronous", str, "normal").lower()
        if self.synchronous not in ("normal", "full"):
            raise InvalidURL("synchronous must be 'normal' or 'full'", backend=self.url)
        path, is_default = resolve_path(url)
        if is_default:
            # named by its file from now on: status and errors say which file was used
            self.url = self.url.replace("sqlite://", f"sqlite://{path}", 1)
            _make_private_dirs(path.parent, self.url)
        self.path = secure_database(path, self.url, private=is_default)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._closed = False
        #: calls offered to call_nowait, for NOWAIT_UPKEEP
        self._nowait_calls = 0
        #: where this client's waiters hear that a release lets them through
        self.hub: WakeHub | None = WakeHub() if DOORBELLS else None
        #: the client's doorbell, made when it first waits or watches (see _own_doorbell)
        self._doorbell: _Doorbell | None = None
        self._doorbell_lock = threading.Lock()
        self._no_doorbell = False
        try:
            self._initialise()
        except BaseException:
            self.close()
            raise

    def _own_doorbell(self) -> _Doorbell | None:
        """The client's doorbell, made at its first waiter or watch: a client that never
        waits has no socket (nor the import of :mod:`socket`). None where there are no
        doorbells, once the client is closed, or if the socket cannot be made (its waiters
        and watchers then poll, as they would without one)."""
        if self.hub is None:
            return None
        doorbell = self._doorbell
        if doorbell is not None:
            return doorbell
        with self._doorbell_lock:
            if self._doorbell is None and not self._closed and not self._no_doorbell:
                try:
                    self._doorbell = _Doorbell(self.hub)
                except OSError as error:
                    self._no_doorbell = True
                    _log.warning("no doorbell for %s (its waiters poll): %s", self.url, error)
            return self._doorbell

    # -- connections and transactions -------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        # a thread has two: the usual one, and one that never waits (call_nowait)
        nowait: bool = getattr(self._local, "nowait", False)
        slot = "nowait_db" if nowait else "db"
        db: sqlite3.Connection | None = getattr(self._local, slot, None)
        if db is None:
            if self._closed:
                raise BackendUnavailable("the SQLite backend is closed", backend=self.url)
            with self._errors():
                db = sqlite3.connect(
                    self.path,
                    timeout=0 if nowait else self.busy_timeout,
                    isolation_level=None,  # we BEGIN and COMMIT ourselves
                    check_same_thread=False,  # close() may run in another thread
                )
            setattr(self._local, slot, db)
            with self._connections_lock:
                self._connections.append(db)  # before anything can fail: close() finds it
            with self._errors():
                db.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
                if nowait:
                    # its commits must not fsync: the usual connection checkpoints instead
                    db.execute("PRAGMA wal_autocheckpoint = 0")
        elif db.in_transaction:
            # Every call starts here, outside a transaction, so this one was abandoned: an
            # exception (a signal handler's) that came as BEGIN returned ended contextlib's
            # __enter__ before the with block. Statements run now would join it and be undone.
            with self._errors():
                db.execute("ROLLBACK")
        return db

    def _errors(self, waited: float | None = None) -> AbstractContextManager[None]:
        """Convert sqlite3's errors to tumbler's at this one edge, keeping the cause.

        ``waited``: how long the call waited for the write lock, if not ``busy_timeout``."""
        return _ERRORS.translating(_FileSite(self, waited))

    @contextlib.contextmanager
    def _transaction(self, waited: float | None = None) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: it takes the write lock up front, so two grants
        can never read the same state and both decide to grant."""
        db = self._connection()
        with self._errors(waited):
            mine = object()
            self._local.transaction = mine
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                # an abandoned one closed late must not roll back a newer transaction
                if getattr(self._local, "transaction", None) is mine and db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _initialise(self) -> None:
        db = self._connection()
        with self._errors():
            db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # takes effect on a new file only
            self._switch_to_wal(db)
            # The boot jump below must reach the disk before any grant that follows it.
            db.execute("PRAGMA synchronous = FULL")
        try:
            with self._transaction() as db:
                # one by one: executescript() would COMMIT the transaction
                for statement in _SCHEMA:
                    db.execute(statement)
                columns = {row[1] for row in db.execute("PRAGMA table_info(tumbler_entries)")}
                if "wake" not in columns:
                    db.execute(_WAKE_COLUMN)
                if "lock_delay" not in columns:
                    db.execute(_LOCK_DELAY_COLUMN)
                meta = dict(db.execute("SELECT key, value FROM tumbler_meta").fetchall())
                version = int(meta.get("schema_version", SCHEMA_VERSION))
                if version > SCHEMA_VERSION:
                    raise ConfigurationError(
                        f"{self.path} was made by a newer tumbler (schema {version})",
                        backend=self.url,
                    )
                boot = boot_id()
                if meta.get("boot_id") != boot:
                    last = int(meta.get("last_token", 0))
                    if "boot_id" in meta:
                        # their holders died with the boot, and the notes' times are void
                        db.execute("DELETE FROM tumbler_entries")
                        db.execute("DELETE FROM tumbler_evictions")
                        db.execute("DELETE FROM tumbler_watchers")
                        last = token_after_reboot(last)
                    db.executemany(
                        "INSERT OR REPLACE INTO tumbler_meta (key, value) VALUES (?, ?)",
                        [
                            ("schema_version", SCHEMA_VERSION),
                            ("boot_id", boot),
                            ("last_token", last),
                        ],
                    )
        finally:
            with self._errors():
                db.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")

    def _switch_to_wal(self, db: sqlite3.Connection) -> None:
        """Put the file in WAL mode, waiting up to ``busy_timeout`` for other connections.

        The switch reads the file's header and then writes it. Where another connection took
        the write lock in between (another process opening the same new file), SQLite answers
        busy at once rather than through its busy handler, since waiting while holding the
        read could deadlock; so the wait is made here, one fresh try at a time."""
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.001
        while True:
            try:
                db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as error:
                if not _BUSY(error) or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(2 * pause, 0.05)

    def call_nowait(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` (``try_grant``, ``release``, ``renew``, ``renew_all``) on this
        thread, without waiting: through this thread's no-wait connection (busy timeout 0),
        ``WouldBlock`` where another connection holds the write lock (the statement that found
        it locked changed nothing, and neither did any before it: each call is one statement
        or one transaction, rolled back). Declines with ``synchronous=full``, whose every
        commit fsyncs, and one call in ``NOWAIT_UPKEEP`` (see there). The asyncio adapter's
        hook."""
        from ..kit.adapter import WouldBlock

        self._nowait_calls += 1
        if self.synchronous == "full" or self._nowait_calls % NOWAIT_UPKEEP == 0:
            raise WouldBlock("left to the backend's thread", backend=self.url)
        try:
            return self._without_waiting(function, *args)
        except _Busy:
            raise WouldBlock("the database is locked", backend=self.url) from None

    def _without_waiting(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` through this thread's no-wait connection; ``_Busy``, with
        nothing done, where another connection holds the write lock."""
        self._local.nowait = True
        try:
            return function(*args)
        except _Busy:
            # A COMMIT refused as busy leaves its transaction open, and with it this
            # connection's write lock: a retry on the other connection would wait for it in
            # vain.
            db: sqlite3.Connection | None = getattr(self._local, "nowait_db", None)
            if db is not None and db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            raise
        finally:
            self._local.nowait = False

    def _with_short_pauses(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)``, tried without waiting and again after each of
        ``SHORT_PAUSES`` while another connection holds the write lock, then left to SQLite's
        busy handler (``busy_timeout``). Inside ``call_nowait``, just ``function(*args)``; and
        one call in ``NOWAIT_UPKEEP`` goes straight to the usual connection, which
        checkpoints the WAL (the no-wait one never does)."""
        if getattr(self._local, "nowait", False):
            return function(*args)
        self._nowait_calls += 1
        if self._nowait_calls % NOWAIT_UPKEEP:
            for pause in SHORT_PAUSES:
                try:
                    return self._without_waiting(function, *args)
                except _Busy:
                    _pause(pause)
        return function(*args)

    # -- the contract ------------------------------------------------------------------------

    def try_grant(self, request: GrantRequest) -> Grant | None:
        return self._with_short_pauses(self._try_grant, request)

    def _try_grant(self, request: GrantRequest) -> Grant | None:
        changes = _Changes()
        with self._transaction() as db:
            now = boot_time_ns()
            refresh: list[int] = []
            line = self._line(db, request.name, now, [request.owner], changes)
            result = self._decide(db, request, now, line, refresh, changes)
            self._refresh_waiters(db, now, refresh)
            self._sweep(db, now, changes)
            changes.read_rest(db, now)
        self._tell(changes)
        return result

    def try_grant_many(self, requests: Sequence[GrantRequest]) -> list[Grant | TumblerError | None]:
        """``try_grant`` for each request, in order, in one transaction (the asyncio adapter's
        batch of queued polls): the same decisions as one transaction each, back to back, but
        each name's rows are read once. A request refused with an error gets it in its place
        and changes nothing; a failure of the transaction (busy) raises for all."""
        changes = _Changes()
        with self._transaction() as db:
            now = boot_time_ns()
            owners: dict[str, list[str]] = {}
            for request in requests:
                owners.setdefault(request.name, []).append(request.owner)
            lines = {
                name: self._line(db, name, now, asking, changes) for name, asking in owners.items()
            }
            results: list[Grant | TumblerError | None] = []
            refresh: list[int] = []
            for request in requests:
                try:
                    line = lines[request.name]
                    results.append(self._decide(db, request, now, line, refresh, changes))
                except (PermitsMismatch, TooManyWaiters) as error:
                    results.append(error)
            self._refresh_waiters(db, now, refresh)
            self._sweep(db, now, changes)
            changes.read_rest(db, now)
        self._tell(changes)
        return results

    def _line(
        self, db: sqlite3.Connection, name: str, now: int, owners: list[str], changes: _Changes
    ) -> _Line:
        """What decisions on the name for ``owners`` need of its live entries (expired ones
        are deleted, lapsed grants kept for their lock-delay): the grants, the fair and the
        shared waiters, and the owners' own. The other waiters (non-fair exclusive ones, the
        many of a busy mutex) play no part."""
        expired = db.execute(
            "DELETE FROM tumbler_entries WHERE name = ? AND expires_at <= ?", (name, now)
        ).rowcount
        if expired:
            changes.changed(name)
        if len(owners) <= _LISTED_OWNERS:
            rows = db.execute(_line_query(len(owners)), (now, name, *owners)).fetchall()
        else:
            rows = db.execute(_line_query(0), (now, name, _json_list(owners))).fetchall()
        return _Line(
            [
                # a row left after the DELETE whose lease is over is a lapsed grant (a waiter's
                # row, lock_delay 0, was deleted when its lease was)
                core.Entry(owner, seq, bool(shared), lim, bool(fair), token, bool(lapsed))
                for owner, seq, shared, lim, fair, token, lapsed in rows
            ]
        )

    def _decide(
        self,
        db: sqlite3.Connection,
        request: GrantRequest,
        now: int,
        line: _Line,
        refresh: list[int],
        changes: _Changes,
    ) -> Grant | None:
        """Decide one request inside a transaction and record it; ``line`` (the name's live
        entries) is updated to match, so that the next request of a batch sees this one. A
        waiter that stays one is added to ``refresh`` (its entry's lease is renewed with the
        others at the end of the transaction: no decision in it depends on that lease). A
        grant or a new waiter goes into ``changes``, with the name's state watchers."""
        plan = core.plan(
            line.relevant(request),
            request.owner,
            request.shared,
            request.limit,
            request.fair,
            request.queue,
        )
        mine, write = plan.mine, plan.write
        if plan.decision is core.Decision.HELD:
            return Grant(request.name, request.owner, plan.held_token, request.ttl)
        if write is core.Write.REFRESH_WAITER:
            assert mine is not None
            refresh.append(mine.seq)
            return None
        if write is core.Write.NOTHING:  # a single try leaves nothing behind
            return None
        token: int | None = None
        expires_at = now + round(self.capabilities.waiter_ttl * 1e9)
        lock_delay = 0  # a waiter's: it has no grant to lose
        if plan.decision is core.Decision.GRANT:
            token, bells = db.execute(
                "UPDATE tumbler_meta SET value = value + 1 WHERE key = 'last_token' "
                f"RETURNING value, {_WATCHERS}",
                (request.name, now),
            ).fetchone()
            changes.said(request.name, bells)
            lock_delay = round(request.lock_delay * 1e9)
            expires_at = now + round(request.ttl * 1e9) + lock_delay
        if write is core.Write.GRANT_WAITER:
            assert mine is not None
            assert token is not None
            db.execute(
                "UPDATE tumbler_entries SET token = ?, expires_at = ?, lock_delay = ? "
                "WHERE seq = ?",
                (token, expires_at, lock_delay, mine.seq),
            )
            line.granted(mine, token)
        else:  # ADD_GRANT or ADD_WAITER
            if token is None:
                # every waiter of the name left is live (_line deleted the expired ones)
                (waiting,) = db.execute(
                    "SELECT count(*) FROM (SELECT 1 FROM tumbler_entries "
                    "WHERE name = ? AND token IS NULL LIMIT ?)",
                    (request.name, self.max_waiters),
                ).fetchone()
                if waiting >= self.max_waiters:
                    raise line_full(self.max_waiters, request.name, self.url)
            doorbell = None
            own = self._own_doorbell() if token is None else None
            if own is not None:
                # a waiter: rings for it reach this client from now on
                doorbell = own.address
                own.listen()
            seq = db.execute(
                "INSERT INTO tumbler_entries "
                "(name, owner, shared, lim, fair, token, expires_at, holder, wake, lock_delay) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    request.name,
                    request.owner,
                    request.shared,
                    request.limit,
                    request.fair,
                    token,
                    expires_at,
                    request.holder,
                    doorbell,
                    lock_delay,
                ),
            ).lastrowid
            assert seq is not None
            if token is None:
                # a waiter arrives (RETURNING would cost more than the look-up before the
                # commit; a grant's watchers came with its token)
                changes.changed(request.name)
            line.add(
                core.Entry(request.owner, seq, request.shared, request.limit, request.fair, token)
            )
        return None if token is None else Grant(request.name, request.owner, token, request.ttl)

    def _refresh_waiters(self, db: sqlite3.Connection, now: int, seqs: list[int]) -> None:
        """Renew the leases of these waiter entries, in one statement."""
        if seqs:
            db.execute(
                "UPDATE tumbler_entries SET expires_at = ? "
                "WHERE seq IN (SELECT value FROM json_each(?))",
                (now + round(self.capabilities.waiter_ttl * 1e9), _json_list(seqs)),
            )

    def _sweep(self, db: sqlite3.Connection, now: int, changes: _Changes) -> None:
        # read first (usually nothing: no DELETE then), for the names whose watchers to ring
        expired = db.execute(
            "SELECT seq, name FROM tumbler_entries WHERE expires_at <= ? LIMIT ?", (now, _SWEEP)
        ).fetchall()
        if expired:
            db.execute(
                "DELETE FROM tumbler_entries WHERE seq IN (SELECT value FROM json_each(?))",
                (_json_list([seq for seq, _name in expired]),),
            )
            for _seq, name in expired:
                changes.changed(name)
        db.execute(
            "DELETE FROM tumbler_evictions WHERE id IN (SELECT id FROM tumbler_evictions "
            "WHERE expires_at <= ? LIMIT ?)",
            (now, _SWEEP),
        )

    def renew(self, name: str, owner: str, ttl: float) -> float | None:
        db = self._connection()
        now = boot_time_ns()
        with self._errors():
            # One statement, so atomic; "the lease ends after now" is what keeps an expired
            # lease dead, and a lapsed grant lapsed (its row outlives its lease by lock_delay).
            changed = db.execute(
                "UPDATE tumbler_entries SET expires_at = ? + lock_delay WHERE name = ? "
                "AND owner = ? AND token IS NOT NULL AND expires_at - lock_delay > ?",
                (now + round(ttl * 1e9), name, owner, now),
            ).rowcount
        return ttl if changed == 1 else None

    def renew_all(self, renewals: Sequence[Renewal], timeout: float) -> list[float | None]:
        """Every renewal in one transaction, waiting at most ``timeout`` (and never longer than
        ``busy_timeout``) for another process's write lock, then ``BackendUnavailable``."""
        if not renewals:
            return []
        nowait: bool = getattr(self._local, "nowait", False)
        # the no-wait connection's busy timeout is 0 already, and stays so
        wait = 0.0 if nowait else max(0.0, min(timeout, self.busy_timeout))
        db = self._connection()
        with self._errors(wait):
            db.execute(f"PRAGMA busy_timeout = {round(wait * 1000)}")
        try:
            with self._transaction(wait) as db:
                now = boot_time_ns()
                # Each statement matches at most one row (UNIQUE (name, owner)), so the summed
                # rowcount says whether every one was renewed; the lease's end keeps an expired
                # lease dead, as in renew().
                changed = db.executemany(
                    "UPDATE tumbler_entries SET expires_at = ? + lock_delay WHERE name = ? "
                    "AND owner = ? AND token IS NOT NULL AND expires_at - lock_delay > ?",
                    [(now + round(r.ttl * 1e9), r.name, r.owner, now) for r in renewals],
                ).rowcount
                if changed == len(renewals):
                    return [r.ttl for r in renewals]
                # Some were not renewed: those whose grant is not live now, which the UPDATE
                # left as they were (a renewed one is live until now + ttl).
                return [
                    r.ttl
                    if db.execute(
                        "SELECT 1 FROM tumbler_entries WHERE name = ? AND owner = ? "
                        "AND token IS NOT NULL AND expires_at - lock_delay > ?",
                        (r.name, r.owner, now),
                    ).fetchone()
                    else None
                    for r in renewals
                ]
        finally:
            with self._errors():
                db.execute(
                    f"PRAGMA busy_timeout = {0 if nowait else round(self.busy_timeout * 1000)}"
                )

    def release(self, name: str, owner: str) -> bool:
        return self._with_short_pauses(self._release, name, owner)

    def _release(self, name: str, owner: str) -> bool:
        db = self._connection()
        now = boot_time_ns()
        with self._errors():
            # the second column says whether anyone else's entry names a doorbell: only then
            # is the line read again to find whom to ring (a release nobody waits for costs
            # no second statement); the third, the name's state watchers'. A grant with a
            # lock-delay whose lease is over stays: its owner's release does not end the delay.
            row = db.execute(
                "DELETE FROM tumbler_entries WHERE name = ? AND owner = ? "
                "AND (lock_delay = 0 OR expires_at - lock_delay > ?) "
                "RETURNING token IS NOT NULL AND expires_at - lock_delay > ?, EXISTS (SELECT 1 "
                "FROM tumbler_entries WHERE name = ? AND owner != ? AND wake IS NOT NULL), "
                f"{_WATCHERS}",
                (name, owner, now, now, name, owner, name, now),
            ).fetchone()
        if row is None:
            return False
        if row[1]:
            # a grant gone, or a waiter ahead in a fair line: someone may go now
            self._ring(db, name, now)
        if row[2] is not None:
            self._ring_watchers(name, row[2])
        return bool(row[0])

    def _ring(self, db: sqlite3.Connection, name: str, now: int) -> None:
        """Ring the doorbells of the waiters of ``name`` that may go now (after the commit
        that let them: a rung waiter tries at once). Read outside any transaction: a change
        meanwhile costs at most a ring too many, or one too few, which the waiter's polling
        makes up for."""
        if not DOORBELLS:
            return
        try:
            rows = db.execute(
                "SELECT owner, seq, shared, lim, fair, token, wake FROM tumbler_entries "
                "WHERE name = ? AND expires_at > ? ORDER BY seq",
                (name, now),
            ).fetchall()
        except sqlite3.Error:
            return  # a ring is a hint: the waiters poll anyway
        if not any(row[6] is not None for row in rows):
            return
        payload = name.encode("utf-8")
        for address in _to_wake(rows):
            if self._doorbell is not None and address == self._doorbell.address and self.hub:
                self.hub.notify(name)  # our own waiter: no need for the socket
                continue
            with contextlib.suppress(OSError):  # gone, or its buffer is full
                _ring(address, payload)

    def _tell(self, changes: _Changes) -> None:
        """Ring the state watchers of the names a transaction changed (after its commit)."""
        for name, bells in changes.bells.items():
            if bells is not None:
                self._ring_watchers(name, bells)

    def _ring_watchers(self, name: str, bells: str) -> None:
        """Ring each of ``bells`` (space-separated doorbells) for the state of ``name``."""
        if not DOORBELLS:
            return
        payload = _STATE_RING + name.encode("utf-8")
        own = self._doorbell.address if self._doorbell is not None else None
        for address in bells.split():
            if address == own and self.hub is not None:
                self.hub.notify(name, (STATE_TAG,))  # our own watchers: no need for the socket
                continue
            with contextlib.suppress(OSError):  # gone, or its buffer is full
                _ring(address, payload)

    def watch(self, name: str, owner: str) -> HubWatch:
        return HubWatch(self.clock, name, self.hub)

    def watch_state(self, name: str) -> SQLiteStateWatch:
        return SQLiteStateWatch(self, name)

    def follow_state(self, name: str) -> None:
        """Register this client's doorbell as a watcher of ``name``'s state for
        ``WATCHER_TTL`` (every change of its entries rings it from the commit of this on),
        and drop the rows of watchers that ran out. Nothing where there are no doorbells."""
        doorbell = self._own_doorbell()
        if doorbell is None:
            return
        doorbell.listen()
        with self._transaction() as db:
            now = boot_time_ns()
            db.execute("DELETE FROM tumbler_watchers WHERE expires_at <= ?", (now,))
            expires_at = now + round(WATCHER_TTL * 1e9)
            db.execute(
                "INSERT OR REPLACE INTO tumbler_watchers VALUES (?, ?, ?)",
                (name, doorbell.address, expires_at),
            )

    def inspect(self, name: str) -> LockState:
        states = self._states("AND name = ?", (name,))
        return states[0] if states else LockState(name=name, holders=(), waiters=0)

    def inspect_all(self) -> list[LockState]:
        return self._states("", ())

    def _states(self, condition: str, parameters: tuple[str, ...]) -> list[LockState]:
        db = self._connection()
        now = boot_time_ns()
        with self._errors():
            rows = db.execute(
                "SELECT name, shared, lim, token, expires_at, lock_delay, holder "
                f"FROM tumbler_entries WHERE expires_at > ? {condition} ORDER BY name, seq",
                (now, *parameters),
            ).fetchall()
        states: dict[str, LockStateBuilder] = {}
        for name, shared, lim, token, expires_at, lock_delay, holder in rows:
            if name not in states:
                states[name] = LockStateBuilder(name)
            lease_ends = expires_at - lock_delay
            # a live entry: the lease left; a lapsed grant: the delay left (its row's end)
            states[name].add(
                token=token,
                shared=bool(shared),
                limit=lim,
                expires_in=((lease_ends if lease_ends > now else expires_at) - now) / 1e9,
                holder=holder,
                lapsed=lease_ends <= now,
            )
        return [state.build() for state in states.values()]

    def force_release(self, name: str, note: str) -> int:
        changes = _Changes()
        with self._transaction() as db:
            now = boot_time_ns()
            expired = db.execute(
                "DELETE FROM tumbler_entries WHERE name = ? AND expires_at <= ?", (name, now)
            ).rowcount
            # lapsed grants go too (an operator's word ends a delay), but only the grants whose
            # lease was live were taken from a holder: they alone are counted and noted
            removed = db.execute(
                "DELETE FROM tumbler_entries WHERE name = ? AND token IS NOT NULL "
                "RETURNING owner, expires_at - lock_delay",
                (name,),
            ).fetchall()
            evicted = [(owner, lease_ends) for owner, lease_ends in removed if lease_ends > now]
            db.executemany(
                "INSERT OR REPLACE INTO tumbler_evictions (name, owner, note, expires_at) "
                "VALUES (?, ?, ?, ?)",
                [
                    (name, owner, note, lease_ends + round(NOTE_GRACE * 1e9))
                    for owner, lease_ends in evicted
                ],
            )
            if removed or expired:
                changes.changed(name)
                changes.read_rest(db, now)
        if removed:
            self._ring(db, name, now)
        self._tell(changes)
        return len(evicted)

    def evicted(self, name: str, owner: str) -> str | None:
        db = self._connection()
        now = boot_time_ns()
        with self._errors():
            row = db.execute(
                "SELECT note FROM tumbler_evictions WHERE name = ? AND owner = ? "
                "AND expires_at > ?",
                (name, owner, now),
            ).fetchone()
        return str(row[0]) if row else None

    def close(self) -> None:
        with self._doorbell_lock:
            self._closed = True
            doorbell = self._doorbell
        if doorbell is not None:
            doorbell.close()
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for db in connections:
            with contextlib.suppress(sqlite3.Error):
                db.close()


def open_sync(url: BackendURL) -> SQLiteBackend:
    return SQLiteBackend(url)
