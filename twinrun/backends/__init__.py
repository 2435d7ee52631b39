"""Thin framework adapters. Each imports its framework lazily; see registry.py."""
