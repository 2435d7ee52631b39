"""`twinrun sft --plan` (issue 9 item 3): one spec -> TRL and verl knobs that agree, the shared order, the
per-step token counts, and the learning-rate schedule checked against both frameworks' own functions."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

from twinrun.core.errors import TwinrunError
from twinrun.core.spec import SpecError, load_spec
from twinrun.backends.sft_plan import (
    build_plan,
    epoch_order,
    scheduled_lr,
    sft_knobs,
    sft_schedule,
    trl_sft_config,
    verl_sft_overrides,
)

REPO = Path(__file__).parents[2]
SPEC = REPO / "experiments" / "sft-sciworld-cpu.yaml"
GOLD = Path(__file__).parent / "data" / "sciworld-gold-mini.jsonl"


def spec_with(*sets: str):
    return load_spec(SPEC, [f"sft.data={GOLD}", *sets])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from twinrun.models import build_tiny_qwen3

    return build_tiny_qwen3(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def dataset(model_dir):
    from transformers import AutoTokenizer

    from twinrun.core.sft.data import build_sft_dataset
    from twinrun.core.sft.trajectories import load_trajectories

    tok = AutoTokenizer.from_pretrained(model_dir)
    return build_sft_dataset(load_trajectories(GOLD), tok, max_length=2048, seed=0)


def test_knobs_agree_and_native_configs_say_the_same(dataset):
    spec = spec_with("sft.epochs=2", "sft.batch_size=2", "sft.micro_batch_size=1", "sft.warmup_ratio=0.3")
    plan = build_plan(spec, dataset)
    s = plan.schedule
    assert (s.steps_per_epoch, s.total_steps, s.warmup_steps, s.micro_batch_size) == (2, 4, 2, 1)  # ceil(0.3*4)
    assert plan.divergent_knobs() == []
    trl, verl = plan.native["trl"], plan.native["verl"]
    assert trl["learning_rate"] == verl["optim.lr"] == spec.sft.lr
    assert trl["warmup_steps"] == verl["optim.lr_warmup_steps"] == 2
    assert trl["per_device_train_batch_size"] * trl["gradient_accumulation_steps"] == verl["data.train_batch_size"]
    assert trl["per_device_train_batch_size"] == verl["data.micro_batch_size_per_gpu"] == 1
    assert trl["num_train_epochs"] == verl["trainer.total_epochs"] == 2
    assert trl["max_steps"] == verl["trainer.total_training_steps"] == 4
    assert trl["dataloader_drop_last"] and trl["lr_scheduler_type"] == verl["optim.lr_scheduler_type"] == "cosine"
    assert trl["bf16"] is False and verl["+engine.mixed_precision"]["param_dtype"] == "fp32"
    assert verl["checkpoint.save_contents"][-1] == "hf_model" and verl["trainer.save_freq"] == "after_each_epoch"


def test_per_step_tokens_follow_the_shared_order(dataset):
    spec = spec_with("sft.epochs=2", "sft.batch_size=2")
    plan = build_plan(spec, dataset)
    exs = dataset.examples
    assert [s.step for s in plan.steps] == [1, 2, 3, 4]
    for st in plan.steps:
        order = epoch_order(len(exs), st.epoch)
        k = (st.step - 1) % 2
        batch = [exs[i] for i in order[2 * k:2 * k + 2]]
        assert st.example_ids == tuple(e.id for e in batch)
        assert st.tokens == sum(e.tokens for e in batch)
        assert st.trained_tokens == sum(e.trained_tokens for e in batch)
        assert st.padded_tokens == 2 * max(e.tokens for e in batch)
    # each epoch sees every sequence once, in a different order
    e0 = [i for s in plan.steps if s.epoch == 0 for i in s.example_ids]
    e1 = [i for s in plan.steps if s.epoch == 1 for i in s.example_ids]
    assert sorted(e0) == sorted(e1) == sorted(dataset.ids) and e0 != e1


def test_epoch_order_is_verls_sampler():
    from torch.utils.data import DistributedSampler

    for epoch in (0, 1, 5):
        s = DistributedSampler(list(range(7)), num_replicas=1, rank=0, shuffle=True, seed=0, drop_last=True)
        s.set_epoch(epoch)
        assert epoch_order(7, epoch) == list(s)


@pytest.mark.verl
def test_lr_schedule_matches_transformers_and_verl():
    pytest.importorskip("verl")
    import torch
    from transformers.optimization import get_cosine_schedule_with_warmup as hf_cosine
    from verl.utils.torch_functional import get_cosine_schedule_with_warmup as verl_cosine

    spec = spec_with("sft.lr=0.001")
    sched = sft_schedule(spec, 20)  # batch 2 -> 10 steps, warmup ceil(1.0) = 1
    sched = type(sched)(**{**sched.__dict__, "warmup_steps": 3})
    ours = [scheduled_lr(spec, sched, k) for k in range(1, sched.total_steps + 1)]
    for make in (lambda o: hf_cosine(o, 3, sched.total_steps),
                 lambda o: verl_cosine(o, 3, sched.total_steps, min_lr_ratio=0.0, num_cycles=0.5)):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.001)
        sch = make(opt)
        used = []
        for _ in range(sched.total_steps):
            used.append(opt.param_groups[0]["lr"])
            opt.step()
            sch.step()
        assert ours == pytest.approx(used, abs=1e-12)
    assert ours[0] == 0.0 and max(ours) == pytest.approx(0.001)


def test_refusals_are_one_line():
    with pytest.raises(TwinrunError, match="sft.batch_size: 8 exceeds the 4"):
        sft_schedule(spec_with("sft.batch_size=8", "sft.micro_batch_size=null"), 4)
    spec = spec_with("sft.schedule=linear")
    sched = sft_schedule(spec, 4)
    trl_sft_config(spec, sched, "x")  # TRL has a linear schedule
    with pytest.raises(TwinrunError, match="no verl SFT equivalent"):
        verl_sft_overrides(spec, sched)
    assert sft_knobs(spec, sched)["schedule"]["verl"].divergence
    with pytest.raises(SpecError) as e:
        spec_with("sft.batch_size=4", "sft.micro_batch_size=3")
    assert str(e.value).startswith("sft.micro_batch_size: 3 does not divide") and "\n" not in str(e.value)


@pytest.mark.trl
def test_cli_plan_prints_the_table(model_dir, tmp_path):
    from typer.testing import CliRunner

    from twinrun.cli import app

    res = CliRunner().invoke(app, ["sft", str(SPEC), "--data", str(GOLD), "--plan", "--cache",
                                   str(Path(model_dir).parent)])
    assert res.exit_code == 0, res.output
    assert "knobs (neutral -> native)" in res.output and "per-step tokens" in res.output
    assert "data.train_batch_size=2" in res.output and "learning_rate=0.0001" in res.output
    res = CliRunner().invoke(app, ["sft", str(SPEC), "--data", str(GOLD), "--backend", "trl", "--cache",
                                   str(Path(model_dir).parent)])
    assert isinstance(res.exception, TwinrunError) and "--out: missing" in str(res.exception)


STUDY = REPO / "experiments" / "sft-sciworld-qwen3-1.7b.yaml"


def test_the_study_recipe_plans_192_equal_steps_before_the_data_exists():
    """Issue 15 item 5: 2,059 episodes, batch 32 -> 64 steps per epoch (11 sequences outside a full batch),
    3 epochs = 192 steps, 10% warmup = 20 steps, lr 1e-5, weight decay 0, fp32, max length 8,192, both backends."""
    from twinrun.backends.sft_plan import plan_without_data, render_plan

    plan = plan_without_data(load_spec(STUDY, []), 2059)
    s = plan.schedule
    assert (s.steps_per_epoch, s.total_steps, s.warmup_steps, s.dropped_per_epoch) == (64, 192, 20, 11)
    assert plan.divergent_knobs() == []
    trl, verl = plan.native["trl"], plan.native["verl"]
    assert (trl["max_steps"], trl["learning_rate"], trl["weight_decay"], trl["warmup_steps"]) == (192, 1e-5, 0.0, 20)
    assert trl["per_device_train_batch_size"] * trl["gradient_accumulation_steps"] == 32 and not trl["bf16"]
    assert trl["lr_scheduler_type"] == "cosine" and trl["save_strategy"] == "epoch" and trl["max_length"] == 8192
    assert (verl["trainer.total_training_steps"], verl["data.train_batch_size"], verl["optim.lr_warmup_steps"]) == (
        192, 32, 20)
    assert verl["optim.lr"] == 1e-5 and verl["optim.weight_decay"] == 0.0 and verl["engine.dtype"] == "float32"
    assert verl["trainer.save_freq"] == "after_each_epoch" and verl["data.max_length"] == 8192
    assert "64 steps/epoch, 192 steps, warmup 20" in render_plan(plan)


def test_cli_plan_without_data_needs_the_episode_count():
    from typer.testing import CliRunner

    from twinrun.cli import app

    res = CliRunner().invoke(app, ["sft", str(STUDY), "--plan", "--episodes", "2059"])
    assert res.exit_code == 0, res.output
    assert "192 steps" in res.output and "32 sequences in both backends" in res.output


@pytest.mark.trl
def test_only_successful_keeps_verified_successes(model_dir):
    from twinrun.backends.sft_plan import prepare_sft

    spec = spec_with("sft.only_successful=true")
    prepared = prepare_sft(spec, cache_dir=Path(model_dir).parent)
    assert sorted(prepared.dataset.ids) == ["sciworld/find-non-living-thing/133/gold-path",
                                            "sciworld/find-non-living-thing/56/gold-path"]
    assert prepared.plan.dropped_unsuccessful == 2
    assert prepare_sft(spec_with(), cache_dir=Path(model_dir).parent).plan.dropped_unsuccessful == 0
