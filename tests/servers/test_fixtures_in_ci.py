"""The server fixtures skip on a developer's machine without the server, and fail in CI.

A skipped backend suite looks like a passing one, so under ``CI`` a fixture whose server is
missing fails its tests (saying what is missing) instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: the cache would litter tmp_path; pytest-asyncio warns without the repo's settings
PLUGINS_OFF = ["-p", "no:cacheprovider", "-p", "no:asyncio"]


@dataclass(frozen=True)
class Missing:
    """How to make one backend's server program missing, and the fixtures that need it."""

    fixtures: tuple[str, ...]
    variable: str
    nowhere: str


MISSING = {
    "redis": Missing(
        ("redis_server", "redis_tls_server", "redis_cluster", "fresh_redis_server"),
        "TUMBLER_REDIS_SERVER",
        "/nonexistent/redis",
    ),
    "mariadb": Missing(
        ("mariadb_server", "fresh_mariadb_server"), "TUMBLER_MARIADB_BIN", "/nonexistent/mariadb"
    ),
    "zookeeper": Missing(
        ("zookeeper_server", "fresh_zookeeper_server", "zookeeper_ensemble"),
        "TUMBLER_JAVA",
        "/nonexistent/java",
    ),
}


def run_without(missing: Missing, tmp_path: Path, ci: str | None) -> str:
    (tmp_path / "test_users.py").write_text(
        textwrap.dedent(
            f"""
            import pytest

            pytest_plugins = ["tests.servers.fixtures"]

            @pytest.mark.parametrize("fixture", {list(missing.fixtures)!r})
            def test_uses(request, fixture):
                request.getfixturevalue(fixture)
            """
        )
    )
    # the repository for tests.servers, ahead of what the caller's path already puts first
    # (a work tree's src/, when it is not the one installed)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, missing.variable: missing.nowhere}
    env.pop("CI", None)
    env.pop("PYTEST_ADDOPTS", None)
    if ci is not None:
        env["CI"] = ci
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", *PLUGINS_OFF, "test_users.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    expected = 1 if ci else 0
    assert result.returncode == expected, result.stdout + result.stderr
    assert missing.nowhere in result.stdout
    return result.stdout


@pytest.mark.parametrize("backend", sorted(MISSING))
def test_fixtures_skip_without_the_server_outside_ci(tmp_path: Path, backend: str) -> None:
    missing = MISSING[backend]
    output = run_without(missing, tmp_path, ci=None)
    assert f"{len(missing.fixtures)} skipped" in output


@pytest.mark.parametrize("backend", sorted(MISSING))
def test_fixtures_fail_without_the_server_in_ci(tmp_path: Path, backend: str) -> None:
    missing = MISSING[backend]
    output = run_without(missing, tmp_path, ci="true")
    assert f"{len(missing.fixtures)} failed" in output
    assert "skipped" not in output
