"""The verl backend end to end on 2 CPU cores: experiments/smoke-cpu.yaml through verl 0.9.1's own trainer
(`verl.trainer.main_ppo`, v1 sync trainer, FSDP2 actor on gloo) with the tiny curator, the out-of-tree
transformers rollout, the curator agent loop, core's estimator, the scripted executor and real ALFWorld games. The
curator's turns are forced to valid curate calls (twinrun/models/forced_turns.py), so what these plumbing tests
check does not depend on which tokens the tiny model samples on this CPU (issue 34).

Checks issue 7's "done when": >= 3 steps and >= 2 checkpoints, per-step counts equal plan's (and so the TRL
backend's), the run directory the TRL backend writes, HF-loadable checkpoints, and --resume (refusing a changed
config; continuing after the last checkpoint)."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("verl")
pytest.importorskip("ray")

from twinrun.core.errors import TwinrunError  # noqa: E402
from twinrun.core.records import RunPaths, StepMetrics, read_jsonl  # noqa: E402
from twinrun.core.spec import load_spec  # noqa: E402
from twinrun.testing.tracker_files import (TEST_PROJECT, check_tracker_matches_metrics, check_wandb_training_run,
                                           tensorboard_scalars, tracked)  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.verl, pytest.mark.alfworld, pytest.mark.sampling]

# this file trains the accumulated shape (one sequence per rollout); per_position: test_*_per_position.py
ACCUMULATED = ["curator.context=accumulated", "checkpoint_every=2"]  # the demo checkpoints every step; these tests resume from step 2


@pytest.fixture(scope="module")
def arm(repo_root, forced_curator):
    """The overrides every run here trains: the accumulated shape, and the tiny curator with its turns forced to
    valid curate calls (conftest ``forced_curator``), so the plumbing checked here holds on every CPU (issue 34)."""
    folder = forced_curator(load_spec(repo_root / "experiments" / "smoke-cpu.yaml", ACCUMULATED))
    return [*ACCUMULATED, f"curator.model={folder}"]


@pytest.fixture(scope="module")
def smoke(repo_root, arm):
    return load_spec(repo_root / "experiments" / "smoke-cpu.yaml", arm)


@pytest.fixture(scope="module")
def console():
    """(line, whether verl's child process was running when the line was printed)"""
    return []


def _verl_child_running() -> bool:
    import psutil

    return any("verl.trainer.main_ppo" in " ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)
               if p.is_running() and p.status() != psutil.STATUS_ZOMBIE)


@pytest.fixture(scope="module")
def smoke_run(smoke, cache_dir, alfworld_data, tmp_path_factory, console):
    """The smoke arm, tracked in wandb offline mode (issue 18), its console lines recorded."""
    from twinrun.backends.verl.train import train

    root = tmp_path_factory.mktemp("runs")
    out = root / "smoke-verl"
    summary = train(tracked(smoke, "wandb", root / "tracking"), out, resume=False, cache_dir=cache_dir,
                    log=lambda line: console.append((line, _verl_child_running())))
    return out, summary


def test_smoke_trains_three_steps_with_plans_counts(smoke, smoke_run):
    from twinrun.backends.verl.compile import compile_spec
    from twinrun.app.plan import build_plan

    out, summary = smoke_run
    plan = build_plan(smoke)
    assert plan["counts_equal"], plan  # verl's counts are TRL's
    counts = compile_spec(smoke).counts
    rows = list(read_jsonl(RunPaths(out).metrics))
    assert [r["step"] for r in rows] == list(range(1, smoke.steps + 1)) and smoke.steps >= 3
    for r in rows:
        m = StepMetrics.model_validate(r)
        assert m.backend == "verl"
        assert m.curation_rollouts == counts["curation_trajectories"]
        assert m.executor_episodes == counts["executor_episodes"]
        assert m.optimizer_updates == counts["optimizer_updates"]
        assert m.positions_measured_min is not None and m.positions_measured_min >= 1
        assert m.reward_mean is not None and set(m.reward_terms) == {"r_task", "r_fc", "r_cnt", "r_comp"}
        assert m.grad_norm is not None and m.entropy is not None and m.completion_length_mean
        assert {"rollout", "update", "step"} <= set(m.wall_s)
        assert m.provenance.spec_hash == smoke.spec_hash() and m.provenance.framework_version == "0.9.1"
    assert sum(r["tool_calls"] for r in rows) > 0, "the warm-started curator made no tool call"

    paths = RunPaths(out)
    rollouts = list(read_jsonl(paths.rollouts))
    assert len(rollouts) == smoke.steps * counts["curation_trajectories"]
    for s in range(smoke.steps):  # each step: groups_per_step groups x rollouts_per_group distinct rollouts
        keys = [(r["group_id"], r["rollout_index"]) for r in rollouts if r["step"] == s]
        assert len(set(keys)) == len(keys) == counts["curation_trajectories"]
        assert len({g for g, _ in keys}) == smoke.batch.groups_per_step
    assert sum(r["ops_applied"] for r in rollouts) > 0, "no curate operation reached a skill repo"
    # the forced turns' operations all apply (insert, update, delete): every turn made reached its rollout's repo
    g = smoke.environment.group_size
    assert [r["ops_applied"] for r in rollouts] == [g - r["turns_missing"] for r in rollouts]
    episodes = list(read_jsonl(paths.episodes))
    assert len(episodes) == sum(r["executor_episodes"] for r in rows)


def test_run_directory_matches_the_trl_layout_and_checkpoints_load(smoke, smoke_run):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, summary = smoke_run
    paths = RunPaths(out)
    for f in (paths.spec, paths.metrics, paths.rollouts, paths.episodes, out / "resolved_config.json"):
        assert f.is_file(), f
    assert summary["checkpoints"] == [2, 3]  # checkpoint_every 2, and the last step
    resolved = json.loads((out / "resolved_config.json").read_text())
    assert resolved["spec_hash"] == smoke.spec_hash() and resolved["framework"] == "verl==0.9.1"
    weights = []
    for step in summary["checkpoints"]:
        ckpt = paths.checkpoint(step)
        model = AutoModelForCausalLM.from_pretrained(ckpt)
        tok = AutoTokenizer.from_pretrained(ckpt)
        assert tok.chat_template and model.config.model_type == "qwen3"
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    base = AutoModelForCausalLM.from_pretrained(json.loads((out / "resolved_config.json").read_text())
                                                ["overrides"]["actor_rollout_ref.model.path"])
    w0 = torch.cat([p.detach().flatten() for p in base.parameters()])
    assert not torch.equal(w0, weights[0]) and not torch.equal(weights[0], weights[1]), "training changed nothing"



def test_checkpoints_hold_the_master_weights_dtype(smoke, smoke_run, assert_checkpoints_at_master_dtype):
    """A checkpoint is saved at the precision it was trained in: fp32 master weights (plan's checkpoint_dtype row),
    whatever the compute dtype, and config.json says so (from_pretrained(dtype="auto") reads it). verl's own merger casts every shard to bf16 (fsdp_model_merger.py): this was red before
    checkpoints.py kept the shards' dtype."""
    from twinrun.backends.verl.compile import compile_spec

    out, summary = smoke_run
    assert compile_spec(smoke).knobs["checkpoint_dtype"].value == "fp32"
    assert_checkpoints_at_master_dtype(out, summary)

def test_wandb_offline_run_holds_the_metrics_and_the_console_shows_each_step_live(smoke, smoke_run, console):
    """Issue 18: the tracker gets metrics.jsonl's names and values (and verl's own under verl/), in a run grouped
    by the arm and tagged with backend, seed and spec hash; each step's line is printed while verl's child process
    is still running (read from its log as it is written, not after it exits)."""
    out, _ = smoke_run
    rows = list(read_jsonl(RunPaths(out).metrics))
    check_wandb_training_run(out.parent / "tracking", smoke, "verl", rows)
    steps = [(line, live) for line, live in console if line.startswith("verl: step ")]
    assert [line.split()[2] for line, _ in steps] == [f"{r['step']}/{smoke.steps}" for r in rows]
    assert all(live for _, live in steps[:-1]), steps  # the last step may be read after the child exits
    assert f"episodes {rows[0]['executor_episodes']}" in steps[0][0]


def test_resume_refuses_a_changed_config(smoke, smoke_run, cache_dir):
    from twinrun.backends.verl.train import train

    out, _ = smoke_run
    changed = smoke.model_copy(update={"optimizer": smoke.optimizer.model_copy(update={"lr": 2e-5})})
    with pytest.raises(TwinrunError, match="different spec"):
        train(changed, out, resume=True, cache_dir=cache_dir)
    with pytest.raises(TwinrunError, match="not empty"):
        train(smoke, out, resume=False, cache_dir=cache_dir)


def test_resume_continues_after_the_last_checkpoint(smoke, smoke_run, cache_dir, tmp_path):
    """A crash after step 2's checkpoint: step 3 is trained again from verl's step-2 state."""
    from twinrun.backends.verl.train import train

    src, _ = smoke_run
    out = tmp_path / "resumed"
    shutil.copytree(src, out)
    shards = out / "verl" / "ckpt"
    shutil.rmtree(shards / "global_step_3")
    (shards / "latest_checkpointed_iteration.txt").write_text("2")
    shutil.rmtree(RunPaths(out).checkpoint(3))
    # the resumed run reports to tensorboard instead (a resume may change the tracker, not the training)
    summary = train(tracked(smoke, "tensorboard", tmp_path / "tb"), out, resume=True, cache_dir=cache_dir)
    assert summary["resumed_from"] == 2 and summary["checkpoints"] == [2, 3]
    paths = RunPaths(out)
    rows = list(read_jsonl(paths.metrics))
    assert [r["step"] for r in rows] == [1, 2, 3]
    # the re-run step's tensorboard scalars are its metrics.jsonl row, and verl's own metrics under verl/
    logdir = tmp_path / "tb" / TEST_PROJECT / smoke.name / f"{smoke.name}-verl-seed{smoke.seed}"
    check_tracker_matches_metrics(tensorboard_scalars(logdir), rows[-1:], native_prefix="verl/")
    logs = sorted((out / "verl" / "logs").glob("verl-metrics.attempt-*.jsonl"))
    assert len(logs) == 2 and [json.loads(line)["step"] for line in logs[1].read_text().splitlines()] == [3]
    rollouts = list(read_jsonl(paths.rollouts))
    assert [sum(1 for r in rollouts if r["step"] == s) for s in range(3)] == [smoke.batch.trajectories] * 3
    assert len(list(read_jsonl(paths.episodes))) == sum(r["executor_episodes"] for r in rows)


def test_gigpo_trains_and_reports_its_anchor_groups(smoke, arm, cache_dir, tmp_path):
    """estimator: gigpo through main_ppo with 4 rollouts per group: metrics.jsonl carries the anchor-group shares
    of the rows core's estimator got (the default anchor), equal to those rebuilt from rollouts.jsonl."""
    from twinrun.backends.verl.train import train
    from twinrun.core.advantages import estimator_config
    from twinrun.core.advantages.anchors import anchor_stats, step_rows

    spec = load_spec(smoke.source_dir / "smoke-cpu.yaml", arm +
                     ["algorithm.estimator=gigpo", "steps=1", "checkpoint_every=1", "batch.rollouts_per_group=4"])
    train(spec, tmp_path / "run", resume=False, cache_dir=cache_dir)
    (row,) = read_jsonl(RunPaths(tmp_path / "run").metrics)
    rollouts = list(read_jsonl(RunPaths(tmp_path / "run").rollouts))
    cfg = estimator_config(spec.algorithm)
    stats = {k: anchor_stats(cfg, step_rows(rollouts, kind=k)) for k in ("position_outcome", "position", "exact_input")}
    print("verl smoke gigpo anchors:", json.dumps(stats))
    assert row["anchor_singleton_share"] == stats["position_outcome"]["anchor_singleton_share"] is not None
    assert row["step_adv_nonzero_share"] == stats["position_outcome"]["step_adv_nonzero_share"] is not None
    assert row["turns_missing"] == sum(r["turns_missing"] for r in rollouts)
