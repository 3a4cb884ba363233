"""The backend kit's asyncio sources; ``_sync`` is generated from them."""
