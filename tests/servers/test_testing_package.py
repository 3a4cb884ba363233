"""``tumbler.testing`` is public API: what it exports, and what importing it needs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import tumbler.testing
import tumbler.testing.servers
from tumbler.testing.servers import redis, zookeeper


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_importing_tumbler_testing_needs_no_server_tooling() -> None:
    # None in sys.modules makes any import of the module fail, as if it were not installed
    result = run_python(
        """
        import sys
        sys.modules["mirakuru"] = None
        from tumbler.testing import ManualClock
        ManualClock().advance(1)
        try:
            import tumbler.testing.servers
        except ImportError as error:
            print("servers:", error)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "servers: import of mirakuru halted" in result.stdout


def test_tumbler_testing_keeps_its_clocks() -> None:
    assert tumbler.testing.__all__ == ["Clock", "ManualClock", "SystemClock"]


def test_every_exported_name_exists_and_comes_from_its_module() -> None:
    servers = tumbler.testing.servers
    assert len(set(servers.__all__)) == len(servers.__all__)
    for name in servers.__all__:
        assert hasattr(servers, name), name
    for module in (redis, zookeeper):
        for name in module.__all__:
            assert getattr(module, name) is getattr(servers, name), (module, name)
    # what other parts of tumbler import from here
    for name in ("RedisServer", "start_cluster", "ZooKeeperServer", "ZooKeeperEnsemble"):
        assert name in servers.__all__
    assert issubclass(servers.RedisServerError, servers.ServerError)
    assert issubclass(servers.ZooKeeperServerError, servers.ServerError)
    assert issubclass(servers.RedisNotInstalled, servers.ServerNotInstalled)
    assert issubclass(servers.ZooKeeperNotInstalled, servers.ServerNotInstalled)
