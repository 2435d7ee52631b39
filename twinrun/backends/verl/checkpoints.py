"""verl checkpoints -> HF checkpoints in the run's neutral layout (``checkpoints/step-NNNNNN``).

verl's trainer saves FSDP shards (``global_step_N/actor``) every ``trainer.save_freq`` steps and at the last step,
then calls ``trainer.checkpoint_callback_class.on_save`` on the driver (verl's documented hook). The callback here
merges the shards with verl's own model merger (`verl.model_merger.fsdp_model_merger.FSDPModelMerger`) into a
temporary folder and renames it into place (the callback class is in callback.py), so a sweep sees a checkpoint whole or not at all and loads it with
``AutoModelForCausalLM.from_pretrained`` exactly as it loads TRL's.

Precision: verl's merger casts every shard to bf16 (``FSDPModelMerger._load_and_merge_state_dicts``), so an arm
trained with fp32 master weights would be swept from bf16 copies while TRL's checkpoints hold fp32. The merger here
keeps the shards' own dtype: the FSDP actor's parameters are the master weights (``fsdp_config.model_dtype``), and
a checkpoint is saved at the precision it was trained in (docs/design.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from twinrun.core.records import atomic_write_json, publishing_dir
from twinrun.models.checkpoint_dtype import record_weights_dtype

COMPLETE = ".complete"


def _master_precision_merger(config: Any) -> Any:
    """verl's FSDPModelMerger, less its cast to bf16 (built lazily: verl is imported only here)."""
    from torch.distributed.tensor import DTensor
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger, merge_non_dtensor_shards

    class MasterPrecisionMerger(FSDPModelMerger):
        def _load_and_merge_state_dicts(self, world_size: int, total_shards: int, mesh_shape: tuple[int, ...],
                                        mesh_dim_names: tuple[str, ...]) -> dict[str, Any]:
            """verl 0.9.1's method (fsdp_model_merger.py), shard by shard, without ``.bfloat16()``."""
            import torch

            shards = [torch.load(Path(self.config.local_dir) / f"model_world_size_{world_size}_rank_{rank}.pt",
                                 map_location="cpu", weights_only=False) for rank in range(total_shards)]
            merged: dict[str, Any] = {}
            for key in sorted(shards[0]):
                parts = [s.pop(key) for s in shards]
                if isinstance(parts[0], DTensor):
                    placements = tuple(parts[0].placements)
                    if mesh_dim_names[0] in ("dp", "ddp"):  # replicated at the dp dimension: discarded, as verl
                        placements = placements[1:]
                    if len(mesh_shape) != 1 or len(placements) != 1:
                        raise NotImplementedError("FSDP + TP is not supported yet (as in verl's merger)")
                    merged[key] = self._merge_by_placement([p._local_tensor for p in parts], placements[0])
                else:
                    merged[key] = merge_non_dtensor_shards(key, parts)
            return merged

    return MasterPrecisionMerger(config)


def merge_to_hf(actor_dir: str | Path, target: str | Path, *, global_step: int, extra: dict[str, Any] | None = None
                ) -> Path:
    """Merge verl's FSDP actor checkpoint into an HF folder at ``target`` (atomically; replaces a stale one)."""
    from verl.model_merger.base_model_merger import ModelMergerConfig

    actor_dir, target = Path(actor_dir), Path(target)
    with publishing_dir(target) as tmp:
        config = ModelMergerConfig(
            operation="merge", backend="fsdp", target_dir=str(tmp), local_dir=str(actor_dir),
            hf_model_config_path=str(actor_dir / "huggingface"),
        )
        merger = _master_precision_merger(config)
        merger.merge_and_save()
        merger.cleanup()
        record_weights_dtype(tmp)  # verl writes its bf16 skeleton's dtype in config.json
        meta = {"global_step": int(global_step), "source": str(actor_dir), "merged_by": "verl.model_merger (fsdp)"}
        meta.update(extra or {})
        atomic_write_json(tmp / "twinrun_checkpoint.json", meta)
        (tmp / COMPLETE).write_text(json.dumps(meta, sort_keys=True) + "\n")
    return target


def is_complete(checkpoint: str | Path) -> bool:
    return (Path(checkpoint) / COMPLETE).is_file()
