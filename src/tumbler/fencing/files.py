"""A file replaced by rename only if its fencing token is not stale.

::

    tumbler.fencing.files.write_file("/srv/report.json", data, hold.token)  # StaleToken if stale

The new content goes to a temporary file in the same directory, is fsync'ed, and then, under
an exclusive ``flock`` of ``NAME.fence`` beside the file, the token is compared with the
highest one that file records: a lower token is refused (the temporary file removed, the file
untouched); otherwise the token is recorded (fsync'ed) and the temporary file renamed over the
file, and the directory fsync'ed. Readers see the old content or the new, never a mix.

What it protects against: a stale holder's late write replacing a newer holder's, among
writers that all write the file through :func:`write_file`, on one machine's local file
system (``flock`` is per machine; on NFS and other network file systems it may not be shared
between machines). What it does not: writers that open the file themselves, or reach it by
another name (a hard link, a renamed directory); the removal of ``NAME.fence`` (which forgets
the highest token); a read-modify-write whose read came before a newer holder's write (only
the write is fenced; see docs/fencing.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from pathlib import Path

from ..errors import ConfigurationError, InvalidArgument, StaleToken
from ._checks import checked_token

__all__ = ["fence_path", "write_file"]


def fence_path(path: str | os.PathLike[str]) -> Path:
    """The file beside ``path`` that records its highest accepted token (and is locked)."""
    path = Path(path)
    return path.with_name(path.name + ".fence")


def _highest(fence: int, name: Path) -> int | None:
    text = os.pread(fence, 64, 0).decode("ascii", "replace").strip()
    if not text:
        return None
    if not text.isdigit():
        raise ConfigurationError(f"{str(name)!r} does not hold a fencing token: {text[:20]!r}")
    return int(text)


def write_file(path: str | os.PathLike[str], data: bytes, token: int) -> None:
    """Replace the file at ``path`` with ``data`` unless ``token`` is lower than the highest
    token accepted for it, in which case raise :class:`~tumbler.errors.StaleToken` and leave
    the file as it was. An equal token is accepted. The file is made with the usual mode
    (0666 less the umask), or keeps the mode it had. Refused with InvalidArgument, before
    anything is written: a token that is not a positive int, data that is not bytes, a path
    that is empty or names a directory.
    """
    token = checked_token(token)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidArgument(f"write_file() writes bytes, not {type(data).__name__}")
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise InvalidArgument(f"write_file() needs a file's path, not {path!r}")
    target = Path(path)
    if target.is_dir() or not target.name:
        raise InvalidArgument(f"write_file() writes a file, and {str(target)!r} is a directory")
    try:
        mode: int | None = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = None  # a new file: 0666 less the umask, which the kernel applies at the open
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(8)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as staged:
            staged.write(data)
            staged.flush()
            if mode is not None:
                os.fchmod(staged.fileno(), mode)
            os.fsync(staged.fileno())
        _replace(target, temporary, token)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _replace(target: Path, temporary: Path, token: int) -> None:
    name = fence_path(target)
    fence = os.open(name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fence, fcntl.LOCK_EX)  # released by the close
        highest = _highest(fence, name)
        if highest is not None and highest > token:
            raise StaleToken(str(target), token, highest)
        # recorded before the rename: a crash between them loses this write, never lets a
        # lower token replace it afterwards
        os.ftruncate(fence, 0)
        os.pwrite(fence, f"{token}\n".encode(), 0)
        os.fsync(fence)
        os.replace(temporary, target)
        directory = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    finally:
        os.close(fence)
