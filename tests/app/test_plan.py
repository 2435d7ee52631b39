"""`twinrun plan`: both backends compiled without importing either framework; counts refused when they differ."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from twinrun.core.spec import load_spec
from twinrun.app.plan import build_plan

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
PAPER = EXPERIMENTS / "skillos-alfworld-qwen3-8b.yaml"
SMOKE = EXPERIMENTS / "smoke-cpu.yaml"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twinrun.cli", *args], capture_output=True, text=True, timeout=120)


def test_paper_arm_counts_are_equal_and_every_knob_has_a_status():
    plan = build_plan(load_spec(PAPER))
    assert plan["counts_equal"]
    trl, verl = plan["backends"]["trl"]["counts"], plan["backends"]["verl"]["counts"]
    assert trl == verl
    # 32 task groups x 8 rollouts; |G| = 10 executor episodes per rollout; per_position (the paper's curator):
    # one training row per (rollout, position), all 2,560 in the one update per step
    assert trl == {
        "curation_trajectories": 256,
        "executor_episodes": 2560,
        "training_rows": 2560,
        "optimizer_updates": 1,
        "sequences_per_update": 2560,
        "training_steps": 60,
    }
    for row in plan["knobs"]:
        assert row["status"] in ("equal", "divergent")
        if row["status"] == "divergent":
            assert row["why"], row


def test_trl_pins_the_defaults_that_bit_the_earlier_reproduction():
    cfg = build_plan(load_spec(PAPER))["backends"]["trl"]["config"]
    assert cfg["loss_type"] == "dapo"  # pinned explicitly, not left to TRL's default
    assert cfg["lr_scheduler_type"] == "constant"  # TRL's default is linear decay
    # per_position: 2,560 rows (256 rollouts x 10 positions) per step, num_generations = 8 x 10 slots per group
    assert cfg["steps_per_generation"] == 160 and cfg["gradient_accumulation_steps"] == 160
    assert cfg["per_device_train_batch_size"] * 16 * cfg["steps_per_generation"] == 2560
    assert cfg["num_generations"] == 80
    assert cfg["delta"] == 3.0 and cfg["epsilon"] == 0.2 and cfg["epsilon_high"] == 0.2
    assert "generation_batch_size" not in cfg  # TRL refuses both; steps_per_generation is the one pinned
    verl = build_plan(load_spec(PAPER))["backends"]["verl"]["config"]
    assert verl["data.train_batch_size"] == 32 and verl["actor_rollout_ref.rollout.n"] == 8
    assert verl["actor_rollout_ref.actor.entropy_coeff"] == 0.0
    assert verl["actor_rollout_ref.actor.clip_ratio_c"] == 3.0
    assert verl["algorithm.adv_estimator"] == "twinrun_grpo"


def test_the_64_vs_32_mistake_is_refused():
    # the earlier reproduction's verl run: train_batch_size=8 x n=8 = 64 against TRL's 32
    spec = load_spec(PAPER, ["batch.groups_per_step=4", "overrides.verl={data.train_batch_size: 8, "
                             "actor_rollout_ref.actor.ppo_mini_batch_size: 8}"])
    plan = build_plan(spec)
    assert not plan["counts_equal"]
    assert "curation_trajectories" in plan["mismatched_counts"]
    assert plan["backends"]["verl"]["counts"]["curation_trajectories"] == 64
    assert plan["backends"]["trl"]["counts"]["curation_trajectories"] == 32


def test_override_that_changes_a_knob_is_shown_divergent():
    spec = load_spec(SMOKE, ["overrides.trl={learning_rate: 0.5}"])
    row = next(r for r in build_plan(spec)["knobs"] if r["name"] == "lr")
    assert row["status"] == "divergent" and "trl realises 0.5" in row["why"]


def test_linear_schedule_is_divergent_on_verl():
    row = next(r for r in build_plan(load_spec(SMOKE, ["optimizer.schedule=linear"]))["knobs"] if r["name"] == "schedule")
    assert row["status"] == "divergent" and "verl" in row["why"]


def test_cli_plan_json_schema_and_exit_codes():
    out = run_cli("plan", str(PAPER), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data["backends"]) == {"trl", "verl"}
    for b in ("trl", "verl"):
        assert {"config", "counts"} <= set(data["backends"][b])
    assert {"name", "neutral", "trl", "verl", "status", "why"} <= set(data["knobs"][0])

    bad = run_cli("plan", str(PAPER), "--set", "overrides.verl={data.train_batch_size: 16, actor_rollout_ref.actor.ppo_mini_batch_size: 16}")
    assert bad.returncode == 2
    assert "per-step counts differ" in bad.stderr

    err = run_cli("plan", str(PAPER), "--set", "optimizer.lr=0")
    assert err.returncode == 2
    assert err.stderr.strip() == "twinrun: error: optimizer.lr: 0.0 must be > 0 (fix: a positive learning rate, paper: 1e-6)"


def test_plan_imports_no_framework():
    code = (
        "import sys; from twinrun.app.plan import build_plan; from twinrun.core.spec import load_spec;"
        f"build_plan(load_spec({str(PAPER)!r}));"
        "bad=[m for m in ('torch','trl','verl','ray','transformers','vllm') if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr


@pytest.mark.parametrize("context,micro,unit", [("accumulated", 3, "4 rollouts"),
                                                ("per_position", 5, "12 rows (one per rollout and position)")])
def test_micro_batch_that_does_not_divide_is_refused(context, micro, unit):
    from twinrun.core.errors import TwinrunError

    with pytest.raises(TwinrunError, match=rf"batch.micro_batch_per_device: {micro} x 1 device.*the {re.escape(unit)}"):
        build_plan(load_spec(SMOKE, [f"batch.micro_batch_per_device={micro}", f"curator.context={context}"]))


@pytest.mark.parametrize("context,rows,per_update,cap", [
    ("per_position", 2560, 2560, 4096),  # one row per (rollout, position); a row's completion is one turn
    ("accumulated", 256, 256, 32768),  # one sequence per rollout; the whole multi-turn completion is capped
])
def test_plan_shows_the_context_shape_rows_and_cap_equal_across_backends(context, rows, per_update, cap):
    plan = build_plan(load_spec(PAPER, [f"curator.context={context}"]))
    assert plan["counts_equal"]
    for b in ("trl", "verl"):
        counts = plan["backends"][b]["counts"]
        assert counts["training_rows"] == rows and counts["sequences_per_update"] == per_update
        assert counts["curation_trajectories"] == 256 and counts["optimizer_updates"] == 1
    knobs = {r["name"]: r for r in plan["knobs"]}
    assert knobs["context"]["status"] == "equal"
    assert knobs["context"]["neutral"] == ("per_position, history 0" if context == "per_position" else "accumulated")
    assert plan["backends"]["trl"]["config"]["max_completion_length"] == cap
    assert plan["backends"]["verl"]["config"]["data.max_response_length"] == cap
    assert knobs["sample_unit"]["neutral"].startswith("one row per" if context == "per_position" else "one sequence")


def test_paper_arm_is_per_position_with_no_history_and_history_needs_per_position():
    from twinrun.core.spec import SpecError

    c = load_spec(PAPER).curator
    assert (c.context, c.history) == ("per_position", 0)
    with pytest.raises(SpecError, match="curator.history: 2 has no meaning with context=accumulated"):
        load_spec(PAPER, ["curator.context=accumulated", "curator.history=2"])
    with pytest.raises(SpecError, match="curator.context"):
        load_spec(PAPER, ["curator.context=markov"])


def test_paper_arm_precision_rows_are_equal_fp32_master_bf16_compute():
    """Precision is part of the arm (issue 29): the paper arm's `precision: bf16` is the compute dtype; both backends
    keep fp32 master weights and save fp32 checkpoints. Red before: verl loaded the actor with model_dtype=bf16
    (AdamW on bf16 weights) and plan had no precision rows."""
    plan = build_plan(load_spec(PAPER))
    rows = {r["name"]: r for r in plan["knobs"]}
    want = {"master_weights": "fp32", "compute_dtype": "bf16"}
    for name, value in want.items():
        assert rows[name]["neutral"] == value and rows[name]["status"] == "equal", rows[name]
    # the one difference left, stated: TRL's ZeRO-3 launch exports DeepSpeed's bf16 consolidation (verl: fp32)
    ckpt = rows["checkpoint_dtype"]
    assert ckpt["neutral"] == "fp32" and ckpt["status"] == "divergent" and "B19" in ckpt["why"]
    assert "trl" in ckpt["why"] and "verl" not in ckpt["why"]
    # on CPU (no DeepSpeed) the same arm's checkpoints are fp32 in both
    cpu = build_plan(load_spec(PAPER, ["resources.nodes=1", "resources.gpus_per_node=0"]))
    assert next(r for r in cpu["knobs"] if r["name"] == "checkpoint_dtype")["status"] == "equal"
    trl, verl = plan["backends"]["trl"]["config"], plan["backends"]["verl"]["config"]
    assert trl["model_init_kwargs"] == {"dtype": "float32"} and trl["bf16"] is True
    assert verl["actor_rollout_ref.actor.fsdp_config.model_dtype"] == "fp32"
    assert verl["actor_rollout_ref.ref.fsdp_config.model_dtype"] == "fp32"
    for engine in ("actor", "ref"):
        mp = verl[f"+actor_rollout_ref.{engine}.fsdp_config.mixed_precision"]
        assert mp == {"param_dtype": "bf16", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}


@pytest.mark.parametrize("override, knob", [
    ("overrides.verl.actor_rollout_ref.actor.fsdp_config.model_dtype=bf16", "master_weights"),
    ("overrides.trl.bf16=false", "compute_dtype"),
    ("overrides.trl.model_init_kwargs.dtype=bfloat16", "checkpoint_dtype"),
])
def test_a_precision_override_on_one_backend_is_shown_divergent(override, knob):
    plan = build_plan(load_spec(PAPER, [override]))
    row = next(r for r in plan["knobs"] if r["name"] == knob)
    assert row["status"] == "divergent", row


def test_cpu_arm_with_bf16_computes_in_bf16_in_both_backends():
    """On CPU too: TRL's bf16 follows the spec (it was forced off on CPU while verl's param_dtype followed it)."""
    plan = build_plan(load_spec(SMOKE, ["curator.precision=bf16"]))
    row = next(r for r in plan["knobs"] if r["name"] == "compute_dtype")
    assert row["status"] == "equal" and row["neutral"] == "bf16"
    assert plan["backends"]["trl"]["config"]["bf16"] is True and plan["backends"]["trl"]["config"]["use_cpu"] is True
