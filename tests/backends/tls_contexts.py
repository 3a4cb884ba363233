"""Counting the TLS contexts a client makes: each loads CA certificates, which costs."""

from __future__ import annotations

import ssl
from typing import Any

import pytest


class ContextsMade:
    """Counts the TLS contexts made in this process (``ssl.create_default_context``, which
    redis-py, the kit and the standard library call alike) while it is installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        made = ssl.create_default_context

        def counted(*args: Any, **options: Any) -> ssl.SSLContext:
            self.count += 1
            return made(*args, **options)

        monkeypatch.setattr(ssl, "create_default_context", counted)
