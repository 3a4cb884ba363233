"""Throwaway servers for tests and benchmarks: real processes from Debian's packages on free
loopback ports, each in a temporary directory, stopped (and their directories removed) when
closed.

What every launcher shares is here: free ports, the errors, throw-away TLS certificates; the
life of one server process (launch on free ports, wait until it serves, stop, kill, start
again) is :class:`tumbler.testing.servers.process.ProcessLauncher`, which a launcher fills in
with its command, files and readiness check. Each launcher lives in its backend's harness
package (``tumbler.testing.backends.<name>.server``, used by the harness's test targets): a
Redis server, TLS server and cluster in ``tumbler.testing.backends.redis.server``, a ZooKeeper
server and ensemble in ``tumbler.testing.backends.zookeeper.server``, a PostgreSQL server and
PgBouncer in ``tumbler.testing.backends.postgresql.server``, a MariaDB server in
``tumbler.testing.backends.mysql.server``, an etcd member and cluster in
``tumbler.testing.backends.etcd.server``. Each can be killed
(SIGKILL, as in a crash) and started again on the same ports and data, so tests can show what a
lock does when its server fails. Needs the ``testing`` extra (mirakuru, trustme, the drivers)
and the servers themselves (``scripts/servers`` installs them). Failures to start raise a
:class:`ServerError` (the launcher's subclass) that carries the end of the server's log;
:class:`ServerNotInstalled` when a program is missing.
"""

from __future__ import annotations

from ._common import (
    LOOPBACK,
    ServerError,
    ServerNotInstalled,
    TLSFiles,
    TLSServerFiles,
    free_port,
    make_tls_files,
    tail,
)

__all__ = [
    "LOOPBACK",
    "ServerError",
    "ServerNotInstalled",
    "TLSFiles",
    "TLSServerFiles",
    "free_port",
    "make_tls_files",
    "tail",
]
