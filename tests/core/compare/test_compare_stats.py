"""compare's pure statistics: hand values, scipy/statsmodels references, and small simulations with known truth
(exact power against simulated rejections). Rates of the verdicts over many draws live in test_compare_verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from twinrun.core.compare import shape
from twinrun.core.compare import power as pw
from twinrun.core.compare import stats as cs

# ------------------------------------------------------------------------------------------------------------
# McNemar


@pytest.mark.parametrize("b,c,hand", [
    (0, 5, 2 * 0.5**5),  # 0.0625
    (1, 9, 2 * (1 + 10) / 2**10),  # 2 * P(X <= 1), X ~ Bin(10, 1/2)
    (3, 3, 1.0),
    (0, 0, 1.0),  # no discordant games: no evidence
    (7, 2, 2 * (1 + 9 + 36) / 2**9),
])
def test_mcnemar_exact_matches_hand_scipy_and_statsmodels(b: int, c: int, hand: float) -> None:
    from statsmodels.stats.contingency_tables import mcnemar

    p = cs.mcnemar_exact(b, c)
    assert p == pytest.approx(min(hand, 1.0), rel=1e-12)
    if b + c:
        assert p == pytest.approx(stats.binomtest(b, b + c, 0.5).pvalue, rel=1e-12)
        # concordant cells do not matter to McNemar
        assert p == pytest.approx(mcnemar([[11, b], [c, 4]], exact=True).pvalue, rel=1e-12)


def test_paired_counts_skip_unmeasured_games() -> None:
    nan = np.nan
    arm = np.array([[1, 1, 0, 0, nan, 1]], dtype=float)
    base = np.array([0, 1, 1, 0, 1, nan], dtype=float)
    pc = cs.paired_counts(arm, base)
    assert pc.n_pairs.tolist() == [4]
    assert (pc.b.tolist(), pc.c.tolist()) == ([1], [1])
    assert pc.mask.tolist() == [[True, True, True, True, False, False]]
    assert pc.diff.tolist() == [[1, 0, -1, 0, 0, 0]]


# ------------------------------------------------------------------------------------------------------------
# Bootstrap, MDE, multiplicity, curve statistics on hand values


def test_vectorised_bootstrap_equals_per_resample_loop() -> None:
    rng = np.random.default_rng(3)
    vals = rng.integers(0, 2, size=(4, 9)).astype(float)
    mask = rng.random((4, 9)) > 0.2
    idx = cs.resample_indices(9, 50, np.random.default_rng(1))
    w = cs.index_counts(idx, 9)
    assert w.sum(axis=1).tolist() == [9] * 50
    fast = cs.weighted_means(vals, mask, w)
    for r in range(50):
        for a in range(4):
            sel = idx[r][mask[a, idx[r]]]
            want = vals[a, sel].mean() if sel.size else np.nan
            assert fast[r, a] == pytest.approx(want, nan_ok=True)


def test_weighted_means_by_hand() -> None:
    vals = np.array([[1.0, 0.0, 1.0]])
    mask = np.array([[True, True, False]])
    w = np.array([[2.0, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 1.0, 1.0]])
    out = cs.weighted_means(vals, mask, w)[:, 0]
    assert out[0] == pytest.approx(2 / 3)
    assert math.isnan(out[1])  # only the unmeasured game was drawn
    assert out[2] == pytest.approx(0.5)


def test_adjust_pvalues_within_families_by_hand() -> None:
    p = np.array([0.01, 0.04, 0.03, 0.02, 0.5])
    fams = ["a", "a", "a", "b", None]
    adj = cs.adjust_pvalues(p, fams)
    assert adj["holm"][:3] == pytest.approx([0.03, 0.06, 0.06])
    assert adj["bh"][:3] == pytest.approx([0.03, 0.04, 0.04])
    assert adj["bonferroni"][:3] == pytest.approx([0.03, 0.12, 0.09])
    assert adj["holm"][3] == pytest.approx(0.02)  # a family of one is unadjusted
    assert math.isnan(adj["holm"][4])  # in no family


@pytest.mark.parametrize("lifts,crossings", [
    ([1, 0, -1, 1], 2), ([1, 0, 1], 0), ([-1, -2], 0), ([0, 0, 0], 0), ([0, -1, 2, -3, 0, 0, 4], 3),
])
def test_strict_sign_changes(lifts: list[float], crossings: int) -> None:
    assert int(cs.strict_sign_changes(np.array(lifts, dtype=float))) == crossings


def test_slope_correlations_and_argmax() -> None:
    assert cs.linear_slope(np.array([0, 1, 2.0]), np.array([1, 3, 5.0])) == pytest.approx(2.0)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(5, 7)), rng.normal(size=(5, 7))
    for i in range(5):
        assert cs.row_pearson(x, y)[i] == pytest.approx(np.corrcoef(x[i], y[i])[0, 1])
        assert cs.row_spearman(x, y)[i] == pytest.approx(stats.spearmanr(x[i], y[i]).statistic)
    assert math.isnan(cs.row_pearson(np.ones(4), np.arange(4.0)))
    share = cs.argmax_distribution(np.array([[0, 1, 0], [2, 0, 0], [0, 1, 1], [np.nan] * 3]), rng)
    assert share[0] == 0.25 and share[1] + share[2] == 0.5  # the tie went to one of the two


def test_cochran_q_matches_formula() -> None:
    x = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0], [1, 0, 0], [1, 1, 0], [np.nan, 1, 0]], dtype=float)
    complete = x[:-1]
    k = 3
    col, row, n = complete.sum(0), complete.sum(1), complete.sum()
    q = (k - 1) * (k * (col**2).sum() - n**2) / (k * n - (row**2).sum())
    got = cs.cochran_q(x)
    assert got["statistic"] == pytest.approx(q)
    assert got["p_value"] == pytest.approx(stats.chi2.sf(q, k - 1))
    assert got["n_games"] == 6


def test_holm_equals_statsmodels() -> None:
    """multipletests' Holm runs gc.collect() on every call (~120 ms); the 6-line step-down gives the same numbers."""
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(5)
    for m in (1, 2, 7, 50):
        p = rng.random(m) ** 3
        p[0] = p[-1]  # a tie
        assert cs.holm(p) == pytest.approx(multipletests(p, method="holm")[1], abs=1e-12)


# ------------------------------------------------------------------------------------------------------------
# Shapes: shape noise, detrending, the equivalence band, final vs peak


def test_shape_noise_by_hand_and_shared_noise_cancels() -> None:
    rng = np.random.default_rng(0)
    own = rng.normal(0, 0.02, size=(4000, 6))
    shared = rng.normal(0, 0.05, size=(4000, 1))  # the baseline's noise: moves every checkpoint together
    boot = own + shared
    s = np.cov(boot, rowvar=False)
    assert shape.shape_noise(boot) == pytest.approx((np.trace(s) - s.sum() / 6) / 5)
    assert shape.shape_noise(boot) == pytest.approx(0.02**2, rel=0.08)  # the shared part is not counted
    assert np.mean(np.var(boot, axis=0, ddof=1)) > 5 * 0.02**2  # the old per-checkpoint mean counted it


def test_reliability_is_one_for_a_curve_far_above_its_noise_and_zero_for_noise() -> None:
    rng = np.random.default_rng(1)
    boot = rng.normal(0, 0.01, size=(2000, 6))
    assert shape.reliability(np.array([0, 0.2, -0.1, 0.3, 0.1, -0.2]), boot) > 0.99
    assert shape.reliability(np.array([0, 0.001, -0.001, 0.0, 0.001, 0.0]), boot) == 0.0


def test_detrend_removes_a_line_and_keeps_the_wiggles() -> None:
    x = np.array([10, 20, 30, 40.0])
    wig = np.array([1.0, -1.0, 1.0, -1.0])
    out = shape.detrend(x, 3.0 + 0.5 * x + wig)
    assert out == pytest.approx(shape.detrend(x, wig))  # the line is gone, whatever its level and slope
    assert abs(float(np.sum(out))) < 1e-9 and abs(float(out @ (x - x.mean()))) < 1e-9  # no level, no slope left
    assert float(cs.row_pearson(out, wig)) > 0.85


def test_crossfit_final_vs_peak_by_hand() -> None:
    # 4 games, 2 folds, 3 checkpoints. Fold 0 = games 0, 1; fold 1 = games 2, 3.
    diff = np.array([[1, 1, 0, 0], [0, 0, 1, 1], [0, 1, 1, 0]], dtype=float)  # [K, G]
    mask = np.ones_like(diff, dtype=bool)
    fold = np.array([0, 0, 1, 1])
    est = shape.crossfit_final_vs_peak(diff, mask, np.ones((1, 4)), fold, np.random.default_rng(0))
    # fold 0 lifts (1, 0, .5): peak k=0; fold 1 lifts (0, 1, .5): peak k=1.
    # peak from fold 0, measured on fold 1: 0.5 - 0 ; peak from fold 1, measured on fold 0: 0.5 - 0 -> 0.5
    assert est[0] == pytest.approx(0.5)


def test_best_vs_final_sees_a_collapse_and_not_noise() -> None:
    rng = np.random.default_rng(3)
    noise = rng.normal(0, 0.03, size=(4000, 6))
    collapse = np.array([0.0, 0.1, 0.15, 0.2, 0.2, -0.1])
    assert shape.best_vs_final(collapse, collapse + noise)["below"]
    res = shape.best_vs_final(np.zeros(6), noise)
    assert not res["below"] and res["best_minus_final_lower"] == 0.0


def test_profile_anova_by_hand() -> None:
    a = np.array([[0.0, 1.0, 0.0], [0.0, 1.2, 0.2]])
    b = np.array([[1.0, 0.0, 0.5], [0.8, 0.0, 0.7]])
    res = shape.profile_anova({"a": a, "b": b})
    cen = {f: c - c.mean(axis=1, keepdims=True) for f, c in (("a", a), ("b", b))}
    m = {f: c.mean(axis=0) for f, c in cen.items()}
    grand = (m["a"] + m["b"]) / 2
    ss_b = 2 * ((m["a"] - grand) ** 2).sum() + 2 * ((m["b"] - grand) ** 2).sum()
    ss_w = ((cen["a"] - m["a"]) ** 2).sum() + ((cen["b"] - m["b"]) ** 2).sum()
    assert (res["df1"], res["df2"]) == (2, 4)
    assert res["statistic"] == pytest.approx((ss_b / 2) / (ss_w / 4))
    assert res["p_uncorrected"] == pytest.approx(stats.f.sf(res["statistic"], 2, 4))
    e = res["epsilon"]
    assert res["p_value"] == pytest.approx(stats.f.sf(res["statistic"], 2 * e, 4 * e))


# ------------------------------------------------------------------------------------------------------------
# Exact power


def test_mcnemar_critical_values_match_binomtest() -> None:
    pvalues = {d: np.array([stats.binomtest(b, d, 0.5).pvalue for b in range(d + 1)]) for d in range(1, 61)}
    for alpha in (0.05, 0.001, 0.05 / 50):
        u = pw.mcnemar_critical(60, alpha)
        for d, p in pvalues.items():
            b = np.arange(d + 1)
            assert np.array_equal(p <= alpha, (b >= u[d]) | (b <= d - u[d])), (alpha, d)


def test_exact_mcnemar_power_matches_simulated_rejections() -> None:
    rng = np.random.default_rng(0)
    n, p_disc, lift, alpha = 140, 0.25, 0.08, 0.01
    exact = float(pw.mcnemar_power(n, p_disc, np.array(lift), alpha))
    d = rng.binomial(n, p_disc, 4000)
    b = rng.binomial(d, (1 + lift / p_disc) / 2)
    u = pw.mcnemar_critical(n, alpha)
    simulated = np.mean((b >= u[d]) | (b <= d - u[d]))
    assert abs(simulated - exact) < 3 * math.sqrt(exact * (1 - exact) / 4000)


def test_mde_is_where_exact_power_reaches_the_target_at_the_family_level() -> None:
    n = np.array([140, 140, 140])
    p_disc = np.array([0.2, 0.3, 0.01])
    mde = pw.mde_mcnemar_exact(n, p_disc, np.array([0.05, 0.05 / 50, 0.05]), 0.8)
    for i in (0, 1):
        assert pw.mcnemar_power(140, p_disc[i], np.array(mde[i]), [0.05, 0.001][i]) >= 0.8 - 1e-6
        assert pw.mcnemar_power(140, p_disc[i], np.array(mde[i] - 0.005), [0.05, 0.001][i]) < 0.8
    # a bigger family asks for a bigger lift; a discordance of 1% cannot reach 80% power at all
    assert mde[1] > pw.mde_mcnemar_exact(np.array([140]), np.array([0.3]), 0.05)[0]
    assert math.isnan(mde[2])


def test_fisher_rejection_region_and_its_mde() -> None:
    rej = pw.fisher_rejects(12, 10, 0.05)
    for x1 in range(13):
        for x0 in range(11):
            assert rej[x1, x0] == (stats.fisher_exact([[x1, 12 - x1], [x0, 10 - x0]])[1] <= 0.05)
    mde = pw.mde_fisher_exact(np.array([140, 140]), 140, 0.4, np.array([0.05, 0.001]))
    assert 0.1 < mde[0] < mde[1] < 0.4
