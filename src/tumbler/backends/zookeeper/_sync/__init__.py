# Generated from src/tumbler/backends/zookeeper/_async/__init__.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""The ZooKeeper backend's client, written once for asyncio; ``_sync`` is generated from it."""
