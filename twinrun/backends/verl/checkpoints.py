"""verl checkpoints -> HF checkpoints in the run's neutral layout (``checkpoints/step-NNNNNN``).

verl's trainer saves FSDP shards (``global_step_N/actor``) every ``trainer.save_freq`` steps and at the last step,
then calls ``trainer.checkpoint_callback_class.on_save`` on the driver (verl's documented hook). The callback here
merges the shards with verl's own model merger (`verl.model_merger.fsdp_model_merger.FSDPModelMerger`) into a
temporary folder and renames it into place (the callback class is in callback.py), so a sweep sees a checkpoint whole or not at all and loads it with
``AutoModelForCausalLM.from_pretrained`` exactly as it loads TRL's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from twinrun.core.records import atomic_write_json, publishing_dir

COMPLETE = ".complete"


def merge_to_hf(actor_dir: str | Path, target: str | Path, *, global_step: int, extra: dict[str, Any] | None = None
                ) -> Path:
    """Merge verl's FSDP actor checkpoint into an HF folder at ``target`` (atomically; replaces a stale one)."""
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    actor_dir, target = Path(actor_dir), Path(target)
    with publishing_dir(target) as tmp:
        config = ModelMergerConfig(
            operation="merge", backend="fsdp", target_dir=str(tmp), local_dir=str(actor_dir),
            hf_model_config_path=str(actor_dir / "huggingface"),
        )
        merger = FSDPModelMerger(config)
        merger.merge_and_save()
        merger.cleanup()
        meta = {"global_step": int(global_step), "source": str(actor_dir), "merged_by": "verl.model_merger (fsdp)"}
        meta.update(extra or {})
        atomic_write_json(tmp / "twinrun_checkpoint.json", meta)
        (tmp / COMPLETE).write_text(json.dumps(meta, sort_keys=True) + "\n")
    return target


def is_complete(checkpoint: str | Path) -> bool:
    return (Path(checkpoint) / COMPLETE).is_file()
