"""The stream as the unit of evidence (pure: arrays in, numbers out).

A checkpoint arm's held-out games are played as a stream through one skill repository: the first skills it writes
serve every later game, so outcomes within a stream are correlated and an arm's success rate is one draw of "this
curator's stream". With R >= 2 streams per (run, checkpoint) cell, every statistic about a curve is judged against
the variance *between streams*:

- each stream's lift is its paired mean over games of (stream outcome - pooled baseline outcome), the baseline
  pooled over its own streams game by game (the baseline has no skill memory: its streams differ only by executor
  seeds, so pooling them only lowers noise, and the pooled baseline is common to every cell, so it cancels in every
  contrast between cells);
- a run's cells form a one-way layout of stream lifts (a pair of runs: a two-way run x checkpoint layout with R
  replicates per cell); the within-cell mean square, pooled over the cells, is the error term, with exact F and t
  reference distributions (small R gives few degrees of freedom, and wide intervals, as it should);
- the intra-stream correlation (ICC) comes from a stream x game two-way layout inside each cell (games are the
  same in every stream, so game difficulty is removed), pooled over cells, with the exact F interval of a one-way
  random-effects ICC; the design effect is DEFF = 1 + (m - 1) ICC (Kish) at m games per stream.

With one stream per cell the between-stream variance cannot be estimated; the caller either withholds the shape
claims or inflates game-level variances by a stated DEFF (``--stream-icc``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

# ------------------------------------------------------------------------------------------------------------
# The intra-stream correlation


def stream_icc(cells: list[np.ndarray], level: float = 0.95) -> dict[str, Any] | None:
    """Intra-stream correlation from cells of outcomes y[S, G] (S streams of one (run, checkpoint) over the same
    G games; NaN = unmeasured). Inside each cell a stream x game two-way layout (games measured in every stream):
    MS_S = G * sum_s (ybar_s - ybar)^2 / (S - 1) and MS_E = residual mean square, both pooled over cells.
    sigma2_u = (MS_S - MS_E) / G, rho = sigma2_u / (sigma2_u + MS_E); the interval from F = MS_S / MS_E against
    F(df_S, df_E) (exact for a normal random stream effect). m = the mean games per stream; DEFF = 1 + (m - 1) rho.
    Returns None when no cell has 2 streams and 2 shared games.
    """
    ss_s = ss_e = 0.0
    df_s = df_e = 0
    gsum = 0.0
    ncell = 0
    for y in cells:
        if y.shape[0] < 2:
            continue
        full = y[:, ~np.isnan(y).any(axis=0)]
        s, g = full.shape
        if g < 2:
            continue
        row = full.mean(axis=1, keepdims=True)
        col = full.mean(axis=0, keepdims=True)
        grand = full.mean()
        ss_s += g * float(((row - grand) ** 2).sum())
        ss_e += float(((full - row - col + grand) ** 2).sum())
        df_s += s - 1
        df_e += (s - 1) * (g - 1)
        gsum += g
        ncell += 1
    if ncell == 0 or df_e < 1:
        return None
    m = gsum / ncell
    ms_s, ms_e = ss_s / df_s, ss_e / df_e
    if ms_e <= 0:
        return None
    f = ms_s / ms_e

    def rho_of(fv: float) -> float:
        theta = max((fv - 1.0) / m, 0.0)  # sigma2_u / sigma2_e
        return theta / (1.0 + theta)

    a = (1 - level) / 2
    lo = rho_of(f / stats.f.ppf(1 - a, df_s, df_e))
    hi = rho_of(f / stats.f.ppf(a, df_s, df_e))
    rho = rho_of(f)
    return {"estimate": rho, "ci": [lo, hi], "level": level, "games_per_stream": m,
            "deff": 1.0 + (m - 1.0) * rho, "deff_ci": [1.0 + (m - 1.0) * lo, 1.0 + (m - 1.0) * hi],
            "f_statistic": f, "df_streams": df_s, "df_residual": df_e, "p_value": float(stats.f.sf(f, df_s, df_e)),
            "sigma2_stream": max(ms_s - ms_e, 0.0) / m, "sigma2_game": ms_e, "n_cells": ncell,
            "method": ("stream x game two-way layout within each (run, checkpoint) cell, pooled over cells; ICC = "
                       "sigma2_stream / (sigma2_stream + sigma2_game), exact F interval; DEFF = 1 + (m - 1) ICC")}


def residual_game_variance(y: np.ndarray) -> float:
    """sigma2_e of the ICC's definition from arms x games outcomes y[A, G] of one stream each (the games measured
    in every arm): the residual mean square after arm and game effects (game difficulty removed)."""
    full = y[:, ~np.isnan(y).any(axis=0)]
    a, g = full.shape
    if a < 2 or g < 2:
        return 0.25
    res = full - full.mean(axis=1, keepdims=True) - full.mean(axis=0, keepdims=True) + full.mean()
    return float((res**2).sum() / ((a - 1) * (g - 1)))


def stated_stream_variance(rho: float, sigma2_e: float | np.ndarray) -> float | np.ndarray:
    """The variance a stream effect adds to one stream's success rate at a stated ICC rho = s2u / (s2u + s2e)."""
    return rho / (1.0 - rho) * sigma2_e


def deff(rho: float, m: float) -> float:
    """Kish's design effect of m games per stream at intra-stream correlation rho."""
    return 1.0 + (max(m, 1.0) - 1.0) * rho


# ------------------------------------------------------------------------------------------------------------
# Cells of stream lifts


@dataclass(frozen=True)
class CellModel:
    """Stream lifts of one run's (or a pair's) cells, and the pooled between-stream variance.

    means[K] cell means of stream lifts, n[K] streams per cell, s2 the error variance of one stream's lift that
    contrasts between the cells are tested against (NaN when no cell has 2 streams), df its degrees of freedom.
    Nested streams: s2 is the within-cell variance pooled over the cells (sum of n_k - 1 df) and is also the
    level's. Crossed streams (`blocked`, :mod:`.blocks`): s2 is the residual after the stream blocks ((K - 1)(R - 1)
    df), and level_s2 / level_df the within-cell variance that a cell's level (its lift over the baseline) keeps,
    since the block does not cancel there."""

    means: np.ndarray
    n: np.ndarray
    s2: float
    df: int
    level_s2: float | None = None
    level_df: int | None = None
    blocked: bool = False

    @property
    def ok(self) -> bool:
        return self.df >= 1 and math.isfinite(self.s2) and self.s2 > 0

    @property
    def s2_level(self) -> float:
        return self.s2 if self.level_s2 is None else self.level_s2

    @property
    def df_level(self) -> int:
        return self.df if self.level_df is None else self.level_df


def cell_model(streams: list[np.ndarray]) -> CellModel:
    """streams: per cell, the lifts of its streams [n_k] (NaN-free) -> the cells' means and pooled variance."""
    means = np.array([float(np.mean(x)) if x.size else np.nan for x in streams])
    n = np.array([x.size for x in streams], dtype=np.int64)
    ss = sum(float(((x - x.mean()) ** 2).sum()) for x in streams if x.size >= 2)
    df = int(sum(max(x.size - 1, 0) for x in streams))
    return CellModel(means, n, ss / df if df else float("nan"), df)


def pooled(models: list[CellModel]) -> tuple[float, int]:
    """The within-cell variance pooled over several runs' cells: (s2, df)."""
    df = sum(m.df for m in models if m.df > 0)
    if df == 0:
        return float("nan"), 0
    return sum(m.s2 * m.df for m in models if m.df > 0) / df, df


def draw_means(model: CellModel, n_draw: int, rng: np.random.Generator) -> np.ndarray:
    """Parametric draws of the cell means [R, K]: mean + z sqrt(sigma2* / n_k), sigma2* = s2 df / chi2(df) drawn once
    per row (the posterior of a normal variance under a flat prior), so few streams give wide draws. Blocked
    (crossed streams): the cells' own noise from the blocked s2, plus one shared shift per row of variance
    (level_s2 - s2) / n, the block mean, which moves every cell of the run alike (contrasts do not see it)."""
    n = np.maximum(model.n, 1)[None, :]
    sig2 = model.s2 * model.df / rng.chisquare(model.df, size=(n_draw, 1))
    out = model.means[None, :] + rng.normal(size=(n_draw, model.means.size)) * np.sqrt(sig2 / n)
    if model.blocked:
        s2_block = max(model.s2_level - model.s2, 0.0)
        out = out + rng.normal(size=(n_draw, 1)) * np.sqrt(s2_block / n)
    return out


def baseline_draws(base_streams: np.ndarray, n_games: int, n_draw: int, rng: np.random.Generator) -> tuple[np.ndarray, float, float]:
    """Noise of the pooled baseline's mean, shared by every lift of a resample: draws[R] (deviations, mean 0), its
    variance and degrees of freedom. base_streams[R_b] are the baseline streams' success rates over the games; with
    one stream the baseline's games are independent (no memory), so p (1 - p) / (m - 1) bounds its variance."""
    rb = base_streams.size
    if rb >= 2:
        v, df = float(np.var(base_streams, ddof=1)) / rb, float(rb - 1)
        sig2 = v * df / rng.chisquare(df, size=n_draw)
    else:
        p = float(base_streams[0]) if rb else 0.5
        v, df = p * (1 - p) / max(n_games - 1, 1), float(max(n_games - 1, 1))
        sig2 = np.full(n_draw, v)
    return rng.normal(size=n_draw) * np.sqrt(sig2), v, df


def welch_t(lift: np.ndarray, var_a: np.ndarray, df_a: float, var_b: float, df_b: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lift against 0 with two variance parts (the arm's streams, the pooled baseline): t = lift / sqrt(va + vb),
    Welch-Satterthwaite degrees of freedom -> (t[A], df[A], p[A] two-sided)."""
    se2 = var_a + var_b
    with np.errstate(invalid="ignore", divide="ignore"):
        t = lift / np.sqrt(se2)
        df = se2**2 / (var_a**2 / max(df_a, 1e-12) + var_b**2 / max(df_b, 1e-12))
    p = 2.0 * stats.t.sf(np.abs(t), df)
    return t, df, p


def mde_t(se: np.ndarray, df: np.ndarray, alpha: np.ndarray | float, power: float) -> np.ndarray:
    """Smallest lift a two-sided t-test (standard error se, df) detects with `power` at `alpha`: noncentral t,
    bisection on the noncentrality, vectorised."""
    se = np.asarray(se, dtype=np.float64)
    df = np.asarray(df, dtype=np.float64)
    alpha = np.broadcast_to(np.asarray(alpha, dtype=np.float64), se.shape)
    crit = stats.t.ppf(1 - alpha / 2, df)
    lo, hi = np.zeros_like(se), np.full(se.shape, 50.0)
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        # the far tail is < 1e-10 wherever it matters and scipy's nct.cdf returns NaN there at times
        pw_ = stats.nct.sf(crit, df, mid) + np.nan_to_num(stats.nct.cdf(-crit, df, mid))
        ok = pw_ >= power
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    return hi * se


# ------------------------------------------------------------------------------------------------------------
# A pair of runs: the interaction, the equivalence band


def centring(k: int) -> np.ndarray:
    """C[K, 2K]: row k is the centred difference (a_k - mean a) - (b_k - mean b) of the stacked cell means [a; b]."""
    c = np.eye(k) - 1.0 / k
    return np.hstack([c, -c])


def interaction_wald(means: np.ndarray, cov: np.ndarray, df: float | None,
                     hotelling_n: int | None = None) -> dict[str, Any]:
    """Run x checkpoint interaction on the success-rate scale: are the centred curves different?

    means[2K] stacked cell means (run a, then run b), cov[2K, 2K] their covariance (known up to df: the error
    mean square's degrees of freedom, None = known). Wald W = D' (C cov C')^+ D on the K - 1 independent centred
    differences; F = W / (K - 1) against F(K - 1, df), or W against chi2(K - 1) when df is None, or, when cov is the
    sample covariance of n games' paired differences (hotelling_n = n), Hotelling's F = W (n - q) / (q (n - 1))
    against F(q, n - q), q = K - 1 (the chi-square reference rejected 8% of identical shapes at 140 games).
    """
    k = means.size // 2
    c = centring(k)[: k - 1]  # K - 1 rows span the centred contrasts (the K-th is minus their sum)
    d = c @ means
    v = c @ cov @ c.T
    if not np.all(np.isfinite(v)):
        w = float("nan")
    else:
        try:
            w = float(d @ np.linalg.solve(v, d))
        except np.linalg.LinAlgError:
            w = float(d @ np.linalg.pinv(v) @ d)
    q = k - 1
    if not np.isfinite(w):
        return {"statistic": None, "df": q, "df2": None, "p_value": None}
    if hotelling_n is not None and hotelling_n > q:
        f = w * (hotelling_n - q) / (q * (hotelling_n - 1))
        return {"statistic": f, "df": q, "df2": float(hotelling_n - q), "wald": w,
                "p_value": float(stats.f.sf(f, q, hotelling_n - q))}
    if df is None:
        return {"statistic": w, "df": q, "df2": None, "p_value": float(stats.chi2.sf(w, q))}
    f = w / q
    return {"statistic": f, "df": q, "df2": float(df), "p_value": float(stats.f.sf(f, q, df))}


def pointwise_band(means: np.ndarray, cov: np.ndarray, df: float | None, level: float = 0.90) -> dict[str, Any]:
    """Pointwise `level` intervals of the centred difference D_k (an intersection-union test: every interval inside
    +-delta is a TOST at (1 - level) / 2 each, so the equivalence claim has level (1 - level) / 2 overall).
    means[2K], cov[2K, 2K], df as in :func:`interaction_wald` -> {"diff", "lo", "hi", "sd", "q", "half_width_max"}."""
    k = means.size // 2
    c = centring(k)
    d = c @ means
    sd = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", c, cov, c), 0.0))
    a = (1 - level) / 2
    q = float(stats.norm.ppf(1 - a) if df is None else stats.t.ppf(1 - a, df))
    lo, hi = d - q * sd, d + q * sd
    return {"diff": d, "lo": lo, "hi": hi, "sd": sd, "q": q, "cov": c @ cov @ c.T,
            "half_width_max": float(np.max(np.maximum(np.abs(lo), np.abs(hi))))}


def equivalence_record(band: dict[str, Any], level: float, delta: float) -> dict[str, Any]:
    """compare.json's `equivalence` of a pair of curves (run pair or framework pair) from :func:`pointwise_band`:
    the centred difference, its pointwise intervals, the largest reach from 0 and whether it stays within delta."""
    return {"level": level, "kind": "pointwise (intersection-union TOST)", "delta": delta,
            "difference": band["diff"].tolist(),
            "band": [[lo, hi] for lo, hi in zip(band["lo"].tolist(), band["hi"].tolist())],
            "half_width_max": band["half_width_max"], "within_delta": bool(band["half_width_max"] <= delta)}


def oneway_f(model: CellModel) -> dict[str, Any] | None:
    """Do a run's checkpoints differ? One-way F of the cell means against the pooled between-stream variance; with
    crossed streams (blocked model) the randomized-block F: the same mean square against the residual after the
    stream blocks, df (K - 1, (K - 1)(R - 1))."""
    ok = model.n > 0
    k = int(ok.sum())
    if k < 2 or not model.ok:
        return None
    means, n = model.means[ok], model.n[ok]
    grand = float((means * n).sum() / n.sum())
    ms_b = float((n * (means - grand) ** 2).sum()) / (k - 1)
    f = ms_b / model.s2
    method = ("randomized-block F of the checkpoints' stream lifts against the residual after the stream blocks"
              if model.blocked else "one-way F of the checkpoints' stream lifts against the between-stream variance")
    return {"method": method,
            "statistic": f, "df": k - 1, "df2": model.df, "p_value": float(stats.f.sf(f, k - 1, model.df))}


# ------------------------------------------------------------------------------------------------------------
# What would decide: streams at the games per stream played, under the rule the verdict applies


@dataclass(frozen=True)
class Noise:
    """The covariance of the stacked cell means [a; b] (2K) of a pair at the current design (m games per stream,
    R streams per cell), split into the part that shrinks with games (game) and the part only streams shrink
    (stream): cov(m', R') = (game * m / m' + stream) * R / R'. df_per_stream: the error degrees of freedom one more
    stream per cell adds (2K), None where variances are taken as known (a stated ICC)."""

    game: np.ndarray  # [2K, 2K]
    stream: np.ndarray  # [2K, 2K]
    m: float
    r: float
    df_per_stream: int | None

    def cov(self, m: float, r: float) -> np.ndarray:
        return (self.game * self.m / m + self.stream) * self.r / r

    def df(self, r: float) -> float | None:
        return None if self.df_per_stream is None else self.df_per_stream * (r - 1)


def split_noise(s2: float, e_var: float, n: np.ndarray, m: float, df_per_stream: int) -> Noise:
    """The Noise of a pair's stacked cell means from the error variance s2 of one stream's lift (nested: the
    within-cell variance; crossed: the residual after the stream blocks) and its part that games shrink, e_var =
    sigma2_game / m (the rest, s2 - e_var, only streams shrink). n[2K] streams per cell; at the current design
    cov(m, mean n) = diag(s2 / n), the covariance the interaction and the band use."""
    r = float(np.mean(n))
    u_var = max(s2 - e_var, 0.0)
    game = np.diag(np.full(n.size, min(e_var, s2)) / n)
    return Noise(game, np.diag(np.full(n.size, u_var) / n), m, r, df_per_stream)


def _pass_band(noise: Noise, m: float, r: float, delta: float, z: np.ndarray, level: float) -> float:
    """P(every pointwise interval inside +-delta) when the shapes are identical, from fixed normal draws z[N, K]."""
    df = noise.df(r)
    if df is not None and df < 1:
        return 0.0
    k = noise.game.shape[0] // 2
    c = centring(k)
    cov = c @ noise.cov(m, r) @ c.T
    w, u = np.linalg.eigh(cov)
    d = z @ (u * np.sqrt(np.maximum(w, 0.0))).T
    sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
    a = (1 - level) / 2
    q = float(stats.norm.ppf(1 - a) if df is None else stats.t.ppf(1 - a, df))
    return float(np.mean(np.all(np.abs(d) + q * sd[None, :] <= delta, axis=1)))


def _detect(noise: Noise, m: float, r: float, delta: float, alpha: float) -> float:
    """Power of the interaction test when one checkpoint of one run is delta off (averaged over which one)."""
    df = noise.df(r)
    if df is not None and df < 1:
        return 0.0
    k = noise.game.shape[0] // 2
    c = centring(k)[: k - 1]
    vinv = np.linalg.pinv(c @ noise.cov(m, r) @ c.T)
    shifts = c[:, :k] * delta  # column j: checkpoint j of run a delta off, as centred contrasts
    lam = float(np.mean(np.einsum("ij,ik,kj->j", shifts, vinv, shifts)))
    q = k - 1
    if df is None:
        return float(stats.ncx2.sf(stats.chi2.ppf(1 - alpha, q), q, lam))
    return float(stats.ncf.sf(stats.f.ppf(1 - alpha, q, df), q, df, lam))


def to_decide(noise: Noise, delta: float, alpha: float, power: float, level: float = 0.90,
              max_streams: int = 64, seed: int = 0) -> dict[str, Any]:
    """Streams per cell at the games per stream played (the protocol's, fixed: a stream's length is part of what
    is measured, so no other length is offered) at which the verdict's rule would decide with `power`: identical
    shapes pass the pointwise band within +-delta, and one checkpoint delta off is detected by the interaction
    test. None where no number of streams up to `max_streams` does (power rises with the streams: whole-stream
    bisection)."""
    k = noise.game.shape[0] // 2
    z = np.random.default_rng(seed).normal(size=(2000, k))

    def both(r: float) -> tuple[bool, bool]:
        return (_pass_band(noise, noise.m, r, delta, z, level) >= power,
                _detect(noise, noise.m, r, delta, alpha) >= power)

    def streams_for(check: int) -> int | None:
        lo = max(2, int(noise.r))
        if lo > max_streams or not both(max_streams)[check]:
            return None
        if both(lo)[check]:
            return lo
        hi = max_streams
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if both(mid)[check] else (mid, hi)
        return hi

    s_eq, s_int = streams_for(0), streams_for(1)
    streams = None if s_eq is None or s_int is None else max(s_eq, s_int)
    return {"streams": streams, "streams_equivalence": s_eq, "streams_profile_difference": s_int,
            "games_per_stream": int(round(noise.m)), "max_streams": max_streams, "at_streams": int(noise.r)}
