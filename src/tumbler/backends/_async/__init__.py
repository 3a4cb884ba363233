"""Backends\x27 asyncio flavour: the source of the generated ``_sync`` twins."""
