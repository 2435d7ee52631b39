"""core.context_shape (what the curator sees at a position) and core.training_rows (per_position rows' advantages):
pure functions on tiny inputs, advantages against core's own per-rollout and per-step computations."""

from __future__ import annotations

import numpy as np
import pytest

from twinrun.core.advantages import compute_advantages
from twinrun.core.curation.context_shape import HistoryTurn, fit_history, history_window, position_messages
from twinrun.core.spec import AlgorithmSpec
from twinrun.core.advantages.training_rows import TrainingRowRecord, rollout_rows, row_advantages, rows_by_key


def test_position_messages_are_the_papers_input_alone_or_a_window_before_it():
    assert position_messages("S", "chi3") == [{"role": "system", "content": "S"}, {"role": "user", "content": "chi3"}]
    h = [HistoryTurn("chi1", "t1"), HistoryTurn("chi2", "t2")]
    assert [m["content"] for m in position_messages("S", "chi3", history_window(h, 1))] == ["S", "chi2", "t2", "chi3"]
    assert [m["role"] for m in position_messages("S", "chi3", h)] == ["system", "user", "assistant", "user",
                                                                      "assistant", "user"]
    assert history_window(h, 0) == [] and history_window(h, 5) == h


def test_fit_history_drops_the_oldest_pairs_first_and_never_the_input():
    h = [HistoryTurn("a" * 10, "x"), HistoryTurn("b" * 10, "y")]
    chars = lambda msgs: sum(len(m["content"]) for m in msgs)  # noqa: E731 (a stand-in tokenizer: one per char)
    msgs, kept = fit_history("S", "c" * 5, h, measure=chars, limit=6 + 11)
    assert kept == 1 and [m["content"] for m in msgs] == ["S", "b" * 10, "y", "c" * 5]
    msgs, kept = fit_history("S", "c" * 50, h, measure=chars, limit=10)  # the input alone is over: kept whole
    assert kept == 0 and msgs[-1]["content"] == "c" * 50
    assert fit_history("S", "c", h, measure=None, limit=None)[1] == 2


def _rows(rng: np.random.Generator, groups: int = 3, n: int = 4, g: int = 3):
    out = []
    for gi in range(groups):
        for r in range(n):
            steps = rng.random(g).round(3).tolist()
            total = None if rng.random() < 0.15 else float(sum(steps))
            valid = (rng.random(g) > 0.2).tolist()
            anchors = [f"a{gi}-{p}-{rng.integers(2)}" for p in range(g)]
            out += rollout_rows(f"g{gi}", f"g{gi}#{r}", total=total, step_rewards=steps, anchors=anchors,
                                position_valid=valid)
    return out


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "rloo"])
def test_outcome_estimators_give_every_row_its_rollouts_advantage(estimator):
    rng = np.random.default_rng(0)
    for _ in range(20):
        rows = _rows(rng)
        algo = AlgorithmSpec(estimator=estimator, invalid_penalty=0.1)
        adv = row_advantages(algo, rows)
        # core's accumulated computation: one row per rollout
        keys = list(dict.fromkeys(r.rollout for r in rows))
        first = {k: next(r for r in rows if r.rollout == k) for k in keys}
        per_rollout = compute_advantages(algo, [np.nan if first[k].total is None else first[k].total for k in keys],
                                         [first[k].group_id for k in keys], valid=[first[k].rollout_valid for k in keys])
        want = dict(zip(keys, per_rollout))
        np.testing.assert_allclose(adv, [want[r.rollout] for r in rows], atol=1e-12)
        order = rng.permutation(len(rows))  # any row order gives each row the same value
        np.testing.assert_allclose(row_advantages(algo, [rows[i] for i in order]), adv[order], atol=1e-12)


def test_gigpo_rows_carry_their_positions_step_advantage():
    rng = np.random.default_rng(1)
    algo = AlgorithmSpec(estimator="gigpo")
    rows = _rows(rng)
    adv = row_advantages(algo, rows)
    anchors = np.empty(len(rows), dtype=object)
    anchors[:] = [r.anchor for r in rows]
    want = compute_advantages(algo, [np.nan if r.total is None else r.total for r in rows], [r.group_id for r in rows],
                              traj_ids=[r.rollout for r in rows], step_index=[r.position for r in rows],
                              anchors=anchors, step_rewards=[np.nan if r.total is None else r.step_reward for r in rows],
                              valid=[r.position_valid for r in rows])
    np.testing.assert_allclose(adv, want, atol=1e-12)
    assert len({round(a, 9) for a in adv}) > len({r.rollout for r in rows})  # per position, not per rollout


def test_row_records_and_a_row_trained_twice_is_refused():
    rec = TrainingRowRecord(backend="trl", step=1, context="per_position", group_id="g", rollout_index=0, position=2,
                            prompt_tokens=5, completion_tokens=3, prompt_digest="d", advantage=0.5)
    line = rec.model_dump(mode="json", exclude_none=True)
    assert rows_by_key([line]) == {(1, "g", 0, 2): line}
    with pytest.raises(ValueError, match=r"row \(1, 'g', 0, 2\) appears twice"):
        rows_by_key([line, line])
    with pytest.raises(ValueError, match="one per position"):
        rollout_rows("g", "g#0", total=1.0, step_rewards=[1.0], anchors=["a", "b"], position_valid=[True, True])


def test_token_runs_encode_every_tokens_advantage():
    """rows.jsonl's token_advantages (verl): one [value, tokens] pair per run of equal per-token advantages, in order;
    a row whose tokens disagree with its first token's value shows as more than one run."""
    from twinrun.core.advantages.training_rows import token_runs

    assert token_runs([]) == []
    assert token_runs([0.25] * 5) == [(0.25, 5)]
    assert token_runs([0.5, 0.5, -0.25, -0.25, -0.25, 0.5]) == [(0.5, 2), (-0.25, 3), (0.5, 1)]
    assert token_runs([0.1, 0.1 + 1e-7]) == [(0.1, 1), (0.1 + 1e-7, 1)]  # exact: no tolerance hides a difference
