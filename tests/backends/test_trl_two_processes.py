"""The TRL backend with two training processes on CPU (issue 14 §1): `twinrun train SPEC --backend trl --launch`
starts the spec's `resources.processes: 2` under torchrun (gloo), each rank with its own curation runtime; the
records, advantages and checkpoints go through real gloo gathers.

Two runs of the smoke arm (per_position, history 0):

* groups_per_step 2 x rollouts_per_group 2, 4 steps, a checkpoint every 2: rank 1 is killed (SIGKILL) once rank 0
  has written step 3's rollouts, then the run is resumed with `--resume`; it continues at step 3.
* groups_per_step 1 x rollouts_per_group 4, 2 steps: the one task group's rollouts are split across the two ranks
  (rank 0 holds rollouts 0-1, rank 1 rollouts 2-3), so a rank's advantages are right only if the rewards of the
  other rank were gathered.
* accumulated (TRL's tool loop), groups_per_step 1 x rollouts_per_group 2, 1 step: the same split.

Held: per-step counts = `plan`'s for 2 processes = `plan`'s for 1 process (test_trl_per_position holds the
1-process run to the same plan); each rank's advantages = core's on the whole gathered batch, sliced at the rank's
offset; rank 0 alone writes: every rollout of both ranks appears once in rollouts.jsonl / rows.jsonl /
episodes.jsonl (rank 1 writing too would double them); --resume after the kill drops step 3's rows and writes
them once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("trl")

from twinrun.core.records import RunPaths, StepMetrics, read_jsonl  # noqa: E402
from twinrun.core.spec import load_spec  # noqa: E402
from twinrun.core.advantages.training_rows import rollout_rows, row_advantages  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.trl, pytest.mark.alfworld, pytest.mark.sampling]

TWO = ["curator.context=per_position", "curator.history=0", "resources.processes=2"]
KILLED = TWO + ["steps=4", "checkpoint_every=2"]  # groups_per_step 2 x rollouts_per_group 2 (the smoke arm's)
SPLIT = TWO + ["batch.groups_per_step=1", "batch.rollouts_per_group=4", "steps=2", "checkpoint_every=2"]
# accumulated (one sequence per rollout, TRL's tool loop): one group's 2 rollouts split across the ranks, 1 step
ACCUMULATED = ["curator.context=accumulated", "resources.processes=2", "batch.groups_per_step=1",
               "steps=1", "checkpoint_every=1"]
TIMEOUT = 600


def _cmd(spec_path: Path, out: Path, sets: list[str], cache: Path, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "twinrun.cli", "train", str(spec_path), "--backend", "trl", "--out", str(out),
           "--cache", str(cache), "--launch", *extra]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def _env(alfworld_data: Path) -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, ALFWORLD_DATA=str(alfworld_data), WANDB_MODE="disabled", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _rank_pid(launcher: int, rank: int) -> int | None:
    """The pid of torchrun's worker with RANK=rank (its children's environments)."""
    try:
        children = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
    except OSError:
        return None
    for pid in children:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ:
            return int(pid)
    return None


def _end_group(proc: subprocess.Popen) -> None:
    """End what this test started: the launcher's session (ranks, their simulator workers left by a killed rank)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _run(cmd: list[str], env: dict[str, str], log: Path) -> str:
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=TIMEOUT)
        finally:
            _end_group(proc)
    text = log.read_text()
    assert rc == 0, text[-4000:]
    return text


def _batches(out: Path) -> list[dict]:
    return [r for r in read_jsonl(out / "trl_log.jsonl") if r["kind"] == "batch"]


def _batch_steps_so_far(path: Path) -> set[int]:
    """Steps with a batch row in a trl_log.jsonl being written (complete lines only)."""
    if not path.exists():
        return set()
    lines = path.read_text().split("\n")[:-1]
    return {r["step"] for r in map(json.loads, lines) if r.get("kind") == "batch"}


@pytest.fixture(scope="module")
def env(alfworld_data):
    return _env(alfworld_data)


@pytest.fixture(scope="module")
def killed(repo_root, cache_dir, env, tmp_path_factory):
    """The smoke arm on 2 processes; rank 1 killed during step 3 (step 2's checkpoint complete, step 3's records
    written by rank 0), then `--resume`d. Returns (spec, out, first log, resumed log, rollouts before resume)."""
    spec_path = repo_root / "experiments" / "smoke-cpu.yaml"
    spec = load_spec(spec_path, KILLED)
    out = tmp_path_factory.mktemp("runs") / "trl-2p"
    log1 = out.parent / "first.log"
    with open(log1, "w") as fh:
        proc = subprocess.Popen(_cmd(spec_path, out, KILLED, cache_dir), env=env, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + TIMEOUT
            killed_pid = None
            while time.monotonic() < deadline and proc.poll() is None:
                step3 = 3 in _batch_steps_so_far(out / "trl_log.jsonl")
                if step3 and RunPaths(out).checkpoint(2).joinpath("config.json").is_file():
                    killed_pid = _rank_pid(proc.pid, 1)
                    assert killed_pid is not None, "rank 1 not found among torchrun's workers"
                    os.kill(killed_pid, signal.SIGKILL)
                    break
                time.sleep(0.05)
            rc = proc.wait(timeout=120)  # torchrun stops rank 0 once rank 1 is gone
        finally:
            _end_group(proc)
    first = log1.read_text()
    assert killed_pid is not None, first[-4000:]
    assert rc != 0 and not RunPaths(out).checkpoint(4).exists(), first[-4000:]
    before = list(read_jsonl(RunPaths(out).rollouts))
    resumed = _run(_cmd(spec_path, out, KILLED, cache_dir, "--resume"), env, out.parent / "resumed.log")
    return spec, out, first, resumed, before


@pytest.fixture(scope="module")
def split(repo_root, cache_dir, env, tmp_path_factory):
    spec_path = repo_root / "experiments" / "smoke-cpu.yaml"
    spec = load_spec(spec_path, SPLIT)
    out = tmp_path_factory.mktemp("runs") / "trl-2p-split"
    text = _run(_cmd(spec_path, out, SPLIT, cache_dir), env, out.parent / "split.log")
    return spec, out, text


def _check_counts(spec, out: Path) -> dict:
    from twinrun.backends.trl.compile import compile_spec

    counts = compile_spec(spec).counts
    one = compile_spec(spec.model_copy(update={"resources": spec.resources.model_copy(update={"processes": 1})})).counts
    assert counts == one  # the plan does not depend on the process count
    metrics = [StepMetrics.model_validate(r) for r in read_jsonl(RunPaths(out).metrics)]
    assert [m.step for m in metrics] == list(range(1, spec.steps + 1))
    for m in metrics:
        assert (m.curation_rollouts, m.executor_episodes, m.optimizer_updates) == (
            counts["curation_trajectories"], counts["executor_episodes"], counts["optimizer_updates"])
        assert m.grad_norm is not None
    rows = list(read_jsonl(RunPaths(out).rows))
    assert len(rows) == spec.steps * counts["training_rows"]
    return counts


def _check_once(spec, out: Path, counts: dict) -> None:
    """Every rollout of both ranks once in rollouts.jsonl, each of its positions once in rows.jsonl, its episodes
    once in episodes.jsonl."""
    paths = RunPaths(out)
    rollouts = list(read_jsonl(paths.rollouts))
    keys = [(r["step"], r["group_id"], r["rollout_index"]) for r in rollouts]
    assert len(keys) == len(set(keys)) == spec.steps * counts["curation_trajectories"], keys
    for step in range(spec.steps):
        groups = {g for s, g, _ in keys if s == step}
        assert len(groups) == spec.batch.groups_per_step
        assert {(g, i) for s, g, i in keys if s == step} == {
            (g, i) for g in groups for i in range(spec.batch.rollouts_per_group)}
    rows = [(r["step"], r["group_id"], r["rollout_index"], r["position"]) for r in read_jsonl(paths.rows)]
    assert len(rows) == len(set(rows))
    assert set(rows) == {(s + 1, g, i, p) for s, g, i in keys for p in range(1, spec.environment.group_size + 1)}
    episodes = list(read_jsonl(paths.episodes))
    assert len(episodes) == sum(r["executor_episodes"] for r in rollouts) == spec.steps * counts["executor_episodes"]
    assert [b["step"] for b in _batches(out)] == list(range(1, spec.steps + 1))
    for step in range(2, spec.steps + 1, 2):  # rank 0's export of each saved step
        assert (paths.checkpoint(step) / "model.safetensors").is_file()


def _check_rank_slices(spec, out: Path, processes: int = 2) -> list[bool]:
    """Each rank's advantages (trl_log core_by_process[rank]) = core's row advantages over the whole gathered batch,
    in TRL's slot order, sliced at the rank's offset. Returns per step whether a rank-local computation would have
    given other numbers (the check is not vacuous)."""
    paths = RunPaths(out)
    records = {(r["step"] + 1, r["group_id"], r["rollout_index"]): r for r in read_jsonl(paths.rollouts)}
    rows = list(read_jsonl(paths.rows))
    g = spec.environment.group_size
    differs = []
    for batch in _batches(out):
        step = batch["step"]
        order = [(r["group_id"], r["rollout_index"], r["position"]) for r in rows if r["step"] == step]
        # TRL's slot layout: group blocks in sampler order, slot r*|G| + (p-1) inside a block
        groups = list(dict.fromkeys(k[0] for k in order))
        assert order == [(gid, i, p) for gid in groups for i in range(spec.batch.rollouts_per_group)
                         for p in range(1, g + 1)]
        scores = []
        for gid, i, p in order:
            rec = records[(step, gid, i)]
            scores.append(rollout_rows(gid, f"{gid}#{i}", total=rec["reward"]["total"],
                                       step_rewards=rec["step_rewards"], anchors=rec["anchors"],
                                       position_valid=[not q["no_valid_call"] for q in rec["positions"]])[p - 1])
        want = row_advantages(spec.algorithm, scores)
        by_process = batch["advantages"]["core_by_process"]
        assert len(by_process) == processes
        n = len(order) // processes
        local = []
        for rank, got in enumerate(by_process):
            assert len(got) == n
            np.testing.assert_allclose(got, want[rank * n:(rank + 1) * n], atol=1e-6, err_msg=f"step {step} rank {rank}")
            local.extend(row_advantages(spec.algorithm, scores[rank * n:(rank + 1) * n]))
        np.testing.assert_allclose([r["advantage"] for r in rows if r["step"] == step], want, atol=1e-6)
        np.testing.assert_allclose(batch["advantages"]["trl"], want, atol=1e-5)  # grpo, scale none: TRL's own too
        differs.append(not np.allclose(local, want, atol=1e-6))
    return differs


def test_killed_rank_resumes_at_step_3_with_plans_counts_and_every_rollout_once(killed):
    spec, out, first, resumed, before = killed
    assert any(r["step"] == 2 for r in before), "the kill came before rank 0 wrote step 3's rollouts"
    assert "resuming" in resumed and "after step 2" in resumed, resumed[-3000:]
    assert "step 3/4" in resumed and "step 1/4" not in resumed and "step 2/4" not in resumed
    counts = _check_counts(spec, out)
    _check_once(spec, out, counts)


def test_killed_run_each_ranks_advantages_are_cores_on_the_gathered_batch(killed):
    spec, out, *_ = killed
    _check_rank_slices(spec, out)


def test_split_group_each_ranks_advantages_need_the_other_ranks_rewards(split):
    spec, out, text = split
    counts = _check_counts(spec, out)
    _check_once(spec, out, counts)
    differs = _check_rank_slices(spec, out)
    assert any(differs), "every step's rewards were equal within each rank: the split run proves nothing"



def test_accumulated_split_group_each_ranks_advantages_are_cores_on_the_gathered_batch(repo_root, cache_dir, env,
                                                                                       tmp_path):
    from twinrun.backends.trl.compile import compile_spec
    from twinrun.core.advantages import compute_advantages, estimator_config

    spec_path = repo_root / "experiments" / "smoke-cpu.yaml"
    spec = load_spec(spec_path, ACCUMULATED)
    out = tmp_path / "trl-2p-acc"
    _run(_cmd(spec_path, out, ACCUMULATED, cache_dir), env, tmp_path / "acc.log")
    counts = compile_spec(spec).counts
    [m] = [StepMetrics.model_validate(r) for r in read_jsonl(RunPaths(out).metrics)]
    assert (m.curation_rollouts, m.executor_episodes) == (counts["curation_trajectories"], counts["executor_episodes"])
    rollouts = list(read_jsonl(RunPaths(out).rollouts))  # gathered in process order = TRL's batch order
    assert [(r["group_id"], r["rollout_index"]) for r in rollouts] == [(rollouts[0]["group_id"], i) for i in range(2)]
    want = compute_advantages(estimator_config(spec.algorithm), [r["reward"]["total"] for r in rollouts],
                              [r["group_id"] for r in rollouts],
                              valid=[all(not p["no_valid_call"] for p in r["positions"]) for r in rollouts])
    [batch] = _batches(out)
    assert batch["advantages"]["core_by_process"] == [pytest.approx([want[0]], abs=1e-6),
                                                      pytest.approx([want[1]], abs=1e-6)]
    assert len(list(read_jsonl(RunPaths(out).rows))) == 2 and (RunPaths(out).checkpoint(1) / "config.json").is_file()
