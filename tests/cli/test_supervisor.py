"""The process supervisor behind ``tumbler run``, called without the command line.

It runs in the test process here, so it never adopts what the command leaves behind
(``wait_descendants=False``): as a subreaper it would wait for every child of the test
process. The command line's tests run it as ``tumbler run`` in processes of its own.
"""

from __future__ import annotations

import pytest

import tumbler
from tumbler import _supervisor
from tumbler.errors import EX_NOT_FOUND, EX_TEMPFAIL, InvalidLockName

from .conftest import python_command


def run(url: str, command: list[str], messages: list[str], **options: object) -> int:
    return _supervisor.run_locked(
        lambda: tumbler.connect(url),
        "job",
        command,
        wait_descendants=False,
        complain=messages.append,
        **options,  # type: ignore[arg-type]
    )


def test_the_command_runs_under_the_lock_and_its_status_is_returned(
    url: str, locks: tumbler.Locks
) -> None:
    messages: list[str] = []
    # the command sees the lock held, by another owner than the test's client
    code = (
        "import sys, tumbler\n"
        f"with tumbler.connect({url!r}) as locks:\n"
        "    sys.exit(3 if locks.status('job').locked else 4)"
    )

    assert run(url, python_command(code), messages) == 3
    assert messages == []
    assert not locks.status("job").locked


def test_a_command_not_found_is_127_and_the_lock_is_released(
    url: str, locks: tumbler.Locks
) -> None:
    messages: list[str] = []

    assert run(url, ["/nonexistent/command"], messages) == EX_NOT_FOUND
    assert messages == ["/nonexistent/command: command not found"]
    assert not locks.status("job").locked


def test_a_busy_lock_is_75_naming_its_holder(url: str, locks: tumbler.Locks) -> None:
    messages: list[str] = []
    with locks.lock("job"):
        assert run(url, ["true"], messages, wait=0) == EX_TEMPFAIL
    [message] = messages
    assert message.startswith("lock 'job' is held by another owner (holder: ")


def test_a_bad_name_is_refused_before_connecting(url: str) -> None:
    def connect() -> tumbler.Locks:
        pytest.fail("connected for a bad name")

    with pytest.raises(InvalidLockName):
        _supervisor.run_locked(connect, "", ["true"], complain=pytest.fail)


def test_a_run_describes_itself_by_its_program_not_its_arguments() -> None:
    from tumbler._core import MAX_HOLDER
    from tumbler._supervisor import holder_for

    assert holder_for(["/usr/bin/mysql", "-pSECRET"]).endswith(" run: mysql")
    assert "SECRET" not in holder_for(["/usr/bin/mysql", "-pSECRET"])
    assert holder_for(["./odd\nname"]).endswith(" run: odd?name")
    long = holder_for(["x" * 500])
    assert len(long) == MAX_HOLDER
    assert long.endswith("x…")
