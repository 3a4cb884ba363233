"""The ZooKeeper backend's client, written once for asyncio; ``_sync`` is generated from it."""
