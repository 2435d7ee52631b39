"""Issue 30, every bad input a one-line error: a table of hostile or mistaken inputs (spec values and types, spec
files, run and sweep folders, skills, sweep and compare arguments), each run through the real `twinrun` entry point
in this process. Each must end with exit code 2 and one line on stderr that names the field (or option) and a fix,
and must change no file: the whole workspace (spec copies, a TRL run folder, a sweep folder, the --out it names)
is hashed before and after."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from twinrun.core.records import JsonlWriter
from twinrun.testing.run_folders import folder_digest, run_twinrun

SPEC = "spec.yaml"  # a copy of experiments/smoke-cpu.yaml in the workspace (its prompts copied beside it)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, repo_root):
    """A spec, a few broken spec files, a trained TRL run folder (as far as its files go: spec, run.json, records,
    one checkpoint folder), a sweep folder, a bad human-skills folder and a plain file."""
    ws = tmp_path_factory.mktemp("ws")
    shutil.copy(repo_root / "experiments" / "smoke-cpu.yaml", ws / SPEC)
    shutil.copytree(repo_root / "experiments" / "prompts", ws / "prompts")
    text = (ws / SPEC).read_text()
    (ws / "latin1.yaml").write_bytes(text.replace("name: smoke-cpu", "name: smoke-\xe9").encode("latin-1"))
    (ws / "typo.yaml").write_text(text.replace("groups_per_step:", "groups_per_stepp:"))
    (ws / "broken.yaml").write_text("name: [unclosed\n")
    (ws / "list.yaml").write_text("- a\n- b\n")
    (ws / "empty.yaml").write_text("")
    (ws / "file.txt").write_text("not a folder\n")
    (ws / "skills-empty").mkdir()
    (ws / "stuff").mkdir()
    (ws / "stuff" / "notes.txt").write_text("a user's folder\n")
    run = ws / "trl-run"
    run.mkdir()
    (run / "spec.yaml").write_text(text)
    (run / "run.json").write_text(json.dumps({"backend": "trl"}))
    with JsonlWriter(run / "metrics.jsonl") as w:
        w.write({"kind": "step", "step": 1})
    ckpt = run / "checkpoints" / "step-000001"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text("{}")
    sweep = ws / "sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_text("{}")
    return ws


# (args with {ws} for the workspace, the field or option the one line must name)
SPEC_VALUES = [
    (["--set", "optimizer.lr=.inf"], "optimizer.lr"),
    (["--set", "optimizer.lr=-.inf"], "optimizer.lr"),
    (["--set", "optimizer.lr=nan"], "optimizer.lr"),
    (["--set", "optimizer.lr=fast"], "optimizer.lr"),
    (["--set", "optimizer.lr=[1,2]"], "optimizer.lr"),
    (["--set", "steps=0"], "steps"),
    (["--set", "steps=1.5"], "steps"),
    (["--set", "steps=many"], "steps"),
    (["--set", "checkpoint_every=0"], "checkpoint_every"),
    (["--set", "batch.groups_per_step=0"], "batch.groups_per_step"),
    (["--set", "batch.groups_per_stepp=2"], "batch.groups_per_stepp"),
    (["--set", "curator.context=sideways"], "curator.context"),
    (["--set", "curator.max_response_tokens=-1"], "curator.max_response_tokens"),
    (["--set", "environment.name=chess"], "environment.name"),
    (["--set", "environment.group_size=0"], "environment.group_size"),
    (["--set", "algorithm.estimator=ppo2"], "algorithm.estimator"),
    (["--set", "executor.kind=oracle"], "executor.kind"),
    (["--set", "seed=abc"], "seed"),
    (["--set", "backends=[foo]"], "backends"),
    (["--set", "resources.processes=0"], "resources.processes"),
    (["--set", "tracking.backend=neptune"], "tracking.backend"),
    (["--set", "version=2"], "version"),
    (["--set", "optimizer"], "--set"),
    (["--set", "optimizer.lr.x=1"], "--set"),
]
SPEC_FILES = [
    ("latin1.yaml", "is not UTF-8"),
    ("typo.yaml", "batch.groups_per_stepp: unknown key (fix: did you mean 'batch.groups_per_step'?)"),
    ("broken.yaml", "is not valid YAML"),
    ("list.yaml", "not a mapping"),
    ("empty.yaml", "missing required field"),
    ("missing.yaml", "cannot be read"),
    ("prompts", "is a folder"),
]
TRAIN = [
    (["--backend", "foo", "--out", "{ws}/new"], "--backend: 'foo' is not a backend (fix: one of trl, verl)"),
    (["--backend", "trl", "--out", "{ws}/file.txt"], "--out"),
    (["--backend", "trl", "--out", "{ws}/stuff"], "--out"),
    (["--backend", "trl", "--out", "{ws}/trl-run"], "--out"),
    (["--backend", "trl", "--resume", "--out", "{ws}/new"], "--resume"),
    (["--backend", "verl", "--resume", "--out", "{ws}/trl-run"], "--backend"),
    (["--backend", "trl", "--resume", "--out", "{ws}/trl-run", "--set", "optimizer.lr=3e-6"], "--resume"),
    (["--backend", "trl", "--out", "{ws}/new", "--set", "skills.human_skills={ws}/nowhere"], "human skills"),
    (["--backend", "trl", "--out", "{ws}/new", "--set", "skills.human_skills={ws}/skills-empty"], "human skills"),
    (["--backend", "trl", "--out", "{ws}/new", "--set", "skills.human_skills={ws}/file.txt"], "human skills"),
]
SWEEP = [
    (["{ws}/trl-run", "--out", "{ws}/new", "--replicates", "trl-run:99"], "--replicates: trl-run:99"),
    (["{ws}/trl-run", "--out", "{ws}/new", "--replicates", "nosuch"], "--replicates"),
    (["{ws}/trl-run", "--out", "{ws}/new", "--replicates", "baseline:x"], "--replicates"),
    (["{ws}/trl-run", "--out", "{ws}/new", "--replicates", "trl-run:a"], "--replicates"),
    (["{ws}/trl-run", "--out", "{ws}/trl-run"], "is a training run's folder"),
    (["{ws}/trl-run", "--out", "{ws}/file.txt"], "--out"),
    (["{ws}/nowhere", "--out", "{ws}/new"], "RUN_DIR"),
    (["{ws}/stuff", "--out", "{ws}/new"], "RUN_DIR"),
    (["{ws}/trl-run", "--out", "{ws}/new", "--curator", "oracle"], "--curator"),
    (["{ws}/trl-run", "--out", "{ws}/new", "--set", "skills.human_skills={ws}/skills-empty"], "human skills"),
]
COMPARE = [
    (["{ws}/nowhere", "--baseline", "baseline"], ""),
    (["{ws}/stuff", "--baseline", "baseline"], ""),
    (["{ws}/sweep", "--baseline", "baseline"], ""),
]

CASES = (
    [pytest.param(["plan", "{ws}/" + SPEC, *a], f, id=f"spec-{a[-1]}") for a, f in SPEC_VALUES]
    + [pytest.param(["plan", "{ws}/" + name], f, id=f"file-{name}") for name, f in SPEC_FILES]
    + [pytest.param(["train", "{ws}/" + SPEC, *a], f, id="train-" + " ".join(a).replace("{ws}/", ""))
       for a, f in TRAIN]
    + [pytest.param(["sweep", *a[:1], "--spec", "{ws}/" + SPEC, *a[1:]], f,
                    id="sweep-" + " ".join(a).replace("{ws}/", "")) for a, f in SWEEP]
    + [pytest.param(["compare", *a], f, id="compare-" + " ".join(a).replace("{ws}/", "")) for a, f in COMPARE]
)


def test_the_table_is_large_enough():
    assert len(CASES) >= 40


@pytest.mark.parametrize("args, names", CASES)
def test_a_bad_input_is_one_line_exit_2_and_changes_nothing(args, names, workspace, capsys):
    args = [a.replace("{ws}", str(workspace)) for a in args]
    before = folder_digest(workspace)
    code, out, err = run_twinrun(args, capsys)
    lines = err.strip().splitlines()
    assert code == 2, (code, err[-2000:])
    assert len(lines) == 1, err
    assert lines[0].startswith("twinrun: error: ") and "fix" in lines[0], lines[0]
    assert names.replace("{ws}", str(workspace)) in lines[0], lines[0]
    assert folder_digest(workspace) == before, "a refused command changed or left a file"
    assert not Path(workspace, "new").exists()


def test_launch_refuses_in_the_calling_process_before_torchrun_starts(workspace):
    """--launch checks --out, spec and resume here, not inside every rank (red on main: a torchrun dump per rank
    after its start-up). A subprocess: a launch that got through would exec torchrun in place of pytest."""
    import os
    import subprocess
    import sys

    before = folder_digest(workspace)
    r = subprocess.run([sys.executable, "-m", "twinrun.cli", "train", str(workspace / SPEC), "--backend", "trl",
                        "--launch", "--out", str(workspace / "trl-run"), "--set", "resources.processes=2",
                        "--set", "batch.groups_per_step=2"], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.strip().splitlines() == [
        f"twinrun: error: --out: '{workspace / 'trl-run'}' is not empty: it holds a run with 1 completed step(s) "
        "(fix: --resume to continue it, or a new folder)"]
    assert "torch.distributed.run" not in r.stderr + r.stdout
    assert folder_digest(workspace) == before
