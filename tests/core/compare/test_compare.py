"""compare's inputs and outputs: per-run curves in the JSON result, unmeasured rows, refusal of mixed sweeps, the
metadata a sweep records (framework, seed, executor), and the published-summary path. The pure statistics are in
test_compare_stats, the verdicts and their rates in test_compare_verdict."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from twinrun.core.compare import (
    VERDICTS,
    NO_EVIDENCE,
    CompareError,
    CompareSettings,
    compare,
    compare_games,
    synthetic_game_table,
    to_json,
)
from twinrun.core.records import JsonlWriter, provenance
from twinrun.core.sweeps.sweep import EvalRecord

FAST = CompareSettings(n_boot=2000, seed=0)

# ------------------------------------------------------------------------------------------------------------
# Curves and the JSON result

SHAPE = [0.0, 1.0, 0.3, -0.6, 0.6, 1.2, -0.3, 0.2]  # logit-scale shifts per checkpoint


def test_pure_noise_gives_no_evidence_and_the_streams_that_would_decide() -> None:
    flat = [0.0] * 8
    table = synthetic_game_table({"trl": flat, "verl": flat}, seed=2, streams=3, stream_sd=0.4)
    res = compare_games(table, "baseline", FAST)
    (pair,) = res["pairs"]
    assert pair["verdict"] == NO_EVIDENCE and pair["reason"] == "undecided", pair["explanation"]
    detail = pair["n_to_decide_detail"]
    # the alternatives are pre-specified (delta): what would decide is a number of streams at the games per stream
    # played (the protocol's 140), up to the cap; never a longer stream
    assert detail["games_per_stream"] == 140 and detail["at_streams"] == 3 and detail["max_streams"] == 64
    assert pair["n_to_decide"] == detail["streams"] and (detail["streams"] is None or 3 < detail["streams"] <= 64)
    assert "at the protocol's 140 games per stream" in pair["explanation"]
    assert "games_equivalence" not in detail and res["settings"]["max_streams"] == 64
    assert all(a["p_holm"] is None or a["p_holm"] >= 0.01 for a in res["arms"])
    # a cap below what decides: none up to it does, and the sentence names the cap
    capped = compare_games(table, "baseline", CompareSettings(n_boot=2000, seed=0, max_streams=4))["pairs"][0]
    assert capped["n_to_decide"] is None and capped["n_to_decide_detail"]["max_streams"] == 4
    assert "no number of streams up to 4 per arm at the protocol's 140 games per stream" in capped["explanation"]
    # one stream per arm: nothing is decided, and no number of games is promised
    one = compare_games(synthetic_game_table({"trl": flat, "verl": flat}, seed=2), "baseline", FAST)["pairs"][0]
    assert one["reason"] == "one-stream" and one["n_to_decide"] is None
    assert "One stream per arm cannot decide a shape however many games it plays" in one["explanation"]


def test_run_statistics_streams_icc_and_test_retest() -> None:
    table = synthetic_game_table({"trl": SHAPE, "verl": SHAPE}, seed=4, streams=4, stream_sd=0.3)
    res = compare_games(table, "baseline", FAST)
    trl = res["runs"]["trl"]
    assert trl["checkpoints"] == [10, 20, 30, 40, 50, 60, 70, 80] and trl["streams"] == [4] * 8
    assert trl["peak_checkpoint"] in (20, 60)  # the two planted highs
    assert sum(trl["argmax_distribution"].values()) == pytest.approx(1.0)
    assert trl["final_minus_peak"] <= 0
    assert "stream model" in trl["final_vs_peak"]["method"]
    assert trl["checkpoint_effect"]["p_value"] < 0.001 and trl["checkpoint_effect"]["df2"] == 8 * 3
    assert trl["test_retest"]["r"] > 0.5 and trl["test_retest"]["method"].startswith("split-half")
    (pair,) = res["pairs"]
    assert 0 < pair["ceiling_test_retest"] <= 1 and 0 < pair["ceiling_sampling"] <= 1
    assert pair["streams"] == 4 and pair["interaction"]["df2"] == 16 * 3
    # the hypotheses are the (run, checkpoint) cells, each with its streams; the streams' own rows are conditional
    assert len(res["arms"]) == 16 and all(a["streams"] == 4 and a["family"] for a in res["arms"])
    assert len(res["stream_arms"]) == 64 and res["baseline"]["streams"] == 4
    s = res["streams"]
    assert s["mode"] == "streams" and s["icc"]["ci"][0] <= s["icc"]["estimate"] <= s["icc"]["ci"][1]
    assert s["icc"]["deff"] == pytest.approx(1 + (s["icc"]["games_per_stream"] - 1) * s["icc"]["estimate"])
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
    assert pair["pearson"] is not None and pair["verdict"] in VERDICTS
    assert "success-rate scale" in pair["interaction"]["method"] and pair["reason"] == "one-stream"
    assert a["p_conditional_on_stream"] if "p_conditional_on_stream" in a else "conditional on the stream" in a["test"]
    skipped = " ".join(res["skipped"])
    for what in ("exact McNemar for 5 arm(s)", "Cochran's Q", "pairing", "test-retest", "between-stream"):
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


# ------------------------------------------------------------------------------------------------------------
# What a sweep records about a run reaches the comparison: framework, training seed, checkpoint, executor


def test_sweep_metadata_groups_runs_by_framework_and_seed(tmp_path: Path) -> None:
    from twinrun.core.compare.synthetic import planted_table, write_sweep

    table = planted_table("same-shape", seed=3, frameworks=("trl", "verl"))
    for arm in table.arms:
        arm.checkpoint_hash = None if arm.run is None else f"hash-{arm.name}"
    write_sweep(table, tmp_path / "sweep", executor="qwen3-8b")
    res = compare([tmp_path / "sweep"], "baseline", FAST)
    a10 = next(a for a in res["arms"] if a["arm"] == "a@10")
    assert (a10["framework"], a10["seed"], a10["checkpoint_hash"]) == ("trl", 3, "hash-a@10")
    assert res["executor"] == "qwen3-8b" and res["runs"]["b"]["framework"] == "verl"
    assert res["frameworks"]["confounded"] and "confounded" in res["frameworks"]["note"]
    assert res["pairs"][0]["relation"] == "across frameworks"
    # --group overrides what the sweep recorded; an unknown run is a one-line error
    regrouped = compare([tmp_path / "sweep"], "baseline",
                        CompareSettings(n_boot=500, groups=(("a", "trl", 1), ("b", "trl", 2))))
    assert regrouped["frameworks"]["groups"] == {"trl": [{"run": "a", "seed": 1}, {"run": "b", "seed": 2}]}
    assert regrouped["pairs"][0]["relation"] == "seeds of one framework" and not regrouped["frameworks"]["confounded"]
    with pytest.raises(CompareError, match="--group: run 'c' is not in this comparison") as e:
        compare([tmp_path / "sweep"], "baseline", CompareSettings(n_boot=500, groups=(("c", "trl", None),)))
    assert "\n" not in str(e.value)


def test_summary_columns_framework_seed_and_comments(tmp_path: Path) -> None:
    p = tmp_path / "s.csv"
    p.write_text("# published by someone, transcribed here\nrun,checkpoint,n,successes,framework,seed\n"
                 "baseline,,140,60,,\ntrl-s1,10,140,62,trl,1\ntrl-s1,20,140,70,trl,1\ntrl-s1,30,140,66,trl,1\n")
    res = compare([p], "baseline", CompareSettings(n_boot=500))
    assert res["runs"]["trl-s1"]["framework"] == "trl" and res["runs"]["trl-s1"]["seed"] == 1
    assert res["frameworks"]["groups"] == {"trl": [{"run": "trl-s1", "seed": 1}]}


def test_cli_group_and_family_options_are_one_line_errors(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from twinrun.cli import app

    csv_path = tmp_path / "published.csv"
    csv_path.write_text(SUMMARY)
    runner = CliRunner()
    for args, match in ((["--group", "trl-s0"], "--group: 'trl-s0' is not RUN=FRAMEWORK"),
                        (["--group", "trl-s0=trl@x"], "seed 'x' of 'trl-s0' is not an integer"),
                        (["--family", "custom"], "custom needs at least one --family-of"),
                        (["--family", "custom", "--family-of", "x=verl*"], "arm 'trl-s0@10' matches none of verl"),
                        (["--delta", "150"], "delta: 1.5 must be in"),
                        (["--across", "split"], "across: 'split' is not an axis")):
        out = runner.invoke(app, ["compare", str(csv_path), "--baseline", "baseline", "--n-boot", "200", *args])
        assert out.exit_code != 0 and match in str(out.exception or out.output), (args, out.output)
