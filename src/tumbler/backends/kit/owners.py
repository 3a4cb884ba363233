"""How a store names an owner."""

from __future__ import annotations

import hashlib

__all__ = ["owner_hash"]


def owner_hash(owner: str) -> str:
    """The owner as a store keeps it and as its wake-ups name it: the SHA-1 of the owner id,
    in hex, so that reading the store (``tumbler status``, a curious operator) gives nobody
    an owner id to release or renew another's grant with."""
    return hashlib.sha1(owner.encode()).hexdigest()
