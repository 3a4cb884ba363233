"""A hand-off names its waiter by the hash the store keys the waiter's entry by: the release
writes the stored owner into the wake-up, and the waiter's client finds the grant by hashing
its own owner id. One function says both (``kit.owners.owner_hash``)."""

from __future__ import annotations

import pytest

from tumbler.backends.contract import GrantRequest, WakeHub
from tumbler.backends.kit import handoffs as handoffs_module
from tumbler.backends.kit.handoffs import HandOffs
from tumbler.backends.kit.owners import owner_hash


def _request(owner: str) -> GrantRequest:
    return GrantRequest("stock", owner, False, 1, False, 30.0, "test")


def test_a_hand_off_is_found_by_the_owner_hash_the_store_keeps() -> None:
    handed = HandOffs(lambda: 100.0)
    # what a release sends: the stored owner of the waiter's entry, as the store keeps it
    handed.deliver(f"=7,100000000,0:{owner_hash('b')} stock", WakeHub())
    grant = handed.grant(_request("b"))
    assert grant is not None
    assert grant.token == 7


def test_the_hand_offs_hash_owners_with_the_stores_function(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Were the stores to hash owners otherwise, hand-offs would follow: there is no second
    hash of an owner to fall out of step with the first."""
    assert not hasattr(handoffs_module, "owner_tag")
    monkeypatch.setattr(handoffs_module, "owner_hash", lambda owner: f"other:{owner}")
    handed = HandOffs(lambda: 100.0)
    handed.deliver("=7,100000000,0:other:b stock", WakeHub())
    assert handed.grant(_request("b")) is not None


@pytest.mark.parametrize(
    ("terms", "left"),
    [
        ("7,99000000,500000", 30.0 - 0.5),  # the lease asked for, begun 0.5 s ago
        ("7,99000000,500000,2000", 2.0 - 0.5),  # a provisional lease of 2 s
        ("7,99000000,500000,60000", 30.0 - 0.5),  # never more than the lease asked for
    ],
    ids=["asked", "provisional", "longer"],
)
def test_a_hand_off_leaves_what_is_left_of_the_lease_it_says(terms: str, left: float) -> None:
    handed = HandOffs(lambda: 100.0)
    handed.deliver(f"={terms}:{owner_hash('b')} stock", WakeHub())
    grant = handed.grant(_request("b"))
    assert grant is not None
    assert grant.granted_ttl == pytest.approx(left)


def test_a_hand_off_whose_lease_ran_out_on_this_clock_is_asked_for() -> None:
    handed = HandOffs(lambda: 100.0)
    handed.deliver(f"=7,98000000,500000,1000:{owner_hash('b')} stock", WakeHub())
    assert handed.grant(_request("b")) is None


@pytest.mark.parametrize("terms", ["7,99000000", "7,99000000,0,1000,5", "7,x,0"])
def test_terms_it_cannot_read_leave_the_waiter_to_ask(terms: str) -> None:
    hub = WakeHub()
    woken: list[str] = []
    hub.subscribe("stock", lambda: woken.append("b"), owner_hash("b"))
    handed = HandOffs(lambda: 100.0)
    handed.deliver(f"={terms}:{owner_hash('b')} stock", hub)
    assert handed.grant(_request("b")) is None
    assert woken == ["b"]  # woken all the same: its try asks the server
