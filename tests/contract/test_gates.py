"""A conformance case that needs a capability the backend does not declare is skipped, and the
skip names the capability and the backend."""

from __future__ import annotations

from pathlib import Path

from .suite import run_suite


def test_a_case_needing_process_exclusion_is_skipped_on_a_one_process_backend(
    tmp_path: Path,
) -> None:
    result = run_suite(
        tmp_path,
        *("--tumbler-url", "memory://", "-rs"),
        *("-k", "test_a_forked_child_does_not_inherit_holds"),
        timeout=100,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 skipped" in result.stdout, result.stdout
    assert "needs process_exclusion" in result.stdout, result.stdout
    assert "the memory backend does not declare" in result.stdout, result.stdout
