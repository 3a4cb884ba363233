# Generated from src/tumbler/backends/postgresql/_async/__init__.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
"""The PostgreSQL backend written for asyncio: the source of ``../_sync``."""
