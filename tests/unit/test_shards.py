"""``--shard SEED:INDEX/COUNT``: .ci/run's quick tiers deal the cases out over the other
Pythons, each case to exactly one of them, another deal with every commit."""

from __future__ import annotations

import pytest

from tests.conftest import _parse_shard, shard_of

IDS = [f"tests/unit/test_x.py::test_{n}[{flavour}]" for n in range(600) for flavour in "ab"]


def test_every_case_falls_in_exactly_one_shard_and_the_shards_are_about_even() -> None:
    shards = [[nodeid for nodeid in IDS if shard_of("c0ffee", nodeid, 3) == i] for i in range(3)]
    assert sorted(nodeid for shard in shards for nodeid in shard) == sorted(IDS)
    # 1,200 cases over 3: each within 10% of 400 (binomial sd about 16)
    assert all(360 <= len(shard) <= 440 for shard in shards), [len(s) for s in shards]


def test_another_seed_deals_the_cases_again() -> None:
    first = {nodeid: shard_of("c0ffee", nodeid, 3) for nodeid in IDS}
    second = {nodeid: shard_of("decade", nodeid, 3) for nodeid in IDS}
    moved = sum(first[nodeid] != second[nodeid] for nodeid in IDS)
    # two independent deals agree on about a third of the cases
    assert len(IDS) * 0.55 <= moved <= len(IDS) * 0.78


@pytest.mark.parametrize(
    "value", ["3/3", "c0ffee:3/3", "c0ffee:-1/3", "c0ffee:a/3", "c0ffee:1", ":0/3", "c0ffee:0/0"]
)
def test_a_shard_that_names_no_shard_is_refused(value: str) -> None:
    with pytest.raises(pytest.UsageError, match="SEED:INDEX/COUNT"):
        _parse_shard(value)


def test_a_shard_is_read_as_seed_index_and_count() -> None:
    assert _parse_shard("a:b:1/3") == ("a:b", 1, 3)
