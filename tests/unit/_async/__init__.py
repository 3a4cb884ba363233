"""Unit tests written once for asyncio; ``_sync`` is generated from them."""
