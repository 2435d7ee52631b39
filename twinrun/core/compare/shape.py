"""Statistics of curve shapes (pure; arrays in, numbers out): shape noise and reliability, detrending, final vs
peak without the winner's curse, and seeds' profiles with their sphericity correction."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats

from twinrun.core.compare.stats import linear_slope, weighted_means


def bootstrap_cov(boot: np.ndarray) -> np.ndarray:
    """Covariance of the K columns of boot[R, K] over resamples (rows with a NaN are left out) -> cov[K, K]."""
    ok = ~np.isnan(boot).any(axis=1)
    b = boot[ok]
    if b.shape[0] < 2:
        return np.full((boot.shape[1], boot.shape[1]), np.nan)
    return np.atleast_2d(np.cov(b, rowvar=False))


def shape_noise(boot: np.ndarray) -> float:
    """Sampling noise of a curve's *shape*: the expected between-checkpoint variance that noise alone adds.

    boot[R, K] resampled lifts -> (tr S - 1'S1 / K) / (K - 1), S their bootstrap covariance. Noise shared by every
    checkpoint (the baseline's own noise, which games were drawn) moves the whole curve up or down and cancels in a
    shape; counting it (mean of the per-checkpoint variances) overstates shape noise about 2x in a sweep where
    arms share games.
    """
    k = boot.shape[1]
    if k < 2:
        return float("nan")
    s = bootstrap_cov(boot)
    return float((np.trace(s) - s.sum() / k) / (k - 1))


def detrend(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Residuals of y on a straight line in x, along the last axis: x[K], y[..., K] -> y - fit[..., K]."""
    x = np.asarray(x, dtype=np.float64)
    xc = x - x.mean()
    slope = linear_slope(x, y)
    return y - np.mean(y, axis=-1, keepdims=True) - np.asarray(slope)[..., None] * xc


def crossfit_final_vs_peak(diff: np.ndarray, mask: np.ndarray, weights: np.ndarray, fold: np.ndarray,
                           rng: np.random.Generator) -> np.ndarray:
    """Final minus peak without the winner's curse: the peak is chosen on one half of the games and its lift
    estimated on the other half (and the other way round); the two estimates are averaged.

    diff, mask[K, G]: a run's paired differences (arm - baseline) by checkpoint, in step order (the last is the
    final checkpoint); weights[R, G] (draw counts, or ones[1, G] for the estimate itself); fold[G] in {0, 1}.
    Returns est[R]: mean over the two directions of L_h[final] - L_h[argmax L_other]. Ties for the peak are broken
    at random (lifts are multiples of 1/n, ties are common).
    """
    halves = [weighted_means(diff, mask, weights * (fold == h)[None, :]) for h in (0, 1)]  # [R, K] each
    out = np.zeros(weights.shape[0])
    for pick, est in ((0, 1), (1, 0)):
        sel = halves[pick] + rng.random(halves[pick].shape) * 1e-9
        peak = np.argmax(np.where(np.isnan(sel), -np.inf, sel), axis=1)
        h = halves[est]
        out += h[:, -1] - h[np.arange(h.shape[0]), peak]
    return out / 2.0


def best_vs_final(lifts: np.ndarray, boot: np.ndarray, level: float = 0.95) -> dict[str, Any]:
    """Is the final checkpoint below the best one? Comparisons with the final, simultaneous over the others.

    lifts[K], boot[R, K] (the last column is the final checkpoint). T_j = (L_j - L_final) / sd_j for every other
    checkpoint j; the final is below the best when max_j T_j exceeds the `level` quantile of the bootstrap
    max_j (T*_j - T_j) (one-sided max-t, Hsu's comparisons with the best read from the final's side). The lower
    bound of (best - final) is max_j (L_j - L_final - c sd_j), floored at 0. Used where games cannot be split
    (published summaries).
    """
    d = lifts[:-1] - lifts[-1]
    dstar = boot[:, :-1] - boot[:, -1:]
    dstar = dstar[~np.isnan(dstar).any(axis=1)]
    sd = dstar.std(axis=0, ddof=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = d / np.where(sd > 0, sd, np.inf)
        tstar = (dstar - d[None, :]) / np.where(sd > 0, sd, np.inf)[None, :]
    c = float(np.quantile(tstar.max(axis=1), level))
    lower = float(max(0.0, np.max(d - c * sd)))
    p = float(np.mean(tstar.max(axis=1) >= np.max(t)))
    return {"best_minus_final_lower": lower, "below": bool(np.max(t) > c), "p_value": p, "c": c}


def reliability(lifts: np.ndarray, boot: np.ndarray) -> float:
    """Share of the between-checkpoint variance of a curve that is not sampling noise.

    lifts[K] observed, boot[R, K] resampled lifts -> 1 - shape_noise(boot) / Var_k(L), clipped to [0, 1];
    NaN for K < 3. The expected correlation of two noisy measurements of the *same* curve is about the product
    of their square-rooted reliabilities (attenuation), which is the sampling-noise ceiling on between-run r.
    """
    if lifts.size < 3:
        return float("nan")
    total = float(np.var(lifts, ddof=1))
    noise = shape_noise(boot)
    if total <= 0:
        return 0.0
    return float(min(1.0, max(0.0, 1.0 - noise / total)))


def helmert(k: int) -> np.ndarray:
    """C[K - 1, K]: orthonormal contrasts (rows orthogonal to the ones vector and to each other)."""
    c = np.zeros((k - 1, k))
    for i in range(1, k):
        c[i - 1, :i] = 1.0
        c[i - 1, i] = -float(i)
        c[i - 1] /= math.sqrt(i * (i + 1))
    return c


def sphericity_epsilon(cov: np.ndarray, n_subjects: int, n_groups: int) -> dict[str, float]:
    """Greenhouse-Geisser and Huynh-Feldt epsilons of a repeated-measures factor with K levels.

    cov[K, K]: the pooled within-group covariance of the subjects' K measures. With S = C cov C' (C orthonormal
    contrasts): GG = tr(S)^2 / ((K - 1) tr(S^2)) (Box 1954; 1 under sphericity, 1 / (K - 1) at worst);
    HF = (N (K - 1) GG - 2) / ((K - 1) (N - g - (K - 1) GG)) (Huynh & Feldt 1976, with Lecoutre's 1991 N - g + 1
    correction for groups: numerator (N - g + 1)(K - 1) GG - 2), clipped to [GG, 1]; and their mean, the one
    profile_anova uses (see there)."""
    k = cov.shape[0]
    c = helmert(k)
    s = c @ cov @ c.T
    tr, tr2 = float(np.trace(s)), float(np.trace(s @ s))
    gg = tr**2 / ((k - 1) * tr2) if tr2 > 0 else 1.0
    gg = min(max(gg, 1.0 / (k - 1)), 1.0)
    den = (k - 1) * (n_subjects - n_groups - (k - 1) * gg)
    hf = ((n_subjects - n_groups + 1) * (k - 1) * gg - 2) / den if den > 0 else 1.0
    hf = float(min(max(hf, gg), 1.0))
    return {"greenhouse_geisser": gg, "huynh_feldt": hf, "mean_gg_hf": (gg + hf) / 2}


def seed_profile_ss(curves: dict[str, np.ndarray]) -> tuple[float, int]:
    """The seeds' sum of squares around their group's mean profile and its df: each run's curve centred (its level
    removed), SS = sum over groups and runs of (centred - group mean centred)^2, df = (N - groups)(K - 1).
    curves: group -> lifts[n_runs, K]. sqrt(SS / df) is the seed SD of a run's centred lift (one group: the seed
    control's spread; several: profile_anova's error term)."""
    k = next(iter(curves.values())).shape[1]
    cen = {f: c - c.mean(axis=1, keepdims=True) for f, c in curves.items()}
    ss = sum(float(((c - c.mean(axis=0)) ** 2).sum()) for c in cen.values())
    return ss, (sum(c.shape[0] for c in cen.values()) - len(cen)) * (k - 1)


def profile_anova(curves: dict[str, np.ndarray]) -> dict[str, Any] | None:
    """Do the frameworks' checkpoint profiles differ by more than their seeds' profiles do?

    curves: framework -> lifts[n_seeds, K] (runs of that framework, shared checkpoints). Each run's curve is
    centred (its level removed: a profile); the framework x checkpoint mean square is tested against the
    seed(framework) x checkpoint mean square, the error term of a split-plot analysis with seeds random:
    F = [SS_B / ((F - 1)(K - 1))] / [SS_W / ((N - F)(K - 1))]. Seeds' curves that drift make the checkpoints'
    covariance non-spherical, and the F's degrees of freedom are then too many: both are multiplied by the mean of
    the Greenhouse-Geisser and Huynh-Feldt epsilons (Stevens' compromise). Why not GG alone (with HF where GG > 0.75,
    the usual rule): with fewer seeds than checkpoints the seeds' covariance has rank N - F < K - 1, GG's estimate is
    then bounded by (N - F) / (K - 1) whatever the truth, the switch to HF can never happen, and the test rejected
    0-1.2% of same-truth comparisons at alpha 5% under sphericity with 2-4 seeds per framework, at about half the
    power of the mean's; HF alone rejected up to 8.6% when seed curves drift as a random walk with little noise. The
    mean: 5.1-5.8% there (6.3% in the slow test's draws), 1.5-2.6% under sphericity (bench/sphericity_correction.py,
    docs/compare.md). Needs >= 2 frameworks, >= 2 seeds in one. Returns {"statistic", "df1", "df2" (uncorrected),
    "epsilon", "epsilon_method", "epsilons", "p_value" (corrected), "p_uncorrected", "seed_sd"} (seed_sd: the within-framework sd of a centred lift, sampling noise included) or
    None.
    """
    names = sorted(curves)
    if len(names) < 2:
        return None
    k = next(iter(curves.values())).shape[1]
    cen = {f: c - c.mean(axis=1, keepdims=True) for f, c in curves.items()}
    n_runs = sum(c.shape[0] for c in cen.values())
    df2 = (n_runs - len(names)) * (k - 1)
    df1 = (len(names) - 1) * (k - 1)
    if df2 < 1 or df1 < 1:
        return None
    means = {f: c.mean(axis=0) for f, c in cen.items()}
    grand = sum(cen[f].shape[0] * means[f] for f in names) / n_runs
    ss_b = sum(cen[f].shape[0] * float(((means[f] - grand) ** 2).sum()) for f in names)
    ss_w, _ = seed_profile_ss(curves)
    if ss_w <= 0:
        return None
    f_stat = (ss_b / df1) / (ss_w / df2)
    resid = np.vstack([curves[f] - curves[f].mean(axis=0) for f in names])
    cov = resid.T @ resid / (n_runs - len(names))
    eps = sphericity_epsilon(cov, n_runs, len(names))
    e = eps["mean_gg_hf"]
    return {"statistic": f_stat, "df1": df1, "df2": df2, "epsilon": e, "epsilon_method": "mean of greenhouse-geisser "
            "and huynh-feldt",
            "epsilons": eps, "p_value": float(stats.f.sf(f_stat, df1 * e, df2 * e)),
            "p_uncorrected": float(stats.f.sf(f_stat, df1, df2)), "seed_sd": math.sqrt(ss_w / df2)}


def paired_profile_anova(a: np.ndarray, b: np.ndarray) -> dict[str, Any] | None:
    """Do two groups' checkpoint profiles differ, tested within seed? For runs that pair by seed (docs/compare.md,
    "Seeds pair").

    a[n, K], b[n, K]: row i of each is that group's run at paired seed i (shared checkpoints). A seed's own profile
    (a start that is high or low at the first checkpoints and fades) is shared by its two runs and cancels in their
    difference, so it must leave the error term too: each pair's difference of centred curves
    d_i = cen(a_i) - cen(b_i) is a subject, and the checkpoint effect on d (the group x checkpoint interaction) is
    tested against seed x checkpoint of d: F = [n sum_k dbar_k^2 / (K - 1)] / [sum_ik (d_ik - dbar_k)^2 /
    ((n - 1)(K - 1))] (d's rows are centred, so no subject term is left). df multiplied by the mean of the
    Greenhouse-Geisser and Huynh-Feldt epsilons of d's covariance (n subjects, one group), as in profile_anova.
    With equal n this is the split-plot F with seeds as blocks crossed with the groups (the same F as the
    group x checkpoint term against group x seed x checkpoint). Needs n >= 2, K >= 2. Returns profile_anova's keys
    plus "design": "paired", "n_pairs", "pair_r" (per pair: Pearson r of the two runs' centred curves),
    "pair_r_mean", "diff_sd" (sd of one pair's centred difference at a checkpoint, pooled; the mean difference has
    sd diff_sd / sqrt(n)); seed_sd = diff_sd / sqrt(2), the per-run seed sd that is not shared by the pair (equal to
    profile_anova's seed_sd when pairs do not correlate). None when n < 2, K < 2 or d has no spread.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"paired_profile_anova: a{a.shape} and b{b.shape} must be the same [n, K] shape")
    n, k = a.shape
    if n < 2 or k < 2:
        return None
    ca, cb = a - a.mean(axis=1, keepdims=True), b - b.mean(axis=1, keepdims=True)
    d = ca - cb
    dbar = d.mean(axis=0)
    df1, df2 = k - 1, (n - 1) * (k - 1)
    ss_c = n * float((dbar**2).sum())
    resid = d - dbar
    ss_e = float((resid**2).sum())
    if ss_e <= 0:
        return None
    f_stat = (ss_c / df1) / (ss_e / df2)
    eps = sphericity_epsilon(resid.T @ resid / (n - 1), n, 1)
    e = eps["mean_gg_hf"]
    pair_r = [float(np.corrcoef(x, y)[0, 1]) if x.std() > 0 and y.std() > 0 else float("nan")
              for x, y in zip(ca, cb)]
    finite = [r for r in pair_r if np.isfinite(r)]
    diff_sd = math.sqrt(ss_e / df2)
    return {"statistic": f_stat, "df1": df1, "df2": df2, "epsilon": e,
            "epsilon_method": "mean of greenhouse-geisser and huynh-feldt", "epsilons": eps,
            "p_value": float(stats.f.sf(f_stat, df1 * e, df2 * e)), "p_uncorrected": float(stats.f.sf(f_stat, df1, df2)),
            "seed_sd": diff_sd / math.sqrt(2.0), "diff_sd": diff_sd, "design": "paired", "n_pairs": n,
            "pair_r": pair_r, "pair_r_mean": float(np.mean(finite)) if finite else None}
