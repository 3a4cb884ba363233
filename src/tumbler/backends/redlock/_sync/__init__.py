# Generated from src/tumbler/backends/redlock/_async/__init__.py: do not edit.
# Change the asyncio source and run tools/generate_sync.py again.
