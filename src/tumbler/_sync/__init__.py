# Generated from src/tumbler/_async/__init__.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""Lock logic for one flavour: ``_async`` is the source, ``_sync`` is generated from it."""
