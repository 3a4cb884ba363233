"""Malformed backend URLs and wrong credentials: a typed error, nothing made on disk.

Two tables, each run in both flavours (``tumbler.connect`` and ``tumbler.aio.connect``):

- BAD_URLS: URLs refused before anything is opened. Each gets its exact error class with a
  fragment of its message, never shows the password, and leaves the directory it names as it
  was (no SQLite file made, none made through a symlink).
  ZooKeeper's rows include its TLS options, whose files are checked before connecting.
- SERVER_REFUSALS: wrong credentials for the TLS+ACL Redis of the contract suite. Each gets
  ``PermissionDenied`` quickly (not a hang, not a generic error), without the password in the
  message, and the right credentials still find no lock in the prefix.

Parsing itself is tested in tests/unit/test_url.py and each backend's own URL grammar beside
it (tests/backends/test_redis.py, test_sqlite.py); docs/bad-input.md shows these tables.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

import tumbler
import tumbler.aio
from tumbler import (
    ConfigurationError,
    InvalidArgument,
    InvalidTTL,
    InvalidURL,
    PermissionDenied,
    TumblerError,
    UnknownScheme,
)
from tumbler.torture.proxy import FaultProxy

#: a password no other part of the URLs contains: finding it in a message is a leak
SECRET = "Sw0rdf1sh-secret"
#: how long a refusal may take: a wrong password must not look like an unreachable server
NO_HANG = 10.0

FLAVOURS = ["sync", "asyncio"]


@dataclass(frozen=True)
class BadURL:
    """A URL (``{dir}``: the test's empty directory, ``{secret}``: SECRET) and its refusal.

    ``prepare`` names a fixture-less set-up: files or links to make in ``{dir}`` first.
    ``root``: the set-up gives files to another user (OTHER_UID), which only root can do.
    ``bug`` marks a refusal that the code does not give yet (a strict xfail: it fails the
    suite once fixed, so that the mark is removed).
    """

    id: str
    url: str
    error: type[TumblerError]
    says: str
    prepare: str = ""
    bug: str = ""
    options: tuple[tuple[str, object], ...] = ()
    root: bool = False


#: another user, and a group this process is not in, for files that are not ours
OTHER_UID = OTHER_GID = 65534

BAD_URLS = [
    BadURL("empty", "", InvalidURL, "needs a scheme"),
    BadURL("no-scheme", "locks.db", InvalidURL, "needs a scheme"),
    BadURL("bare-path", "{dir}/locks.db", InvalidURL, "needs a scheme"),
    BadURL("unknown-scheme", "mongodb://u:{secret}@db.example/app", UnknownScheme, "'mongodb'"),
    BadURL("scheme-typo", "sqlit:///{dir}/locks.db", UnknownScheme, "known schemes: "),
    BadURL("control-character", "sqlite:///{dir}/a\nb.db", InvalidURL, "control characters"),
    BadURL("encoded-newline", "sqlite:///{dir}/a%0Ab.db", InvalidURL, "control characters"),
    BadURL("encoded-nul", "sqlite:///{dir}/a%00b.db", InvalidURL, "control characters"),
    BadURL("encoded-non-utf8", "sqlite:///{dir}/%FF.db", InvalidURL, "not UTF-8"),
    # what Python makes of a command-line argument that is not UTF-8
    BadURL("undecodable-text", "sqlite:///{dir}/caf\udce9.db", InvalidURL, "not UTF-8"),
    BadURL("non-utf8-password", "redis://u:%FF{secret}@127.0.0.1:1/0", InvalidURL, "password"),
    BadURL("unencoded-slash-in-password", "redis://u:a/{secret}@h/0", InvalidURL, "%2F"),
    BadURL("unknown-option", "sqlite:///{dir}/locks.db?busy_timeuot=1", InvalidURL, "busy_timeuot"),
    # a password given the way libpq, redis-py or PyMySQL spell it: refused, never shown
    *(
        BadURL(f"password-option-{scheme}", url, InvalidURL, "user info")
        for scheme, url in (
            ("postgresql", "postgresql://u@127.0.0.1:1/db?password={secret}"),
            ("mysql", "mysql://u@127.0.0.1:1/db?passwd={secret}"),
            ("redis", "redis://u@127.0.0.1:1/0?password={secret}"),
            ("redlock", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?password={secret}"),
            ("etcd", "etcd://127.0.0.1:1?password={secret}"),
            ("zookeeper", "zookeeper://127.0.0.1:1?auth=u:{secret}"),
        )
    ),
    BadURL(
        "option-twice",
        "sqlite:///{dir}/locks.db?busy_timeout=1&busy_timeout=2",
        InvalidURL,
        "'busy_timeout' is given twice",
    ),
    BadURL(
        "malformed-query", "sqlite:///{dir}/locks.db?busy_timeout", InvalidURL, "malformed query"
    ),
    BadURL("option-not-a-number", "sqlite:///{dir}/locks.db?busy_timeout=soon", InvalidURL, "soon"),
    BadURL("option-nan", "sqlite:///{dir}/locks.db?busy_timeout=nan", InvalidURL, "busy_timeout"),
    BadURL("option-bad-word", "sqlite:///{dir}/locks.db?synchronous=off", InvalidURL, "normal"),
    BadURL(
        "sqlite-max-waiters-0",
        "sqlite:///{dir}/locks.db?max_waiters=0",
        InvalidURL,
        "bad value '0' for URL option 'max_waiters'",
    ),
    BadURL(
        "memory-max-waiters-too-many",
        "memory://bad?max_waiters=1000001",
        InvalidURL,
        "a whole number of waiters from 1 to 1000000",
    ),
    BadURL("sqlite-with-host", "sqlite://host.example/{dir}/locks.db", InvalidURL, "not a host"),
    BadURL("sqlite-in-memory", "sqlite:///:memory:", InvalidURL, "in-memory"),
    BadURL(
        "sqlite-with-password",
        "sqlite://u:{secret}@/{dir}/locks.db",
        InvalidURL,
        "credentials",
    ),
    BadURL(
        "sqlite-missing-parent",
        "sqlite:///{dir}/no/such/dir/locks.db",
        ConfigurationError,
        "not an existing directory",
    ),
    BadURL(
        "sqlite-directory",
        "sqlite:///{dir}/a-directory",
        ConfigurationError,
        "directory",
        prepare="directory",
    ),
    BadURL(
        "sqlite-dangling-symlink",
        "sqlite:///{dir}/link.db",
        ConfigurationError,
        "symlink",
        prepare="dangling-symlink",
    ),
    BadURL(
        "sqlite-symlink-loop",
        "sqlite:///{dir}/loop.db",
        ConfigurationError,
        "symlink",
        prepare="symlink-loop",
    ),
    # Files and directories that someone other than you (and root, and a group you are in)
    # could change: through them another user could release your locks.
    BadURL(
        "sqlite-world-writable-database",
        "sqlite:///{dir}/locks.db",
        ConfigurationError,
        "locks.db is writable by other users (mode 0666)",
        prepare="world-writable-database",
    ),
    BadURL(
        "sqlite-database-of-another-user",
        "sqlite:///{dir}/locks.db",
        ConfigurationError,
        f"locks.db is owned by uid {OTHER_UID}",
        prepare="database-of-another-user",
        root=True,
    ),
    BadURL(
        "sqlite-database-writable-by-a-foreign-group",
        "sqlite:///{dir}/locks.db",
        ConfigurationError,
        f"locks.db is writable by group {OTHER_GID}",
        prepare="database-writable-by-a-foreign-group",
        root=True,
    ),
    BadURL(
        "sqlite-world-writable-directory",
        "sqlite:///{dir}/open/locks.db",
        ConfigurationError,
        "open is writable by other users (mode 0777)",
        prepare="world-writable-directory",
    ),
    BadURL(
        "sqlite-sticky-directory",
        "sqlite:///{dir}/tmp/locks.db",
        ConfigurationError,
        "tmp is writable by other users (mode 1777); another user could replace the database "
        "or plant its -wal, -shm or -journal file",
        prepare="sticky-directory",
    ),
    BadURL(
        "sqlite-directory-of-another-user",
        "sqlite:///{dir}/theirs/locks.db",
        ConfigurationError,
        f"theirs is owned by uid {OTHER_UID}",
        prepare="directory-of-another-user",
        root=True,
    ),
    BadURL(
        "sqlite-below-a-directory-of-another-user",
        "sqlite:///{dir}/theirs/mine/locks.db",
        ConfigurationError,
        "another user could replace what is below it",
        prepare="below-a-directory-of-another-user",
        root=True,
    ),
    BadURL(
        "sqlite-symlink-to-a-database",
        "sqlite:///{dir}/link.db",
        ConfigurationError,
        "link.db is a symlink",
        prepare="symlink-to-a-database",
    ),
    BadURL(
        "sqlite-fifo",
        "sqlite:///{dir}/locks.db",
        ConfigurationError,
        "locks.db is not a regular file",
        prepare="fifo",
    ),
    BadURL(
        "sqlite-symlinked-companion",
        "sqlite:///{dir}/locks.db",
        ConfigurationError,
        "locks.db-shm is a symlink",
        prepare="symlinked-companion",
    ),
    BadURL(
        "sqlite-planted-wal",
        "sqlite:///{dir}/locks.db",
        ConfigurationError,
        f"locks.db-wal is owned by uid {OTHER_UID}",
        prepare="planted-wal",
        root=True,
    ),
    BadURL(
        "sqlite-planted-symlink-to-a-directory",
        "sqlite:///{dir}/tmp/app/locks.db",
        ConfigurationError,
        f"app, a symlink, is owned by uid {OTHER_UID}",
        prepare="planted-symlink-to-a-directory",
        root=True,
    ),
    BadURL(
        "bad-default-ttl",
        "sqlite:///{dir}/locks.db",
        InvalidTTL,
        "ttl must be between",
        options=(("default_ttl", -1),),
    ),
    BadURL(
        "unknown-connect-option",
        "sqlite:///{dir}/locks.db",
        InvalidArgument,
        "does not take the option(s) pool_size",
        options=(("pool_size", 4),),
    ),
    BadURL("port-0", "redis://u:{secret}@127.0.0.1:0/0", InvalidURL, "bad port '0'"),
    BadURL("port-65536", "redis://u:{secret}@127.0.0.1:65536/0", InvalidURL, "bad port '65536'"),
    BadURL(
        "port-in-other-digits",
        "redis://u:{secret}@127.0.0.1:\uff16\uff13\uff17\uff19/0",
        InvalidURL,
        "bad port",
    ),
    BadURL("db-out-of-range", "redis://u:{secret}@127.0.0.1/10001", InvalidURL, "database"),
    BadURL(
        "db-with-underscore",
        "redis://u:{secret}@127.0.0.1/1_0",
        InvalidURL,
        "database",
    ),
    BadURL(
        "max-connections-0",
        "redis://u:{secret}@127.0.0.1:1/0?max_connections=0",
        InvalidURL,
        "bad value '0' for URL option 'max_connections'",
    ),
    BadURL(
        "max-connections-not-whole",
        "redis://u:{secret}@127.0.0.1:1/0?max_connections=1e3",
        InvalidURL,
        "a whole number of connections from 1 to 10000",
    ),
    BadURL(
        "max-waiters-0",
        "redis://u:{secret}@127.0.0.1:1/0?max_waiters=0",
        InvalidURL,
        "bad value '0' for URL option 'max_waiters'",
    ),
    BadURL(
        "max-waiters-too-many",
        "redis://u:{secret}@127.0.0.1:1/0?max_waiters=1000001",
        InvalidURL,
        "a whole number of waiters from 1 to 1000000",
    ),
    BadURL(
        "max-waiters-not-whole",
        "redis://u:{secret}@127.0.0.1:1/0?max_waiters=1_000",
        InvalidURL,
        "a whole number of waiters",
    ),
    BadURL(
        "timeout-overflow",
        "redis://u:{secret}@127.0.0.1:1/0?connect_timeout=1e300",
        InvalidURL,
        "connect_timeout",
    ),
    # Redlock: port 1 is never tried, every one of these is refused before connecting
    BadURL(
        "redlock-two-masters",
        "redlock://u:{secret}@127.0.0.1:1,127.0.0.1:2/0",
        InvalidURL,
        "an odd number of masters, at least 3",
    ),
    BadURL(
        "redlock-four-masters",
        "redlock://u:{secret}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,127.0.0.1:4/0",
        InvalidURL,
        "the URL lists 4",
    ),
    BadURL(
        "redlock-master-twice",
        "redlock://u:{secret}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:1/0",
        InvalidURL,
        "is listed twice",
    ),
    BadURL(
        "redlock-empty-master",
        "redlock://u:{secret}@127.0.0.1:1,,127.0.0.1:3/0",
        InvalidURL,
        "HOST:PORT,HOST:PORT,HOST:PORT",
    ),
    BadURL(
        "redlock-cluster-option",
        "redlock://u:{secret}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/0?cluster=true",
        InvalidURL,
        "unknown URL option(s) cluster",
    ),
    BadURL(
        "redlock-node-timeout-0",
        "redlock://u:{secret}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/0?node_timeout=0",
        InvalidURL,
        "bad value '0' for URL option 'node_timeout'",
    ),
    BadURL(
        "redlock-restart-delay-negative",
        "redlock://u:{secret}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/0?restart_delay=-1",
        InvalidURL,
        "bad value '-1' for URL option 'restart_delay'",
    ),
    BadURL(
        "redlock-ssl-option-in-clear",
        "redlock://u:{secret}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/0?ssl_ca_certs=/{dir}/ca.pem",
        InvalidURL,
        "ssl_* options need a redlocks:// URL",
    ),
    # ZooKeeper: port 1 is never tried, every one of these is refused before connecting
    BadURL(
        "zookeeper-password-without-user",
        "zookeeper://:{secret}@127.0.0.1:1/x",
        InvalidURL,
        "a password needs a user name",
    ),
    BadURL(
        "zookeeper-max-waiters-not-whole",
        "zookeeper://u:{secret}@127.0.0.1:1/x?max_waiters=1e4",
        InvalidURL,
        "a whole number of waiters",
    ),
    BadURL(
        "zookeeper-session-timeout-below-min-ttl",
        "zookeeper://u:{secret}@127.0.0.1:1/x?session_timeout=0.4",
        InvalidURL,
        "session_timeout must be at least 0.5 s",
    ),
    BadURL(
        "zookeeper-ssl-option-in-clear",
        "zookeeper://u:{secret}@127.0.0.1:1/x?ssl_ca_certs=/{dir}/ca.pem",
        InvalidURL,
        "ssl_* options need a zookeepers:// URL",
    ),
    BadURL(
        "zookeeper-keyfile-without-certfile",
        "zookeepers://u:{secret}@127.0.0.1:1/x?ssl_keyfile=/{dir}/key.pem",
        InvalidURL,
        "ssl_keyfile needs ssl_certfile",
    ),
    BadURL(
        "zookeeper-check-hostname-bad-word",
        "zookeepers://u:{secret}@127.0.0.1:1/x?ssl_check_hostname=perhaps",
        InvalidURL,
        "bad value 'perhaps' for URL option 'ssl_check_hostname'",
    ),
    BadURL(
        "zookeeper-ca-file-missing",
        "zookeepers://u:{secret}@127.0.0.1:1/x?ssl_ca_certs=/{dir}/missing.pem",
        ConfigurationError,
        "missing.pem is not a file",
    ),
    BadURL(
        "zookeeper-ca-file-not-a-certificate",
        "zookeepers://u:{secret}@127.0.0.1:1/x?ssl_ca_certs=/{dir}/not-a-certificate.pem",
        ConfigurationError,
        "holds no usable CA certificate",
        prepare="not-a-certificate",
    ),
    BadURL(
        "zookeeper-certfile-not-a-certificate",
        "zookeepers://u:{secret}@127.0.0.1:1/x?ssl_certfile=/{dir}/not-a-certificate.pem",
        ConfigurationError,
        "hold no usable certificate and private key",
        prepare="not-a-certificate",
    ),
    BadURL(
        "redis-ssl-option-in-clear",
        "redis://u:{secret}@127.0.0.1:1/0?ssl_ca_certs=/{dir}/ca.pem",
        InvalidURL,
        "ssl_* options need a rediss:// URL",
    ),
    BadURL(
        "redis-keyfile-without-certfile",
        "rediss://u:{secret}@127.0.0.1:1/0?ssl_keyfile=/{dir}/key.pem",
        InvalidURL,
        "ssl_keyfile needs ssl_certfile",
    ),
    BadURL(
        "redis-ca-file-missing",
        "rediss://u:{secret}@127.0.0.1:1/0?ssl_ca_certs=/{dir}/missing.pem",
        ConfigurationError,
        "missing.pem is not a file",
    ),
    BadURL(
        "redis-ca-file-not-a-certificate",
        "rediss://u:{secret}@127.0.0.1:1/0?ssl_ca_certs=/{dir}/not-a-certificate.pem",
        ConfigurationError,
        "holds no usable CA certificate",
        prepare="not-a-certificate",
    ),
    BadURL(
        "redis-certfile-not-a-certificate",
        "rediss://u:{secret}@127.0.0.1:1/0?ssl_certfile=/{dir}/not-a-certificate.pem",
        ConfigurationError,
        "hold no usable certificate and private key",
        prepare="not-a-certificate",
    ),
    BadURL(
        "redis-cluster-certfile-not-a-certificate",
        "rediss://u:{secret}@127.0.0.1:1,127.0.0.1:2/0?cluster=true"
        "&ssl_certfile=/{dir}/not-a-certificate.pem",
        ConfigurationError,
        "hold no usable certificate and private key",
        prepare="not-a-certificate",
    ),
    BadURL(
        "redlock-certfile-not-a-certificate",
        "redlocks://u:{secret}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/0"
        "?ssl_certfile=/{dir}/not-a-certificate.pem",
        ConfigurationError,
        "hold no usable certificate and private key",
        prepare="not-a-certificate",
    ),
]


def prepare(kind: str, directory: Path) -> None:
    if kind == "directory":
        (directory / "a-directory").mkdir()
    elif kind == "dangling-symlink":
        (directory / "link.db").symlink_to(directory / "target.db")
    elif kind == "symlink-loop":
        (directory / "loop.db").symlink_to(directory / "loop2.db")
        (directory / "loop2.db").symlink_to(directory / "loop.db")
    elif kind == "not-a-certificate":
        (directory / "not-a-certificate.pem").write_text("not a certificate\n")
    elif kind:
        _prepare_sqlite_files(kind, directory)


def _prepare_sqlite_files(kind: str, directory: Path) -> None:
    """Unsafe places for a database (``root`` cases give files away to OTHER_UID)."""
    database = directory / "locks.db"
    if kind == "world-writable-database":
        database.touch()
        database.chmod(0o666)
    elif kind == "database-of-another-user":
        database.touch()
        os.chown(database, OTHER_UID, OTHER_GID)
    elif kind == "database-writable-by-a-foreign-group":
        database.touch()
        database.chmod(0o660)
        os.chown(database, os.getuid(), OTHER_GID)
    elif kind == "world-writable-directory":
        (directory / "open").mkdir()
        (directory / "open").chmod(0o777)
    elif kind == "sticky-directory":
        (directory / "tmp").mkdir()
        (directory / "tmp").chmod(0o1777)
    elif kind in ("directory-of-another-user", "below-a-directory-of-another-user"):
        (directory / "theirs").mkdir()
        if kind == "below-a-directory-of-another-user":
            (directory / "theirs" / "mine").mkdir(mode=0o700)
        os.chown(directory / "theirs", OTHER_UID, OTHER_GID)
    elif kind == "symlink-to-a-database":
        (directory / "real.db").touch(mode=0o600)
        (directory / "link.db").symlink_to(directory / "real.db")
    elif kind == "fifo":
        os.mkfifo(database, 0o600)
    elif kind == "symlinked-companion":
        database.touch(mode=0o600)
        (directory / "locks.db-shm").symlink_to(directory / "elsewhere-shm")
    elif kind == "planted-wal":
        database.touch(mode=0o600)
        planted = directory / "locks.db-wal"
        planted.touch()
        planted.chmod(0o666)
        os.chown(planted, OTHER_UID, OTHER_GID)
    elif kind == "planted-symlink-to-a-directory":
        # in a sticky directory such as /tmp, another user's link to a directory of yours
        (directory / "tmp").mkdir()
        (directory / "tmp").chmod(0o1777)
        (directory / "mine").mkdir(mode=0o700)
        (directory / "tmp" / "app").symlink_to(directory / "mine")
        os.lchown(directory / "tmp" / "app", OTHER_UID, OTHER_GID)
    else:
        raise AssertionError(f"no such preparation {kind!r}")


def listing(directory: Path) -> list[str]:
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*"))


def url_params() -> list[object]:
    params = []
    for case in BAD_URLS:
        marks: list[pytest.MarkDecorator] = []
        if case.root:
            marks.append(
                pytest.mark.skipif(
                    not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a file to another user needs root",
                )
            )
        if case.bug:
            # what the bug opened may not be closed: collected in the test (see below), its
            # ResourceWarning must not fail the test in place of the xfail
            marks += [
                pytest.mark.xfail(reason=case.bug, strict=True),
                pytest.mark.filterwarnings("ignore::ResourceWarning"),
            ]
        params.extend(
            pytest.param(case, flavour, id=f"{case.id}-{flavour}", marks=marks)
            for flavour in FLAVOURS
        )
    return params


async def aconnect_and_close(url: str, **options: object) -> None:
    locks = await tumbler.aio.connect(url, **options)
    await locks.close()


def connect_and_close(flavour: str, url: str, options: dict[str, object]) -> None:
    """Connect in the flavour; a connection that succeeds (it should not) is closed."""
    if flavour == "sync":
        tumbler.connect(url, **options).close()
    else:
        asyncio.run(aconnect_and_close(url, **options))


def collected(raised: pytest.ExceptionInfo[TumblerError]) -> TumblerError:
    """The refusal, cut from its traceback and those of the errors behind it.

    Their frames hold what the refused connect made: while they live, a socket or file it
    left open cannot be collected, and warns (failing the test) only when the collector
    finds it later, in whichever test runs then. Cut loose (and ``raised`` deleted by the
    caller), it is found by the collection the case makes next, and fails this case.
    """
    error: BaseException | None = raised.value
    while error is not None:
        error.__traceback__ = None
        error = error.__cause__ or error.__context__
    return raised.value


def check_refusal(error: BaseException, expected: type[TumblerError], says: str) -> None:
    assert type(error) is expected
    text = str(error)
    assert says in text, text
    for shown in (text, repr(error), str(error.backend)):
        assert SECRET not in shown
        assert quote(SECRET, safe="") not in shown
    assert text.isprintable(), repr(text)


@pytest.mark.parametrize(("case", "flavour"), url_params())
def test_bad_urls_are_refused_and_make_nothing(
    case: BadURL, flavour: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "target"
    directory.mkdir()
    prepare(case.prepare, directory)
    before = listing(directory)
    # a relative path would land in the working directory: make that the watched one too
    monkeypatch.chdir(directory)
    url = case.url.replace("{dir}", str(directory).lstrip("/")).replace("{secret}", SECRET)
    if case.url.startswith("{dir}"):
        url = "/" + url
    with pytest.raises(TumblerError) as raised:
        connect_and_close(flavour, url, dict(case.options))
    refused = collected(raised)
    del raised
    # What the connect made is young: the young generations hold it, and a full collection
    # of a worker that has run thousands of cases cost 0.2 s of CPU a case
    # (tests/transports.py names the case that made a transport found later all the same).
    gc.collect(1)
    check_refusal(refused, case.error, case.says)
    assert listing(directory) == before


# -- refused by the server ---------------------------------------------------------------------


@dataclass(frozen=True)
class ServerRefusal:
    """A URL of the TLS+ACL Redis that only the server can refuse. ``userinfo`` goes before
    ``@``: ``{right}`` is the ``tumbler`` user's percent-encoded password, ``{other}`` the
    ``reader``'s, ``{partial}`` the ``partial`` user's (a lock user without PEXPIRETIME). ``ca``
    replaces the CA file (``{dir}``: the test's directory). ``cluster``
    asks for Redis Cluster, which this server is not."""

    id: str
    error: type[TumblerError]
    says: str
    userinfo: str = "tumbler:{right}@"
    db: int = 0
    ca: str = ""
    cluster: bool = False
    bug: str = ""


SERVER_REFUSALS = [
    ServerRefusal("wrong-password", PermissionDenied, "refused", f"tumbler:{SECRET}@"),
    ServerRefusal("password-plus-one", PermissionDenied, "refused", "tumbler:{right}x@"),
    ServerRefusal("unknown-user", PermissionDenied, "refused", f"nobody:{SECRET}@"),
    ServerRefusal("another-users-password", PermissionDenied, "refused", "tumbler:{other}@"),
    ServerRefusal("empty-password", PermissionDenied, "refused", "tumbler:@"),
    ServerRefusal("user-without-password", PermissionDenied, "Redis", "tumbler@"),
    ServerRefusal("password-without-user", PermissionDenied, "refused", f":{SECRET}@"),
    ServerRefusal("no-credentials", PermissionDenied, "Redis", ""),
    ServerRefusal("read-only-user", PermissionDenied, "info", "reader:{other}@"),
    ServerRefusal("user-lacking-a-command", PermissionDenied, "PEXPIRETIME", "partial:{partial}@"),
    ServerRefusal(
        "db-beyond-the-servers",
        ConfigurationError,
        "DB index is out of range",
        db=16,
    ),
    ServerRefusal(
        "ca-file-missing",
        ConfigurationError,
        "missing.pem",
        ca="{dir}/missing.pem",
    ),
    ServerRefusal(
        "ca-file-not-a-certificate",
        ConfigurationError,
        "certificate",
        ca="{dir}/not-a-certificate.pem",
    ),
    ServerRefusal("not-a-cluster", ConfigurationError, "drop cluster=true", cluster=True),
    ServerRefusal(
        "wrong-password-to-cluster",
        PermissionDenied,
        "refused",
        f"tumbler:{SECRET}@",
        cluster=True,
    ),
]


def server_params() -> list[object]:
    params = []
    for case in SERVER_REFUSALS:
        marks = [pytest.mark.xfail(reason=case.bug, strict=True)] if case.bug else []
        params.extend(
            pytest.param(case, flavour, id=f"{case.id}-{flavour}", marks=marks)
            for flavour in FLAVOURS
        )
    return params


def tls_url(
    server, userinfo: str, prefix: str, db: int = 0, ca: str = "", cluster: bool = False
) -> str:
    return (
        f"rediss://{userinfo}{server.host}:{server.port}/{db}"
        f"?prefix={prefix}&ssl_ca_certs={ca or server.ca_path}"
    ) + ("&cluster=true" if cluster else "")


@pytest.mark.parametrize(("case", "flavour"), server_params())
def test_what_the_server_refuses_is_refused_at_once(
    case: ServerRefusal, flavour: str, redis_tls_server, tmp_path: Path
) -> None:
    server = redis_tls_server
    prefix = f"tumbler:test-{uuid.uuid4().hex[:12]}"
    (tmp_path / "not-a-certificate.pem").write_text("not a certificate\n")
    right = quote(server.users["tumbler"].password, safe="")
    other = quote(server.users["reader"].password, safe="")
    partial = quote(server.users["partial"].password, safe="")
    userinfo = case.userinfo.replace("{right}", right).replace("{other}", other)
    userinfo = userinfo.replace("{partial}", partial)
    ca = case.ca.replace("{dir}", str(tmp_path))
    url = tls_url(server, userinfo, prefix, case.db, ca, case.cluster)
    began = time.monotonic()
    with pytest.raises(TumblerError) as raised:
        connect_and_close(flavour, url, {})
    refused = collected(raised)
    del raised
    gc.collect()
    assert time.monotonic() - began < NO_HANG
    check_refusal(refused, case.error, case.says)
    for password in (
        server.users["tumbler"].password,
        server.users["reader"].password,
        server.users["partial"].password,
    ):
        assert password not in str(refused)
        assert quote(password, safe="") not in str(refused)
    # the refused client made nothing; the right credentials still work
    with tumbler.connect(tls_url(server, f"tumbler:{right}@", prefix)) as locks:
        assert locks.status_all() == []
        with locks.lock("after-refusal", timeout=0) as hold:
            assert hold.held
        assert locks.status_all() == []


@pytest.mark.parametrize("cluster", [False, True], ids=["server", "cluster"])
def test_a_refused_tls_connect_leaves_no_socket_open_however_late_the_server_says_goodbye(
    cluster: bool, redis_tls_server
) -> None:
    """redis-py closes a connection whose AUTH was refused without waiting for the server's
    TLS goodbye. With ``asyncio.run`` around the connect, the event loop ends right after the
    refusal: a goodbye that comes later (200 ms here, as under load) must not find the socket
    still open, with nobody left to close it."""
    server = redis_tls_server
    with FaultProxy((server.host, server.port)) as proxy:
        proxy.delay(200, direction="downstream")
        url = (
            f"rediss://tumbler:{SECRET}@127.0.0.1:{proxy.port}/0?ssl_ca_certs={server.ca_path}"
        ) + ("&cluster=true" if cluster else "")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(PermissionDenied):
                connect_and_close("asyncio", url, {})
            gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert unclosed == []
