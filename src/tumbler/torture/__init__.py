"""The fault-injection harness: ``tumbler torture`` (see docs/torture.md)."""
