"""Recorded rollouts as replay batches (core.replay) and the update-difference math (parity.weights): pure, fast."""

from __future__ import annotations

import json

import numpy as np
import pytest

from twinrun.core.advantages import compute_advantages
from twinrun.core.errors import TwinrunError
from twinrun.core.records import SequenceTokens
from twinrun.core.advantages.replay import load_replay, merge_ratio_stats, ratio_stats
from twinrun.core.spec import load_spec
from twinrun.app.parity.weights import tensor_group, update_difference


def _row(step, g, i, reward, *, seq=True, valid=True):
    row = {"kind": "curation_rollout", "step": step, "group_index": g, "rollout_index": i, "group_id": f"s{step}g{g}",
           "reward": {"total": reward}, "positions": [{"no_valid_call": not valid}]}
    if seq:
        row["sequences"] = [{"prompt_ids": [1, 2, step, g], "completion_ids": [5, 6, 7, i],
                             "completion_mask": [1, 0, 1, 1]}]
    return row


@pytest.fixture
def spec(smoke_spec_path):
    return load_spec(smoke_spec_path, ["curator.context=accumulated"])  # 2 groups x 2 rollouts per step


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_rows_are_group_contiguous_with_core_advantages(tmp_path, spec):
    rng = np.random.default_rng(0)
    rows = [_row(s, g, i, float(rng.normal())) for s in range(2) for g in range(2) for i in range(2)]
    rng.shuffle(rows)  # a file's row order is completion order, not batch order
    steps = load_replay(_write(tmp_path / "r.jsonl", rows), spec)
    assert [s.step for s in steps] == [0, 1]
    for s in steps:
        assert s.group_ids == [f"s{s.step}g0"] * 2 + [f"s{s.step}g1"] * 2
        assert [r.rollout_index for r in s.rows] == [0, 1, 0, 1]
        want = compute_advantages(spec.algorithm, np.array([r.reward for r in s.rows]),
                                  np.array(s.group_ids, dtype=object))
        assert np.allclose([r.advantage for r in s.rows], want)
        assert s.rows[0].completion_mask == (1, 0, 1, 1) and s.rows[0].loss_tokens == 3


def test_unmeasured_rollout_gets_zero_advantage(tmp_path, spec):
    rows = [_row(0, g, i, 1.0 + i) for g in range(2) for i in range(2)]
    rows[0]["reward"]["total"] = None
    (step,) = load_replay(_write(tmp_path / "r.jsonl", rows), spec)
    assert step.rows[0].reward is None and step.rows[0].advantage == 0.0


@pytest.mark.parametrize("mutate, match", [
    (lambda rows: [r.pop("sequences") for r in rows], "no 'sequences'"),
    (lambda rows: rows.pop(), "holds 3 rollouts"),
    (lambda rows: rows[0]["sequences"][0].update(completion_mask=[1, 1]), "malformed"),
])
def test_files_that_cannot_drive_a_replay_say_why(tmp_path, spec, mutate, match):
    rows = [_row(0, g, i, 1.0) for g in range(2) for i in range(2)]
    mutate(rows)
    with pytest.raises(TwinrunError, match=match):
        load_replay(_write(tmp_path / "r.jsonl", rows), spec)


def test_too_few_steps(tmp_path, spec):
    rows = [_row(0, g, i, 1.0) for g in range(2) for i in range(2)]
    with pytest.raises(TwinrunError, match=r"need 0\.\.2"):
        load_replay(_write(tmp_path / "r.jsonl", rows), spec, steps=3)


def test_sequence_tokens_validate():
    with pytest.raises(ValueError, match="completion_mask"):
        SequenceTokens(prompt_ids=[1], completion_ids=[2, 3], completion_mask=[1])
    with pytest.raises(ValueError, match="0/1"):
        SequenceTokens(prompt_ids=[1], completion_ids=[2], completion_mask=[2])


def test_ratio_stats_merge_equals_stats_of_union():
    rng = np.random.default_rng(1)
    a, b = rng.normal(0, 0.1, 7), rng.normal(0, 0.1, 5)
    merged, whole = merge_ratio_stats([ratio_stats(a), ratio_stats(b), ratio_stats([])]), ratio_stats(np.r_[a, b])
    assert merged["tokens"] == 12
    for k in ("ratio_mean", "ratio_min", "ratio_max", "abs_log_max"):
        assert merged[k] == pytest.approx(whole[k])


def test_update_difference_groups_and_total():
    w0 = {"model.embed_tokens.weight": np.zeros((2, 2)), "model.layers.0.self_attn.q_proj.weight": np.zeros(3),
          "model.layers.0.mlp.up_proj.weight": np.zeros(2), "model.norm.weight": np.zeros(2),
          "lm_head.weight": np.zeros((2, 2))}
    trl = {k: v + 1.0 for k, v in w0.items()}
    verl = dict(trl)
    verl["model.layers.0.mlp.up_proj.weight"] = np.array([1.0, 1.5])
    d = update_difference(w0, trl, verl, ignore=("lm_head.weight",))
    by = {g["group"]: g for g in d["groups"]}
    assert set(by) == {"embed", "layers.0.attn", "layers.0.mlp", "norm"}
    assert by["layers.0.attn"]["rel_diff"] == 0.0
    assert by["layers.0.mlp"]["rel_diff"] == pytest.approx(0.5 / np.sqrt(2))
    assert d["total"]["rel_diff"] == pytest.approx(0.5 / np.sqrt(11)) and d["total"]["params"] == 11
    with pytest.raises(TwinrunError, match="missing"):
        update_difference(w0, trl, {k: v for k, v in verl.items() if "norm" not in k})
    assert tensor_group("model.layers.1.post_attention_layernorm.weight") == "layers.1.norm"


def test_every_knob_of_the_parity_table_is_a_valid_spec_with_plan_rows(smoke_spec_path):
    from twinrun.app.parity.knobs import KNOBS, plan_status
    from twinrun.app.plan import build_plan

    names = {k["name"] for k in build_plan(load_spec(smoke_spec_path))["knobs"]}
    for knob in KNOBS:
        assert set(knob.plan_rows) <= names, knob
        status, why = plan_status(load_spec(smoke_spec_path, list(knob.sets)), knob.plan_rows)
        assert status in ("equal", "divergent") and (status == "equal") == (why == "")
    assert plan_status(load_spec(smoke_spec_path), KNOBS[0].plan_rows) == ("equal", "")


def _pp_row(step, g, i, step_rewards, *, size=3):
    """A per_position rollout: one recorded sequence per position; position p's input hash is shared by the
    group's rollouts at p = 1 (same empty repo) and differs later (GiGPO's exact_input anchors)."""
    positions = [{"index": p, "game_id": f"game{p}", "correctness": "success", "no_valid_call": False,
                  "input_digest": f"g{g}p1" if p == 1 else f"g{g}r{i}p{p}", "anchor": "x"} for p in range(1, size + 1)]
    return {"kind": "curation_rollout", "step": step, "group_index": g, "rollout_index": i, "group_id": f"s{step}g{g}",
            "reward": {"total": float(sum(step_rewards))}, "positions": positions, "anchors": ["x"] * size,
            "step_rewards": list(step_rewards),
            "sequences": [{"prompt_ids": [1, g, i, p], "completion_ids": [5, p], "completion_mask": [1, 1]}
                          for p in range(1, size + 1)]}


@pytest.fixture
def pp_rows():
    rng = np.random.default_rng(2)
    rows = [_pp_row(0, g, i, rng.normal(size=3).round(3).tolist()) for g in range(2) for i in range(2)]
    rng.shuffle(rows)
    return rows


def test_per_position_rows_in_slot_layout_with_core_row_advantages(tmp_path, smoke_spec_path, pp_rows):
    from twinrun.core.advantages.training_rows import rollout_rows, row_advantages

    spec = load_spec(smoke_spec_path, ["curator.context=per_position"])
    (step,) = load_replay(_write(tmp_path / "r.jsonl", pp_rows), spec)
    # row r*|G| + (p-1) of a group's block = (rollout r, position p): TRL's slot layout, verl's agent-loop order
    assert [(r.group_id, r.rollout_index, r.position) for r in step.rows] == [
        (f"s0g{g}", i, p) for g in range(2) for i in range(2) for p in (1, 2, 3)]
    assert all(r.prompt_ids[1:3] == (int(r.group_id[-1]), r.rollout_index) and r.prompt_ids[3] == r.position
               for r in step.rows)
    by = {(r["group_id"], r["rollout_index"]): r for r in pp_rows}
    scores = [s for g in range(2) for i in range(2) for s in rollout_rows(
        f"s0g{g}", f"s0g{g}#{i}", total=by[(f"s0g{g}", i)]["reward"]["total"],
        step_rewards=by[(f"s0g{g}", i)]["step_rewards"], anchors=["x"] * 3, position_valid=[True] * 3)]
    assert np.allclose([r.advantage for r in step.rows], row_advantages(spec.algorithm, scores))
    # outcome estimator: every row of a rollout carries the rollout's advantage
    assert all(len({r.advantage for r in step.rows[k:k + 3]}) == 1 for k in range(0, 12, 3))


def test_per_position_gigpo_gives_position_advantages(tmp_path, smoke_spec_path, pp_rows):
    grpo = load_spec(smoke_spec_path, ["curator.context=per_position"])
    gigpo = load_spec(smoke_spec_path, ["curator.context=per_position", "algorithm.estimator=gigpo",
                                        "algorithm.gigpo.anchor=exact_input"])
    path = _write(tmp_path / "r.jsonl", pp_rows)
    (a,), (b,) = load_replay(path, grpo), load_replay(path, gigpo)
    adv_a, adv_b = np.array([r.advantage for r in a.rows]), np.array([r.advantage for r in b.rows])
    assert not np.allclose(adv_a, adv_b)  # what TRL would recompute from the rewards is not what GiGPO trains on
    assert any(len({r.advantage for r in b.rows[k:k + 3]}) > 1 for k in range(0, 12, 3))


def test_shape_mismatches_are_refused(tmp_path, smoke_spec_path, pp_rows):
    acc = load_spec(smoke_spec_path, ["curator.context=accumulated"])
    with pytest.raises(TwinrunError, match="3 sequences recorded.*curator.context"):
        load_replay(_write(tmp_path / "r.jsonl", pp_rows), acc)
    with pytest.raises(TwinrunError, match="algorithm.estimator: 'gigpo'.*per_position"):
        load_replay(_write(tmp_path / "r.jsonl", pp_rows), load_spec(
            smoke_spec_path, ["curator.context=accumulated", "algorithm.estimator=gigpo"]))
