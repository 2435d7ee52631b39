"""The verl backend's run-directory bookkeeping without running verl: verl metric names -> StepMetrics, attempts
after a resume, record truncation, refusing to overwrite or to resume a changed run, the task-group data."""

from __future__ import annotations

import json

import pytest

from twinrun.backends.verl.metrics import VERL_NAMES, read_verl_logs, step_rows
from twinrun.backends.verl.train import (
    RESOLVED_CONFIG,
    VerlRunDirs,
    _prepare_run_dir,
    _truncate_records,
    resolved_config,
    task_group_rows,
)
from twinrun.core.errors import TwinrunError
from twinrun.core.records import JsonlWriter, RunPaths, StepMetrics, read_jsonl
from twinrun.core.spec import load_spec


@pytest.fixture
def spec(repo_root):
    return load_spec(repo_root / "experiments" / "smoke-cpu.yaml")


def _term(name, value, num=None, den=None):
    return {"name": name, "weight": 1.0, "disabled": False, "value": value, "numerator": num, "denominator": den}


def _rollout(step, total, r_task=(1.0, 1, 1), episodes=3, tool_calls=1, turns_missing=0):
    return {
        "step": step, "reward": {"total": total, "r_task": _term("r_task", r_task[0], r_task[1], r_task[2]),
                                 "r_fc": _term("r_fc", 1.0), "r_cnt": _term("r_cnt", None), "r_comp": _term("r_comp", 0.5)},
        "positions_measured": 2, "executor_episodes": episodes, "executor_calls": 10 * episodes,
        "unmeasured_episodes": 0, "positions": [{"tool_calls": tool_calls}, {"tool_calls": 0}], "ops_invalid": 0,
        "turns_missing": turns_missing,
    }


def test_step_rows_map_verl_names_and_use_core_records(spec):
    verl = {1: {"training/global_step": 1, "actor/entropy": 2.5, "actor/grad_norm": 0.3, "actor/pg_clipfrac": 0.0,
                "response_length/mean": 120.0, "timing_s/step": 9.0, "timing_s/gen": 6.0, "timing_s/update_actor": 1.0}}
    rollouts = [_rollout(0, 1.5), _rollout(0, 0.5, r_task=(0.0, 0, 1), turns_missing=1),
                _rollout(0, None, r_task=(None, 0, 0), turns_missing=2)]
    (row,) = step_rows(spec, verl, rollouts, optimizer_updates=1)
    assert (row.turns_missing, row.turns_missing_share) == (3, 0.5)  # 3 of 6 positions had no curator turn
    assert isinstance(row, StepMetrics) and row.backend == "verl" and row.step == 1
    assert row.reward_mean == pytest.approx(1.0) and row.reward_std == pytest.approx(0.7071067811865476)
    assert row.r_task_measured_mean == pytest.approx(0.5)  # pooled 1/2, as the TRL backend computes it
    assert row.reward_terms == {"r_task": 0.5, "r_fc": 1.0, "r_cnt": None, "r_comp": 0.5}
    assert (row.curation_rollouts, row.executor_episodes, row.executor_calls, row.tool_calls) == (3, 9, 90, 3)
    assert (row.entropy, row.grad_norm, row.clip_fraction, row.completion_length_mean) == (2.5, 0.3, 0.0, 120.0)
    assert row.kl is None  # no reference model in the smoke arm
    assert row.wall_s == {"step": 9.0, "rollout": 6.0, "update": 1.0}
    assert row.provenance.spec_hash == spec.spec_hash() and row.provenance.backend == "verl"
    assert set(VERL_NAMES) <= set(StepMetrics.model_fields)


def test_later_attempts_replace_a_rerun_step(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    with JsonlWriter(a) as w:
        w.write({"step": 1, "data": {"training/global_step": 1, "actor/entropy": 1.0}})
        w.write({"step": 2, "data": {"training/global_step": 2, "actor/entropy": 2.0}})
    with JsonlWriter(b) as w:
        w.write({"step": 2, "data": {"training/global_step": 2, "actor/entropy": 3.0}})
    assert {k: v["actor/entropy"] for k, v in read_verl_logs([a, b]).items()} == {1: 1.0, 2: 3.0}


def test_truncate_keeps_rollouts_before_the_checkpoint_and_their_episodes(tmp_path):
    paths = RunPaths(tmp_path)
    with JsonlWriter(paths.rollouts) as r, JsonlWriter(paths.episodes) as e:
        for step in range(3):
            for k in range(2):
                e.write_many([{"step_marker": step, "k": k, "i": i} for i in range(2)])
                r.write({"step": step, "executor_episodes": 2, "k": k})
    _truncate_records(paths, keep_steps_below=2)
    assert [r["step"] for r in read_jsonl(paths.rollouts)] == [0, 0, 1, 1]
    assert [e["step_marker"] for e in read_jsonl(paths.episodes)] == [0] * 4 + [1] * 4


def test_run_dir_refuses_overwrite_and_changed_resume(spec, tmp_path):
    paths = RunPaths(tmp_path / "run")
    dirs = VerlRunDirs(paths.root)
    resolved = resolved_config(spec, {"a": 1})
    _prepare_run_dir(paths, dirs, "spec: 1\n", resolved, resume=False)
    paths.spec.write_text("spec: 1\n")
    (paths.root / RESOLVED_CONFIG).write_text(json.dumps(resolved))
    paths.metrics.write_text('{"step": 1}\n')  # a step completed (a failed start is trained again instead)
    with pytest.raises(TwinrunError, match="not empty"):
        _prepare_run_dir(paths, dirs, "spec: 1\n", resolved, resume=False)
    with pytest.raises(TwinrunError, match="different spec"):
        _prepare_run_dir(paths, dirs, "spec: 2\n", resolved, resume=True)
    with pytest.raises(TwinrunError, match="resolved verl config changed .*overrides.a: 1 -> 2"):
        _prepare_run_dir(paths, dirs, "spec: 1\n", resolved_config(spec, {"a": 2}), resume=True)
    _prepare_run_dir(paths, dirs, "spec: 1\n", resolved, resume=True)
    with pytest.raises(TwinrunError, match="holds no run"):
        _prepare_run_dir(RunPaths(tmp_path / "empty"), VerlRunDirs(tmp_path / "empty"), "x", resolved, resume=True)


@pytest.mark.alfworld
def test_data_rows_are_cores_task_groups_in_order(spec, alfworld_data):
    from twinrun.core.curation import TaskGroup

    rows = task_group_rows(spec)
    assert len(rows) == spec.steps * spec.batch.groups_per_step
    groups = [TaskGroup.from_row(json.loads(r["twinrun_group"])) for r in rows]
    assert [(g.step, g.index) for g in groups] == [(s, i) for s in range(spec.steps) for i in range(spec.batch.groups_per_step)]
    assert all(len(g.games) == spec.environment.group_size for g in groups)
    assert [r["extra_info"]["index"] for r in rows] == list(range(len(rows)))
    assert {r["agent_name"] for r in rows} == {"twinrun_curator"}


def test_a_step_gate_error_inside_verl_is_recognised_in_its_log(tmp_path):
    from twinrun.backends.verl.train import _gate_failure

    log = tmp_path / "verl.log"
    log.write_text("step:1 ...\n(TaskRunnerV1 pid=1) twinrun.core.errors.InfrastructureError: 40% of this step's "
                   "executor episodes were unmeasured\nSet the environment variable HYDRA_FULL_ERROR=1\n")
    assert _gate_failure(log) == ("InfrastructureError", "40% of this step's executor episodes were unmeasured")
    log.write_text("(TaskRunnerV1 pid=1) twinrun.core.advantages.step_health.MissingTurnsError: 60% of this step's positions "
                   "had no curator turn\n")
    assert _gate_failure(log) == ("MissingTurnsError", "60% of this step's positions had no curator turn")
    log.write_text("ValueError: something else\n")
    assert _gate_failure(log) is None


def test_gigpo_steps_report_their_anchor_groups(repo_root):
    """Under estimator: gigpo both backends log anchor_singleton_share and step_adv_nonzero_share from the
    records' own anchors and step rewards (core.advantages.step_metrics.curation_step_metrics)."""
    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml", ["algorithm.estimator=gigpo"])
    verl = {1: {"training/global_step": 1}}
    rows = []
    for r, (srs, anchors) in enumerate([([0.5, 0.1], ["p1|a", "p2|b"]), ([0.0, 0.3], ["p1|a", "p2|c"]),
                                        ([0.2, 0.3], ["p1|a", "p2|c"])]):
        row = _rollout(0, sum(srs))
        row.update(group_id="g", rollout_index=r, step_rewards=srs,
                   positions=[{"index": i + 1, "anchor": a, "tool_calls": 1} for i, a in enumerate(anchors)])
        rows.append(row)
    (row,) = step_rows(spec, verl, rows, optimizer_updates=1)
    # p2|b alone (1 of 6 rows); returns at p2|c are equal (0.3, 0.3) -> A^S = 0 there and on the singleton
    assert row.anchor_singleton_share == pytest.approx(1 / 6)
    assert row.step_adv_nonzero_share == pytest.approx(3 / 6)
    (plain,) = step_rows(load_spec(repo_root / "experiments" / "smoke-cpu.yaml"), verl, rows, optimizer_updates=1)
    assert plain.anchor_singleton_share is None  # grpo: no anchors
