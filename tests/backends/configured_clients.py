"""What the cases of ``connect`` given a configured client (``test_*_clients.py``) share."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import pytest

import tumbler
import tumbler.aio
from tumbler import InvalidArgument

FLAVOURS = ["sync", "asyncio"]


def refused(flavour: str, client: object, **options: object) -> InvalidArgument:
    """The refusal of ``connect`` (the flavour's) given ``client`` and ``options``; the case
    fails if it connects or raises anything else."""
    with pytest.raises(InvalidArgument) as refusal:
        if flavour == "sync":
            tumbler.connect(client, **options)
        else:
            asyncio.run(tumbler.aio.connect(client, **options))
    return refusal.value


def lock_through(
    flavour: str,
    client: Any,
    *,
    look: Callable[[Any], dict[str, Any]] | None = None,
    then: Callable[[], Any] | None = None,
    around: Callable[[], Any] | None = None,
    **options: object,
) -> dict[str, Any]:
    """Connect tumbler (the flavour's) with ``client``, take and release the lock ``stock``,
    close tumbler's client: what was seen (``token``, ``holders``, ``config``, and what
    ``look(locks)`` adds while it is open). ``then()`` runs after the close, in the same
    event loop (awaited in asyncio), its result seen as ``then``: the application's client
    still serving. ``around()``: a context manager (async in asyncio) the whole runs in, such
    as a pool opened."""

    def blocking() -> dict[str, Any]:
        with around() if around is not None else contextlib.nullcontext():
            with tumbler.connect(client, **options) as locks:
                with locks.lock("stock") as hold:
                    seen = {"token": hold.token, "holders": len(locks.status("stock").holders)}
                seen["config"] = locks._backend.config
                seen.update(look(locks) if look is not None else {})
            seen["then"] = then() if then is not None else None
        return seen

    async def in_asyncio() -> dict[str, Any]:
        async with around() if around is not None else contextlib.nullcontext():
            locks = await tumbler.aio.connect(client, **options)
            async with locks:
                async with locks.lock("stock") as hold:
                    state = await locks.status("stock")
                    seen = {"token": hold.token, "holders": len(state.holders)}
                seen["config"] = locks._backend.config
                seen.update(look(locks) if look is not None else {})
            seen["then"] = await then() if then is not None else None
        return seen

    return blocking() if flavour == "sync" else asyncio.run(in_asyncio())
