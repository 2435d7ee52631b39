"""Recorded rollouts as replay batches: what `twinrun parity` feeds both trainers (pure python + numpy).

A training run's ``rollouts.jsonl`` holds, per curation rollout, the token ids the backend trained on
(``sequences``, records.SequenceTokens), its reward and its task group. :func:`load_replay` turns the file into
one :class:`ReplayStep` per recorded training step: the rollouts in the layout both frameworks use (task groups
in sampler order, each group's rollouts contiguous, by rollout index), each with the advantage core's
``compute_advantages`` gives it under the spec's ``algorithm`` (the same call both backends make in training).
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
from twinrun.core.errors import TwinrunError
from twinrun.core.records import SequenceTokens, read_jsonl


@dataclass(frozen=True)
class ReplayRow:
    """One recorded curation rollout, ready to train on."""

    group_id: str
    rollout_index: int
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    completion_mask: tuple[int, ...]  # 1 = curator token (carries the loss), 0 = tool result
    reward: float | None  # None = unmeasured (advantage 0)
    advantage: float

    @property
    def loss_tokens(self) -> int:
        return int(sum(self.completion_mask))


@dataclass(frozen=True)
class ReplayStep:
    """One recorded training step: ``rows`` in group-contiguous order (what TRL's sampler and verl's
    ``rollout.n`` produce)."""

    step: int  # core's 0-based task-group step
    rows: tuple[ReplayRow, ...]

    @property
    def group_ids(self) -> list[str]:
        return [r.group_id for r in self.rows]


def check_replayable(spec: Any) -> None:
    """`twinrun parity` replays one accumulated sequence per rollout; a per_position spec is refused (one line)."""
    if spec.curator.context != "accumulated":
        raise TwinrunError(
            f"curator.context: {spec.curator.context!r} is not replayed by `twinrun parity` (it replays one "
            "accumulated sequence per rollout; fix: --set curator.context=accumulated)"
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
    if spec.algorithm.estimator == "gigpo":
        raise TwinrunError(
            "algorithm.estimator: 'gigpo' is not replayed (its per-position token spans are not recorded; fix: "
            "grpo, dr_grpo or rloo for `twinrun parity`)"
        )
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


def _sequence(path: Path, step: int, row: dict[str, Any]) -> SequenceTokens:
    seqs = row.get("sequences")
    where = f"{path}: step {step} group {row.get('group_id')} rollout {row.get('rollout_index')}"
    if not seqs:
        raise TwinrunError(
            f"{where}: no 'sequences' (token ids) recorded (fix: a run trained with this twinrun version; older "
            "rollouts.jsonl files do not record tokens)"
        )
    if len(seqs) != 1:
        raise TwinrunError(f"{where}: {len(seqs)} sequences per rollout; replay handles one (accumulated context)")
    try:
        seq = SequenceTokens.model_validate(seqs[0])
    except ValueError as e:
        raise TwinrunError(f"{where}: sequences[0] is malformed ({str(e).splitlines()[-1].strip()})") from None
    if not seq.prompt_ids or not any(seq.completion_mask):
        raise TwinrunError(f"{where}: an empty prompt or no curator token (fix: a run whose curator generated)")
    return seq


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
    return (f"{len(steps)} step(s) x {len(steps[0].rows) if steps else 0} rollouts, {toks} completion tokens "
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
