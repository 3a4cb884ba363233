"""Finding a backend by URL scheme, and the checks ``sqlite://`` makes before opening a file.

The SQLite checks are the pure parts (mount table parsing, URL to path) and the safety of the
default file in the user's cache directory, which is exercised on real files in tmp_path.
"""

from __future__ import annotations

import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest

import tumbler
import tumbler.aio
from tumbler import backends
from tumbler._url import parse_url
from tumbler.backends.descriptor import BackendDescriptor
from tumbler.backends.sqlite import backend as sqlite_backend
from tumbler.errors import (
    BrokenBackend,
    ConfigurationError,
    InvalidArgument,
    InvalidURL,
    MissingDependency,
    TumblerError,
    UnknownScheme,
)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, BackendDescriptor]:
    """A private copy of the scheme registry: registrations made in a test vanish with it."""
    copy = dict(backends._registered)
    monkeypatch.setattr(backends, "_registered", copy)
    return copy


# ---------------------------------------------------------------------------------------------
# The registry


def test_the_built_in_schemes_are_known() -> None:
    schemes = tumbler.known_schemes()
    assert {"sqlite", "memory"} <= set(schemes)
    assert schemes == sorted(schemes)


def test_an_unknown_scheme_is_refused_and_the_known_ones_listed() -> None:
    with pytest.raises(UnknownScheme) as info:
        tumbler.connect("nosuchbackend://host/x")
    error = info.value
    assert isinstance(error, InvalidURL)
    assert isinstance(error, ValueError)
    assert error.scheme == "nosuchbackend"
    assert error.known == tumbler.known_schemes()
    message = str(error)
    assert "'nosuchbackend'" in message
    for scheme in tumbler.known_schemes():
        assert scheme in message


def test_an_unknown_scheme_error_does_not_show_the_password() -> None:
    with pytest.raises(UnknownScheme) as info:
        tumbler.connect("nosuchbackend://user:Xy7SECRETq@host/x")
    assert "Xy7SECRETq" not in str(info.value)


@pytest.mark.asyncio
async def test_the_async_connect_refuses_an_unknown_scheme_too() -> None:
    with pytest.raises(UnknownScheme):
        await tumbler.aio.connect("nosuchbackend://host/x")


def test_registering_a_backend_makes_its_scheme_known(
    registry: dict[str, BackendDescriptor],
) -> None:
    tumbler.register_backend("FakeScheme", "some.module", extra="fake")
    registered = registry["fakescheme"]  # schemes are case-insensitive
    assert (registered.opener, registered.extra) == ("some.module", "fake")
    assert "fakescheme" in tumbler.known_schemes()


def test_the_registration_of_the_previous_test_is_gone() -> None:
    # guards the fixture: a registration leaking out of a test would change every later one
    assert "fakescheme" not in tumbler.known_schemes()


def write_module(directory: Path, name: str, source: str) -> None:
    (directory / f"{name}.py").write_text(textwrap.dedent(source))


def test_a_backend_whose_driver_is_missing_names_the_extra_to_install(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    registry: dict[str, BackendDescriptor],
) -> None:
    write_module(
        tmp_path,
        "some_module_that_needs_a_missing_dependency",
        """
        import a_package_that_does_not_exist_xyz

        def open_sync(url):
            raise AssertionError("never reached")
        """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    tumbler.register_backend(
        "fakescheme", "some_module_that_needs_a_missing_dependency", extra="fake"
    )
    with pytest.raises(MissingDependency) as info:
        tumbler.connect("fakescheme://host/x")
    error = info.value
    assert isinstance(error, ImportError)
    assert isinstance(error, ConfigurationError)
    assert error.extra == "fake"
    assert error.missing == "a_package_that_does_not_exist_xyz"
    assert "tumbler-locks[fake]" in str(error)
    assert "a_package_that_does_not_exist_xyz" in str(error)
    assert isinstance(error.__cause__, ModuleNotFoundError)
    assert "some_module_that_needs_a_missing_dependency" not in sys.modules


def test_a_backend_without_an_extra_shows_its_import_error_as_is(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    registry: dict[str, BackendDescriptor],
) -> None:
    # no extra installs its driver: the installation is broken, and "pip install
    # tumbler-locks[...]" would be advice that cannot help
    write_module(tmp_path, "needs_missing_driver_abc", "import missing_driver_abc.client\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    tumbler.register_backend("drv", "needs_missing_driver_abc")
    with pytest.raises(ModuleNotFoundError) as info:
        tumbler.connect("drv://h")
    assert not isinstance(info.value, MissingDependency)
    assert info.value.name == "missing_driver_abc"


def test_a_broken_backend_module_is_not_reported_as_a_missing_extra(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    registry: dict[str, BackendDescriptor],
) -> None:
    # A missing tumbler module (a backend written for another tumbler version) or a backend
    # package missing its own module is a broken installation, not a missing extra: advice to
    # "pip install tumbler-locks[buggy]" for a "missing 'tumbler' package" would mislead.
    write_module(tmp_path, "backend_with_a_bug_xyz", "import tumbler._no_such_module_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    tumbler.register_backend("buggy", "backend_with_a_bug_xyz", extra="buggy")
    with pytest.raises(ModuleNotFoundError) as info:
        tumbler.connect("buggy://h")
    assert not isinstance(info.value, MissingDependency)

    tumbler.register_backend("ghost", "ghost_package_xyz.backend", extra="ghost")
    with pytest.raises(ModuleNotFoundError) as info:
        tumbler.connect("ghost://h")
    assert not isinstance(info.value, MissingDependency)


@pytest.fixture
def installed_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A distribution "installed" on sys.path whose ``tumbler.backends`` entry points are: a
    package that fails to import, an object that is no backend, and the memory backend's
    descriptor under a scheme of its own; the registry's cache of them starts empty."""
    info = tmp_path / "third_party_backends-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: third-party-backends\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(
        textwrap.dedent(
            """
            [tumbler.backends]
            broken = package_that_fails_xyz:DESCRIPTOR
            notabackend = json:dumps
            Borrowed = tumbler.backends.memory:DESCRIPTOR
            """
        )
    )
    write_module(tmp_path, "package_that_fails_xyz", "raise RuntimeError('half-installed')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(backends, "_entry_points", {})
    return tmp_path


def test_a_broken_third_party_backend_breaks_only_its_own_scheme(
    installed_entry_points: Path,
) -> None:
    assert {"broken", "notabackend", "borrowed"} <= set(backends.known_schemes())
    with pytest.raises(UnknownScheme, match=r"known schemes: .*broken"):
        tumbler.connect("nosuchscheme://h")
    with pytest.raises(BrokenBackend, match=r"broken:// .*RuntimeError: half-installed") as info:
        tumbler.connect("broken://h")
    assert isinstance(info.value, ConfigurationError)
    with pytest.raises(BrokenBackend, match=r"notabackend:// .*json:dumps.*function"):
        tumbler.connect("notabackend://h")
    with tumbler.connect("borrowed://entry-points") as locks:
        assert locks.lock("one").acquire(blocking=False)


def test_unknown_options_are_refused_naming_the_accepted_ones() -> None:
    with pytest.raises(InvalidArgument) as info:
        tumbler.connect("memory://registry-options", bogus=1)
    error = info.value
    assert type(error) is InvalidArgument
    assert isinstance(error, ValueError)
    message = str(error)
    assert "bogus" in message
    assert "clock" in message
    assert error.backend == "memory://registry-options"


def test_a_backend_without_options_says_so(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument) as info:
        tumbler.connect(f"sqlite://{tmp_path}/x.db", clock=None)
    assert "clock" in str(info.value)
    assert "none" in str(info.value)
    assert not (tmp_path / "x.db").exists()  # refused before anything was opened


def test_the_options_error_does_not_show_the_password() -> None:
    with pytest.raises(InvalidArgument) as info:
        tumbler.connect("memory://u:Xy7SECRETq@store", bogus=1)
    assert "Xy7SECRETq" not in str(info.value)


@pytest.mark.asyncio
async def test_the_async_connect_refuses_unknown_options_too() -> None:
    with pytest.raises(InvalidArgument, match="clock"):
        await tumbler.aio.connect("memory://registry-options", bogus=1)


def test_tumbler_url_is_used_when_no_url_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUMBLER_URL", "memory://from-the-environment")
    with tumbler.connect() as locks:
        assert locks.url == "memory://from-the-environment"


@pytest.mark.asyncio
async def test_tumbler_url_is_used_by_the_async_connect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUMBLER_URL", "memory://from-the-environment")
    async with await tumbler.aio.connect() as locks:
        assert locks.url == "memory://from-the-environment"


def test_an_explicit_url_wins_over_tumbler_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUMBLER_URL", "memory://from-the-environment")
    with tumbler.connect("memory://explicit") as locks:
        assert locks.url == "memory://explicit"


def test_an_empty_tumbler_url_means_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUMBLER_URL", "")
    assert backends.resolve_url(None).raw == backends.DEFAULT_URL
    monkeypatch.delenv("TUMBLER_URL")
    assert backends.resolve_url(None).raw == backends.DEFAULT_URL


def test_a_malformed_tumbler_url_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUMBLER_URL", "not a url")
    with pytest.raises(InvalidURL):
        tumbler.connect()


# ---------------------------------------------------------------------------------------------
# sqlite://: the file system under the database

MOUNTINFO = textwrap.dedent(
    r"""
    22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
    23 22 0:21 / /proc rw,nosuid - proc proc rw
    30 22 8:17 / /mnt/data rw,relatime shared:2 master:7 - xfs /dev/sdb1 rw
    31 30 0:41 / /mnt/data/shared rw,relatime shared:3 - nfs4 nas:/export rw,vers=4.2
    32 31 0:42 / /mnt/data/shared/scratch rw - tmpfs tmpfs rw
    33 22 0:43 / /mnt/my\040files rw - cifs //nas/files rw
    34 22 0:44 / /mnt/data2 rw - nfs nas:/other rw
    35 22 0:45 / /home/u/remote rw,nosuid - fuse.sshfs u@host: rw
    36 22 0:46 / /mnt/tab\011and\134backslash rw - 9p share rw
    this line is not a mount
    """
)


@pytest.mark.parametrize(
    ("path", "fs_type"),
    [
        ("/", "ext4"),
        ("/etc", "ext4"),
        ("/proc/self", "proc"),
        ("/mnt/data", "xfs"),
        ("/mnt/data/app/locks.db", "xfs"),
        # nested mounts: the longest mount point holding the path wins
        ("/mnt/data/shared", "nfs4"),
        ("/mnt/data/shared/app", "nfs4"),
        ("/mnt/data/shared/scratch/x", "tmpfs"),
        # a mount point is a whole path component, not a string prefix
        ("/mnt/database", "ext4"),
        ("/mnt/data2/x", "nfs"),
        ("/mnt/data/shared2", "xfs"),
        # spaces in mount points are escaped as \040 in mountinfo
        ("/mnt/my files/locks.db", "cifs"),
        ("/mnt/my\\040files/locks.db", "ext4"),
        ("/home/u/remote/locks.db", "fuse.sshfs"),
        ("/mnt/tab\tand\\backslash/locks.db", "9p"),
    ],
)
def test_filesystem_type_finds_the_mount_holding_the_path(path: str, fs_type: str) -> None:
    assert sqlite_backend.filesystem_type(path, MOUNTINFO) == fs_type


def test_network_file_systems_are_recognised() -> None:
    for path in ("/mnt/data/shared/app", "/mnt/my files/x", "/mnt/data2", "/home/u/remote/x"):
        fs_type = sqlite_backend.filesystem_type(path, MOUNTINFO)
        assert fs_type in sqlite_backend.NETWORK_FILESYSTEMS
    for path in ("/mnt/data/x", "/etc", "/mnt/data/shared/scratch/x"):
        fs_type = sqlite_backend.filesystem_type(path, MOUNTINFO)
        assert fs_type not in sqlite_backend.NETWORK_FILESYSTEMS


def test_filesystem_type_of_an_empty_mount_table_is_unknown() -> None:
    assert sqlite_backend.filesystem_type("/x", "") is None
    assert sqlite_backend.filesystem_type("/x", "garbage\n\n") is None


def test_the_last_mount_on_a_mount_point_is_the_visible_one() -> None:
    # Mounting over a mount point hides what was there: mountinfo lists mounts in the order
    # they were made, so the later line is the file system that paths below it reach.
    mountinfo = textwrap.dedent(
        """
        22 1 8:1 / / rw - ext4 /dev/sda1 rw
        40 22 0:50 / /srv/locks rw - tmpfs tmpfs rw
        41 40 0:51 / /srv/locks rw - nfs4 nas:/locks rw
        """
    )
    assert sqlite_backend.filesystem_type("/srv/locks/app", mountinfo) == "nfs4"


def test_a_mount_point_with_non_ascii_characters_is_matched() -> None:
    # mountinfo escapes only space, tab, newline and backslash; other bytes are the UTF-8 of
    # the path, which read_text() decodes
    mountinfo = textwrap.dedent(
        """
        22 1 8:1 / / rw - ext4 /dev/sda1 rw
        50 22 0:60 / /mnt/caf\u00e9 rw - nfs4 nas:/cafe rw
        """
    )
    assert sqlite_backend.filesystem_type("/mnt/caf\u00e9/locks.db", mountinfo) == "nfs4"


def test_this_machines_mount_table_has_a_root() -> None:
    mountinfo = Path("/proc/self/mountinfo")
    if not mountinfo.exists():
        pytest.skip("no /proc/self/mountinfo on this system")
    assert sqlite_backend.filesystem_type("/", mountinfo.read_text()) is not None


# ---------------------------------------------------------------------------------------------
# sqlite://: from URL to path


@pytest.mark.parametrize(
    "url",
    [
        "sqlite::memory:",
        "sqlite:///:memory:",
        "sqlite:file::memory:",
        "sqlite:///file::memory:?cache=shared",
        "sqlite:///file:locks%3Fmode=memory",
    ],
)
def test_in_memory_databases_are_refused(url: str) -> None:
    with pytest.raises(InvalidURL) as info:
        sqlite_backend.resolve_path(parse_url(url))
    assert "memory://" in str(info.value)  # points at the backend to use instead


@pytest.mark.parametrize("url", ["sqlite://host/x.db", "sqlite://localhost/x.db", "sqlite://h:1/x"])
def test_hosts_are_refused(url: str) -> None:
    with pytest.raises(InvalidURL, match="host"):
        sqlite_backend.resolve_path(parse_url(url))


def test_an_absolute_path_is_kept(tmp_path: Path) -> None:
    path, is_default = sqlite_backend.resolve_path(parse_url(f"sqlite://{tmp_path}/locks.db"))
    assert path == tmp_path / "locks.db"
    assert not is_default


def test_a_relative_path_is_resolved_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path, is_default = sqlite_backend.resolve_path(parse_url("sqlite:state/locks.db"))
    assert path.is_absolute()
    assert path == tmp_path / "state" / "locks.db"
    assert not is_default


def test_a_percent_encoded_path_is_decoded(tmp_path: Path) -> None:
    path, _ = sqlite_backend.resolve_path(parse_url(f"sqlite://{tmp_path}/my%20locks.db"))
    assert path == tmp_path / "my locks.db"


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:", "sqlite:///"])
def test_no_path_means_the_default_file(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path, is_default = sqlite_backend.resolve_path(parse_url(url))
    assert is_default
    assert path == tmp_path / "tumbler" / "locks.db"


# ---------------------------------------------------------------------------------------------
# sqlite://: the default file is private to the user


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user cache directory of the test's own; the default lock file goes below it."""
    home = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.delenv("TUMBLER_URL", raising=False)
    assert sqlite_backend.default_path() == home / "tumbler" / "locks.db"
    return home


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_the_default_directory_and_file_are_private(cache_home: Path) -> None:
    # a permissive umask must not make them readable or writable by others
    previous = os.umask(0)
    try:
        with tumbler.connect() as locks:
            assert locks.url == f"sqlite://{cache_home / 'tumbler' / 'locks.db'}"
    finally:
        os.umask(previous)
    assert mode(cache_home / "tumbler") == 0o700
    assert mode(cache_home / "tumbler" / "locks.db") == 0o600


def test_an_existing_private_default_directory_is_used(cache_home: Path) -> None:
    (cache_home / "tumbler").mkdir(parents=True, mode=0o700)
    with tumbler.connect("sqlite://"):
        pass
    assert (cache_home / "tumbler" / "locks.db").is_file()


@pytest.mark.parametrize("unsafe_mode", [0o777, 0o770, 0o722, 0o702])
def test_a_default_directory_others_can_write_is_refused(
    cache_home: Path, unsafe_mode: int
) -> None:
    directory = cache_home / "tumbler"
    directory.mkdir(parents=True)
    directory.chmod(unsafe_mode)
    with pytest.raises(ConfigurationError) as info:
        tumbler.connect("sqlite://")
    assert type(info.value) is ConfigurationError
    assert str(directory) in str(info.value)
    assert not (directory / "locks.db").exists()
    assert mode(directory) == unsafe_mode  # refused, not silently "fixed"


def test_a_symlink_in_place_of_the_default_file_is_refused(
    cache_home: Path, tmp_path: Path
) -> None:
    directory = cache_home / "tumbler"
    directory.mkdir(parents=True, mode=0o700)
    planted = tmp_path / "planted.db"  # where another user would like our locks to go
    (directory / "locks.db").symlink_to(planted)
    with pytest.raises(ConfigurationError) as info:
        tumbler.connect("sqlite://")
    assert isinstance(info.value, TumblerError)
    assert "symlink" in str(info.value)
    assert not planted.exists()


def test_a_symlink_to_an_existing_file_is_refused_too(cache_home: Path, tmp_path: Path) -> None:
    directory = cache_home / "tumbler"
    directory.mkdir(parents=True, mode=0o700)
    planted = tmp_path / "planted.db"
    planted.write_bytes(b"")
    (directory / "locks.db").symlink_to(planted)
    with pytest.raises(ConfigurationError):
        tumbler.connect("sqlite://")
    assert planted.read_bytes() == b""
