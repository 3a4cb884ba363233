"""The Redis backend's client, written once for asyncio; ``_sync`` is generated from it."""
