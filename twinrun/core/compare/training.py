"""Training curves compared like checkpoint curves: for each step metric both frameworks report (reward and its
terms, entropy, KL, clip fraction, grad norm, lengths, ...), do the two groups' step curves differ by more than
their seeds do? Pure statistics (arrays in, numbers out); reading run folders is :mod:`.training_runs`.

The test is on the raw curve in the metric's own units, not only on its shape: a KL twice as big is a difference
even where both KL curves rise alike. Steps are averaged into windows (every step its own window up to
``n_windows``); each run is then a row of W window means, and the contrast of two groups has two parts:

- level: the mean over windows of a run's curve. Paired seeds: a one-sample t on the seeds' differences a_i - b_i
  (df n - 1); independent seeds: the pooled two-sample t on the runs' means (df n_a + n_b - 2), the between-runs
  test of a split-plot analysis.
- shape: the group x window interaction on the centred curves, within seed where seeds pair
  (:func:`shape.paired_profile_anova`) and against seed(group) x window where they do not
  (:func:`shape.profile_anova`), both with their sphericity correction.

A metric's p is Fisher's combination of its two parts (independent under the null: two strata of one split-plot).
The metrics of one comparison are a family under weighted Holm (valid under any dependence between metrics): the
reward carries half the weight, the others share the rest. The first window where the curves part is the first
window w at which the same test on windows 1..w alone reaches the raw threshold the metric passed in the
step-down (alpha times its weight over the weight left): where a run still training would first have said
"differ".
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats

from twinrun.core.compare import shape

DIFFER = "differ"
NOT_SHOWN = "not shown to differ"


def windows(steps: list[int], n_windows: int) -> list[list[int]]:
    """Contiguous bins of the shared steps (ascending): every step its own window when there are at most
    n_windows, else n_windows bins of near-equal size (the earlier bins one step longer)."""
    if n_windows < 1:
        raise ValueError(f"n_windows: {n_windows} (fix: 1 or more)")
    s = sorted(steps)
    if len(s) <= n_windows:
        return [[x] for x in s]
    return [list(map(int, c)) for c in np.array_split(np.asarray(s), n_windows)]


def window_means(steps: np.ndarray, values: np.ndarray, bins: list[list[int]]) -> np.ndarray:
    """One run's metric averaged per window: steps[S], values[S] (NaN: not recorded) -> means[W] (NaN where the
    window has no recorded value)."""
    out = np.full(len(bins), np.nan)
    for j, b in enumerate(bins):
        v = values[np.isin(steps, b)]
        v = v[np.isfinite(v)]
        if v.size:
            out[j] = float(v.mean())
    return out


def _t_p(mean: float, se: float, df: float) -> float:
    if se > 0:
        return float(2 * stats.t.sf(abs(mean / se), df))
    return 1.0 if abs(mean) <= 1e-12 else 0.0  # no spread at all: an exact offset or exactly nothing


def level_test(a: np.ndarray, b: np.ndarray, design: str, level: float = 0.95) -> dict[str, Any]:
    """The level part: a[n_a, W], b[n_b, W] -> the mean over windows of a - b with its t interval and p."""
    ma, mb = a.mean(axis=1), b.mean(axis=1)
    if design == "paired":
        d = ma - mb
        n = d.size
        df = n - 1
        est = float(d.mean())
        se = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    else:
        na, nb = ma.size, mb.size
        df = na + nb - 2
        est = float(ma.mean() - mb.mean())
        sp2 = ((((ma - ma.mean()) ** 2).sum() + ((mb - mb.mean()) ** 2).sum()) / df) if df > 0 else float("nan")
        se = float(math.sqrt(sp2 * (1 / na + 1 / nb))) if df > 0 else float("nan")
    if df < 1 or not math.isfinite(se):
        return {"estimate": est, "ci": [None, None], "p_value": None, "df": df}
    q = float(stats.t.ppf(0.5 + level / 2, df))
    return {"estimate": est, "ci": [est - q * se, est + q * se], "p_value": _t_p(est, se, df), "df": df, "se": se}


def shape_test(a: np.ndarray, b: np.ndarray, design: str) -> dict[str, Any] | None:
    """The shape part: the group x window interaction of the centred curves (None below 2 windows)."""
    if a.shape[1] < 2:
        return None
    if design == "paired":
        return shape.paired_profile_anova(a, b)
    return shape.profile_anova({"a": a, "b": b})


def window_differences(a: np.ndarray, b: np.ndarray, design: str, level: float = 0.95) -> dict[str, list[Any]]:
    """Pointwise a - b per window with its t interval (seed-to-seed spread at that window; no multiplicity: a
    picture, not a test)."""
    if design == "paired":
        d = a - b
        n = d.shape[0]
        est = d.mean(axis=0)
        se = d.std(axis=0, ddof=1) / math.sqrt(n) if n > 1 else np.full(d.shape[1], np.nan)
        df = n - 1
    else:
        na, nb = a.shape[0], b.shape[0]
        df = na + nb - 2
        est = a.mean(axis=0) - b.mean(axis=0)
        sp2 = (a.var(axis=0, ddof=1) * (na - 1) + b.var(axis=0, ddof=1) * (nb - 1)) / df if df > 0 else np.nan
        se = np.sqrt(sp2 * (1 / na + 1 / nb))
    q = float(stats.t.ppf(0.5 + level / 2, df)) if df >= 1 else float("nan")
    lo, hi = est - q * se, est + q * se
    fin = [None if not math.isfinite(x) else float(x) for x in lo], [None if not math.isfinite(x) else float(x) for x in hi]
    return {"estimate": [float(x) for x in est], "lower": fin[0], "upper": fin[1]}


def contrast(a: np.ndarray, b: np.ndarray, design: str, level: float = 0.95) -> dict[str, Any]:
    """Level and shape parts of one metric's contrast and their combined p (:func:`fisher`).
    a[n_a, W], b[n_b, W]: the groups' window means (paired: row i of each is seed i)."""
    lv = level_test(a, b, design, level)
    sh = shape_test(a, b, design)
    parts = [p for p in (lv["p_value"], (sh or {}).get("p_value")) if p is not None]
    return {"p_value": fisher(parts), "level": lv, "shape": _shape_summary(sh)}


def fisher(pvalues: list[float]) -> float | None:
    """Fisher's combination of independent p-values: -2 sum ln p ~ chi2(2k) (None for none). The level and shape
    parts are independent under the null: the mean over windows and the window contrasts are orthogonal
    projections of the same rows, and so are their error terms (the two strata of a split-plot)."""
    if not pvalues:
        return None
    if len(pvalues) == 1:
        return float(pvalues[0])
    x = -2.0 * float(np.sum(np.log(np.maximum(np.asarray(pvalues, dtype=np.float64), 1e-300))))
    return float(stats.chi2.sf(x, 2 * len(pvalues)))


def _shape_summary(sh: dict[str, Any] | None) -> dict[str, Any] | None:
    if sh is None:
        return None
    keep = ("statistic", "df1", "df2", "epsilon", "p_value", "design", "pair_r_mean", "seed_sd", "diff_sd")
    return {k: sh[k] for k in keep if k in sh}


def first_parting(a: np.ndarray, b: np.ndarray, design: str, threshold: float) -> int | None:
    """0-based index of the first window w at which the contrast of windows 0..w alone has p below threshold."""
    for w in range(a.shape[1]):
        p = contrast(a[:, : w + 1], b[:, : w + 1], design)["p_value"]
        if p is not None and p < threshold:
            return w
    return None


def is_constant(a: np.ndarray, b: np.ndarray) -> bool:
    """Every run's every window the same value (e.g. a clip fraction of 0 on policy): nothing to test."""
    x = np.concatenate([a.ravel(), b.ravel()])
    return bool(np.all(np.abs(x - x[0]) <= 1e-12 * max(1.0, abs(float(x[0])))))


def weighted_holm(pvalues: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down with weights (Holm 1979): p[m], weights[m] (> 0) -> (adjusted p[m], share[m]). Hypotheses
    are taken in order of p / w; the one at step k is rejected at level alpha when every one before it was and
    p_k <= alpha w_k / (sum of the weights not yet rejected); adjusted p_k = max over steps j <= k of
    min(1, p_j W_j / w_j). share[k] = w_k / W_k: the raw threshold is alpha * share. Equal weights: Holm."""
    p, w = np.asarray(pvalues, dtype=np.float64), np.asarray(weights, dtype=np.float64)
    order = np.argsort(p / w, kind="stable")
    remaining = np.cumsum(w[order][::-1])[::-1]  # weight of steps k..m
    share = w[order] / remaining
    adj_sorted = np.minimum(1.0, np.maximum.accumulate(p[order] / share))
    adj, sh = np.empty_like(p), np.empty_like(p)
    adj[order], sh[order] = adj_sorted, share
    return adj, sh


PRIMARY = "reward_mean"
PRIMARY_WEIGHT = 0.5


def metric_weight(metric: str, primary_tested: bool, n_others: int) -> float:
    if not primary_tested:
        return 1.0 / n_others
    if not n_others:
        return 1.0
    return PRIMARY_WEIGHT if metric == PRIMARY else (1.0 - PRIMARY_WEIGHT) / n_others


def verdicts(mats: dict[str, tuple[np.ndarray, np.ndarray]], design: str, alpha: float = 0.05,
             level: float = 0.95) -> dict[str, dict[str, Any]]:
    """Every testable metric's contrast, weighted Holm over the metrics, and where the curves part.

    mats: metric -> (a[n_a, W], b[n_b, W]) window means of the two groups (constant metrics are left out by the
    caller). The reward (PRIMARY) carries half the family's weight and the other metrics share the other half
    equally (all equal without it): the reward is what a user compares first, and its terms and the policy's
    metrics explain a difference more than they find one. Returns metric -> {"verdict", "p_value", "p_holm",
    "threshold", "first_window" (0-based or None), "level", "shape", "windows" (pointwise differences)}."""
    names = sorted(mats)
    res = {m: contrast(*mats[m], design, level) for m in names}
    testable = [m for m in names if res[m]["p_value"] is not None]
    others = len([m for m in testable if m != PRIMARY])
    w = np.array([metric_weight(m, PRIMARY in testable, others) for m in testable])
    adj, share = weighted_holm(np.array([res[m]["p_value"] for m in testable]), w) if testable else ([], [])
    for m in names:
        res[m]["windows"] = window_differences(*mats[m], design, level)
        res[m].update({"p_holm": None, "threshold": None, "weight": None, "first_window": None, "verdict": None})
    for i, m in enumerate(testable):
        p_holm, thr = float(adj[i]), alpha * float(share[i])
        res[m].update({"p_holm": p_holm, "threshold": thr, "weight": float(w[i]),
                       "verdict": DIFFER if p_holm < alpha else NOT_SHOWN})
        if p_holm < alpha:
            res[m]["first_window"] = first_parting(*mats[m], design, thr)
    return res
