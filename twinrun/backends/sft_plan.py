"""One SFT spec -> TRL's and verl's knobs, the shared data order, and the per-step token counts.

`twinrun sft SPEC --plan` prints this. Both backends get their native settings from here (never from their own
defaults), so the things the issue asks to be equal are equal by construction and shown side by side:

- **data**: the same tokenized sequences and loss masks (:func:`twinrun.core.sft.data.build_sft_dataset`);
- **order**: verl's SFT trainer always draws batches with ``DistributedSampler(shuffle=True, seed=0)`` and
  ``set_epoch(epoch)``; the TRL backend installs that same sampler, and the spec seed permutes the rows first;
- **schedule**: cosine with warmup, the warmup as an integer step count computed here once (transformers rounds
  a ratio up, verl down) and the same formula in both (``min_lr_ratio=0``, half a cycle, 0-indexed steps);
- **batch**: ``batch_size`` sequences per optimizer step, ``micro_batch_size`` per forward; the incomplete last
  batch of an epoch is dropped by both (verl hard-codes ``drop_last``);
- **length**: sequences are cut to ``max_length`` before either framework sees them.

The per-step token counts are computed from the order and the tokenized data, so they are the counts both
frameworks realise (they are not re-derived from each framework: neither exposes its batches before training);
each backend logs its realised per-step tokens in ``metrics.jsonl`` and the integration test compares them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from twinrun.backends.compiled import KnobSetting
# what both SFT backends do with their checkpoints lives in sft_checkpoints.py; its callers name it here
from twinrun.backends.sft_checkpoints import carry_optimizer_state, export_hf_checkpoint  # noqa: F401
from twinrun.core.errors import TwinrunError
from twinrun.core.spec import ExperimentSpec

SFT_BACKENDS = ("trl", "verl")
# verl.trainer.sft_trainer builds DistributedSampler(shuffle=True) without a seed argument: torch's default, 0.
VERL_SAMPLER_SEED = 0


@dataclass(frozen=True)
class SFTSchedule:
    examples: int
    batch_size: int
    micro_batch_size: int
    epochs: int
    steps_per_epoch: int
    total_steps: int
    warmup_steps: int
    dropped_per_epoch: int  # examples of the incomplete last batch, not seen in that epoch


def sft_schedule(spec: ExperimentSpec, examples: int) -> SFTSchedule:
    s = spec.sft
    steps_per_epoch = examples // s.batch_size
    if steps_per_epoch == 0:
        raise TwinrunError(
            f"sft.batch_size: {s.batch_size} exceeds the {examples} training sequences, so an epoch has no full "
            f"batch (fix: sft.batch_size <= {examples}, or more data)"
        )
    total = steps_per_epoch * s.epochs
    return SFTSchedule(
        examples=examples,
        batch_size=s.batch_size,
        micro_batch_size=s.micro_batch_size or s.batch_size,
        epochs=s.epochs,
        steps_per_epoch=steps_per_epoch,
        total_steps=total,
        warmup_steps=math.ceil(s.warmup_ratio * total),
        dropped_per_epoch=examples - steps_per_epoch * s.batch_size,
    )


def scheduled_lr(spec: ExperimentSpec, sched: SFTSchedule, step: int) -> float:
    """The learning rate the 1-based optimizer ``step`` uses: both frameworks' LambdaLR formula (0-indexed
    steps, linear warmup from 0, cosine over the remaining steps to 0 with half a cycle)."""
    k = step - 1
    base, w, total = spec.sft.lr, sched.warmup_steps, sched.total_steps
    if k < w:
        return base * k / max(1, w)
    if spec.sft.schedule == "constant":
        return base
    if spec.sft.schedule == "linear":
        return base * max(0.0, (total - k) / max(1, total - w))
    progress = (k - w) / max(1, total - w)
    return base * max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def _check_schedule(spec: ExperimentSpec, backend: str) -> None:
    if backend == "verl" and spec.sft.schedule == "linear":
        raise TwinrunError(
            "sft.schedule: 'linear' has no verl SFT equivalent (verl 0.9.1 offers constant and cosine; "
            "fix: cosine or constant)"
        )


def _trl_bf16(spec: ExperimentSpec) -> bool:
    # bf16 on CPU is either refused or ~15x slower (docs/frameworks-on-cpu.md): CPU runs are fp32 in both
    precision = spec.sft.precision or spec.curator.precision
    return spec.resources.gpus_per_node > 0 and precision == "bf16"


def trl_sft_config(spec: ExperimentSpec, sched: SFTSchedule, output_dir: str) -> dict[str, Any]:
    """Keyword arguments of ``trl.SFTConfig``; every default we rely on is pinned."""
    _check_schedule(spec, "trl")
    s = spec.sft
    sched_name = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}[s.schedule]
    on_cpu = spec.resources.gpus_per_node == 0
    return {
        "output_dir": output_dir,
        "num_train_epochs": s.epochs,
        "max_steps": sched.total_steps,
        "learning_rate": s.lr,
        "lr_scheduler_type": sched_name,
        "warmup_steps": sched.warmup_steps,
        "weight_decay": s.weight_decay,
        "max_grad_norm": s.grad_clip,
        "adam_beta1": 0.9,
        "adam_beta2": 0.999,
        "adam_epsilon": 1e-8,
        "optim": "adamw_torch",
        "per_device_train_batch_size": sched.micro_batch_size,
        "gradient_accumulation_steps": sched.batch_size // sched.micro_batch_size,
        "dataloader_drop_last": True,
        "max_length": s.max_length,
        "truncation_mode": "keep_start",
        # TRL refuses its assistant_only_loss flag for pre-tokenized rows; it applies an `assistant_masks`
        # column regardless (labels -100 outside it), which is the same mechanism the flag drives.
        "assistant_only_loss": False,
        "completion_only_loss": False,
        "packing": False,
        "padding_free": False,
        "shuffle_dataset": False,  # order comes from the shared sampler, not from a dataset shuffle
        "train_sampling_strategy": "sequential",  # replaced by the shared sampler in the backend
        "dataset_num_proc": None,
        "seed": spec.seed,
        "data_seed": spec.seed,
        "save_strategy": "epoch",
        "save_only_model": False,
        "logging_steps": 1,
        "logging_first_step": True,
        "report_to": "none",
        "use_cpu": on_cpu,
        "bf16": _trl_bf16(spec),
        "fp16": False,
        "gradient_checkpointing": False,
        "remove_unused_columns": False,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
    }


def verl_sft_overrides(spec: ExperimentSpec, sched: SFTSchedule) -> dict[str, Any]:
    """Hydra overrides of ``verl/trainer/config/sft_trainer_engine.yaml`` (paths are added by the backend)."""
    _check_schedule(spec, "verl")
    s = spec.sft
    on_cpu = spec.resources.gpus_per_node == 0
    fp32 = not _trl_bf16(spec)
    return {
        "data.train_batch_size": sched.batch_size,
        "data.micro_batch_size_per_gpu": sched.micro_batch_size,
        "data.use_dynamic_bsz": False,
        "data.max_length": s.max_length,
        "data.truncation": "right",
        "data.pad_mode": "no_padding",
        "data.num_workers": 0,
        "data.val_files": None,
        "optim.lr": s.lr,
        "optim.lr_scheduler_type": "cosine" if s.schedule == "cosine" else "constant",
        "optim.lr_warmup_steps": sched.warmup_steps if sched.warmup_steps > 0 else -1,
        "optim.lr_warmup_steps_ratio": 0.0,
        "optim.min_lr_ratio": 0.0,
        "optim.num_cycles": 0.5,
        "optim.zero_indexed_step": True,
        "optim.weight_decay": s.weight_decay,
        "optim.clip_grad": s.grad_clip,
        "optim.betas": [0.9, 0.999],
        "optim.optimizer": "AdamW",
        "optim.optimizer_impl": "torch.optim",
        "trainer.total_epochs": s.epochs,
        "trainer.total_training_steps": sched.total_steps,
        "trainer.save_freq": "after_each_epoch",
        "trainer.test_freq": -1,
        "trainer.seed": spec.seed,
        "trainer.resume_mode": "auto",
        "trainer.logger": ["console"],
        "checkpoint.save_contents": ["model", "optimizer", "extra", "hf_model"],
        "model.enable_gradient_checkpointing": False,
        "model.use_remove_padding": False if on_cpu else True,
        "engine.use_torch_compile": False if on_cpu else True,
        "engine.model_dtype": "fp32",
        "engine.dtype": "float32" if fp32 else "bfloat16",
        # FSDP's compute dtype: without this verl computes in bf16 even when engine.dtype says float32
        "+engine.mixed_precision": {"param_dtype": "fp32" if fp32 else "bf16", "reduce_dtype": "fp32",
                                    "buffer_dtype": "fp32"},
    }


def sft_knobs(spec: ExperimentSpec, sched: SFTSchedule) -> dict[str, dict[str, KnobSetting]]:
    """Neutral knob -> backend -> how it is spelled there and the neutral value it amounts to."""
    s = spec.sft
    grad_accum = sched.batch_size // sched.micro_batch_size
    sch = "cosine" if s.schedule == "cosine" else s.schedule
    verl_sched = KnobSetting(
        f"optim.lr_scheduler_type={'cosine' if s.schedule == 'cosine' else 'constant'}",
        sch if s.schedule != "linear" else None,
        "verl SFT has no linear schedule" if s.schedule == "linear" else None,
    )
    return {
        "epochs": {
            "trl": KnobSetting(f"num_train_epochs={s.epochs}, max_steps={sched.total_steps}", s.epochs),
            "verl": KnobSetting(f"trainer.total_epochs={s.epochs}", s.epochs),
        },
        "lr": {
            "trl": KnobSetting(f"learning_rate={s.lr:g}", s.lr),
            "verl": KnobSetting(f"optim.lr={s.lr:g}", s.lr),
        },
        "schedule": {
            "trl": KnobSetting(f"lr_scheduler_type={s.schedule} (num_cycles 0.5, to 0)", sch),
            "verl": verl_sched,
        },
        "warmup_steps": {
            "trl": KnobSetting(f"warmup_steps={sched.warmup_steps}", sched.warmup_steps),
            "verl": KnobSetting(f"optim.lr_warmup_steps={sched.warmup_steps if sched.warmup_steps else -1}",
                                sched.warmup_steps),
        },
        "batch_size": {
            "trl": KnobSetting(f"per_device_train_batch_size={sched.micro_batch_size} x "
                               f"gradient_accumulation_steps={grad_accum}", sched.batch_size),
            "verl": KnobSetting(f"data.train_batch_size={sched.batch_size}", sched.batch_size),
        },
        "micro_batch_size": {
            "trl": KnobSetting(f"per_device_train_batch_size={sched.micro_batch_size}", sched.micro_batch_size),
            "verl": KnobSetting(f"data.micro_batch_size_per_gpu={sched.micro_batch_size}", sched.micro_batch_size),
        },
        "max_length": {
            "trl": KnobSetting(f"max_length={s.max_length} (keep_start; pre-truncated)", s.max_length),
            "verl": KnobSetting(f"data.max_length={s.max_length} (truncation=right; pre-truncated)", s.max_length),
        },
        "data_order": {
            "trl": KnobSetting(f"DistributedSampler(seed={VERL_SAMPLER_SEED}) after seed-{spec.seed} permutation",
                               f"sampler0+perm{spec.seed}"),
            "verl": KnobSetting(f"built-in DistributedSampler(seed={VERL_SAMPLER_SEED}) after seed-{spec.seed} "
                                "permutation", f"sampler0+perm{spec.seed}"),
        },
        "drop_last": {
            "trl": KnobSetting("dataloader_drop_last=True", True),
            "verl": KnobSetting("hard-coded drop_last=True", True),
        },
        "loss": {
            "trl": KnobSetting("assistant_masks column (shared masks) -> labels; mean over batch tokens",
                               "token_mean"),
            "verl": KnobSetting("sft_loss (loss_mask from shared masks); sum / batch_num_tokens", "token_mean"),
        },
        "optimizer": {
            "trl": KnobSetting(f"adamw_torch betas=(0.9,0.999) eps=1e-8 wd={s.weight_decay} clip={s.grad_clip}",
                               f"adamw wd={s.weight_decay} clip={s.grad_clip}"),
            "verl": KnobSetting(f"AdamW betas=[0.9,0.999] eps=1e-8 wd={s.weight_decay} clip={s.grad_clip}",
                                f"adamw wd={s.weight_decay} clip={s.grad_clip}"),
        },
        "precision": {
            "trl": KnobSetting(f"bf16={_trl_bf16(spec)}", "bf16" if _trl_bf16(spec) else "fp32"),
            "verl": KnobSetting(f"engine.mixed_precision.param_dtype={'bf16' if _trl_bf16(spec) else 'fp32'}",
                                "bf16" if _trl_bf16(spec) else "fp32"),
        },
        "checkpoints": {
            "trl": KnobSetting("save_strategy=epoch -> checkpoints/step-N (HF)", "per epoch"),
            "verl": KnobSetting("trainer.save_freq=after_each_epoch, save_contents+=hf_model -> checkpoints/step-N",
                                "per epoch"),
        },
    }


# ------------------------------------------------------------------------------------------------------------
# Order and per-step token counts (need torch for the sampler; import inside)


def epoch_order(n: int, epoch: int) -> list[int]:
    """Indices in the order verl's SFT sampler (and the TRL backend's copy of it) yields them in ``epoch``."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(n), num_replicas=1, rank=0, shuffle=True, seed=VERL_SAMPLER_SEED,
                                 drop_last=True)
    sampler.set_epoch(epoch)
    return list(sampler)


@dataclass(frozen=True)
class StepTokens:
    step: int  # 1-based global step
    epoch: int  # 0-based
    example_ids: tuple[str, ...]
    tokens: int  # non-pad tokens (what verl's no-padding batch holds)
    trained_tokens: int  # tokens with loss (the loss's denominator in both frameworks)
    padded_tokens: int  # TRL's right-padded batch: batch x longest sequence per micro-batch
    lr: float  # the rate this step's update uses


def step_token_counts(dataset: Any, sched: SFTSchedule, spec: ExperimentSpec) -> list[StepTokens]:
    """Per optimizer step: which examples, how many tokens, how many trained tokens (shared by both backends)."""
    out: list[StepTokens] = []
    exs = dataset.examples
    step = 0
    for epoch in range(sched.epochs):
        order = epoch_order(len(exs), epoch)
        for b in range(sched.steps_per_epoch):
            idx = order[b * sched.batch_size:(b + 1) * sched.batch_size]
            batch = [exs[i] for i in idx]
            step += 1
            padded = 0
            for m in range(0, len(batch), sched.micro_batch_size):
                micro = batch[m:m + sched.micro_batch_size]
                padded += len(micro) * max(e.tokens for e in micro)
            out.append(StepTokens(step, epoch, tuple(e.id for e in batch), sum(e.tokens for e in batch),
                                  sum(e.trained_tokens for e in batch), padded, scheduled_lr(spec, sched, step)))
    return out


@dataclass
class SFTPlan:
    schedule: SFTSchedule
    knobs: dict[str, dict[str, KnobSetting]]
    native: dict[str, dict[str, Any]]
    steps: list[StepTokens] = field(default_factory=list)
    truncated: int = 0
    dropped_no_loss: int = 0
    data_sha256: str | None = None  # of the trajectory file: the runs of both backends name the same data
    dropped_unsuccessful: int = 0  # episodes left out by sft.only_successful

    def divergent_knobs(self) -> list[str]:
        """Knobs whose neutral value differs between the backends (plan refuses these)."""
        bad = []
        for name, per in self.knobs.items():
            values = {repr(k.value) for k in per.values()}
            if len(values) > 1 or any(k.divergence for k in per.values()):
                bad.append(name)
        return bad

    def to_json(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule.__dict__,
            "knobs": {n: {b: {"setting": k.setting, "value": k.value, "divergence": k.divergence}
                          for b, k in per.items()} for n, per in self.knobs.items()},
            "native": self.native,
            "steps": [s.__dict__ | {"example_ids": list(s.example_ids)} for s in self.steps],
            "truncated": self.truncated,
            "dropped_no_loss": self.dropped_no_loss,
            "data_sha256": self.data_sha256,
            "dropped_unsuccessful": self.dropped_unsuccessful,
        }


def plan_without_data(spec: ExperimentSpec, episodes: int, *, output_dir: str = "<out>/trl") -> SFTPlan:
    """The knob table and step schedule for ``episodes`` training sequences, before any data exists (e.g. the
    study's 2,059 teacher episodes): the per-step sequence counts both backends realise, no token counts."""
    if episodes < 1:
        raise TwinrunError(f"--episodes: {episodes} (fix: the number of training sequences, e.g. 2059)")
    sched = sft_schedule(spec, episodes)
    return SFTPlan(schedule=sched, knobs=sft_knobs(spec, sched),
                   native={"trl": trl_sft_config(spec, sched, output_dir), "verl": verl_sft_overrides(spec, sched)})


def build_plan(spec: ExperimentSpec, dataset: Any, *, output_dir: str = "<out>/trl") -> SFTPlan:
    sched = sft_schedule(spec, len(dataset.examples))
    plan = SFTPlan(
        schedule=sched,
        knobs=sft_knobs(spec, sched),
        native={"trl": trl_sft_config(spec, sched, output_dir), "verl": verl_sft_overrides(spec, sched)},
        steps=step_token_counts(dataset, sched, spec),
        truncated=dataset.truncated,
        dropped_no_loss=len(dataset.dropped_no_loss),
    )
    return plan


def render_plan(plan: SFTPlan) -> str:
    """The knob table and the per-step token table as plain text."""
    from rich.console import Console
    from rich.table import Table

    import io

    console = Console(record=True, width=160, file=io.StringIO())
    s = plan.schedule
    console.print(
        f"SFT: {s.examples} sequences, batch {s.batch_size} (micro {s.micro_batch_size}), {s.epochs} epoch(s), "
        f"{s.steps_per_epoch} steps/epoch, {s.total_steps} steps, warmup {s.warmup_steps}, "
        f"{s.dropped_per_epoch} sequence(s)/epoch not in a full batch; {plan.truncated} truncated to max_length, "
        f"{plan.dropped_no_loss} dropped (no trained token left)"
        + (f", {plan.dropped_unsuccessful} unsuccessful episode(s) left out (sft.only_successful)"
           if plan.dropped_unsuccessful else "")
    )
    t = Table(title="knobs (neutral -> native)")
    t.add_column("knob")
    for b in SFT_BACKENDS:
        t.add_column(b)
    t.add_column("same")
    for name, per in plan.knobs.items():
        same = "yes" if name not in plan.divergent_knobs() else "NO"
        t.add_row(name, *(per[b].setting + (f" [{per[b].divergence}]" if per[b].divergence else "")
                          for b in SFT_BACKENDS), same)
    console.print(t)
    if not plan.steps:
        shape = plan.knobs["schedule"]["trl"].value
        console.print(f"per step: {s.batch_size} sequences in both backends ({s.micro_batch_size} per forward), "
                      f"{s.total_steps} steps; lr warms up over {s.warmup_steps} steps, then {shape} to 0 (token "
                      "counts need the data: --data FILE)")
        return console.export_text()
    st = Table(title="per-step tokens (identical for trl and verl: same sequences, same order)")
    for c in ("step", "epoch", "sequences", "tokens", "trained tokens", "trl padded tokens", "lr"):
        st.add_column(c, justify="right")
    for row in plan.steps:
        st.add_row(str(row.step), str(row.epoch), str(len(row.example_ids)), str(row.tokens),
                   str(row.trained_tokens), str(row.padded_tokens), f"{row.lr:.3g}")
    console.print(st)
    return console.export_text()


# ------------------------------------------------------------------------------------------------------------
# What both backends do before and after their framework runs


@dataclass
class PreparedSFT:
    spec: ExperimentSpec
    model_path: str
    tokenizer: Any
    dataset: Any  # twinrun.core.sft.data.SFTDataset
    plan: SFTPlan


def sft_data_path(spec: ExperimentSpec) -> Any:
    from pathlib import Path

    if spec.sft.data is None:
        raise TwinrunError(
            "sft.data: null (fix: build a set with `twinrun sft-data SPEC --out FILE` and pass --data FILE; "
            "`--plan --episodes N` plans without data)"
        )
    p = Path(spec.sft.data)
    return p if p.is_absolute() else spec.source_dir / p


def prepare_sft(spec: ExperimentSpec, *, cache_dir: Any = None, output_dir: str = "<out>/trl") -> PreparedSFT:
    """Resolve the model, load + tokenize the trajectories, and compile the plan (imports transformers)."""
    from transformers import AutoTokenizer

    from twinrun.core.sft.data import build_sft_dataset
    from twinrun.core.sft.trajectories import load_trajectories
    from twinrun.models.tiny import resolve_model

    import hashlib

    model_path = resolve_model(spec.sft.model or spec.curator.model, cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    data = sft_data_path(spec)
    records = load_trajectories(data)
    total = len(records)
    if spec.sft.only_successful:
        kept = [r for r in records if r.success]
        if not kept:
            raise TwinrunError(f"sft.only_successful: none of the {len(records)} episodes in {data} is a verified "
                               "success (fix: turn the filter off, or more data)")
        records = kept
    dataset = build_sft_dataset(records, tokenizer, max_length=spec.sft.max_length, seed=spec.seed)
    plan = build_plan(spec, dataset, output_dir=output_dir)
    plan.data_sha256 = hashlib.sha256(data.read_bytes()).hexdigest()[:16]
    plan.dropped_unsuccessful = total - len(records)
    return PreparedSFT(spec, model_path, tokenizer, dataset, plan)


@contextmanager
def sft_run_dir(out: Any, prepared: PreparedSFT, backend: str, *, resume: bool) -> Iterator[Any]:
    """Core's run lifecycle for an SFT run folder: refused before any write (another writer, a run with completed
    steps without --resume, a different spec on --resume), then locked for the ``with`` block, with spec.yaml,
    run.json and plan.json written; a resume keeps every record (the framework skips the steps it recorded)."""
    import json
    from pathlib import Path

    import yaml

    from twinrun.core.records import RunPaths
    from twinrun.core.records.lifecycle import run_lifecycle

    paths = RunPaths(Path(out))
    spec_yaml = yaml.safe_dump(json.loads(prepared.spec.canonical_json()), sort_keys=False)
    with run_lifecycle(paths, spec_yaml=spec_yaml, backend=backend, resume=resume) as run:
        run.begin(keep_steps=None, files={"plan.json": {"backend": backend, **prepared.plan.to_json()}})
        yield paths
