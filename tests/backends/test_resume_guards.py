"""Issue 30, guards before writes: every resume check (folder, backend, spec, resolved config, process count) runs
before any file in the run folder changes. Each test builds a run folder the way the backend writes it, runs the
real `twinrun train` (in this process) or the backend's real `train`, and compares every file's bytes before and
after the refusal. The curator is a local folder (refusals come before any model is loaded), so no warm start is
built and the tests stay fast."""

from __future__ import annotations

import json

import pytest
import yaml

from twinrun.core.records import JsonlWriter, RunPaths, atomic_write_text, read_jsonl
from twinrun.core.spec import load_spec
from twinrun.testing.run_folders import folder_digest, run_twinrun

pytest.importorskip("trl")
pytest.importorskip("verl")

pytestmark = [pytest.mark.trl, pytest.mark.verl]


@pytest.fixture
def curator(tmp_path):
    d = tmp_path / "curator"
    d.mkdir()
    return d


@pytest.fixture
def sets(curator):
    return [f"curator.model={curator}"]


@pytest.fixture
def spec(smoke_spec_path, sets):
    return load_spec(smoke_spec_path, sets)


def _spec_yaml(spec) -> str:
    return yaml.safe_dump(json.loads(spec.canonical_json()), sort_keys=False)


def _records(paths: RunPaths, steps: int = 2) -> None:
    """Rows of ``steps`` trained steps, as either backend appends them (their content is not what is guarded)."""
    with JsonlWriter(paths.metrics) as m, JsonlWriter(paths.rollouts) as r, JsonlWriter(paths.episodes) as e:
        for s in range(steps):
            m.write({"kind": "step", "step": s + 1})
            r.write({"step": s, "executor_episodes": 1, "positions": []})
            e.write({"kind": "episode", "game_id": f"g{s}"})


def verl_run(spec, root):
    """A verl run folder as verl's train() leaves it after two steps: its spec, its resolved config (from verl's
    own functions), records and verl's checkpoint tracker. Written as main wrote it (no run.json)."""
    from twinrun.backends.verl.train import VerlRunDirs, build_overrides, resolved_config

    paths, dirs = RunPaths(root), VerlRunDirs(root)
    resolved = resolved_config(spec, build_overrides(spec, paths, dirs, str(spec.curator.model)))
    atomic_write_text(paths.spec, _spec_yaml(spec))
    atomic_write_text((paths.root / "resolved_config.json"), json.dumps(resolved, indent=2, sort_keys=True) + "\n")
    _records(paths)
    dirs.shards.mkdir(parents=True)
    (dirs.shards / "latest_checkpointed_iteration.txt").write_text("2\n")
    return paths


def trl_run(spec, root, **changed):
    """A TRL run folder after two steps: spec, resolved GRPOConfig (TRL's own to_dict), records."""
    from trl import GRPOConfig

    from twinrun.backends.trl.compile import compile_spec

    paths = RunPaths(root)
    kwargs = dict(compile_spec(spec).config, output_dir=str(root / "trl"))
    resolved = GRPOConfig(**kwargs).to_dict() | {"twinrun_curator_model": spec.curator.model.rsplit("/", 1)[-1]}
    resolved.update(changed)
    atomic_write_text(paths.spec, _spec_yaml(spec))
    atomic_write_text((paths.root / "resolved_config.json"), json.dumps(resolved, indent=2, sort_keys=True, default=str) + "\n")
    _records(paths)
    return paths


def _refused(args, capsys, root, match):
    before = folder_digest(root)
    code, _, err = run_twinrun(args, capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and match in err, err
    assert folder_digest(root) == before  # not one byte changed, nothing added
    return err


def test_trl_resume_into_a_verl_run_is_refused_before_any_write(spec, sets, smoke_spec_path, tmp_path, capsys):
    """The issue's data loss: `train --backend trl --resume --out <a verl run>` emptied that run's records, then
    refused on the resolved config. Red on main (records truncated before the config check; no backend guard)."""
    paths = verl_run(spec, tmp_path / "verl-run")
    err = _refused(["train", smoke_spec_path, "--backend", "trl", "--resume", "--out", paths.root,
                    *[f"--set={s}" for s in sets]], capsys, paths.root, "holds a verl run")
    assert "--backend verl" in err and len(list(paths.metrics.read_text().splitlines())) == 2


def test_verl_resume_into_a_trl_run_is_refused_before_any_write(spec, sets, smoke_spec_path, tmp_path, capsys):
    paths = trl_run(spec, tmp_path / "trl-run")
    (paths.root / "run.json").write_text(json.dumps({"backend": "trl"}))
    _refused(["train", smoke_spec_path, "--backend", "verl", "--resume", "--out", paths.root,
              *[f"--set={s}" for s in sets]], capsys, paths.root, "holds a trl run")


@pytest.mark.parametrize("backend", ["trl", "verl"])
def test_resume_with_a_changed_spec_changes_nothing(backend, spec, sets, smoke_spec_path, tmp_path, capsys):
    paths = (trl_run if backend == "trl" else verl_run)(spec, tmp_path / "run")
    _refused(["train", smoke_spec_path, "--backend", backend, "--resume", "--out", paths.root,
              *[f"--set={s}" for s in sets], "--set", "optimizer.lr=3e-6"], capsys, paths.root, "different spec")


def test_trl_resume_with_a_changed_resolved_config_changes_nothing(spec, tmp_path):
    """The resolved GRPOConfig check ran after records were truncated on main: red there."""
    from twinrun.backends.trl.train import train
    from twinrun.core.errors import TwinrunError

    paths = trl_run(spec, tmp_path / "run", learning_rate=0.5)
    before = folder_digest(paths.root)
    with pytest.raises(TwinrunError, match=r"resolved GRPOConfig changed \(learning_rate: 0.5 ->"):
        train(spec, paths.root, resume=True)
    assert folder_digest(paths.root) == before


def test_verl_resume_with_a_changed_resolved_config_changes_nothing(spec, tmp_path):
    from twinrun.backends.verl.train import train
    from twinrun.core.errors import TwinrunError

    paths = verl_run(spec, tmp_path / "run")
    cfg = json.loads((paths.root / "resolved_config.json").read_text())
    cfg["framework"] = "verl 0.0"
    (paths.root / "resolved_config.json").write_text(json.dumps(cfg))
    before = folder_digest(paths.root)
    with pytest.raises(TwinrunError, match="resolved verl config changed"):
        train(spec, paths.root, resume=True)
    assert folder_digest(paths.root) == before


def test_trl_resume_with_another_process_count_changes_nothing(smoke_spec_path, sets, tmp_path):
    """A run planned for 2 processes resumed in 1: refused (check_world) before anything is written."""
    from twinrun.backends.trl.train import train
    from twinrun.core.errors import TwinrunError

    spec2 = load_spec(smoke_spec_path, [*sets, "resources.processes=2", "batch.groups_per_step=2"])
    paths = trl_run(spec2, tmp_path / "run")
    before = folder_digest(paths.root)
    with pytest.raises(TwinrunError, match="plans 2 training process"):
        train(spec2, paths.root, resume=True)
    assert folder_digest(paths.root) == before


@pytest.mark.parametrize("backend", ["trl", "verl"])
def test_new_run_into_a_run_folder_or_a_file_changes_nothing(backend, spec, sets, smoke_spec_path, tmp_path,
                                                             capsys):
    paths = (trl_run if backend == "trl" else verl_run)(spec, tmp_path / "run")
    _refused(["train", smoke_spec_path, "--backend", backend, "--out", paths.root, *[f"--set={s}" for s in sets]],
             capsys, paths.root, "--resume to continue it")
    _refused(["train", smoke_spec_path, "--backend", backend, "--out", paths.metrics, *[f"--set={s}" for s in sets]],
             capsys, paths.root, "is a file, not a folder")
    empty = tmp_path / "none"
    _refused(["train", smoke_spec_path, "--backend", backend, "--resume", "--out", empty,
              *[f"--set={s}" for s in sets]], capsys, empty, "holds no run")
    assert not empty.exists()


HOLD = ("import sys, time; from twinrun.core.records.lock import folder_lock\n"
        "with folder_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(120)\n")


@pytest.fixture
def live_holder():
    """A live process holding a folder's lock (a training or sweep process, as far as the lock can tell)."""
    import os
    import subprocess
    import sys

    procs = []

    def hold(folder):
        p = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        procs.append(p)
        assert p.stdout.readline().strip() == "held"
        return p

    yield hold
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.parametrize("backend", ["trl", "verl"])
def test_resume_of_a_folder_another_process_writes_is_refused_naming_it(backend, spec, sets, smoke_spec_path,
                                                                       tmp_path, capsys, live_holder):
    """Two writers: a --resume beside a live run would interleave rows with it. Red on main (no lock)."""
    paths = (trl_run if backend == "trl" else verl_run)(spec, tmp_path / "run")
    holder = live_holder(paths.root)
    _refused(["train", smoke_spec_path, "--backend", backend, "--resume", "--out", paths.root,
              *[f"--set={s}" for s in sets]], capsys, paths.root, f"is being written by pid {holder.pid}")


def test_a_sweep_into_a_folder_another_sweep_writes_is_refused_naming_it(sets, smoke_spec_path, tmp_path, capsys,
                                                                        live_holder):
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "sweep.json").write_text("{}")
    holder = live_holder(out)
    _refused(["sweep", tmp_path / "run", "--spec", smoke_spec_path, "--out", out, "--curator", "no-ops",
              *[f"--set={s}" for s in sets]], capsys, out, f"is being written by pid {holder.pid}")


def failed_start(spec, root):
    """What a start that failed before its first step leaves: the spec (main wrote it first), maybe a rollout."""
    paths = RunPaths(root)
    atomic_write_text(paths.spec, _spec_yaml(spec))
    with JsonlWriter(paths.rollouts) as r:
        r.write({"step": 0, "executor_episodes": 1, "positions": []})
    return paths


@pytest.mark.parametrize("resume", [False, True])
def test_a_failed_start_is_trained_again_with_a_changed_spec(resume, smoke_spec_path, sets, spec, tmp_path):
    """No dead end: a folder in which no step completed is started again (said in one line), with or without
    --resume, with the fixed spec. Red on main (refused both ways: 'not empty' / 'different spec')."""
    from twinrun.backends.trl.train import train
    from twinrun.core.records.run_dir import guard_run_dir

    paths = failed_start(spec, tmp_path / "run")
    fixed = load_spec(smoke_spec_path, [*sets, "optimizer.lr=3e-6"])
    assert guard_run_dir(paths, spec_yaml=_spec_yaml(fixed), resume=resume, backend="trl") == "restart"
    lines = []
    with pytest.raises(Exception) as e:  # the run itself stops at loading the (empty) curator folder
        train(fixed, paths.root, resume=resume, log=lines.append)
    assert "TwinrunError" not in type(e.value).__name__
    assert lines[0] == (f"trl: no step of {paths.root} completed (a start that failed); training it again from "
                        "step 1 with the changed spec")
    assert paths.spec.read_text() == _spec_yaml(fixed) and not list(read_jsonl(paths.rollouts))


def test_a_changed_spec_for_a_run_with_completed_steps_is_refused(smoke_spec_path, sets, spec, tmp_path, capsys):
    paths = trl_run(spec, tmp_path / "run")
    err = _refused(["train", smoke_spec_path, "--backend", "trl", "--resume", "--out", paths.root,
                    *[f"--set={s}" for s in sets], "--set", "optimizer.lr=3e-6"], capsys, paths.root,
                   "different spec and 2 completed step(s)")
    assert "start a new --out" in err
