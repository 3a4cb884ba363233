"""Real redis-server masters for the Redlock backend's tests, torture rounds and bench/.

:class:`RedlockMasters` is N independent ``redis-server`` processes (5 by default): no
replication, no cluster, nothing shared but the loopback interface, each a
:class:`~tumbler.testing.backends.redis.server.RedisServer` in a subdirectory of its own on a
free port.
That is the deployment the Redlock algorithm assumes, and what its faults are made of: one
master can be killed (SIGKILL, as in a crash), paused (SIGSTOP: a master that hangs, which a
client can tell from a slow one only by its timeout) and resumed (SIGCONT), or restarted -
empty, as a master without persistence comes back, unless ``appendonly`` is on.

:func:`start_tls_masters` starts masters that speak only TLS (one CA for them all) and have
the same ACL users, so that one ``redlocks://`` URL with one user's credentials reaches every
one of them.

Plain library code: no pytest; it needs the ``testing`` extra, as the Redis launcher does.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from tumbler.errors import InvalidArgument
from tumbler.testing.servers._common import Launcher, PortTaken, TLSFiles, make_tls_files

from ..redis.server import (
    READER_RULES,
    TUMBLER_PASSWORD,
    TUMBLER_RULES,
    RedisServer,
    RedisServerError,
    RedisUser,
)

__all__ = ["RedlockMasters", "start_tls_masters"]


class RedlockMasters(Launcher):
    """``count`` independent ``redis-server`` masters on free ``127.0.0.1`` ports.

    Nothing runs until :meth:`start`; ``with RedlockMasters() as masters:`` starts them and, on
    exit, :meth:`close` s them. Master ``i`` lives in ``workdir/master-i`` (a temporary
    directory, removed on :meth:`close`, if no ``workdir``). ``tls`` (True: a CA and
    certificates made in ``workdir/tls``) makes every master speak only TLS with the same
    certificates; ``users`` turns ACL on, the same users on every master; other ``options`` go
    to each :class:`RedisServer` as they are (``appendonly``, ``extra_config``, ...).

    :meth:`kill`, :meth:`pause`, :meth:`resume` and :meth:`restart` act on one master by its
    index in :attr:`masters`; :meth:`start` starts again every master that is down.
    """

    def __init__(
        self,
        workdir: str | Path | None = None,
        count: int = 5,
        *,
        tls: TLSFiles | bool = False,
        users: Iterable[RedisUser] = (),
        **options: Any,
    ) -> None:
        if count < 1:
            raise InvalidArgument(f"Redlock needs at least one master, not {count}")
        self._use_directory(workdir, "tumbler-redlock-")
        self.tls: TLSFiles | None = (
            make_tls_files(self.dir / "tls") if tls is True else (tls or None)
        )
        self.users = list(users)
        #: the masters, in the order the URL lists them
        self.masters = [
            RedisServer(self.dir / f"master-{index}", tls=self.tls, users=self.users, **options)
            for index in range(count)
        ]
        self._paused: set[int] = set()
        self._started = False
        #: seconds the last :meth:`start` took, from the first launch until every master served
        self.startup_seconds = 0.0

    # -- addresses -------------------------------------------------------------------------

    @property
    def scheme(self) -> str:
        return "redlocks" if self.tls is not None else "redlock"

    @property
    def hosts(self) -> str:
        """``127.0.0.1:P1,127.0.0.1:P2,...``: every master, in order."""
        return ",".join(f"{master.host}:{master.port}" for master in self.masters)

    @property
    def ca_path(self) -> Path:
        """The CA that signed every master's certificate (TLS masters only)."""
        if self.tls is None:
            raise RedisServerError("these masters do not use TLS")
        return self.tls.ca_path

    def url_for(self, user: str | None, prefix: str | None = None, **options: object) -> str:
        """A URL of every master, with ``user``'s name and password (``None``: none), the key
        ``prefix`` if given, and the other URL ``options`` (``node_timeout=0.1``, say). On TLS
        masters ``ssl_ca_certs`` names the CA, unless ``options`` says otherwise."""
        userinfo = ""
        if user is not None:
            account = next((u for u in self.users if u.name == user), None)
            if account is None:
                names = [u.name for u in self.users]
                raise KeyError(f"no ACL user {user!r} on these masters ({names})")
            userinfo = f"{quote(account.name, safe='')}:{quote(account.password, safe='')}@"
        query: dict[str, object] = {}
        if prefix is not None:
            query["prefix"] = prefix
        if self.tls is not None:
            query["ssl_ca_certs"] = self.tls.ca_path
        query.update(options)
        tail = f"?{urlencode(query)}" if query else ""
        return f"{self.scheme}://{userinfo}{self.hosts}{tail}"

    def url(self, prefix: str | None = None, **options: object) -> str:
        """:meth:`url_for` the first ACL user (no credentials without ACL)."""
        return self.url_for(self.users[0].name if self.users else None, prefix, **options)

    def client(self, index: int, **options: Any) -> Any:
        """A ``redis.Redis`` of master ``index`` as its admin (closed by :meth:`close` if the
        caller has not closed it)."""
        return self.masters[index].client(**options)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> RedlockMasters:
        """Start every master that is down and wait until each serves; returns the masters.

        Every process is launched before the first is waited for, so their start-ups overlap.
        The first start picks free ports (another set for a master whose port another program
        took meanwhile); later ones reuse them. On failure of the first start every master
        is closed; of a later one, the masters it launched are killed.
        """
        began = time.monotonic()
        launched: list[tuple[RedisServer, bool]] = []
        try:
            for index, master in enumerate(self.masters):
                if master.running:
                    continue
                self._paused.discard(index)
                # one that ended on its own (a crash) is reaped first, as start() does
                master.kill()
                fresh = master.port == 0
                if fresh:
                    master._pick_ports()
                try:
                    master._spawn()
                except PortTaken:
                    self._start_alone(master, fresh)
                    continue
                launched.append((master, fresh))
            for master, fresh in launched:
                try:
                    master._await_started()
                except PortTaken:
                    self._start_alone(master, fresh)
        except BaseException:
            if not self._started:
                self.close()
            else:
                for master, _ in launched:
                    master.kill()
            raise
        self._started = True
        self.startup_seconds = time.monotonic() - began
        return self

    @staticmethod
    def _start_alone(master: RedisServer, fresh: bool) -> None:
        """Start one master whose port was taken under it: on new ports if they were ours to
        pick (its own start tries several), else that is an error."""
        if not fresh:
            raise RedisServerError(master._port_taken_message())
        master.port = 0
        master.start()

    def _check(self, index: int) -> RedisServer:
        if not 0 <= index < len(self.masters):
            raise IndexError(f"no master {index}: there are {len(self.masters)}")
        return self.masters[index]

    def _signal(self, index: int, signum: int) -> None:
        master = self._check(index)
        pid = master.pid
        if pid is None or not master.running:
            raise RedisServerError(f"master {index} ({master.host}:{master.port}) is not running")
        os.kill(pid, signum)

    def kill(self, index: int) -> None:
        """SIGKILL master ``index``, as in a crash (a paused one too); its port and directory
        stay, for :meth:`restart`."""
        self._paused.discard(index)
        self._check(index).kill()

    def pause(self, index: int) -> None:
        """SIGSTOP master ``index``: its connections stay open and nothing answers on them
        until :meth:`resume` (keys whose time runs out meanwhile are gone when it resumes)."""
        self._signal(index, signal.SIGSTOP)
        self._paused.add(index)

    def resume(self, index: int) -> None:
        """SIGCONT master ``index`` after :meth:`pause`."""
        self._signal(index, signal.SIGCONT)
        self._paused.discard(index)

    def paused(self, index: int) -> bool:
        """Whether master ``index`` is paused now."""
        return index in self._paused

    def restart(self, index: int) -> RedisServer:
        """Stop master ``index`` (SIGTERM; nothing if it is down already) and start it again on
        the same port and directory: empty, unless ``appendonly`` is on. Returns it."""
        master = self._check(index)
        if index in self._paused:
            self.resume(index)  # a stopped process would not act on SIGTERM
        master.stop()
        return master.start()

    def flush(self) -> None:
        """Delete every key on every running master."""
        for master in self.masters:
            master.flush()

    def stop(self) -> None:
        """Stop every master (SIGTERM); their directories stay."""
        for index in sorted(self._paused):
            self.resume(index)
        for master in self.masters:
            master.stop()

    def close(self) -> None:
        """Stop every master, close the clients made by :meth:`client` and remove the
        directory if the masters made it. They cannot be started again."""
        for index in sorted(self._paused):
            self._paused.discard(index)
            master = self.masters[index]
            if master.running and master.pid is not None:
                os.kill(master.pid, signal.SIGCONT)
        for master in self.masters:
            master.close()
        self._discard_directory()

    def __repr__(self) -> str:
        up = sum(1 for master in self.masters if master.running)
        return f"<RedlockMasters {self.scheme}://{self.hosts} {up}/{len(self.masters)} up>"


def start_tls_masters(
    workdir: str | Path | None = None,
    count: int = 3,
    *,
    tumbler_password: str = TUMBLER_PASSWORD,
    **options: Any,
) -> RedlockMasters:
    """Start ``count`` masters that speak only TLS, one CA for all, with the same ACL users on
    each: ``default`` off; ``tumbler`` (``tumbler_password``, which has URL-special
    characters) with :data:`~tumbler.testing.backends.redis.server.TUMBLER_RULES`; ``reader`` with
    :data:`~tumbler.testing.backends.redis.server.READER_RULES`. :meth:`RedlockMasters.url` is
    ``tumbler``'s ``redlocks://`` URL. Other ``options`` go to :class:`RedlockMasters`."""
    users = [
        RedisUser("tumbler", tumbler_password, TUMBLER_RULES),
        RedisUser("reader", secrets.token_hex(12), READER_RULES),
    ]
    masters = RedlockMasters(workdir, count, tls=True, users=users, **options)
    return masters.start()
