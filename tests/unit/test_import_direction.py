"""Imports point one way: CLI (-> supervisor) -> public API -> locks -> backend contract <- backends
(-> kit).

Read from the source tree's own import statements (``ast``), so that an import that points the
wrong way fails here rather than in a cycle found at run time:

- no module imports the CLI (``tumbler.cli``), the top of the house: it is started as a command
  (or as ``python -m tumbler``, whose ``__main__`` is all it imports), and it finds ``tumbler
  torture`` by name;
- only the CLI imports the process supervisor behind ``tumbler run`` (``tumbler._supervisor``),
  which imports neither click nor rich, nor the harness, the demo or the backends' kit, so that
  it can be imported without them;
- the core (``tumbler/_core.py``) imports nothing of the project but its errors;
- nothing imports ``tumbler.fencing`` (checks at the user's resource, for any backend), and it
  imports nothing of the project but the errors;
- the lock layer (everything of tumbler outside ``backends/``, ``testing/`` and ``torture/``)
  never imports the backends' kit;
- a backend (everything under ``tumbler.backends``: what runs in production) never imports the
  lock layer (``tumbler._async``, ``tumbler._sync``), the CLI, the test harness
  (``tumbler.testing``, where each backend's launchers, test targets, bench and torture
  deployments live) or the torture harness; the harness imports the backends, never the other
  way round;
- no backend package has an import circle: its descriptor (``__init__``) imports none of its
  own modules (it names them), and its configuration (``common``) imports neither flavour
  (the opener, in a module of its own, does).

Importing a backend, and every module of it, loads nothing of the harnesses: checked in a
fresh interpreter, since an import made at run time (``importlib``) is not in the source's
import statements.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tumbler

PACKAGE_ROOT = Path(tumbler.__file__).resolve().parent
SOURCE_ROOT = PACKAGE_ROOT.parent


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> Iterator[str]:
    """Every project module ``path`` imports, absolute; ``from X import y`` yields X and X.y,
    since y may be a submodule."""
    package = module_name(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join([*base, node.module] if node.module else base)
            else:
                origin = node.module or ""
            yield origin
            yield from (f"{origin}.{alias.name}" for alias in node.names)


def within(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def sources() -> list[Path]:
    return sorted(PACKAGE_ROOT.rglob("*.py"))


SUPERVISOR = "tumbler._supervisor"


def wrong_way(path: Path) -> list[str]:
    """The imports of ``path`` that point the wrong way."""
    me = module_name(path)
    imported = set(imported_modules(path))
    project = {m for m in imported if within(m, "tumbler")}
    wrong = {m for m in project if within(m, "tumbler.cli")} if me != "tumbler.__main__" else set()
    if me != "tumbler.cli":
        wrong |= {m for m in project if within(m, SUPERVISOR)}
    if me == SUPERVISOR:
        beside = ("click", "rich", "tumbler.torture", "tumbler.demo", "tumbler.demo_http")
        wrong |= {m for m in imported if within(m, *beside)}
    if not within(me, "tumbler.fencing"):
        wrong |= {m for m in project if within(m, "tumbler.fencing")}
    else:
        wrong |= {m for m in project if not within(m, "tumbler.errors", "tumbler.fencing")}
    if me == "tumbler._core":
        wrong |= {m for m in project if not within(m, "tumbler.errors")}
    elif within(me, "tumbler.backends"):
        forbidden = ("tumbler._async", "tumbler._sync", "tumbler.testing", "tumbler.torture")
        wrong |= {m for m in project if within(m, *forbidden)}
    elif not within(me, "tumbler.testing", "tumbler.torture"):
        wrong |= {m for m in project if within(m, "tumbler.backends.kit")}
    return sorted(wrong)


@pytest.mark.parametrize("path", sources(), ids=lambda p: p.relative_to(PACKAGE_ROOT).as_posix())
def test_imports_point_one_way(path: Path) -> None:
    assert wrong_way(path) == []


def test_the_rules_catch_each_wrong_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the rules must fail on what they forbid, or the test above passes on anything
    root = tmp_path / "tumbler"
    cases = {
        "_core.py": (
            "from .backends import contract\n",
            ["tumbler.backends", "tumbler.backends.contract"],
        ),
        "_async/client.py": (
            "from ..backends.kit import HubWatch\n",
            ["tumbler.backends.kit", "tumbler.backends.kit.HubWatch"],
        ),
        "backends/x/backend.py": (
            "from ..._sync.watch import HubWatch\n",
            ["tumbler._sync.watch", "tumbler._sync.watch.HubWatch"],
        ),
        "backends/x/__init__.py": ("import tumbler.cli\n", ["tumbler.cli"]),
        "backends/x/common.py": ("from ... import torture\n", ["tumbler.torture"]),
        "backends/x/torture.py": (
            "from ...torture import harness\n",
            ["tumbler.torture", "tumbler.torture.harness"],
        ),
        "backends/descriptor.py": (
            "from ..testing.bench import StoreBench\n",
            ["tumbler.testing.bench", "tumbler.testing.bench.StoreBench"],
        ),
        "backends/x/server.py": ("import tumbler.testing.servers\n", ["tumbler.testing.servers"]),
        "testing/backends/x/torture.py": (
            "from tumbler.torture.backends import BackendSpec\nfrom tumbler.backends.x import y\n",
            [],
        ),
        "torture/cli.py": (
            "from tumbler.cli import exit_code_for\n",
            ["tumbler.cli", "tumbler.cli.exit_code_for"],
        ),
        "_async/hold.py": ("from .. import _supervisor\n", ["tumbler._supervisor"]),
        "_supervisor.py": (
            "import click\nfrom .cli import main\nfrom .backends.kit import state\n",
            [
                "click",
                "tumbler.backends.kit",
                "tumbler.backends.kit.state",
                "tumbler.cli",
                "tumbler.cli.main",
            ],
        ),
        "cli.py": ("from . import _supervisor\nimport rich\n", []),
        "_sync/gate.py": (
            "from ..fencing import sqlite\n",
            ["tumbler.fencing", "tumbler.fencing.sqlite"],
        ),
        "fencing/redis.py": (
            "import redis\nfrom ..errors import StaleToken\nfrom .._core import x\n",
            ["tumbler._core", "tumbler._core.x"],
        ),
    }
    monkeypatch.setitem(globals(), "SOURCE_ROOT", tmp_path)
    for relative, (text, expected) in cases.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        assert wrong_way(path) == expected, relative


def backend_packages() -> list[Path]:
    """Each package under ``tumbler/backends`` (each backend's, and the kit)."""
    root = PACKAGE_ROOT / "backends"
    return sorted(p.parent for p in root.glob("*/__init__.py"))


def circles(package: Path) -> list[list[str]]:
    """The import circles among the modules of ``package``: each a list of two or more modules
    that import each other round, reading every import statement (those only for type
    checking and those inside functions too: each is an arrow the package's layout draws)."""
    modules = {module_name(path): path for path in sorted(package.rglob("*.py"))}
    arrows = {
        me: sorted({m for m in imported_modules(path) if m in modules and m != me})
        for me, path in modules.items()
    }
    # Tarjan's strongly connected components
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(me: str) -> None:
        index[me] = low[me] = len(index)
        stack.append(me)
        for other in arrows[me]:
            if other not in index:
                visit(other)
                low[me] = min(low[me], low[other])
            elif other in stack:
                low[me] = min(low[me], index[other])
        if low[me] == index[me]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == me:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for me in modules:
        if me not in index:
            visit(me)
    return sorted(found)


@pytest.mark.parametrize("package", backend_packages(), ids=lambda p: p.name)
def test_no_import_circle_inside_a_backend_package(package: Path) -> None:
    assert circles(package) == []


def test_the_circle_check_finds_a_circle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a backend's layout before its opener had a module of its own: the configuration opened
    # the backend, whose flavours import the configuration back, and the descriptor checked
    # the opener's types
    package = tmp_path / "tumbler" / "backends" / "x"
    files = {
        "__init__.py": "if TYPE_CHECKING:\n    from . import common as _opener\n",
        "common.py": "def open_sync():\n    from ._sync.backend import XBackend\n",
        "_sync/__init__.py": "",
        "_sync/backend.py": "from ..common import parse_config\nfrom .. import CAPABILITIES\n",
        "opener.py": "from . import opener as _this\n",  # itself: no circle
    }
    for relative, text in files.items():
        (package / relative).parent.mkdir(parents=True, exist_ok=True)
        (package / relative).write_text(text)
    monkeypatch.setitem(globals(), "SOURCE_ROOT", tmp_path)
    assert circles(package) == [
        ["tumbler.backends.x", "tumbler.backends.x._sync.backend", "tumbler.backends.x.common"]
    ]


#: run in a fresh interpreter: import every module under tumbler.backends (those whose driver is
#: not installed excepted) and report what of the harnesses that loaded
IMPORT_EVERY_BACKEND_MODULE = """
    import importlib, json, pkgutil, sys
    import tumbler.backends

    skipped = []
    for module in pkgutil.walk_packages(tumbler.backends.__path__, "tumbler.backends."):
        try:
            importlib.import_module(module.name)
        except ModuleNotFoundError as error:
            if (error.name or "tumbler").partition(".")[0] == "tumbler":
                raise
            skipped.append(module.name)  # a driver this installation lacks
    for descriptor in tumbler.backends.builtin_descriptors():
        importlib.import_module(descriptor.opener)
    harness = ("tumbler.testing", "tumbler.torture")
    loaded = sorted(m for m in sys.modules if m in harness or m.startswith(harness[0] + ".")
                    or m.startswith(harness[1] + "."))
    print(json.dumps({"loaded": loaded, "skipped": skipped}))
"""


def run_fresh(program: str) -> Any:
    """What ``program`` (indented Python that prints JSON last) prints, run in a fresh
    interpreter at the root of the tree."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(program)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).parents[2],
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_importing_every_backend_module_loads_nothing_of_the_harnesses() -> None:
    report = run_fresh(IMPORT_EVERY_BACKEND_MODULE)
    assert report["loaded"] == [], report


#: what the servers' launchers bring in; a test run that starts no server needs none of it
DRIVERS = ("redis", "kazoo", "psycopg", "psycopg_pool", "pymysql", "aiomysql", "httpx", "h11")

LOAD_THE_SUITE_S_PLUGINS = """
    import json, sys
    import tests.conftest, tests.servers.fixtures, tumbler.testing.conformance.plugin
    import tumbler.testing.fixtures

    print(json.dumps(sorted({m.partition(".")[0] for m in sys.modules})))
"""


def test_the_suite_s_plugins_load_no_driver_before_a_server_starts() -> None:
    """The quick tier (unit tests, memory and SQLite) runs where no driver is installed."""
    loaded = run_fresh(LOAD_THE_SUITE_S_PLUGINS)
    assert [driver for driver in DRIVERS if driver in loaded] == []
