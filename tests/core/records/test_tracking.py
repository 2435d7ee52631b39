"""The tracker adapter (issue 18): names and values of metrics.jsonl rows written through real tensorboard event
files and real wandb offline runs, read back with tensorboard's reader and wandb's own record format; resume
into the same tracker run; a missing, unreachable or failing tracker is one warning line and never an error."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from twinrun.core.records import provenance
from twinrun.core.records import StepMetrics
from twinrun.core.spec import TrackingSpec
from twinrun.core.records.tracking import (
    STATE_FILE,
    StepReporter,
    Tracker,
    TrackedRun,
    _Guarded,
    format_step_line,
    open_tracker,
    step_scalars,
)


def _rows(n: int = 3, shift: float = 0.0) -> list[dict]:
    prov = provenance(spec_hash="abc", backend="trl", seed=0)
    rows = []
    for s in range(1, n + 1):
        m = StepMetrics(step=s, backend="trl", reward_mean=0.1 * s + shift, reward_std=0.05,
                        reward_terms={"r_task": 0.5 + shift, "r_fc": 1.0, "r_cnt": None, "r_comp": 0.25},
                        r_task_measured_mean=0.4, positions_measured_mean=3.0, positions_measured_min=3,
                        curation_rollouts=4, executor_episodes=12, executor_calls=40, unmeasured_episodes=0,
                        optimizer_updates=1, tool_calls=7, grad_norm=1.5 + s, wall_s={"step": 2.0 + s, "rollout": 1.0},
                        provenance=prov)
        row = m.model_dump(mode="json")
        row["turns_missing"] = s  # a field another issue adds to the neutral schema: logged without a name list
        rows.append(row)
    return rows


def expected_metrics(row: dict) -> dict[str, float]:
    """Every number of a metrics.jsonl row by its path, written out independently of the tracker code."""
    out = {}
    for k, v in row.items():
        if k in ("kind", "schema_version", "step", "backend", "provenance"):
            continue
        if isinstance(v, dict):
            out.update({f"{k}/{kk}": float(vv) for kk, vv in v.items() if vv is not None})
        elif isinstance(v, (int, float)) and v is not None:
            out[k] = float(v)
    return out


def _run(folder: Path, name: str = "smoke-trl-seed0") -> TrackedRun:
    return TrackedRun(name=name, group="smoke", job_type="train", tags=("backend:trl", "seed:0", "spec:abc"),
                      folder=folder, config={"seed": 0, "batch": {"groups_per_step": 2}})


def test_step_scalars_are_every_number_of_the_row():
    row = _rows(1)[0]
    got = step_scalars(row)
    assert got == expected_metrics(row)
    assert got["turns_missing"] == 1 and got["reward_terms/r_task"] == 0.5 and "reward_terms/r_cnt" not in got
    assert got["wall_s/step"] == 3.0 and "provenance/seed" not in got and "step" not in got
    assert step_scalars(StepMetrics.model_validate({k: v for k, v in row.items() if k != "turns_missing"})) == {
        k: v for k, v in got.items() if k != "turns_missing"}


def test_step_line_is_one_line_with_the_step_numbers():
    line = format_step_line(_rows(2)[1], total_steps=3)
    assert line == "trl: step 2/3 reward 0.200 r_task 0.400 tool calls 7 episodes 12 (4.0s)"


def test_tensorboard_events_hold_the_rows(tmp_path):
    from twinrun.testing.tracker_files import tensorboard_scalars

    rows = _rows()
    logs: list[str] = []
    tracker = open_tracker(TrackingSpec(backend="tensorboard", project="proj"), _run(tmp_path), log=logs.append)
    rep = StepReporter(tracker, total_steps=3, native_prefix="trl/", log=logs.append)
    for r in rows:
        rep.step(r, native=[{"loss": 1.0, "num_tokens": 5}, {"loss": 3.0, "num_tokens": 7}])
    rep.close()
    logdir = tmp_path / "tracking" / "proj" / "smoke" / "smoke-trl-seed0"
    got = tensorboard_scalars(logdir)
    want = {k for r in rows for k in expected_metrics(r)}
    assert set(got) == want | {"trl/loss", "trl/num_tokens"}
    for r in rows:
        for k, v in expected_metrics(r).items():
            assert got[k][r["step"]] == pytest.approx(v, rel=1e-6), k
    assert got["trl/loss"] == {1: 2.0, 2: 2.0, 3: 2.0}  # the mean over the step's updates
    assert json.loads((tmp_path / STATE_FILE).read_text())["logdir"] == str(logdir)
    assert sum("tracking: tensorboard" in x for x in logs) == 1 and sum("step" in x for x in logs) == 3


def test_tensorboard_resume_replaces_the_steps_trained_again(tmp_path):
    from twinrun.testing.tracker_files import tensorboard_scalars

    spec = TrackingSpec(backend="tensorboard")
    first = open_tracker(spec, _run(tmp_path), log=lambda s: None)
    for r in _rows(3):
        first.log_metrics(step_scalars(r), r["step"])
    first.close()
    again = open_tracker(spec, _run(tmp_path), log=lambda s: None, resume_after=1)  # steps 2, 3 run again
    for r in _rows(3, shift=10.0)[1:]:
        again.log_metrics(step_scalars(r), r["step"])
    again.close()
    got = tensorboard_scalars(tmp_path / "tracking" / "twinrun" / "smoke" / "smoke-trl-seed0")
    assert got["reward_mean"] == pytest.approx({1: 0.1, 2: 10.2, 3: 10.3})


def _offline_runs(root: Path) -> list[Path]:
    return sorted((root / "wandb").glob("offline-run-*"))


def test_wandb_offline_run_holds_the_rows_grouped_and_tagged(tmp_path):
    pytest.importorskip("wandb")
    from twinrun.testing.tracker_files import wandb_offline_run

    rows = _rows()
    spec = TrackingSpec(backend="wandb", project="proj", offline=True, dir=str(tmp_path / "wb"))
    logs: list[str] = []
    tracker = open_tracker(spec, _run(tmp_path), log=logs.append)
    assert tracker.active, logs
    rep = StepReporter(tracker, total_steps=3, native_prefix="trl/", log=logs.append)
    for r in rows:
        rep.step(r, native=[{"loss": 1.5}])
    tracker.log_table("verdicts", ["a", "b"], [["trl", "verl"]])
    rep.close()
    (run_dir,) = _offline_runs(tmp_path / "wb")
    got = wandb_offline_run(run_dir)
    assert got["run"]["project"] == "proj" and got["run"]["group"] == "smoke" and got["run"]["job_type"] == "train"
    assert got["run"]["name"] == "smoke-trl-seed0" and got["run"]["tags"] == ["backend:trl", "seed:0", "spec:abc"]
    hist = {k: v for k, v in got["history"].items() if not k.startswith("verdicts/")}
    assert set(hist) == {k for r in rows for k in expected_metrics(r)} | {"trl/loss"}
    for r in rows:
        for k, v in expected_metrics(r).items():
            assert hist[k][r["step"]] == pytest.approx(v), k
    assert "verdicts" in {k.split("/")[0] for k in got["other"]}
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert state["backend"] == "wandb" and state["run_id"] == got["run"]["id"]

    # a resume logs into the same wandb run (same id)
    again = open_tracker(spec, _run(tmp_path), log=logs.append, resume_after=3)
    again.log_metrics({"reward_mean": 9.0}, 4)
    again.close()
    ids = {wandb_offline_run(d)["run"]["id"] for d in _offline_runs(tmp_path / "wb")}
    assert ids == {state["run_id"]}


def test_missing_tracker_is_one_warning_and_logs_nothing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if wandb were not installed: import raises ImportError
    logs: list[str] = []
    tracker = open_tracker(TrackingSpec(backend="wandb"), _run(tmp_path), log=logs.append)
    tracker.log_metrics({"reward_mean": 1.0}, 1)
    tracker.close()
    assert len(logs) == 1 and logs[0].startswith("warning: tracking: wandb is not installed") and "\n" not in logs[0]
    assert "twinrun[tracking]" in logs[0] and not (tmp_path / STATE_FILE).exists()


def test_unreachable_wandb_is_one_warning(tmp_path, monkeypatch):
    """Online wandb with no credentials (this machine cannot reach a server either): one warning, no error."""
    wandb = pytest.importorskip("wandb")
    wandb.teardown()  # wandb keeps the settings of its first use in this process (WANDB_MODE among them)
    for k in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setattr(sys, "stdin", open("/dev/null"))
    logs: list[str] = []
    tracker = open_tracker(TrackingSpec(backend="wandb", dir=str(tmp_path / "wb")), _run(tmp_path), log=logs.append)
    tracker.log_metrics({"reward_mean": 1.0}, 1)
    tracker.close()
    wandb.teardown()
    assert len(logs) == 1 and logs[0].startswith("warning: tracking: wandb could not start"), logs


def test_a_tracker_failing_mid_run_is_one_warning_then_silence():
    class FailingTracker(Tracker):  # a stand-in for a tracker whose server goes away mid-run
        backend = "wandb"
        calls = 0

        def log_metrics(self, metrics, step):
            FailingTracker.calls += 1
            raise ConnectionError("server went away\nsecond line")

    logs: list[str] = []
    g = _Guarded(FailingTracker(), logs.append)
    for s in range(3):
        g.log_metrics({"a": 1.0}, s)
    g.close()
    assert FailingTracker.calls == 1 and len(logs) == 1
    assert logs[0] == ("warning: tracking: wandb failed (ConnectionError: server went away); tracking stops here, "
                       "metrics.jsonl stays the record")


def test_none_logs_nothing_and_writes_nothing(tmp_path):
    logs: list[str] = []
    tracker = open_tracker(TrackingSpec(), _run(tmp_path), log=logs.append)
    tracker.log_metrics({"a": 1.0}, 1)
    tracker.close()
    assert logs == [] and not any(tmp_path.iterdir())


def test_mlflow_run_holds_the_rows(tmp_path):
    pytest.importorskip("mlflow")  # not in this environment's lock (see pyproject's tracking extra)
    from mlflow.tracking import MlflowClient

    rows = _rows()
    tracker = open_tracker(TrackingSpec(backend="mlflow", project="proj"), _run(tmp_path), log=lambda s: None)
    for r in rows:
        tracker.log_metrics(step_scalars(r), r["step"])
    tracker.close()
    state = json.loads((tmp_path / STATE_FILE).read_text())
    client = MlflowClient(tracking_uri=state["uri"])
    run = client.get_run(state["run_id"])
    assert run.data.tags["group"] == "smoke" and run.info.run_name == "smoke-trl-seed0"
    for k, v in expected_metrics(rows[0]).items():
        hist = {m.step: m.value for m in client.get_metric_history(state["run_id"], k)}
        assert hist[1] == pytest.approx(v), k


def test_spec_hash_ignores_tracking_and_resume_accepts_a_new_tracker(smoke_spec_path, tmp_path):
    import yaml

    from twinrun.core.records import RecordError, RunPaths, guard_run_dir
    from twinrun.core.spec import load_spec

    spec = load_spec(smoke_spec_path)
    tracked = load_spec(smoke_spec_path, ["tracking.backend=wandb", "tracking.tags=[a,b]"])
    assert tracked.tracking.tags == ["a", "b"] and tracked.spec_hash() == spec.spec_hash()
    assert load_spec(smoke_spec_path, ["optimizer.lr=2e-5"]).spec_hash() != spec.spec_hash()
    paths = RunPaths(tmp_path)
    paths.spec.write_text(yaml.safe_dump(json.loads(spec.canonical_json()), sort_keys=False))
    paths.metrics.write_text('{"step": 1}\n')  # a step completed: a changed spec is refused, not restarted
    guard_run_dir(paths, spec_yaml=yaml.safe_dump(json.loads(tracked.canonical_json()), sort_keys=False), resume=True)
    changed = load_spec(smoke_spec_path, ["optimizer.lr=2e-5"])
    with pytest.raises(RecordError, match="different spec"):
        guard_run_dir(paths, spec_yaml=yaml.safe_dump(json.loads(changed.canonical_json()), sort_keys=False),
                      resume=True)


@pytest.mark.parametrize("bad, match", [
    (["tracking.backend=neptune"], r"^tracking\.backend: 'neptune' is invalid"),
    (["tracking.project=a/b"], r"^tracking\.project: 'a/b' holds one of"),
    (["tracking.tags=['']"], r"^tracking\.tags: '' is not a tag"),
    (["tracking.projekt=x"], r"^tracking\.projekt: unknown key \(fix: did you mean 'tracking\.project'\?\)"),
])
def test_bad_tracking_fields_are_one_line_errors(smoke_spec_path, bad, match):
    from twinrun.core.spec import SpecError, load_spec

    with pytest.raises(SpecError, match=match):
        load_spec(smoke_spec_path, bad)
