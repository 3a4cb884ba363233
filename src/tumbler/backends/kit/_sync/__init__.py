# Generated from src/tumbler/backends/kit/_async/__init__.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""The backend kit's asyncio sources; ``_sync`` is generated from them."""
