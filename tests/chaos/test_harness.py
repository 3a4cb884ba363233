"""How a round goes on: which fault it injects next, and when it stops (no servers)."""

from __future__ import annotations

from tumbler.torture.harness import next_fault


def test_past_its_seconds_a_round_injects_again_the_kinds_that_have_not_hit() -> None:
    """A round whose fault never bit proves nothing: once its seconds are over it goes on
    with the kinds that have not hit what they aimed at, three futile tries per kind at most.
    (It used to stop as soon as it had injected each kind once, hit or not.)"""
    kinds = ["net-cut", "net-drop"]
    during = [next_fault(kinds, {"net-cut"}, n, overtime=False, futile=0) for n in range(3)]
    assert during == ["net-cut", "net-drop", "net-cut"]
    assert next_fault(kinds, {"net-cut"}, 3, overtime=True, futile=5) == "net-drop"
    assert next_fault(kinds, {"net-cut"}, 4, overtime=True, futile=6) is None
    assert next_fault(kinds, {"net-cut", "net-drop"}, 3, overtime=True, futile=0) is None
    assert next_fault(["minority"], set(), 1, overtime=True, futile=1) == "minority"
    assert next_fault([], set(), 0, overtime=False, futile=0) is None
