"""What both SFT backends do with a framework's checkpoint: export its HF weights into the run's neutral layout, and
carry the last round's optimizer state into the next (moved out of sft_plan.py, which plans the training)."""

from __future__ import annotations

from typing import Any

from twinrun.core.errors import TwinrunError

_NOT_HF = ("optimizer.pt", "scheduler.pt", "training_args.bin", "trainer_state.json")


def export_hf_checkpoint(src: Any, dst: Any, tokenizer: Any) -> Any:
    """Copy a framework's HF-format weights into ``dst`` (``checkpoints/step-NNNNNN``) atomically, with the
    tokenizer, leaving optimizer/RNG state behind. Loadable with ``AutoModelForCausalLM.from_pretrained``; its
    config.json's ``dtype`` is the saved tensors' (models/checkpoint_dtype.py)."""
    import shutil
    from pathlib import Path

    from twinrun.core.records import publishing_dir

    src, dst = Path(src), Path(dst)
    if not (src / "config.json").is_file():
        raise TwinrunError(f"checkpoint: {src} has no config.json (fix: the framework did not save HF weights)")
    with publishing_dir(dst) as tmp:
        for f in src.iterdir():
            if f.is_file() and f.name not in _NOT_HF and not f.name.startswith("rng_state"):
                shutil.copy2(f, tmp / f.name)
        tokenizer.save_pretrained(tmp)
        from twinrun.models.checkpoint_dtype import record_weights_dtype

        record_weights_dtype(tmp)  # verl's huggingface folder says bfloat16 beside fp32 weights
    return dst


def carry_optimizer_state(current: dict[str, Any], previous: dict[str, Any], *, where: str = "optimizer") -> dict:
    """An optimizer state dict that continues ``previous`` (the last round's AdamW: moments ``exp_avg`` /
    ``exp_avg_sq`` and per-parameter ``step`` counts) under ``current``'s hyperparameters (the param groups of the
    optimizer just built: this round's learning rate, schedule bookkeeping and weight decay; a plain
    ``load_state_dict(previous)`` would also restore the last round's final, decayed learning rate).

    Both are ``torch.optim.Optimizer.state_dict()`` results; parameters match by position, so the model and the
    grouping must be the same (checked: one-line error naming the mismatch)."""
    cur_groups, prev_groups = current["param_groups"], previous["param_groups"]
    if [len(g["params"]) for g in cur_groups] != [len(g["params"]) for g in prev_groups]:
        raise TwinrunError(
            f"{where}: the previous round's optimizer has parameter groups of sizes "
            f"{[len(g['params']) for g in prev_groups]}, this round's {[len(g['params']) for g in cur_groups]} "
            "(fix: the same model and sft settings in every round)"
        )
    groups = [{**cur, "params": list(prev["params"])} for cur, prev in zip(cur_groups, prev_groups, strict=True)]
    return {"state": previous["state"], "param_groups": groups}
