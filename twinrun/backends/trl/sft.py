"""Trajectory SFT under TRL 1.16 (`SFTTrainer`, assistant-only loss) from the shared plan.

TRL gets the already tokenized sequences and their loss masks from :mod:`twinrun.core.sft.data` as
``input_ids`` + ``assistant_masks`` columns: SFTTrainer skips its own tokenization for processed data and turns
``assistant_masks`` into labels (-100 elsewhere), the mechanism its ``assistant_only_loss`` drives (the flag
itself is refused for pre-tokenized rows, so it stays off; the column applies regardless). Tokenizing in core
keeps TRL and verl on identical tokens, and honours per-turn ``loss: false`` (AgentGym's canned acknowledgement),
which TRL's template-driven mask cannot express (it trains every assistant turn, including the empty think
block TRL's Qwen3 training template puts inside the generation span).

The order is verl's: ``DistributedSampler(shuffle=True, seed=0)`` with ``set_epoch`` (transformers calls it each
epoch), over rows the spec seed already permuted. A recording collator notes which sequences and tokens each
optimizer step saw, so metrics.jsonl shows the realised order next to loss, lr and grad norm.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from twinrun.core.records import JsonlWriter, provenance, read_jsonl
from twinrun.core.sft.data import SFTStepMetrics
from twinrun.backends.sft_plan import (
    VERL_SAMPLER_SEED,
    PreparedSFT,
    carry_optimizer_state,
    export_hf_checkpoint,
    prepare_sft,
    sft_run_dir,
)


def train_sft(spec: Any, out: str | Path, *, resume: bool = False, cache_dir: str | Path | None = None,
              prepared: PreparedSFT | None = None, optimizer_from: str | Path | None = None) -> dict[str, Any]:
    """Fine-tune ``spec.sft.model`` (or the curator model) on ``spec.sft.data``; write ``out``'s metrics.jsonl and
    ``checkpoints/step-NNNNNN/`` (one per epoch, HF format). Returns a summary dict whose ``optimizer_state`` is
    the framework checkpoint holding the last AdamW state.

    ``optimizer_from``: a previous run's ``optimizer_state`` (ROSE's last round): AdamW starts from its moments
    and step counts (:func:`twinrun.backends.sft_plan.carry_optimizer_state`) instead of from zero."""
    out = Path(out)
    prepared = prepared or prepare_sft(spec, cache_dir=cache_dir, output_dir=str(out / "trl"))
    with sft_run_dir(out, prepared, "trl", resume=resume) as paths:  # core's run lifecycle, locked until done
        return _train_sft(spec, out, paths, prepared, resume=resume, optimizer_from=optimizer_from)


def _train_sft(spec: Any, out: Path, paths: Any, prepared: PreparedSFT, *, resume: bool,
               optimizer_from: str | Path | None) -> dict[str, Any]:
    import torch
    import transformers
    import trl
    from datasets import Dataset
    from torch.utils.data import DistributedSampler
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import SFTConfig, SFTTrainer
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    work = out / "trl"
    tok = prepared.tokenizer
    plan = prepared.plan
    examples = prepared.dataset.examples
    cfg_kwargs = dict(plan.native["trl"], output_dir=str(work))
    config = SFTConfig(**cfg_kwargs)

    ds = Dataset.from_dict({
        "id": [e.id for e in examples],
        "input_ids": [e.input_ids for e in examples],
        "assistant_masks": [e.loss_mask for e in examples],
    })

    class RecordingCollator(DataCollatorForLanguageModeling):
        """TRL's own collator, noting each micro-batch's sequences and tokens for the step record."""

        seen: list[tuple[list[str], int, int]] = []

        def torch_call(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
            out_b = super().torch_call(batch)
            labels = out_b["labels"]
            RecordingCollator.seen.append(
                ([b["id"] for b in batch], sum(len(b["input_ids"]) for b in batch), int((labels != -100).sum()))
            )
            return out_b

    RecordingCollator.seen = []
    collator = RecordingCollator(pad_token_id=tok.pad_token_id)

    class SharedOrderSFTTrainer(SFTTrainer):
        def _get_train_sampler(self, train_dataset: Any = None) -> Any:
            data = train_dataset if train_dataset is not None else self.train_dataset
            return DistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=VERL_SAMPLER_SEED,
                                      drop_last=True)

        def create_optimizer(self, model: Any = None) -> Any:
            fresh = self.optimizer is None
            opt = super().create_optimizer(model)
            if fresh and optimizer_from is not None:
                # the previous round's AdamW state; a resumed run of this round then loads its own on top
                previous = torch.load(Path(optimizer_from) / "optimizer.pt", map_location="cpu", weights_only=True)
                opt.load_state_dict(carry_optimizer_state(opt.state_dict(), previous,
                                                          where=f"optimizer_from {optimizer_from}"))
            return opt

    grad_accum = plan.schedule.batch_size // plan.schedule.micro_batch_size
    steps_per_epoch = plan.schedule.steps_per_epoch
    done_steps = {int(r["step"]) for r in read_jsonl(paths.metrics)} if resume else set()
    prov = provenance(spec_hash=spec.spec_hash(), backend="trl", framework_version=trl.__version__, seed=spec.seed)

    class NeutralRecords(TrainerCallback):
        """metrics.jsonl rows (neutral schema) and per-epoch HF checkpoints under checkpoints/step-N."""

        def __init__(self) -> None:
            self.t0 = time.monotonic()
            self.writer = JsonlWriter(paths.metrics)
            self.base_step = 0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            # collations are counted from here (a resumed run starts at its checkpoint's step)
            self.base_step = state.global_step

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
            logs = logs or {}
            if "loss" not in logs or state.global_step in done_steps:
                return
            step = state.global_step
            # index, not "the last ga": the dataloader fetches one batch ahead of the step being trained
            first = (step - self.base_step - 1) * grad_accum
            micro = RecordingCollator.seen[first:first + grad_accum]
            self.writer.write(SFTStepMetrics(
                step=step, epoch=(step - 1) // steps_per_epoch, backend="trl",
                loss=float(logs["loss"]), lr=_float(logs.get("learning_rate")), grad_norm=_float(logs.get("grad_norm")),
                sequences=sum(len(m[0]) for m in micro), tokens=sum(m[1] for m in micro),
                trained_tokens=sum(m[2] for m in micro), example_ids=[i for m in micro for i in m[0]],
                wall_s=time.monotonic() - self.t0, provenance=prov,
            ))
            done_steps.add(step)

        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            src = work / f"checkpoint-{state.global_step}"
            export_hf_checkpoint(src, paths.checkpoint(state.global_step), tok)

        def on_train_end(self, *a: Any, **kw: Any) -> None:
            self.writer.close()

    torch.manual_seed(spec.seed)
    model = AutoModelForCausalLM.from_pretrained(prepared.model_path, dtype=torch.float32)
    trainer = SharedOrderSFTTrainer(
        model=model, args=config, train_dataset=ds, processing_class=tok, data_collator=collator,
        callbacks=[NeutralRecords()],
    )
    last = _last_trl_checkpoint(work) if resume else None
    trainer.train(resume_from_checkpoint=str(last) if last else None)
    final = _last_trl_checkpoint(work)
    return {
        "optimizer_state": str(final) if final else None,
        "backend": "trl",
        "framework_version": trl.__version__,
        "transformers_version": transformers.__version__,
        "steps": plan.schedule.total_steps,
        "checkpoints": sorted(str(p) for p in paths.checkpoints.glob("step-*")),
        "metrics": str(paths.metrics),
    }


def _float(v: Any) -> float | None:
    return None if v is None else float(v)


def _last_trl_checkpoint(work: Path) -> Path | None:
    cks = sorted(work.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    return cks[-1] if cks else None
