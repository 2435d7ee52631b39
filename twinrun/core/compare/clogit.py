"""The run x checkpoint interaction with game effects: a vectorised conditional logit (pure; no I/O)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

# ------------------------------------------------------------------------------------------------------------
# Framework x checkpoint interaction (game effects)


def interaction_test(y: np.ndarray, game: np.ndarray, group: np.ndarray, ckpt: np.ndarray) -> dict[str, object]:
    """Does the checkpoint profile differ between two runs? Game effects are conditioned out.

    y[N] outcomes (0/1, NaN dropped), game[N] game ids, group[N] in {0, 1} (which run), ckpt[N] checkpoint index
    0..K-1. Primary: conditional logistic regression stratified by game (the game effects are eliminated
    exactly, no incidental-parameter bias), likelihood ratio of  run + checkpoint + run x checkpoint  against
    run + checkpoint, df = K - 1. Games whose outcomes are all equal carry no information in a conditional
    likelihood and are dropped. Under (quasi-)separation (a cell of all successes or failures: a coefficient runs
    off to infinity and the fit does not converge) the test falls back to a linear probability model with game
    fixed effects absorbed and game-clustered standard errors (Wald chi2 on the K - 1 interaction terms), and
    says so in "method". Returns {"method", "statistic", "df", "p_value", "n_games", "note"}.
    """
    y = np.asarray(y, dtype=np.float64)
    keep = ~np.isnan(y)
    y, game, group, ckpt = y[keep], np.asarray(game)[keep], np.asarray(group)[keep], np.asarray(ckpt)[keep]
    k = int(ckpt.max()) + 1 if ckpt.size else 0
    if k < 2:
        return {"method": "none", "statistic": None, "df": 0, "p_value": None, "n_games": 0,
                "note": "fewer than 2 checkpoints"}
    _, gidx = np.unique(game, return_inverse=True)
    sums = np.bincount(gidx, weights=y)
    cnts = np.bincount(gidx)
    informative = ((sums > 0) & (sums < cnts))[gidx]
    y, gidx, group, ckpt = y[informative], gidx[informative], group[informative], ckpt[informative]
    _, gidx = np.unique(gidx, return_inverse=True)  # contiguous 0..n_games-1 after dropping
    n_games = int(gidx.max()) + 1 if gidx.size else 0
    df = k - 1
    if n_games < 2:
        return {"method": "none", "statistic": None, "df": df, "p_value": None, "n_games": n_games,
                "note": "fewer than 2 games with varying outcomes"}
    run_col = group.astype(np.float64)[:, None]
    ck = np.zeros((y.size, k - 1))
    rows = np.flatnonzero(ckpt > 0)
    ck[rows, ckpt[rows] - 1] = 1.0
    reduced = np.hstack([run_col, ck])
    full = np.hstack([reduced, ck * run_col])

    fit_red = conditional_logit(y, reduced, gidx)
    # the nested model's optimum (interactions at 0) is a close start for the full model
    fit_full = conditional_logit(y, full, gidx, start=np.concatenate([fit_red.params, np.zeros(k - 1)]))
    if fit_full.ok and fit_red.ok:
        lr = max(0.0, 2.0 * (fit_full.llf - fit_red.llf))
        return {"method": "conditional logit (game strata), likelihood ratio", "statistic": lr, "df": df,
                "p_value": float(stats.chi2.sf(lr, df)), "n_games": n_games, "note": ""}
    stat, p = _lpm_wald(y, full, gidx, np.arange(reduced.shape[1], full.shape[1]))
    return {"method": "linear probability, game fixed effects, clustered Wald", "statistic": stat, "df": df,
            "p_value": p, "n_games": n_games,
            "note": "conditional logit did not converge (separation: a cell of all successes or failures)"}


@dataclass(frozen=True)
class CLogitFit:
    llf: float
    params: np.ndarray
    ok: bool  # converged, finite, no coefficient beyond |15| (on the logit scale that means a separated cell)


def conditional_logit(y: np.ndarray, x: np.ndarray, groups: np.ndarray, maxiter: int = 500,
                      start: np.ndarray | None = None) -> CLogitFit:
    """Conditional (fixed-effects) logistic regression, the model of statsmodels' ConditionalLogit, vectorised.

    y[N] in {0, 1}, x[N, P] (no intercept: it is conditioned out), groups[N] in 0..S-1 -> CLogitFit.
    The conditional likelihood of a group with s successes is exp(sum_i y_i x_i b) / e_s(exp(x_1 b), ...), where
    e_s is the elementary symmetric polynomial, built by the recursion e_j <- e_j + w_t e_{j-1} over the group's
    rows for all groups at once; the gradient is sum_i y_i x_i - sum_i P(i succeeds | s) x_i, with the inclusion
    probabilities from prefix and suffix polynomials (no subtraction, so no cancellation). statsmodels recurses
    per group in Python, which takes ~10 s for one 140-game, 16-arm model; this takes tens of milliseconds and
    is tested equal to it.
    """
    from scipy.optimize import minimize

    y = np.asarray(y, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    n_groups = int(groups.max()) + 1
    order = np.argsort(groups, kind="stable")
    g_sorted = groups[order]
    counts = np.bincount(groups, minlength=n_groups)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    slot = np.arange(y.size) - starts[g_sorted]
    t_max = int(counts.max())
    p = x.shape[1]
    xp = np.zeros((n_groups, t_max, p))
    xp[g_sorted, slot] = x[order]
    mask = np.zeros((n_groups, t_max), dtype=bool)
    mask[g_sorted, slot] = True
    s = np.bincount(groups, weights=y, minlength=n_groups).astype(np.int64)
    s_max = int(s.max())
    sum_yx = (y[:, None] * x).sum(axis=0)
    gi = np.arange(n_groups)

    # For each row t: j in 0..s_max indexes the coefficient of the rows-before-t polynomial, s - 1 - j that of
    # the rows-after-t polynomial; their product summed over j is e_{s-1} of the group without row t.
    j = np.arange(s_max + 1)
    k_after = s[:, None] - 1 - j[None, :]  # [G, S+1]
    k_valid = (k_after >= 0)[:, None, :].astype(np.float64)  # [G, 1, S+1]
    # flat gather index into after[:, 1:] viewed as [G, T*(S+1)]: row t, coefficient s - 1 - j
    gather = (np.arange(t_max)[None, :, None] * (s_max + 1) + np.maximum(k_after, 0)[:, None, :]).reshape(n_groups, -1)

    def negll(beta: np.ndarray) -> tuple[float, np.ndarray]:
        eta = np.where(mask, xp @ beta, -np.inf)
        m = eta.max(axis=1)  # scale by the group max so that every weight is <= 1
        w = np.exp(eta - m[:, None])  # [G, T]; padded rows weigh 0
        before = np.zeros((n_groups, t_max + 1, s_max + 1))  # e_j of rows < t
        after = np.zeros((n_groups, t_max + 1, s_max + 1))  # e_j of rows >= t
        before[:, 0, 0] = 1.0
        after[:, t_max, 0] = 1.0
        for t in range(t_max):
            before[:, t + 1] = before[:, t]
            before[:, t + 1, 1:] += w[:, t, None] * before[:, t, :-1]
            u = t_max - 1 - t
            after[:, u] = after[:, u + 1]
            after[:, u, 1:] += w[:, u, None] * after[:, u + 1, :-1]
        es = before[gi, t_max, s]  # [G]
        q = np.take_along_axis(after[:, 1:].reshape(n_groups, -1), gather, axis=1).reshape(n_groups, t_max, s_max + 1)
        e_without = (before[:, :t_max] * q * k_valid).sum(axis=2)  # [G, T]: e_{s-1} without row t
        incl = w * e_without / es[:, None]  # P(row t is a success | s successes in its group)
        ll = float(sum_yx @ beta - (np.log(es) + s * m).sum())
        grad = sum_yx - np.einsum("gt,gtp->p", incl, xp)
        return -ll, -grad

    x0 = np.zeros(p) if start is None else np.asarray(start, dtype=np.float64)
    res = minimize(negll, x0, jac=True, method="BFGS", options={"maxiter": maxiter, "gtol": 1e-7})
    _, g = negll(res.x)
    ok = bool(np.isfinite(res.fun) and np.all(np.abs(res.x) < 15.0) and np.max(np.abs(g), initial=0.0) < 1e-3)
    return CLogitFit(llf=-float(res.fun), params=res.x, ok=ok)


def _lpm_wald(y: np.ndarray, x: np.ndarray, groups: np.ndarray, test_cols: np.ndarray) -> tuple[float | None, float | None]:
    """Wald chi2 on x[:, test_cols] in a linear probability model with group means absorbed, clustered by group."""
    import statsmodels.api as sm

    cnt = np.bincount(groups).astype(np.float64)

    def demean(a: np.ndarray) -> np.ndarray:
        a2 = a if a.ndim == 2 else a[:, None]
        means = np.stack([np.bincount(groups, weights=a2[:, j]) for j in range(a2.shape[1])], axis=1) / cnt[:, None]
        out = a2 - means[groups]
        return out if a.ndim == 2 else out[:, 0]

    try:
        res = sm.OLS(demean(y), demean(x)).fit(cov_type="cluster", cov_kwds={"groups": groups})
        beta = res.params[test_cols]
        cov = res.cov_params()[np.ix_(test_cols, test_cols)]
        stat = float(beta @ np.linalg.pinv(cov) @ beta)
    except (np.linalg.LinAlgError, ValueError):
        return None, None
    return stat, float(stats.chi2.sf(stat, len(test_cols)))
