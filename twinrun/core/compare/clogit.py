"""Logit models of the run x checkpoint interaction (pure: arrays in, numbers out; no I/O).

Two likelihoods share one fitter and one set of models:
- :class:`ConditionalLik`: conditional (fixed-effects) logistic likelihood with games as strata, for per-game
  outcomes. Game effects are eliminated exactly (no incidental-parameter bias); games whose outcomes are all
  equal carry no information and are dropped by the caller.
- :class:`BinomialLik`: binomial logit on counts, for published summaries (no game effects are known).

The models of two runs over K shared checkpoints (``run`` in {0, 1}, checkpoint one-hot ``C``):
- reduced:   run + checkpoint                          (the same profile in both runs, on the logit scale)
- one-scale: run + checkpoint x (1 + (s - 1) run)      (run 1's profile is s times run 0's)
- full:      run + checkpoint + run x checkpoint       (saturated interaction)
The interaction test is the likelihood ratio full vs reduced (df K - 1). The amplitude statement is tested:
one-scale vs full (df K - 2: do the profiles differ beyond one scale?) with a profile-likelihood interval for s.

Separation (a cell of all successes or failures) sends a coefficient to infinity while the log-likelihood stays
finite. The fitter adds a vanishing ridge (RIDGE * |theta|^2, 1e-8: at a logit of 30, 9e-6 of log-likelihood) that
keeps the optimum finite, reports the unpenalised log-likelihood there (within ~1e-6 of its supremum), and
declares convergence on the log-likelihood itself: a restart from the optimum must not raise it by more than
LLF_TOL. The likelihood ratio then compares suprema, the same hypothesis as without separation; a fit whose
log-likelihood does not settle yields no p-value (never a silent switch to another test). BFGS, not L-BFGS-B:
scipy's L-BFGS-B makes BLAS calls per iteration that cost milliseconds under thread contention.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

RIDGE = 1e-8
SEPARATED = 10.0  # |coefficient| beyond this on the logit scale: a separated cell (the MLE is at infinity)
LLF_TOL = 1e-5

# ------------------------------------------------------------------------------------------------------------
# Likelihoods: eta[N] -> (log-likelihood, d loglik / d eta [N])


class ConditionalLik:
    """Conditional logistic log-likelihood of binary y[N] in strata groups[N] (0..S-1), as a function of the
    linear predictor (the stratum intercepts are conditioned out).

    The conditional likelihood of a stratum with s successes is exp(sum_i y_i eta_i) / e_s(exp(eta_1), ...), where
    e_s is the elementary symmetric polynomial, built by the recursion e_j <- e_j + w_t e_{j-1} over the stratum's
    rows for all strata at once; d/d eta_i = y_i - P(i succeeds | s), with the inclusion probabilities from prefix
    and suffix polynomials (no subtraction, so no cancellation). statsmodels' ConditionalLogit recurses per
    stratum in Python (~10 s for one 140-game, 16-arm model); this is vectorised and tested equal to it.
    """

    def __init__(self, y: np.ndarray, groups: np.ndarray) -> None:
        y = np.asarray(y, dtype=np.float64)
        groups = np.asarray(groups)
        self.y = y
        n_groups = int(groups.max()) + 1
        order = np.argsort(groups, kind="stable")
        g_sorted = groups[order]
        counts = np.bincount(groups, minlength=n_groups)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        self.row_g = np.empty(y.size, dtype=np.int64)
        self.row_t = np.empty(y.size, dtype=np.int64)
        self.row_g[order] = g_sorted
        self.row_t[order] = np.arange(y.size) - starts[g_sorted]
        self.n_groups, self.t_max = n_groups, int(counts.max())
        self.s = np.bincount(groups, weights=y, minlength=n_groups).astype(np.int64)
        s_max = self.s_max = int(self.s.max())
        # For each row t: j in 0..s_max indexes the coefficient of the rows-before-t polynomial, s - 1 - j that of
        # the rows-after-t polynomial; their product summed over j is e_{s-1} of the stratum without row t.
        j = np.arange(s_max + 1)
        k_after = self.s[:, None] - 1 - j[None, :]
        self.k_valid = (k_after >= 0)[:, None, :].astype(np.float64)
        gather = np.arange(self.t_max)[None, :, None] * (s_max + 1) + np.maximum(k_after, 0)[:, None, :]
        self.gather = np.where(k_after[:, None, :] >= 0, gather, self.t_max * (s_max + 1)).reshape(n_groups, -1)
        # the same as flat indices into the [G, T * (S + 1) + 1] table (np.take is faster than take_along_axis)
        self.flat_gather = (self.gather + np.arange(n_groups)[:, None] * (self.t_max * (s_max + 1) + 1)).ravel()

    def __call__(self, eta: np.ndarray) -> tuple[float, np.ndarray]:
        g_n, t_max, s_max = self.n_groups, self.t_max, self.s_max
        e = np.full((g_n, t_max), -np.inf)
        e[self.row_g, self.row_t] = eta
        m = e.max(axis=1)  # scale by the stratum max so that every weight is <= 1 (no coefficient overflows)
        w = np.exp(e - m[:, None])  # padded rows weigh 0
        # The forward (rows < t) and backward (rows >= t) recursions run together, stacked on a leading axis.
        poly = np.zeros((2, t_max + 1, g_n, s_max + 1))  # [0, t]: e_j of rows < t; [1, t]: of rows >= t_max - t
        poly[:, 0, :, 0] = 1.0
        w_both = np.stack([w.T, w[:, ::-1].T])  # [2, T, G]
        for t in range(t_max):
            poly[:, t + 1] = poly[:, t]
            poly[:, t + 1, :, 1:] += w_both[:, t, :, None] * poly[:, t, :, :-1]
        before = poly[0].transpose(1, 0, 2)  # [G, T + 1, S + 1]
        after = poly[1, ::-1].transpose(1, 0, 2)  # after[:, t] = e_j of rows >= t
        es = before[np.arange(g_n), t_max, self.s]
        flat = np.concatenate([after[:, 1:].reshape(g_n, -1), np.zeros((g_n, 1))], axis=1)  # last: a zero
        q = np.take(flat, self.flat_gather).reshape(g_n, t_max, s_max + 1)
        e_without = np.einsum("gts,gts->gt", before[:, :t_max], q)  # e_{s-1} of the stratum without row t
        if not np.all(es > 1e-250):
            return self._log_space(eta)  # weights spanning more than a double's range: the slow, exact path
        incl = w * e_without / es[:, None]  # P(row t is a success | s successes in its stratum)
        ll = float(self.y @ eta - (np.log(es) + self.s * m).sum())
        return ll, self.y - incl[self.row_g, self.row_t]

    def _log_space(self, eta: np.ndarray) -> tuple[float, np.ndarray]:
        """The same quantities with every polynomial coefficient held as a logarithm (logaddexp recursion)."""
        g_n, t_max, s_max = self.n_groups, self.t_max, self.s_max
        lw = np.full((g_n, t_max), -np.inf)
        lw[self.row_g, self.row_t] = eta
        before = np.full((g_n, t_max + 1, s_max + 1), -np.inf)
        after = np.full((g_n, t_max + 1, s_max + 1), -np.inf)
        before[:, 0, 0] = 0.0
        after[:, t_max, 0] = 0.0
        with np.errstate(invalid="ignore"):
            for t in range(t_max):
                before[:, t + 1] = before[:, t]
                before[:, t + 1, 1:] = np.logaddexp(before[:, t + 1, 1:], lw[:, t, None] + before[:, t, :-1])
                u = t_max - 1 - t
                after[:, u] = after[:, u + 1]
                after[:, u, 1:] = np.logaddexp(after[:, u, 1:], lw[:, u, None] + after[:, u + 1, :-1])
            les = before[np.arange(g_n), t_max, self.s]
            flat = np.concatenate([after[:, 1:].reshape(g_n, -1), np.full((g_n, 1), -np.inf)], axis=1)
            q = np.take_along_axis(flat, self.gather, axis=1).reshape(g_n, t_max, s_max + 1)
            terms = before[:, :t_max] + q
            le_without = np.logaddexp.reduce(terms, axis=2)
            incl = np.exp(lw + le_without - les[:, None])
        incl = np.where(np.isfinite(incl), incl, 0.0)
        return float(self.y @ eta - les.sum()), self.y - incl[self.row_g, self.row_t]


class BinomialLik:
    """Binomial logit log-likelihood of successes[N] out of trials[N] (up to the binomial coefficients)."""

    def __init__(self, successes: np.ndarray, trials: np.ndarray) -> None:
        self.s = np.asarray(successes, dtype=np.float64)
        self.n = np.asarray(trials, dtype=np.float64)

    def __call__(self, eta: np.ndarray) -> tuple[float, np.ndarray]:
        from scipy.special import expit

        ll = float(self.s @ eta - self.n @ np.logaddexp(0.0, eta))
        return ll, self.s - self.n * expit(eta)


Likelihood = Callable[[np.ndarray], tuple[float, np.ndarray]]
# a design maps parameters to the linear predictor and its Jacobian: theta[P] -> (eta[N], d eta / d theta [N, P])
Design = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]

# ------------------------------------------------------------------------------------------------------------
# The fitter


@dataclass(frozen=True)
class LogitFit:
    llf: float
    params: np.ndarray
    converged: bool  # the log-likelihood settled: a restart from the optimum raised it by at most LLF_TOL
    separated: bool  # a coefficient beyond SEPARATED: the MLE is at infinity, the llf is its supremum
    hess_inv: np.ndarray | None = None  # BFGS's inverse Hessian of the row-scaled objective (a warm start)

    @property
    def ok(self) -> bool:
        return self.converged and math.isfinite(self.llf)


def linear_design(x: np.ndarray) -> Design:
    x = np.asarray(x, dtype=np.float64)
    return lambda theta: (x @ theta, x)


def fit_logit(lik: Likelihood, design: Design | np.ndarray, n_params: int | None = None,
              start: np.ndarray | None = None, maxiter: int = 2000, restarts: int = 4,
              hess_inv0: np.ndarray | None = None) -> LogitFit:
    """Maximise lik(eta(theta)) (BFGS, analytic gradient, the vanishing ridge of the module docstring),
    restarting from the optimum until the log-likelihood rises by at most LLF_TOL (its convergence check)."""
    from scipy.optimize import minimize

    if not callable(design):
        n_params = design.shape[1]
        if hess_inv0 is None and start is None:
            # a first guess at the curvature: each row carries about 0.2 of Fisher information (p(1 - p) <= 1/4)
            x = np.asarray(design, dtype=np.float64)
            hess_inv0 = np.linalg.inv(0.2 * (x.T @ x) / max(x.shape[0], 1) + 1e-6 * np.eye(x.shape[1]))
        design = linear_design(design)
    p = int(n_params if start is None else len(start))
    theta = np.zeros(p) if start is None else np.asarray(start, dtype=np.float64).copy()
    scale: list[float] = []
    last: dict[str, float] = {}

    def negll(th: np.ndarray) -> tuple[float, np.ndarray]:
        # divided by the number of rows, so tolerances and the first step do not depend on the sample size
        eta, jac = design(th)
        ll, g = lik(eta)
        if not scale:
            scale.append(1.0 / max(eta.size, 1))
        last["ll"] = ll
        return (-ll + RIDGE * float(th @ th)) * scale[0], (-(jac.T @ g) + 2.0 * RIDGE * th) * scale[0]

    def llf_at(th: np.ndarray) -> float:
        negll(th)
        return last["ll"]

    best = -np.inf
    converged = False
    h0 = _positive_definite(hess_inv0)
    for _ in range(restarts + 1):
        res = minimize(negll, theta, jac=True, method="BFGS",
                       options={"maxiter": maxiter, "gtol": 1e-6, "hess_inv0": h0})
        theta, h0 = res.x, _positive_definite(res.hess_inv)
        llf = llf_at(theta)
        if llf - best <= LLF_TOL:
            converged = True
            best = max(best, llf)
            break
        best = llf
    return LogitFit(best, theta, converged and bool(np.isfinite(best)), bool(np.any(np.abs(theta) > SEPARATED)), h0)


def _positive_definite(h: np.ndarray | None) -> np.ndarray | None:
    """h symmetrised if it is a usable (positive definite, finite) inverse Hessian, else None (start from I)."""
    if h is None:
        return None
    h = 0.5 * (h + h.T)
    if not np.all(np.isfinite(h)) or np.linalg.eigvalsh(h).min() <= 1e-12:
        return None
    return h


def _widen(h: np.ndarray | None, p: int) -> np.ndarray | None:
    """A warm-start inverse Hessian for a model with p >= len(h) parameters, the first of which are h's."""
    if h is None:
        return None
    out = np.eye(p) * float(np.mean(np.diag(h)))
    out[:h.shape[0], :h.shape[0]] = h
    return out


# ------------------------------------------------------------------------------------------------------------
# The run x checkpoint models


def _lr(full: LogitFit, reduced: LogitFit, df: int) -> tuple[float | None, float | None]:
    if not (full.ok and reduced.ok) or df < 1:
        return None, None
    lr = max(0.0, 2.0 * (full.llf - reduced.llf))
    return lr, float(stats.chi2.sf(lr, df))


def _separation_note(*fits: LogitFit) -> str:
    if any(f.separated for f in fits):
        return ("separation (a cell of all successes or failures): coefficients run to the bound, the likelihood "
                f"ratio compares suprema of the log-likelihood (converged to {LLF_TOL:g})")
    return ""


def interaction_models(lik: Likelihood, run: np.ndarray, ckpt: np.ndarray, k: int, *, intercept: bool,
                       alpha: float = 0.05, level: float = 0.95, amplitude: bool | None = None) -> dict[str, Any]:
    """Fit reduced and full models (and, when `amplitude` or, by default, when the interaction is significant at
    `alpha`, the one-scale model) for rows with run[N] in {0, 1}, ckpt[N] in 0..k-1.

    Returns {"statistic", "df", "p_value", "converged", "note", "amplitude": dict | None}.
    """
    run_col = np.asarray(run, dtype=np.float64)[:, None]
    ck = np.zeros((run_col.shape[0], k - 1))
    rows = np.flatnonzero(ckpt > 0)
    ck[rows, ckpt[rows] - 1] = 1.0
    base = [np.ones_like(run_col)] if intercept else []
    reduced = np.hstack([*base, run_col, ck])
    full = np.hstack([reduced, ck * run_col])
    fit_red = fit_logit(lik, reduced)
    # the nested model's optimum (interactions at 0) is a close start for the full model
    fit_full = fit_logit(lik, full, start=np.concatenate([fit_red.params, np.zeros(k - 1)]),
                         hess_inv0=_widen(fit_red.hess_inv, full.shape[1]))
    stat, p = _lr(fit_full, fit_red, k - 1)
    out: dict[str, Any] = {"statistic": stat, "df": k - 1, "p_value": p,
                           "converged": fit_full.ok and fit_red.ok, "note": _separation_note(fit_red, fit_full),
                           "amplitude": None}
    if not out["converged"]:
        out["note"] = "the log-likelihood did not settle (no p-value; fix: more games, or fewer checkpoints)"
    want = amplitude if amplitude is not None else (p is not None and p < alpha)
    if want and k >= 3 and out["converged"]:
        out["amplitude"] = one_scale_model(lik, run_col[:, 0], ck, fit_full, intercept=intercept, level=level,
                                           alpha=alpha)
    return out


def one_scale_model(lik: Likelihood, run: np.ndarray, ck: np.ndarray, fit_full: LogitFit, *, intercept: bool,
                    level: float = 0.95, alpha: float = 0.05) -> dict[str, Any]:
    """Is the interaction one amplitude? Run r's checkpoint profile = s x the other run's profile.

    The reference profile is the run whose profile (from the saturated fit) varies more, so s is a shrink factor
    in [-1, 1] for proportional profiles and the test does not depend on which run is named first. Returns
    {"reference": 0 | 1, "scale", "scale_ci" (profile likelihood; None where unbounded), "shape_statistic",
    "shape_df", "shape_p" (one-scale vs saturated), "proportional" (shape_p >= 1 - level... see verdict)}.
    """
    k1 = ck.shape[1]
    b0 = 1 if intercept else 0
    beta0 = fit_full.params[b0 + 1:b0 + 1 + k1]
    inter = fit_full.params[b0 + 1 + k1:]
    prof = {0: np.concatenate([[0.0], beta0]), 1: np.concatenate([[0.0], beta0 + inter])}
    ref = 0 if np.var(prof[0]) >= np.var(prof[1]) else 1
    # recode so that run 0 is the reference: r = 1 marks the scaled run
    r = run if ref == 0 else 1.0 - run
    base = [np.ones((r.size, 1))] if intercept else []
    nb = len(base)

    def x_at(s: float) -> np.ndarray:
        return np.hstack([*base, r[:, None], ck * (1.0 + (s - 1.0) * r)[:, None]])

    def design(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = theta[-1]
        xs = x_at(s)
        beta = theta[nb + 1:nb + 1 + k1]
        eta = xs @ theta[:-1]
        return eta, np.hstack([xs, (r * (ck @ beta))[:, None]])

    ref_prof, other = prof[ref], prof[1 - ref]
    den = float(((ref_prof - ref_prof.mean()) ** 2).sum())
    s0 = float(((ref_prof - ref_prof.mean()) * (other - other.mean())).sum() / den) if den > 0 else 0.0
    start = np.concatenate([fit_full.params[:nb], [fit_full.params[nb]] if ref == 0 else [-fit_full.params[nb]],
                            ref_prof[1:], [float(np.clip(s0, -10.0, 10.0))]])
    fit1 = fit_logit(lik, design, start=start, hess_inv0=_widen(fit_full.hess_inv[:nb + 1 + k1, :nb + 1 + k1]
                                                                if fit_full.hess_inv is not None else None, len(start)))
    s_hat = float(fit1.params[-1])
    shape_stat, shape_p = _lr(fit_full, fit1, k1 - 1)
    out = {"reference": ref, "scale": s_hat, "scale_ci": [None, None], "scale_zero_p": None,
           "shape_statistic": shape_stat, "shape_df": k1 - 1, "shape_p": shape_p, "converged": fit1.ok}
    if shape_p is None or shape_p < alpha:
        return out  # the profiles differ beyond one scale: no amplitude statement, so no interval for it
    crit = float(stats.chi2.ppf(level, 1))
    # the profile log-likelihood of s: for a fixed s the model is linear; fits are warm-started from the nearest
    # s already fitted (they converge in a few steps) and need no restart (a CI end is wanted to ~0.01)
    prof_fits: dict[float, LogitFit] = {}

    def profile(s_: float) -> float:
        if s_ not in prof_fits:
            near = min(prof_fits, key=lambda t: abs(t - s_)) if prof_fits else None
            start_ = prof_fits[near].params if near is not None else fit1.params[:-1]
            h = fit1.hess_inv[:-1, :-1] if fit1.hess_inv is not None else None
            prof_fits[s_] = fit_logit(lik, x_at(s_), start=start_, restarts=0, hess_inv0=h)
        return prof_fits[s_].llf

    llf_hat = max(fit1.llf, profile(s_hat))

    def dev(s_: float) -> float:
        return 2.0 * (llf_hat - profile(s_))

    dev0 = dev(0.0)  # the likelihood ratio for "run r has no profile at all" (s = 0)
    # a quadratic guess from the deviance at 0 places the first bracket; then Illinois steps to the chi2 quantile
    se = abs(s_hat) / math.sqrt(dev0) if dev0 > 1e-9 else 1.0

    def end(direction: float) -> float | None:
        inner, f_in = s_hat, dev(s_hat) - crit
        if f_in >= 0:
            return None
        step = max(math.sqrt(crit) * se, 0.05)
        outer = s_hat + direction * step
        f_out = dev(outer) - crit
        for _ in range(6):  # widen until the deviance crosses (an unbounded side stops at ~64 se)
            if f_out > 0:
                break
            inner, f_in = outer, f_out
            step *= 2.0
            outer = s_hat + direction * step
            f_out = dev(outer) - crit
        else:
            return None
        side = 0
        for _ in range(12):  # Illinois (regula falsi that halves a stale end's weight)
            x = (inner * f_out - outer * f_in) / (f_out - f_in)
            f_x = dev(x) - crit
            if abs(f_x) < 0.01 or abs(outer - inner) < 1e-3:
                return float(x)
            if f_x > 0:
                outer, f_out = x, f_x
                if side == 1:
                    f_in /= 2.0
                side = 1
            else:
                inner, f_in = x, f_x
                if side == -1:
                    f_out /= 2.0
                side = -1
        return float(x)

    out["scale_ci"] = [end(-1.0), end(1.0)]
    out["scale_zero_p"] = float(stats.chi2.sf(max(dev0, 0.0), 1))
    return out


# ------------------------------------------------------------------------------------------------------------
# Entry points


def conditional_logit(y: np.ndarray, x: np.ndarray, groups: np.ndarray, maxiter: int = 2000,
                      start: np.ndarray | None = None) -> LogitFit:
    """Conditional (fixed-effects) logistic regression, the model of statsmodels' ConditionalLogit: y[N] in {0, 1},
    x[N, P] (no intercept: it is conditioned out), groups[N] in 0..S-1 -> LogitFit."""
    x = np.asarray(x, dtype=np.float64)
    return fit_logit(ConditionalLik(y, np.asarray(groups)), x, start=start, maxiter=maxiter)


def interaction_test(y: np.ndarray, game: np.ndarray, group: np.ndarray, ckpt: np.ndarray, *, alpha: float = 0.05,
                     level: float = 0.95, amplitude: bool | None = None) -> dict[str, Any]:
    """Does the checkpoint profile differ between two runs? Game effects are conditioned out.

    y[N] outcomes (0/1, NaN dropped), game[N] game ids, group[N] in {0, 1} (which run), ckpt[N] checkpoint index
    0..K-1. Conditional logistic regression stratified by game, likelihood ratio of run + checkpoint + run x
    checkpoint against run + checkpoint (df K - 1); under separation the same ratio of suprema (module
    docstring). Games whose outcomes are all equal carry no information in a conditional likelihood and are
    dropped. With a significant interaction (or `amplitude=True`) the one-scale model says whether one amplitude
    explains it. Returns {"method", "statistic", "df", "p_value", "n_games", "note", "converged", "amplitude"}.
    """
    y = np.asarray(y, dtype=np.float64)
    keep = ~np.isnan(y)
    y, game, group, ckpt = y[keep], np.asarray(game)[keep], np.asarray(group)[keep], np.asarray(ckpt)[keep]
    k = int(ckpt.max()) + 1 if ckpt.size else 0
    method = "conditional logit (game strata), likelihood ratio"
    if k < 2:
        return {"method": "none", "statistic": None, "df": 0, "p_value": None, "n_games": 0,
                "note": "fewer than 2 checkpoints", "converged": False, "amplitude": None}
    _, gidx = np.unique(game, return_inverse=True)
    sums = np.bincount(gidx, weights=y)
    cnts = np.bincount(gidx)
    informative = ((sums > 0) & (sums < cnts))[gidx]
    y, gidx, group, ckpt = y[informative], gidx[informative], group[informative], ckpt[informative]
    _, gidx = np.unique(gidx, return_inverse=True)  # contiguous 0..n_games-1 after dropping
    n_games = int(gidx.max()) + 1 if gidx.size else 0
    if n_games < 2:
        return {"method": "none", "statistic": None, "df": k - 1, "p_value": None, "n_games": n_games,
                "note": "fewer than 2 games with varying outcomes", "converged": False, "amplitude": None}
    res = interaction_models(ConditionalLik(y, gidx), group, ckpt, k, intercept=False, alpha=alpha, level=level,
                             amplitude=amplitude)
    return {"method": method, "n_games": n_games, **res}


def interaction_test_counts(successes: np.ndarray, trials: np.ndarray, group: np.ndarray, ckpt: np.ndarray, *,
                            alpha: float = 0.05, level: float = 0.95, amplitude: bool | None = None) -> dict[str, Any]:
    """The same models on counts (published summaries): successes[N] of trials[N] per (run, checkpoint) cell,
    binomial logit with an intercept, no game effects (so conservative for data that were paired on games)."""
    ckpt = np.asarray(ckpt)
    k = int(ckpt.max()) + 1 if ckpt.size else 0
    if k < 2:
        return {"method": "none", "statistic": None, "df": 0, "p_value": None, "n_games": None,
                "note": "fewer than 2 shared checkpoints", "converged": False, "amplitude": None}
    res = interaction_models(BinomialLik(successes, trials), np.asarray(group, dtype=np.float64), ckpt, k,
                             intercept=True, alpha=alpha, level=level, amplitude=amplitude)
    return {"method": "binomial logit on counts (no game effects; conservative for paired data), likelihood ratio",
            "n_games": None, **res}
