"""The application layer: orchestration the CLI commands call (the RL plan, ROSE rounds, parity).

It imports core, models and backends; nothing below it imports it (tests/test_layers.py)."""
