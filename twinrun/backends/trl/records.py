"""Run-directory bookkeeping for TRL training: neutral step metrics, curation records, checkpoint export, resume.

Layout (``RunPaths``)::

    spec.yaml  resolved_config.json  metrics.jsonl  rollouts.jsonl  episodes.jsonl  trl_log.jsonl
    checkpoints/step-NNNNNN/   HF weights + tokenizer (AutoModelForCausalLM.from_pretrained), one per saved step
    trl/checkpoint-N/          TRL's own checkpoint (optimizer, scheduler, RNG, trainer_state) for --resume

Step numbering: training step k (1-based) is the k-th generation round and its optimizer updates; checkpoint
``step-k`` holds the weights after it; ``metrics.jsonl`` row ``step: k`` describes it. Rows of ``rollouts.jsonl``
carry core's 0-based task-group step (``k - 1``). The folder's guard, lock and truncation on resume are core's
(:mod:`twinrun.core.records.lifecycle`); this module supplies TRL's resume point and config comparison.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from twinrun.core.errors import TwinrunError
from twinrun.core.records import JsonlWriter, Provenance, RunPaths, StepMetrics, publishing_dir
from twinrun.core.advantages.step_metrics import curation_step_metrics, finite_or_none, mean_finite

TRL_DIR = "trl"
RESOLVED_CONFIG = "resolved_config.json"
TRL_LOG = "trl_log.jsonl"
# GRPOConfig keys that name places, not behaviour: not compared on --resume
_PATH_KEYS = ("output_dir", "logging_dir")
# StepMetrics field -> TRL's logged metric (the mean over the step's optimizer updates; registry: metrics)
TRL_NAMES = {
    "entropy": "entropy",
    "kl": "kl",
    "grad_norm": "grad_norm",
    "clip_fraction": "clip_ratio/region_mean",
    "completion_length_mean": "completions/mean_length",
}


def step_metrics(
    step: int,
    records: Sequence[dict[str, Any]],
    trl_logs: Sequence[dict[str, Any]],
    batch_stats: dict[str, Any],
    *,
    optimizer_updates: int,
    provenance: Provenance,
    estimator: Any = None,
) -> StepMetrics:
    """One neutral metrics row: the curation fields from core's records, the training fields from TRL's logs
    of the step's optimizer updates."""
    base = curation_step_metrics(step, records, backend="trl", optimizer_updates=optimizer_updates,
                                 provenance=provenance, estimator=estimator)
    calls = [finite_or_none(x.get("tools/call_frequency")) for x in trl_logs]
    fails = [finite_or_none(x.get("tools/failure_frequency")) for x in trl_logs]
    call_freq = next((c for c in calls if c is not None), None)
    fail_freq = next((f for f in fails if f is not None), None)
    if call_freq is not None:  # TRL's tool loop (accumulated) counts its calls
        tool_calls = round(call_freq * len(records))
    else:  # per_position has no TRL tool loop: the calls that reached the sessions (as the verl backend counts)
        tool_calls = sum(int(p.get("tool_calls", 0)) for r in records for p in r.get("positions", []))
    wall = {k: round(float(v), 6) for k, v in batch_stats.get("wall_s", {}).items()}
    step_time = sum(finite_or_none(x.get("step_time")) or 0.0 for x in trl_logs)
    if step_time:
        wall["step"] = round(step_time, 6)
        wall["update"] = round(max(0.0, step_time - wall.get("rollout", 0.0) - wall.get("advantages", 0.0)), 6)
    return base.model_copy(update={
        "tool_calls": tool_calls,
        "tool_failures": round(fail_freq * tool_calls) if fail_freq is not None else 0,
        **{field: mean_finite([x.get(name) for x in trl_logs]) for field, name in TRL_NAMES.items()},
        "wall_s": wall,
    })


# ------------------------------------------------------------------------------------------------------------
# Run directory


def refuse_changed_config(old: dict[str, Any], new: dict[str, Any]) -> None:
    """On resume (core's run lifecycle calls it), refuse a resolved GRPOConfig that differs from the recorded one."""
    old, new = comparable_config(old), comparable_config(new)
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if changed:
        k = changed[0]
        raise TwinrunError(
            f"--resume: resolved GRPOConfig changed ({k}: {old.get(k)!r} -> {new.get(k)!r}"
            f"{f' and {len(changed) - 1} more' if len(changed) > 1 else ''}; fix: resume with the same spec, "
            "twinrun and TRL versions, or start a new --out)"
        )


def comparable_config(cfg: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in json.loads(json.dumps(cfg, default=str)).items() if k not in _PATH_KEYS}


def last_complete_checkpoint(paths: RunPaths, updates_per_step: int) -> tuple[int, Path] | None:
    """(training step, TRL checkpoint folder) of the newest step whose exported checkpoint and TRL state both
    completed (the export is an atomic rename made after TRL finished writing its folder)."""
    best: tuple[int, Path] | None = None
    trl_root = paths.root / TRL_DIR
    if not trl_root.is_dir():
        return None
    for d in trl_root.glob("checkpoint-*"):
        try:
            global_step = int(d.name.split("-", 1)[1])
        except ValueError:
            continue
        if global_step % updates_per_step or not (d / "trainer_state.json").is_file():
            continue
        step = global_step // updates_per_step
        if not (paths.checkpoint(step) / "config.json").is_file():
            continue
        if best is None or step > best[0]:
            best = (step, d)
    return best


_NOT_WEIGHTS = ("optimizer.pt", "scheduler.pt", "training_args.bin", "trainer_state.json", "README.md")


def export_checkpoint(src: Path, dst: Path) -> Path:
    """Publish TRL's ``checkpoint-N`` weights/config/tokenizer as ``checkpoints/step-NNNNNN`` atomically (temp
    folder + rename). Files are hard-linked when possible (no second copy of the weights), else copied."""
    if not (src / "config.json").is_file():
        raise TwinrunError(f"checkpoint: {src} has no config.json (fix: TRL did not save HF weights)")
    with publishing_dir(dst) as tmp:
        for f in src.iterdir():
            if not f.is_file() or f.name in _NOT_WEIGHTS or f.name.startswith("rng_state"):
                continue
            try:
                os.link(f, tmp / f.name)
            except OSError:
                shutil.copy2(f, tmp / f.name)
    return dst


class RunRecorder:
    """Collects a step's curation records (from the trainer) and TRL's logs (from a callback), writes rows."""

    def __init__(self, paths: RunPaths, *, updates_per_step: int, provenance: Provenance, is_main: bool,
                 estimator: Any = None):
        self.paths = paths
        self.estimator = estimator  # core's EstimatorConfig (GiGPO anchor-group shares in metrics.jsonl)
        self.updates_per_step = updates_per_step
        self.provenance = provenance
        self.is_main = is_main
        self._records: dict[int, list[dict[str, Any]]] = {}
        self._stats: dict[int, dict[str, Any]] = {}
        self._logs: dict[int, list[dict[str, Any]]] = {}
        self._writers: dict[str, JsonlWriter] = {}

    def _writer(self, path: Path) -> JsonlWriter:
        key = str(path)
        if key not in self._writers:
            self._writers[key] = JsonlWriter(path)
        return self._writers[key]

    def on_batch(self, step: int, records: list[tuple[dict[str, Any], list[dict[str, Any]]]], stats: dict[str, Any],
                 rows: list[dict[str, Any]] | None = None) -> None:
        """The trainer generated and scored training step ``step`` (1-based); ``rows``: its trained rows."""
        self._records[step] = [r for r, _ in records]
        self._stats[step] = stats
        if not self.is_main:
            return
        for rec, eps in records:
            self._writer(self.paths.rollouts).write(rec)
            self._writer(self.paths.episodes).write_many(eps)
        if rows:
            self._writer(self.paths.rows).write_many(rows)
        extra = {k: v for k, v in stats.items() if k != "wall_s"}
        # the backend's own diagnostics: TRL's advantages next to core's, prefetch counters
        self._writer(self.paths.root / TRL_LOG).write({"step": step, "kind": "batch", **extra})

    def on_log(self, global_step: int, logs: dict[str, Any]) -> StepMetrics | None:
        """TRL logged optimizer update ``global_step``; after a step's last update, write its metrics row."""
        if "train_runtime" in logs:  # the end-of-training summary, not an update
            return None
        step = -(-global_step // self.updates_per_step)
        self._logs.setdefault(step, []).append(dict(logs))
        if self.is_main:
            clean = {k: (finite_or_none(v) if isinstance(v, (int, float)) else v) for k, v in logs.items()}
            self._writer(self.paths.root / TRL_LOG).write({"step": step, "kind": "log", "global_step": global_step,
                                                           **clean})
        if global_step % self.updates_per_step:
            return None
        row = step_metrics(step, self._records.pop(step, []), self._logs.pop(step, []), self._stats.pop(step, {}),
                           optimizer_updates=self.updates_per_step, provenance=self.provenance,
                           estimator=self.estimator)
        if self.is_main:
            self._writer(self.paths.metrics).write(row)
        return row

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()
