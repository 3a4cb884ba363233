"""examples/fencing.py and the README's fencing snippet run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src"


def run(arguments: list[str], cwd: Path) -> str:
    finished = subprocess.run(
        [sys.executable, *arguments],
        capture_output=True,
        text=True,
        cwd=cwd,
        # no user's cache dir: tumbler.connect() without a URL takes $TUMBLER_URL
        env={"PYTHONPATH": str(SOURCE), "PATH": "/usr/bin:/bin", "TUMBLER_URL": "memory://"},
        timeout=60,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    return finished.stdout


def test_the_example_refuses_the_paused_holders_late_write(tmp_path: Path) -> None:
    output = run([str(ROOT / "examples" / "fencing.py"), str(tmp_path)], tmp_path)
    assert "second worker: holds it with token 2, debited 10" in output
    assert "is refused: 'account:7' refused fencing token 1 (it has accepted 2)" in output
    assert "ends in LockLost" in output
    assert "account 7: balance 90, last debited by the second worker" in output


def readme_snippet() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Fencing tokens") :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    return match.group(1)


def test_the_readme_snippet_runs_and_debits_once(tmp_path: Path) -> None:
    snippet = readme_snippet()
    (tmp_path / "snippet.py").write_text(
        snippet + "print(db.execute('SELECT balance FROM accounts').fetchone()[0])\n"
    )
    assert run(["snippet.py"], tmp_path) == "90\n"
