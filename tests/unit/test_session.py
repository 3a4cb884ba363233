"""What tests/conftest.py does to every test session."""

from __future__ import annotations

import gc
import weakref

from tests import conftest


def test_what_collection_made_is_out_of_the_garbage_collectors_way() -> None:
    """Frozen (gc.freeze): each full collection went through it again, holding every thread
    of the worker, its cases' clients with them."""
    assert gc.get_freeze_count() > 10_000


def test_what_a_case_thaws_is_frozen_again_after_it() -> None:
    """mypy's API thaws everything (``gc.unfreeze``) when it is done."""
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    conftest.pytest_runtest_logfinish()
    assert gc.get_freeze_count() > 10_000


def test_the_collectors_thresholds_a_case_changes_are_put_back_after_it() -> None:
    """mypy's API makes the young generation 200,000 objects, and does not put it back."""
    gc.set_threshold(200_000, 30, 30)
    conftest.pytest_runtest_logfinish()
    assert gc.get_threshold() == conftest.COLLECTOR_THRESHOLDS
    assert gc.get_threshold()[0] < 10_000


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_what_a_case_leaves_alive_is_frozen_after_it_and_its_garbage_collected() -> None:
    """A collection in a case walks only what that case made."""
    before = gc.get_freeze_count()
    kept = [_Node() for _ in range(10_000)]
    dropped = _Node()
    freed = weakref.finalize(dropped, lambda: None)
    del dropped
    conftest.pytest_runtest_logfinish()
    assert not freed.alive
    assert gc.get_freeze_count() >= before + len(kept)
