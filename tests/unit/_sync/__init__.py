# Generated from tests/unit/_async/__init__.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""Unit tests written once for asyncio; ``_sync`` is generated from them."""
