"""No credential reaches any log, at any level, through tumbler or the drivers below it.

Every logger is captured at DEBUG (the drivers' own included: redis-py, kazoo) while a client
with a password in its URL connects, takes, inspects, force-releases and releases a lock, and
while a client with a wrong password is refused. Run on the backends whose URLs carry a
password, in both flavours.
"""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import quote, unquote, urlsplit

import pytest

import tumbler
import tumbler.aio
from tumbler import PermissionDenied
from tumbler._url import parse_url

from .plugin import Target

FLAVOURS = ["sync", "async"]
WRONG = "not-the-password-7f3e"

pytestmark = pytest.mark.tumbler_connection


def password_of(url: str) -> str:
    password = urlsplit(url).password
    assert password, f"{url} carries no password"
    return unquote(password)


def with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return parts._replace(netloc=f"{user}:{password}@{host}").geturl()


def lock_cycle_sync(url: str) -> None:
    with tumbler.connect(url) as locks:
        with locks.lock("secret-free", ttl=5) as hold:
            hold.check()
            locks.status_all()
        assert locks.lock("forced").acquire()
        locks.force_release("forced", reason="a test")
    with pytest.raises(PermissionDenied):
        tumbler.connect(with_password(url, WRONG)).close()


async def lock_cycle_async(url: str) -> None:
    async with await tumbler.aio.connect(url) as locks:
        async with locks.lock("secret-free", ttl=5) as hold:
            hold.check()
            await locks.status_all()
        assert await locks.lock("forced").acquire()
        await locks.force_release("forced", reason="a test")
    with pytest.raises(PermissionDenied):
        await (await tumbler.aio.connect(with_password(url, WRONG))).close()


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_no_password_in_any_log_at_any_level(
    conformance_target: Target, backend_url: str, flavour: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = backend_url
    if parse_url(url).password is None:
        pytest.skip(f"the {conformance_target.name} target's URL carries no password")
    secret = password_of(url)
    caplog.set_level(logging.DEBUG)  # the root logger: every library's records reach it
    if flavour == "sync":
        lock_cycle_sync(url)
    else:
        asyncio.run(lock_cycle_async(url))
    assert caplog.records, "nothing was logged: the capture saw nothing"
    logged = caplog.text  # formatted: messages, arguments and tracebacks
    for text in (secret, quote(secret, safe=""), WRONG):
        assert text not in logged
