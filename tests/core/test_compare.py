"""compare: paired statistics (hand values and scipy/statsmodels references), the curve-shape verdict on planted
synthetic truths, unmeasured rows, refusal of mixed sweeps, and the published-summary path."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from twinrun.core import compare_stats as cs
from twinrun.core.compare import (
    AGREE,
    DIFFER,
    NO_EVIDENCE,
    CompareError,
    CompareSettings,
    compare,
    compare_games,
    synthetic_game_table,
    to_json,
)
from twinrun.core.records import JsonlWriter, provenance
from twinrun.core.sweep import EvalRecord

FAST = CompareSettings(n_boot=2000, seed=0)

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


def test_mde_paired_by_hand() -> None:
    z = 1.959963984540054 + 0.8416212335729143
    assert cs.mde_paired(np.array([100]), np.array([0.2]))[0] == pytest.approx(z * math.sqrt(0.2 / 100))
    # no discordance is floored at one discordant game in n
    assert cs.mde_paired(np.array([100]), np.array([0.0]))[0] == pytest.approx(z * math.sqrt(0.01 / 100))


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


def test_conditional_logit_matches_statsmodels() -> None:
    import warnings

    from statsmodels.discrete.conditional_models import ConditionalLogit

    rng = np.random.default_rng(1)
    g = np.repeat(np.arange(30), 6)
    x = rng.normal(size=(180, 3))
    y = (rng.random(180) < 1 / (1 + np.exp(-(x @ [0.5, -1, 0.2] + rng.normal(size=30)[g])))).astype(float)
    sums, cnt = np.bincount(g, weights=y), np.bincount(g)
    keep = ((sums > 0) & (sums < cnt))[g]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = ConditionalLogit(y, x, groups=g).fit(method="newton", disp=False)
    _, gg = np.unique(g[keep], return_inverse=True)
    ours = cs.conditional_logit(y[keep], x[keep], gg)
    assert ours.ok
    assert ours.llf == pytest.approx(ref.llf, abs=1e-6)
    assert ours.params == pytest.approx(np.asarray(ref.params), abs=1e-4)


def test_interaction_test_survives_separation() -> None:
    rng = np.random.default_rng(0)
    n, k = 60, 3
    y = (rng.random((2, k, n)) < 0.5).astype(float)
    y[1, 2, :] = 1.0  # run 1 wins every game at its last checkpoint: the logit coefficient runs off to infinity
    game = np.tile(np.arange(n), 2 * k)
    group = np.repeat([0, 1], k * n)
    ckpt = np.tile(np.repeat(np.arange(k), n), 2)
    res = cs.interaction_test(y.ravel(), game, group, ckpt)
    assert res["p_value"] is not None and res["p_value"] < 0.05
    assert "linear probability" in res["method"] and res["note"]


def test_n_for_chi2_power() -> None:
    assert cs.n_for_chi2_power(3.0, 7, 140) is None  # below its df: noise level
    n = cs.n_for_chi2_power(15.0, 7, 140)
    crit = stats.chi2.ppf(0.95, 7)
    assert stats.ncx2.sf(crit, 7, 8.0 * n / 140) >= 0.8 > stats.ncx2.sf(crit, 7, 8.0 * (n - 2) / 140)


# ------------------------------------------------------------------------------------------------------------
# The verdict on planted truths (seeded; the criteria are robust to the seed, see the docstring of `verdict`)

SHAPE = [0.0, 1.0, 0.3, -0.6, 0.6, 1.2, -0.3, 0.2]  # logit-scale shifts per checkpoint


@pytest.mark.parametrize("seed", [0, 1])
def test_planted_shared_shape_agrees(seed: int) -> None:
    res = compare_games(synthetic_game_table({"trl": SHAPE, "verl": SHAPE}, seed=seed), "baseline", FAST)
    (pair,) = res["pairs"]
    assert pair["verdict"] == AGREE, pair["criterion"]
    assert pair["pearson_ci"][0] > 0 and "lies above 0" in pair["criterion"]


@pytest.mark.parametrize("seed", [0, 1])
def test_planted_opposite_shape_differs(seed: int) -> None:
    opposite = [-s for s in SHAPE]
    res = compare_games(synthetic_game_table({"trl": SHAPE, "verl": opposite}, seed=seed), "baseline", FAST)
    (pair,) = res["pairs"]
    assert pair["verdict"] == DIFFER, pair["criterion"]
    assert pair["pearson_ci"][1] < 0 and pair["interaction"]["p_value"] < 0.05


@pytest.mark.parametrize("seed", [0, 2])
def test_pure_noise_gives_no_evidence_and_the_n_that_would_decide(seed: int) -> None:
    # On noise each test errs at its own rate (about alpha for the interaction, measured: 6.5% at 0.05 over 200
    # seeds); alpha = 0.01 with a 99% CI makes a wrong verdict a ~1-in-50 event per seed, and the seeds are fixed.
    strict = CompareSettings(n_boot=2000, seed=0, alpha=0.01, level=0.99)
    flat = [0.0] * 8
    res = compare_games(synthetic_game_table({"trl": flat, "verl": flat}, seed=seed), "baseline", strict)
    (pair,) = res["pairs"]
    assert pair["verdict"] == NO_EVIDENCE, pair["criterion"]
    assert pair["n_to_decide"] is None or pair["n_to_decide"] > 140
    assert "games per arm would decide" in pair["criterion"] or "No sample size" in pair["criterion"]
    # flat curves: nothing survives Holm, and the curves are mostly noise
    assert all(a["p_holm"] is None or a["p_holm"] >= 0.01 for a in res["arms"])
    assert all(r["cochran_q"]["p_value"] > 0.01 for r in res["runs"].values())


def test_run_statistics_and_test_retest_ceiling() -> None:
    table = synthetic_game_table({"trl": SHAPE, "verl": SHAPE}, seed=4, replicates=("trl", "baseline"))
    res = compare_games(table, "baseline", FAST)
    trl = res["runs"]["trl"]
    assert trl["checkpoints"] == [10, 20, 30, 40, 50, 60, 70, 80]
    assert trl["peak_checkpoint"] in (20, 60)  # the two planted highs
    assert sum(trl["argmax_distribution"].values()) == pytest.approx(1.0)
    assert trl["final_minus_peak"] <= 0
    assert trl["cochran_q"]["p_value"] < 0.001
    assert trl["test_retest"]["r"] > 0.5 and len(trl["test_retest"]["checkpoints"]) == 8
    (pair,) = res["pairs"]
    assert 0 < pair["ceiling_test_retest"] <= 1 and 0 < pair["ceiling_sampling"] <= 1
    # replicate arms are measured but are no hypotheses (no multiplicity family)
    rep = [a for a in res["arms"] if a["replicate"] == 1]
    assert rep and all(a["family"] is None and a["p_holm"] is None for a in rep)
    assert res["skipped"] == []
    json.loads(to_json(res))  # strict JSON: NaN became null


# ------------------------------------------------------------------------------------------------------------
# Per-game files: unmeasured rows, refusals


def _write_arm(path: Path, arm: str, outcomes: list[str], *, sweep: str = "s1", ghash: str = "h1",
               run: str | None = None, step: int | None = None) -> None:
    with JsonlWriter(path, fsync=False) as w:
        for i, o in enumerate(outcomes):
            w.write(EvalRecord(
                game_id=f"g{i}", task_type="pick", outcome=o, unmeasured_reason="endpoint 503" if o == "unmeasured" else None,
                sweep_id=sweep, arm=arm, role="baseline" if run is None else "checkpoint", run=run,
                checkpoint_step=step, game_index=i, n_games=len(outcomes), games_hash=ghash,
                provenance=provenance(),
            ))


S, F, U = "success", "failure", "unmeasured"


def test_unmeasured_rows_are_excluded_counted_and_flagged(tmp_path: Path) -> None:
    base = [S, F, F, S, F, S, F, F, S, F]
    arm = [S, S, U, S, U, U, S, F, S, F]  # three games failed for infrastructure reasons
    _write_arm(tmp_path / "arms" / "baseline.jsonl", "baseline", base)
    _write_arm(tmp_path / "arms" / "r@10.jsonl", "r@10", arm, run="r", step=10)
    res = compare([tmp_path], "baseline", CompareSettings(n_boot=500, max_unmeasured_share=0.2))
    (row,) = res["arms"]
    assert (row["n_measured"], row["n_unmeasured"], row["n_pairs"]) == (7, 3, 7)
    # measured pairs only: games 0,1,3,6,7,8,9 -> arm 5/7, baseline 3/7; b = games 1, 6; c = none
    assert row["success_rate"] == pytest.approx(5 / 7)
    assert row["lift"] == pytest.approx(2 / 7)
    assert (row["b"], row["c"]) == (2, 0)
    assert row["p_value"] == pytest.approx(stats.binomtest(2, 2, 0.5).pvalue)
    # counting unmeasured as failures would have given a different (wrong) answer
    as_failures = sum(o == S for o in arm) / 10 - sum(o == S for o in base) / 10
    assert as_failures != pytest.approx(row["lift"])
    assert row["flagged"] and any("3 of 10 rows unmeasured" in f for f in res["flags"])


def test_refuses_arms_from_different_sweeps_or_game_lists(tmp_path: Path) -> None:
    _write_arm(tmp_path / "a" / "baseline.jsonl", "baseline", [S, F, S])
    _write_arm(tmp_path / "b" / "r@10.jsonl", "r@10", [S, S, S], sweep="s2", run="r", step=10)
    with pytest.raises(CompareError, match="different sweeps"):
        compare([tmp_path / "a", tmp_path / "b"], "baseline", FAST)
    _write_arm(tmp_path / "c" / "r@10.jsonl", "r@10", [S, S, S], ghash="h2", run="r", step=10)
    with pytest.raises(CompareError, match="different game lists"):
        compare([tmp_path / "a", tmp_path / "c"], "baseline", FAST)
    # the same arm's rows in two files would be counted twice
    _write_arm(tmp_path / "d" / "copy.jsonl", "baseline", [S, F, S])
    with pytest.raises(CompareError, match="twice"):
        compare([tmp_path / "a", tmp_path / "d"], "baseline", FAST)


def test_unknown_baseline_is_a_one_line_error(tmp_path: Path) -> None:
    _write_arm(tmp_path / "arms" / "baseline.jsonl", "baseline", [S, F, S])
    _write_arm(tmp_path / "arms" / "r@10.jsonl", "r@10", [S, S, S], run="r", step=10)
    with pytest.raises(CompareError, match=r"--baseline: 'base' is not an arm here") as e:
        compare([tmp_path], "base", FAST)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------------------------------------------------
# Published summaries (numbers invented for this test)

SUMMARY = """run,checkpoint,n,successes,b,c
baseline,,140,67,,
trl-s0,10,140,70,15,12
trl-s0,20,140,82,25,10
trl-s0,30,140,75,,
trl-s0,40,140,64,14,17
verl,10,140,69,,
verl,20,140,80,,
verl,30,140,77,,
verl,40,140,66,,
"""


def test_published_summary_path(tmp_path: Path) -> None:
    csv_path = tmp_path / "published.csv"
    csv_path.write_text(SUMMARY)
    res = compare([csv_path], "baseline", CompareSettings(n_boot=1000))
    assert res["source"] == "summary"
    arms = {a["arm"]: a for a in res["arms"]}
    a = arms["trl-s0@20"]
    assert a["p_value"] == pytest.approx(stats.binomtest(25, 35, 0.5).pvalue)
    assert a["lift"] == pytest.approx((25 - 10) / 140) and a["test"].startswith("exact McNemar")
    v = arms["verl@20"]
    assert v["p_value"] == pytest.approx(stats.fisher_exact([[80, 60], [67, 73]])[1])
    assert v["lift"] == pytest.approx(80 / 140 - 67 / 140) and "unpaired" in v["test"]
    assert res["baseline"]["success_rate"] == pytest.approx(67 / 140)
    trl = res["runs"]["trl-s0"]
    assert trl["peak_checkpoint"] == 20 and trl["crossings"] == 1
    assert trl["final_minus_peak"] == pytest.approx((14 - 17) / 140 - 15 / 140)
    assert trl["cochran_q"] is None
    (pair,) = res["pairs"]
    assert pair["pearson"] is not None and pair["verdict"] in (AGREE, DIFFER, NO_EVIDENCE)
    assert "binomial GLM on counts" in pair["interaction"]["method"]
    skipped = " ".join(res["skipped"])
    for what in ("exact McNemar for 5 arm(s)", "Cochran's Q", "game effects", "test-retest"):
        assert what in skipped
    json.loads(to_json(res))


@pytest.mark.parametrize("body,match", [
    ("run,checkpoint,n\nbaseline,,10\n", "column 'successes' is missing"),
    ("run,checkpoint,n,successes\nbaseline,,10,4\nr,10,10,11\n", r":3: successes=11 exceeds n=10"),
    ("run,checkpoint,n,successes,b,c\nbaseline,,10,4,,\nr,10,10,5,3,\n", "only one of b, c"),
    ("run,checkpoint,n,successes\nr,10,10,5\n", "0 rows with run='baseline'"),
    ("run,checkpoint,n,successes\nbaseline,,10,4\nr,ten,10,5\n", "checkpoint='ten' is not an integer"),
])
def test_summary_csv_errors_are_one_line(tmp_path: Path, body: str, match: str) -> None:
    p = tmp_path / "s.csv"
    p.write_text(body)
    with pytest.raises(CompareError, match=match) as e:
        compare([p], "baseline", FAST)
    assert "\n" not in str(e.value)


def test_cli_compare_json_schema(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from twinrun.cli import app

    csv_path = tmp_path / "published.csv"
    csv_path.write_text(SUMMARY)
    out = CliRunner().invoke(app, ["compare", str(csv_path), "--baseline", "baseline", "--json", "--n-boot", "500",
                                   "--out", str(tmp_path / "cmp")])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert set(doc) >= {"arms", "runs", "pairs"}
    assert {"peak_checkpoint", "crossings", "final_minus_peak"} <= set(doc["runs"]["trl-s0"])
    assert {"a", "b", "pearson", "spearman", "verdict", "criterion"} <= set(doc["pairs"][0])
    assert (tmp_path / "cmp" / "report.md").exists() and (tmp_path / "cmp" / "compare.json").exists()
