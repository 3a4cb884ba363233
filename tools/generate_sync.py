"""Generate the blocking flavour (src/tumbler/_sync/) from the asyncio one (src/tumbler/_async/).

    python tools/generate_sync.py          # write src/tumbler/_sync/
    python tools/generate_sync.py --check  # exit 1 if src/tumbler/_sync/ is not current

The asyncio code is the one source: unasync drops ``async``/``await`` and renames each async
name to its blocking twin (the pairs live side by side in ``tumbler/_acompat.py``); ruff then
formats the result so it reads as if written by hand. CI runs ``--check``.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import unasync

ROOT = Path(__file__).resolve().parent.parent
#: (asyncio source, generated blocking twin): the library, and the contract tests
PAIRS = [
    (ROOT / "src" / "tumbler" / "_async", ROOT / "src" / "tumbler" / "_sync"),
    (
        ROOT / "src" / "tumbler" / "backends" / "_async",
        ROOT / "src" / "tumbler" / "backends" / "_sync",
    ),
    (ROOT / "tests" / "contract" / "_async", ROOT / "tests" / "contract" / "_sync"),
]

RENAMES = {
    # lock logic
    "AsyncHold": "Hold",
    "AsyncLocks": "Locks",
    "AsyncLock": "Lock",
    "AsyncRLock": "RLock",
    "AsyncSemaphore": "Semaphore",
    "AsyncReadLock": "ReadLock",
    "AsyncRWLock": "RWLock",
    "_AsyncPrimitive": "_Primitive",
    "AsyncRenewer": "Renewer",
    "AsyncClientGate": "ClientGate",
    "AsyncExitGuard": "ExitGuard",
    "AsyncHubWatch": "HubWatch",
    "_async": "_sync",
    # backends
    "AsyncScript": "Script",
    "AsyncWakeups": "Wakeups",
    "AsyncRedisWatch": "RedisWatch",
    "AsyncRedisBackend": "RedisBackend",
    "AsyncClosings": "Closings",
    "aclose": "close",
    "AsyncZooKeeperBackend": "ZooKeeperBackend",
    "kazoo_aresult": "kazoo_result",
    "arun_blocking": "run_blocking",
    # backend contract
    "AsyncBackend": "Backend",
    "AsyncWatch": "Watch",
    # seams (tumbler/_acompat.py)
    "AsyncEvent": "Event",
    "AsyncWorker": "Worker",
    "AsyncMutex": "Mutex",
    "aspawn": "spawn",
    "ajoin": "join",
    "ashield": "shield",
    "acurrent_context": "current_context",
    "acheck_cancelled": "check_cancelled",
    "acheck_loop": "check_loop",
    "acurrent_loop": "current_loop",
    "acheck_synchronizable": "check_synchronizable",
    "asleep_real": "sleep_real",
    # test helpers (tests/contract/compat.py)
    "aconnect": "connect",
    "agather": "gather",
    "abackground": "background",
    "aeventually": "eventually",
    "AsyncBackgroundCall": "BackgroundCall",
}

# Things a token rename cannot express: Awaitable[X] is X once nothing is awaited; a line
# marked "# async-only" (an asyncio marker, say) has no blocking twin.
REWRITES = [
    (re.compile(r"\bAwaitable\[([\w.]+)\]"), r"\1"),
    (re.compile(r"^.*# async-only\n", re.MULTILINE), ""),
    # redis-py keeps its asyncio client in a subpackage with the same names
    (re.compile(r"\bfrom redis\.asyncio\b"), "from redis"),
]

HEADER = (
    "# Generated from {source} by tools/generate_sync.py: do not edit.\n"
    "# Change the asyncio source and run the tool again.\n"
)


def generate(source: Path, out_dir: Path) -> list[Path]:
    """Write the blocking flavour of every module of ``source`` into out_dir/_sync."""
    work = out_dir / "_async"
    shutil.copytree(source, work, ignore=shutil.ignore_patterns("__pycache__"))
    files = sorted(str(path) for path in work.glob("*.py"))
    unasync.unasync_files(files, [unasync.Rule("/_async/", "/_sync/", RENAMES)])
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
    for source, target in PAIRS:
        with tempfile.TemporaryDirectory() as tmp:
            produced = generate(source, Path(tmp))
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
