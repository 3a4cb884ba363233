"""Clients of a fresh in-process store, in both flavours (``aconnect`` is the asyncio twin of
``connect`` in the generated tests)."""

from __future__ import annotations

import uuid

import tumbler
import tumbler.aio


def fresh_url() -> str:
    """A store no other test uses."""
    return f"memory://unit-{uuid.uuid4().hex}"


def connect(url: str) -> tumbler.Locks:
    return tumbler.connect(url)


async def aconnect(url: str) -> tumbler.aio.AsyncLocks:
    return await tumbler.aio.connect(url)
