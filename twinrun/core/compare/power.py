"""Power (pure): the minimum detectable lift of the exact tests at a family's level (one stream per arm, conditional
on the stream). The games and streams that would decide a shape verdict are in :mod:`.streams`."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
from scipy import stats

# ------------------------------------------------------------------------------------------------------------
# The minimum detectable lift at a family's level (exact power)


@functools.lru_cache(maxsize=64)
def mcnemar_critical(d_max: int, alpha: float) -> np.ndarray:
    """u[D] for D = 0..d_max: the smallest b with exact two-sided McNemar p <= alpha among D discordant pairs
    (D + 1 where no b rejects). By symmetry b <= D - u[D] rejects too. The doubled upper tail 2 P(B >= b) <= alpha
    holds from b = isf(alpha / 2) + 1 on (tested equal to scipy's binomtest for every D up to 300)."""
    d = np.arange(d_max + 1)
    k = stats.binom.isf(alpha / 2.0, np.maximum(d, 1), 0.5)
    u = np.where(np.isfinite(k), k + 1, d + 1).astype(np.int64)
    # the test is two-sided at p = 1/2: an upper critical value at or below D/2 would reject everything
    u = np.where((u > d) | (u <= d / 2.0), d + 1, u)
    u[0] = 1
    u.flags.writeable = False  # cached: shared by every caller
    return u


def mcnemar_power(n: int, p_disc: float, lift: np.ndarray, alpha: float, u: np.ndarray | None = None) -> np.ndarray:
    """Exact power of the two-sided exact McNemar test for n pairs with discordance p_disc and true lifts
    lift[...] (each <= p_disc): D ~ Bin(n, p_disc) discordant pairs, b | D ~ Bin(D, (1 + lift / p_disc) / 2)."""
    u = mcnemar_critical(n, alpha) if u is None else u
    d = np.arange(n + 1)
    pd = stats.binom.pmf(d, n, p_disc)  # [D]
    pi = np.clip((1.0 + np.asarray(lift, dtype=np.float64)[..., None] / p_disc) / 2.0, 0.0, 1.0)  # [..., 1]
    upper = stats.binom.sf(u[d] - 1, d, pi)
    lower = np.where(d - u[d] >= 0, stats.binom.cdf(d - u[d], d, pi), 0.0)
    return ((upper + lower) * pd).sum(axis=-1)


def _bisect_lift(power_at: Callable[[np.ndarray], np.ndarray], top: np.ndarray, target: float,
                 steps: int = 30) -> np.ndarray:
    """Smallest lift in (0, top[A]] whose power_at(lift[A]) >= target, for all arms at once (power increases with
    the lift); NaN where even `top` falls short."""
    lo = np.zeros_like(top)
    hi = top.copy()
    reach = power_at(hi) >= target
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        ok = power_at(mid) >= target
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    return np.where(reach, hi, np.nan)


def mde_mcnemar_exact(n_pairs: np.ndarray, p_discordant: np.ndarray, alpha: np.ndarray | float,
                      power: float = 0.8) -> np.ndarray:
    """Smallest positive lift the exact McNemar test detects with `power` at level `alpha` (per arm).

    n_pairs[A], p_discordant[A] (floored at one discordant game in n, as a paired sweep never has none),
    alpha[A] or scalar (a family's per-arm level) -> mde[A]; NaN where even every discordant game going the arm's
    way (lift = p_disc) falls short. The discordance is held at its observed value under the alternative.
    Vectorised over the arms that share (n, alpha).
    """
    n_pairs = np.asarray(n_pairs, dtype=np.int64)
    p_disc = np.asarray(p_discordant, dtype=np.float64)
    alphas = np.broadcast_to(np.asarray(alpha, dtype=np.float64), n_pairs.shape)
    out = np.full(n_pairs.shape, np.nan)
    for n, a in sorted({(int(n), float(a)) for n, a in zip(n_pairs, alphas)}):
        idx = np.flatnonzero((n_pairs == n) & (alphas == a) & np.isfinite(p_disc))
        if n < 1 or idx.size == 0:
            continue
        pd_ = np.clip(p_disc[idx], 1.0 / n, 1.0)
        u = mcnemar_critical(n, a)
        # only counts of discordant games within 10 sd of their means carry probability (the rest is < 1e-20)
        sd = np.sqrt(n * pd_ * (1 - pd_))
        d = np.arange(max(0, int(np.min(n * pd_ - 10 * sd - 1))), min(n, int(np.max(n * pd_ + 10 * sd + 1))) + 1)
        p_d = stats.binom.pmf(d[None, :], n, pd_[:, None])  # [A, D]
        low_ok = d - u[d] >= 0

        def power_at(lift: np.ndarray, pd_: np.ndarray = pd_, p_d: np.ndarray = p_d, u: np.ndarray = u,
                     d: np.ndarray = d, low_ok: np.ndarray = low_ok) -> np.ndarray:
            pi = np.clip((1.0 + lift / pd_) / 2.0, 0.0, 1.0)[:, None]
            upper = stats.binom.sf(u[d] - 1, d, pi)
            lower = np.where(low_ok, stats.binom.cdf(d - u[d], d, pi), 0.0)
            return ((upper + lower) * p_d).sum(axis=1)

        out[idx] = _bisect_lift(power_at, pd_, power)
    return out


def fisher_rejects(n1: int, n0: int, alpha: float) -> np.ndarray:
    """reject[x1, x0] (bool, (n1 + 1) x (n0 + 1)): Fisher's exact two-sided test (scipy's definition: the
    probability of tables at most as likely as the observed one, given the margins) rejects at `alpha`."""
    total = n1 + n0
    rej = np.zeros((n1 + 1, n0 + 1), dtype=bool)
    for t in range(total + 1):
        lo, hi = max(0, t - n0), min(n1, t)
        x1 = np.arange(lo, hi + 1)
        pmf = stats.hypergeom.pmf(x1, total, n1, t)
        # p(x) = sum of pmf over tables no more likely than x (relative tolerance as scipy's fisher_exact)
        order = np.argsort(pmf)
        csum = np.cumsum(pmf[order])
        idx = np.searchsorted(pmf[order], pmf * (1 + 1e-7), side="right") - 1
        p = csum[idx]
        rej[x1, t - x1] = p <= alpha
    return rej


def mde_fisher_exact(n_arm: np.ndarray, n_base: int, p_base: float, alpha: np.ndarray | float,
                     power: float = 0.8) -> np.ndarray:
    """Smallest positive lift Fisher's exact test (arm vs baseline counts, unpaired) detects with `power`:
    exact unconditional power sum_{rejected tables} Bin(x1; n1, p0 + lift) Bin(x0; n0, p0), baseline rate held
    at p_base. n_arm[A], alpha[A] or scalar -> mde[A] (NaN when unreachable below a rate of 1)."""
    n_arm = np.asarray(n_arm, dtype=np.int64)
    alphas = np.broadcast_to(np.asarray(alpha, dtype=np.float64), n_arm.shape)
    out = np.full(n_arm.shape, np.nan)
    top = 1.0 - p_base
    if top <= 0:
        return out
    x0_pmf = stats.binom.pmf(np.arange(n_base + 1), n_base, p_base)
    for n1, a in sorted({(int(n), float(a)) for n, a in zip(n_arm, alphas)}):
        idx = np.flatnonzero((n_arm == n1) & (alphas == a))
        reach = fisher_rejects(n1, int(n_base), a).astype(np.float64) @ x0_pmf  # P(reject | x1) [x1]

        def power_at(lift: np.ndarray, n1: int = n1, reach: np.ndarray = reach) -> np.ndarray:
            p1 = np.clip(p_base + lift, 0.0, 1.0)[:, None]
            return (stats.binom.pmf(np.arange(n1 + 1)[None, :], n1, p1) * reach[None, :]).sum(axis=1)

        out[idx] = _bisect_lift(power_at, np.full(idx.size, top), power)
    return out
