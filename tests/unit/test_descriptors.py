"""The backends are described once, by their descriptors and harnesses, and nothing else
names them.

The registry, the torture harness, the bench and the tools read ``BackendDescriptor`` and
``BackendHarness`` rather than naming a backend; these cases hold them to it, and check that
what a descriptor declares is what its backend does (for the backends that need no server; the
conformance suite runs the rest).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import tumbler
from tumbler.backends import builtin_descriptors, descriptor_for, known_schemes
from tumbler.backends.descriptor import BackendDescriptor
from tumbler.testing.harness import builtin_harnesses, harness_for

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src" / "tumbler"
#: the code that must read the descriptors rather than name a backend
READERS = [
    SOURCE / "backends" / "__init__.py",
    SOURCE / "backends" / "descriptor.py",
    *sorted((SOURCE / "torture").glob("*.py")),
    *sorted((ROOT / "tools").glob("*.py")),
    SOURCE / "testing" / "bench.py",
    SOURCE / "testing" / "harness.py",
    SOURCE / "testing" / "targets.py",
    *(ROOT / "bench" / name for name in ("bench.py", "contenders.py", "targets.py", "measure.py")),
    *(ROOT / "bench" / name for name in ("many_leases.py", "many_waiters.py")),
    *sorted((SOURCE / "testing" / "conformance").rglob("*.py")),
]
DESCRIPTORS = builtin_descriptors()
HARNESSES = builtin_harnesses()
#: the one place that may choose a backend: the default URL is the registry's to choose
CHOSEN = {("__init__.py", "DEFAULT_URL")}
#: calls whose string arguments are data, not a choice of backend: the conformance suite's
#: hostile lock names, some aimed at one store's namespace or script language, which every
#: backend must take as plain names
DATA_CALLS = {("bad_input.py", "Input")}


def test_each_scheme_belongs_to_one_backend() -> None:
    names = [descriptor.name for descriptor in DESCRIPTORS]
    assert len(set(names)) == len(names)
    schemes = [scheme for descriptor in DESCRIPTORS for scheme in descriptor.schemes]
    assert len(set(schemes)) == len(schemes)
    assert set(schemes) <= set(known_schemes())
    for descriptor in DESCRIPTORS:
        for scheme in descriptor.schemes:
            assert descriptor_for(scheme.upper()) is descriptor


def test_each_built_in_backend_has_one_harness_and_each_harness_a_backend() -> None:
    assert [harness.descriptor for harness in HARNESSES] == DESCRIPTORS
    for descriptor in DESCRIPTORS:
        harness = harness_for(descriptor)
        assert harness is not None
        assert harness.descriptor is descriptor


def test_test_target_names_are_unique_and_each_backend_has_one() -> None:
    targets = [target.name for h in HARNESSES for target in h.test_targets()]
    assert len(set(targets)) == len(targets)
    assert all(h.test_targets() for h in HARNESSES)


def test_a_descriptor_without_a_scheme_is_refused() -> None:
    capabilities = DESCRIPTORS[0].capabilities
    with pytest.raises(ValueError, match="declares no URL scheme"):
        BackendDescriptor("x", (), "x", capabilities)
    with pytest.raises(ValueError, match="not lower case"):
        BackendDescriptor("x", ("X",), "x", capabilities)


@pytest.mark.parametrize("scope", ["process", "host"])
def test_the_declared_capabilities_are_those_the_backend_reports(
    scope: str, tmp_path: Path
) -> None:
    # the backends that need no server: the conformance suite checks the others
    (harness,) = [h for h in HARNESSES if h.descriptor.capabilities.scope == scope]
    descriptor = harness.descriptor
    url = harness.test_targets()[0].start(tmp_path).fresh_url()
    with tumbler.connect(url) as locks:
        assert locks.capabilities == descriptor.capabilities


def _words(descriptors: list[BackendDescriptor]) -> re.Pattern[str]:
    words = {d.name for d in descriptors} | {s for d in descriptors for s in d.schemes}
    return re.compile(rf"\b({'|'.join(sorted(map(re.escape, words)))})\b", re.IGNORECASE)


def _code_strings_and_names(
    tree: ast.AST, data_calls: frozenset[str] = frozenset()
) -> list[tuple[int, str]]:
    """Every identifier and string constant of ``tree`` but docstrings (comments are not in
    the tree) and the arguments of calls to ``data_calls``: what the code does, not what it
    says about itself or the data it feeds a backend."""
    data = {
        id(constant)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in data_calls
        for argument in [*node.args, *(keyword.value for keyword in node.keywords)]
        for constant in ast.walk(argument)
    }
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings and id(node) not in data:
                found.append((node.lineno, node.value))
        elif isinstance(node, ast.Name):
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute):
            found.append((node.lineno, node.attr))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            module = getattr(node, "module", None) or ""
            found.extend((node.lineno, part) for part in [module, *(a.name for a in node.names)])
    return found


@pytest.mark.parametrize("path", READERS, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_reader_of_the_descriptors_names_a_backend(path: Path) -> None:
    pattern = _words(DESCRIPTORS)
    tree = ast.parse(path.read_text(), str(path))
    chosen = {
        node.value.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and (path.name, t.id) in CHOSEN for t in node.targets)
    }
    named = [
        f"{path.name}:{line}: {text!r}"
        for line, text in _code_strings_and_names(
            tree, frozenset(call for file, call in DATA_CALLS if file == path.name)
        )
        if pattern.search(text.replace("_", " ")) and line not in chosen
    ]
    assert not named, "\n".join(named)


def test_the_check_finds_a_backend_named_in_code() -> None:
    pattern = _words(DESCRIPTORS)
    tree = ast.parse('"""Docs may name sqlite."""\nURL = "sqlite://"\nimport zookeeper_thing\n')
    hits = [
        text for _, text in _code_strings_and_names(tree) if pattern.search(text.replace("_", " "))
    ]
    assert sorted(hits) == ["sqlite://", "zookeeper_thing"]


def test_a_path_isolated_url_and_a_single_host() -> None:
    from tumbler._url import parse_url
    from tumbler.backends.descriptor import one_of_hosts, under_path

    isolate = under_path("/tumbler")
    assert (
        isolate(parse_url("etcd://h:1/base?lease_ttl=3"), "t1") == "etcd://h:1/base/t1?lease_ttl=3"
    )
    assert isolate(parse_url("zookeeper://h:1"), "t2") == "zookeeper://h:1/tumbler/t2"
    single = one_of_hosts(2379)
    assert single(parse_url("etcd://h1:1,h2:2/x")) is None
    assert single(parse_url("etcd://h1/x")) == ("h1", 2379)
    assert single(parse_url("etcd:///x")) == ("localhost", 2379)
    # a URL with no host (the driver's default, e.g. a Unix socket) or servers in its options
    sql = one_of_hosts(5432, default_host=None, host_options=("host",))
    assert sql(parse_url("postgresql:///db")) is None
    assert sql(parse_url("postgresql://h/db?host=/run/postgresql")) is None
    assert sql(parse_url("postgresql://h:6543/db")) == ("h", 6543)
    assert sql(parse_url("postgresql://h1,h2/db")) is None
