"""Advantage estimators as pure, vectorised numpy functions, plus named presets for each framework's semantics.

twinrun computes advantages once, here, so both backends train on the same numbers and `twinrun advdiff` can show
how far the frameworks' own defaults would drift apart on the same rewards. Reference:
`shared/reference/advantage-semantics.md` (§1.2 verl GRPO, §3.4/§6 GiGPO, §4.2 TRL, §10 presets); every preset
below was checked against the installed trl 1.16.0 / verl 0.9.1 source (tests/backends/test_advantage_parity.py).

Shapes: ``B`` = rows. A row is one sample the policy is trained on: one rollout (GRPO over whole curation
sequences) or one (trajectory, step) pair (GiGPO, verl-agent style). Group ids, trajectory ids and anchors are any
hashable labels (str/int); they are factorised to integer codes with ``pandas.factorize`` (a C hash table), and all
statistics are ``np.bincount`` reductions over those codes, so no function loops over rows in Python. The two
exceptions are bounded and documented: the discounted return sweeps step *ranks* (max trajectory length iterations)
and similarity anchor matching compares distinct texts pairwise inside a group (difflib, O(n^2) per group).

Everything is float64. Both frameworks compute in float32, where an all-equal group of a non-dyadic reward (e.g.
eight 0.7s) has a mean that differs from the values by rounding, a std of ~1e-8 and, after ``/(std + eps)``,
advantages of about +-0.06 (verl, eps 1e-6) or +-6e-4 (TRL, eps 1e-4) instead of 0; twinrun gives 0 there
(tests/backends/test_advantage_parity.py states both artifacts).

Unmeasured rollouts (reward NaN, or None in the object-array input) are *excluded*: they do not enter any mean,
std or count (so a group of 8 with 2 unmeasured is a group of 6), and their advantage is exactly 0. This is TRL's
rule for unscorable completions; verl has no such notion (a NaN would poison its whole group), so twinrun never
hands verl a NaN: the `verl` preset equals verl run on the measured rows only.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from difflib import SequenceMatcher
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from twinrun.core.errors import TwinrunError

if TYPE_CHECKING:  # the spec module imports pydantic only; kept out of the runtime import graph of the math
    from twinrun.core.spec import AlgorithmSpec

Scale = Literal["group", "batch", "none"]
Singleton = Literal["zero", "raw", "mean0_std1"]
Pool = Literal["trajectory", "rows"]
GigpoMode = Literal["mean_norm", "mean_std_norm"]
AnchorMatch = Literal["exact", "similarity"]

__all__ = [
    "AdvantageInputError",
    "EstimatorConfig",
    "Preset",
    "PRESETS",
    "group_normalize",
    "dr_grpo",
    "rloo",
    "gigpo",
    "discounted_returns",
    "anchor_groups",
    "estimator_config",
    "compute_advantages",
    "advantages_for_rows",
    "with_knobs",
    "as_torch",
]


class AdvantageInputError(TwinrunError, ValueError):
    """Arrays that cannot be used (length mismatch, bad knob, duplicate (trajectory, step), ...). One line."""


# ------------------------------------------------------------------------------------------------------------
# Small vectorised helpers


def _codes(labels: Any, name: str, n: int | None = None, long_strings: bool = False) -> tuple[np.ndarray, int]:
    """Factorise labels[B] to int codes[B] in 0..K-1 (first-appearance order) and K.

    None / NaN labels get code -1 (callers decide what that means). pandas.factorize is a C hash table: O(B), any
    hashable labels, and no conversion of long strings to a fixed-width numpy dtype."""
    import pandas as pd  # base dependency; imported here so importing the module stays cheap

    arr = labels if isinstance(labels, np.ndarray) else np.array(labels, dtype=object)
    if arr.ndim != 1:
        raise AdvantageInputError(f"{name}: shape {arr.shape} is not one-dimensional (fix: pass one label per row)")
    if n is not None and arr.shape[0] != n:
        raise AdvantageInputError(f"{name}: {arr.shape[0]} labels for {n} rows (fix: one label per row)")
    if arr.dtype.kind in "iu":
        codes, uniq = pd.factorize(arr)
    elif long_strings and _object_hashtable() is not None:
        uniq, codes = _object_hashtable()(len(arr)).factorize(arr.astype(object, copy=False))
    else:
        codes, uniq = pd.factorize(arr.astype(object, copy=False), use_na_sentinel=True)
    return codes.astype(np.intp, copy=False), len(uniq)


@functools.cache
def _object_hashtable() -> Any:
    # pandas.factorize routes str labels through its UTF-8 StringHashTable, ~6x slower than the plain Python-hash
    # table on long texts (observation anchors of a few hundred characters; see bench/advantages.py). The class is
    # private pandas API, so fall back to pd.factorize if it ever moves.
    try:
        from pandas._libs.hashtable import PyObjectHashTable

        PyObjectHashTable(2).factorize(np.array(["a", None], dtype=object))
        return PyObjectHashTable
    except Exception:  # pragma: no cover - depends on the pandas version
        return None


def _as_float(x: Any, name: str, n: int | None = None) -> np.ndarray:
    """float64[B]; None becomes NaN (unmeasured)."""
    try:
        out = np.asarray(x, dtype=np.float64)  # numpy maps None to NaN here
    except (TypeError, ValueError):
        raise AdvantageInputError(f"{name}: not numeric (fix: floats, with None/NaN for unmeasured)") from None
    if out.ndim != 1:
        raise AdvantageInputError(f"{name}: shape {out.shape} is not one-dimensional (fix: one value per row)")
    if n is not None and out.shape[0] != n:
        raise AdvantageInputError(f"{name}: {out.shape[0]} values for {n} rows (fix: one value per row)")
    if np.isinf(out).any():
        raise AdvantageInputError(f"{name}: contains inf (fix: finite rewards, NaN/None only for unmeasured)")
    return out


def _check(value: Any, allowed: Sequence[str], name: str) -> None:
    if value not in allowed:
        raise AdvantageInputError(f"{name}: {value!r} is not allowed (fix: one of {', '.join(allowed)})")


def _group_stats(values: np.ndarray, codes: np.ndarray, k: int, ddof: int) -> tuple[np.ndarray, ...]:
    """Per-group count, mean and std (ddof) of values[M] with codes[M] in 0..k-1. std is NaN where count <= ddof."""
    count = np.bincount(codes, minlength=k).astype(np.float64)
    total = np.bincount(codes, weights=values, minlength=k)
    mean = np.divide(total, count, out=np.zeros(k), where=count > 0)
    # two-pass variance (as torch.std does) so ties and all-equal groups give exactly 0, not rounding noise
    sq = np.bincount(codes, weights=(values - mean[codes]) ** 2, minlength=k)
    dof = count - ddof
    std = np.full(k, np.nan)
    np.sqrt(np.divide(sq, dof, out=np.zeros(k), where=dof > 0), out=std, where=dof > 0)
    return count, mean, std


def _traj_codes(traj_ids: Any, g: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """Trajectory codes[B], K; refuses a trajectory whose rows sit in two groups (it would join two baselines)."""
    t, nt = _codes(traj_ids, "traj_ids", n)
    if (t < 0).any():
        raise AdvantageInputError("traj_ids: contains None (fix: every row needs a trajectory label)")
    group_of = np.full(nt, -1)
    group_of[t] = g
    split = group_of[t] != g
    if split.any():
        i = int(np.flatnonzero(split)[0])
        raise AdvantageInputError(
            f"traj_ids: trajectory of row {i} appears in two groups (fix: one group per trajectory)"
        )
    return t, nt


def _pool_members(measured: np.ndarray, pool: Pool, traj_ids: Any, g: np.ndarray) -> np.ndarray:
    """Row indices whose scores enter the statistics: every measured row (``rows``) or the first measured row of
    each trajectory (``trajectory``: verl-agent's ``compute_mean_std_cross_steps=False`` rule)."""
    rows = np.flatnonzero(measured)
    if pool == "rows" or traj_ids is None:  # without traj_ids each row is its own trajectory: the pools coincide
        return rows
    t, _ = _traj_codes(traj_ids, g, len(measured))
    _, first = np.unique(t[rows], return_index=True)
    return rows[np.sort(first)]


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
# GiGPO


def _traj_order(t: np.ndarray, step_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows sorted by (trajectory, step) and a bool[B] 'same trajectory as the next sorted row'."""
    lo = int(step_index.min()) if len(t) else 0
    span = (int(step_index.max()) - lo + 1) if len(t) else 1
    if span * (int(t.max()) + 1 if len(t) else 1) < 2**62:  # one int64 key sorts faster than lexsort
        order = np.argsort(t.astype(np.int64) * span + (step_index - lo), kind="stable")
    else:  # pragma: no cover - absurd step numbers
        order = np.lexsort((step_index, t))
    ts, ss = t[order], step_index[order]
    same_next = np.zeros(len(order), dtype=bool)
    same_next[:-1] = ts[1:] == ts[:-1]
    dup = same_next[:-1] & (ss[1:] == ss[:-1])
    if dup.any():
        i = order[np.flatnonzero(dup)[0]]
        raise AdvantageInputError(
            f"step_index: row {i} repeats step {step_index[i]} of its trajectory (fix: one row per (trajectory, step))"
        )
    return order, same_next


def discounted_returns(step_rewards: Any, traj_ids: Any, step_index: Any, *, gamma: float) -> np.ndarray:
    """Per-row discounted return-to-go within each trajectory (GiGPO Eq. 5).

    Args:
        step_rewards: float[B] r_{j,t}. traj_ids: labels[B]. step_index: int[B] (only the order within a trajectory
            matters: steps are discounted by rank, so gaps in the numbering count as adjacent, as verl-agent's
            row-order loop does).
        gamma: discount in [0, 1].

    Returns:
        float64[B]: ``G_{j,t} = r_{j,t} + gamma * G_{j,t+1}`` (``G`` of a trajectory's last step = its reward).
        The loop runs over step *ranks* (at most max T iterations), each vectorised over all trajectories.
    """
    r = _as_float(step_rewards, "step_rewards")
    n = r.shape[0]
    t, _ = _codes(traj_ids, "traj_ids", n)
    return _discounted(r, t, _steps(step_index, n), gamma)


def _steps(step_index: Any, n: int) -> np.ndarray:
    si = np.asarray(step_index)
    if si.shape != (n,) or (n and si.dtype.kind not in "iu"):
        raise AdvantageInputError(f"step_index: shape {si.shape}, dtype {si.dtype} (fix: one integer step per row)")
    return si


def _discounted(r: np.ndarray, t: np.ndarray, si: np.ndarray, gamma: float) -> np.ndarray:
    n = r.shape[0]
    order, same_next = _traj_order(t, si)
    # rank of each sorted row inside its trajectory, to sweep all trajectories backwards in lock-step
    starts = np.ones(n, dtype=bool)
    starts[1:] = ~same_next[:-1]
    run_start = np.maximum.accumulate(np.where(starts, np.arange(n), 0)) if n else starts.astype(np.intp)
    rank = np.arange(n) - run_start
    sorted_r = r[order]
    ret = sorted_r.copy()
    has_next = np.flatnonzero(same_next)
    if has_next.size:
        by_rank = has_next[np.argsort(-rank[has_next], kind="stable")]
        bounds = np.flatnonzero(np.diff(rank[by_rank])) + 1
        for chunk in np.split(by_rank, bounds):  # latest rank first
            ret[chunk] = sorted_r[chunk] + gamma * ret[chunk + 1]
    out = np.empty(n)
    out[order] = ret
    return out


def _similarity_clusters(texts: list[str], threshold: float) -> np.ndarray:
    """Greedy single-pass clustering of distinct texts (verl-agent ``build_step_group``): each text joins the first
    cluster whose representative (its first member) has ``SequenceMatcher(None, text, rep).ratio() >= threshold``,
    else opens a new cluster. O(n^2) ratio calls in the worst case; ``real_quick_ratio``/``quick_ratio`` are upper
    bounds of ``ratio`` and prune most pairs without changing any decision."""
    reps: list[SequenceMatcher] = []  # one matcher per cluster, seq2 = representative (its b-index is cached)
    out = np.empty(len(texts), dtype=np.intp)
    for i, text in enumerate(texts):
        for c, sm in enumerate(reps):
            sm.set_seq1(text)
            if sm.real_quick_ratio() >= threshold and sm.quick_ratio() >= threshold and sm.ratio() >= threshold:
                out[i] = c
                break
        else:
            sm = SequenceMatcher(None)
            sm.set_seq2(text)
            reps.append(sm)
            out[i] = len(reps) - 1
    return out


def anchor_groups(
    anchors: Any, group_ids: Any, *, anchor_match: AnchorMatch = "exact", similarity: float = 0.95, rows: Any = None
) -> np.ndarray:
    """Step-level (anchor-state) group code per row (GiGPO Eq. 6).

    Args:
        anchors: labels[B] (str for similarity matching). None = no anchor: the row is its own step group.
        group_ids: labels[B]: only rows of the same episode group can share a step group.
        anchor_match: ``exact`` equal anchors (regardless of step or trajectory, so a state revisited inside one
            trajectory contributes several members); ``similarity`` greedy SequenceMatcher clusters with
            ratio >= ``similarity`` inside each group (identical anchors always share a cluster).
        rows: optional bool[B]: only these rows take part (unmeasured rows are left out, as if absent); the others
            get code -1.

    Returns:
        int[B] codes (equal code = same step group), -1 for rows not taking part.
    """
    _check(anchor_match, ("exact", "similarity"), "anchor_match")
    a_arr = anchors if isinstance(anchors, np.ndarray) else np.array(anchors, dtype=object)
    n = a_arr.shape[0]
    g, _ = _codes(group_ids, "group_ids", n)
    take = np.ones(n, dtype=bool) if rows is None else np.asarray(rows, dtype=bool)
    return _anchor_codes(a_arr, g, take, anchor_match, similarity)


def _anchor_codes(
    a_arr: np.ndarray, g: np.ndarray, take: np.ndarray, anchor_match: str, similarity: float
) -> np.ndarray:
    import pandas as pd

    n = a_arr.shape[0]
    a_codes, na = _codes(a_arr, "anchors", n, long_strings=True)
    no_anchor = a_codes < 0
    # exact key = (group, anchor) as one int64; a missing anchor gets a key of its own
    key = np.where(no_anchor, na + np.arange(n), a_codes)
    combined = g.astype(np.int64) * (na + n) + key
    out = np.full(n, -1, dtype=np.intp)
    if not take.any():
        return out
    inv, _ = pd.factorize(combined[take])  # codes in first-appearance order
    if anchor_match == "exact":
        out[take] = inv
        return out
    if not 0.0 < similarity <= 1.0:
        raise AdvantageInputError(f"similarity: {similarity!r} must be in (0, 1] (fix: e.g. 0.95)")
    # cluster the distinct (group, anchor) keys of each group in first-appearance order, then map rows through
    _, first = np.unique(inv, return_index=True)
    key_rows = np.flatnonzero(take)[first]  # first row of each distinct key; keys are already in appearance order
    key_groups = g[key_rows]
    cluster_of_key = np.empty(len(first), dtype=np.intp)
    next_code = 0
    for grp in pd.unique(key_groups):  # a Python loop over groups and distinct anchors: the O(n^2) part is here
        ks = np.flatnonzero(key_groups == grp)
        texts: list[str] = []
        anchored: list[int] = []
        for kk in ks:  # keys without an anchor stay singletons
            if no_anchor[key_rows[kk]]:
                cluster_of_key[kk] = next_code
                next_code += 1
                continue
            a = a_arr[key_rows[kk]]
            if not isinstance(a, str):
                raise AdvantageInputError(
                    f"anchors: {type(a).__name__} anchor with anchor_match=similarity (fix: text anchors, or exact)"
                )
            texts.append(a)
            anchored.append(kk)
        if texts:
            local = _similarity_clusters(texts, similarity)
            cluster_of_key[np.asarray(anchored)] = local + next_code
            next_code += int(local.max()) + 1
    out[take] = cluster_of_key[inv]
    return out


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
    """GiGPO (Feng et al. 2025) as verl-agent implements it (advantage-semantics.md §3.4, §6).

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


# ------------------------------------------------------------------------------------------------------------
# Estimator configurations and presets


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
