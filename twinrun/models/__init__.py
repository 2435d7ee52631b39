"""The models layer: HF-only pieces both backends use (the tiny Qwen3 curator, model resolution, the warm start).

Imports core only; never a backend or anything above. Importing this package is free (no torch, no
transformers); :mod:`twinrun.models.warmstart` is imported on use."""

from twinrun.models.tiny import TINY_QWEN3, build_tiny_qwen3, local_or_hub, resolve_model, trl_qwen3_template

__all__ = ["TINY_QWEN3", "build_tiny_qwen3", "local_or_hub", "resolve_model", "trl_qwen3_template"]
