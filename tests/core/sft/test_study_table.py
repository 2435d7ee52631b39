"""The study's table pieces (issue 15 items 6, 8): the re-evaluation-noise flag as rates over seeded draws with
known truth, and the labelling of SFT / ROSE run folders into method / epoch / round rows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from twinrun.core.sft.agent_eval.runs import run_checkpoints
from twinrun.core.sft.agent_eval.stats import ArmScores, compare_arms, summarize_arm, within_noise
from twinrun.core.errors import TwinrunError

V, P = 200, 4  # the study's 200 test variations, 4 passes


def _arm(name, rng, p_success):
    """Scores of an arm whose variation v succeeds with probability p_success[v] on every pass (100 or 0)."""
    scores = np.where(rng.random((P, V)) < p_success[None, :], 100.0, 0.0)
    return ArmScores(name, scores, np.zeros(P), np.full(P, 10.0 * V), 0, np.zeros(P))


def _within_rate(delta, draws=60):
    hits = 0
    for seed in range(draws):
        rng = np.random.default_rng(seed)
        base = rng.uniform(0.0, 0.4, size=V)  # per-variation difficulty, shared by both arms (paired)
        a, b = _arm("a", rng, base), _arm("b", rng, np.clip(base + delta, 0, 1))
        c = compare_arms(a, b, n_boot=200, seed=seed)
        hits += within_noise(summarize_arm(a), summarize_arm(b), c)
    return hits / draws


def test_same_checkpoint_is_within_noise_and_a_large_gap_is_not():
    """Equal truth: 'within noise' in nearly every draw (the CI or the pass-to-pass spread covers it); a true gap of
    15 points (the size of a real method difference in the study's table) is flagged in nearly every draw."""
    assert _within_rate(0.0) >= 0.9
    assert _within_rate(0.15) <= 0.05


def _touch_ckpt(path):
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")


def test_sft_and_rose_runs_are_labelled_by_epoch_and_round(tmp_path):
    sft = tmp_path / "sft-trl"
    (sft).mkdir()
    (sft / "spec.yaml").write_text("name: sft-sciworld-qwen3-1.7b\n")
    (sft / "plan.json").write_text(json.dumps({"backend": "trl", "schedule": {"steps_per_epoch": 64}}))
    for step in (64, 128, 192):
        _touch_ckpt(sft / "checkpoints" / f"step-{step:06d}")
    cks = run_checkpoints(sft)
    assert [(c.method, c.stage) for c in cks] == [("sft-sciworld-qwen3-1.7b (trl)", f"epoch {e}") for e in (1, 2, 3)]

    rose = tmp_path / "rose-verl"
    rose.mkdir()
    (rose / "spec.yaml").write_text("name: sft-sciworld-qwen3-1.7b\n")
    (rose / "rose.json").write_text(json.dumps({"backend": "verl"}))
    for r, done in ((1, True), (2, True), (3, False)):  # round 3 unfinished: not evaluated
        rd = rose / "rounds" / f"round-{r:02d}"
        for step in (1, 2):
            _touch_ckpt(rd / "sft" / "checkpoints" / f"step-{step:06d}")
        if done:
            (rd / "done.json").write_text("{}")
    cks = run_checkpoints(rose)
    assert [c.stage for c in cks] == ["round 1", "round 2"] and all(c.path.name == "step-000002" for c in cks)
    assert cks[0].method == "sft-sciworld-qwen3-1.7b (verl)"
    with pytest.raises(TwinrunError, match="not an SFT or ROSE run folder"):
        run_checkpoints(tmp_path)
