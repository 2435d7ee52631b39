"""The estimators: group-relative (GRPO, Dr. GRPO), leave-one-out (RLOO) and GiGPO, on float[B] arrays.

Unmeasured rows (NaN/None) leave every statistic and get advantage 0 (see the package docstring)."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from twinrun.core.advantages.arrays import (
    AdvantageInputError,
    AnchorMatch,
    GigpoMode,
    Pool,
    Scale,
    Singleton,
    _as_float,
    _check,
    _codes,
    _group_stats,
    _pool_members,
    _traj_codes,
)
from twinrun.core.advantages.step_groups import _anchor_codes, _discounted, _steps

# ------------------------------------------------------------------------------------------------------------
# Outcome-level estimators


def group_normalize(
    scores: Any,
    group_ids: Any,
    *,
    scale: Scale = "group",
    eps: float = 1e-6,
    ddof: int = 1,
    singleton: Singleton = "zero",
    pool: Pool = "trajectory",
    traj_ids: Any = None,
) -> np.ndarray:
    """Group-relative advantage (GRPO and its variants).

    Args:
        scores: float[B] per-row score; NaN/None = unmeasured (excluded, advantage 0).
        group_ids: labels[B]; rows with equal labels share a baseline.
        scale: ``group`` divide by the group std; ``batch`` by the std of all pooled scores (TRL
            ``scale_rewards="batch"``: the centre is still the *group* mean); ``none`` mean-centring only.
        eps: added to the std: ``A = (s - mu_g) / (sigma + eps)``.
        ddof: std degrees of freedom (1 = Bessel, as torch.std and TRL's nanstd).
        singleton: a group with exactly one pooled member: ``zero`` -> A = 0 (TRL: its nanstd is NaN -> 0);
            ``raw`` -> A = s; ``mean0_std1`` -> mu = 0, sigma = 1, i.e. A = s/(1+eps) under ``scale=group``,
            s under ``none`` (verl ``compute_grpo_outcome_advantage``).
        pool: which scores form the statistics when a trajectory has several rows: ``rows`` every row
            (verl-agent, length-weighted), ``trajectory`` the first measured row of each trajectory.
        traj_ids: labels[B], needed only for ``pool="trajectory"`` with several rows per trajectory.

    Returns:
        float64[B]: ``A_i = (s_i - mu_g(i)) / (sigma + eps)`` (or without the division); mu, sigma over the pooled
        members of i's group. Any advantage that comes out NaN (e.g. ``batch`` scale with one measured row) is 0.
    """
    _check(pool, ("trajectory", "rows"), "pool")
    s = _as_float(scores, "scores")
    n = s.shape[0]
    g, k = _codes(group_ids, "group_ids", n)
    if (g < 0).any():
        raise AdvantageInputError("group_ids: contains None (fix: every row needs a group label)")
    members = _pool_members(~np.isnan(s), pool, traj_ids, g)
    return _normalize(s, g, k, s[members], g[members], scale=scale, eps=eps, ddof=ddof, singleton=singleton)


def _normalize(
    s: np.ndarray, g: np.ndarray, k: int, stat_values: np.ndarray, stat_codes: np.ndarray, *,
    scale: Scale, eps: float, ddof: int, singleton: Singleton,
) -> np.ndarray:
    """Centre/scale s[B] (group codes g[B] in 0..k-1) with statistics taken over stat_values[M] (codes stat_codes)."""
    _check(scale, ("group", "batch", "none"), "scale")
    _check(singleton, ("zero", "raw", "mean0_std1"), "singleton")
    if not eps >= 0:
        raise AdvantageInputError(f"eps: {eps!r} must be >= 0 (fix: e.g. 1e-6)")
    n = s.shape[0]
    measured = ~np.isnan(s)
    count, mean, std = _group_stats(stat_values, stat_codes, k, ddof)

    centre = mean[g]
    if scale == "group":
        denom = std[g] + eps
    elif scale == "batch":
        _, _, bstd = _group_stats(stat_values, np.zeros(len(stat_values), np.intp), 1, ddof)
        denom = np.full(n, bstd[0] + eps)
    else:
        denom = np.ones(n)

    single = count[g] == 1
    if singleton == "mean0_std1":
        centre = np.where(single, 0.0, centre)
        if scale == "group":
            denom = np.where(single, 1.0 + eps, denom)
    with np.errstate(invalid="ignore", divide="ignore"):
        adv = (s - centre) / denom
    if singleton == "zero":
        adv[single] = 0.0
    elif singleton == "raw":
        adv[single] = s[single]
    adv[~measured] = 0.0
    return np.nan_to_num(adv, nan=0.0, posinf=0.0, neginf=0.0)


def dr_grpo(
    scores: Any, group_ids: Any, *, singleton: Singleton = "zero", pool: Pool = "trajectory", traj_ids: Any = None
) -> np.ndarray:
    """Dr. GRPO advantage: group mean only, no std (verl ``norm_adv_by_std_in_grpo=False``, TRL
    ``scale_rewards="none"``, and the SkillOS paper's text ``A_n = r_n - mean``).

    Args/shape as :func:`group_normalize`. Returns float64[B]: ``A_i = s_i - mu_g(i)``.
    """
    return group_normalize(scores, group_ids, scale="none", eps=0.0, singleton=singleton, pool=pool, traj_ids=traj_ids)


def rloo(
    scores: Any, group_ids: Any, *, singleton: Literal["zero", "raw"] = "zero", pool: Pool = "trajectory",
    traj_ids: Any = None,
) -> np.ndarray:
    """Leave-one-out baseline (RLOO).

    Args:
        scores: float[B], NaN/None = unmeasured (excluded, advantage 0). group_ids, pool, traj_ids as
            :func:`group_normalize`.
        singleton: ``zero`` (verl ``rloo_vectorized``) or ``raw`` score (verl ``rloo``) for a group of one.

    Returns:
        float64[B]: ``A_i = s_i - (S_g - s_i)/(n_g - 1) = n_g/(n_g - 1) * (s_i - mu_g)`` with S_g, n_g the sum and
        count of the pooled members of i's group.
    """
    _check(singleton, ("zero", "raw"), "singleton")
    _check(pool, ("trajectory", "rows"), "pool")
    s = _as_float(scores, "scores")
    n = s.shape[0]
    g, k = _codes(group_ids, "group_ids", n)
    if (g < 0).any():
        raise AdvantageInputError("group_ids: contains None (fix: every row needs a group label)")
    measured = ~np.isnan(s)
    members = _pool_members(measured, pool, traj_ids, g)
    count, mean, _ = _group_stats(s[members], g[members], k, ddof=0)
    c = count[g]
    with np.errstate(invalid="ignore", divide="ignore"):
        adv = c / (c - 1.0) * (s - mean[g])
    single = c == 1
    adv[single] = s[single] if singleton == "raw" else 0.0
    adv[~measured] = 0.0
    return np.nan_to_num(adv, nan=0.0)



# ------------------------------------------------------------------------------------------------------------
# GiGPO (episode level + anchor-state step level)


def gigpo(
    step_rewards: Any,
    group_ids: Any,
    traj_ids: Any,
    step_index: Any,
    anchors: Any,
    *,
    gamma: float = 1.0,
    step_weight: float = 1.0,
    mode: GigpoMode = "mean_norm",
    anchor_match: AnchorMatch = "exact",
    similarity: float = 0.95,
    pool: Pool = "rows",
    invalid: Any = None,
    invalid_penalty: float = 0.0,
    eps: float = 1e-6,
    episode_singleton: Singleton = "mean0_std1",
    step_singleton: Singleton = "zero",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GiGPO (Feng et al. 2025) as verl-agent implements it (docs/advantage-semantics.md §3.4, §6).

    Args:
        step_rewards: float[B] env reward r_{j,t} of each (trajectory j, step t) row; a NaN/None in any row makes
            the whole trajectory unmeasured: its rows leave every statistic and get A = A^E = A^S = 0.
        group_ids: labels[B] episode group (rollouts of the same task group / initial state).
        traj_ids: labels[B] trajectory; a trajectory must stay inside one group.
        step_index: int[B]; one row per (trajectory, step).
        anchors: labels[B] anchor state of the row (None = own step group), see :func:`anchor_groups`.
        gamma: discount of the step returns. step_weight: omega. mode: ``mean_norm`` (centre only) or
            ``mean_std_norm`` (also divide by std + eps); the same flag governs both levels, as in verl-agent.
        pool: episode statistics over ``rows`` (verl-agent: every step row's s, so trajectories weigh by length
            and Bessel runs over N*K rows) or ``trajectory`` (one R_j per trajectory: the paper's Eq. 3; the
            invalid penalty then shifts only the penalised row, it does not move the group's mean/std).
        invalid: optional bool[B], True = invalid action/turn; invalid_penalty: c_inv subtracted from that row's
            episode score and from its step return *after* discounting (not propagated to earlier steps).
        eps: std epsilon (verl-agent 1e-6). episode_singleton / step_singleton: see :func:`group_normalize`;
            verl-agent passes a lone episode row raw (mu=0, sigma=1) and gives a lone step group A^S = 0.

    Formulas (rows of measured trajectories):
        R_j = sum_t r_{j,t};   s_{j,t} = R_j - c_inv [invalid_{j,t}]
        G_{j,t} = sum_{k>=t} gamma^{k-t} r_{j,k};   G'_{j,t} = G_{j,t} - c_inv [invalid_{j,t}]
        A^E = (s - mu_E) [/ (sigma_E + eps)], mu_E/sigma_E over the group's rows' s (pool=rows) or R_j (trajectory)
        A^S = group_normalize(G', step group of (group, anchor), pool=rows, singleton=step_singleton)
        A   = A^E + omega A^S

    Returns:
        (A, A^E, A^S), each float64[B].
    """
    _check(mode, ("mean_norm", "mean_std_norm"), "mode")
    _check(pool, ("trajectory", "rows"), "pool")
    r = _as_float(step_rewards, "step_rewards")
    n = r.shape[0]
    g, ng = _codes(group_ids, "group_ids", n)
    if (g < 0).any():
        raise AdvantageInputError("group_ids: contains None (fix: every row needs a group label)")
    t, nt = _traj_codes(traj_ids, g, n)
    si = _steps(step_index, n)
    bad = np.zeros(n, dtype=bool) if invalid is None else np.asarray(invalid, dtype=bool)
    if bad.shape != (n,):
        raise AdvantageInputError(f"invalid: shape {bad.shape} for {n} rows (fix: one flag per row)")
    if not invalid_penalty >= 0:
        raise AdvantageInputError(f"invalid_penalty: {invalid_penalty!r} must be >= 0 (fix: 0 disables it)")

    # unmeasured trajectory = any NaN step reward
    traj_nan = np.bincount(t, weights=np.isnan(r).astype(np.float64), minlength=nt) > 0
    measured = ~traj_nan[t]
    r0 = np.where(measured, r, 0.0)
    episode = np.bincount(t, weights=r0, minlength=nt)[t]
    penalty = invalid_penalty * bad
    s = np.where(measured, episode - penalty, np.nan)
    ret = _discounted(r0, t, si, gamma)
    ret_p = np.where(measured, ret - penalty, np.nan)

    scale: Scale = "group" if mode == "mean_std_norm" else "none"
    if pool == "rows":
        stat_rows = np.flatnonzero(measured)
        stat_values, stat_codes = s[stat_rows], g[stat_rows]
    else:  # one unpenalised episode reward R_j per measured trajectory (the penalty only shifts its own row)
        _, first = np.unique(t, return_index=True)
        first = first[measured[first]]
        stat_values, stat_codes = episode[first], g[first]
    a_e = _normalize(s, g, ng, stat_values, stat_codes, scale=scale, eps=eps, ddof=1,
                     singleton=episode_singleton)
    _check(anchor_match, ("exact", "similarity"), "anchor_match")
    a_arr = anchors if isinstance(anchors, np.ndarray) else np.array(anchors, dtype=object)
    if a_arr.shape != (n,):
        raise AdvantageInputError(f"anchors: shape {a_arr.shape} for {n} rows (fix: one anchor (or None) per row)")
    sg = _anchor_codes(a_arr, g, measured, anchor_match, similarity)
    n_sg = int(sg.max()) + 1 if n else 0
    stat_rows = np.flatnonzero(measured)
    sg_all = np.where(sg < 0, 0, sg)  # unmeasured rows are NaN: zeroed by _normalize whatever their code
    a_s = _normalize(ret_p, sg_all, n_sg, ret_p[stat_rows], sg[stat_rows], scale=scale, eps=eps, ddof=1,
                     singleton=step_singleton)
    a_e[~measured] = 0.0
    a_s[~measured] = 0.0
    return a_e + step_weight * a_s, a_e, a_s

