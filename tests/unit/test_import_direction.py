"""Imports point one way: CLI (-> supervisor) -> public API -> locks -> backend contract <- backends
(-> kit).

Read from the source tree's own import statements (``ast``), so that an import that points the
wrong way fails here rather than in a cycle found at run time:

- no module imports the CLI (``tumbler.cli``), the top of the house: it is started as a command,
  and it finds ``tumbler torture`` by name;
- only the CLI imports the process supervisor behind ``tumbler run`` (``tumbler._supervisor``),
  which imports neither click nor rich, nor the harness, the demo or the backends' kit, so that
  it can be imported without them;
- the core (``tumbler/_core.py``) imports nothing of the project but its errors;
- the lock layer (everything of tumbler outside ``backends/``, ``testing/`` and ``torture/``)
  never imports the backends' kit;
- a backend never imports the lock layer (``tumbler._async``, ``tumbler._sync``), the CLI or
  the torture harness, except a backend package's ``torture.py``, which describes that
  backend's deployments to the harness and so may import ``tumbler.torture``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

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
    wrong = {m for m in project if within(m, "tumbler.cli")}
    if me != "tumbler.cli":
        wrong |= {m for m in project if within(m, SUPERVISOR)}
    if me == SUPERVISOR:
        beside = ("click", "rich", "tumbler.torture", "tumbler.demo", "tumbler.demo_http")
        wrong |= {m for m in imported if within(m, *beside)}
    if me == "tumbler._core":
        wrong |= {m for m in project if not within(m, "tumbler.errors")}
    elif within(me, "tumbler.backends"):
        forbidden = ["tumbler._async", "tumbler._sync", "tumbler.torture"]
        if path.name == "torture.py" and me.count(".") == 3:  # tumbler.backends.<name>.torture
            forbidden.remove("tumbler.torture")
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
            "from ...torture import harness\nfrom ... import _async\n",
            ["tumbler._async"],
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
    }
    monkeypatch.setitem(globals(), "SOURCE_ROOT", tmp_path)
    for relative, (text, expected) in cases.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        assert wrong_way(path) == expected, relative
