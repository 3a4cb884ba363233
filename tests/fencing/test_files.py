"""tumbler.fencing.files on real files: a stale token's write never replaces a newer one's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tumbler.errors import ConfigurationError, InvalidArgument, StaleToken
from tumbler.fencing import files as fencing

from .races import BAD_TOKENS, race


def test_a_higher_or_equal_token_is_accepted(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    for token, data in ((3, b"a"), (3, b"b"), (7, b"c")):
        fencing.write_file(target, data, token)
    assert target.read_bytes() == b"c"
    assert fencing.fence_path(target).read_text() == "7\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["report.json", "report.json.fence"]


def test_a_lower_token_is_refused_and_the_file_unchanged(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    fencing.write_file(str(target), b"new", 5)
    with pytest.raises(StaleToken) as refused:
        fencing.write_file(target, b"late", 4)
    assert (refused.value.resource, refused.value.token, refused.value.highest) == (
        str(target),
        4,
        5,
    )
    assert target.read_bytes() == b"new"
    # no temporary file left behind
    assert sorted(path.name for path in tmp_path.iterdir()) == ["report.json", "report.json.fence"]


def test_the_files_mode_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    target.write_bytes(b"old")
    target.chmod(0o640)
    fencing.write_file(target, b"new", 1)
    assert target.stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize("token", BAD_TOKENS[:-1], ids=repr)
def test_a_bad_token_is_refused_and_changes_nothing(tmp_path: Path, token: object) -> None:
    with pytest.raises(InvalidArgument):
        fencing.write_file(tmp_path / "report.json", b"x", token)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", ["", None, 7, "."], ids=repr)
def test_a_bad_path_or_data_is_refused_and_changes_nothing(
    tmp_path: Path, path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgument):
        fencing.write_file(path, b"x", 5)
    with pytest.raises(InvalidArgument):
        fencing.write_file(tmp_path / "report.json", "text, not bytes", 5)
    assert list(tmp_path.iterdir()) == []


def test_a_fence_file_that_holds_no_token_is_not_overwritten(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    fencing.fence_path(target).write_text("garbage")
    with pytest.raises(ConfigurationError, match="fencing token"):
        fencing.write_file(target, b"x", 5)
    assert not target.exists()
    assert fencing.fence_path(target).read_text() == "garbage"


def test_a_stale_write_never_lands_after_a_newer_one(tmp_path: Path) -> None:
    for round_ in range(10):
        target = tmp_path / f"report-{round_}.json"
        outcomes = race(
            lambda token, name: fencing.write_file(name, b"%d" % token, token), str(target)
        )
        assert target.read_bytes() == b"5"
        assert outcomes[5] is None
        assert outcomes[4] is None or isinstance(outcomes[4], StaleToken)
