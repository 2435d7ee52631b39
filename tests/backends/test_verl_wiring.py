"""Tests that fail when the hand-over of core's advantages to verl's update breaks (#12 section 5).

One child process (verl_wiring_child.py) builds verl's real worker (``ActorRolloutRefWorker``, role
``actor_rollout``) from the config `compile.py` composes for the smoke arm with ``estimator: gigpo`` and
``curator.context: accumulated``, in a one-process gloo world as `replay.py` runs it, and drives it with the calls
verl's v1 trainer makes per step (advantage step through verl's ``compute_advantage_for_multi_trajectories`` and the
registered ``twinrun_gigpo`` estimator, old log-probs, ``update_actor``) on two tagged rows of one task group. No
Ray cluster, no agent loop, no TransferQueue: the update is verl's worker code either way (see replay.py's
docstring for why). After the updates the child runs verl's weight sync into twinrun's transformers rollout server
(hf_rollout.py); its one stand-in is the Ray actor handle of that server (a local object calling the same method).

The rows (hand-computed, the same numbers as test_trl_trainer_advantages.py's GiGPO case): |G| = 2, episode
rewards 0.6 and 0.2 (A^E = +-0.2); position 1 shares its anchor in both rollouts (returns 0.6 / 0.2: A^S = +-0.2),
position 2's anchors differ (singletons: A^S = 0). So A(a,1) = 0.4, A(a,2) = 0.2, A(b,1) = -0.4, A(b,2) = -0.2.
Row a: turn 1 (position 1), a tool result, turn 2 (position 2), a tool result, the closing reply (carries the
pending position 2). Row b: turn 1, a tool result, a turn with no call (position 2's missing turn).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl")
torch = pytest.importorskip("torch")

from twinrun.core.spec import load_spec  # noqa: E402

pytestmark = [pytest.mark.verl, pytest.mark.slow, pytest.mark.sampling]

CHILD = Path(__file__).with_name("verl_wiring_child.py")

# prompts of different lengths: verl's tensordict helper keeps equal-length fields as plain tensors, and the
# worker's unpadding then expects an attention mask it does not get (as verl's own TransferQueue never stores them)
PROMPTS = [[11, 12, 13, 14, 15, 16], [11, 12, 13, 14, 15, 16, 17]]
# (token, loss mask) of each row's response
ROW_A = [(21, 1), (22, 1), (23, 1), (31, 0), (32, 0), (24, 1), (25, 1), (33, 0), (26, 1), (27, 1)]
ROW_B = [(41, 1), (42, 1), (43, 1), (51, 0), (52, 0), (44, 1), (45, 1)]
EXPECTED = [[0.4, 0.4, 0.4, 0, 0, 0.2, 0.2, 0, 0.2, 0.2], [-0.4, -0.4, -0.4, 0, 0, -0.2, -0.2]]


def _rows() -> list[dict]:
    from twinrun.backends.verl.estimators import RolloutTag, encode_uid

    tags = [RolloutTag(step_rewards=[0.5, 0.1], anchors=["x", "a2"], valid=[True, True],
                       segments=[[1], [2], [2]], group_id="g", rollout=0),
            RolloutTag(step_rewards=[0.0, 0.2], anchors=["x", "b2"], valid=[True, True],
                       segments=[[1], [2]], group_id="g", rollout=1)]
    rows = []
    for tag, prompt, resp in zip(tags, PROMPTS, (ROW_A, ROW_B), strict=True):
        rows.append({"uid": encode_uid("g", tag), "score": sum(tag.step_rewards), "prompt_ids": prompt,
                     "completion_ids": [t for t, _ in resp], "completion_mask": [m for _, m in resp],
                     "group_id": "g", "reward": None, "advantage": None})
    return rows


@pytest.fixture(scope="module")
def verl_run(smoke_spec_path, tmp_path_factory):
    from twinrun.backends.verl.replay import _child_env, replay_overrides
    from twinrun.models import build_tiny_qwen3

    tmp = tmp_path_factory.mktemp("verl-wiring")
    spec = load_spec(smoke_spec_path, ["algorithm.estimator=gigpo", "curator.context=accumulated",
                                       "optimizer.weight_decay=0.0", "batch.groups_per_step=1",
                                       "batch.rollouts_per_group=2"])
    assert spec.kl.coef == 0.0
    model = build_tiny_qwen3(tmp / "models")
    job = {"overrides": replay_overrides(spec, model), "rows": _rows(), "modes": ["zero", "core"], "sync": True,
           "out": str(tmp / "result.json")}
    (tmp / "job.json").write_text(json.dumps(job), encoding="utf-8")
    env = _child_env()
    repo = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([repo, env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, str(CHILD), str(tmp / "job.json")], env=env, cwd=repo,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return json.loads((tmp / "result.json").read_text(encoding="utf-8"))


def test_verl_update_follows_cores_advantages(verl_run):
    """Weight decay 0, KL 0: with every advantage forced to 0 by a test estimator (patched in for core's),
    verl's update leaves every weight bit-identical; with core's advantages the weights move. verl's own GRPO
    advantages for the same rows are not all 0, so an update that stopped taking core's would move the weights."""
    zero, core = verl_run["zero"], verl_run["core"]
    assert np.abs(np.array(zero["verl_grpo"])).max() > 1e-3
    assert zero["max_abs_change"] == 0.0, zero["advantages"]
    assert np.abs(np.array(core["advantages"])).max() > 0.1 and core["max_abs_change"] > 0.0
    assert verl_run["estimator"] == "twinrun_gigpo"


def test_verl_policy_loss_weighs_each_token_with_its_positions_core_advantage(verl_run):
    """GiGPO (per-position step advantages): the ``advantages`` verl's policy-loss function receives equal core's
    advantage of the position each curator turn carries, token by token (hand-computed, module docstring); the
    tokens of tool results carry none of it (response_mask 0)."""
    inputs = verl_run["core"]["loss_inputs"]
    assert len(inputs) == 2  # one micro-batch per row (micro_batch_per_device 1), rows in order
    for seen, want, resp in zip(inputs, EXPECTED, (ROW_A, ROW_B), strict=True):
        (adv,), (mask,) = seen["advantages"], seen["response_mask"]
        assert mask == [m for _, m in resp]
        np.testing.assert_allclose(adv[:len(want)], want, atol=1e-6)
        assert not any(adv[len(want):])


def test_rollout_log_probs_match_the_actor_after_a_weight_sync(verl_run):
    """verl's weight sync (naive backend) into the transformers rollout server after an update: the server's
    log-probs of the tokens it samples equal the actor's on the same tokens to fp32 rounding; before the sync
    (the server still holds the starting weights) they differ by the update's effect."""
    sync = verl_run["sync"]
    assert verl_run["core"]["max_abs_change"] > 0.0
    assert sync["before"] > 1e-4, sync
    assert sync["after"] < 2e-6, sync
    assert sync["global_steps"] == 1  # the version verl's sync stamped on the server
