"""GiGPO anchors for a curator: which (rollout, position) decisions share a step-level baseline.

GiGPO (Feng et al. 2025) compares the returns of steps taken from the same anchor state. verl-agent anchors on the
environment's current observation, never on the policy's whole input. For a curator, the policy input chi_i holds
each rollout's own trajectory and repo, so anchoring on it (``exact_input``) makes nearly every step group a
singleton, A^S = 0 and GiGPO collapses to episode-level GRPO. The anchor kinds (``algorithm.gigpo.anchor``):

* ``position_outcome`` (default): (task group, position i, the game of position i, the correctness signal the
  curator read at i). Everything in it is fixed before the curator acts at i, and none of it is the curator's own
  context (no trajectory text, no repo, no history window), so it adds no bias to the baseline.
* ``position``: (task group, position i, its game): the ablation without the outcome.
* ``exact_input``: sha256 of the exact curator input chi_i (twinrun's earlier anchor; diagnostics).

``algorithm.gigpo.anchor_match: similarity`` (with ``exact_input``) clusters the *texts* of the curator inputs
(difflib ratio >= ``similarity``, verl-agent's rule), so the estimator receives the text, not its hash, and the
records keep it. The task group is not in the key: core's estimator only groups rows of the same task group.

Records (rollouts.jsonl) keep, per position, the recorded ``anchor`` and what any kind is built from (``index``,
``game_id``, ``correctness``, ``input_digest``; ``curator_input`` under similarity), so :func:`record_anchors` can
re-key a saved run offline (``twinrun advdiff --anchor``), and :func:`anchor_stats` gives the per-step
``anchor_singleton_share`` and ``step_adv_nonzero_share`` both backends log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from twinrun.core.errors import TwinrunError

AnchorKind = Literal["position_outcome", "position", "exact_input"]
ANCHOR_KINDS: tuple[str, ...] = ("position_outcome", "position", "exact_input")
NONZERO = 1e-9  # |A^S| above this counts as a non-zero step advantage


class AnchorError(TwinrunError, ValueError):
    """An anchor that cannot be built (unknown kind, a record without what the kind needs)."""


def anchor_key(kind: str, *, position: int, game_id: str, correctness: str, input_digest: str) -> str:
    """The exact-match anchor of one position under ``kind`` (a short string; equal strings = one step group)."""
    if kind == "position_outcome":
        return f"p{position}|{game_id}|{correctness}"
    if kind == "position":
        return f"p{position}|{game_id}"
    if kind == "exact_input":
        return input_digest
    raise AnchorError(f"algorithm.gigpo.anchor: {kind!r} is not an anchor (fix: one of {', '.join(ANCHOR_KINDS)})")


def estimator_anchor(key: str, curator_input: str | None, match: str) -> str:
    """What the estimator groups on: the key (exact matching) or the curator input text (similarity)."""
    if match == "similarity":
        if curator_input is None:
            raise AnchorError("anchor_match: similarity needs the curator input text (fix: anchor: exact_input)")
        return curator_input
    return key


def record_anchors(record: Mapping[str, Any], kind: str | None = None, match: str = "exact") -> list[str | None]:
    """The anchors of one rollouts.jsonl row (core.curation.CurationRecord as a dict): as recorded (``kind`` None)
    or re-keyed to ``kind``; under ``match="similarity"`` the curator input texts.

    Rows written before the correctness signal and input hash were recorded read the ground-truth outcome (what
    the curator was then shown) and the recorded anchor (then the input hash)."""
    out: list[str | None] = []
    for p in record["positions"]:
        if match == "similarity":
            text = p.get("curator_input")
            if text is None:
                raise AnchorError(
                    f"anchor_match similarity: rollout {record.get('group_id')}/r{record.get('rollout_index')} has no "
                    "curator_input texts (fix: train with algorithm.gigpo.anchor_match=similarity to record them)"
                )
            out.append(text)
        elif kind is None:
            out.append(p.get("anchor"))
        else:
            out.append(anchor_key(kind, position=int(p["index"]), game_id=str(p["game_id"]),
                                  correctness=str(p.get("correctness") or p.get("outcome")),
                                  # runs recorded before stop 23 named the digest input_hash
                                  input_digest=str(p.get("input_digest") or p.get("input_hash") or p.get("anchor"))))
    return out


@dataclass(frozen=True)
class StepRows:
    """One row per (rollout, position) of a set of rollouts.jsonl rows; all arrays [B], rollouts in input order."""

    group_ids: list[str]  # "<group_id>@<step>"
    traj_ids: list[str]  # "<group>/r<rollout_index>"
    step_index: np.ndarray  # int64, the 1-based position
    step_rewards: np.ndarray  # float64, NaN for every row of an unmeasured rollout
    anchors: list[str | None]
    valid: np.ndarray  # bool: the turn applied a valid operation

    def __len__(self) -> int:
        return len(self.group_ids)


def step_rows(records: Iterable[Mapping[str, Any]], *, kind: str | None = None, match: str = "exact") -> StepRows:
    """GiGPO's rows from rollouts.jsonl rows (what the backends hand the estimator, rebuilt from the records)."""
    groups: list[str] = []
    trajs: list[str] = []
    steps: list[int] = []
    rewards: list[float] = []
    anchors: list[str | None] = []
    valid: list[bool] = []
    for rec in records:
        group = f"{rec['group_id']}@{rec['step']}"
        traj = f"{group}/r{rec['rollout_index']}"
        positions = rec["positions"]
        measured = rec["reward"]["total"] is not None
        srs = rec["step_rewards"]
        if measured and len(srs) != len(positions):
            raise AnchorError(f"rollout {traj}: {len(srs)} step rewards for {len(positions)} positions "
                              "(fix: a rollouts.jsonl row written by twinrun train)")
        anchors.extend(record_anchors(rec, kind, match))
        for i, p in enumerate(positions):
            groups.append(group)
            trajs.append(traj)
            steps.append(int(p.get("index", i + 1)))
            rewards.append(float(srs[i]) if measured else np.nan)
            valid.append(not p.get("no_valid_call", False))
    return StepRows(groups, trajs, np.asarray(steps, dtype=np.int64), np.asarray(rewards, dtype=np.float64),
                    anchors, np.asarray(valid, dtype=bool))


def anchor_stats(cfg: Any, rows: StepRows) -> dict[str, float | int | None]:
    """How much step-level signal GiGPO gets from these rows under ``cfg`` (a gigpo EstimatorConfig).

    Returns ``anchor_singleton_share`` (measured rows alone in their step group: A^S = 0 there by construction),
    ``step_adv_nonzero_share`` (measured rows with |A^S| > 1e-9) and ``measured_rows``; shares are None without a
    measured row."""
    from twinrun.core.advantages import anchor_groups, gigpo

    measured = ~np.isnan(rows.step_rewards)
    n = int(measured.sum())
    if not n:
        return {"anchor_singleton_share": None, "step_adv_nonzero_share": None, "measured_rows": 0}
    anchors = np.empty(len(rows), dtype=object)
    anchors[:] = rows.anchors
    codes = anchor_groups(anchors, rows.group_ids, anchor_match=cfg.anchor_match, similarity=cfg.similarity,
                          rows=measured)
    size = np.bincount(codes[measured])
    singleton = size[codes[measured]] == 1
    _, _, a_s = gigpo(rows.step_rewards, rows.group_ids, rows.traj_ids, rows.step_index, anchors, gamma=cfg.gamma,
                      step_weight=cfg.step_weight, mode=cfg.gigpo_mode, anchor_match=cfg.anchor_match,
                      similarity=cfg.similarity, pool=cfg.pool, invalid=~rows.valid,
                      invalid_penalty=cfg.invalid_penalty, eps=cfg.eps, episode_singleton=cfg.singleton,
                      step_singleton=cfg.step_singleton)
    return {"anchor_singleton_share": float(singleton.mean()),
            "step_adv_nonzero_share": float((np.abs(a_s[measured]) > NONZERO).mean()), "measured_rows": n}


__all__ = ["ANCHOR_KINDS", "AnchorError", "AnchorKind", "StepRows", "anchor_key", "anchor_stats", "estimator_anchor",
           "record_anchors", "step_rows"]
