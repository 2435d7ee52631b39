"""verl's checkpoint hook (``trainer.checkpoint_callback_class``): each save becomes ``checkpoints/step-NNNNNN``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

from twinrun.backends.verl.checkpoints import merge_to_hf
from twinrun.backends.verl.names import RUN_DIR_KEY
from twinrun.core.records import RunPaths


class MergeToHFCallback(CheckpointCallback):
    """Called by verl's trainer on the driver after each save: merge the FSDP shards into an HF checkpoint."""

    def __init__(self, config: Any = None):
        super().__init__(config=config)
        run_dir = config.trainer.get(RUN_DIR_KEY) if config is not None else None
        if not run_dir:
            raise ValueError(f"MergeToHFCallback: trainer.{RUN_DIR_KEY} is not set (fix: train.py sets it)")
        self.paths = RunPaths(Path(run_dir))

    def on_save(self, trainer: Any, global_step: int, checkpoint_dir: str, async_save: bool = False,
                **kwargs: Any) -> None:
        if async_save:
            raise ValueError("MergeToHFCallback: async checkpoint saves are not supported (fix: async_save=false)")
        merge_to_hf(Path(checkpoint_dir) / "actor", self.paths.checkpoint(int(global_step)),
                    global_step=int(global_step))
