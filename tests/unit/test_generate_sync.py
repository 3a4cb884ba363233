"""tools/generate_sync.py's renames: the global table holds the names the lock layer, the kit
and the test helpers share; a backend keeps its own (``SYNC_RENAMES``) beside its seams, read
from the source and applied to its own ``_async`` directory alone."""

from __future__ import annotations

import importlib.util
import re
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate_sync", ROOT / "tools" / "generate_sync.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("generate_sync", module)
    spec.loader.exec_module(module)
    return module


tool = load_tool()


def uses(name: str, source: Path) -> bool:
    text = "\n".join(path.read_text() for path in source.glob("*.py"))
    return re.search(rf"\b{re.escape(name)}\b", text) is not None


def is_a_backends_own(source: Path) -> bool:
    """Whether an ``_async`` directory is a backend's (not the lock layer's, the kit's or a
    test helper's)."""
    backends = ROOT / "src" / "tumbler" / "backends"
    return source.parent.parent == backends and source.parent.name != "kit"


def test_the_global_table_holds_no_name_that_only_a_backend_uses() -> None:
    pairs = tool.pairs()
    only_backends = [
        name
        for name in tool.RENAMES
        if all(is_a_backends_own(source) for source, _ in pairs if uses(name, source))
    ]
    assert only_backends == []


def test_each_backends_own_names_are_its_own() -> None:
    pairs = tool.pairs()
    owned = {source: tool.local_renames(source) for source, _ in pairs}
    for source, names in owned.items():
        if names:
            assert is_a_backends_own(source), source
        for name in names:
            others = [other for other, _ in pairs if other != source and uses(name, other)]
            assert others == [], f"{name} of {source} is used in {others}"
    assert owned[ROOT / "src/tumbler/backends/mysql/_async"]["aopen_connection"] == (
        "open_connection"
    )
    assert owned[ROOT / "src/tumbler/_async"] == {}


def backend(tmp_path: Path, *modules: str) -> Path:
    """A backend package in ``tmp_path`` with these modules beside its ``_async`` directory."""
    package = tmp_path / "store"
    (package / "_async").mkdir(parents=True)
    (package / "_async" / "backend.py").write_text("async def go():\n    await aopen(apost)\n")
    for index, text in enumerate(modules):
        (package / f"module{index}.py").write_text(textwrap.dedent(text))
    return package / "_async"


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    monkeypatch.setattr(tool, "RENAMES", {"aglobal": "global_"})
    return tmp_path


def test_a_backends_table_is_read_from_its_source_without_importing_it(tree: Path) -> None:
    source = backend(
        tree,
        """
        import no_such_driver  # the generator runs without the backends' drivers
        SYNC_RENAMES = {"aopen": "open_"}
        """,
        """
        from typing import Final
        SYNC_RENAMES: Final = {"apost": "post"}
        """,
    )
    assert tool.local_renames(source) == {"aopen": "open_", "apost": "post"}
    assert tool.unused_rules([(source, source.with_name("_sync"))]) == ["aglobal"]


def test_a_backends_name_its_code_does_not_use_is_reported(tree: Path) -> None:
    source = backend(tree, 'SYNC_RENAMES = {"aopen": "open_", "agone": "gone"}\n')
    assert tool.unused_rules([(source, source.with_name("_sync"))]) == [
        "aglobal",
        "agone (store/_async)",
    ]


@pytest.mark.parametrize(
    ("modules", "says"),
    [
        (['SYNC_RENAMES = dict(aopen="open_")\n'], "must be a dict literal of names to names"),
        (['SYNC_RENAMES = {"aopen": 1}\n'], "must be a dict literal of names to names"),
        (["SYNC_RENAMES: dict[str, str]\n"], "must be a dict literal of names to names"),
        (['SYNC_RENAMES = {"aglobal": "other"}\n'], "aglobal is renamed by the global table"),
        (
            ['SYNC_RENAMES = {"aopen": "open_"}\n', 'SYNC_RENAMES = {"aopen": "opened"}\n'],
            "store/module1.py:1: aopen is renamed to open_ elsewhere",
        ),
    ],
    ids=["a-call", "not-a-name", "no-value", "a-global-name", "two-twins"],
)
def test_a_table_that_cannot_be_used_is_refused(tree: Path, modules: list[str], says: str) -> None:
    source = backend(tree, *modules)
    with pytest.raises(tool.BadTable, match=re.escape(says)):
        tool.local_renames(source)
