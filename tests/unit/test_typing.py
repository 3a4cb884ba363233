"""The public API's types say what the code accepts: a type checker passes code that calls it
as the README does, timedeltas included, and flags what the code would refuse."""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

pytestmark = pytest.mark.tools  # mypy, the build, the bench: the same on every Python

ACCEPTED = """
from datetime import timedelta
import tumbler, tumbler.aio

locks = tumbler.connect("memory://", default_ttl=timedelta(seconds=20))
lock = locks.lock("a", ttl=timedelta(seconds=30), timeout=timedelta(seconds=5))
locks.semaphore("s", 2, ttl=10, timeout=None)
segmented = locks.segmented("g", 4, ttl=timedelta(minutes=1))
with segmented as segment_hold:
    part: int = segment_hold.segment
if segmented.acquire():
    assert segmented.hold is not None
    print(segmented.segment_names[segmented.hold.segment])
locks.rwlock("rw", ttl=2.5).read()
with locks.multi(("a1", "a2"), ttl=timedelta(seconds=30), timeout=5) as multi_hold:
    first_token: int = multi_hold.tokens["a1"]
if lock.acquire(timeout=timedelta(milliseconds=500)):
    hold = lock.hold
    assert hold is not None
    hold.extend(timedelta(seconds=60))
    hold.wait_lost(timedelta(seconds=1))
    lock.release()

async def main() -> None:
    alocks = await tumbler.aio.connect("memory://", default_ttl=timedelta(seconds=20))
    async with alocks.segmented("g", 4) as asegment_hold:
        apart: int = asegment_hold.segment
    async with alocks.multi(["m1", "m2"]) as amulti_hold:
        atokens: dict[str, int] = dict(amulti_hold.tokens)
    async with alocks.lock("b", ttl=timedelta(seconds=3)) as ahold:
        await ahold.extend(timedelta(seconds=9))
        await ahold.wait_lost(timeout=timedelta(seconds=1))
"""

REFUSED = """
import tumbler

tumbler.connect("memory://").lock("a", ttl="30")
with tumbler.connect("memory://").lock("a") as hold:
    print(hold.segment)
"""


def check(tmp_path: Path, source: str) -> tuple[str, int]:
    program = tmp_path / "program.py"
    program.write_text(source)
    stdout, stderr, status = api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(program)]
    )
    return stdout + stderr, status


@pytest.mark.slow
def test_what_the_code_accepts_type_checks(tmp_path: Path) -> None:
    output, status = check(tmp_path, ACCEPTED)
    assert status == 0, output


@pytest.mark.slow
def test_what_the_code_refuses_does_not(tmp_path: Path) -> None:
    output, status = check(tmp_path, REFUSED)
    assert status == 1, output
    assert 'Argument "ttl" to "lock" of "Locks" has incompatible type "str"' in output, output
    # only a segmented lock's hold has a segment
    assert '"Hold" has no attribute "segment"' in output, output
