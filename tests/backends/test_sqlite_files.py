"""sqlite://: who else can touch the database. The files tumbler makes are the user's alone
(0600, whatever the umask); what another user could change is refused (the refusals, in
both flavours, are rows of tests/backends/test_bad_urls.py); what a group shares on purpose
is used.

Another user is played by uid 65534 (nobody): root gives files to it, or runs a child
process as it.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import tumbler
import tumbler.aio
from tumbler import ConfigurationError
from tumbler.testing.conformance.compat import PATIENCE

FLAVOURS = ["sync", "asyncio"]
NOBODY = 65534

needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="acting as another user needs root",
)


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def modes(directory: Path) -> dict[str, int]:
    return {path.name: mode(path) for path in directory.iterdir()}


async def ahold_and_list(url: str, directory: Path) -> dict[str, int]:
    async with await tumbler.aio.connect(url) as locks, locks.lock("job"):
        return modes(directory)


def files_while_held(flavour: str, url: str, directory: Path) -> dict[str, int]:
    """The files in ``directory`` and their modes while a lock is held in the database."""
    if flavour == "sync":
        with tumbler.connect(url) as locks, locks.lock("job"):
            return modes(directory)
    return asyncio.run(ahold_and_list(url, directory))


@contextlib.contextmanager
def umask(value: int) -> Iterator[None]:
    previous = os.umask(value)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_files_tumbler_makes_are_the_users_alone_whatever_the_umask(
    tmp_path: Path, flavour: str
) -> None:
    directory = tmp_path / "locks"
    directory.mkdir(mode=0o755)
    with umask(0):
        files = files_while_held(flavour, url_of(directory / "locks.db"), directory)
    # SQLite gives the -wal and -shm files the database file's mode
    assert files == {"locks.db": 0o600, "locks.db-wal": 0o600, "locks.db-shm": 0o600}


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_missing_parents_of_the_default_directory_are_made_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flavour: str
) -> None:
    cache_home = tmp_path / "home" / ".cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    monkeypatch.delenv("TUMBLER_URL", raising=False)
    with umask(0):
        files_while_held(flavour, "sqlite://", cache_home / "tumbler")
    for made in (tmp_path / "home", cache_home, cache_home / "tumbler"):
        assert mode(made) == 0o700, made


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A directory of root's that other users may enter (tmp_path's parents are 0700)."""
    directory = Path(tempfile.mkdtemp(prefix="tumbler-files-"))
    try:
        directory.chmod(0o755)
        yield directory
    finally:
        shutil.rmtree(directory)


def run_as(uid: int, script: str, groups: tuple[int, ...] = ()) -> subprocess.Popen[str]:
    """``script`` in a child process of user ``uid`` (group nobody, and ``groups``). The
    child starts as root and imports what it needs first, also what tumbler imports only at
    first use: this Python's own files may be where only root can read them."""
    drop = f"""
        import asyncio, concurrent.futures.thread, json, logging, os, socket, sys
        import tumbler, tumbler._api, tumbler.aio, tumbler.backends
        import tumbler.backends.sqlite.backend
        os.setgroups({list(groups)!r})
        os.setgid({NOBODY})
        os.setuid({uid})
        """
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(drop) + textwrap.dedent(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(child: subprocess.Popen[str]) -> str:
    out, err = child.communicate(timeout=PATIENCE)
    assert child.returncode == 0, out + err
    return out


@needs_root
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_another_user_cannot_open_the_files_tumbler_makes(public_dir: Path, flavour: str) -> None:
    directory = public_dir / "locks"
    directory.mkdir(mode=0o755)  # others may look in; the files are another matter
    url = url_of(directory / "locks.db")
    opened: list[str] = []

    async def ahold() -> None:
        async with await tumbler.aio.connect(url) as locks, locks.lock("job"):
            try_as_another_user()

    def try_as_another_user() -> None:
        names = sorted(path.name for path in directory.iterdir())
        assert names == ["locks.db", "locks.db-shm", "locks.db-wal"]
        script = f"""
            import os
            for name in {names!r}:
                try:
                    os.close(os.open(os.path.join({str(directory)!r}, name), os.O_RDONLY))
                    print(name)
                except PermissionError:
                    pass
            """
        opened.extend(finish(run_as(NOBODY, script)).split())

    if flavour == "sync":
        with tumbler.connect(url) as locks, locks.lock("job"):
            try_as_another_user()
    else:
        asyncio.run(ahold())
    assert opened == []


@needs_root
def test_a_group_shares_a_database_between_its_members(public_dir: Path) -> None:
    """The setup to share locks between users: a setgid directory and a database that root
    made, both writable by the group, and nothing writable by anyone else. Two members use it
    (one in each flavour) and exclude each other, the second one through companion files that
    the first one made and owns."""
    group = next(gid for gid in range(4242, 5000) if not _group_exists(gid))
    shared = public_dir / "shared"
    shared.mkdir()
    os.chown(shared, 0, group)
    shared.chmod(0o2770)
    database = shared / "locks.db"
    database.touch()
    database.chmod(0o660)
    os.chown(database, 0, group)
    url = url_of(database)
    holder = run_as(
        NOBODY,
        f"""
        import sys, tumbler
        with tumbler.connect({url!r}) as locks, locks.lock("job", timeout=0) as hold:
            print("held", hold.token, flush=True)
            sys.stdin.read()  # until the test has tried the lock as the other member
        """,
        groups=(group,),
    )
    other_member = f"""
        import asyncio, tumbler.aio
        async def main():
            async with await tumbler.aio.connect({url!r}) as locks:
                print(await locks.lock("job").acquire(timeout=0))
        asyncio.run(main())
        """
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().split()[0] == "held"
        wal = shared / "locks.db-wal"
        assert (wal.stat().st_uid, wal.stat().st_gid, mode(wal)) == (NOBODY, group, 0o660)
        assert finish(run_as(NOBODY - 1, other_member, groups=(group,))).split() == ["False"]
    finally:
        finish(holder)
    assert finish(run_as(NOBODY - 1, other_member, groups=(group,))).split() == ["True"]


def _group_exists(gid: int) -> bool:
    try:
        grp.getgrgid(gid)
    except KeyError:
        return False
    return True


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_an_unsafe_database_is_refused_and_left_as_it_was(tmp_path: Path, flavour: str) -> None:
    path = tmp_path / "locks.db"
    url = url_of(path)
    with tumbler.connect(url) as locks, locks.lock("job"):
        pass
    path.chmod(0o666)  # a mistake, or another user's doing
    before = path.read_bytes()
    with pytest.raises(ConfigurationError) as refused:
        if flavour == "sync":
            tumbler.connect(url).close()
        else:

            async def connect() -> None:
                await (await tumbler.aio.connect(url)).close()

            asyncio.run(connect())
    assert "writable by other users (mode 0666)" in str(refused.value)
    assert (mode(path), path.read_bytes()) == (0o666, before)  # refused, not "fixed"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["locks.db"]


def test_a_database_in_a_shared_temporary_directory_is_refused() -> None:
    shared = Path(tempfile.gettempdir())
    if not (shared.stat().st_mode & stat.S_IWOTH and shared.stat().st_mode & stat.S_ISVTX):
        pytest.skip(f"{shared} is not a sticky directory that everyone may write")
    path = shared / f"tumbler-test-{os.getpid()}.db"
    try:
        with pytest.raises(ConfigurationError, match="plant its -wal, -shm or -journal file"):
            tumbler.connect(url_of(path)).close()
        assert not path.exists()
    finally:
        for name in (path.name, path.name + "-wal", path.name + "-shm"):
            (shared / name).unlink(missing_ok=True)  # what a connection there would leave


def make_symlinked_directory(base: Path) -> Path:
    (base / "real").mkdir(mode=0o700)
    (base / "link").symlink_to(base / "real")
    return base / "link" / "locks.db"


def make_private_below_sticky(base: Path) -> Path:
    (base / "tmp").mkdir()
    (base / "tmp").chmod(0o1777)
    (base / "tmp" / "mine").mkdir(mode=0o700)
    return base / "tmp" / "mine" / "locks.db"


def make_readable_database(base: Path) -> Path:
    (base / "locks.db").touch(mode=0o644)
    return base / "locks.db"


def make_group_writable(base: Path) -> Path:
    (base / "ours").mkdir()
    (base / "ours").chmod(0o2770)
    (base / "ours" / "locks.db").touch()
    (base / "ours" / "locks.db").chmod(0o660)
    os.chown(base / "ours", -1, os.getegid())
    os.chown(base / "ours" / "locks.db", -1, os.getegid())
    return base / "ours" / "locks.db"


@pytest.mark.parametrize(
    "make",
    [
        make_symlinked_directory,
        make_private_below_sticky,
        make_readable_database,
        make_group_writable,
    ],
)
def test_safe_places_are_used(tmp_path: Path, make: Callable[[Path], Path]) -> None:
    """Symlinks to directories of one's own, a private directory in a sticky one such as
    /tmp, a database others may read (not write), one shared with a group of one's own."""
    path = make(tmp_path)
    with tumbler.connect(url_of(path)) as locks, locks.lock("job") as hold:
        assert hold.held
    with contextlib.closing(sqlite3.connect(path.resolve())) as db:
        assert db.execute("SELECT count(*) FROM tumbler_meta").fetchone()[0] > 0
