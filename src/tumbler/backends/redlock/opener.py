"""How ``connect`` opens the Redlock backend: its descriptor's ``opener``.

Kept apart from :mod:`.common`, which both flavours import, so that nothing the flavours
import imports them back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._url import BackendURL
from ..kit import astart_or_close, start_or_close
from ._async.backend import AsyncRedlockBackend
from ._sync.backend import RedlockBackend
from .common import parse_config

if TYPE_CHECKING:
    from ..descriptor import BackendOpener

__all__ = ["open_async", "open_sync"]


def open_sync(url: BackendURL) -> RedlockBackend:
    config = parse_config(url)
    return start_or_close(RedlockBackend(config))


async def open_async(url: BackendURL) -> AsyncRedlockBackend:
    config = parse_config(url)
    return await astart_or_close(AsyncRedlockBackend(config))


if TYPE_CHECKING:
    # mypy checks here that this module has what tumbler.connect calls
    from . import opener as _this

    _checked: BackendOpener = _this
