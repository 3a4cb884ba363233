"""The command line on a Redis whose ACL lacks what tumbler needs: exit 77, naming it.

A user that may not run a command the lock scripts need is refused when ``tumbler``
connects, with one line on stderr naming the command and exit status 77 (permission denied),
before any lock is taken or command run; not 69 (unavailable) after a grant, nor a command
left running while its renewals fail. Real redis-server processes only.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tumbler.cli import EX_NOPERM
from tumbler.testing.backends.redis.server import RedisServer, RedisUser

from ..servers.fixtures import server_unavailable
from .conftest import python_command, run_tumbler

LOCK_RULES = (
    "~tumbler:* &tumbler:* +evalsha +script|load +info +subscribe +scan +time +hget +hset "
    "+hdel +hgetall +hlen +get +set +del +pexpireat +pexpiretime +exists +publish +zadd +zrem "
    "+zrange +zrangebyscore +zcard +zcount +zscore"
)
#: each lacks one right: a command the renewal script runs, the channel of its wake-ups
USERS = {
    "no-pexpiretime": LOCK_RULES.replace(" +pexpiretime", ""),
    "no-publish": LOCK_RULES.replace(" +publish", ""),
    "no-channels": LOCK_RULES.replace(" &tumbler:*", ""),
}
SAYS = {
    "no-pexpiretime": "PEXPIRETIME",
    "no-publish": "PUBLISH tumbler:",
    "no-channels": "SUBSCRIBE tumbler:",
}


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    users = [RedisUser(name, f"{name}-pw", rules) for name, rules in USERS.items()]
    server = RedisServer(tmp_path_factory.mktemp("redis-acl"), users=users)
    try:
        server.start()
    except OSError as error:
        server_unavailable(f"cannot start redis-server with ACL users: {error}")
    yield server
    server.close()


@pytest.mark.parametrize("user", sorted(USERS))
@pytest.mark.parametrize("command", ["run", "status"])
def test_a_user_lacking_a_right_gets_exit_77_naming_it(
    acl_server: RedisServer, env: dict[str, str], tmp_path: Path, user: str, command: str
) -> None:
    env["TUMBLER_URL"] = f"{acl_server.url_for(user)}?prefix=tumbler:cli-{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "ran"
    if command == "run":
        code = f"open({str(marker)!r}, 'w').close()"
        args = ["run", "--no-wait", "--ttl", "5", "job", "--", *python_command(code)]
    else:
        args = ["status"]
    result = run_tumbler(*args, env=env)
    assert result.returncode == EX_NOPERM, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("tumbler: ")
    assert SAYS[user] in line
    assert f"{user}-pw" not in result.stderr
    assert not marker.exists()  # refused before the command could run unguarded
