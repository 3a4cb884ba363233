"""``tumbler.testing`` is public API: what it exports, and what importing it needs."""

from __future__ import annotations

import tumbler.testing
import tumbler.testing.servers
from tests.processes import run_python
from tumbler.testing.backends.mysql import server as mysql
from tumbler.testing.backends.redis import server as redis
from tumbler.testing.backends.zookeeper import server as zookeeper


def test_importing_tumbler_testing_needs_no_server_tooling() -> None:
    # None in sys.modules makes any import of the module fail, as if it were not installed
    result = run_python(
        """
        import sys
        sys.modules["mirakuru"] = None
        from tumbler.testing import ManualClock
        ManualClock().advance(1)
        import tumbler.testing.servers
        try:
            import tumbler.testing.backends.redis.server
        except ImportError as error:
            print("launcher:", error)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "launcher: import of mirakuru halted" in result.stdout


def test_tumbler_testing_keeps_its_clocks_and_its_wait() -> None:
    assert tumbler.testing.__all__ == ["Clock", "ManualClock", "SystemClock", "wait_until"]


def test_every_exported_name_exists() -> None:
    for module in (tumbler.testing.servers, redis, zookeeper, mysql):
        assert len(set(module.__all__)) == len(module.__all__), module
        for name in module.__all__:
            assert hasattr(module, name), (module, name)


def test_every_launcher_error_is_a_server_error() -> None:
    servers = tumbler.testing.servers
    assert issubclass(redis.RedisServerError, servers.ServerError)
    assert issubclass(zookeeper.ZooKeeperServerError, servers.ServerError)
    assert issubclass(redis.RedisNotInstalled, servers.ServerNotInstalled)
    assert issubclass(zookeeper.ZooKeeperNotInstalled, servers.ServerNotInstalled)
    assert issubclass(mysql.MariaDBServerError, servers.ServerError)
    assert issubclass(mysql.MariaDBNotInstalled, servers.ServerNotInstalled)
