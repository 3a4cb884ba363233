"""What a fresh process loads: ``import tumbler`` and ``tumbler run`` load only what they need.

Each case starts a new interpreter, so that nothing this test process has already imported
hides a module that the code under test would import. How long any of it takes is measured by
bench/startup.py, never asserted here.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

import tumbler._acompat

#: loaded only by the commands that need them, never by ``import tumbler`` or ``tumbler run``
COMMAND_ONLY = ("tumbler.torture", "tumbler.demo")


def modules_after(code: str) -> set[str]:
    """The names in ``sys.modules`` of a fresh interpreter once it has run ``code``."""
    script = f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def under(modules: set[str], *packages: str) -> set[str]:
    """The modules that are one of ``packages`` or inside one."""
    return {
        module
        for module in modules
        for package in packages
        if module == package or module.startswith(package + ".")
    }


def test_import_tumbler_loads_no_cli_no_harness_and_no_asyncio() -> None:
    modules = modules_after("import tumbler")

    assert "tumbler._sync.locks" in modules  # the blocking flavour is what it loads
    assert under(modules, *COMMAND_ONLY, "tumbler.cli", "click", "rich") == set()
    # the asyncio flavour's halves of the seams wait until something asks for them
    assert under(modules, "asyncio", "tumbler.aio", "tumbler._async") == set()


def test_import_tumbler_aio_loads_no_cli_and_no_harness() -> None:
    modules = modules_after("import tumbler.aio")

    assert {"asyncio", "tumbler._async.locks"} <= modules
    assert under(modules, *COMMAND_ONLY, "tumbler.cli", "click", "rich") == set()


def test_the_asyncio_seams_keep_their_names() -> None:
    # made on first access now, so that the blocking flavour never imports asyncio
    assert tumbler._acompat.AsyncMutex is asyncio.Lock
    assert tumbler._acompat.AsyncWorker == asyncio.Task[None]
    with pytest.raises(AttributeError, match="no attribute 'AsyncNothing'"):
        _ = tumbler._acompat.AsyncNothing  # type: ignore[attr-defined]
