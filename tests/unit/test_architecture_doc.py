"""docs/architecture.md names every room of the house: every module and package directly under
``src/tumbler``, every backend package and every backend's harness. A room added without a line
there fails here."""

from __future__ import annotations

from pathlib import Path

import tumbler

PACKAGE = Path(tumbler.__file__).resolve().parent
DOC = PACKAGE.parent.parent / "docs" / "architecture.md"


def rooms() -> list[str]:
    """The dotted names the page must show."""
    names = ["tumbler"]
    for path in sorted(PACKAGE.iterdir()):
        if path.name.startswith("__") or path.name == "py.typed":
            continue
        if path.suffix == ".py" or (path.is_dir() and (path / "__init__.py").exists()):
            names.append(f"tumbler.{path.stem}")
    for group in ("backends", "testing/backends"):
        for path in sorted((PACKAGE / group).iterdir()):
            if (path / "__init__.py").exists() and path.name != "kit":
                names.append(path.name)
    return names


def unnamed(text: str) -> list[str]:
    return [name for name in rooms() if name not in text]


def test_the_page_names_every_room() -> None:
    missing = unnamed(DOC.read_text())
    assert missing == [], f"docs/architecture.md does not name {missing}"


def test_a_room_the_page_does_not_name_is_found() -> None:
    text = DOC.read_text().replace("tumbler._supervisor", "the supervisor")
    assert unnamed(text) == ["tumbler._supervisor"]
