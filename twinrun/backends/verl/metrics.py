"""verl's per-step metrics + core's rollout records -> the neutral `StepMetrics` rows of ``metrics.jsonl``.

verl's `FileLogger` writes ``{"step": s, "data": {name: value}}`` per training step (one file per attempt: it
truncates on open). Curation numbers (rewards and their terms, episodes, tool calls) come from ``rollouts.jsonl``
(core's `CurationRecord`, written by the agent loop), so they mean exactly what they mean for TRL. Training
numbers are verl's, mapped by name (`VERL_NAMES`). A step re-run after a resume takes the latest attempt's row.
verl's global step s trains the task groups of core's step s-1 (0-based), so rollouts of step s-1 belong to s.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from twinrun.core.advantages import estimator_config
from twinrun.core.records import RunPaths, StepMetrics, atomic_write_text, provenance, read_jsonl
from twinrun.core.advantages.step_metrics import curation_step_metrics

# neutral StepMetrics field -> verl 0.9.1 metric name (trainer/ppo/v1/trainer_base.py, workers/utils/losses.py)
VERL_NAMES = {
    "entropy": "actor/entropy",
    "kl": "actor/kl_loss",  # KL to the reference (present only with actor.use_kl_loss, like TRL's beta > 0)
    "grad_norm": "actor/grad_norm",
    "clip_fraction": "actor/pg_clipfrac",
    "completion_length_mean": "response_length/mean",
}
# StepMetrics.wall_s phase -> verl timing metric
VERL_TIMINGS = {
    "step": "timing_s/step",
    "rollout": "timing_s/gen",
    "old_log_prob": "timing_s/old_log_prob",
    "ref": "timing_s/ref",
    "advantages": "timing_s/adv",  # the TRL backend's name for the same phase
    "update": "timing_s/update_actor",
    "weight_sync": "timing_s/update_weights",
    "checkpoint": "timing_s/save_checkpoint",
}


def read_verl_logs(files: Iterable[Path]) -> dict[int, dict[str, Any]]:
    """step -> verl metrics, later attempts overriding earlier ones."""
    out: dict[int, dict[str, Any]] = {}
    for f in files:
        for row in read_jsonl(f):
            if "step" in row and isinstance(row.get("data"), dict) and "training/global_step" in row["data"]:
                out[int(row["step"])] = row["data"]
    return out


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def step_rows(spec: Any, verl_steps: dict[int, dict[str, Any]], rollouts: list[dict[str, Any]],
              optimizer_updates: int, run_id: str | None = None) -> list[StepMetrics]:
    """One StepMetrics per verl step that has a log row (steps in increasing order).

    The curation fields are computed by the very function the TRL backend uses
    (`twinrun.core.advantages.step_metrics.curation_step_metrics`), so reward means, terms, episode counts mean
    the same on both backends; the training fields are verl's (`VERL_NAMES`, `VERL_TIMINGS`). Tool calls are
    counted from the records (one per ``curate`` call that reached the session); TRL counts them from its own
    log, and also counts calls of unknown tools, which never reach the session."""
    by_step: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rollouts:
        by_step[int(r.get("step", -1)) + 1].append(r)
    prov = provenance(spec_hash=spec.spec_hash(), run_id=run_id, backend="verl", framework_version=_verl_version(),
                      seed=spec.seed, executor_settings_hash=_executor_hash(rollouts))
    rows = []
    for step in sorted(verl_steps):
        data = verl_steps[step]
        records = by_step.get(step, [])
        wall = {phase: v for phase, name in VERL_TIMINGS.items() if (v := _num(data.get(name))) is not None}
        base = curation_step_metrics(step, records, backend="verl", optimizer_updates=optimizer_updates,
                                     provenance=prov, estimator=estimator_config(spec.algorithm))
        rows.append(base.model_copy(update={
            "wall_s": wall,
            "tool_calls": sum(int(p.get("tool_calls", 0)) for r in records for p in r.get("positions", [])),
            "tool_failures": 0,
            **{field: _num(data.get(name)) for field, name in VERL_NAMES.items()},
        }))
    return rows


def write_step_metrics(spec: Any, paths: RunPaths, verl_logs: list[Path], compiled: Any) -> int:
    """(Re)write metrics.jsonl from every attempt's verl log and rollouts.jsonl; returns the number of rows."""
    rows = step_rows(spec, read_verl_logs(verl_logs), list(read_jsonl(paths.rollouts)),
                     int(compiled.counts["optimizer_updates"]), run_id=paths.root.name)
    atomic_write_text(paths.metrics, "".join(r.model_dump_json() + "\n" for r in rows))
    return len(rows)


def _executor_hash(rollouts: list[dict[str, Any]]) -> str | None:
    """The executor settings hash the rollouts were played with (core stamps it on every record)."""
    for r in rollouts:
        h = (r.get("provenance") or {}).get("executor_settings_hash")
        if h:
            return h
    return None


def _verl_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("verl")
    except Exception:  # noqa: BLE001 - provenance only
        return None
