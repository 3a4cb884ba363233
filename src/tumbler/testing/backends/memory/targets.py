"""The memory backend's test target: a new store per test, in the test process."""

from __future__ import annotations

import uuid
from pathlib import Path

from tumbler.testing.targets import TestTarget


class _Stores:
    def __init__(self, directory: Path) -> None:
        self._prefix = uuid.uuid4().hex

    def fresh_url(self) -> str:
        return f"memory://{self._prefix}-{uuid.uuid4().hex}"

    def close(self) -> None:
        """Stores go when their last client closes."""


TARGETS = (TestTarget("memory", _Stores),)
