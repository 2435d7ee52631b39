"""plots and report: PNGs are written (real matplotlib Agg), report.md carries the tables, verdicts and figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twinrun.core.compare import plots
from twinrun.core.compare import CompareSettings, compare_games, synthetic_game_table
from twinrun.core.records import JsonlWriter, StepMetrics, provenance
from twinrun.core.compare.report import write_report

PNG = b"\x89PNG\r\n\x1a\n"
SHAPE = [0.0, 1.0, 0.3, -0.6, 0.6]


@pytest.fixture(scope="module")
def result() -> dict:
    table = synthetic_game_table({"trl": SHAPE, "verl": SHAPE}, seed=0, unmeasured_share=0.15)
    return compare_games(table, "baseline", CompareSettings(n_boot=500))


def _metrics(path: Path, backend: str, steps: int, kl: bool) -> Path:
    with JsonlWriter(path, fsync=False) as w:
        for s in range(1, steps + 1):
            w.write(StepMetrics(
                step=s, backend=backend, reward_mean=0.1 * s, reward_std=0.05,
                reward_terms={"r_task": 0.05 * s, "r_fc": 0.9, "r_cnt": None, "r_comp": 0.3},
                positions_measured_mean=8.5, curation_rollouts=32, executor_episodes=320, executor_calls=3000 + s,
                unmeasured_episodes=s % 2, optimizer_updates=1, entropy=1.0 / s, kl=0.01 * s if kl else None,
                grad_norm=0.5, provenance=provenance(backend=backend),
            ))
    with open(path, "a") as f:  # a torn last line (crash mid-write) is skipped by the reader
        f.write('{"kind": "step", "step": 99')
    return path


def test_lift_curves_png(result: dict, tmp_path: Path) -> None:
    p = plots.plot_lift_curves(result, tmp_path / "lift.png")
    assert p.read_bytes()[:8] == PNG and p.stat().st_size > 10_000


def test_training_dynamics_of_two_backends(tmp_path: Path) -> None:
    trl = _metrics(tmp_path / "trl.jsonl", "trl", 6, kl=False)
    verl = _metrics(tmp_path / "verl.jsonl", "verl", 6, kl=True)
    assert [r["step"] for r in plots.read_metrics(trl)] == [1, 2, 3, 4, 5, 6]
    p = plots.plot_training_dynamics({"trl": trl, "verl": verl}, tmp_path / "dyn.png")
    assert p.read_bytes()[:8] == PNG


def test_report_has_tables_verdicts_flags_and_figures(result: dict, tmp_path: Path) -> None:
    trl = _metrics(tmp_path / "trl.jsonl", "trl", 4, kl=True)
    path = write_report(result, tmp_path / "out", metrics={"trl": trl, "missing": tmp_path / "nope.jsonl"},
                        title="smoke")
    text = path.read_text()
    assert text.startswith("# smoke")
    for needle in ("## Verdicts", "trl vs verl", "## Runs", "## Arms vs baseline", "Holm", "Cochran",
                   "## Flags", "unmeasured", "figures/lift_curves.png", "figures/training_dynamics.png",
                   "figures/peak_distribution.png"):
        assert needle in text, needle
    for fig in ("lift_curves.png", "training_dynamics.png", "peak_distribution.png"):
        assert (tmp_path / "out" / "figures" / fig).read_bytes()[:8] == PNG
    again = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert again["pairs"][0]["verdict"] == result["pairs"][0]["verdict"]
    # a report can be re-rendered from the saved compare.json alone
    assert write_report(tmp_path / "out" / "compare.json", tmp_path / "out2").exists()


def test_lift_curves_tick_the_checkpoint_steps(result: dict, tmp_path: Path, monkeypatch) -> None:
    """The x axis shows the checkpoint steps, not fractional training steps (issue 17)."""
    saved = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: saved.append(fig) or Path(path))
    plots.plot_lift_curves(result, tmp_path / "lift.png")
    steps = sorted({int(x) for cur in result["runs"].values() for x in cur["checkpoints"]})
    ticks = list(saved[0].axes[0].get_xticks())
    assert ticks == steps and all(float(t).is_integer() for t in ticks)


def test_report_states_a_stand_in_in_one_line_and_its_rule_under_methods(result: dict, tmp_path: Path) -> None:
    """Issue 52: the first screen says in one line that the executor is a stand-in and links its rule, which is
    stated in full under Methods and settings, in the heading the link names."""
    from twinrun.core.compare.report_html import slug
    from twinrun.core.executors.skill_effect import STAND_IN_HEADING, stand_in_line, stand_in_note

    note = stand_in_note(0.4, 0.6)
    line = stand_in_line(0.6)
    text = write_report(result, tmp_path / "r", notes=[line], methods=[f"### {STAND_IN_HEADING}", note],
                        title="t").read_text()
    first = text.split("\n## ", 1)[0]
    assert line in first and note not in first and "0.4 + 0.6 x relevance" in note
    methods = text.split("## Methods and settings", 1)[1].split("\n## ", 1)[0]
    assert f"### {STAND_IN_HEADING}\n\n{note}" in methods
    assert f"(#{slug(STAND_IN_HEADING, {})})" in line
    assert "skill-blind" in stand_in_note(0.6, 0.0) and "skill-blind" in stand_in_line(0.0)


@pytest.fixture(scope="module")
def seeded() -> dict:
    """Two frameworks x 3 seeds: the framework comparison has curves (>= 2 seeds each)."""
    import numpy as np

    rng = np.random.default_rng(3)
    shapes = {f"{fw}-s{s}": list(np.asarray(SHAPE) * sign + rng.normal(0, 0.3, len(SHAPE)))
              for fw, sign in (("trl", 1.0), ("verl", -1.0)) for s in range(3)}
    table = synthetic_game_table(shapes, seed=3)
    for arm in table.arms:
        if arm.run is not None:
            arm.framework, arm.seed = arm.run.split("-s")[0], int(arm.run.split("-s")[1])
    # seeds drawn independently per framework: read as nested (the split-plot), not paired by seed number
    return compare_games(table, "baseline", CompareSettings(n_boot=300, seed_design="independent"))


def test_framework_band_is_the_centred_difference_of_the_means(seeded: dict) -> None:
    """compare.json's framework equivalence carries what its verdict decides on: the difference of the centred mean
    curves and its pointwise band (as a run pair's does), so a plot or a reader need not recompute it."""
    import numpy as np

    (c,) = seeded["frameworks"]["comparisons"]
    la, lb = np.asarray(c["mean_curve_a"]), np.asarray(c["mean_curve_b"])
    eq = c["equivalence"]
    assert eq["difference"] == pytest.approx(list((la - la.mean()) - (lb - lb.mean())))
    assert len(eq["band"]) == len(c["checkpoints"])
    assert all(lo < d < hi for d, (lo, hi) in zip(eq["difference"], eq["band"]))
    assert max(max(abs(lo), abs(hi)) for lo, hi in eq["band"]) == pytest.approx(eq["half_width_max"])


def test_framework_curves_draw_the_means_and_the_band(seeded: dict, tmp_path: Path, monkeypatch) -> None:
    (c,) = plots.framework_comparisons(seeded)
    p = plots.plot_framework_curves(seeded, tmp_path / "fw.png")
    assert p.read_bytes()[:8] == PNG
    saved = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: saved.append(fig) or Path(path))
    plots.plot_framework_curves(seeded, tmp_path / "fw.png")
    left, right = saved[0].axes
    thick = [ln for ln in left.get_lines() if ln.get_linewidth() > 2]
    assert [list(ln.get_ydata()) for ln in thick] == [
        pytest.approx([100 * v for v in c["mean_curve_a"]]), pytest.approx([100 * v for v in c["mean_curve_b"]])]
    seeds = [ln for ln in left.get_lines() if ln.get_linewidth() < 1 and len(ln.get_ydata()) == len(c["checkpoints"])]
    assert len(seeds) == 6  # each seed's own curve
    diff = next(ln for ln in right.get_lines() if ln.get_color() == "black")
    assert list(diff.get_ydata()) == pytest.approx([100 * v for v in c["equivalence"]["difference"]])
    assert c["anova"]["p_value"] < 0.001 and right.get_title().endswith("df, p < 0.001")  # never "p 0.000"


def test_report_shows_framework_curves_only_with_seeds(result: dict, seeded: dict, tmp_path: Path) -> None:
    text = write_report(seeded, tmp_path / "seeded").read_text()
    assert "figures/framework_curves.png" in text
    assert (tmp_path / "seeded" / "figures" / "framework_curves.png").read_bytes()[:8] == PNG
    text = write_report(result, tmp_path / "single").read_text()  # one run per framework: nothing to draw
    assert "framework_curves.png" not in text and not (tmp_path / "single" / "figures" / "framework_curves.png").exists()


def test_an_undefined_r_is_reported_without_an_interval() -> None:
    """A flat curve's r is undefined; the interval of its bootstrap draws (rounding noise) must not be printed beside
    it, where it reads as a measured r of 0 (the demo's table showed "– [-0.00, -0.00]")."""
    from twinrun.core.compare.report import _estimate_ci

    assert _estimate_ci(None, [-0.0, -0.0]) == "–" and _estimate_ci(float("nan"), [0.1, 0.2]) == "–"
    assert _estimate_ci(0.5, [0.1, 0.9]) == "0.50 [0.10, 0.90]"
