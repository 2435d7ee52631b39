"""bench/learning.py's rise statistic as rates over seeded draws with known truth (issue 17)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _learning():
    spec = importlib.util.spec_from_file_location("learning_bench", ROOT / "bench" / "learning.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rise_claims_rarely_under_a_flat_truth_and_usually_under_a_rise():
    rise = _learning().rise
    rng = np.random.default_rng(0)
    draws = 400
    # 20 steps of 8 binary outcomes each, r_task's shape in `make learn`
    flat = sum(rise(list(rng.binomial(8, 0.3, 20) / 8), 5)["rises"] for _ in range(draws)) / draws
    up = sum(rise(list(rng.binomial(8, np.linspace(0.2, 0.7, 20)) / 8), 5)["rises"] for _ in range(draws)) / draws
    down = sum(rise(list(rng.binomial(8, np.linspace(0.6, 0.2, 20)) / 8), 5)["rises"] for _ in range(draws)) / draws
    assert flat <= 0.05 and up >= 0.8 and down == 0.0, (flat, up, down)
    r = rise([0.0] * 5 + [0.5] * 5, 5)
    assert r["rise"] == 0.5 and r["ci"] == [0.5, 0.5] and r["rises"]


def test_rise_with_a_short_early_window_keeps_its_error_rate_and_sees_an_early_jump():
    """`make learn`'s default windows: the warmup steps + 1 (4) against the last half (15 of 30 steps). A curve
    that jumps right after warmup, as both backends' did, is seen; a flat one rarely; the window sizes count."""
    rise = _learning().rise
    rng = np.random.default_rng(1)
    draws = 400
    jump = np.r_[np.full(4, 0.15), np.full(26, 0.45)]  # 32 positions a step, r_task's shape in `make learn`
    flat = sum(rise(list(rng.binomial(32, 0.3, 30) / 32), 4, 15)["rises"] for _ in range(draws)) / draws
    up = sum(rise(list(rng.binomial(32, jump) / 32), 4, 15)["rises"] for _ in range(draws)) / draws
    assert flat <= 0.05 and up >= 0.8, (flat, up)
    r = rise([0.0, 0.0, 1.0, 1.0, 1.0, 1.0], 2, 3)
    assert (r["early"], r["late"], r["rise"], r["rises"]) == (0.0, 1.0, 1.0, True)


def test_held_out_rise_pairs_the_first_and_last_checkpoint_on_the_same_games(tmp_path):
    """Hand cases: games only the later checkpoint won count for the rise, games only the earlier one won against
    it, unmeasured games and games missing from either arm are left out, and the middle checkpoint plays no part."""
    import json

    def arm(step: int, outcomes: str) -> None:
        (tmp_path / "arms").mkdir(exist_ok=True)
        code = {"1": "success", "0": "failure", "u": "unmeasured"}
        rows = [{"kind": "eval", "checkpoint_step": step, "game_index": i, "outcome": code[o]}
                for i, o in enumerate(outcomes)]
        (tmp_path / "arms" / f"trl@{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    held_out_rise = _learning().held_out_rise
    assert held_out_rise(tmp_path, "trl") is None
    arm(10, "0000000000" + "1u")
    arm(20, "0000000000" + "00")  # the middle checkpoint is not compared
    arm(30, "1111111110" + "0u1")  # 9 won only later; game 10 lost later; game 11 unmeasured; 12 not in step 10
    h = held_out_rise(tmp_path, "trl")
    assert (h["first"], h["last"], h["games"], h["wins"], h["losses"]) == (10, 30, 11, 9, 1)
    assert h["rises"] and abs(h["p"] - 0.021484375) < 1e-12  # binomial: 2 x P(X <= 1 | 10, 1/2)
    arm(30, "1111000000" + "0u")  # 4 won later, 1 lost: not beyond noise
    h = held_out_rise(tmp_path, "trl")
    assert (h["wins"], h["losses"], h["rises"]) == (4, 1, False)
    arm(30, "0000000000" + "0u")  # fell: never a rise
    assert held_out_rise(tmp_path, "trl")["rises"] is False
    # against the warm start (step 0, swept elsewhere on the same games): the first swept checkpoint plays no part
    arm(30, "1111111111" + "0u")
    start = tmp_path / "ws" / "warm_start@0.jsonl"
    start.parent.mkdir()
    start.write_text("".join(json.dumps({"kind": "eval", "checkpoint_step": 0, "game_index": i, "outcome": "failure"})
                             + "\n" for i in range(12)))
    h = held_out_rise(tmp_path, "trl", start)
    assert (h["first"], h["last"], h["wins"], h["losses"], h["rises"]) == (0, 30, 10, 0, True)
    replicate = {"kind": "eval", "checkpoint_step": 40, "game_index": 0, "outcome": "success"}
    (tmp_path / "arms" / "trl@40#r1.jsonl").write_text(json.dumps(replicate) + "\n")  # other executor seeds
    assert held_out_rise(tmp_path, "trl", start)["last"] == 30


def test_the_learning_arm_file_is_the_smoke_arm_with_the_learning_settings_of_issue_17():
    """experiments/learn-cpu.yaml replaced a list of --set overrides of the smoke arm (issue 40): it must train
    exactly what those overrides trained (the same spec field by field, name and step count aside), so `make learn`
    stays comparable with its earlier numbers."""
    from twinrun.core.spec import load_spec

    old_sets = ["batch.rollouts_per_group=8", "optimizer.lr=5.0e-4", "optimizer.warmup_steps=3",
                "sampling.temperature=0.7", "executor.expert_prob=0.2", "executor.skill_effect=0.8",
                "sweep.streams=1", "executor.self_judge_error=0", "judge.min_steps=2", "judge.min_body_words=0",
                "steps=8", "checkpoint_every=1", "name=learn-cpu"]
    old = load_spec(ROOT / "experiments" / "smoke-cpu.yaml", old_sets)
    new = load_spec(ROOT / "experiments" / "learn-cpu.yaml")
    assert new.model_dump() == old.model_dump()
    assert _learning().SPEC == ROOT / "experiments" / "learn-cpu.yaml"
