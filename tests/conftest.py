"""Shared test settings."""

from __future__ import annotations

from tumbler.testing.conformance.plugin import in_ci

# CI must fail, not skip, when something a test needs is missing.
IN_CI = in_ci()

# real servers for the backends that need one (started once per session, on loopback)
pytest_plugins = ["tests.servers.fixtures"]

# a transport left unclosed says which test made it, when the collector finds it
import tests.transports  # noqa: E402, F401
