"""Helpers for tests and benchmarks (no framework imports)."""
