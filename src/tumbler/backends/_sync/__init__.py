# Generated from src/tumbler/backends/_async/__init__.py by tools/generate_sync.py: do not edit.
# Change the asyncio source and run the tool again.
"""Backends\x27 asyncio flavour: the source of the generated ``_sync`` twins."""
