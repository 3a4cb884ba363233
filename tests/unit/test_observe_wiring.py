"""How observers are given and what they load: ``connect(observers=...)`` refuses what is not a
list of observers before it opens anything; ``import tumbler`` loads no OpenTelemetry, even
with observers; ``tumbler.otel`` without ``opentelemetry-api`` is a ``MissingDependency``
that says what to install; only ``tumbler.otel`` imports OpenTelemetry, and the hooks module
imports nothing of the lock layer.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tumbler
import tumbler.aio
from tests.unit.test_import_direction import PACKAGE_ROOT, imported_modules, within
from tumbler.errors import InvalidArgument
from tumbler.observe import Observer


def run_fresh(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter with this tree's tumbler first on its path."""
    source = str(PACKAGE_ROOT.parent)
    return subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {source!r})\n" + code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("observers", "said"),
    [
        (Observer(), "observers must be a list"),
        ("observer", "observers must be a list"),
        (42, "observers must be a list"),
        ([Observer(), print], "not builtin_function_or_method"),
        ([None], "not NoneType"),
    ],
)
def test_connect_refuses_what_is_not_observers_before_opening_anything(
    tmp_path: Path, observers: object, said: str
) -> None:
    path = tmp_path / "locks.db"
    with pytest.raises(InvalidArgument, match=said):
        tumbler.connect(f"sqlite:///{path}", observers=observers)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=said):
        asyncio.run(tumbler.aio.connect(f"sqlite:///{path}", observers=observers))  # type: ignore[arg-type]
    assert not path.exists()


def test_observers_may_be_any_iterable_of_observers() -> None:
    class Counting(Observer):
        def __init__(self) -> None:
            self.grants = 0

        def acquire_granted(self, event: object) -> None:
            self.grants += 1

    counting = Counting()
    with tumbler.connect("memory://wiring", observers=(o for o in [counting])) as locks:
        locks.lock("a").acquire()
    assert counting.grants == 1


def test_import_tumbler_loads_no_opentelemetry_even_with_observers() -> None:
    result = run_fresh(
        textwrap.dedent(
            """
            import tumbler, tumbler.aio, tumbler.observe

            class Noting(tumbler.observe.Observer):
                def acquire_granted(self, event):
                    pass

            with tumbler.connect("memory://fresh", observers=[Noting()]) as locks:
                with locks.lock("a"):
                    pass
            loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
            assert loaded == [], loaded
            assert "tumbler.otel" not in sys.modules
            """
        )
    )
    assert result.returncode == 0, result.stderr


def test_tumbler_otel_without_opentelemetry_says_what_to_install() -> None:
    result = run_fresh(
        textwrap.dedent(
            """
            sys.modules["opentelemetry"] = None  # as if opentelemetry-api were not installed
            import tumbler
            try:
                from tumbler.otel import OpenTelemetryObserver
            except tumbler.MissingDependency as error:
                assert isinstance(error, ImportError)
                print(error)
            else:
                raise AssertionError("tumbler.otel imported without opentelemetry")
            """
        )
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "tumbler.otel needs the 'opentelemetry-api' package: pip install 'tumbler-locks[otel]'"
    )


def test_the_observer_refuses_a_lock_names_setting_it_cannot_use() -> None:
    from tumbler.otel import OpenTelemetryObserver

    with pytest.raises(InvalidArgument, match="lock_names must be True, False or a function"):
        OpenTelemetryObserver(lock_names="yes")  # type: ignore[arg-type]


def test_only_tumbler_otel_imports_opentelemetry_and_nothing_imports_it() -> None:
    otel = PACKAGE_ROOT / "otel.py"
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        imported = set(imported_modules(path))
        assert not {m for m in imported if within(m, "tumbler.otel")}, path
        if path != otel:
            assert not {m for m in imported if within(m, "opentelemetry")}, path
    assert {m for m in imported_modules(otel) if within(m, "opentelemetry")}


@pytest.mark.parametrize("module", ["observe.py", "_observing.py"])
def test_the_hooks_modules_import_only_the_clock_the_errors_and_the_loggers(module: str) -> None:
    imported = set(imported_modules(PACKAGE_ROOT / module))
    # ``from . import observe`` names the package as well as the module
    project = {m for m in imported if within(m, "tumbler") and m != "tumbler"}
    allowed = ("tumbler._clock", "tumbler.errors", "tumbler._logs", "tumbler.observe")
    assert {m for m in project if not within(m, *allowed)} == set()
