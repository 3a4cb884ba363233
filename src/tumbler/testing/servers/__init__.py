"""Throwaway servers for tests and benchmarks: real processes from Debian's packages on free
loopback ports, each in a temporary directory, stopped (and their directories removed) when
closed.

* Redis (:mod:`tumbler.testing.servers.redis`): :class:`RedisServer`, a TLS server with ACL
  users (:func:`start_tls_redis`), a Redis Cluster (:func:`start_cluster`).
* ZooKeeper (:mod:`tumbler.testing.servers.zookeeper`): a standalone
  :class:`ZooKeeperServer` and a replicated :class:`ZooKeeperEnsemble`.

Each can be killed (SIGKILL, as in a crash) and started again on the same ports and data, so
tests can show what a lock does when its server fails. Needs the ``testing`` extra (mirakuru,
redis-py, trustme) and the servers themselves (``scripts/servers`` installs them). Failures to
start raise a :class:`ServerError` (the launcher's subclass) that carries the end of the
server's log; :class:`ServerNotInstalled` when a program is missing.
"""

from __future__ import annotations

from ._common import LOOPBACK, ServerError, ServerNotInstalled, free_port
from .redis import (
    ADMIN_USER,
    CLUSTER_SLOTS,
    READER_RULES,
    STARTUP_TIMEOUT,
    TUMBLER_PASSWORD,
    TUMBLER_RULES,
    RedisNotInstalled,
    RedisServer,
    RedisServerCluster,
    RedisServerError,
    RedisUser,
    TLSFiles,
    flush_redis,
    make_tls_files,
    redis_cli_binary,
    redis_server_binary,
    start_cluster,
    start_tls_redis,
)
from .zookeeper import (
    DEFAULT_MAX_SESSION_TIMEOUT,
    DEFAULT_MIN_SESSION_TIMEOUT,
    DEFAULT_TICK_TIME,
    FOUR_LETTER_WORDS,
    SUPER_USER,
    ZOOKEEPER_STARTUP_TIMEOUT,
    ZooKeeperEnsemble,
    ZooKeeperMember,
    ZooKeeperNotInstalled,
    ZooKeeperServer,
    ZooKeeperServerError,
    four_letter_word,
    java_binary,
    super_digest,
    zookeeper_classpath,
)

__all__ = [
    "ADMIN_USER",
    "CLUSTER_SLOTS",
    "DEFAULT_MAX_SESSION_TIMEOUT",
    "DEFAULT_MIN_SESSION_TIMEOUT",
    "DEFAULT_TICK_TIME",
    "FOUR_LETTER_WORDS",
    "LOOPBACK",
    "READER_RULES",
    "STARTUP_TIMEOUT",
    "SUPER_USER",
    "TUMBLER_PASSWORD",
    "TUMBLER_RULES",
    "ZOOKEEPER_STARTUP_TIMEOUT",
    "RedisNotInstalled",
    "RedisServer",
    "RedisServerCluster",
    "RedisServerError",
    "RedisUser",
    "ServerError",
    "ServerNotInstalled",
    "TLSFiles",
    "ZooKeeperEnsemble",
    "ZooKeeperMember",
    "ZooKeeperNotInstalled",
    "ZooKeeperServer",
    "ZooKeeperServerError",
    "flush_redis",
    "four_letter_word",
    "free_port",
    "java_binary",
    "make_tls_files",
    "redis_cli_binary",
    "redis_server_binary",
    "start_cluster",
    "start_tls_redis",
    "super_digest",
    "zookeeper_classpath",
]
