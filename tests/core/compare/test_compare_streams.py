"""The stream statistics of compare (core/compare/streams.py): the ICC and its interval by simulation, the
interaction F against statsmodels' two-way ANOVA, Welch t and one-way F against scipy, the pointwise band by hand,
the sphericity epsilons on their textbook limits, what would decide, and the synthetic sweeps with streams."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from twinrun.core.compare import shape
from twinrun.core.compare import stats as cs
from twinrun.core.compare import streams as st
from twinrun.core.compare.synthetic import synthetic_game_table


def test_stream_icc_recovers_the_planted_correlation_and_its_interval_covers() -> None:
    """y[s, g] = u_s + d_g + e: streams crossed with the same games; rho = s2u / (s2u + s2e)."""
    rng = np.random.default_rng(0)
    s2u, s2e, r, g, cells = 0.01, 0.25, 4, 140, 16
    truth = s2u / (s2u + s2e)
    est, cover = [], 0
    draws = 300
    for _ in range(draws):
        d = rng.normal(0, 0.3, g)
        ys = [rng.normal(0, np.sqrt(s2u), (r, 1)) + d[None, :] + rng.normal(0, np.sqrt(s2e), (r, g)) for _ in range(cells)]
        res = st.stream_icc(ys)
        est.append(res["estimate"])
        cover += res["ci"][0] <= truth <= res["ci"][1]
    assert np.mean(est) == pytest.approx(truth, rel=0.1)
    assert abs(cover / draws - 0.95) < 3 * np.sqrt(0.05 * 0.95 / draws)
    assert res["deff"] == pytest.approx(1 + (g - 1) * res["estimate"])
    assert st.stream_icc([np.ones((1, 10))]) is None  # one stream: nothing to estimate


def test_stream_icc_removes_game_difficulty() -> None:
    """Games shared by every stream differ a lot in difficulty; that is not stream correlation."""
    rng = np.random.default_rng(1)
    d = rng.normal(0, 2.0, 140)
    ys = [d[None, :] + rng.normal(0, 0.5, (4, 140)) for _ in range(8)]
    assert st.stream_icc(ys)["estimate"] < 0.01


def test_interaction_f_equals_statsmodels_two_way_anova() -> None:
    import pandas as pd
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm

    rng = np.random.default_rng(2)
    k, r = 5, 3
    rows = [(run, ck, 0.3 * run * (ck == 2) + rng.normal(0, 0.1)) for run in (0, 1) for ck in range(k) for _ in range(r)]
    df = pd.DataFrame(rows, columns=["run", "ck", "y"])
    ref = anova_lm(smf.ols("y ~ C(run) * C(ck)", df).fit(), typ=2).loc["C(run):C(ck)"]
    cells = [df[(df.run == a) & (df.ck == c)].y.to_numpy() for a in (0, 1) for c in range(k)]
    models = [st.cell_model(cells[:k]), st.cell_model(cells[k:])]
    s2, dfe = st.pooled(models)
    means = np.concatenate([m.means for m in models])
    got = st.interaction_wald(means, np.eye(2 * k) * s2 / r, dfe)
    assert (got["df"], got["df2"]) == (k - 1, 2 * k * (r - 1))
    assert got["statistic"] == pytest.approx(ref["F"], rel=1e-9)
    assert got["p_value"] == pytest.approx(ref["PR(>F)"], rel=1e-9)
    # the same curves a level apart are no interaction; on the success-rate scale, whatever the level
    flat = st.interaction_wald(np.concatenate([means[:k], means[:k] + 0.2]), np.eye(2 * k) * s2 / r, dfe)
    assert flat["statistic"] == pytest.approx(0.0, abs=1e-12)


def test_one_stream_interaction_is_hotellings_test_of_the_centred_paired_differences() -> None:
    """One stream per arm with games independent (--stream-icc 0): the interaction is Hotelling's T^2 of the per-game
    centred differences (run a - run b at each checkpoint), computed here by hand."""
    from twinrun.core.compare import CompareSettings, compare_games
    from twinrun.core.compare.synthetic import planted_table

    t = planted_table("amplitude-0.3", seed=5)
    res = compare_games(t, "baseline", CompareSettings(n_boot=200, stream_icc=0.0))["pairs"][0]["interaction"]
    z = t.outcomes[1:9] - t.outcomes[9:17]  # [K, G]: the baseline cancels
    n, q = z.shape[1], 7
    c = (np.eye(8) - 1 / 8)[:q]
    d = c @ z.mean(axis=1)
    t2 = float(d @ np.linalg.solve(c @ (np.cov(z) / n) @ c.T, d))
    f = t2 * (n - q) / (q * (n - 1))
    assert res["statistic"] == pytest.approx(f, rel=1e-9) and res["df2"] == n - q
    assert res["p_value"] == pytest.approx(stats.f.sf(f, q, n - q), rel=1e-9)


def test_pointwise_band_by_hand() -> None:
    a = np.array([0.1, 0.3, 0.2])
    b = np.array([0.15, 0.30, 0.35])
    cov = np.diag([0.01, 0.02, 0.01, 0.01, 0.01, 0.02])
    band = st.pointwise_band(np.concatenate([a, b]), cov, 10.0, 0.90)
    d = (a - a.mean()) - (b - b.mean())
    c = np.eye(3) - 1 / 3  # row k: checkpoint k minus the mean, for each curve
    var = (c**2) @ np.diag(cov)[:3] + (c**2) @ np.diag(cov)[3:]
    q = stats.t.ppf(0.95, 10)
    assert band["diff"] == pytest.approx(d)
    assert band["sd"] == pytest.approx(np.sqrt(var))
    assert band["half_width_max"] == pytest.approx(np.max(np.abs(d) + q * np.sqrt(var)))


def test_welch_t_matches_scipy_and_oneway_f_matches_f_oneway() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.normal(0.1, 0.05, 4), rng.normal(0.0, 0.02, 6)
    t, df, p = st.welch_t(np.array([a.mean() - b.mean()]), np.array([a.var(ddof=1) / 4]), 3, b.var(ddof=1) / 6, 5)
    ref = stats.ttest_ind(a, b, equal_var=False)
    assert t[0] == pytest.approx(ref.statistic) and p[0] == pytest.approx(ref.pvalue)
    groups = [rng.normal(m, 0.1, 4) for m in (0.0, 0.1, 0.05)]
    res = st.oneway_f(st.cell_model(groups))
    ref2 = stats.f_oneway(*groups)
    assert res["statistic"] == pytest.approx(ref2.statistic) and res["p_value"] == pytest.approx(ref2.pvalue)


def test_mde_t_is_where_noncentral_t_power_reaches_the_target() -> None:
    se, df, alpha = np.array([0.05, 0.02]), np.array([24.0, 3.0]), np.array([0.05 / 8, 0.05])
    mde = st.mde_t(se, df, alpha, 0.8)
    crit = stats.t.ppf(1 - alpha / 2, df)
    nc = mde / se
    power = stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc)
    assert power == pytest.approx([0.8, 0.8], abs=1e-3)
    assert mde[0] == pytest.approx((stats.t.ppf(1 - 0.05 / 16, 24) + stats.t.ppf(0.8, 24)) * 0.05, rel=0.03)


def test_mcnemar_exact_many_equals_the_scalar_test() -> None:
    rng = np.random.default_rng(4)
    b, c = rng.integers(0, 40, 200), rng.integers(0, 40, 200)
    assert cs.mcnemar_exact_many(b, c) == pytest.approx([cs.mcnemar_exact(x, y) for x, y in zip(b, c)], abs=1e-12)


def test_sphericity_epsilons_on_their_textbook_limits() -> None:
    """Box's epsilon is 1 under compound symmetry, 1/(K - 1) when one contrast carries all the variance, and the
    eigenvalue form (sum l)^2 / ((K - 1) sum l^2) of the contrasts' covariance otherwise; Huynh-Feldt lies between
    GG and 1."""
    k = 5
    cs_cov = 0.5 * np.ones((k, k)) + 0.5 * np.eye(k)
    assert shape.sphericity_epsilon(cs_cov, 10, 2)["greenhouse_geisser"] == pytest.approx(1.0)
    v = np.arange(k, dtype=float) - 2
    assert shape.sphericity_epsilon(np.outer(v, v) + 1e-12 * np.eye(k), 10, 2)["greenhouse_geisser"] == pytest.approx(0.25, abs=1e-6)
    ar = 0.8 ** np.abs(np.subtract.outer(np.arange(k), np.arange(k)))
    lam = np.linalg.eigvalsh(shape.helmert(k) @ ar @ shape.helmert(k).T)
    eps = shape.sphericity_epsilon(ar, 10, 2)
    assert eps["greenhouse_geisser"] == pytest.approx(lam.sum() ** 2 / ((k - 1) * (lam**2).sum()))
    assert eps["greenhouse_geisser"] <= eps["huynh_feldt"] <= 1.0
    h = shape.helmert(k)
    assert h @ h.T == pytest.approx(np.eye(k - 1)) and h @ np.ones(k) == pytest.approx(np.zeros(k - 1))


def _noise(k: int, game: float, stream: float, r: float = 4.0) -> st.Noise:
    return st.Noise(np.eye(2 * k) * game / r, np.eye(2 * k) * stream / r, 140.0, r, 2 * k)


def test_what_would_decide_is_streams_at_the_games_played_up_to_the_cap() -> None:
    """What would decide keeps the games per stream played (the protocol's) and names streams: more noise, more
    streams; the streams named do decide (the rule passes with the stated power there, not one stream fewer);
    where none up to the cap does, None."""
    k = 8
    quiet = st.to_decide(_noise(k, 0.002, 0.0), 0.05, 0.05, 0.8)
    louder = st.to_decide(_noise(k, 0.001, 0.002), 0.05, 0.05, 0.8)
    assert quiet["games_per_stream"] == louder["games_per_stream"] == 140 and quiet["max_streams"] == 64
    assert 4 < quiet["streams"] < louder["streams"] <= 64
    n = _noise(k, 0.001, 0.002)
    z = np.random.default_rng(0).normal(size=(2000, k))
    assert st._pass_band(n, 140.0, louder["streams_equivalence"], 0.05, z, 0.9) >= 0.8
    assert st._pass_band(n, 140.0, louder["streams_equivalence"] - 1, 0.05, z, 0.9) < 0.8
    # twice that noise: none up to 64 streams decides, a higher cap finds the number
    capped = st.to_decide(_noise(k, 0.002, 0.004), 0.05, 0.05, 0.8)
    assert capped["streams"] is None and capped["max_streams"] == 64
    assert 64 < st.to_decide(_noise(k, 0.002, 0.004), 0.05, 0.05, 0.8, max_streams=256)["streams"] <= 256


def test_synthetic_sweeps_have_streams_a_baseline_without_memory_and_stream_effects() -> None:
    t = synthetic_game_table({"a": [0.0] * 3}, n_games=400, seed=0, streams=3, stream_sd=1.0, first_writes=5)
    names = [a.name for a in t.arms]
    assert names[:3] == ["baseline", "baseline#r1", "baseline#r2"] and "a@10#r2" in names
    assert [a.replicate for a in t.arms if a.checkpoint == 20] == [0, 1, 2]
    y = t.outcomes
    rates_arm = np.nanmean(y[3:], axis=1)
    rates_base = np.nanmean(y[:3], axis=1)
    assert np.var(rates_arm, ddof=1) > 5 * np.var(rates_base, ddof=1) or np.var(rates_arm, ddof=1) > 0.005
    with pytest.raises(Exception, match="streams: 0"):
        synthetic_game_table({"a": [0.0]}, streams=0)


def test_a_streamed_lift_s_interval_agrees_with_its_p_value_and_covers_a_null_lift() -> None:
    """With streams, an arm's lift interval is its Welch test's (lift +- t(df) se): over planted sweeps shaped like
    the demo's (2 streams per arm and baseline, a stream effect of sd 0.5 on the logit, 64 games) and like a study's
    (4 streams), it excludes 0 exactly when p < 1 - level, arm by arm (before, the interval came from parametric
    draws with the 2-stream baseline's variance at 1 degree of freedom: [-16, +61] pp beside p 0.04 on the demo);
    on flat truth it covers 0 at about the stated 95% (rate over 120 draws x 8 arms, binomial 99.9% band around
    the draws' own clustering)."""
    from twinrun.core.compare.games import compare_games
    from twinrun.core.compare.model import CompareSettings

    settings = CompareSettings(n_boot=200)
    for streams in (2, 4):
        covered = total = 0
        for seed in range(120):
            table = synthetic_game_table({"a": [0.0] * 8}, n_games=64, seed=seed, streams=streams, stream_sd=0.5)
            doc = compare_games(table, "baseline", settings)
            curve = doc["runs"]["a"]
            assert curve["lift_ci"] == [arm["lift_ci"] for arm in doc["arms"] if arm["role"] == "checkpoint"]
            for arm in doc["arms"]:
                if arm["role"] != "checkpoint":
                    continue
                lo, hi = arm["lift_ci"]
                assert (lo > 0 or hi < 0) == (arm["p_value"] < 1 - settings.level), (streams, seed, arm["arm"])
                covered += lo <= 0 <= hi
                total += 1
        # the 8 arms of a draw share the baseline, so count draws' worth of evidence, not arms'
        assert 0.90 <= covered / total <= 0.995, (streams, covered, total)
