"""The docs name only what exists: every ``tumbler.…`` name they quote can be imported."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from tumbler.otel import NAMES as OTEL_NAMES

ROOT = Path(__file__).parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: quoted names that are not Python objects: entry-point groups, and the names tumbler.otel
#: gives its metrics, spans and attributes
NOT_OBJECTS = {"tumbler.harnesses"} | OTEL_NAMES

QUOTED_NAME = re.compile(r"`(tumbler(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module (found, not run: ``tumbler.__main__`` runs the CLI), or
    an attribute reached from the longest module."""
    try:
        if importlib.util.find_spec(dotted) is not None:
            return True
    except ImportError:  # a parent that is not a package
        pass
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def quoted_names(document: Path) -> set[str]:
    return set(QUOTED_NAME.findall(document.read_text())) - NOT_OBJECTS


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_name_the_docs_quote_exists(document: Path) -> None:
    assert [name for name in sorted(quoted_names(document)) if not resolves(name)] == []


def test_a_name_that_does_not_exist_is_caught() -> None:
    assert resolves("tumbler.backends.redis.common.ACL_RULES")
    assert not resolves("tumbler.backends.redis.ACL_RULES")
    assert not resolves("tumbler.no_such_module")
