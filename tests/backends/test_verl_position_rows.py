"""verl per_position rows through the registered estimator body: each row's tag carries (task group, rollout,
position); the advantage on a row's tokens is core's per-row advantage; a lost or untagged row is refused."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from twinrun.backends.verl.estimators import (  # noqa: E402
    RolloutTag,
    compute_twinrun_advantage,
    decode_uid,
    encode_uid,
)
from twinrun.core.spec import AlgorithmSpec  # noqa: E402
from twinrun.core.advantages.training_rows import rollout_rows, row_advantages  # noqa: E402

G = 3


def _batch(rng: np.random.Generator, estimator: str):
    uids, scores, core_rows = [], [], []
    for gi in range(2):
        for r in range(3):
            steps = rng.random(G).round(3).tolist()
            anchors = [f"a{gi}-{p}-{rng.integers(2)}" for p in range(G)]
            valid = (rng.random(G) > 0.3).tolist()
            core_rows += rollout_rows(f"u{gi}", f"u{gi}#{r}", total=float(sum(steps)), step_rewards=steps,
                                      anchors=anchors, position_valid=valid)
            for p in range(1, G + 1):
                tag = RolloutTag(measured=True, step_rewards=steps, anchors=anchors, valid=valid, episodes=G,
                                 segments=[[p]], group_id=f"group-{gi}", rollout=r, position=p)
                uids.append(encode_uid(f"u{gi}", tag))
                scores.append(sum(steps))
    order = rng.permutation(len(uids))  # verl's row order is not twinrun's
    uids = [uids[i] for i in order]
    core_rows = [core_rows[i] for i in order]
    t = 5
    rewards = torch.zeros(len(uids), t, dtype=torch.float64)
    rewards[:, -1] = torch.tensor([scores[i] for i in order], dtype=torch.float64)
    mask = torch.ones(len(uids), t)
    return uids, rewards, mask, core_rows


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "gigpo"])
def test_each_rows_tokens_carry_cores_row_advantage(estimator):
    rng = np.random.default_rng(3)
    for _ in range(10):
        uids, rewards, mask, core_rows = _batch(rng, estimator)
        adv, _ = compute_twinrun_advantage(estimator, rewards, mask, None, index=np.array(uids, dtype=object))
        want = row_advantages(AlgorithmSpec(estimator=estimator), core_rows)
        np.testing.assert_allclose(adv.numpy(), np.repeat(want[:, None], mask.shape[1], axis=1), atol=1e-9)
    g, tag = decode_uid(uids[0])
    assert tag.position in range(1, G + 1) and tag.group_id.startswith("group-") and g.startswith("u")


def test_a_lost_or_untagged_row_is_refused():
    uids, rewards, mask, _ = _batch(np.random.default_rng(4), "grpo")
    with pytest.raises(ValueError, match=r"has rows for positions \[.*\], not \[1, 2, 3\]"):
        compute_twinrun_advantage("grpo", rewards[1:], mask[1:], None, index=np.array(uids[1:], dtype=object))
    g, tag = decode_uid(uids[0])
    tag.position = None
    bad = [encode_uid(g, tag)] + uids[1:]
    with pytest.raises(ValueError, match="no \\(rollout, position\\) tag in a per_position batch"):
        compute_twinrun_advantage("grpo", rewards, mask, None, index=np.array(bad, dtype=object))
