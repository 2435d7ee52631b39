"""compare --training: step metrics of runs by group and seed, the level + shape contrast, weighted Holm over
metrics, the first parting, the comparability table, runs still training (a torn last row), the CLI and the
report; and the controls' two readings recomputed from the committed metrics rows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from twinrun.core.compare import training as tr
from twinrun.core.compare import training_runs as trr
from twinrun.core.compare.stats import holm
from twinrun.core.records import JsonlWriter, StepMetrics, provenance

REPO = Path(__file__).resolve().parents[3]
PNG = b"\x89PNG\r\n\x1a\n"


def _run(folder: Path, backend: str, seed: int, reward: list[float], *, torn: bool = False,
         context: str | None = None) -> Path:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed + (0 if backend == "trl" else 100))
    with JsonlWriter(folder / "metrics.jsonl", fsync=False) as w:
        for s, r in enumerate(reward, 1):
            w.write(StepMetrics(
                step=s, backend=backend, reward_mean=r, reward_std=0.1,
                reward_terms={"r_task": r / 2, "r_fc": 0.5, "r_cnt": 0.0, "r_comp": 0.9}, curation_rollouts=8,
                executor_episodes=16, executor_calls=100, unmeasured_episodes=0, optimizer_updates=1,
                entropy=0.03 + 0.001 * rng.normal(), kl=0.01 if backend == "verl" else 0.012, grad_norm=0.05,
                clip_fraction=0.0, completion_length_mean=70.0 + rng.normal(), tool_calls=16,
                provenance=provenance(backend=backend, seed=seed)))
    if torn:  # a run still training: its next row is half written
        with open(folder / "metrics.jsonl", "a") as f:
            f.write('{"kind": "step", "step": 99, "backend": "')
    if context:
        (folder / "spec.yaml").write_text(f"curator:\n  context: {context}\n")
    return folder


def test_windows_and_window_means() -> None:
    assert tr.windows([3, 1, 2], 8) == [[1], [2], [3]]
    w = tr.windows(list(range(1, 21)), 8)
    assert [len(b) for b in w] == [3, 3, 3, 3, 2, 2, 2, 2] and w[0] == [1, 2, 3] and w[-1] == [19, 20]
    m = tr.window_means(np.array([1, 2, 3, 4]), np.array([1.0, np.nan, 3.0, 5.0]), [[1, 2], [3, 4], [5]])
    assert m[0] == 1.0 and m[1] == 4.0 and math.isnan(m[2])
    with pytest.raises(ValueError):
        tr.windows([1, 2], 0)


def test_fisher_and_weighted_holm_by_hand() -> None:
    assert tr.fisher([0.05, 0.05]) == pytest.approx(stats.chi2.sf(-4 * math.log(0.05), 4))
    assert tr.fisher([0.3]) == 0.3 and tr.fisher([]) is None
    p = np.array([0.01, 0.04, 0.03, 0.2])
    adj, _ = tr.weighted_holm(p, np.full(4, 0.25))
    assert np.allclose(adj, holm(p))
    # in order of p / w: 0.004 / 0.25 = 0.016 first (of weight 1), then the reward 0.02 / 0.5 (of 0.75 left), then 0.3
    adj, share = tr.weighted_holm(np.array([0.02, 0.004, 0.3]), np.array([0.5, 0.25, 0.25]))
    assert share[1] == pytest.approx(0.25) and adj[1] == pytest.approx(0.016)
    assert share[0] == pytest.approx(0.5 / 0.75) and adj[0] == pytest.approx(0.03)  # 0.02 * 0.75 / 0.5
    assert adj[2] == pytest.approx(0.3)


def test_contrast_sees_a_level_difference_a_centred_test_cannot() -> None:
    rng = np.random.default_rng(0)
    seed_profile = rng.normal(0, 0.05, (4, 6))
    a = 1.0 + seed_profile + rng.normal(0, 0.01, (4, 6))
    b = 2.0 + seed_profile + rng.normal(0, 0.01, (4, 6))  # twice as big, the same shape
    c = tr.contrast(a, b, "paired")
    assert c["level"]["estimate"] == pytest.approx(-1.0, abs=0.02) and c["p_value"] < 1e-6
    assert c["shape"]["p_value"] > 0.01  # the shape alone does not tell them apart
    same = tr.contrast(a, a + rng.normal(0, 0.01, a.shape), "paired")
    assert same["p_value"] > 0.01
    ind = tr.contrast(a, b, "independent")
    assert ind["level"]["df"] == 6 and ind["p_value"] < 1e-6


def test_first_parting_finds_a_late_divergence() -> None:
    rng = np.random.default_rng(1)
    a = rng.normal(0.5, 0.02, (5, 8))
    b = a + rng.normal(0, 0.02, (5, 8))
    a[:, 5:] -= 0.4  # a's curve falls at window 6
    res = tr.verdicts({"reward_mean": (a, b), "entropy": (b, b + rng.normal(0, 0.02, b.shape))}, "paired")
    assert res["reward_mean"]["verdict"] == tr.DIFFER and res["reward_mean"]["first_window"] == 5
    assert res["entropy"]["verdict"] == tr.NOT_SHOWN and res["entropy"]["first_window"] is None
    assert res["reward_mean"]["weight"] == 0.5


def test_torn_last_row_is_a_run_still_training(tmp_path: Path) -> None:
    run = trr.read_run(_run(tmp_path / "trl-s0", "trl", 0, [0.1, 0.2, 0.3], torn=True))
    assert run.torn and run.steps.tolist() == [1, 2, 3] and run.backend == "trl" and run.seed == 0
    assert "incomplete" in run.notes[0]
    block = trr.training_block([run, trr.read_run(_run(tmp_path / "verl-s0", "verl", 0, [0.1] * 5))])
    assert block["runs"][0]["torn"] is True and block["comparisons"][0]["steps"] == [1, 2, 3]


def test_not_comparable_table(tmp_path: Path) -> None:
    runs = [trr.read_run(_run(tmp_path / f"{b}-s{s}", b, s, [0.2] * 3, context="accumulated"))
            for b in ("trl", "verl") for s in (0, 1)]
    c = trr.training_block(runs)["comparisons"][0]
    assert "clamps" in c["not_comparable"]["kl"] and "verl" in c["not_comparable"]["tool_failures"]
    assert "tool_mask" in c["not_comparable"]["completion_length_mean"]
    assert "tool_calls" in c["not_comparable"]
    assert "kl" not in c["metrics"] and "completion_length_mean" not in c["metrics"]
    assert c["constant"]["clip_fraction"] == 0.0
    per_position = [trr.read_run(_run(tmp_path / f"pp-{b}-s{s}", b, s, [0.2] * 3)) for b in ("trl", "verl")
                    for s in (0, 1)]
    c2 = trr.training_block(per_position)["comparisons"][0]
    assert "completion_length_mean" in c2["metrics"] and "tool_calls" not in c2["not_comparable"]


def test_pairing_and_groups(tmp_path: Path) -> None:
    runs = [trr.read_run(_run(tmp_path / n, b, s, [0.1, 0.2])) for n, b, s in
            (("trl-s0", "trl", 0), ("trl-s1", "trl", 1), ("verl-s0", "verl", 0), ("verl-s1", "verl", 1),
             ("high-s0", "trl", 0))]
    trr.apply_groups(runs, [("high-*", "high", None)])
    assert [r.group for r in runs] == ["trl", "trl", "verl", "verl", "high"]
    by = {g: [r for r in runs if r.group == g] for g in ("trl", "verl", "high")}
    assert trr.pairing(by["trl"], by["verl"], "auto")[0] == "paired"
    assert trr.pairing(by["trl"], by["high"], "auto")[0] == "independent"
    assert trr.pairing(by["trl"], by["verl"], "independent")[0] == "independent"
    by["verl"][0].start, by["trl"][0].start = "warm-a", "warm-b"
    assert trr.pairing(by["trl"], by["verl"], "auto") == ("independent", "seed 0's runs started from different models")
    with pytest.raises(trr.CompareError, match="one to one"):
        trr.pairing(by["trl"], by["high"], "paired")
    with pytest.raises(trr.CompareError, match="matches no run"):
        trr.apply_groups(runs, [("nope-*", "x", None)])


def test_cli_on_run_folders_without_baseline_and_report(tmp_path: Path, capsys) -> None:
    from twinrun.testing.run_folders import run_twinrun

    rising = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    dirs = [_run(tmp_path / f"trl-s{s}", "trl", s, [x + 0.02 * s for x in rising], torn=(s == 0)) for s in range(3)]
    dirs += [_run(tmp_path / f"verl-s{s}", "verl", s, [x + 0.02 * s - (0.3 if i >= 3 else 0.0) for i, x in
                                                       enumerate(rising)]) for s in range(3)]
    code, out, err = run_twinrun(["compare", *dirs, "--out", tmp_path / "out"], capsys)
    assert code == 0, err
    assert "trl vs verl" in out and "differ on" in out and "reward_mean" in out
    data = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert data["kind"] == "training" and data["training"]["comparisons"][0]["design"] == "paired"
    assert (tmp_path / "out" / "figures" / "training_curves.png").read_bytes()[:8] == PNG
    assert "## Training curves" in (tmp_path / "out" / "report.md").read_text()
    code, _, err = run_twinrun(["compare", tmp_path / "out"], capsys)  # not a run folder: checkpoint arms
    assert code == 2 and "--baseline" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow  # a checkpoint comparison to render around it (~8 s on a loaded machine)
def test_report_section_in_every_comparison(tmp_path: Path) -> None:
    from twinrun.core.compare import (
        CompareSettings,
        compare_games,
        synthetic_game_table,
    )
    from twinrun.core.compare.report import write_report

    result = compare_games(synthetic_game_table({"trl": [0.0, 0.5, 0.2], "verl": [0.0, 0.5, 0.2]}, seed=0),
                           "baseline", CompareSettings(n_boot=200))
    runs = [trr.read_run(_run(tmp_path / f"{b}-s{s}", b, s, [0.1 * s, 0.2, 0.3])) for b in ("trl", "verl")
            for s in (0, 1)]
    result["training"] = trr.training_block(runs)
    text = write_report(result, tmp_path / "out").read_text()
    assert "## Training curves" in text and "figures/training_curves.png" in text
    assert "## Training curves" not in write_report({k: v for k, v in result.items() if k != "training"},
                                                    tmp_path / "out2").read_text()
    # as `twinrun run` (the demo) writes its report: compare()'s result and one run's metrics per backend
    demo = write_report({k: v for k, v in result.items() if k != "training"}, tmp_path / "out3",
                        metrics={"trl": tmp_path / "trl-s0" / "metrics.jsonl",
                                 "verl": tmp_path / "verl-s0" / "metrics.jsonl"}).read_text()
    assert "## Training curves" in demo and "needs >= 2 seeds per group" in demo
    assert (tmp_path / "out3" / "figures" / "training_curves.png").read_bytes()[:8] == PNG
    assert json.loads((tmp_path / "out3" / "compare.json").read_text())["training"]["runs"][0]["run"] == "trl"


def _controls(sweep: Path, names: list[str], groups: list[tuple[str, str, None]] = ()) -> dict:
    """compare --training's comparison of the committed controls' runs (sweep: the rows rebuilt as a folder, the
    controls_sweep fixture)."""
    runs = [trr.read_run(sweep / "metrics" / f"{n}.jsonl") for n in names]
    trr.apply_groups(runs, groups)
    (c,) = trr.training_block(runs)["comparisons"]
    return c


def test_controls_negative_differs_on_nothing(controls_sweep: Path) -> None:
    """TRL vs verl, the same algorithm at paired seeds 0-2: no metric differs (family-wise alpha 5%)."""
    c = _controls(controls_sweep, [f"trl-s{i}" for i in range(3)] + [f"verl-s{i}" for i in range(3)])
    assert c["design"] == "paired" and len(c["metrics"]) == 8
    assert c["differ"] == []
    assert round(min(r["p_holm"] for r in c["metrics"].values()), 2) == 0.98  # docs/training-curves.md
    lv = c["metrics"]["reward_mean"]["level"]
    assert [round(lv["estimate"], 3), round(lv["ci"][0], 3), round(lv["ci"][1], 3)] == [0.02, -0.152, 0.191]
    assert set(c["constant"]) == {"r_cnt", "turns_missing_share", "clip_fraction"}
    assert set(c["not_recorded"]) == {"kl"} and set(c["not_comparable"]) == {"tool_failures"}


def test_controls_positive_broken_differs_on_reward_from_its_fall(controls_sweep: Path) -> None:
    """lr x 10 under TRL vs verl2 at seeds 0-2: the reward differs, parting at or before the step its curve falls
    (the first step whose seed-mean reward is below half its mean over steps 1-3)."""
    c = _controls(controls_sweep, [f"trlhigh-s{i}" for i in range(3)] + [f"verl2-s{i}" for i in range(3)],
                  [("trlhigh-*", "trlhigh", None)])
    r = c["metrics"]["reward_mean"]
    assert r["verdict"] == tr.DIFFER and r["p_holm"] < 0.05
    curve = np.mean(r["curves_a"], axis=0)
    fall = int(np.argmax(curve < curve[:3].mean() / 2)) + 1
    assert fall == 5 and r["first_window_steps"][1] <= fall
    assert r["level"]["ci"][1] < 0  # lower in the broken group, the interval excludes 0
    lv = r["level"]  # the numbers docs/training-curves.md states
    assert (round(r["p_holm"], 3), round(lv["estimate"], 2), round(lv["ci"][0], 2), round(lv["ci"][1], 2)) == (
        0.016, -0.26, -0.48, -0.04)
    fc = c["metrics"]["r_fc"]
    assert fc["verdict"] == tr.DIFFER and round(fc["p_holm"], 3) == 0.044 and fc["first_window_steps"] == [3, 3]
    assert c["differ"] == ["reward_mean", "r_fc"]
    # against TRL at the normal rate, the same 3 seeds miss it (the 3-seed power docs/training-curves.md states)
    same_backend = _controls(controls_sweep, [f"trl-s{i}" for i in range(3)] + [f"trlhigh-s{i}" for i in range(3)],
                             [("trlhigh-*", "trlhigh", None)])
    r2 = same_backend["metrics"]["reward_mean"]
    assert same_backend["differ"] == [] and round(r2["p_holm"], 3) == 0.056 and round(r2["level"]["estimate"], 2) == 0.48


def test_controls_entropy_at_step_one(controls_sweep: Path) -> None:
    """docs/training-curves.md: at step 1 (the start weights) TRL's entropy is below verl's in all 9 distinct
    pairs at one seed, by 6% on average (paired t on the log ratio, p 3e-4)."""
    def first(name: str) -> float:
        return float(trr.read_run(controls_sweep / "metrics" / f"{name}.jsonl").values["entropy"][0])

    pairs = [(f"trl-s{i}", f"verl-s{i}") for i in range(3)] + [(f"trlslow2-s{i}", f"verl2-s{i}") for i in range(6)]
    lr = np.log([first(a) / first(b) for a, b in pairs])
    assert int((lr < 0).sum()) == 9 and round(1 - float(np.exp(lr.mean())), 2) == 0.06
    assert round(float(stats.ttest_1samp(lr, 0.0).pvalue), 4) == 0.0003
    six = _controls(controls_sweep, [f"trlslow2-s{i}" for i in range(6)] + [f"verl2-s{i}" for i in range(6)]
                    )["metrics"]["entropy"]
    assert six["verdict"] == tr.DIFFER and six["first_window_steps"] == [1, 1]


def test_a_sweep_folder_finds_its_runs_metrics(controls_sweep: Path) -> None:
    """Beside a checkpoint comparison: the controls' sweep keeps one RUN.jsonl per run under metrics/; --group
    globs split the TRL runs into their groups (the same seeds twice in one backend is then no longer a mix)."""
    sweep = controls_sweep
    groups = [("trlhigh-*", "trlhigh", None), ("trlslow*", "trlslow", None), ("verl2-*", "verl2", None)]
    block = trr.training_for_inputs([sweep], groups=groups, required=False)
    assert len(block["runs"]) == 28 and {r["group"] for r in block["runs"]} == {"trl", "trlhigh", "trlslow", "verl",
                                                                                 "verl2"}
    pairs = {(c["a"], c["b"]): c for c in block["comparisons"]}
    assert len(pairs) == 10 and pairs[("trl", "verl")]["design"] == "independent"  # seeds 0-2 vs 0-4
    assert pairs[("trl", "trlhigh")]["design"] == "paired"  # groups in name order
    assert trr.training_for_inputs([sweep / "metrics" / "trl-s0.jsonl"], required=False) is None  # not a sweep
    mixed = trr.training_for_inputs([sweep], required=False)  # by backend alone: trl-s0 and trlhigh-s0 in one group
    assert any("group trl holds several runs at seed 0" in n for n in mixed["notes"])


@pytest.mark.parametrize("args, names", [
    (["--training", "{ws}/stuff"], "not a sweep folder (sweep.json), a run folder (metrics.jsonl)"),
    (["--training", "{ws}/nowhere.jsonl"], "no metrics.jsonl"),
    (["--training", "{ws}/trl-s0", "--windows", "0"], "--windows: 0"),
    (["--training", "{ws}/trl-s0", "--group", "x-*=x"], "--group: 'x-*' matches no run"),
    (["--training", "{ws}/trl-s0", "--seed-design", "paired"], "--seed-design paired"),
])
def test_bad_training_inputs_are_one_line_and_write_nothing(args, names, tmp_path: Path, capsys) -> None:
    from twinrun.testing.run_folders import folder_digest, run_twinrun

    (tmp_path / "stuff").mkdir()
    _run(tmp_path / "trl-s0", "trl", 0, [0.1, 0.2])
    _run(tmp_path / "verl-s1", "verl", 1, [0.1, 0.2])
    args = [a.replace("{ws}", str(tmp_path)) for a in args] + ["--out", str(tmp_path / "new")]
    if "--seed-design" in args:
        args.insert(2, str(tmp_path / "verl-s1"))
    before = folder_digest(tmp_path)
    code, _, err = run_twinrun(["compare", *args], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and names in err and "fix" in err, err
    assert folder_digest(tmp_path) == before and not (tmp_path / "new").exists()


@pytest.mark.slow  # ~100 planted draws through the real verdict (the bench has 400 per case: docs/measured.md)
def test_seeded_rates_on_planted_curves_with_the_controls_noise() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("training_bench", REPO / "bench" / "training_verdict.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rng = np.random.default_rng(11)
    noise = bench.measure_noise()
    assert round(float(noise["reward_mean"]["run_sd"]), 3) == 0.203  # the controls' own noise, as measured.md says
    same = bench.same_truth(rng, noise, 60, 3, 8, True)
    assert same["any metric"] <= 0.10  # family-wise 5%: at most 6 of 60 (bench: 2.2% of 400)
    fall = bench.fall_power(rng, noise, 40, 6, 0.5, 8)
    assert fall["power"] >= 0.85 and fall["first_step_median"] <= 6  # bench: 100%, median step 5
