"""Lock logic for one flavour: ``_async`` is the source, ``_sync`` is generated from it."""
