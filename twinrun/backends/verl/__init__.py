"""verl 0.9.1 backend: hydra overrides (compile.py), estimator/agent-loop/CPU-rollout plugin (plugin.py), train.

Nothing here imports verl, torch or ray at package import: `twinrun plan` imports `compile` with base
dependencies only, and verl imports `plugin` on `import verl` in every Ray process.
"""
