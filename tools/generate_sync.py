"""Generate the blocking flavour of the code written for asyncio: every ``_async`` directory of
src/ and tests/ has its generated twin in the ``_sync`` directory beside it.

    python tools/generate_sync.py          # write every _sync directory
    python tools/generate_sync.py --check  # exit 1 if any _sync file is not current

The asyncio code is the one source: unasync drops ``async``/``await`` and renames each async
name to its blocking twin: ``AsyncX`` to ``X`` by convention, the few others by the table
below (the seams live side by side in ``tumbler/_acompat.py``), and a backend's own seams by
the table the backend keeps beside them (``SYNC_RENAMES``, see ``local_renames``); ruff then
formats the result so it reads as if written by hand. CI runs ``--check``.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import unasync

ROOT = Path(__file__).resolve().parent.parent
#: where asyncio sources live: every ``_async`` directory below these has its blocking twin in
#: the ``_sync`` directory beside it
SOURCE_ROOTS = [ROOT / "src", ROOT / "tests"]

#: By convention an async name's blocking twin drops the prefix: ``AsyncLock`` -> ``Lock``,
#: ``_AsyncPrimitive`` -> ``_Primitive``. These names are found in the sources.
CONVENTION = re.compile(r"\b(_?)Async([A-Z]\w*)")

#: The names the convention cannot derive that the lock layer, the kit and the test helpers
#: share: the seams of ``tumbler/_acompat.py`` and the test helpers, whose asyncio flavour is
#: marked by a leading ``a``. A backend's own are its ``SYNC_RENAMES``. A rule that no source
#: uses fails the run, so the table cannot keep names that are gone.
RENAMES = {
    "_async": "_sync",
    "aspawn": "spawn",
    "ajoin": "join",
    "ashield": "shield",
    "acurrent_context": "current_context",
    "acheck_cancelled": "check_cancelled",
    "acheck_loop": "check_loop",
    "acurrent_loop": "current_loop",
    "acheck_synchronizable": "check_synchronizable",
    "asleep_real": "sleep_real",
    "aconnect": "connect",
    "agather": "gather",
    "abackground": "background",
    "aeventually": "eventually",
}

#: the name of a backend's own table of renames (see ``local_renames``)
LOCAL_TABLE = "SYNC_RENAMES"


class BadTable(Exception):
    """A backend's table of renames that cannot be used."""


def pairs() -> list[tuple[Path, Path]]:
    """Every (asyncio source, blocking twin) directory pair of the tree."""
    found = []
    for root in SOURCE_ROOTS:
        for source in sorted(root.rglob("_async")):
            if source.is_dir() and ".venv" not in source.parts:
                found.append((source, source.with_name("_sync")))
    return found


def renames(sources: list[Path]) -> dict[str, str]:
    """The token renames for ``sources``: the convention's, then the table's."""
    text = "\n".join(path.read_text() for path in sources)
    found = {match.group(0): match.group(1) + match.group(2) for match in CONVENTION.finditer(text)}
    return {**found, **RENAMES}


def local_renames(source: Path) -> dict[str, str]:
    """The renames of one ``_async`` directory's own names: the ``SYNC_RENAMES`` dict literal
    at the top of any module beside it (in the package that holds it), where the seams it
    names are defined. Read from the source, not imported: the generator runs without the
    backends' drivers. They rename in that directory alone."""
    found: dict[str, str] = {}
    for module in sorted(source.parent.glob("*.py")):
        for node in ast.parse(module.read_text(), str(module)).body:
            if isinstance(node, ast.AnnAssign):
                target, value = node.target, node.value
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            else:
                continue
            if not isinstance(target, ast.Name) or target.id != LOCAL_TABLE:
                continue
            where = f"{module.relative_to(ROOT).as_posix()}:{node.lineno}"
            try:
                table = ast.literal_eval(value) if value is not None else None
            except ValueError:
                table = None
            if not isinstance(table, dict) or not all(
                isinstance(key, str) and isinstance(twin, str) for key, twin in table.items()
            ):
                raise BadTable(f"{where}: {LOCAL_TABLE} must be a dict literal of names to names")
            for name, twin in table.items():
                if name in RENAMES:
                    raise BadTable(f"{where}: {name} is renamed by the global table already")
                if found.get(name, twin) != twin:
                    raise BadTable(f"{where}: {name} is renamed to {found[name]} elsewhere")
            found.update(table)
    return found


def used(names: Iterable[str], sources: list[Path]) -> list[str]:
    text = "\n".join(path.read_text() for path in sources)
    return [name for name in names if re.search(rf"\b{re.escape(name)}\b", text)]


def unused_rules(found: list[tuple[Path, Path]]) -> list[str]:
    """The global rules that no asyncio source uses, and each directory's own that its own
    sources do not use."""
    sources = [path for source, _ in found for path in sorted(source.glob("*.py"))]
    unused = [name for name in RENAMES if name not in used(RENAMES, sources)]
    for source, _ in found:
        own = local_renames(source)
        mine = used(own, sorted(source.glob("*.py")))
        where = source.relative_to(ROOT).as_posix()
        unused += [f"{name} ({where})" for name in own if name not in mine]
    return unused


# Things a token rename cannot express: Awaitable[X] is X once nothing is awaited; a line
# marked "# async-only" (an asyncio marker, say) has no blocking twin.
REWRITES = [
    (re.compile(r"\bAwaitable\[([\w.]+)\]"), r"\1"),
    (re.compile(r"^.*# async-only\n", re.MULTILINE), ""),
    # drivers that keep their asyncio client in an ``asyncio`` subpackage with the same names
    (re.compile(r"\bfrom (\w+)\.asyncio\b"), r"from \1"),
]

HEADER = (
    "# Generated from {source}: do not edit.\n"
    "# Change the asyncio source and run tools/generate_sync.py again.\n"
)


def generate(source: Path, out_dir: Path, rules: dict[str, str]) -> list[Path]:
    """Write the blocking flavour of every module of ``source`` into out_dir/_sync."""
    work = out_dir / "_async"
    shutil.copytree(source, work, ignore=shutil.ignore_patterns("__pycache__"))
    files = sorted(str(path) for path in work.glob("*.py"))
    unasync.unasync_files(files, [unasync.Rule("/_async/", "/_sync/", rules)])
    produced = sorted((out_dir / "_sync").glob("*.py"))
    for path in produced:
        text = path.read_text()
        for pattern, replacement in REWRITES:
            text = pattern.sub(replacement, text)
        origin = (source / path.name).relative_to(ROOT)
        path.write_text(HEADER.format(source=origin.as_posix()) + text)
    ruff = [sys.executable, "-m", "ruff"]
    config = ["--config", str(ROOT / "pyproject.toml")]
    subprocess.run(
        [*ruff, "check", "--quiet", "--fix", "--select", "F401,I", *config, *map(str, produced)],
        check=True,
    )
    subprocess.run([*ruff, "format", "--quiet", *config, *map(str, produced)], check=True)
    return produced


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the files are not current")
    args = parser.parse_args()
    stale: list[str] = []
    found = pairs()
    sources = [path for source, _ in found for path in sorted(source.glob("*.py"))]
    try:
        unused = unused_rules(found)
    except BadTable as error:
        print(error)
        return 1
    if unused:
        print(f"rename rules that no asyncio source uses: {', '.join(unused)}; remove them")
        return 1
    rules = renames(sources)
    for source, target in found:
        with tempfile.TemporaryDirectory() as tmp:
            produced = generate(source, Path(tmp), {**rules, **local_renames(source)})
            wanted = {path.name: path.read_text() for path in produced}
            present = {path.name: path.read_text() for path in target.glob("*.py")}
        if not args.check:
            target.mkdir(exist_ok=True)
            for name in present.keys() - wanted.keys():
                (target / name).unlink()
            for name, text in wanted.items():
                (target / name).write_text(text)
            continue
        for name in sorted(wanted.keys() | present.keys()):
            if wanted.get(name) == present.get(name):
                continue
            shown = (target / name).relative_to(ROOT).as_posix()
            stale.append(shown)
            sys.stdout.writelines(
                difflib.unified_diff(
                    present.get(name, "").splitlines(True),
                    wanted.get(name, "").splitlines(True),
                    shown,
                    f"generated {name}",
                )
            )
    if stale:
        print(f"stale generated files: {', '.join(stale)}; run tools/generate_sync.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
