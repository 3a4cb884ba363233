"""A backend written outside tumbler plugs in and passes the conformance suite.

The example is ``tests/outside/tumbler-jsonfile``: a distribution of its own, installed
(not editable) by ``scripts/test`` after tumbler, as a third party's package would be, and
found by its ``tumbler.backends`` entry point. These tests show that the public backend
surface (contract, descriptor, kit, errors, testing) is enough to write one, that the registry
finds it, and that it passes the whole suite from an installed tumbler. In CI ($CI true) a
missing or stale install fails them; elsewhere they are skipped, saying how to install it.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import importlib.metadata
import re
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

import tumbler
import tumbler.aio
from tumbler.backends import builtin_descriptors, descriptor_for
from tumbler.testing.conformance.plugin import in_ci
from tumbler.testing.harness import builtin_harnesses, harness_for

from .suite import run_suite

#: the example's distribution, and its package's sources
EXAMPLE = Path(__file__).resolve().parents[1] / "outside" / "tumbler-jsonfile"
SOURCES = EXAMPLE / "src" / "tumbler_jsonfile"
INSTALL = f"python -m pip install {EXAMPLE.relative_to(EXAMPLE.parents[2])}"

#: the parts of tumbler a backend may import: the documented backend surface
PUBLIC = (
    "tumbler.backends.contract",
    "tumbler.backends.descriptor",
    "tumbler.backends.kit",
    "tumbler.errors",
    "tumbler.testing",
)

#: the suite's cases that pass on the example (measured: 300 passed, 4 skipped; the skips
#: are a capability gate, network_exclusion, and a case for URLs with a password): a floor,
#: so that a run that silently collects fewer cases fails
PASSED_FLOOR = 290


def _missing(reason: str) -> NoReturn:
    if in_ci():
        pytest.fail(f"{reason} (failing rather than skipping because $CI is set)", pytrace=False)
    pytest.skip(f"{reason}: {INSTALL}")


def _installed_example() -> ModuleType:
    """The installed example package, the same as its sources here, or fail/skip."""
    try:
        package = importlib.import_module("tumbler_jsonfile")
    except ModuleNotFoundError:
        _missing("the example backend tumbler-jsonfile is not installed")
    installed = Path(package.__file__ or "").parent
    if installed == SOURCES:
        _missing("tumbler_jsonfile is imported from its sources, not installed")
    stale = sorted(
        source.name
        for source in SOURCES.glob("*.py")
        if not (installed / source.name).is_file()
        or (installed / source.name).read_bytes() != source.read_bytes()
    )
    if stale:
        _missing(f"the installed tumbler-jsonfile differs from its sources in {stale}")
    return package


def test_the_scheme_resolves_through_the_entry_point(tmp_path: Path) -> None:
    package = _installed_example()
    (point,) = importlib.metadata.entry_points(group="tumbler.backends", name="jsonfile")
    assert point.value == "tumbler_jsonfile:DESCRIPTOR"
    assert descriptor_for("jsonfile") is package.DESCRIPTOR
    assert "jsonfile" not in {s for d in builtin_descriptors() for s in d.schemes}

    url = f"jsonfile://{tmp_path / 'store.json'}"
    with tumbler.connect(url) as locks, locks.lock("job", ttl=5) as hold:
        state = locks.status("job")
        assert [holder.token for holder in state.holders] == [hold.token]

    async def in_asyncio() -> int:
        async with await tumbler.aio.connect(url) as locks, locks.lock("job") as hold:
            return hold.token

    # the second grant of the name, from the asyncio flavour (kit.AsyncAdapter)
    assert asyncio.run(in_asyncio()) == hold.token + 1


def test_the_harness_resolves_through_its_entry_point() -> None:
    package = _installed_example()
    (point,) = importlib.metadata.entry_points(group="tumbler.harnesses", name="jsonfile")
    assert point.value == "tumbler_jsonfile.testing:HARNESS"
    harness = harness_for(descriptor_for("jsonfile"))
    assert harness is importlib.import_module("tumbler_jsonfile.testing").HARNESS
    assert harness.descriptor is package.DESCRIPTOR
    assert "jsonfile" not in {harness.name for harness in builtin_harnesses()}


def test_the_suite_runs_on_the_harness_s_targets(tmp_path: Path) -> None:
    _installed_example()
    result = run_suite(tmp_path, "--collect-only", "--tumbler-target", "jsonfile", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    cases = [line for line in result.stdout.splitlines() if "::" in line]
    assert len(cases) >= PASSED_FLOOR, result.stdout
    assert all("[jsonfile" in case or "jsonfile-" in case for case in cases), cases[:5]


def _imported_modules(tree: ast.AST) -> list[str]:
    modules: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.append(node.module)
    return modules


def test_the_example_imports_only_the_public_backend_surface() -> None:
    sources = sorted(SOURCES.glob("*.py"))
    assert sources, f"no sources in {SOURCES}"
    private = {
        f"{source.name}: {module}"
        for source in sources
        for module in _imported_modules(ast.parse(source.read_text(), str(source)))
        if (module == "tumbler" or module.startswith("tumbler."))
        and not any(module == p or module.startswith(p + ".") for p in PUBLIC)
    }
    assert not private, f"the example imports tumbler's internals: {sorted(private)}"


def test_the_example_is_typed_strictly(tmp_path: Path) -> None:
    # the example's pyproject.toml says what to check: its package, strict
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy")],
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"no issues found in [1-9]\d* source files", result.stdout), result.stdout


@pytest.mark.slow
@pytest.mark.spread
@pytest.mark.timeout(900)
def test_the_example_passes_the_conformance_suite(tmp_path: Path) -> None:
    _installed_example()
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    started = time.monotonic()
    result = run_suite(
        tmp_path, "-rs", "--tumbler-url", f"jsonfile://{store / 'store.json'}", timeout=840
    )
    took = time.monotonic() - started
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    summary = result.stdout.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None, output
    assert int(passed.group(1)) >= PASSED_FLOOR, f"{summary} (in {took:.0f} s)\n{output}"
    for word in ("failed", "error"):
        assert word not in summary, output
