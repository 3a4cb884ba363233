# Generated from tests/contract/_async/__init__.py by tools/generate_sync.py: do not edit.
# Change the asyncio source and run the tool again.
