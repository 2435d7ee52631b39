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

import math
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


def mde_paired(n_pairs: np.ndarray, p_discordant: np.ndarray, alpha: float = 0.05, power: float = 0.8) -> np.ndarray:
    """Minimum detectable lift (absolute, in success-rate units) of a paired test at the given power.

    n_pairs[A], p_discordant[A] = (b + c) / n -> mde[A] = (z_{1-a/2} + z_{power}) * sqrt(p_disc / n),
    the normal approximation to McNemar's test (Connor 1987, variance under the null). A discordance of 0
    (identical outcomes) would give an MDE of 0, which no test can reach; it is floored at one discordant
    game in n.
    """
    n = np.asarray(n_pairs, dtype=np.float64)
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    with np.errstate(invalid="ignore", divide="ignore"):
        pd = np.maximum(np.asarray(p_discordant, dtype=np.float64), 1.0 / np.maximum(n, 1.0))
        return np.where(n > 0, z * np.sqrt(pd / np.maximum(n, 1.0)), np.nan)


def mde_unpaired(n_arm: np.ndarray, n_base: np.ndarray, p_base: np.ndarray, alpha: float = 0.05, power: float = 0.8) -> np.ndarray:
    """MDE of a two-proportion comparison (no pairing known): (z_a + z_b) * sqrt(p(1-p) (1/n1 + 1/n0)).

    Shapes: [A] each (p_base broadcast). Used for published summaries without b, c; conservative for data
    that were in fact paired on the same games.
    """
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    p = np.clip(np.asarray(p_base, dtype=np.float64), 1e-9, 1 - 1e-9)
    return z * np.sqrt(p * (1 - p) * (1.0 / np.asarray(n_arm, float) + 1.0 / np.asarray(n_base, float)))


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
        for key, method in (("holm", "holm"), ("bh", "fdr_bh"), ("bonferroni", "bonferroni")):
            out[key][idx] = multipletests(p[idx], method=method)[1]
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


def reliability(lifts: np.ndarray, boot: np.ndarray) -> float:
    """Share of the between-checkpoint variance of a curve that is not sampling noise.

    lifts[K] observed, boot[R, K] resampled lifts -> 1 - mean_k Var_boot(L_k) / Var_k(L), clipped to [0, 1];
    NaN for K < 3. The expected correlation of two noisy measurements of the *same* curve is about the product
    of their square-rooted reliabilities (attenuation), which is the sampling-noise ceiling on between-run r.
    """
    if lifts.size < 3:
        return float("nan")
    total = float(np.var(lifts, ddof=1))
    noise = float(np.nanmean(np.nanvar(boot, axis=0, ddof=1)))
    if total <= 0:
        return 0.0
    return float(min(1.0, max(0.0, 1.0 - noise / total)))


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


# ------------------------------------------------------------------------------------------------------------
# Sample size that would decide


def n_for_chi2_power(stat: float, df: int, n: int, alpha: float = 0.05, power: float = 0.8,
                     max_factor: float = 1000.0) -> int | None:
    """Games needed for a chi-square test to reach `power`, if the observed effect were the truth.

    The noncentrality is estimated as max(stat - df, 0) and grows linearly with the number of games; returns
    the smallest n' (>= n) whose power reaches `power`, or None when the observed effect is at noise level or
    would need more than max_factor * n games.
    """
    lam = max(float(stat) - df, 0.0)
    if lam <= 0 or df < 1 or n < 1:
        return None
    crit = stats.chi2.ppf(1 - alpha, df)

    def pw(f: float) -> float:
        return float(stats.ncx2.sf(crit, df, lam * f))

    if pw(1.0) >= power:
        return int(n)
    if pw(max_factor) < power:
        return None
    lo, hi = 1.0, max_factor
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if pw(mid) >= power else (mid, hi)
    return int(math.ceil(hi * n))


SCALE_FACTORS = (1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0)


def n_for_correlation_ci(lifts_a: np.ndarray, boot_a: np.ndarray, lifts_b: np.ndarray, boot_b: np.ndarray,
                         n: int, level: float = 0.95) -> tuple[int | None, str | None]:
    """Games at which the bootstrap CI of Pearson r would exclude 0, if the observed curves were the truth.

    lifts_*[K], boot_*[R, K]. Sampling noise of a lift shrinks as 1/sqrt(n): the resampled deviations are
    scaled by sqrt(n / n') around the observed curves and the CI recomputed for n' = f * n over a grid of f up
    to 64. Returns (n', "positive" | "negative") or (None, None) when no n' on the grid decides.
    """
    da = boot_a - lifts_a[None, :]
    db = boot_b - lifts_b[None, :]
    for f in SCALE_FACTORS:
        s = 1.0 / math.sqrt(f)
        r = row_pearson(lifts_a[None, :] + s * da, lifts_b[None, :] + s * db)
        lo, hi = percentile_ci(r, level)
        if np.isfinite(lo) and lo > 0:
            return int(math.ceil(f * n)), "positive"
        if np.isfinite(hi) and hi < 0:
            return int(math.ceil(f * n)), "negative"
    return None, None
