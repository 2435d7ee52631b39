"""Seeds as blocks (issue 50): the paired profile test by hand, the pairing rule, r's interval around its estimate."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from twinrun.core.compare import frameworks as fw
from twinrun.core.compare import shape
from twinrun.core.compare.curves import Curve
from twinrun.core.compare.model import CompareError, CompareSettings


def test_paired_profile_anova_by_hand() -> None:
    a = np.array([[0.0, 1.0, 0.0], [0.0, 2.0, 1.0]])
    b = np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 2.0]])
    res = shape.paired_profile_anova(a, b)
    assert res is not None
    # centred: a1 [-1/3, 2/3, -1/3], a2 [-1, 1, 0]; b1 [2/3, -1/3, -1/3], b2 [0, -1, 1]
    # d1 = [-1, 1, 0], d2 = [-1, 2, -1]; dbar = [-1, 1.5, -0.5]
    # SS_checkpoint = 2 (1 + 2.25 + 0.25) = 7 on 2 df; SS_error = 4 x 0.25 = 1 on (2 - 1)(3 - 1) = 2 df; F = 7
    assert (res["df1"], res["df2"]) == (2, 2)
    assert res["statistic"] == pytest.approx(7.0)
    assert res["p_uncorrected"] == pytest.approx(stats.f.sf(7.0, 2, 2))
    # d's residuals are rank 1 (n = 2): Greenhouse-Geisser at its floor 1 / (K - 1)
    assert res["epsilons"]["greenhouse_geisser"] == pytest.approx(0.5)
    e = res["epsilon"]
    assert e == pytest.approx((res["epsilons"]["greenhouse_geisser"] + res["epsilons"]["huynh_feldt"]) / 2)
    assert res["p_value"] == pytest.approx(stats.f.sf(7.0, 2 * e, 2 * e))
    # pair r: corr(a1c, b1c) = (-1/3) / (6/9) = -0.5; corr(a2c, b2c) = -1 / 2 = -0.5
    assert res["pair_r"] == pytest.approx([-0.5, -0.5])
    assert res["pair_r_mean"] == pytest.approx(-0.5)
    assert res["diff_sd"] == pytest.approx(np.sqrt(0.5))
    assert res["seed_sd"] == pytest.approx(0.5)
    assert (res["design"], res["n_pairs"]) == ("paired", 2)


def test_paired_test_removes_a_shared_seed_profile() -> None:
    """A seed's own profile, shared by both groups' runs, leaves the paired error term and stays in the nested one."""
    rng = np.random.default_rng(1)
    seed_profile = rng.normal(0, 0.2, size=(4, 6)) * np.linspace(1, 0, 6)  # a start offset that fades
    rise = np.r_[0, 0, 0, 0.02, 0.04, 0.06]
    a = seed_profile + rise + rng.normal(0, 0.01, size=(4, 6))
    b = seed_profile + rng.normal(0, 0.01, size=(4, 6))
    paired, nested = shape.paired_profile_anova(a, b), shape.profile_anova({"a": a, "b": b})
    assert paired is not None and nested is not None
    assert paired["p_value"] < 0.01 < nested["p_value"]
    assert paired["pair_r_mean"] > 0.9


def _curve(run: str, fwk: str, seed: int | None, start: str | None = None, start_hash: str | None = None) -> Curve:
    return Curve(run, np.arange(1.0, 4.0), np.arange(3), np.zeros(3), np.zeros((2, 3)), 1.0, framework=fwk,
                 seed=seed, start=start, start_hash=start_hash)


def test_seed_pairing_reads_the_starts_weights_not_only_its_name() -> None:
    """Two runs at one seed whose starts share a name but not their weights (a warm start rebuilt on another
    machine) do not pair under auto; the same weights under two names do; a hash on one side only falls back to
    the name."""
    ca = [_curve("trl-s0", "trl", 0, "warm", "aaaa"), _curve("trl-s1", "trl", 1, "warm", "aaaa")]
    rebuilt = [_curve("verl-s0", "verl", 0, "warm", "bbbb"), _curve("verl-s1", "verl", 1, "warm", "aaaa")]
    res = fw.seed_pairing(ca, rebuilt, "auto", plans=(True, "shared"))
    assert res["design"] == "independent" and res["pairs"] == [], res
    assert "trl-s0 starts from warm (weights aaaa), verl-s0 from warm (weights bbbb)" in res["why"]
    assert "weights bbbb" in fw.seed_pairing(ca, rebuilt, "paired")["why"]  # forced: paired, saying why not
    renamed = [_curve("verl-s0", "verl", 0, "warm-copy", "aaaa"), _curve("verl-s1", "verl", 1, "warm-copy", "aaaa")]
    res = fw.seed_pairing(ca, renamed, "auto", plans=(True, "shared"))
    assert res["design"] == "paired" and "the same start (by its weights' hash)" in res["why"]
    one_side = [_curve("verl-s0", "verl", 0, "warm"), _curve("verl-s1", "verl", 1, "warm")]
    res = fw.seed_pairing(ca, one_side, "auto", plans=(True, "shared"))
    assert res["design"] == "paired" and "by name: not recorded by hash" in res["why"]


def test_seed_pairing_auto_pairs_matching_seeds_and_starts() -> None:
    ca = [_curve("trl-s1", "trl", 1, "w"), _curve("trl-s0", "trl", 0, "w")]
    cb = [_curve("verl-s0", "verl", 0, "w"), _curve("verl-s1", "verl", 1, "w")]
    res = fw.seed_pairing(ca, cb, "auto", plans=(True, "shared"))
    assert res["design"] == "paired"
    assert res["pairs"] == [["trl-s0", "verl-s0", 0], ["trl-s1", "verl-s1", 1]]
    assert "the same start" in res["why"] and res["unpaired"] == []
    # no start recorded (older sweeps): pairs on the seed alone and says so
    res = fw.seed_pairing([_curve("a0", "a", 0), _curve("a1", "a", 1)], [_curve("b0", "b", 0), _curve("b1", "b", 1)],
                          "auto")
    assert res["design"] == "paired" and "start not recorded" in res["why"]


def test_seed_pairing_auto_keeps_what_does_not_pair_independent() -> None:
    ca = [_curve("trl-s0", "trl", 0, "w1"), _curve("trl-s1", "trl", 1, "w1")]
    other_start = [_curve("verl-s0", "verl", 0, "w2"), _curve("verl-s1", "verl", 1, "w2")]
    res = fw.seed_pairing(ca, other_start, "auto")
    assert res["design"] == "independent" and "starts from w1" in res["why"]
    unmatched = [_curve("verl-s10", "verl", 10, "w1"), _curve("verl-s11", "verl", 11, "w1")]
    res = fw.seed_pairing(ca, unmatched, "auto")
    assert res["design"] == "independent" and "no partner" in res["why"]
    assert res["unpaired"] == ["trl-s0", "trl-s1", "verl-s10", "verl-s11"]
    same = [_curve("verl-s0", "verl", 0, "w1"), _curve("verl-s1", "verl", 1, "w1")]
    res = fw.seed_pairing(ca, same, "auto", plans=(False, "sweep.json has no stream plan for stream(s) [1]"))
    assert res["design"] == "independent" and "stream plans not shared" in res["why"]
    assert fw.seed_pairing(ca, same, "independent")["design"] == "independent"
    twice = [_curve("verl-s0", "verl", 0), _curve("verl-s0b", "verl", 0)]
    assert "appears twice" in fw.seed_pairing(ca, twice, "auto")["why"]


def test_forcing_paired_with_unmatched_seeds_is_one_line_error() -> None:
    ca = [_curve("trl-s0", "trl", 0), _curve("trl-s1", "trl", 1)]
    cb = [_curve("verl-s10", "verl", 10), _curve("verl-s1", "verl", 1)]
    with pytest.raises(CompareError, match=r"--seed-design paired: runs trl-s0 \(seed 0\), verl-s10 \(seed 10\) have "
                                           r"no partner.*fix: --group RUN=FRAMEWORK@SEED"):
        fw.seed_pairing(ca, cb, "paired")
    with pytest.raises(CompareError, match="seed_design"):
        CompareSettings(seed_design="blocked")


def test_r_interval_contains_its_estimate() -> None:
    # attenuated draws (their centre below r): a percentile interval excludes r, the reflected part does not
    rng = np.random.default_rng(0)
    draws = np.tanh(rng.normal(np.arctanh(0.80), 0.3, size=4000))
    lo, hi = fw.r_interval(0.972, draws, 0.95)
    assert lo < 0.972 < hi
    assert np.quantile(draws, 0.995) < 0.972
    # the spread on z is the draws' own, at the calibrated tails (0.5% for a 95% interval), reflected about z(r)
    z = np.arctanh(draws)
    q = np.quantile(z, [0.005, 0.5, 0.995])
    assert np.arctanh(hi) - np.arctanh(0.972) == pytest.approx(q[1] - q[0])


def test_r_interval_covers_the_true_r_of_planted_controls() -> None:
    """Fast tier, seeded: 100 planted draws each of independent seeds at 3 and 6 per group with positive-6's later
    rise (bench/seed_design.py, the controls' noise), read by compare's framework verdict. Its 95% r interval must
    hold the true r (of the expected mean curves) in >= 88% of the 200 (the bench: 91.2% and 94.8% at 250 draws,
    docs/measured.md). Red with the old interval (R_TAIL_SHRINK = 1: 164 of 200 here; the bench 79.2% and 83.6%)."""
    sd = _bench()
    rng = np.random.default_rng(50)
    truth = sd.true_r("rise", draws=20_000)
    hit = 0
    for n in (3, 6):
        for i in range(100):
            a, b = sd.planted(rng, n, paired=False, truth="rise")
            lo, hi = sd.read(a, b, "independent", n_boot=2000, seed=i)["pearson_ci"]
            hit += lo <= truth <= hi
    assert hit / 200 >= 0.88, hit


def _bench():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "bench" / "seed_design.py"
    spec = importlib.util.spec_from_file_location("seed_design_bench", path)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def _claims(sd, rng: np.random.Generator, n_draws: int, truth: str, designs: tuple[str, ...]) -> dict[str, int]:
    from twinrun.core.compare.verdict import CO_MOVE, DIFFER

    hits = dict.fromkeys(designs, 0)
    for i in range(n_draws):
        a, b = sd.planted(rng, 6, paired=True, truth=truth)
        for design in designs:
            hits[design] += sd.read(a, b, design, n_boot=100, seed=i)["verdict"] in (DIFFER, CO_MOVE)
    return hits


def test_paired_seeds_find_a_later_rise_the_split_plot_misses() -> None:
    """Fast tier: 30 planted draws (bench/seed_design.py) of seeds that share their start profile, positive-6's later
    rise at 6 seeds. auto reads them within seed; red if the framework verdict stops pairing."""
    hits = _claims(_bench(), np.random.default_rng(7), 30, "rise", ("auto", "independent"))
    assert hits["auto"] >= 24 and hits["auto"] - hits["independent"] >= 4, hits


@pytest.mark.slow
def test_paired_seeds_are_read_within_seed_seeded_rates() -> None:
    """Planted controls with the real structure (bench/seed_design.py): seeds that share their start profile. auto
    reads them within seed and finds positive-6's later rise far more often than the split-plot does; on flat truth
    it stays under the 7% bound. Goes red if the framework verdict stops pairing (auto then reads like independent)."""
    sd = _bench()
    rng = np.random.default_rng(2026)
    n_rise, n_flat = 60, 100
    hits = _claims(sd, rng, n_rise, "rise", ("auto", "independent"))
    false = _claims(sd, rng, n_flat, "flat", ("auto",))["auto"]
    assert hits["auto"] / n_rise >= 0.8, hits
    assert hits["auto"] - hits["independent"] >= 0.1 * n_rise, hits
    assert false / n_flat <= 0.07, false


def test_compare_reads_run_start_from_sweep_json(tmp_path) -> None:
    """auto pairs on a sweep's recorded starts: one start pairs seed i; two different starts keep seeds nested."""
    import json
    from pathlib import Path

    from twinrun.core.compare import compare
    from twinrun.core.compare.report import render_comparison
    from twinrun.core.compare.synthetic import synthetic_game_table, write_sweep

    shape_ = [0.0, 0.8, 0.3, -0.5, 0.6]
    runs = {f"{f}-s{s}": [v + 0.1 * s for v in shape_] for f in ("trl", "verl") for s in range(2)}
    table = synthetic_game_table(runs, n_games=60, seed=3)
    for arm in table.arms:
        if arm.run is not None:
            arm.framework, arm.seed = arm.run.split("-s")[0], int(arm.run.split("-s")[1])
    folder = write_sweep(table, tmp_path / "sw")
    hashes = {"trl": "1111", "verl": "2222"}  # one name, other weights: the rebuilt start of stop 56's (c)
    for starts, by_hash, want in (({"trl": "warm-a", "verl": "warm-a"}, False, "paired"),
                                  ({"trl": "warm-a", "verl": "warm-b"}, False, "independent"),
                                  ({"trl": "warm-a", "verl": "warm-a"}, True, "independent")):
        arms = [{"arm": a.name, "role": a.role, "run": a.run, "run_start": starts[a.framework] if a.framework else None,
                 "run_start_hash": hashes[a.framework] if a.framework and by_hash else None} for a in table.arms]
        (Path(folder) / "sweep.json").write_text(json.dumps({"sweep_id": table.sweep_id or "synthetic", "arms": arms}))
        res = compare([str(folder)], "baseline", CompareSettings(n_boot=200))
        sd = res["frameworks"]["comparisons"][0]["seed_design"]
        assert sd["design"] == want, sd
        assert ("the same start" in sd["why"]) if want == "paired" else (
            ("weights 2222" if by_hash else "warm-b") in sd["why"])
        text = render_comparison(res, {})
        line = "Seeds: paired (tested within seed" if want == "paired" else "Seeds: independent (split-plot"
        assert line in text and ("trl-s0~verl-s0 (seed 0, r " in text) == (want == "paired")
