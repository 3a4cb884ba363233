"""``--tumbler-split-flavours``: the full run's conformance suite, each case in one flavour per
target with servers. Collected (nothing runs, no server starts) in a pytest of its own, whose
items a small plugin writes out."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

#: a check of the test tooling, which does not depend on the interpreter (.ci/run)
pytestmark = pytest.mark.tools

SUITE = Path(__file__).parents[2] / "src" / "tumbler" / "testing" / "conformance"

COLLECTOR = """
import json, os

def pytest_collection_finish(session):
    rows = []
    for item in session.items:
        params = getattr(item, "callspec", None)
        params = params.params if params is not None else {}
        target = params.get("conformance_target")
        if target is None:
            continue
        package = item.module.__name__.rsplit(".", 2)[-2]
        flavour = {"_sync": "sync", "_async": "async"}.get(package, params.get("flavour"))
        others = sorted(
            (name, index)
            for name, index in item.callspec.indices.items()
            if name not in ("conformance_target", "flavour")
        )
        rows.append([
            item.module.__name__.rsplit(".", 1)[-1], item.originalname, repr(others),
            target.name, target.needs_servers, flavour,
        ])
    with open(os.environ["COLLECTED"], "w") as out:
        json.dump(rows, out)
"""


def _collect(tmp_path: Path, *options: str) -> list[tuple[str, str, str, str, bool, str | None]]:
    (tmp_path / "collector.py").write_text(COLLECTOR)
    out = tmp_path / f"collected{len(list(tmp_path.iterdir()))}.json"
    env = {
        **os.environ,
        "COLLECTED": str(out),
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    pytest_options = ["--co", "-q", "-p", "no:cacheprovider", "-p", "collector"]
    subprocess.run(
        [sys.executable, "-m", "pytest", *pytest_options, str(SUITE), *options],
        check=True,
        env=env,
        capture_output=True,
        timeout=120,
    )
    return [tuple(row) for row in json.loads(out.read_text())]  # type: ignore[misc]


def test_each_case_runs_in_one_flavour_per_server_target_and_in_both_elsewhere(
    tmp_path: Path,
) -> None:
    every = _collect(tmp_path)
    # the second also on the targets without servers (.ci/run's tiers on the other Pythons)
    split = {
        "a": _collect(tmp_path, "--tumbler-split-flavours", "a"),
        "b": _collect(tmp_path, "--tumbler-split-flavours", "b", "--tumbler-split-serverless"),
    }
    twins: dict[tuple[str, str, str, str], set[str | None]] = defaultdict(set)
    for module, case, others, target, _servers, flavour in every:
        twins[(module, case, others, target)].add(flavour)
    paired = {key for key, flavours in twins.items() if flavours == {"sync", "async"}}
    assert paired

    kept_by_seed = []
    for seed, rows in split.items():
        assert set(rows) <= set(every)
        flavours: dict[tuple[str, str, str, str], list[str | None]] = defaultdict(list)
        for module, case, others, target, _servers, flavour in rows:
            flavours[(module, case, others, target)].append(flavour)
        needs_servers = {row[3]: row[4] for row in every}
        assert {key for key in twins if key not in flavours} == set()
        kept = {}
        for key in paired:
            if needs_servers[key[3]]:
                (kept[key],) = flavours[key]
            elif seed == "b":
                assert len(flavours[key]) == 1, key
            else:
                assert sorted(flavours[key]) == ["async", "sync"], key
        # what is not a twin (a case in one flavour, a target with no twin case) is all kept
        assert {row for row in every if (row[0], row[1], row[2], row[3]) not in paired} <= set(rows)
        # both flavours on every target with servers, and of every case across the targets
        for target in {key[3] for key in kept}:
            assert {kept[key] for key in kept if key[3] == target} == {"sync", "async"}, target
        by_case: dict[tuple[str, str], set[str]] = defaultdict(set)
        for key, flavour in kept.items():
            by_case[key[:2]].add(flavour)
        one_way = [case for case, chosen in by_case.items() if chosen != {"sync", "async"}]
        assert len(one_way) < 0.1 * len(by_case), one_way
        kept_by_seed.append(kept)
    # another seed leaves out another half
    changed = sum(1 for key in kept_by_seed[0] if kept_by_seed[0][key] != kept_by_seed[1][key])
    assert 0.3 * len(kept_by_seed[0]) < changed < 0.7 * len(kept_by_seed[0])


def test_the_suite_comes_target_by_target(tmp_path: Path) -> None:
    """A worker of pytest-xdist is given a stretch of the run in a row and starts the servers
    of every target it meets: the suite's cases come one target's after another's."""
    rows = _collect(tmp_path, "--tumbler-target", "memory", "--tumbler-target", "sqlite")
    assert [target for target, _ in itertools.groupby(row[3] for row in rows)] == [
        "memory",
        "sqlite",
    ]
