"""The verl plugin really registers (verl swallows plugin import errors at DEBUG), and core's estimators run through
verl's own `compute_advantage` on a real DataProto with hand-computed results."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytestmark = pytest.mark.verl

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from verl import DataProto  # noqa: E402
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, compute_grpo_outcome_advantage  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402

from twinrun.backends.verl.estimators import (  # noqa: E402
    RolloutTag,
    decode_uid,
    encode_uid,
    estimator_overrides,
    turn_index,
)
from twinrun.core.errors import InfrastructureError  # noqa: E402
from twinrun.core.spec import AlgorithmSpec, GigpoSpec  # noqa: E402

NAMES = ("twinrun_grpo", "twinrun_dr_grpo", "twinrun_rloo", "twinrun_gigpo")


def test_import_verl_registers_everything_through_the_entry_point():
    # nothing from twinrun imported the plugin explicitly: `import verl` did, via [project.entry-points."verl.plugins"]
    for name in NAMES:
        assert name in ADV_ESTIMATOR_REGISTRY, name
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.plugin.platform import PlatformRegistry
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY, get_rollout_class
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    assert _agent_loop_registry["twinrun_curator"]["_target_"] == "twinrun.backends.verl.agent_loop.CuratorAgentLoop"
    assert get_rollout_class("hf", "async").__name__ == "HFServerAdapter"
    assert ("hf", "async") in _ROLLOUT_REGISTRY
    assert RolloutReplicaRegistry.get("hf").__name__ == "HFReplica"
    assert PlatformRegistry.get("cpu") is not None


def _data(rewards_at_last: list[float], uids: list[str], masks: list[list[int]]) -> DataProto:
    """A real DataProto: token_level_rewards with each row's reward on its last response token."""
    mask = torch.tensor(masks, dtype=torch.float32)
    tlr = torch.zeros_like(mask)
    for i, r in enumerate(rewards_at_last):
        last = int(torch.nonzero(mask[i]).max())
        tlr[i, last] = r
    return DataProto.from_dict(
        tensors={"token_level_rewards": tlr, "response_mask": mask},
        non_tensors={"uid": np.array(uids, dtype=object)},
    )


def _algo(**knobs) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.create({"twinrun": knobs})


MASKS = [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0]]


def test_grpo_through_verl_compute_advantage_matches_hand_values_and_verl_grpo():
    # group a: rewards 1, 0, 0.5 -> mean 0.5, std (Bessel) 0.5 ; group b: 2, 0 -> mean 1, std sqrt(2)
    rewards = [1.0, 0.0, 0.5, 2.0, 0.0]
    uids = ["a", "a", "a", "b", "b"]
    data = _data(rewards, [encode_uid(g, RolloutTag(True, [r])) for g, r in zip(uids, rewards)], MASKS)
    out = compute_advantage(data, adv_estimator="twinrun_grpo", config=_algo(scale="group", eps=1e-6))
    adv = out.batch["advantages"]
    expect = [(1 - 0.5) / (0.5 + 1e-6), (0 - 0.5) / (0.5 + 1e-6), 0.0, (2 - 1) / (math.sqrt(2) + 1e-6),
              (0 - 1) / (math.sqrt(2) + 1e-6)]
    for i, e in enumerate(expect):
        row = adv[i][torch.tensor(MASKS[i]).bool()]
        assert torch.allclose(row, torch.full_like(row, e), atol=1e-6), (i, row, e)
        assert float(adv[i][~torch.tensor(MASKS[i]).bool()].abs().sum()) == 0.0
    # and the same numbers as verl's own GRPO (no singleton groups here, eps 1e-6 both)
    ref, _ = compute_grpo_outcome_advantage(data.batch["token_level_rewards"], data.batch["response_mask"],
                                            np.array(uids, dtype=object), norm_adv_by_std_in_grpo=True)
    assert torch.allclose(adv, ref, atol=1e-6)


def test_dr_grpo_rloo_and_unmeasured_rollouts():
    rewards = [1.0, 0.0, 0.5, 2.0, 0.0]
    tags = [RolloutTag(True, [1.0]), RolloutTag(True, [0.0]), RolloutTag(False, [0.0]), RolloutTag(True, [2.0]),
            RolloutTag(True, [0.0])]
    uids = [encode_uid(g, t) for g, t in zip("aaabb", tags)]
    data = _data([r if t.measured else 0.0 for r, t in zip(rewards, tags)], uids, MASKS)
    dr = compute_advantage(data, adv_estimator="twinrun_dr_grpo", config=_algo(scale="none")).batch["advantages"]
    # group a without the unmeasured row: mean 0.5 -> +0.5, -0.5, and the unmeasured row 0
    assert torch.allclose(dr[0][:3], torch.full((3,), 0.5))
    assert torch.allclose(dr[1][:2], torch.full((2,), -0.5))
    assert float(dr[2].abs().sum()) == 0.0
    assert torch.allclose(dr[3][:1], torch.tensor([1.0]))
    data = _data([r if t.measured else 0.0 for r, t in zip(rewards, tags)], uids, MASKS)
    rl = compute_advantage(data, adv_estimator="twinrun_rloo", config=_algo()).batch["advantages"]
    # leave-one-out in group a (n=2): 1 - 0 = 1, 0 - 1 = -1; group b: 2 - 0, 0 - 2
    assert torch.allclose(rl[0][:3], torch.ones(3))
    assert torch.allclose(rl[1][:2], -torch.ones(2))
    assert torch.allclose(rl[3][:1], torch.tensor([2.0]))
    assert torch.allclose(rl[4][:3], torch.full((3,), -2.0))


def test_gigpo_writes_each_position_on_its_own_curator_turn():
    # two rollouts of one group, |G| = 2 positions each; response = turn 1 (mask 1) | observation (0) | turn 2 (1)
    masks = [[1, 1, 0, 0, 1, 1], [1, 0, 0, 1, 1, 0]]
    tags = [RolloutTag(True, [0.25, 0.75], ["x", "y1"]), RolloutTag(True, [0.5, 0.0], ["x", "y2"])]
    uids = [encode_uid("g", t) for t in tags]
    data = _data([1.0, 0.5], uids, masks)
    adv = compute_advantage(
        data, adv_estimator="twinrun_gigpo",
        config=_algo(gigpo={"gamma": 1.0, "step_weight": 1.0, "mode": "mean_norm", "anchor_match": "exact"}),
    ).batch["advantages"]
    # episode level (mean_norm): R = 1.0, 0.5 -> A^E = +0.25, -0.25
    # step level: anchor x shared: returns G = 1.0 and 0.5 -> A^S = +0.25, -0.25 ; y1, y2 singletons -> 0
    expect = torch.tensor([[0.5, 0.5, 0, 0, 0.25, 0.25], [-0.5, 0, 0, -0.25, -0.25, 0]])
    assert torch.allclose(adv, expect, atol=1e-6), adv


def test_gigpo_turns_carry_their_segments_positions():
    # |G| = 2; turn 1 made two curate calls (positions 1 and 2), turn 2 is the closing reply (carries position 2)
    tags = [RolloutTag(True, [0.25, 0.75], ["x", "y1"], segments=[[1, 2], [2]]),
            RolloutTag(True, [0.5, 0.0], ["x", "y2"], segments=[[1], [2]])]
    data = _data([1.0, 0.5], [encode_uid("g", t) for t in tags], [[1, 1, 0, 1], [1, 0, 1, 1]])
    adv = compute_advantage(data, adv_estimator="twinrun_gigpo", config=_algo()).batch["advantages"]
    # per position (see the test above): row 0 -> 0.5, 0.25 ; row 1 -> -0.5, -0.25
    assert torch.allclose(adv, torch.tensor([[0.375, 0.375, 0, 0.25], [-0.5, 0, -0.25, -0.25]]), atol=1e-6)


def test_gigpo_refuses_untagged_turns():
    tags = [RolloutTag(True, [1.0], ["x"], segments=[[1]])]
    data = _data([1.0], [encode_uid("g", tags[0])], [[1, 0, 1, 0]])
    with pytest.raises(ValueError, match="curator turns but positions for 1"):
        compute_advantage(data, adv_estimator="twinrun_gigpo", config=_algo())


@pytest.mark.parametrize("estimator", ["twinrun_grpo", "twinrun_gigpo"])
def test_a_row_without_its_tag_is_an_error_naming_the_row(estimator):
    """Losing the rollout tag (a dataset uid replacing the agent loop's) must not train the row as 'measured,
    one position': an unmeasured rollout would then count as a failure."""
    tagged = encode_uid("g", RolloutTag(True, [1.0], ["x"]))
    data = _data([1.0, 0.0], [tagged, "g"], MASKS[:2])
    with pytest.raises(ValueError, match=rf"{estimator}: row 1 \(uid 'g'\) reached the estimator without its "
                                         "twinrun rollout tag"):
        compute_advantage(data, adv_estimator=estimator, config=_algo())


def test_step_rewards_must_sum_to_the_token_reward():
    data = _data([1.0], [encode_uid("g", RolloutTag(True, [0.5, 0.1], ["a", "b"]))], [[1, 1, 1, 0]])
    with pytest.raises(ValueError, match="step rewards sum"):
        compute_advantage(data, adv_estimator="twinrun_grpo", config=_algo())


def test_unmeasured_share_aborts_the_step_before_the_update():
    tags = [RolloutTag(True, [1.0], episodes=3, unmeasured=2), RolloutTag(True, [0.0], episodes=3, unmeasured=0)]
    data = _data([1.0, 0.0], [encode_uid("g", t) for t in tags], MASKS[:2])
    with pytest.raises(InfrastructureError, match="unmeasured"):
        compute_advantage(data, adv_estimator="twinrun_grpo", config=_algo(max_unmeasured_share=0.2))
    data = _data([1.0, 0.0], [encode_uid("g", t) for t in tags], MASKS[:2])
    compute_advantage(data, adv_estimator="twinrun_grpo", config=_algo(max_unmeasured_share=0.5))


def test_missing_turns_abort_the_step_before_the_update():
    from twinrun.core.advantages.step_health import MissingTurnsError

    tags = [RolloutTag(True, [0.5, 0.5], episodes=2, turns_missing=2), RolloutTag(True, [0.0, 0.0], episodes=2)]
    data = _data([1.0, 0.0], [encode_uid("g", t) for t in tags], MASKS[:2])
    with pytest.raises(MissingTurnsError, match=r"50% of this step's positions had no curator turn \(2 of 4\)"):
        compute_advantage(data, adv_estimator="twinrun_grpo", config=_algo(max_missing_turn_share=0.25))
    data = _data([1.0, 0.0], [encode_uid("g", t) for t in tags], MASKS[:2])
    compute_advantage(data, adv_estimator="twinrun_grpo", config=_algo(max_missing_turn_share=0.5))


def test_uid_tag_roundtrip_and_turn_index():
    tag = RolloutTag(False, [0.1, 0.2], ["a", None], [True, False], episodes=3, unmeasured=1, segments=[[1], [1, 2]],
                     turns_missing=1)
    group, back = decode_uid(encode_uid("abc", tag))
    assert group == "abc" and back == tag
    assert decode_uid("plain") == ("plain", None)
    with pytest.raises(ValueError):
        encode_uid("a|b", tag)
    run = turn_index(torch.tensor([[1, 1, 0, 1, 0, 0, 1]]))
    assert run.tolist() == [[0, 0, -1, 1, -1, -1, 2]]


def test_estimator_overrides_carry_every_advantage_knob(repo_root):
    from twinrun.core.spec import load_spec

    spec = load_spec(repo_root / "experiments/smoke-cpu.yaml",
                     ["algorithm.estimator=gigpo", "algorithm.gigpo.gamma=0.9", "algorithm.gigpo.anchor=position"])
    ov = estimator_overrides(spec)
    assert ov["algorithm.adv_estimator"] == "twinrun_gigpo"
    knobs = {k.removeprefix("+algorithm.twinrun."): v for k, v in ov.items() if k.startswith("+algorithm.twinrun.")}
    assert knobs.pop("max_unmeasured_share") == spec.executor.max_unmeasured_share
    assert knobs.pop("max_missing_turn_share") == spec.curator.max_missing_turn_share
    gigpo = {k.removeprefix("gigpo."): knobs.pop(k) for k in [k for k in knobs if k.startswith("gigpo.")]}
    algo = AlgorithmSpec(estimator="gigpo", gigpo=gigpo, **knobs)
    assert (algo.gigpo.gamma, algo.gigpo.anchor) == (0.9, "position")
    assert set(knobs) | {"gigpo"} == set(AlgorithmSpec.model_fields) - {"estimator", "loss_aggregation"}
    assert set(gigpo) == set(GigpoSpec.model_fields)
    # what verl's hydra hands the estimator (nested) and a flat block both give the spec's EstimatorConfig
    from twinrun.backends.verl.estimators import _estimator_config
    from twinrun.core.advantages import estimator_config

    for block in ({**knobs, "gigpo": gigpo}, {**knobs, **{f"gigpo.{k}": v for k, v in gigpo.items()}}):
        assert _estimator_config("gigpo", _algo(**block))[0] == estimator_config(spec.algorithm)
