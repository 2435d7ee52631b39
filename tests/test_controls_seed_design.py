"""The seed design on the committed controls (issue 50; docs/compare.md, "Seeds pair"): auto pairs seed i of TRL
and verl (their rows share a start and the sweep's plans), and the slow-rate positive control that the nested test
lost is read within seed. Recomputed from experiments/controls/data/rows.jsonl.gz through compare's own function."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _analyse():
    spec = importlib.util.spec_from_file_location("controls_analyse_sd", ROOT / "experiments" / "controls" / "analyse.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_auto_pairs_the_controls_seeds_and_reads_them_within_seed(tmp_path: Path) -> None:
    from twinrun.core.compare import CompareSettings, compare

    an = _analyse()
    want = {"negative": (0.79, 0.90), "positive": (0.018, 0.22)}  # (paired p, nested p), 2 significant digits
    for name, (paired_p, nested_p) in want.items():
        view = an.control_view(name, tmp_path / name)
        groups = tuple((run, fw, seed) for run, (fw, seed) in an.CONTROLS[name].get("groups", {}).items())
        auto = compare([str(view)], "baseline", CompareSettings(groups=groups, n_boot=500))
        (c,) = auto["frameworks"]["comparisons"]
        assert c["seed_design"]["design"] == "paired", c["seed_design"]
        assert [p[2] for p in c["seed_design"]["pairs"]] == [0, 1, 2]
        assert c["anova"]["p_value"] == pytest.approx(paired_p, abs=0.005)
        nested = compare([str(view)], "baseline", CompareSettings(groups=groups, n_boot=500,
                                                                  seed_design="independent"))
        nested_anova = nested["frameworks"]["comparisons"][0]["anova"]
        assert nested_anova["p_value"] == pytest.approx(nested_p, abs=0.005)
        if name == "negative":  # the nested F sits in the lower tail: the negative control cannot fail
            assert 1 - nested_anova["p_uncorrected"] == pytest.approx(0.008, abs=0.0005)
