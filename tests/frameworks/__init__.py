"""Tests of the framework recipes in examples/ against the real frameworks."""
