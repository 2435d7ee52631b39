"""twinrun's advantage estimators inside verl's registry (``twinrun_grpo``, ``twinrun_dr_grpo``, ``twinrun_rloo``,
``twinrun_gigpo``), all computed by `twinrun.core.advantages.compute_advantages`.

verl hands a registered estimator only ``token_level_rewards[B,T]``, ``response_mask[B,T]``, ``config`` (the
``algorithm`` section) and ``index`` (the rollout's ``uid``). Everything else core needs travels inside the uid:
the curator agent loop (agent_loop.py) tags each rollout as ``"<prompt uid>|<json>"`` with

- ``m``: measured (0 = the rollout's reward is unmeasured: it leaves every statistic and gets advantage 0;
  verl itself would take its placeholder 0.0 reward at face value),
- ``r``: per-position step rewards (their sum is the rollout reward; GiGPO's step returns),
- ``a``: per-position anchors (hash of the curator input chi_i; GiGPO's step groups),
- ``v``: per-position "the curator turn made a valid call" (``algorithm.invalid_penalty``),
- ``s``: per curator turn (run of ``response_mask == 1``), the 1-based positions whose advantage its tokens carry
  (core's rule, `twinrun.core.curation.policy_input.segment_positions`, shared with the TRL backend: the positions its ``curate``
  calls applied to; a turn whose calls reached no position, e.g. the closing reply, carries the pending one),
- ``e``/``u``: executor episodes the rollout played / of which unmeasured, ``t``: positions played without a
  curator turn: the estimator sees the whole step before the update, so it applies core's step gates there
  (`twinrun.core.advantages.step_health`: ``executor.max_unmeasured_share`` raises InfrastructureError,
  ``curator.max_missing_turn_share`` MissingTurnsError), aborting the run before an update on too little.

A row's curator turns are the runs of ``response_mask == 1`` (observations between them are masked 0); GiGPO writes
on each run the mean advantage of its positions (``s``); outcome estimators write one advantage on all its tokens.
The spec's ``algorithm`` knobs reach the estimator as ``algorithm.twinrun`` (see `estimator_overrides`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from twinrun.core.advantages.training_rows import RowScore, row_advantages

logger = logging.getLogger(__name__)

ESTIMATORS = ("grpo", "dr_grpo", "rloo", "gigpo")
PREFIX = "twinrun_"
KNOBS_KEY = "twinrun"  # algorithm.twinrun: the spec's AlgorithmSpec knobs (minus estimator / loss aggregation)
SEP = "|"


def registered_name(estimator: str) -> str:
    return PREFIX + estimator


HEALTH_KEYS = ("max_unmeasured_share", "max_missing_turn_share")  # core's step gates, carried with the knobs


def estimator_overrides(spec: Any) -> dict[str, Any]:
    """Hydra overrides that select a twinrun estimator and hand it the spec's knobs (pure python, flat keys so
    `twinrun plan` shows each one). ``spec``: `ExperimentSpec`. The ``+`` adds keys verl's schema lacks."""
    knobs = spec.algorithm.model_dump(mode="json")
    knobs.pop("estimator", None)
    knobs.pop("loss_aggregation", None)  # a loss knob, not an advantage knob
    knobs.update({f"gigpo.{k}": v for k, v in knobs.pop("gigpo").items()})  # flat: +algorithm.twinrun.gigpo.<knob>
    knobs[HEALTH_KEYS[0]] = spec.executor.max_unmeasured_share
    knobs[HEALTH_KEYS[1]] = spec.curator.max_missing_turn_share
    out: dict[str, Any] = {"algorithm.adv_estimator": registered_name(spec.algorithm.estimator)}
    out.update({f"+algorithm.{KNOBS_KEY}.{k}": v for k, v in knobs.items()})
    return out


# ------------------------------------------------------------------------------------------------------------
# The rollout tag carried in the uid


@dataclass
class RolloutTag:
    """What a curation rollout tells the estimator (one per verl row)."""

    measured: bool = True
    step_rewards: list[float] = field(default_factory=list)
    anchors: list[str | None] = field(default_factory=list)
    valid: list[bool] = field(default_factory=list)
    episodes: int = 0
    unmeasured: int = 0
    segments: list[list[int]] = field(default_factory=list)
    turns_missing: int = 0
    group_id: str | None = None  # core's task group id (rows.jsonl)
    rollout: int | None = None  # the rollout's index in its group (verl's session id)
    position: int | None = None  # per_position rows: the row's position 1..|G| (None: one row per rollout)

    def to_json(self) -> str:
        d: dict[str, Any] = {
            "m": int(self.measured), "r": [float(x) for x in self.step_rewards], "a": self.anchors,
            "v": [int(bool(x)) for x in self.valid], "e": int(self.episodes), "u": int(self.unmeasured),
            "s": [[int(p) for p in seg] for seg in self.segments], "t": int(self.turns_missing)}
        for key, value in (("g", self.group_id), ("k", self.rollout), ("p", self.position)):
            if value is not None:
                d[key] = value
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> RolloutTag:
        d = json.loads(text)
        return cls(measured=bool(d.get("m", 1)), step_rewards=[float(x) for x in d.get("r", [])],
                   anchors=list(d.get("a", [])), valid=[bool(x) for x in d.get("v", [])],
                   episodes=int(d.get("e", 0)), unmeasured=int(d.get("u", 0)),
                   segments=[[int(p) for p in seg] for seg in d.get("s", [])], turns_missing=int(d.get("t", 0)),
                   group_id=d.get("g"), rollout=None if d.get("k") is None else int(d["k"]),
                   position=None if d.get("p") is None else int(d["p"]))


def encode_uid(group_uid: str, tag: RolloutTag) -> str:
    if SEP in str(group_uid):
        raise ValueError(f"uid {group_uid!r} already contains {SEP!r} (fix: tag a rollout once)")
    return f"{group_uid}{SEP}{tag.to_json()}"


def decode_uid(uid: Any) -> tuple[str, RolloutTag | None]:
    """``"<group>|<json>"`` -> (group, tag); a plain uid -> (uid, None)."""
    text = str(uid)
    group, sep, rest = text.partition(SEP)
    return (group, RolloutTag.from_json(rest)) if sep else (group, None)


# ------------------------------------------------------------------------------------------------------------
# The estimators


def _knobs(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    block = config.get(KNOBS_KEY, None) if hasattr(config, "get") else getattr(config, KNOBS_KEY, None)
    if block is None:
        return {}
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(block):
            block = OmegaConf.to_container(block, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf ships with verl
        pass
    return dict(block)


def _estimator_config(estimator: str, config: Any) -> tuple[Any, dict[str, float]]:
    """(core EstimatorConfig, the step gates' limits) from ``algorithm.twinrun``."""
    from twinrun.core.advantages import estimator_config
    from twinrun.core.spec import AlgorithmSpec

    knobs = _knobs(config)
    gates = {k: float(knobs.pop(k)) for k in HEALTH_KEYS if knobs.get(k) is not None}
    gigpo = dict(knobs.pop("gigpo", None) or {})  # hydra nests +algorithm.twinrun.gigpo.<knob>; a plain dict may not
    gigpo.update({k.removeprefix("gigpo."): knobs.pop(k) for k in [k for k in knobs if k.startswith("gigpo.")]})
    if gigpo:
        knobs["gigpo"] = gigpo
    return estimator_config(AlgorithmSpec(estimator=estimator, **knobs)), gates


def check_health(tags: list[RolloutTag], gates: dict[str, float]) -> None:
    """Core's step gates (`twinrun.core.advantages.step_health.check_step_health`) over the step's rollouts."""
    from twinrun.core.advantages.step_health import StepCounts, check_step_health

    counts = StepCounts(episodes=sum(t.episodes for t in tags), unmeasured=sum(t.unmeasured for t in tags),
                        positions=sum(len(t.step_rewards) for t in tags),
                        turns_missing=sum(t.turns_missing for t in tags))
    check_step_health(counts, **gates)


def turn_index(response_mask: Any) -> Any:
    """run[B,T]: the 0-based index of the curator turn (run of mask 1) each token belongs to; -1 on masked tokens.

    response_mask: int/bool tensor [B,T]."""
    import torch

    m = response_mask.bool()
    prev = torch.zeros_like(m)
    prev[:, 1:] = m[:, :-1]
    starts = m & ~prev
    run = torch.cumsum(starts.long(), dim=1) - 1
    return torch.where(m, run, torch.full_like(run, -1))


def _rows(token_level_rewards: Any, index: Any, estimator: str) -> tuple[list[str], list[RolloutTag], np.ndarray]:
    scores = token_level_rewards.sum(dim=-1).detach().cpu().double().numpy()
    n = scores.shape[0]
    if index is None:
        raise ValueError(f"{registered_name(estimator)}: no uid reached the estimator (fix: keep data 'uid')")
    groups, tags = [], []
    for i in range(n):
        g, tag = decode_uid(index[i])
        if tag is None:  # never guess ("measured, one position"): an unmeasured rollout would train as a failure
            raise ValueError(
                f"{registered_name(estimator)}: row {i} (uid {str(index[i])[:80]!r}) reached the estimator without "
                "its twinrun rollout tag (fix: keep the curator agent loop's uid, agent_loop.py; a dataset 'uid' or "
                "another agent loop replaced it)"
            )
        if tag.measured and tag.step_rewards and not np.isclose(sum(tag.step_rewards), scores[i], atol=1e-5):
            raise ValueError(
                f"{registered_name(estimator)}: row {i} step rewards sum to {sum(tag.step_rewards)!r} but its "
                f"token-level reward is {scores[i]!r} (fix: the agent loop must set reward_score = sum of step rewards)"
            )
        groups.append(g)
        tags.append(tag)
    return groups, tags, scores


def _one_per_rollout(groups: list[str], tags: list[RolloutTag]) -> dict[tuple[str, int | None], RolloutTag]:
    return {(g, t.rollout): t for g, t in zip(groups, tags, strict=True)}


def position_rows(groups: list[str], tags: list[RolloutTag], estimator: str = "grpo") -> list[RowScore]:
    """Core's facts about each per_position row from its tag. Every row must carry its (rollout, position), and
    every rollout must have exactly one row per position: a row without its tag, or a lost row, would silently
    change the statistics."""
    name = registered_name(estimator)
    rows: list[RowScore] = []
    seen: dict[str, list[int]] = {}
    sizes: dict[str, int] = {}
    for i, (g, t) in enumerate(zip(groups, tags, strict=True)):
        if t.position is None or t.rollout is None:
            raise ValueError(f"{name}: row {i} has no (rollout, position) tag in a per_position batch (fix: the "
                             "agent loop tags every row it returns)")
        g_size = len(t.step_rewards)
        if not 1 <= t.position <= g_size:
            raise ValueError(f"{name}: row {i} is position {t.position} of a {g_size}-position rollout")
        key = f"{g}#{t.rollout}"
        seen.setdefault(key, []).append(t.position)
        sizes[key] = g_size
        rows.append(RowScore(
            group_id=g, rollout=key, position=t.position, total=sum(t.step_rewards) if t.measured else None,
            step_reward=t.step_rewards[t.position - 1], anchor=(t.anchors + [None] * g_size)[t.position - 1],
            position_valid=bool((t.valid + [True] * g_size)[t.position - 1]),
            rollout_valid=all(t.valid) if t.valid else True,
        ))
    for key, positions in seen.items():
        expected = list(range(1, sizes[key] + 1))
        if sorted(positions) != expected:
            raise ValueError(f"{name}: rollout {key} has rows for positions {sorted(positions)}, not {expected} "
                             "(fix: one row per position; a lost or repeated row would change the statistics)")
    return rows


def compute_twinrun_advantage(estimator: str, token_level_rewards: Any, response_mask: Any, config: Any = None,
                              index: Any = None, **_: Any) -> tuple[Any, Any]:
    """verl estimator body: (advantages[B,T], returns[B,T]) from core's `compute_advantages`."""
    import torch

    from twinrun.core.advantages import compute_advantages

    cfg, gates = _estimator_config(estimator, config)
    groups, tags, scores = _rows(token_level_rewards, index, estimator)
    n = len(groups)
    mask = response_mask.to(token_level_rewards.dtype)
    if any(t.position is not None for t in tags):  # per_position: one row per (rollout, position)
        check_health(list(_one_per_rollout(groups, tags).values()), gates)
        adv = row_advantages(cfg, position_rows(groups, tags, estimator))
        out = torch.as_tensor(adv, dtype=token_level_rewards.dtype, device=token_level_rewards.device)
        advantages = out.unsqueeze(-1) * mask
        return advantages, advantages
    check_health(tags, gates)

    if estimator != "gigpo":
        rewards = np.where([t.measured for t in tags], scores, np.nan)
        valid = np.array([all(t.valid) if t.valid else True for t in tags])
        adv = compute_advantages(cfg, rewards, np.array(groups, dtype=object), valid=valid)
        out = torch.as_tensor(adv, dtype=token_level_rewards.dtype, device=token_level_rewards.device)
        advantages = out.unsqueeze(-1) * mask
        return advantages, advantages

    # GiGPO: one row per (rollout, position)
    lengths = np.array([len(t.step_rewards) for t in tags])
    traj = np.repeat(np.arange(n), lengths)
    step = np.concatenate([np.arange(k) for k in lengths]) if n else np.zeros(0, int)
    step_rewards = np.concatenate([np.asarray(t.step_rewards, float) for t in tags]) if n else np.zeros(0)
    anchors = np.empty(len(traj), dtype=object)
    anchors[:] = [a for t in tags for a in (t.anchors + [None] * (len(t.step_rewards) - len(t.anchors)))]
    valid = np.array([v for t in tags for v in (t.valid + [True] * (len(t.step_rewards) - len(t.valid)))], bool)
    totals = np.array([sum(t.step_rewards) if t.measured else np.nan for t in tags])
    group_rows = np.array(groups, dtype=object)[traj]
    adv_rows = compute_advantages(cfg, totals[traj], group_rows, traj_ids=traj, step_index=step, anchors=anchors,
                                  step_rewards=step_rewards, valid=valid)

    # scatter: token t of row b belongs to curator turn run[b,t], which carries the mean of its positions
    per_position = np.zeros((n, max(int(lengths.max()) if n else 0, 1)))
    per_position[traj, step] = adv_rows
    run = turn_index(response_mask)
    n_runs = (run.max(dim=1).values + 1).tolist() if n else []
    width = max([1, *n_runs])
    table = np.zeros((n, width))
    for b, tag in enumerate(tags):
        segments = tag.segments or [[min(j + 1, int(lengths[b]))] for j in range(n_runs[b])]
        if n_runs[b] > len(segments):
            raise ValueError(
                f"twinrun_gigpo: row {b} has {n_runs[b]} curator turns but positions for {len(segments)} "
                "(fix: the agent loop tags every turn it generates)"
            )
        for j in range(n_runs[b]):
            ps = [p for p in segments[j] if 1 <= p <= lengths[b]]
            table[b, j] = float(np.mean(per_position[b, [p - 1 for p in ps]])) if ps else 0.0
    t = torch.as_tensor(table, dtype=token_level_rewards.dtype, device=token_level_rewards.device)
    advantages = torch.gather(t, 1, run.clamp(min=0)) * mask
    return advantages, advantages


def register_estimators() -> list[str]:
    """Register the four estimators in verl's ADV_ESTIMATOR_REGISTRY (idempotent); returns their names."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

    names = []
    for est in ESTIMATORS:
        name = registered_name(est)
        names.append(name)
        current = ADV_ESTIMATOR_REGISTRY.get(name)
        if current is not None and getattr(current, "_twinrun", False):
            continue

        def fn(token_level_rewards: Any, response_mask: Any, config: Any = None, index: Any = None,
               _est: str = est, **kwargs: Any) -> tuple[Any, Any]:
            return compute_twinrun_advantage(_est, token_level_rewards, response_mask, config, index, **kwargs)

        fn.__name__ = f"compute_{name}_advantage"
        fn._twinrun = True  # type: ignore[attr-defined]
        if current is not None:  # a stale registration (module reloaded): replace it rather than raise
            del ADV_ESTIMATOR_REGISTRY[name]
        register_adv_est(name)(fn)
    return names
