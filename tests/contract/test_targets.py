"""Which cases of the conformance suite run on which target: a case that does not depend on
the backend (the lock layer's refusals, a control run without a lock) runs on one target of
the run that has what it requires, and a target that differs from another only by its
connection runs only the cases that exercise the connection."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

import tumbler
from tumbler.testing.conformance.bad_input import no_backend_call

from .suite import run_suite


def collected(tmp_path: Path, *names: str) -> dict[str, set[str]]:
    """The conformance cases pytest collects on the targets ``names``: for each case, the
    targets it runs on."""
    result = run_suite(
        tmp_path,
        "--collect-only",
        *(option for name in names for option in ("--tumbler-target", name)),
        timeout=100,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    targets: dict[str, set[str]] = defaultdict(set)
    for line in result.stdout.splitlines():
        found = re.fullmatch(r".*::(test_\w+)\[(.*)\]", line)
        if found:
            case, parameters = found.groups()
            # the longest name that begins the parameters ("redis-tls-acl", not "redis")
            target = max(
                (name for name in names if f"{parameters}-".startswith(f"{name}-")), key=len
            )
            targets[case].add(target)
    return targets


def test_refusals_run_on_one_target_and_variants_run_only_the_connection_cases(
    tmp_path: Path,
) -> None:
    cases = collected(tmp_path, "redis", "redis-tls-acl", "memory")
    # the lock layer's refusals: on the target that needs no server only
    assert cases["test_bad_input_is_refused_and_leaves_nothing_behind"] == {"memory"}
    assert cases["test_a_bad_reason_is_refused_and_releases_nothing"] == {"memory"}
    # data the store keeps: on each backend's plain target, not on its connection variant
    assert cases["test_valid_names_are_data"] == {"memory", "redis"}
    # the connection: on the variant too
    assert cases["test_acquire_gives_a_hold_with_a_token"] == {"memory", "redis", "redis-tls-acl"}
    assert cases["test_renew_all_returns_within_its_timeout_when_the_server_stalls"] == {
        "memory",
        "redis",
        "redis-tls-acl",
    }
    # a case of one target that needs what the serverless one lacks (locks across processes):
    # on a target that has it, not skipped on the first
    assert cases["test_without_the_lock_the_same_workers_lose_updates"] == {"redis"}


def test_refusals_run_on_the_only_target_given(tmp_path: Path) -> None:
    cases = collected(tmp_path, "redis")
    assert cases["test_bad_input_is_refused_and_leaves_nothing_behind"] == {"redis"}


def test_a_call_that_reaches_the_backend_is_caught() -> None:
    with tumbler.connect("memory://") as locks:
        with pytest.raises(AssertionError, match="reached the backend: inspect"):  # noqa: SIM117
            with no_backend_call(locks):
                locks.status("asked")
        # the client has its backend back
        assert locks.status("asked").holders == ()
