"""Estimator configurations, each framework's semantics as a named preset, and the one entry point both backends
call (:func:`compute_advantages`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from twinrun.core.advantages.arrays import (
    AdvantageInputError,
    AnchorMatch,
    GigpoMode,
    Pool,
    Scale,
    Singleton,
    _as_float,
    _codes,
)
from twinrun.core.advantages.estimators import gigpo, group_normalize, rloo

if TYPE_CHECKING:  # the spec module imports pydantic only; kept out of the runtime import graph of the math
    from twinrun.core.spec import AlgorithmSpec


@dataclass(frozen=True)
class EstimatorConfig:
    """Every knob that decides an advantage; a preset is one instance, a spec maps to one instance.

    ``scale``/``singleton``/``pool`` apply to grpo, dr_grpo and rloo (and ``singleton``/``pool`` to GiGPO's
    episode level); ``gigpo_mode`` replaces ``scale`` for GiGPO (``mean_std_norm`` = group std at both levels)."""

    estimator: Literal["grpo", "dr_grpo", "rloo", "gigpo"]
    scale: Scale = "group"
    eps: float = 1e-6
    ddof: int = 1
    singleton: Singleton = "zero"
    pool: Pool = "trajectory"
    gamma: float = 1.0
    step_weight: float = 1.0
    gigpo_mode: GigpoMode = "mean_norm"
    anchor_match: AnchorMatch = "exact"
    similarity: float = 0.95
    step_singleton: Singleton = "zero"
    invalid_penalty: float = 0.0

    def knobs(self) -> dict[str, Any]:
        """The knobs that matter for this estimator (what `advdiff` and run records print)."""
        d = asdict(self)
        if self.estimator == "gigpo":
            d.pop("scale")
            d["episode_singleton"] = d.pop("singleton")
            d["episode_pool"] = d.pop("pool")
            if self.anchor_match == "exact":
                d.pop("similarity")
            return d
        for k in ("gamma", "step_weight", "gigpo_mode", "anchor_match", "similarity", "step_singleton"):
            d.pop(k)
        if self.estimator in ("dr_grpo", "rloo"):
            d.pop("scale")
            d.pop("eps")
        if self.estimator == "rloo":
            d.pop("ddof")
        return d


@dataclass(frozen=True)
class Preset:
    name: str
    config: EstimatorConfig
    description: str
    source: str


def _presets() -> dict[str, Preset]:
    P = Preset
    E = EstimatorConfig
    ps = [
        P("trl", E("grpo", scale="group", eps=1e-4, singleton="zero", pool="trajectory"),
          "TRL GRPOTrainer default: group mean, group nanstd (Bessel), +1e-4; unscorable (NaN) -> 0",
          "trl 1.16.0 GRPOTrainer._generate_and_score_completions, sum_then_normalize, scale_rewards='group'"),
        P("trl_batch", E("grpo", scale="batch", eps=1e-4, singleton="zero", pool="trajectory"),
          "TRL scale_rewards='batch': group mean, std of the whole generation batch, +1e-4",
          "trl 1.16.0 GRPOTrainer._generate_and_score_completions, scale_rewards='batch'"),
        P("trl_none", E("grpo", scale="none", eps=1e-4, singleton="zero", pool="trajectory"),
          "TRL scale_rewards='none': group mean only",
          "trl 1.16.0 GRPOTrainer._generate_and_score_completions, scale_rewards='none'"),
        P("verl", E("grpo", scale="group", eps=1e-6, singleton="mean0_std1", pool="trajectory"),
          "verl GRPO: group mean, torch.std (Bessel), +1e-6; a group of one passes its raw score (/(1+1e-6))",
          "verl 0.9.1 core_algos.compute_grpo_outcome_advantage, norm_adv_by_std_in_grpo=True"),
        P("verl_dr_grpo", E("grpo", scale="none", eps=1e-6, singleton="mean0_std1", pool="trajectory"),
          "verl GRPO without std (Dr.GRPO); a group of one passes its raw score",
          "verl 0.9.1 core_algos.compute_grpo_outcome_advantage, norm_adv_by_std_in_grpo=False"),
        P("verl_rloo", E("rloo", singleton="raw", pool="trajectory"),
          "verl RLOO: n/(n-1)(s - mean); a group of one passes its raw score",
          "verl 0.9.1 core_algos.compute_rloo_outcome_advantage"),
        P("verl_agent_gigpo",
          E("gigpo", eps=1e-6, singleton="mean0_std1", pool="rows", gamma=1.0, step_weight=1.0,
            gigpo_mode="mean_norm", anchor_match="exact", step_singleton="zero", invalid_penalty=0.1),
          "verl-agent GiGPO config defaults: episode stats pooled over step rows, exact anchors, step group of one "
          "-> 0, mean_norm, gamma 1, omega 1, invalid-action penalty 0.1 (on by default)",
          "verl-agent gigpo/core_gigpo.py + ppo_trainer.yaml algorithm.gigpo.*, actor.invalid_action_penalty_coef"),
        P("verl_agent_gigpo_alfworld",
          E("gigpo", eps=1e-6, singleton="mean0_std1", pool="rows", gamma=0.95, step_weight=1.0,
            gigpo_mode="mean_std_norm", anchor_match="exact", step_singleton="zero", invalid_penalty=0.1),
          "verl-agent's ALFWorld example: as verl_agent_gigpo with mean_std_norm and gamma 0.95",
          "verl-agent examples/gigpo_trainer/run_alfworld.sh"),
        P("twinrun_paper", E("grpo", scale="none", eps=1e-6, singleton="zero", pool="trajectory"),
          "SkillOS paper text: A_n = r_n - mean of the group, no std; a group of one (after unmeasured) -> 0",
          "SkillOS (arXiv:2605.06614) §3.2.3 as transcribed in skillos docs/skillos_paper.md"),
    ]
    return {p.name: p for p in ps}


PRESETS: dict[str, Preset] = _presets()


def estimator_config(algo: AlgorithmSpec) -> EstimatorConfig:
    """The EstimatorConfig a spec's ``algorithm`` section means.

    Knobs the spec does not carry are twinrun's choices (DIVERGENCES.md): a group left with one measured rollout
    gets advantage 0 at every level (``singleton="zero"``: there is no baseline to compare it with); statistics are
    per trajectory (``pool="trajectory"``; for GiGPO this is the paper's Eq. 3, not verl-agent's row pooling);
    Bessel std."""
    est = algo.estimator
    if est == "dr_grpo":
        return EstimatorConfig("dr_grpo", scale="none", eps=algo.eps, invalid_penalty=algo.invalid_penalty)
    if est == "gigpo":
        g = algo.gigpo
        return EstimatorConfig(
            "gigpo", eps=algo.eps, singleton="zero", pool=g.episode_pool, gamma=g.gamma,
            step_weight=g.step_weight, gigpo_mode=g.mode, anchor_match=g.anchor_match,
            similarity=g.similarity, step_singleton=g.anchor_singleton, invalid_penalty=algo.invalid_penalty,
        )
    return EstimatorConfig(est, scale=algo.scale, eps=algo.eps, invalid_penalty=algo.invalid_penalty)


def _outcome(cfg: EstimatorConfig, scores: np.ndarray, group_ids: Any, traj_ids: Any) -> np.ndarray:
    pool = cfg.pool if traj_ids is not None else "rows"
    if cfg.estimator == "rloo":
        singleton = "raw" if cfg.singleton == "raw" else "zero"
        return rloo(scores, group_ids, singleton=singleton, pool=pool, traj_ids=traj_ids)
    scale = "none" if cfg.estimator == "dr_grpo" else cfg.scale
    eps = 0.0 if scale == "none" else cfg.eps
    return group_normalize(
        scores, group_ids, scale=scale, eps=eps, ddof=cfg.ddof, singleton=cfg.singleton, pool=pool, traj_ids=traj_ids
    )


def compute_advantages(
    algo: AlgorithmSpec | EstimatorConfig,
    rewards: Any,
    group_ids: Any,
    *,
    traj_ids: Any = None,
    step_index: Any = None,
    anchors: Any = None,
    step_rewards: Any = None,
    valid: Any = None,
) -> np.ndarray:
    """The one entry point both backends call: advantages[B] for a spec's ``algorithm`` (or a preset's config).

    Args:
        algo: ``spec.algorithm`` (mapped by :func:`estimator_config`) or an :class:`EstimatorConfig`.
        rewards: float[B] reward of each row; NaN/None = unmeasured rollout (excluded from all statistics,
            advantage 0). For grpo/dr_grpo/rloo a row is a sample (one curation rollout; with ``traj_ids``, several
            rows of one trajectory share its statistics slot). For gigpo a row is one (trajectory, position) and
            ``rewards`` is that trajectory's episode reward (only its NaN-ness is used; finite values must equal the
            sum of the trajectory's ``step_rewards``).
        group_ids: labels[B] task group.
        traj_ids, step_index, anchors, step_rewards: labels[B], int[B], labels[B], float[B]; required for gigpo.
        valid: optional bool[B]; False rows lose ``invalid_penalty`` (GRPO: from their score; GiGPO: from the
            episode score and the step return of that row).

    Returns:
        float64[B] advantages (for GiGPO the combined ``A^E + omega A^S``; call :func:`gigpo` for the parts).
    """
    cfg = algo if isinstance(algo, EstimatorConfig) else estimator_config(algo)
    r = _as_float(rewards, "rewards")
    n = r.shape[0]
    ok = np.ones(n, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    if ok.shape != (n,):
        raise AdvantageInputError(f"valid: shape {ok.shape} for {n} rows (fix: one flag per row)")
    if cfg.estimator != "gigpo":
        scores = r - cfg.invalid_penalty * (~ok)
        return _outcome(cfg, scores, group_ids, traj_ids)

    missing = [k for k, v in (("traj_ids", traj_ids), ("step_index", step_index), ("step_rewards", step_rewards))
               if v is None]
    if missing:
        raise AdvantageInputError(f"{missing[0]}: None but estimator=gigpo needs it (fix: pass per-row {missing[0]})")
    sr = _as_float(step_rewards, "step_rewards", n)
    t, nt = _codes(traj_ids, "traj_ids", n)
    episode = np.bincount(t, weights=np.nan_to_num(sr), minlength=nt)[t]
    finite = ~np.isnan(r) & ~np.isnan(sr)
    if not np.allclose(r[finite], episode[finite], rtol=1e-6, atol=1e-9):
        i = int(np.flatnonzero(finite)[np.argmax(~np.isclose(r[finite], episode[finite], rtol=1e-6, atol=1e-9))])
        raise AdvantageInputError(
            f"rewards: row {i} has episode reward {r[i]!r} but its step rewards sum to {episode[i]!r} "
            "(fix: step_rewards must decompose the episode reward)"
        )
    sr = np.where(np.isnan(r), np.nan, sr)  # an unmeasured episode reward makes the trajectory unmeasured
    adv, _, _ = gigpo(
        sr, group_ids, traj_ids, step_index, [None] * n if anchors is None else anchors,
        gamma=cfg.gamma, step_weight=cfg.step_weight, mode=cfg.gigpo_mode, anchor_match=cfg.anchor_match,
        similarity=cfg.similarity, pool=cfg.pool, invalid=~ok, invalid_penalty=cfg.invalid_penalty, eps=cfg.eps,
        episode_singleton=cfg.singleton, step_singleton=cfg.step_singleton,
    )
    return adv


def advantages_for_rows(
    cfg: EstimatorConfig,
    *,
    step_rewards: Any,
    group_ids: Any,
    traj_ids: Any,
    step_index: Any,
    anchors: Any = None,
    valid: Any = None,
) -> np.ndarray:
    """Advantage of every (trajectory, step) row under ``cfg``, from step rewards alone (what `advdiff` shows).

    Outcome estimators (grpo, dr_grpo, rloo) see one sample per trajectory with score ``R_j = sum_t r_{j,t}`` and
    give every row of the trajectory that sample's advantage (TRL / verl mainline train one sequence per rollout,
    the advantage uniform over its tokens). GiGPO gives each row its own advantage.

    Shapes: all arguments [B]. Returns float64[B].
    """
    sr = _as_float(step_rewards, "step_rewards")
    n = sr.shape[0]
    t, nt = _codes(traj_ids, "traj_ids", n)
    nan_traj = np.bincount(t, weights=np.isnan(sr).astype(np.float64), minlength=nt) > 0
    episode = np.where(nan_traj, np.nan, np.bincount(t, weights=np.nan_to_num(sr), minlength=nt))[t]
    if cfg.estimator == "gigpo":
        return compute_advantages(
            cfg, episode, group_ids, traj_ids=t, step_index=step_index, anchors=anchors, step_rewards=sr, valid=valid
        )
    return compute_advantages(cfg, episode, group_ids, traj_ids=t, valid=valid)


def with_knobs(preset: str | Preset, **knobs: Any) -> EstimatorConfig:
    """A preset's config with some knobs changed (e.g. ``with_knobs("trl", scale="batch")``)."""
    p = PRESETS[preset] if isinstance(preset, str) else preset
    return replace(p.config, **knobs)


def as_torch(adv: np.ndarray, like: Any = None) -> Any:
    """advantages[B] as a torch tensor (dtype/device of ``like`` if given). torch is imported here, lazily, so that
    twinrun.core stays importable without it."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(adv))
    if like is not None:
        t = t.to(dtype=like.dtype, device=like.device)
    return t
