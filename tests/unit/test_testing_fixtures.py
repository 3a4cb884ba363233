"""tumbler's pytest fixtures for users' tests (``tumbler.testing.fixtures``), run as a user's
project runs them: a pytest of its own, finding them by tumbler's entry point."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

README = Path(__file__).parents[2] / "README.md"


def _readme_example() -> str:
    """The test the README's "Testing code that uses locks" shows."""
    section = README.read_text().split("## Testing code that uses locks", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None, "the section has a Python example"
    return found.group(1)


def test_the_readme_s_example_runs_as_written(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_example=_readme_example())
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1)


def test_each_test_has_a_backend_and_a_clock_of_its_own(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_own="""
        seen = []

        def test_first(tumbler_locks, tumbler_clock, tumbler_url):
            seen.append(tumbler_url)
            assert tumbler_locks.lock("shared-name").acquire()
            tumbler_clock.advance(100)
            assert tumbler_clock.now() == 100

        def test_second(tumbler_locks, tumbler_clock, tumbler_url):
            assert tumbler_url not in seen
            assert tumbler_clock.now() == 0
            assert tumbler_locks.lock("shared-name").acquire(timeout=0)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2)


def test_the_clients_are_closed_after_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_closed="""
        import pytest
        import tumbler

        made = []

        def test_use(tumbler_connect):
            made.append(tumbler_connect())
            assert made[0].lock("x").acquire()

        def test_closed_after():
            with pytest.raises(tumbler.ClientClosed):
                made[0].lock("x").acquire(timeout=0)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2)
