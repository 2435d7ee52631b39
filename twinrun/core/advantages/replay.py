"""Recorded rollouts as replay batches: what `twinrun parity` feeds both trainers (pure python + numpy).

A training run's ``rollouts.jsonl`` holds, per curation rollout, the token ids the backend trained on
(``sequences``, records.SequenceTokens), its reward and its task group. :func:`load_replay` turns the file into
one :class:`ReplayStep` per recorded training step: the training rows in the layout both frameworks use (task
groups in sampler order, each group's rollouts contiguous, by rollout index), each with the advantage core gives
it under the spec's ``algorithm`` (the same call both backends make in training):

- ``curator.context: accumulated``: one row per rollout (its one sequence), advantage from
  ``compute_advantages``;
- ``curator.context: per_position``: |G| rows per rollout (``sequences`` holds one per position, in position
  order), row ``r*|G| + (p-1)`` of a group's block = (rollout r, position p) as TRL's slot layout and verl's
  agent loop lay them out; advantages from :func:`~twinrun.core.advantages.training_rows.row_advantages` (outcome
  estimators: the rollout's advantage on each of its rows; GiGPO: each position's ``A^E + omega A^S``, from the
  recorded step rewards and the anchors re-keyed to the spec's ``algorithm.gigpo.anchor``).

Both trainers then get the same prompts, the same completion tokens, the same loss masks and the same
advantages; only their update math differs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from twinrun.core.advantages import compute_advantages
from twinrun.core.advantages.anchors import record_anchors
from twinrun.core.errors import TwinrunError
from twinrun.core.records import SequenceTokens, read_jsonl
from twinrun.core.advantages.training_rows import rollout_rows, row_advantages


@dataclass(frozen=True)
class ReplayRow:
    """One training row of a recorded curation rollout (the whole rollout, or one position of it), ready to
    train on."""

    group_id: str
    rollout_index: int
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    completion_mask: tuple[int, ...]  # 1 = curator token (carries the loss), 0 = tool result
    reward: float | None  # None = unmeasured (advantage 0)
    advantage: float
    position: int | None = None  # 1..|G| (per_position); None: the accumulated rollout

    @property
    def loss_tokens(self) -> int:
        return int(sum(self.completion_mask))


@dataclass(frozen=True)
class ReplayStep:
    """One recorded training step: ``rows`` in group-contiguous order (what TRL's sampler and verl's
    ``rollout.n`` produce; per_position: each rollout's positions contiguous, in order)."""

    step: int  # core's 0-based task-group step
    rows: tuple[ReplayRow, ...]

    @property
    def group_ids(self) -> list[str]:
        return [r.group_id for r in self.rows]


def check_replayable(spec: Any) -> None:
    """What `twinrun parity` cannot replay, refused in one line: GiGPO on the accumulated shape (its per-turn
    advantages would need each turn's token span, which is not recorded)."""
    if spec.algorithm.estimator == "gigpo" and spec.curator.context != "per_position":
        raise TwinrunError(
            "algorithm.estimator: 'gigpo' is replayed with curator.context per_position only (the accumulated "
            "sequence's per-turn token spans are not recorded; fix: --set curator.context=per_position)"
        )


def load_replay(path: str | Path, spec: Any, *, steps: int | None = None) -> list[ReplayStep]:
    """The first ``steps`` recorded training steps of ``path`` (a run's rollouts.jsonl) as replay batches.

    ``spec`` (ExperimentSpec) must describe the recorded batch shape (groups per step x rollouts per group);
    its ``algorithm`` gives the advantages. Raises TwinrunError (one line: file, field, fix) when the file
    cannot drive a replay: no token ids recorded, a different batch shape, too few steps."""
    check_replayable(spec)
    p = Path(path)
    if not p.is_file():
        raise TwinrunError(f"--rollouts: {p} does not exist (fix: a training run's rollouts.jsonl)")
    by_step: dict[int, list[dict[str, Any]]] = {}
    for row in read_jsonl(p):
        if row.get("kind") != "curation_rollout":
            continue
        by_step.setdefault(int(row["step"]), []).append(row)
    if not by_step:
        raise TwinrunError(f"{p}: no curation_rollout rows (fix: the rollouts.jsonl of a training run)")
    want = spec.batch.groups_per_step * spec.batch.rollouts_per_group
    recorded = sorted(by_step)
    n = len(recorded) if steps is None else steps
    if n > len(recorded) or recorded[:n] != list(range(n)):
        raise TwinrunError(
            f"{p}: holds training steps {recorded}, need 0..{n - 1} (fix: fewer --steps, or a longer run)"
        )
    return [_step(p, s, by_step[s], spec, want) for s in range(n)]


def _step(path: Path, step: int, rows: list[dict[str, Any]], spec: Any, want: int) -> ReplayStep:
    if len(rows) != want:
        raise TwinrunError(
            f"{path}: step {step} holds {len(rows)} rollouts, the spec's batch makes {want} "
            f"(batch.groups_per_step x batch.rollouts_per_group; fix: the spec the run was trained with)"
        )
    rows = sorted(rows, key=lambda r: (int(r["group_index"]), int(r["rollout_index"])))
    per_group = spec.batch.rollouts_per_group
    for start in range(0, want, per_group):
        block = rows[start:start + per_group]
        if len({r["group_id"] for r in block}) != 1 or [int(r["rollout_index"]) for r in block] != list(range(per_group)):
            raise TwinrunError(
                f"{path}: step {step} rows {start}..{start + per_group - 1} are not one task group's rollouts "
                f"0..{per_group - 1} (fix: batch.rollouts_per_group must match the run)"
            )
    if spec.curator.context == "per_position":
        return ReplayStep(step=step, rows=_position_rows(path, step, rows, spec))
    seqs = [_sequence(path, step, r) for r in rows]
    rewards = [_reward(r) for r in rows]
    valid = [all(not p.get("no_valid_call", False) for p in r.get("positions", [])) for r in rows]
    adv = compute_advantages(
        spec.algorithm, np.array([np.nan if x is None else x for x in rewards], dtype=float),
        np.array([r["group_id"] for r in rows], dtype=object), valid=np.array(valid, dtype=bool),
    )
    out = tuple(
        ReplayRow(group_id=str(r["group_id"]), rollout_index=int(r["rollout_index"]),
                  prompt_ids=tuple(s.prompt_ids), completion_ids=tuple(s.completion_ids),
                  completion_mask=tuple(s.completion_mask), reward=x, advantage=float(a))
        for r, s, x, a in zip(rows, seqs, rewards, adv, strict=True)
    )
    return ReplayStep(step=step, rows=out)


def _position_rows(path: Path, step: int, rows: list[dict[str, Any]], spec: Any) -> tuple[ReplayRow, ...]:
    """per_position: |G| rows per rollout with core's per-row advantages (the call both backends make)."""
    g = spec.environment.group_size
    gg = spec.algorithm.gigpo
    gigpo = spec.algorithm.estimator == "gigpo"
    scores, seqs, rewards = [], [], []
    for r in rows:
        where = f"{path}: step {step} group {r.get('group_id')} rollout {r.get('rollout_index')}"
        if len(r["positions"]) != g:
            raise TwinrunError(f"{where}: {len(r['positions'])} positions, the spec's environment.group_size is {g} "
                               "(fix: the spec the run was trained with)")
        seqs += _sequences(path, step, r, g)
        total = _reward(r)
        rewards += [total] * g
        anchors = record_anchors(r, gg.anchor, gg.anchor_match) if gigpo else list(r.get("anchors") or [None] * g)
        scores += rollout_rows(str(r["group_id"]), f"{r['group_id']}#{r['rollout_index']}", total=total,
                               step_rewards=(r.get("step_rewards") or []) if total is not None else [],
                               anchors=anchors, position_valid=[not p.get("no_valid_call", False) for p in r["positions"]])
    adv = row_advantages(spec.algorithm, scores)
    return tuple(
        ReplayRow(group_id=sc.group_id, rollout_index=int(sc.rollout.rsplit("#", 1)[1]), prompt_ids=tuple(s.prompt_ids),
                  completion_ids=tuple(s.completion_ids), completion_mask=tuple(s.completion_mask), reward=x,
                  advantage=float(a), position=sc.position)
        for sc, s, x, a in zip(scores, seqs, rewards, adv, strict=True)
    )


def _sequence(path: Path, step: int, row: dict[str, Any]) -> SequenceTokens:
    return _sequences(path, step, row, 1)[0]


def _sequences(path: Path, step: int, row: dict[str, Any], want: int) -> list[SequenceTokens]:
    """The rollout's recorded training sequences: ``want`` of them (1 accumulated, |G| per_position)."""
    seqs = row.get("sequences")
    where = f"{path}: step {step} group {row.get('group_id')} rollout {row.get('rollout_index')}"
    if not seqs:
        raise TwinrunError(
            f"{where}: no 'sequences' (token ids) recorded (fix: a run trained with this twinrun version; older "
            "rollouts.jsonl files do not record tokens)"
        )
    if len(seqs) != want:
        shape = "per_position: one per position" if want > 1 else "accumulated: one per rollout"
        raise TwinrunError(f"{where}: {len(seqs)} sequences recorded, the spec's curator.context wants {want} ({shape}; "
                           "fix: the spec's curator.context must be the one the run was trained with)")
    out = []
    for i, raw in enumerate(seqs):
        try:
            seq = SequenceTokens.model_validate(raw)
        except ValueError as e:
            raise TwinrunError(f"{where}: sequences[{i}] is malformed ({str(e).splitlines()[-1].strip()})") from None
        if not seq.prompt_ids or not any(seq.completion_mask):
            raise TwinrunError(f"{where}: sequences[{i}]: an empty prompt or no curator token (fix: a run whose "
                               "curator generated)")
        out.append(seq)
    return out


def _reward(row: dict[str, Any]) -> float | None:
    total = (row.get("reward") or {}).get("total")
    if total is None:
        return None
    value = float(total)
    return value if math.isfinite(value) else None


def describe(steps: Sequence[ReplayStep]) -> str:
    """One line: what is being replayed (for the console)."""
    rows = [r for s in steps for r in s.rows]
    toks = sum(len(r.completion_ids) for r in rows)
    loss = sum(r.loss_tokens for r in rows)
    per_position = bool(rows) and rows[0].position is not None
    unit = "rows (one per rollout and position)" if per_position else "rollouts"
    return (f"{len(steps)} step(s) x {len(steps[0].rows) if steps else 0} {unit}, {toks} completion tokens "
            f"({loss} curator tokens carry the loss)")


def ratio_stats(log_ratio: Any) -> dict[str, float | int]:
    """Summary of the per-token log-ratios ``log pi_theta - log pi_old`` a trainer saw on its loss tokens
    (float array of any shape, already restricted to loss tokens): count, mean ratio, min/max ratio, max |log ratio|."""
    x = np.asarray(log_ratio, dtype=np.float64).ravel()
    if x.size == 0:
        return {"tokens": 0, "ratio_mean": math.nan, "ratio_min": math.nan, "ratio_max": math.nan, "abs_log_max": math.nan}
    r = np.exp(x)
    return {"tokens": int(x.size), "ratio_mean": float(r.mean()), "ratio_min": float(r.min()),
            "ratio_max": float(r.max()), "abs_log_max": float(np.abs(x).max())}


def merge_ratio_stats(parts: Sequence[dict[str, Any]]) -> dict[str, float | int]:
    """Combine :func:`ratio_stats` of micro-batches into the stats of their union."""
    parts = [p for p in parts if p.get("tokens")]
    if not parts:
        return ratio_stats([])
    n = sum(int(p["tokens"]) for p in parts)
    return {"tokens": n, "ratio_mean": sum(p["ratio_mean"] * p["tokens"] for p in parts) / n,
            "ratio_min": min(p["ratio_min"] for p in parts), "ratio_max": max(p["ratio_max"] for p in parts),
            "abs_log_max": max(p["abs_log_max"] for p in parts)}
