"""Training rows: the sequences a framework's loss sees, the advantage each carries, and their record.

With ``curator.context: per_position`` one curation rollout over |G| positions becomes |G| training rows, row
(rollout r, position p) with prompt = position p's input (:mod:`twinrun.core.curation.context_shape`) and completion = the
curator's turn there. Both backends hand core the same per-row facts (:class:`RowScore`) and get the same numbers
back from :func:`row_advantages`, which is one call of :func:`~twinrun.core.advantages.compute_advantages`:

- outcome estimators (grpo, dr_grpo, rloo): every row of a rollout carries the rollout's advantage; the group
  statistics pool one score per rollout (``traj_ids``), so a rollout counts once, as in the accumulated shape. The
  loss then weighs positions, not rollouts (DIVERGENCES A1).
- gigpo: row (r, p) carries that position's ``A^E + omega A^S`` (the rows are GiGPO's step rows).

``rows.jsonl`` (:class:`TrainingRowRecord`) records, for every trained row, which (rollout, position) it is, a digest
of the prompt token ids the loss saw and the advantage it carried; tests (and a careful user) compare them with
core's records across backends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import Field

from twinrun.core.records import _Row


@dataclass(frozen=True)
class RowScore:
    """What core needs about one per_position training row.

    rollout: a key unique among the batch's rollouts (e.g. ``"<group_id>#<rollout_index>"``); total: the rollout's
    reward (None = unmeasured); step_reward, anchor, position_valid: this position's; rollout_valid: every
    position of the rollout applied a valid operation (``algorithm.invalid_penalty`` of outcome estimators)."""

    group_id: str
    rollout: str
    position: int
    total: float | None
    step_reward: float
    anchor: str | None
    position_valid: bool
    rollout_valid: bool


def rollout_rows(group_id: str, rollout: str, *, total: float | None, step_rewards: Sequence[float],
                 anchors: Sequence[str | None], position_valid: Sequence[bool]) -> list[RowScore]:
    """The |G| rows of one rollout (positions 1..|G|) from its result's reward, step rewards, anchors, validity."""
    g = len(anchors)
    if len(step_rewards) not in (0, g) or len(position_valid) != g:
        raise ValueError(f"rollout {rollout}: {len(step_rewards)} step rewards, {len(anchors)} anchors and "
                         f"{len(position_valid)} validity flags (fix: one per position)")
    rewards = list(step_rewards) if step_rewards else [0.0] * g
    ok = all(position_valid)
    return [RowScore(group_id, rollout, p + 1, total, float(rewards[p]), anchors[p], bool(position_valid[p]), ok)
            for p in range(g)]


def row_advantages(cfg: Any, rows: Sequence[RowScore]) -> np.ndarray:
    """float64[B]: the advantage of each per_position row (see the module docstring). ``cfg``: an
    ``EstimatorConfig`` or ``AlgorithmSpec``. Rows may come in any order; every position of a rollout that has
    rows in the batch must be there for GiGPO (its step returns run over the whole rollout)."""
    from twinrun.core.advantages import EstimatorConfig, compute_advantages, estimator_config

    c = cfg if isinstance(cfg, EstimatorConfig) else estimator_config(cfg)
    if not rows:
        return np.zeros(0)
    totals = np.array([np.nan if r.total is None else float(r.total) for r in rows])
    groups = np.array([r.group_id for r in rows], dtype=object)
    traj = np.array([r.rollout for r in rows], dtype=object)
    if c.estimator != "gigpo":
        return compute_advantages(c, totals, groups, traj_ids=traj, valid=[r.rollout_valid for r in rows])
    anchors = np.empty(len(rows), dtype=object)
    anchors[:] = [r.anchor for r in rows]
    return compute_advantages(
        c, totals, groups, traj_ids=traj, step_index=[r.position for r in rows], anchors=anchors,
        step_rewards=[np.nan if r.total is None else r.step_reward for r in rows],
        valid=[r.position_valid for r in rows],
    )


class TrainingRowRecord(_Row):
    """One trained row (a ``rows.jsonl`` line): which (rollout, position) it is and what the loss saw.

    position: 1..|G| (per_position); None for an accumulated row (the whole rollout). advantage: the row's
    advantage (constant over its tokens); for an accumulated GiGPO row, ``segment_advantages`` holds the value of
    each curator turn instead. prompt_digest: :func:`~twinrun.core.curation.context_shape.ids_digest` of the prompt token
    ids as the loss saw them. token_advantages: the advantage on every loss-carrying token, in order, run-length
    encoded as ``[value, tokens]`` pairs (:func:`token_runs`; the counts sum to ``completion_tokens``), so a row whose
    tokens disagree with its ``advantage`` shows (written by verl, whose advantages are a per-token tensor).
    prompt_ids / completion_ids / messages: only when the run was asked to keep the tokens (tests)."""

    kind: Literal["training_row"] = "training_row"
    backend: str
    step: int  # 1-based training step
    context: Literal["per_position", "accumulated"]
    group_id: str
    rollout_index: int
    position: int | None
    prompt_tokens: int
    completion_tokens: int  # tokens that carry loss (the curator's own tokens)
    prompt_digest: str
    advantage: float | None = None
    segment_advantages: list[float] | None = None
    token_advantages: list[tuple[float, int]] | None = None
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    messages: list[dict[str, str]] | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


def token_runs(values: Sequence[float]) -> list[tuple[float, int]]:
    """Run-length encoding of per-token advantages: ``[(value, tokens), ...]`` in order, one pair per run of equal
    values (a per_position row is one pair; an accumulated GiGPO row one per turn, or fewer where turns agree)."""
    runs: list[tuple[float, int]] = []
    for v in values:
        v = float(v)
        if runs and runs[-1][0] == v:
            runs[-1] = (v, runs[-1][1] + 1)
        else:
            runs.append((v, 1))
    return runs


def rows_by_key(records: Sequence[Mapping[str, Any]]) -> dict[tuple[int, str, int, int | None], dict[str, Any]]:
    """rows.jsonl lines keyed by (step, group_id, rollout_index, position); a repeated key is an error (a row
    trained twice in one step)."""
    out: dict[tuple[int, str, int, int | None], dict[str, Any]] = {}
    for r in records:
        key = (int(r["step"]), str(r["group_id"]), int(r["rollout_index"]), r.get("position"))
        if key in out:
            raise ValueError(f"rows.jsonl: row {key} appears twice (fix: one row per (rollout, position) per step)")
        out[key] = dict(r)
    return out


__all__ = ["RowScore", "TrainingRowRecord", "row_advantages", "rollout_rows", "rows_by_key", "token_runs"]
