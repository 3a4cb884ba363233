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
