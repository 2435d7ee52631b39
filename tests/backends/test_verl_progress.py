"""Live progress of verl's child process (issue 18), without running verl: the parent follows verl's step log and
core's rollouts as they are written; each completed step is one console line, a tracker point and a current
metrics.jsonl; a line still being written waits; and the poll really runs while the child is alive."""

from __future__ import annotations

import json
import sys

import pytest

from twinrun.backends.verl.progress import VerlProgress
from twinrun.backends.verl.train import run_child
from twinrun.core.records import JsonlWriter, RunPaths, read_jsonl
from twinrun.core.spec import load_spec
from twinrun.core.records.tracking import StepReporter, Tracker


class RecordingTracker(Tracker):
    """Keeps what it is given (a stand-in for a tracker in a test that is about the progress path)."""

    def __init__(self):
        self.points: list[tuple[int, dict]] = []

    def log_metrics(self, metrics, step):
        self.points.append((step, dict(metrics)))


def _term(value, num=None, den=None):
    return {"name": "t", "weight": 1.0, "disabled": False, "value": value, "numerator": num, "denominator": den}


def _rollout(step, total):
    return {"step": step, "reward": {"total": total, "r_task": _term(0.5, 1, 2), "r_fc": _term(1.0),
                                     "r_cnt": _term(None), "r_comp": _term(0.5)},
            "positions_measured": 3, "executor_episodes": 3, "executor_calls": 9, "unmeasured_episodes": 0,
            "turns_missing": 0,
            "positions": [{"tool_calls": 2}, {"tool_calls": 1}]}


def _verl_row(step):
    return {"step": step, "data": {"training/global_step": step, "actor/entropy": 1.0 + step, "timing_s/step": 4.0,
                                   "actor/grad_norm": 0.5}}


@pytest.fixture
def spec(repo_root):
    return load_spec(repo_root / "experiments" / "smoke-cpu.yaml")


def test_each_completed_step_is_reported_once_and_a_torn_line_waits(spec, tmp_path):
    paths = RunPaths(tmp_path)
    log = tmp_path / "verl-metrics.jsonl"
    lines: list[str] = []
    tracker = RecordingTracker()
    progress = VerlProgress(spec, paths, log, StepReporter(tracker, total_steps=3, native_prefix="verl/",
                                                           log=lines.append), optimizer_updates=1, keep_steps=0)
    assert progress.poll() == 0  # nothing written yet
    with JsonlWriter(paths.rollouts) as w:
        w.write_many([_rollout(0, 1.0), _rollout(0, 0.0)])
    text = json.dumps(_verl_row(1)) + "\n"
    log.write_text(text[:20])  # verl is mid-write
    assert progress.poll() == 0 and lines == []
    log.write_text(text)
    assert progress.poll() == 1
    assert lines == ["verl: step 1/3 reward 0.500 r_task 0.500 tool calls 6 episodes 6 (4.0s)"]
    (step, metrics), = tracker.points
    assert step == 1 and metrics["reward_mean"] == 0.5 and metrics["verl/actor/entropy"] == 2.0
    assert metrics["wall_s/step"] == 4.0 and metrics["tool_calls"] == 6.0
    assert [r["step"] for r in read_jsonl(paths.metrics)] == [1]  # metrics.jsonl is current mid-run
    assert progress.poll() == 0 and len(lines) == 1  # nothing new: nothing reported twice

    with JsonlWriter(paths.rollouts) as w:
        w.write(_rollout(1, 2.0))
    with open(log, "a") as f:
        f.write(json.dumps(_verl_row(2)) + "\n")
    assert progress.poll() == 1 and lines[-1].startswith("verl: step 2/3 reward 2.000")
    assert [r["step"] for r in read_jsonl(paths.metrics)] == [1, 2]


def test_a_resume_keeps_earlier_rows_and_replaces_the_rerun_steps(spec, tmp_path):
    paths = RunPaths(tmp_path)
    with JsonlWriter(paths.metrics) as w:
        for s in (1, 2, 3):
            w.write({"step": s, "kind": "step", "marker": "old"})
    log = tmp_path / "attempt-1.jsonl"
    progress = VerlProgress(spec, paths, log, StepReporter(RecordingTracker(), total_steps=3, native_prefix="verl/",
                                                           log=lambda s: None), optimizer_updates=1, keep_steps=2)
    with JsonlWriter(paths.rollouts) as w:
        w.write(_rollout(2, 1.0))
    log.write_text(json.dumps(_verl_row(3)) + "\n")
    assert progress.poll() == 1
    rows = list(read_jsonl(paths.metrics))
    assert [(r["step"], r.get("marker")) for r in rows] == [(1, "old"), (2, "old"), (3, None)]


def test_a_broken_log_line_stops_the_live_view_with_one_warning(spec, tmp_path):
    lines: list[str] = []
    log = tmp_path / "log.jsonl"
    progress = VerlProgress(spec, RunPaths(tmp_path), log, StepReporter(RecordingTracker(), total_steps=3,
                                                                        native_prefix="verl/", log=lines.append),
                            optimizer_updates=1, keep_steps=0)
    log.write_text("{not json\n")
    assert progress.poll() == 0 and progress.poll() == 0
    assert len(lines) == 1 and lines[0].startswith("warning: verl progress stopped (RecordError:")


def test_the_poll_runs_while_the_child_is_alive(tmp_path):
    """The child writes a step, then waits for the parent to have seen it: it exits 0 only if the parent polled
    while it ran (no timing assumption: it gives up with exit 1 after a minute)."""
    seen = tmp_path / "seen"
    script = (
        "import json, os, sys, time\n"
        f"open({str(tmp_path / 'log.jsonl')!r}, 'w').write(json.dumps({{'step': 1}}) + '\\n')\n"
        "t = time.time()\n"
        f"while not os.path.exists({str(seen)!r}):\n"
        "    if time.time() - t > 60: sys.exit(1)\n"
        "    time.sleep(0.05)\n"
    )

    def on_poll():
        if (tmp_path / "log.jsonl").exists():
            seen.touch()

    rc = run_child([sys.executable, "-c", script], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
                   log_path=tmp_path / "child.log", on_poll=on_poll, poll_s=0.1)
    assert rc == 0
