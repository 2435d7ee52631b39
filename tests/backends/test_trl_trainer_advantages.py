"""How TwinrunGRPOTrainer turns gathered rollout data into TRL's advantages (hand-computed; the TRL side of the
wiring is exercised for real in test_trl_train.py). `_core_advantages` reads only `self.estimator`."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from twinrun.backends.trl.trainer import TwinrunGRPOTrainer
from twinrun.core.advantages import EstimatorConfig

pytestmark = pytest.mark.trl


def _row(group, total, step_rewards, anchors, turns, valid=(True, True)):
    return {"group_id": group, "total": total, "step_rewards": step_rewards, "anchors": anchors,
            "position_valid": list(valid), "valid": all(valid), "turns": turns}


def test_grpo_gives_one_advantage_per_rollout_from_the_gathered_batch():
    me = SimpleNamespace(estimator=EstimatorConfig("grpo", scale="none"))
    rows = [_row("g0", 1.0, [], ["a", "b"], []), _row("g0", 0.0, [], ["c", "d"], []),
            _row("g1", None, [], ["e", "f"], []), _row("g1", 0.5, [], ["g", "h"], [])]
    out = {"completion_ids": torch.zeros((2, 3), dtype=torch.long)}
    # this process holds rows 2..3 of the gathered batch (process 1 of 2)
    adv = TwinrunGRPOTrainer._core_advantages(me, rows, out, 2, 2)
    assert adv.shape == (2,)
    # group g1: the unmeasured rollout leaves the statistics and gets 0; the other is then alone -> 0
    assert adv.tolist() == [0.0, 0.0]
    adv0 = TwinrunGRPOTrainer._core_advantages(me, rows, out, 0, 2)
    assert adv0.tolist() == pytest.approx([0.5, -0.5])


def test_gigpo_puts_each_positions_advantage_on_its_turns_tokens():
    me = SimpleNamespace(estimator=EstimatorConfig("gigpo", gigpo_mode="mean_norm", pool="trajectory",
                                                   singleton="zero", step_singleton="zero", gamma=1.0,
                                                   step_weight=1.0))
    # one group, |G| = 2. Episode rewards 0.6 and 0.2 (mean 0.4): A^E = +0.2 / -0.2.
    # Position 1 has the same anchor in both rollouts: returns 0.6 and 0.2 -> A^S = +0.2 / -0.2;
    # position 2 anchors differ (singletons) -> A^S = 0. So A(a,1)=0.4, A(a,2)=0.2, A(b,1)=-0.4, A(b,2)=-0.2.
    rows = [_row("g", 0.6, [0.5, 0.1], ["x", "a2"], [(0, 1), (1, 2)]),
            _row("g", 0.2, [0.0, 0.2], ["x", "b2"], [(0, 1)])]
    # row a: turn 1, tool result, turn 2, tool result, closing reply; row b: turn 1, tool result, a turn with no
    # call (position 2's missing turn), padding
    completion_mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]])
    tool_mask = torch.tensor([[1, 1, 0, 1, 1, 0, 1], [1, 0, 0, 1, 1, 1, 1]])
    out = {"completion_ids": torch.zeros((2, 7), dtype=torch.long), "completion_mask": completion_mask,
           "tool_mask": tool_mask}
    adv = TwinrunGRPOTrainer._core_advantages(me, rows, out, 0, 2)
    expected = np.array([[0.4, 0.4, 0, 0.2, 0.2, 0, 0.2],
                         [-0.4, 0, 0, -0.2, -0.2, 0, 0]])
    np.testing.assert_allclose(adv.numpy(), expected, atol=1e-6)
