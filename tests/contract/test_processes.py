"""Kept for tests/backends/test_sqlite.py, which starts the conformance suite's worker; the
cases themselves are in tumbler.testing.conformance.test_processes."""

from tumbler.testing.conformance.test_processes import WORKER

__all__ = ["WORKER"]
