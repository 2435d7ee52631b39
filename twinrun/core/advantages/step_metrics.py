"""Step metrics: the curation half of a StepMetrics row, computed identically for every backend."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from twinrun.core.advantages.in_flight import step_in_flight
from twinrun.core.records.schemas import Provenance, StepMetrics


def finite_or_none(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def mean_finite(values: Iterable[Any]) -> float | None:
    vals = [f for f in (finite_or_none(v) for v in values) if f is not None]
    return sum(vals) / len(vals) if vals else None


def _judge_agreement(records: Sequence[dict[str, Any]]) -> float | None:
    """Share of positions whose judged correctness (what the curator read) equals the environment's outcome, over
    positions of curation.correctness=judged rollouts where both are success/failure; None without any."""
    pairs = [(p.get("correctness"), p.get("outcome")) for r in records if r.get("correctness_source") == "judged"
             for p in r.get("positions", [])]
    known = [(c, o) for c, o in pairs if c in ("success", "failure") and o in ("success", "failure")]
    return sum(c == o for c, o in known) / len(known) if known else None


def _anchor_fields(estimator: Any, records: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    if estimator is None or getattr(estimator, "estimator", None) != "gigpo" or not records:
        return {}
    from twinrun.core.advantages.anchors import anchor_stats, step_rows

    stats = anchor_stats(estimator, step_rows(records))
    return {k: stats[k] for k in ("anchor_singleton_share", "step_adv_nonzero_share")}


def curation_step_metrics(step: int, records: Sequence[dict[str, Any]], *, backend: str,
                          optimizer_updates: int, provenance: Provenance, estimator: Any = None) -> StepMetrics:
    """The fields of one StepMetrics row that come from core's curation records (rollouts.jsonl rows of one
    step), so reward means, terms and episode counts mean the same on every backend. A backend adds its
    training fields (entropy, KL, grad norm, clip fraction, lengths, tool counts, wall time) with model_copy.
    ``estimator``: the step's core EstimatorConfig; under GiGPO the anchor-group shares are computed from the
    records' own anchors and step rewards (core.anchors.anchor_stats), the rows both backends handed the estimator."""
    totals = [r["reward"]["total"] for r in records]
    measured = [t for t in totals if t is not None]
    mean = sum(measured) / len(measured) if measured else None
    std = (math.sqrt(sum((t - mean) ** 2 for t in measured) / (len(measured) - 1))
           if mean is not None and len(measured) > 1 else None)
    terms = {name: mean_finite([r["reward"][name]["value"] for r in records]) for name in ("r_task", "r_fc", "r_cnt", "r_comp")}
    # r_task pooled over every measured scored position of the step (not a mean of per-rollout ratios)
    num = sum(r["reward"]["r_task"]["numerator"] or 0.0 for r in records)
    den = sum(r["reward"]["r_task"]["denominator"] or 0 for r in records)
    positions = [int(r["positions_measured"]) for r in records]
    n_positions = sum(len(r["positions"]) for r in records)
    missing = sum(int(r["turns_missing"]) for r in records)
    flight_mean, flight_max = step_in_flight(records)
    return StepMetrics(
        step=step,
        backend=backend,
        reward_mean=mean,
        reward_std=std,
        reward_terms=terms,
        r_task_measured_mean=(num / den) if den else None,
        positions_measured_mean=(sum(positions) / len(positions)) if positions else None,
        positions_measured_min=min(positions) if positions else None,
        curation_rollouts=len(records),
        executor_episodes=sum(int(r["executor_episodes"]) for r in records),
        executor_calls=sum(int(r["executor_calls"]) for r in records),
        unmeasured_episodes=sum(int(r["unmeasured_episodes"]) for r in records),
        optimizer_updates=optimizer_updates,
        turns_missing=missing,
        turns_missing_share=(missing / n_positions) if n_positions else None,
        judge_agreement=_judge_agreement(records),
        episodes_in_flight_mean=round(flight_mean, 4) if flight_mean is not None else None,
        episodes_in_flight_max=flight_max,
        **_anchor_fields(estimator, records),
        provenance=provenance,
    )
