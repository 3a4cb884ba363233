"""How ``connect`` opens the Redis backend: its descriptor's ``opener``.

Kept apart from :mod:`.common`, which both flavours import, so that nothing the flavours
import imports them back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._url import BackendURL
from ..kit import astart_or_close, start_or_close
from ._async.backend import AsyncRedisBackend
from ._sync.backend import RedisBackend
from .common import check_tls_files, parse_config

if TYPE_CHECKING:
    from ..descriptor import BackendOpener

__all__ = ["open_async", "open_sync"]


def open_sync(url: BackendURL) -> RedisBackend:
    config = parse_config(url)
    check_tls_files(url)
    backend = RedisBackend(config)
    return start_or_close(backend)


async def open_async(url: BackendURL) -> AsyncRedisBackend:
    config = parse_config(url)
    check_tls_files(url)
    backend = AsyncRedisBackend(config)
    return await astart_or_close(backend)


if TYPE_CHECKING:
    # mypy checks here that this module has what tumbler.connect calls
    from . import opener as _this

    _checked: BackendOpener = _this
