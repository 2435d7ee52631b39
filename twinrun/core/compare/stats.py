"""Pure, vectorised statistics behind `twinrun compare` (no I/O, no records: arrays in, arrays out).

Conventions used in the shapes below:
  A = arms, G = games, R = bootstrap resamples, K = checkpoints of one run.
Outcomes are float arrays holding 1.0 (success), 0.0 (failure) or NaN (unmeasured or not played): a NaN
never counts as a failure, it leaves every denominator.

The bootstrap resamples *games* (the unit that is shared by every arm of a sweep). One index matrix
``idx[R, G]`` is drawn once and turned into draw counts ``W[R, G]``; every arm is then resampled with the same
rows of W, so between-arm statistics (lift, correlation of curves) keep the pairing. Means under resampling
are matrix products ``W @ values.T``, so there is no Python loop over resamples.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

# ------------------------------------------------------------------------------------------------------------
# Bootstrap primitives


def resample_indices(n_games: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """idx[R, G]: each row is one bootstrap resample of game indices (drawn with replacement)."""
    return rng.integers(0, n_games, size=(n_boot, n_games))


def index_counts(idx: np.ndarray, n_games: int) -> np.ndarray:
    """W[R, G]: how often each game appears in each resample row of ``idx[R, G]`` (float64)."""
    n_boot = idx.shape[0]
    flat = (idx + n_games * np.arange(n_boot)[:, None]).ravel()
    return np.bincount(flat, minlength=n_boot * n_games).reshape(n_boot, n_games).astype(np.float64)


def weighted_means(values: np.ndarray, mask: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Resampled means of each arm over its measured games.

    values[A, G] (any finite where mask), mask[A, G] bool, weights[R, G] (draw counts or ones[1, G])
    -> means[R, A]; NaN where a resample drew none of the arm's measured games.
    """
    v = np.where(mask, values, 0.0)
    m = mask.astype(np.float64)
    num = weights @ v.T
    den = weights @ m.T
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def percentile_ci(samples: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval over axis 0: samples[R, ...] -> (low[...], high[...]); NaN samples are ignored."""
    tail = (1.0 - level) / 2.0 * 100.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column gives NaN, which is what we want
        lo = np.nanpercentile(samples, tail, axis=0)
        hi = np.nanpercentile(samples, 100.0 - tail, axis=0)
    return lo, hi


# ------------------------------------------------------------------------------------------------------------
# Paired arm-vs-baseline statistics


@dataclass(frozen=True)
class PairedCounts:
    """Per arm (shape [A]) counts over games measured in both the arm and the baseline."""

    n_pairs: np.ndarray  # games measured in both
    b: np.ndarray  # arm success, baseline failure
    c: np.ndarray  # arm failure, baseline success
    arm_successes: np.ndarray
    base_successes: np.ndarray
    mask: np.ndarray  # [A, G] bool: game measured in both
    diff: np.ndarray  # [A, G] arm - baseline (0 where not paired)


def paired_counts(arms: np.ndarray, base: np.ndarray) -> PairedCounts:
    """arms[A, G], base[G] outcomes (1/0/NaN) -> discordant counts b, c and paired masks."""
    arms = np.atleast_2d(arms)
    mask = ~np.isnan(arms) & ~np.isnan(base)[None, :]
    a1 = (arms == 1.0) & mask
    b1 = (base[None, :] == 1.0) & mask
    b = (a1 & ~b1).sum(axis=1)
    c = (~a1 & b1 & mask).sum(axis=1)
    diff = np.where(mask, np.nan_to_num(arms) - np.nan_to_num(base)[None, :], 0.0)
    return PairedCounts(mask.sum(axis=1), b, c, a1.sum(axis=1), b1.sum(axis=1), mask, diff)


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value: binomial test of b successes in b + c discordant pairs at p = 1/2.

    No discordant pairs means no evidence of a difference: p = 1.
    """
    b, c = int(b), int(c)
    if b + c == 0:
        return 1.0
    return float(stats.binomtest(b, b + c, 0.5, alternative="two-sided").pvalue)


def mcnemar_exact_many(b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """:func:`mcnemar_exact` for arrays b[A], c[A] at once: min(1, 2 P(Bin(b + c, 1/2) <= min(b, c))) (the two-sided
    exact test at p = 1/2 is symmetric; tested equal to the scalar form)."""
    b = np.asarray(b, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    return np.where(b + c == 0, 1.0, np.minimum(1.0, 2.0 * stats.binom.cdf(np.minimum(b, c), b + c, 0.5)))


def holm(pvalues: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values: p[m] -> min(1, max_{j <= i} (m - j + 1) p_(j)) in sorted order.
    (statsmodels' multipletests gives the same numbers but forces a garbage collection on every Holm call, which
    costs ~70 ms; tested equal.)"""
    p = np.asarray(pvalues, dtype=np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out = np.empty(m)
    out[order] = adj
    return out


def adjust_pvalues(pvalues: np.ndarray, families: list[str | None]) -> dict[str, np.ndarray]:
    """Holm, Benjamini-Hochberg and Bonferroni adjusted p-values, applied within each family separately.

    pvalues[A]; families[A] (None = in no family: adjusted value NaN) -> {"holm", "bh", "bonferroni"}: [A].
    """
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(pvalues, dtype=np.float64)
    out = {k: np.full(p.shape, np.nan) for k in ("holm", "bh", "bonferroni")}
    fams = np.array([f if f is not None else "" for f in families], dtype=object)
    for fam in sorted(set(f for f in families if f is not None)):
        idx = np.flatnonzero((fams == fam) & ~np.isnan(p))
        if idx.size == 0:
            continue
        out["holm"][idx] = holm(p[idx])
        out["bh"][idx] = multipletests(p[idx], method="fdr_bh")[1]
        out["bonferroni"][idx] = np.minimum(1.0, p[idx] * idx.size)
    return out


# ------------------------------------------------------------------------------------------------------------
# Curve statistics (one run = lifts over its checkpoints)


def strict_sign_changes(lifts: np.ndarray) -> np.ndarray:
    """Crossings of the baseline: sign changes between consecutive *non-zero* lifts (a zero is not a crossing).

    lifts[..., K] -> count[...] (int). E.g. [+, 0, -, +] -> 2.
    """
    s = np.sign(np.asarray(lifts, dtype=np.float64))
    s = np.where(np.isnan(s), 0.0, s)
    # carry the last non-zero sign forward so that +,0,- counts once and +,0,+ counts zero
    k = s.shape[-1]
    pos = np.where(s != 0, np.arange(k), -1)
    last = np.maximum.accumulate(pos, axis=-1)
    filled = np.take_along_axis(s, np.maximum(last, 0), axis=-1) * (last >= 0)
    prev, cur = filled[..., :-1], s[..., 1:]
    return ((prev * cur) < 0).sum(axis=-1)


def linear_slope(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slope of y on x along the last axis: x[K], y[..., K] -> slope[...] (units of y per x)."""
    x = np.asarray(x, dtype=np.float64)
    xc = x - x.mean()
    denom = (xc**2).sum()
    if denom == 0:
        return np.full(np.shape(y)[:-1], np.nan)
    yc = y - np.mean(y, axis=-1, keepdims=True)
    return (yc * xc).sum(axis=-1) / denom


def row_pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson r along the last axis: x[..., K], y[..., K] -> r[...]; NaN where either row is constant."""
    xc = x - x.mean(axis=-1, keepdims=True)
    yc = y - y.mean(axis=-1, keepdims=True)
    num = (xc * yc).sum(axis=-1)
    den = np.sqrt((xc**2).sum(axis=-1) * (yc**2).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 1e-15, num / np.where(den > 1e-15, den, 1.0), np.nan)


def row_spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman rho along the last axis (average ranks for ties): x[..., K], y[..., K] -> rho[...]."""
    return row_pearson(stats.rankdata(x, axis=-1), stats.rankdata(y, axis=-1))


def argmax_distribution(samples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Share of resamples in which each checkpoint is the peak: samples[R, K] -> share[K] (sums to <= 1).

    Ties (common: lifts are multiples of 1/n) are broken uniformly at random so that early checkpoints are
    not favoured; rows that are all NaN count for no checkpoint.
    """
    r, k = samples.shape
    jitter = rng.random((r, k)) * 1e-9
    s = np.where(np.isnan(samples), -np.inf, samples + jitter)
    valid = np.isfinite(s).any(axis=1)
    am = np.argmax(s, axis=1)[valid]
    return np.bincount(am, minlength=k) / max(r, 1)


def cochran_q(outcomes: np.ndarray) -> dict[str, float | int] | None:
    """Cochran's Q across checkpoints on games measured at every checkpoint.

    outcomes[G, K] (1/0/NaN) -> {"statistic", "p_value", "df", "n_games"} or None when K < 2 or no complete game.
    """
    from statsmodels.stats.contingency_tables import cochrans_q

    x = np.asarray(outcomes, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] < 2:
        return None
    complete = x[~np.isnan(x).any(axis=1)]
    if complete.shape[0] == 0:
        return None
    k = complete.shape[1]
    # games with all-same outcomes carry no information (and statsmodels divides by their variance)
    informative = complete[(complete.sum(axis=1) > 0) & (complete.sum(axis=1) < k)]
    if informative.shape[0] == 0:
        return {"statistic": 0.0, "p_value": 1.0, "df": k - 1, "n_games": int(complete.shape[0])}
    res = cochrans_q(informative)
    return {"statistic": float(res.statistic), "p_value": float(res.pvalue), "df": int(res.df),
            "n_games": int(complete.shape[0])}
