"""Shared test settings."""

from __future__ import annotations

import os

# CI must fail, not skip, when something a test needs is missing.
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# real servers for the backends that need one (started once per session, on loopback)
pytest_plugins = ["tests.servers.fixtures"]
