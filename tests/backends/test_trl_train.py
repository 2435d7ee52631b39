"""The TRL backend end to end on CPU: experiments/smoke-cpu.yaml with the tiny curator, the scripted executor and
real ALFWorld games. The curator's turns are forced to valid curate calls (twinrun/models/forced_turns.py), so what
these plumbing tests check does not depend on which tokens the tiny model samples on this CPU (issue 34). Checks
the invariants of issue 6: per-step counts equal `plan`'s, positions measured, tool calls made, the neutral metrics
schema, loadable checkpoints, core advantages = TRL's own where the semantics coincide, and --resume from the last
complete checkpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("trl")

from twinrun.core.errors import TwinrunError
from twinrun.core.records import RunPaths, StepMetrics, read_jsonl
from twinrun.core.spec import load_spec
from twinrun.testing.tracker_files import (TEST_PROJECT, check_tracker_matches_metrics, check_wandb_training_run,
                                           tensorboard_scalars, tracked)

pytestmark = [pytest.mark.slow, pytest.mark.trl, pytest.mark.alfworld, pytest.mark.sampling]

# this file trains the accumulated shape (one sequence per rollout); per_position: test_*_per_position.py
ACCUMULATED = ["curator.context=accumulated", "checkpoint_every=2"]  # the demo checkpoints every step; two checkpoints suffice here


@pytest.fixture(scope="module")
def arm(repo_root, forced_curator):
    """The overrides every run here trains: the accumulated shape, and the tiny curator with its turns forced to
    valid curate calls (conftest ``forced_curator``): these tests check plumbing, which must not hang on whether
    the tiny model samples a call that applies (issue 34: on an AVX-512 CPU none of its calls did)."""
    folder = forced_curator(load_spec(repo_root / "experiments" / "smoke-cpu.yaml", ACCUMULATED))
    return [*ACCUMULATED, f"curator.model={folder}"]


@pytest.fixture(scope="module")
def smoke(repo_root, arm):
    return load_spec(repo_root / "experiments" / "smoke-cpu.yaml", arm)


@pytest.fixture(scope="module")
def console():
    return []


@pytest.fixture(scope="module")
def smoke_run(smoke, cache_dir, alfworld_data, tmp_path_factory, console):
    """The smoke arm, tracked in wandb offline mode (issue 18)."""
    from twinrun.backends.trl.train import train

    root = tmp_path_factory.mktemp("runs")
    out = root / "smoke"
    summary = train(tracked(smoke, "wandb", root / "tracking"), out, resume=False, cache_dir=cache_dir,
                    data_root=alfworld_data, log=console.append)
    return out, summary


def _batches(out: Path) -> list[dict]:
    return [r for r in read_jsonl(out / "trl_log.jsonl") if r["kind"] == "batch"]


def test_smoke_trains_three_steps_with_plans_counts(smoke, smoke_run):
    from twinrun.backends.trl.compile import compile_spec

    out, summary = smoke_run
    counts = compile_spec(smoke).counts
    rows = list(read_jsonl(RunPaths(out).metrics))
    assert [r["step"] for r in rows] == list(range(1, smoke.steps + 1)) and smoke.steps >= 3
    for r in rows:
        m = StepMetrics.model_validate(r)  # the neutral schema
        assert m.backend == "trl"
        assert m.curation_rollouts == counts["curation_trajectories"]
        assert m.executor_episodes == counts["executor_episodes"]
        assert m.optimizer_updates == counts["optimizer_updates"]
        assert m.positions_measured_min is not None and m.positions_measured_min >= 1
        assert m.reward_mean is not None and set(m.reward_terms) == {"r_task", "r_fc", "r_cnt", "r_comp"}
        assert m.grad_norm is not None and m.entropy is not None and m.completion_length_mean
        assert {"rollout", "update", "step"} <= set(m.wall_s)
        assert m.provenance.spec_hash == smoke.spec_hash()
    assert sum(r["tool_calls"] for r in rows) > 0, "the warm-started curator made no tool call"

    rollouts = list(read_jsonl(RunPaths(out).rollouts))
    assert len(rollouts) == smoke.steps * counts["curation_trajectories"]
    assert sum(r["ops_applied"] for r in rollouts) > 0, "no curate operation reached a skill repo"
    # the forced turns' operations all apply (insert, update, delete): every turn made reached its rollout's repo
    g = smoke.environment.group_size
    assert [r["ops_applied"] for r in rollouts] == [g - r["turns_missing"] for r in rollouts]
    episodes = list(read_jsonl(RunPaths(out).episodes))
    assert len(episodes) == sum(r["executor_episodes"] for r in rows)


def test_checkpoints_load_and_config_is_recorded(smoke, smoke_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, summary = smoke_run
    paths = RunPaths(out)
    expected = sorted({s for s in range(smoke.checkpoint_every, smoke.steps + 1, smoke.checkpoint_every)} | {smoke.steps})
    assert summary["checkpoints"] == expected and len(expected) >= 2
    for step in expected:
        model = AutoModelForCausalLM.from_pretrained(paths.checkpoint(step))
        AutoTokenizer.from_pretrained(paths.checkpoint(step))
        assert model.config.model_type == "qwen3"
    cfg = json.loads((out / "resolved_config.json").read_text())
    assert cfg["max_steps"] == smoke.steps and cfg["num_generations"] == smoke.batch.rollouts_per_group
    assert cfg["loss_type"] and cfg["lr_scheduler_type"] == "constant" and cfg["use_cpu"] is True
    assert paths.spec.exists()


def test_core_advantages_equal_trls_own_for_the_smoke_semantics(smoke, smoke_run):
    # smoke: grpo with scale none -> r - group mean on both sides (no epsilon, unmeasured excluded -> 0)
    out, _ = smoke_run
    batches = _batches(out)
    assert len(batches) == smoke.steps
    for b in batches:
        assert b["advantages"]["core"] == pytest.approx(b["advantages"]["trl"], abs=1e-6)
        assert b["prefetch_mismatches"] == 0


def test_run_folder_is_never_overwritten(smoke, arm, smoke_run, cache_dir, alfworld_data):
    from twinrun.backends.trl.train import train

    out, _ = smoke_run
    with pytest.raises(TwinrunError, match="not empty"):
        train(smoke, out, resume=False, cache_dir=cache_dir, data_root=alfworld_data)
    changed = load_spec(Path(smoke.source_dir) / "smoke-cpu.yaml", arm + ["optimizer.lr=2e-5"])
    with pytest.raises(TwinrunError, match="different spec"):
        train(changed, out, resume=True, cache_dir=cache_dir, data_root=alfworld_data)


def test_resume_continues_from_the_last_complete_checkpoint(smoke, smoke_run, cache_dir, alfworld_data, tmp_path):
    from twinrun.backends.trl.train import train

    src, _ = smoke_run
    out = tmp_path / "resumed"
    shutil.copytree(src, out)
    paths = RunPaths(out)
    # simulate a crash during the last step: its checkpoints never completed
    last = smoke.steps
    shutil.rmtree(paths.checkpoint(last))
    shutil.rmtree(out / "trl" / f"checkpoint-{last}")
    # the resumed run reports to tensorboard instead (a resume may change the tracker, not the training)
    summary = train(tracked(smoke, "tensorboard", tmp_path / "tb"), out, resume=True, cache_dir=cache_dir,
                    data_root=alfworld_data)
    assert summary["resumed_from"] == last - 1
    rows = list(read_jsonl(paths.metrics))
    assert [r["step"] for r in rows] == list(range(1, last + 1))  # step `last` re-run once, not duplicated
    # the re-run step's tensorboard scalars are its metrics.jsonl row, and TRL's own metrics under trl/
    logdir = tmp_path / "tb" / TEST_PROJECT / smoke.name / f"{smoke.name}-trl-seed{smoke.seed}"
    check_tracker_matches_metrics(tensorboard_scalars(logdir), rows[-1:], native_prefix="trl/")
    assert (paths.checkpoint(last) / "config.json").is_file()
    assert len(list(read_jsonl(paths.rollouts))) == len(list(read_jsonl(RunPaths(src).rollouts)))
    # and a finished run resumes to nothing
    assert train(smoke, out, resume=True, cache_dir=cache_dir, data_root=alfworld_data)["resumed_from"] == last



def test_checkpoints_hold_the_master_weights_dtype(smoke, smoke_run, assert_checkpoints_at_master_dtype):
    """A checkpoint is saved at the precision it was trained in: fp32 master weights (plan's checkpoint_dtype row),
    whatever the compute dtype, and config.json says so (from_pretrained(dtype="auto") reads it)."""
    from twinrun.backends.trl.compile import compile_spec

    out, summary = smoke_run
    assert compile_spec(smoke).knobs["checkpoint_dtype"].value == "fp32"
    assert_checkpoints_at_master_dtype(out, summary)

def test_wandb_offline_run_holds_the_metrics_and_the_console_shows_each_step(smoke, smoke_run, console):
    """Issue 18: the tracker gets metrics.jsonl's names and values (and TRL's own under trl/), in a run grouped by
    the arm and tagged with backend, seed and spec hash; the console has one line per step."""
    out, _ = smoke_run
    rows = list(read_jsonl(RunPaths(out).metrics))
    check_wandb_training_run(out.parent / "tracking", smoke, "trl", rows)
    lines = [x for x in console if x.startswith("trl: step ")]
    assert [x.split()[2] for x in lines] == [f"{r['step']}/{smoke.steps}" for r in rows]
    assert f"episodes {rows[0]['executor_episodes']}" in lines[0]


def test_trl_preset_reproduces_trls_group_scaled_advantages(smoke, arm, cache_dir, alfworld_data, tmp_path):
    """scale_rewards='group' (mean and Bessel std, +1e-4): core's `trl` preset must give TRL's exact numbers."""
    from twinrun.backends.trl.train import train
    from twinrun.core.advantages import PRESETS

    spec = load_spec(Path(smoke.source_dir) / "smoke-cpu.yaml", arm +
                     ["algorithm.scale=group", "steps=1", "checkpoint_every=1"])
    train(spec, tmp_path / "run", cache_dir=cache_dir, data_root=alfworld_data, estimator=PRESETS["trl"].config)
    (batch,) = _batches(tmp_path / "run")
    assert batch["advantages"]["estimator"]["eps"] == 1e-4
    # TRL normalises the rewards in float32; where a group's rewards nearly tie (std ~ eps) their rounding
    # (2^-24 |r| each) moves (r - mean) / (std + eps) by up to ~|r| 2^-22 eps / (std + eps)^2 (measured: 2.4e-5
    # at std 9.4e-5). The bound stays 1e-5 for groups whose rewards differ; a wrong eps or ddof moves far more.
    import numpy as np

    rollouts = [r for r in read_jsonl(RunPaths(tmp_path / "run").rollouts) if r.get("kind") == "curation_rollout"]
    totals: dict[str, list[float]] = {}
    for r in rollouts:
        totals.setdefault(r["group_id"], []).append(r["reward"]["total"])
    std = min(float(np.std(v, ddof=1)) for v in totals.values())
    top = max(abs(x) for v in totals.values() for x in v)
    tol = 1e-5 + top * 2.0 ** -22 * 1e-4 / (std + 1e-4) ** 2
    assert batch["advantages"]["core"] == pytest.approx(batch["advantages"]["trl"], abs=tol), tol


def test_gigpo_trains_with_per_token_advantages(smoke, arm, cache_dir, alfworld_data, tmp_path):
    """GiGPO's (B, T) advantages (per-position spans from TRL's tool mask) go through TRL's real loss."""
    from twinrun.backends.trl.train import train

    from twinrun.core.advantages import estimator_config
    from twinrun.core.advantages.anchors import anchor_stats, step_rows

    spec = load_spec(Path(smoke.source_dir) / "smoke-cpu.yaml", arm +
                     ["algorithm.estimator=gigpo", "steps=1", "checkpoint_every=1", "batch.rollouts_per_group=4"])
    summary = train(spec, tmp_path / "run", cache_dir=cache_dir, data_root=alfworld_data)
    assert summary["checkpoints"] == [1]
    (row,) = read_jsonl(RunPaths(tmp_path / "run").metrics)
    assert StepMetrics.model_validate(row).grad_norm is not None
    # the anchor-group shares in metrics.jsonl are those of the rows the estimator got (default anchor)
    rollouts = list(read_jsonl(RunPaths(tmp_path / "run").rollouts))
    cfg = estimator_config(spec.algorithm)
    stats = {k: anchor_stats(cfg, step_rows(rollouts, kind=k)) for k in ("position_outcome", "position", "exact_input")}
    print("trl smoke gigpo anchors:", json.dumps(stats))
    assert row["anchor_singleton_share"] == stats["position_outcome"]["anchor_singleton_share"] is not None
    assert row["step_adv_nonzero_share"] == stats["position_outcome"]["step_adv_nonzero_share"] is not None
    (batch,) = _batches(tmp_path / "run")
    assert batch["advantages"]["core"] is None  # per-token: not one number per rollout
    assert batch["advantages"]["estimator"]["estimator"] == "gigpo"


def test_a_step_with_too_many_missing_turns_stops_before_its_update(smoke, arm, cache_dir, alfworld_data, tmp_path):
    """curator.max_missing_turn_share: a completion cap no tool result fits under leaves positions 2..|G| without a
    curator turn in every rollout; the step stops with a one-line error before TRL's update (records kept)."""
    from twinrun.backends.trl.train import train
    from twinrun.core.advantages.step_health import MissingTurnsError

    spec = load_spec(Path(smoke.source_dir) / "smoke-cpu.yaml", arm + [
        "steps=1", "checkpoint_every=1", "batch.groups_per_step=1", "environment.group_size=2",
        "curator.max_completion_tokens=96", "curator.max_missing_turn_share=0.4"])
    out = tmp_path / "run"
    with pytest.raises(MissingTurnsError, match=r"step 1: \d+% of this step's positions had no curator turn"):
        train(spec, out, cache_dir=cache_dir, data_root=alfworld_data)
    rollouts = list(read_jsonl(RunPaths(out).rollouts))
    assert len(rollouts) == spec.batch.trajectories and all(r["turns_missing"] >= 1 for r in rollouts)
    assert not RunPaths(out).checkpoints.exists()  # no update, no checkpoint


def test_the_update_follows_cores_advantages(smoke, arm, cache_dir, alfworld_data, tmp_path, monkeypatch):
    """Weight decay 0, KL 0: with every advantage forced to 0 (a test estimator patched in for core's), TRL's update
    leaves every weight unchanged; with core's advantages the weights move. Fails if the trainer stops handing
    core's advantages to TRL's loss (TRL's own group-normalised advantages are not all 0)."""
    import os

    import numpy as np
    from transformers import AutoModelForCausalLM

    import twinrun.backends.trl.trainer as trainer_mod
    from twinrun.backends.trl.train import train
    from twinrun.models.warmstart import resolve_curator_model

    spec = load_spec(Path(smoke.source_dir) / "smoke-cpu.yaml", arm +
                     ["steps=1", "checkpoint_every=1", "optimizer.weight_decay=0.0", "batch.groups_per_step=1",
                      "batch.rollouts_per_group=4"])
    init = AutoModelForCausalLM.from_pretrained(
        resolve_curator_model(spec, cache_dir, data_root=alfworld_data, environ=dict(os.environ))).state_dict()

    def moved(run: Path) -> float:
        after = AutoModelForCausalLM.from_pretrained(RunPaths(run).checkpoint(1)).state_dict()
        return max(float((after[k].float() - init[k].float()).abs().max()) for k in init)

    core = trainer_mod.compute_advantages
    monkeypatch.setattr(trainer_mod, "compute_advantages", lambda *a, **k: np.zeros_like(core(*a, **k)))
    train(spec, tmp_path / "zero", cache_dir=cache_dir, data_root=alfworld_data)
    (batch,) = _batches(tmp_path / "zero")
    assert any(abs(a) > 1e-6 for a in batch["advantages"]["trl"])  # TRL's own would have moved the weights
    assert moved(tmp_path / "zero") == 0.0
    monkeypatch.setattr(trainer_mod, "compute_advantages", core)
    train(spec, tmp_path / "core", cache_dir=cache_dir, data_root=alfworld_data)
    (batch,) = _batches(tmp_path / "core")
    assert any(abs(a) > 1e-6 for a in batch["advantages"]["core"]) and moved(tmp_path / "core") > 0.0


def test_gigpo_loss_weighs_each_token_with_its_positions_core_advantage(smoke, arm, cache_dir, alfworld_data,
                                                                        tmp_path, monkeypatch):
    """estimator: gigpo, one TRL step: the ``advantages`` GRPOTrainer's ``_compute_loss`` receives are per token,
    and on every loss-carrying token of every curator turn they equal core's advantage of the position that turn
    carries, rebuilt here from rollouts.jsonl alone (core's per-position advantages, `core.training_rows`; the
    turn-to-position rule, `core.policy_input.segment_positions`, from each position's tool calls). Fails if the
    trainer stops handing core's per-token advantages to the loss (TRL's own are one scalar per rollout)."""
    import numpy as np
    import torch

    from twinrun.core.advantages.token_advantages import model_segments
    from twinrun.backends.trl.train import train
    from twinrun.backends.trl.trainer import TwinrunGRPOTrainer
    from twinrun.core.curation.policy_input import segment_positions
    from twinrun.core.advantages.training_rows import rollout_rows, row_advantages

    spec = load_spec(Path(smoke.source_dir) / "smoke-cpu.yaml",
                     arm + ["steps=1", "checkpoint_every=1", "algorithm.estimator=gigpo",
                                    "batch.groups_per_step=1", "batch.rollouts_per_group=4"])
    seen: list[tuple[list[int], list[float], list[int]]] = []
    original = TwinrunGRPOTrainer._compute_loss

    def observed(self, model, inputs):
        mask = inputs["completion_mask"] * inputs.get("tool_mask", torch.ones_like(inputs["completion_mask"]))
        adv = inputs["advantages"]
        assert adv.dim() == 2, "the loss got one advantage per rollout, not per token"
        for i in range(adv.shape[0]):
            n = int(inputs["completion_mask"][i].sum())
            seen.append((inputs["completion_ids"][i, :n].tolist(), adv[i, :n].tolist(), mask[i, :n].tolist()))
        return original(self, model, inputs)

    monkeypatch.setattr(TwinrunGRPOTrainer, "_compute_loss", observed)
    out = tmp_path / "gigpo"
    train(spec, out, cache_dir=cache_dir, data_root=alfworld_data)

    records = list(read_jsonl(RunPaths(out).rollouts))
    scores = [s for r in records
              for s in rollout_rows(r["group_id"], str(r["rollout_index"]), total=r["reward"]["total"],
                                    step_rewards=r["step_rewards"], anchors=r["anchors"],
                                    position_valid=[not p["no_valid_call"] for p in r["positions"]])]
    per_position = dict(zip([(s.rollout, s.position) for s in scores], row_advantages(spec.algorithm, scores)))
    assert any(abs(a) > 1e-6 for a in per_position.values())
    by_tokens = {tuple(r["sequences"][0]["completion_ids"]): r for r in records}
    assert len(seen) == len(records) == 4
    turns_checked = 0
    for ids, adv, mask in seen:
        rec = by_tokens[tuple(ids)]  # the row the loss saw is a rollout core recorded
        assert mask == rec["sequences"][0]["completion_mask"]
        g = len(rec["positions"])
        calls = [(None, p["index"]) for p in rec["positions"] for _ in range(p["tool_calls"])]
        (spans,) = model_segments(np.array([mask]))
        for (start, end), positions in zip(spans, segment_positions(len(spans), calls, g), strict=True):
            want = float(np.mean([per_position[(str(rec["rollout_index"]), p)] for p in positions]))
            np.testing.assert_allclose(adv[start:end], want, atol=1e-6)
            turns_checked += 1
    assert turns_checked >= len(seen)
