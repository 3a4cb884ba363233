"""What a fresh process loads: ``import tumbler`` and ``tumbler run`` load only what they need.

Each case starts a new interpreter, so that nothing this test process has already imported
hides a module that the code under test would import. How long any of it takes is measured by
bench/startup.py, never asserted here.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

import tumbler._acompat
from tests.processes import run_python
from tumbler.cli import cli

#: loaded only by the commands that need them, never by ``import tumbler`` or ``tumbler run``
COMMAND_ONLY = ("tumbler.torture", "tumbler.demo", "tumbler.demo_http")


def modules_after(code: str) -> set[str]:
    """The names in ``sys.modules`` of a fresh interpreter once it has run ``code``."""
    script = f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"
    result = run_python(script)
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


def test_import_tumbler_loads_only_the_package() -> None:
    """Each public name's module is imported at the name's first use."""
    assert under(modules_after("import tumbler"), "tumbler") == {"tumbler"}


def test_the_blocking_api_loads_no_cli_no_harness_no_asyncio_and_no_logging() -> None:
    modules = modules_after(
        "import tumbler\nwith tumbler.connect('memory://startup') as locks:\n"
        "    with locks.lock('x'):\n        pass"
    )

    assert "tumbler._sync.client" in modules  # the blocking flavour is what it loads
    assert under(modules, *COMMAND_ONLY, "tumbler.cli", "click", "rich") == set()
    # the asyncio flavour's halves of the seams wait until something asks for them
    assert under(modules, "asyncio", "tumbler.aio", "tumbler._async") == set()
    # the loggers import the logging package at their first message, and a client with no
    # observers never imports the events
    assert under(modules, "logging", "tumbler.observe") == set()
    # a timedelta is looked for where one must be, not imported to look for
    assert "datetime" not in modules


def test_import_tumbler_aio_loads_no_cli_and_no_harness() -> None:
    modules = modules_after("import tumbler.aio")

    assert {"asyncio", "tumbler._async.client"} <= modules
    assert under(modules, *COMMAND_ONLY, "tumbler.cli", "click", "rich") == set()
    assert under(modules, "tumbler._sync") == set()  # nor the blocking flavour


def test_tumbler_run_imports_neither_the_torture_harness_nor_the_demo(tmp_path: Path) -> None:
    argv = ["run", "--url", f"sqlite://{(tmp_path / 'locks.db').as_posix()}", "job", "--"]
    argv += [sys.executable, "-c", "pass"]
    # what the console script does, then a look at what it loaded
    modules = modules_after(
        f"from tumbler.cli import main\nstatus = main({argv!r})\nassert status == 0, status"
    )

    assert {"click", "sqlite3", "tumbler.backends.sqlite"} <= modules  # it did run, locked
    assert "tumbler._supervisor" in modules
    assert under(modules, *COMMAND_ONLY) == set()
    # a command that runs without a hitch logs nothing, and opens one backend's package
    assert under(modules, "logging") == set()
    backends = {m.split(".")[2] for m in under(modules, "tumbler.backends") if m.count(".") >= 2}
    assert backends == {"sqlite", "kit", "contract", "descriptor"}


def test_the_supervisor_loads_neither_the_cli_nor_click_nor_rich() -> None:
    modules = modules_after("import tumbler._supervisor")

    assert under(modules, *COMMAND_ONLY, "tumbler.cli", "click", "rich") == set()


@pytest.mark.parametrize("argv", [["--help"], ["status"], ["run", "--help"]])
def test_commands_other_than_run_leave_the_supervisor_unloaded(
    tmp_path: Path, argv: list[str]
) -> None:
    url = f"sqlite://{(tmp_path / 'locks.db').as_posix()}"
    modules = modules_after(
        f"import os\nos.environ['TUMBLER_URL'] = {url!r}\n"
        f"from tumbler.cli import main\nstatus = main({argv!r})\nassert status == 0, status"
    )

    assert "tumbler.cli" in modules
    assert "tumbler._supervisor" not in modules


def test_help_lists_every_command_with_its_short_help() -> None:
    context = click.Context(cli, info_name="tumbler")
    names = cli.list_commands(context)
    assert names == ["demo", "init", "release", "run", "status", "torture"]
    # torture's is there although its module is imported only when its command is looked up
    openings = {}
    for name in names:
        command = cli.get_command(context, name)
        assert command is not None, name
        openings[name] = command.get_short_help_str(limit=1000)[:30]
    assert openings["torture"].startswith("Prove mutual exclusion")

    result = subprocess.run(
        [sys.executable, "-m", "tumbler.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "100"},
    )

    assert result.returncode == 0, result.stderr
    listing = result.stdout.partition("Commands:")[2]
    for name, opening in openings.items():
        assert f"  {name} " in listing, listing
        assert opening in listing, listing


def test_the_lazily_loaded_torture_command_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tumbler.cli", "torture", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert "Usage: tumbler torture [OPTIONS]" in result.stdout
    assert "--faults" in result.stdout


def test_the_asyncio_seams_keep_their_names() -> None:
    # made on first access now, so that the blocking flavour never imports asyncio
    assert tumbler._acompat.AsyncMutex is asyncio.Lock
    assert tumbler._acompat.AsyncWorker == asyncio.Task[None]
    with pytest.raises(AttributeError, match="no attribute 'AsyncNothing'"):
        _ = tumbler._acompat.AsyncNothing  # type: ignore[attr-defined]
