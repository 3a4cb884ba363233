"""The Redlock launcher (``tumbler.testing.backends.redlock.server``): independent masters whose URL
names each one, any of which can be killed, paused and resumed, or restarted empty."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tumbler.testing.backends.redis.server import RedisServerError
from tumbler.testing.backends.redlock.server import RedlockMasters, start_tls_masters

#: a client that reports a refused or silent master at once instead of retrying
NO_RETRY = Retry(NoBackoff(), 0)


@pytest.fixture
def masters(tmp_path: Path) -> Iterator[RedlockMasters]:
    with RedlockMasters(tmp_path / "masters", 3) as started:
        yield started


def _quick(masters: RedlockMasters, index: int) -> redis.Redis:
    return masters.client(index, socket_timeout=0.3, socket_connect_timeout=0.3, retry=NO_RETRY)


def test_the_url_names_every_master_in_order(masters: RedlockMasters) -> None:
    url = masters.url("tumbler:test", node_timeout=0.1)
    parts = urlsplit(url)
    assert parts.scheme == "redlock"
    assert parts.netloc == ",".join(f"127.0.0.1:{master.port}" for master in masters.masters)
    assert parse_qs(parts.query) == {"prefix": ["tumbler:test"], "node_timeout": ["0.1"]}
    assert len({master.port for master in masters.masters}) == 3
    assert len({master.dir for master in masters.masters}) == 3
    assert all(master.dir.parent == masters.dir for master in masters.masters)


def test_the_masters_are_independent(masters: RedlockMasters) -> None:
    _quick(masters, 0).set("tumbler:only-here", "1")
    assert _quick(masters, 1).get("tumbler:only-here") is None
    assert _quick(masters, 2).get("tumbler:only-here") is None


def test_a_killed_master_restarts_empty_on_its_port(masters: RedlockMasters) -> None:
    port = masters.masters[1].port
    _quick(masters, 1).set("tumbler:forgotten", "1")
    masters.kill(1)
    assert not masters.masters[1].running
    with pytest.raises(redis.ConnectionError):
        _quick(masters, 1).ping()
    assert _quick(masters, 0).ping()  # the others go on
    masters.restart(1)
    assert masters.masters[1].port == port
    assert _quick(masters, 1).get("tumbler:forgotten") is None


def test_start_brings_back_every_master_that_is_down(masters: RedlockMasters) -> None:
    masters.kill(0)
    masters.kill(2)
    masters.start()
    assert all(master.running for master in masters.masters)
    assert all(_quick(masters, index).ping() for index in range(3))


def test_a_paused_master_answers_nothing_until_resumed(masters: RedlockMasters) -> None:
    client = _quick(masters, 2)
    client.set("tumbler:kept", "1")
    masters.pause(2)
    assert masters.paused(2)
    with pytest.raises(redis.TimeoutError):
        client.get("tumbler:kept")
    assert _quick(masters, 0).ping()
    masters.resume(2)
    assert not masters.paused(2)
    assert _quick(masters, 2).get("tumbler:kept") == b"1"  # a pause loses nothing


def test_a_paused_master_can_be_restarted_and_closed(tmp_path: Path) -> None:
    with RedlockMasters(tmp_path / "masters", 3) as masters:
        masters.pause(0)
        masters.restart(0)
        assert _quick(masters, 0).ping()
        masters.pause(1)
    # close() resumed the paused one before stopping it: nothing is left running
    assert not any(master.running for master in masters.masters)


def test_an_appendonly_master_keeps_its_keys_across_a_restart(tmp_path: Path) -> None:
    with RedlockMasters(tmp_path / "masters", 1, appendonly=True) as masters:
        _quick(masters, 0).set("tumbler:durable", "1")
        masters.restart(0)
        assert _quick(masters, 0).get("tumbler:durable") == b"1"


def test_signals_to_a_master_that_is_down_are_refused(masters: RedlockMasters) -> None:
    masters.kill(0)
    with pytest.raises(RedisServerError, match="not running"):
        masters.pause(0)
    with pytest.raises(IndexError):
        masters.kill(3)


def test_tls_masters_share_one_ca_and_one_user(tmp_path: Path) -> None:
    with start_tls_masters(tmp_path / "tls", 3) as masters:
        parts = urlsplit(masters.url("tumbler:test"))
        assert parts.scheme == "redlocks"
        assert parts.username == "tumbler"
        assert parse_qs(parts.query)["ssl_ca_certs"] == [str(masters.ca_path)]
        for master in masters.masters:
            options = master.connection_kwargs("tumbler")
            with redis.Redis(**options, retry=NO_RETRY) as client:
                assert client.set("tumbler:tls", "1")
            plain = {"host": master.host, "port": master.port, "socket_timeout": 0.5}
            with redis.Redis(**plain, retry=NO_RETRY) as client, pytest.raises(redis.RedisError):
                client.ping()
