"""A model's context limit (``max_position_embeddings``) read from its config, before any GPU hour is spent.

``tiny-qwen3`` is the locally built tiny model (its builder's default); a local folder is read with AutoConfig; a
hub name is read from the local HF cache only (no download: the check runs where the hub may be offline), and
when nothing is cached the limit is unknown and the caller says so instead of guessing.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from twinrun.models.tiny import TINY_QWEN3, build_tiny_qwen3


def _positions(config: Any) -> int | None:
    for cfg in (config, getattr(config, "text_config", None)):
        value = getattr(cfg, "max_position_embeddings", None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def max_positions(model: str) -> tuple[int | None, str]:
    """(the model's max_position_embeddings, where it was read) or (None, why it could not be read)."""
    if model == TINY_QWEN3:
        return int(inspect.signature(build_tiny_qwen3).parameters["max_positions"].default), "tiny-qwen3's builder"
    from transformers import AutoConfig

    local = Path(model).expanduser()
    try:
        if local.is_dir():
            config = AutoConfig.from_pretrained(str(local))
            where = f"{local}/config.json"
        else:
            config = AutoConfig.from_pretrained(model, local_files_only=True)
            where = f"{model}'s config in the local HF cache"
    except (OSError, ValueError) as e:
        return None, f"{model}'s config is not readable here ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
    limit = _positions(config)
    return (limit, where) if limit else (None, f"{model}'s config has no max_position_embeddings")
