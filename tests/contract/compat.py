"""The conformance suite's test helpers, for the project's other tests."""

from tumbler.testing.conformance.compat import (
    PATIENCE,
    AsyncBackgroundCall,
    BackgroundCall,
    abackground,
    aeventually,
    agather,
    background,
    eventually,
    gather,
)

__all__ = [
    "PATIENCE",
    "AsyncBackgroundCall",
    "BackgroundCall",
    "abackground",
    "aeventually",
    "agather",
    "background",
    "eventually",
    "gather",
]
