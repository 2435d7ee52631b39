"""twinrun's advantage presets against the installed frameworks' own code (issue 5).

verl: `compute_grpo_outcome_advantage` and `ray_trainer.compute_advantage` on a real `DataProto` (GRPO with and
without std, RLOO), variable response lengths, to 1e-6. TRL: a real (tiny, random) `GRPOTrainer` whose real
`_generate_and_score_completions` generates completions with a real model and scores them with a reward
function that returns controlled rewards (None = unscorable); its `advantages` must equal the `trl*` presets.

Batches: many seeds, group sizes 1..16 (TRL: 2..16, it enforces num_generations >= 2), ties, all-equal groups,
NaN rewards (unmeasured), mixed scales.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from twinrun.core.advantages import PRESETS, EstimatorConfig, compute_advantages

torch = pytest.importorskip("torch")


def _group_rewards(rng: np.random.Generator, size: int, constant_groups: bool = True) -> np.ndarray:
    kind = rng.integers(0, 6)
    if kind == 3 and not constant_groups:
        kind = 2
    if kind == 0:  # continuous
        return rng.normal(size=size) * rng.choice([0.1, 1.0, 30.0])
    if kind == 1:  # binary success
        return rng.integers(0, 2, size=size).astype(np.float64)
    if kind == 2:  # heavy ties
        return rng.choice([0.0, 0.25, 1.0], size=size)
    if kind == 3:  # all equal
        return np.full(size, rng.choice([0.0, 1.0, 0.7]))
    if kind == 4:  # all equal but one
        r = np.full(size, 0.5)
        r[rng.integers(size)] = 1.5
        return r
    return np.round(rng.uniform(-1, 2, size=size), 2)


def _random_batch(
    rng: np.random.Generator, sizes: list[int], nan_frac: float, constant_groups: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    rewards = np.concatenate([_group_rewards(rng, s, constant_groups) for s in sizes])
    gids = np.repeat(np.array([f"uid-{i}" for i in range(len(sizes))], dtype=object), sizes)
    if nan_frac:
        rewards[rng.random(len(rewards)) < nan_frac] = np.nan
    return rewards, gids


# ------------------------------------------------------------------------------------------------------------
# verl


@pytest.fixture(scope="module")
def verl_api():
    pytest.importorskip("verl")
    from verl import DataProto
    from verl.trainer.ppo.core_algos import AdvantageEstimator, compute_grpo_outcome_advantage
    from verl.trainer.ppo.ray_trainer import compute_advantage

    return DataProto, AdvantageEstimator, compute_grpo_outcome_advantage, compute_advantage


# verl computes a singleton's std as `torch.tensor(1.0) + 1e-6` in float32 (= 1.00000095), twinrun in float64
# (1.000001): a raw score s passes as s/1.00000095 vs s/1.000001, a relative 5e-8. Hence rtol=1e-7 next to atol.
VERL_TOL = dict(atol=1e-6, rtol=1e-7)


def _token_level(rng: np.random.Generator, scores: np.ndarray, width: int = 6, dtype=torch.float64):
    """(B, T) rewards with the score on the last valid token (as verl's reward managers place it), and the mask."""
    b = len(scores)
    lens = rng.integers(1, width + 1, size=b)
    mask = (np.arange(width)[None, :] < lens[:, None]).astype(np.float64)
    tlr = np.zeros((b, width))
    tlr[np.arange(b), lens - 1] = scores
    return torch.tensor(tlr, dtype=dtype), torch.tensor(mask, dtype=dtype), mask


@pytest.mark.verl
@pytest.mark.parametrize("norm_by_std,preset", [(True, "verl"), (False, "verl_dr_grpo")])
def test_verl_grpo_outcome_advantage_matches_preset(verl_api, norm_by_std, preset):
    _, _, grpo, _ = verl_api
    for seed in range(60):
        rng = np.random.default_rng(seed)
        sizes = list(rng.integers(1, 17, size=rng.integers(1, 10)))
        rewards, gids = _random_batch(rng, sizes, nan_frac=0.0)
        tlr, mask_t, mask = _token_level(rng, rewards)
        theirs, returns = grpo(tlr, mask_t, gids, norm_adv_by_std_in_grpo=norm_by_std)
        ours = compute_advantages(PRESETS[preset].config, rewards, gids)
        np.testing.assert_allclose(theirs.numpy(), ours[:, None] * mask, **VERL_TOL, err_msg=f"seed {seed}")
        assert torch.equal(theirs, returns)


@pytest.mark.verl
@pytest.mark.parametrize(
    "estimator,norm_by_std,preset",
    [("GRPO", True, "verl"), ("GRPO", False, "verl_dr_grpo"), ("RLOO", True, "verl_rloo")],
)
def test_verl_compute_advantage_on_dataproto(verl_api, estimator, norm_by_std, preset):
    DataProto, AdvantageEstimator, _, compute_advantage = verl_api
    for seed in range(40):
        rng = np.random.default_rng(1000 + seed)
        sizes = list(rng.integers(1, 17, size=rng.integers(1, 12)))
        rewards, gids = _random_batch(rng, sizes, nan_frac=0.0)
        perm = rng.permutation(len(rewards))  # verl groups by uid, not position: shuffle the rows
        rewards, gids = rewards[perm], gids[perm]
        tlr, mask_t, mask = _token_level(rng, rewards)
        data = DataProto.from_dict(
            tensors={"token_level_rewards": tlr, "response_mask": mask_t}, non_tensors={"uid": gids}
        )
        out = compute_advantage(
            data, getattr(AdvantageEstimator, estimator), norm_adv_by_std_in_grpo=norm_by_std, config=None
        )
        ours = compute_advantages(PRESETS[preset].config, rewards, gids)
        np.testing.assert_allclose(
            out.batch["advantages"].numpy(), ours[:, None] * mask, **VERL_TOL, err_msg=f"seed {seed}"
        )


@pytest.mark.verl
def test_verl_float32_dataproto_within_float32_precision(verl_api):
    """What verl trains on: float32 rewards. The preset (float64) agrees to float32 precision, except on groups
    whose rewards are all equal (next test)."""
    DataProto, AdvantageEstimator, _, compute_advantage = verl_api
    for seed in range(20):
        rng = np.random.default_rng(2000 + seed)
        rewards, gids = _random_batch(rng, list(rng.integers(1, 17, size=6)), nan_frac=0.0, constant_groups=False)
        rewards = rewards.astype(np.float32).astype(np.float64)
        tlr, mask_t, mask = _token_level(rng, rewards, dtype=torch.float32)
        data = DataProto.from_dict(
            tensors={"token_level_rewards": tlr, "response_mask": mask_t}, non_tensors={"uid": gids}
        )
        out = compute_advantage(data, AdvantageEstimator.GRPO, norm_adv_by_std_in_grpo=True)
        ours = compute_advantages(PRESETS["verl"].config, rewards, gids)
        np.testing.assert_allclose(out.batch["advantages"].numpy(), ours[:, None] * mask, atol=1e-5, rtol=1e-5)


@pytest.mark.verl
def test_verl_float32_all_equal_group_is_not_zero(verl_api):
    """A known verl artifact, stated (DIVERGENCES.md): in float32, torch.mean of eight equal 0.7s is not exactly
    0.7, the tiny std (~1e-8) is dwarfed by eps=1e-6 only partly, and verl hands an all-equal group advantages of
    about +-0.056 instead of 0. twinrun computes in float64 and gives 0 (to 1e-9)."""
    _, _, grpo, _ = verl_api
    rewards = np.full(8, 0.7)
    theirs, _ = grpo(torch.full((8, 1), 0.7, dtype=torch.float32), torch.ones(8, 1), np.array(["u"] * 8, dtype=object))
    ours = compute_advantages(PRESETS["verl"].config, rewards, ["u"] * 8)
    assert theirs.abs().max().item() > 0.01
    assert np.abs(ours).max() < 1e-9


@pytest.mark.verl
def test_verl_preset_with_unmeasured_equals_verl_on_measured_rows(verl_api):
    """verl has no 'unmeasured': a NaN poisons its whole group. twinrun drops unmeasured rows before any statistic
    (advantage 0), which is exactly verl run on the measured rows only."""
    _, _, grpo, _ = verl_api
    poisoned = 0
    for seed in range(40):
        rng = np.random.default_rng(3000 + seed)
        rewards, gids = _random_batch(rng, list(rng.integers(1, 17, size=rng.integers(1, 10))), nan_frac=0.2)
        ours = compute_advantages(PRESETS["verl"].config, rewards, gids)
        keep = ~np.isnan(rewards)
        assert np.all(ours[~keep] == 0.0)
        if keep.any():
            tlr, mask_t, _ = _token_level(rng, rewards[keep], width=1)
            theirs, _ = grpo(tlr, mask_t, gids[keep], norm_adv_by_std_in_grpo=True)
            np.testing.assert_allclose(theirs.numpy()[:, 0], ours[keep], **VERL_TOL, err_msg=f"seed {seed}")
        if (~keep).any():  # the divergence itself, stated: verl on the raw batch yields NaN for the whole group
            tlr, mask_t, _ = _token_level(rng, rewards, width=1)
            raw, _ = grpo(tlr, mask_t, gids, norm_adv_by_std_in_grpo=True)
            bad_group = gids[np.flatnonzero(~keep)[0]]
            in_group = gids == bad_group
            if in_group.sum() > 1:
                assert torch.isnan(raw[torch.from_numpy(in_group)]).all()
                poisoned += 1
    assert poisoned > 5  # the NaN case was really exercised


# ------------------------------------------------------------------------------------------------------------
# TRL


def _tiny_causal_lm():
    """A random 1-layer Qwen3 with a 32-word WordLevel tokenizer, built in memory (no hub). Real model, real
    generation; it only has to produce *some* completion for TRL to score."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    words = ["<pad>", "<eos>", "<unk>"] + [f"w{i}" for i in range(29)]
    tk = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, max_position_embeddings=64, pad_token_id=0, eos_token_id=1, bos_token_id=1,
    )
    return Qwen3ForCausalLM(cfg), tok


class _ControlledReward:
    """A TRL reward function returning the next queued list of rewards (None = unscorable)."""

    __name__ = "controlled_reward"

    def __init__(self) -> None:
        self.queue: list[list[float | None]] = []

    def __call__(self, prompts, completions, **kwargs):
        values = self.queue.pop(0)
        assert len(values) == len(prompts)
        return values


@pytest.fixture(scope="module")
def trl_trainer_factory(tmp_path_factory):
    pytest.importorskip("trl")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model, tok = _tiny_causal_lm()
    out_dir = tmp_path_factory.mktemp("trl")
    cache: dict[tuple[int, str], tuple[object, _ControlledReward]] = {}

    def make(num_generations: int, scale_rewards: str):
        key = (num_generations, scale_rewards)
        if key not in cache:
            reward = _ControlledReward()
            args = GRPOConfig(
                output_dir=str(out_dir), num_generations=num_generations, per_device_train_batch_size=num_generations,
                max_completion_length=2, scale_rewards=scale_rewards, use_cpu=True, bf16=False, report_to="none",
                gradient_checkpointing=False, logging_steps=1,
            )
            ds = Dataset.from_dict({"prompt": ["w1 w2", "w3", "w4 w5 w6"]})
            trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds, processing_class=tok)
            trainer.model.train()  # "train" mode: TRL groups by num_generations
            cache[key] = (trainer, reward)
        return cache[key]

    return make


def _trl_advantages(trainer, reward: _ControlledReward, rewards: np.ndarray, groups: int, g: int) -> np.ndarray:
    """Run TRL's own `_generate_and_score_completions` on `groups` prompts x `g` generations (rows of a group are
    consecutive, as TRL's RepeatSampler lays them out) and return its advantages."""
    prompts = ["w1 w2", "w3", "w4 w5 w6", "w7"]
    inputs = [{"prompt": prompts[i % len(prompts)]} for i in range(groups) for _ in range(g)]
    reward.queue.append([None if np.isnan(r) else float(r) for r in rewards])
    out = trainer._generate_and_score_completions(inputs)
    assert not reward.queue
    return out["advantages"].detach().cpu().numpy().astype(np.float64)


def _assert_close_float32(theirs: np.ndarray, ours: np.ndarray, msg: str) -> None:
    # TRL holds rewards in float32 and normalises in float32; ours is float64 on the float32-rounded rewards.
    np.testing.assert_allclose(theirs, ours, atol=2e-6, rtol=2e-6, err_msg=msg)


@pytest.mark.trl
@pytest.mark.parametrize("g", range(2, 17))
def test_trl_grpo_trainer_advantages_match_trl_preset(trl_trainer_factory, g):
    trainer, reward = trl_trainer_factory(g, "group")
    for seed in range(4):
        rng = np.random.default_rng(100 * g + seed)
        groups = int(rng.integers(1, 4))
        rewards, gids = _random_batch(rng, [g] * groups, nan_frac=0.15 if seed % 2 else 0.0, constant_groups=False)
        rewards = rewards.astype(np.float32).astype(np.float64)
        theirs = _trl_advantages(trainer, reward, rewards, groups, g)
        ours = compute_advantages(PRESETS["trl"].config, rewards, gids)
        _assert_close_float32(theirs, ours, f"G={g} seed={seed}")


@pytest.mark.trl
@pytest.mark.parametrize("scale,preset", [("batch", "trl_batch"), ("none", "trl_none")])
@pytest.mark.parametrize("g", [2, 3, 8, 16])
def test_trl_scale_rewards_batch_and_none(trl_trainer_factory, g, scale, preset):
    trainer, reward = trl_trainer_factory(g, scale)
    for seed in range(3):
        rng = np.random.default_rng(7 * g + seed)
        groups = int(rng.integers(1, 4))
        rewards, gids = _random_batch(rng, [g] * groups, nan_frac=0.15 if seed == 1 else 0.0, constant_groups=False)
        rewards = rewards.astype(np.float32).astype(np.float64)
        theirs = _trl_advantages(trainer, reward, rewards, groups, g)
        ours = compute_advantages(PRESETS[preset].config, rewards, gids)
        _assert_close_float32(theirs, ours, f"G={g} scale={scale} seed={seed}")


@pytest.mark.trl
def test_trl_unscorable_and_all_equal_groups(trl_trainer_factory):
    """Edge groups spelled out: one scorable row, no scorable row, all equal, one tie-breaker."""
    trainer, reward = trl_trainer_factory(4, "group")
    nan = np.nan
    rewards = np.array([1.0, nan, nan, nan, nan, nan, nan, nan, 0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0, 1.0])
    gids = np.repeat(np.arange(4), 4)
    theirs = _trl_advantages(trainer, reward, rewards, 4, 4)
    ours = compute_advantages(PRESETS["trl"].config, rewards, gids)
    _assert_close_float32(theirs, ours, "edge groups")
    assert np.all(ours[:12] == 0.0)
    # last group: mean 0.25, std sqrt(0.25) = 0.5 -> (1 - 0.25)/(0.5 + 1e-4), (0 - 0.25)/(0.5 + 1e-4)
    np.testing.assert_allclose(ours[12:], [-0.25 / 0.5001] * 3 + [0.75 / 0.5001])


@pytest.mark.trl
def test_trl_float32_all_equal_group_is_not_zero(trl_trainer_factory):
    """The float32 artifact again (see the verl test), smaller because TRL's eps is 1e-4: eight equal 0.7 rewards
    get |A| ~ 6e-4 from TRL, 0 from twinrun. Dyadic rewards (0.5, 0, 1) are exact in float32 and give 0 in both."""
    trainer, reward = trl_trainer_factory(8, "group")
    theirs = _trl_advantages(trainer, reward, np.full(8, 0.7), 1, 8)
    ours = compute_advantages(PRESETS["trl"].config, np.full(8, 0.7), [0] * 8)
    assert 1e-5 < np.abs(theirs).max() < 1e-2
    assert np.abs(ours).max() < 1e-9


def test_as_torch_keeps_dtype_and_values_of_the_target():
    from twinrun.core.advantages import as_torch

    like = torch.zeros(3, dtype=torch.float32)
    t = as_torch(np.array([0.5, -0.25, 0.0]), like=like)
    assert t.dtype == torch.float32 and t.tolist() == [0.5, -0.25, 0.0]


def test_estimator_config_roundtrip_for_presets():
    # every preset is a plain EstimatorConfig (what runs log as their parameterisation)
    for p in PRESETS.values():
        assert isinstance(p.config, EstimatorConfig) and p.config.knobs()["estimator"] == p.config.estimator
