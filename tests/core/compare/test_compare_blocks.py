"""Crossed streams as blocks (core/compare/blocks.py, issue 42): the randomized-block F tests against statsmodels,
the block share's interval by simulation, crossing read from sweep.json, and seeded rates on planted crossed
sweeps (flat truth keeps its level, mirrored shapes of amplitude 0.3 logit are found, which the nested analysis
misses). The 200+-draw calibration is bench/blocks_calibration.py (docs/measured.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from twinrun.core.compare import CompareSettings, compare_games
from twinrun.core.compare import blocks as blk
from twinrun.core.compare import streams as st
from twinrun.core.compare.load import load_game_table
from twinrun.core.compare.synthetic import planted_table, synthetic_game_table, write_sweep

# the planted structure: 140 games, 8 checkpoints per run, 4 streams, a block of sd 0.7 logit per run's
# stream shared by its checkpoints, a small cell-specific part
CROSSED = dict(streams=4, crossed=True, block_sd=0.7, stream_sd=0.1)


def _blocked_layout(rng: np.random.Generator, k: int, r: int, shift: np.ndarray) -> np.ndarray:
    """y[run, K, R]: two runs, each with its own stream blocks (sd 1) and a small residual (sd 0.1)."""
    return np.stack([shift[i][:, None] + rng.normal(0, 1.0, (1, r)) + rng.normal(0, 0.1, (k, r)) for i in range(2)])


def test_blocked_interaction_and_checkpoint_f_equal_statsmodels() -> None:
    """The interaction F of the blocked models equals the nested-model comparison of statsmodels' OLS
    y ~ C(run) + C(ck) + C(run):C(stream) against y ~ C(run) * C(ck) + C(run):C(stream) (df K - 1, 2 (K - 1)(R - 1));
    a run's checkpoint F equals the two-way ANOVA y ~ C(ck) + C(stream) (df K - 1, (K - 1)(R - 1))."""
    import pandas as pd
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm

    rng = np.random.default_rng(0)
    k, r = 5, 4
    y = _blocked_layout(rng, k, r, np.array([np.zeros(k), 0.15 * (np.arange(k) == 2)]))
    df = pd.DataFrame([(i, c, s, y[i, c, s]) for i in range(2) for c in range(k) for s in range(r)],
                      columns=["run", "ck", "stream", "y"])
    full = smf.ols("y ~ C(run) * C(ck) + C(run):C(stream)", df).fit()
    reduced = smf.ols("y ~ C(run) + C(ck) + C(run):C(stream)", df).fit()
    ref = anova_lm(reduced, full).iloc[1]
    fits = [blk.fit_run(y[i]) for i in range(2)]
    models = [st.CellModel(f.means, np.full(k, r), f.ss_e / f.df_e, f.df_e, blocked=True) for f in fits]
    s2, dfe = st.pooled(models)
    got = st.interaction_wald(np.concatenate([m.means for m in models]), np.eye(2 * k) * s2 / r, dfe)
    assert (got["df"], got["df2"]) == (k - 1, 2 * (k - 1) * (r - 1)) == (ref["df_diff"], full.df_resid)
    assert got["statistic"] == pytest.approx(ref["F"], rel=1e-9)
    assert got["p_value"] == pytest.approx(ref["Pr(>F)"], rel=1e-9)
    one = anova_lm(smf.ols("y ~ C(ck) + C(stream)", df[df.run == 0]).fit(), typ=2).loc["C(ck)"]
    ck = st.oneway_f(models[0])
    assert (ck["df"], ck["df2"]) == (k - 1, (k - 1) * (r - 1))
    assert ck["statistic"] == pytest.approx(one["F"], rel=1e-9) and ck["p_value"] == pytest.approx(one["PR(>F)"], rel=1e-9)
    # nested: the same data tested against the within-cell variance, which holds the blocks (much larger)
    nested = st.pooled([st.cell_model(list(y[i])) for i in range(2)])
    assert nested[0] > 20 * s2 and nested[1] == 2 * k * (r - 1)


def test_block_share_recovers_the_planted_share_and_its_interval_covers() -> None:
    rng = np.random.default_rng(1)
    k, r, s2b, s2e = 8, 4, 0.02, 0.01
    truth = s2b / (s2b + s2e)
    est, cover, draws = [], 0, 400
    for _ in range(draws):
        fits = [blk.fit_run(rng.normal(0, np.sqrt(s2b), (1, r)) + rng.normal(0, np.sqrt(s2e), (k, r)))
                for _ in range(2)]
        res = blk.block_share(fits)
        est.append(res["share"])
        cover += res["ci"][0] <= truth <= res["ci"][1]
    assert abs(np.median(est) - truth) < 0.05
    assert abs(cover / draws - 0.95) < 3 * np.sqrt(0.05 * 0.95 / draws)
    assert res["df_blocks"] == 2 * (r - 1) and res["df_residual"] == 2 * (k - 1) * (r - 1)
    assert blk.fit_run(np.full((3, 1), 0.1)) is None and blk.fit_run(np.array([[0.1, np.nan], [0.2, 0.3]])) is None


def test_crossing_is_read_from_the_manifest_and_checked_against_positions(tmp_path) -> None:
    t = synthetic_game_table({"a": [0.0] * 3}, n_games=20, streams=3, crossed=True, block_sd=0.5, seed=2)
    folder = write_sweep(t, tmp_path / "s")
    loaded = load_game_table([folder])
    assert loaded.crossed and "stream_plans" in loaded.crossed_why
    doc = compare_games(loaded, "baseline", CompareSettings(n_boot=200))
    assert doc["streams"]["design"] == "crossed" and doc["streams"]["blocks"]["used"]
    # a stream played in another order than its plan: not crossed
    plan = json.loads((folder / "sweep.json").read_text())
    plan["stream_plans"][1]["order"] = plan["stream_plans"][1]["order"][::-1]
    (folder / "sweep.json").write_text(json.dumps(plan))
    bad = load_game_table([folder])
    assert not bad.crossed and "did not play stream 1's order" in bad.crossed_why
    # no manifest (arm files alone), or a manifest without stream plans: nested
    (folder / "sweep.json").write_text(json.dumps({"sweep_id": t.sweep_id, "streams": 3}))
    assert not load_game_table([folder]).crossed
    (folder / "sweep.json").unlink()
    plain = load_game_table([folder])
    assert not plain.crossed and "no sweep.json" in plain.crossed_why
    assert compare_games(plain, "baseline", CompareSettings(n_boot=200))["streams"]["design"] == "nested"


def test_nested_sweeps_are_analysed_as_before() -> None:
    """A sweep not played with shared plans: no blocks, the same numbers as the nested analysis asked for, and the
    synthetic draws of earlier versions unchanged."""
    t = planted_table("flat", seed=3, streams=4, stream_sd=0.5)
    assert not t.crossed
    auto = compare_games(t, "baseline", CompareSettings(n_boot=300))
    nested = compare_games(t, "baseline", CompareSettings(n_boot=300, stream_design="nested"))
    assert auto["streams"]["design"] == "nested" and auto["streams"]["blocks"] is None
    assert auto["pairs"][0]["interaction"] == nested["pairs"][0]["interaction"]
    assert auto["runs"] == nested["runs"]
    with pytest.raises(Exception, match="blocks need crossed streams"):
        synthetic_game_table({"a": [0.0] * 3}, streams=2, block_sd=0.5)


def test_lifts_keep_the_block_and_contrasts_lose_it() -> None:
    """Crossed: a cell's lift is tested against the within-cell variance (the block does not cancel against the
    baseline); the checkpoint effect and the interaction against the residual after the blocks."""
    t = planted_table("flat", seed=4, n_games=140, **CROSSED)
    blocked = compare_games(t, "baseline", CompareSettings(n_boot=300))
    nested = compare_games(t, "baseline", CompareSettings(n_boot=300, stream_design="nested"))
    assert [a["p_value"] for a in blocked["arms"]] == pytest.approx([a["p_value"] for a in nested["arms"]])
    b = blocked["streams"]["blocks"]
    assert b["used"] and b["sd_blocked"] < 0.5 * b["sd_nested"]
    ie = blocked["pairs"][0]["interaction"]
    assert ie["df2"] == 2 * 7 * 3 and "stream blocks" in ie["method"]
    assert nested["pairs"][0]["interaction"]["df2"] == 2 * 8 * 3
    ck = blocked["runs"]["a"]["checkpoint_effect"]
    assert ck["df2"] == 7 * 3 and ck["method"].startswith("randomized-block")


def test_report_shows_the_block_share() -> None:
    from twinrun.core.compare.report import render_comparison

    t = planted_table("flat", seed=5, n_games=60, **CROSSED)
    doc = compare_games(t, "baseline", CompareSettings(n_boot=300))
    text = render_comparison(doc, {})
    section = text.split("## Streams", 1)[1].split("\n## ", 1)[0]
    b = doc["streams"]["blocks"]
    assert f"{100 * b['share']:.0f}% [{100 * b['ci'][0]:.0f}, {100 * b['ci'][1]:.0f}]" in section
    assert f"{100 * b['sd_blocked']:.1f} pp after the stream blocks" in section


def _rates(case: str, draws: int, design: str, seed0: int) -> tuple[dict[str, int], list[float]]:
    counts: dict[str, int] = {}
    ps = []
    for seed in range(seed0, seed0 + draws):
        t = planted_table(case, seed=seed, n_games=140, **CROSSED)
        pair = compare_games(t, "baseline", CompareSettings(n_boot=500, stream_design=design, seed=seed))["pairs"][0]
        counts[pair["verdict"]] = counts.get(pair["verdict"], 0) + 1
        ps.append(pair["interaction"]["p_value"])
    return counts, ps


def test_planted_crossed_rates() -> None:
    """Seeded rates (the bench has 200+ draws per case): flat truth with blocks of sd 0.7 logit keeps the level of
    "differ"/"co-move" and spreads the interaction p over [0, 1] (nested: piled near 1); mirrored shapes of
    amplitude 0.3 logit are "differ" in nearly every draw (nested: almost never)."""
    flat, p_flat = _rates("flat", 40, "auto", 100)
    claims = flat.get("shapes differ", 0) + flat.get("co-move, profiles differ", 0)
    assert claims <= 6, flat  # 5% of 40 is 2; 6 is past the binomial 99.5% point
    assert 0.35 < float(np.mean(p_flat)) < 0.65 and stats.kstest(p_flat, "uniform").pvalue > 0.001
    _, p_nested = _rates("flat", 15, "nested", 100)
    assert float(np.mean(p_nested)) > 0.75  # the nested analysis tests against the block variance too
    opp, _ = _rates("opposite-0.3", 20, "auto", 200)
    assert opp.get("shapes differ", 0) >= 17, opp
    opp_nested, _ = _rates("opposite-0.3", 10, "nested", 200)
    assert opp_nested.get("shapes differ", 0) <= 3, opp_nested


def test_what_would_decide_starts_from_the_covariance_the_tests_use() -> None:
    """The games/streams that would decide extrapolate the pair's noise from the current design: there it must be
    the covariance of the cell means the interaction uses, diag(s2 / n) (it was s2, R times too much); and with
    crossed streams it comes from the blocked error, so far fewer streams decide than nested."""
    n = np.full(16, 4.0)
    noise = st.split_noise(0.0016, 0.0012, n, 140.0, 2 * 7 * 1)
    assert noise.cov(140.0, 4.0) == pytest.approx(np.diag(np.full(16, 0.0016 / 4)))
    assert noise.cov(280.0, 8.0) == pytest.approx(np.diag(np.full(16, (0.0006 + 0.0004) / 8)))
    t = planted_table("flat", seed=4, n_games=140, **CROSSED)
    got = {d: compare_games(t, "baseline", CompareSettings(n_boot=300, stream_design=d))["pairs"][0]
           for d in ("auto", "nested")}
    blocked = got["auto"]["n_to_decide_detail"]["streams_profile_difference"]
    nested = got["nested"]["n_to_decide_detail"]["streams_profile_difference"]
    assert blocked is not None and (nested is None or nested > 2 * blocked)


def test_a_run_whose_checkpoints_score_the_same_in_each_stream_says_so() -> None:
    """The demo's 3-step curves: each stream scores the same at every checkpoint of a run, so the blocks carry all
    the between-stream variance and no error is left: the nested analysis, with that reason (not 'no run has 2
    checkpoints x 2 streams', which it has)."""
    from twinrun.core.compare.blocks import choose

    cells = {"trl": [{0: 0.3, 1: 0.1}] * 3, "verl": [{0: 0.4, 1: 0.2}] * 3}
    d = choose(True, "shared plans", "auto", cells, 0.95)
    assert not d.blocked and d.summary is None and "scored the same in each stream" in d.why
    d = choose(True, "shared plans", "auto", {"trl": [{0: 0.3, 1: 0.1}]}, 0.95)
    assert "no run has 2 checkpoints x 2 streams" in d.why
