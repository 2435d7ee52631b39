"""GPU placement of a sweep's curators (docs/scale.md#sweeps-on-gpus): each checkpoint's curator on its own GPU,
locally in waves (``sweep --gpus``), under Ray with one GPU per checkpoint task; recorded per arm in sweep.json.

There is no GPU here. The placement logic is tested with the device list given, as a GPU node would give it; the
curator is ``device_recording_curator``, a **fake** that notes the device the sweep gave it and never touches CUDA
(it writes nothing). The games (real ALFWorld), sessions, executor (scripted) and Ray (local, with logical GPUs)
are real.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pytest

from twinrun.core.spec import load_spec
from twinrun.core.sweeps import sweep as sw
from twinrun.core.sweeps.placement import Unit, gpu_need, parse_gpus, units, waves

FAST = ["executor.max_turns=2", "sweep.streams=2"]


def checkpoint_folder(path: Path, seed: int) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen3", "seed": seed}))
    (path / "model.safetensors").write_bytes(hashlib.sha256(str(seed).encode()).digest() * 64)
    return path


def test_gpu_lists_units_and_waves() -> None:
    assert parse_gpus("0-7") == list(range(8)) and parse_gpus("0,2,5") == [0, 2, 5]
    assert parse_gpus("0-3,6, 2") == [0, 1, 2, 3, 6] and parse_gpus(None) == [] and parse_gpus("") == []
    for bad in ("a", "3-1", "0-", "1;2"):
        with pytest.raises(sw.SweepError, match=r"^--gpus: .* \(fix: e\.g\. --gpus 0-7 or --gpus 0,2,5\)$"):
            parse_gpus(bad)
    arms = [sw.ArmPlan("baseline", "baseline"), sw.ArmPlan("baseline#r1", "baseline", 1)]
    for step in (10, 20):
        arms += [sw.ArmPlan(sw.arm_name("trl", step, r), "checkpoint", r, run="trl", checkpoint_step=step)
                 for r in (1, 0)]
    got = units(arms)
    assert got == [Unit("baseline", ("baseline", "baseline#r1"), False),
                   Unit("trl@10", ("trl@10", "trl@10#r1"), True), Unit("trl@20", ("trl@20", "trl@20#r1"), True)]
    # the paper's sweep: 12 checkpoints x 2 frameworks on 8 GPUs: 3 waves, never two checkpoints on one GPU
    ckpts = [Unit(f"r@{i}", (f"r@{i}",), True) for i in range(24)]
    ws = waves(ckpts, list(range(8)))
    assert [len(w) for w in ws] == [8, 8, 8]
    assert all(sorted(s.gpu for _, s in w) == list(range(8)) for w in ws)
    assert [u.key for w in ws for u, _ in w] == [u.key for u in ckpts] and ws[1][3][1].device == "cuda:3"
    # two per GPU only when asked; no GPUs: one checkpoint at a time
    two = waves(ckpts[:5], [0, 1], arms_per_gpu=2)
    assert [[s.gpu for _, s in w] for w in two] == [[0, 0, 1, 1], [0]]
    assert [len(w) for w in waves(ckpts[:3], [])] == [1, 1, 1]
    assert gpu_need(24, 8) == {"curator_gpus_all_at_once": 24, "gpus": 8, "waves": 3}


def device_recording_curator(seen: dict[str, tuple[str | None, str]]):
    """Fake curator (no GPU here): notes the device and thread each arm's curator was made with; writes nothing."""

    def factory(arm: sw.ArmPlan, spec: object) -> sw.CuratorPolicy:
        seen[arm.arm] = (arm.device, threading.current_thread().name)
        return lambda curator_input: "(no operations)"

    return factory


@pytest.mark.slow  # three checkpoints in waves of threads, each its own env worker process
@pytest.mark.alfworld
def test_local_gpus_give_each_checkpoint_its_own_gpu_in_waves(tmp_path: Path, smoke_spec_path: Path,
                                                             alfworld_data: Path) -> None:
    run = tmp_path / "trl"
    for step in (1, 2, 3):
        checkpoint_folder(run / "checkpoints" / f"step-{step:06d}", step)
    spec = load_spec(smoke_spec_path, FAST)
    seen: dict[str, tuple[str | None, str]] = {}
    out = tmp_path / "sweep"
    res = sw.sweep(spec, {"trl": run}, out, data_root=alfworld_data, n_games=2, workers=0, progress=False,
                   gpus=[4, 6], policy_factory=device_recording_curator(seen))
    plan = json.loads((out / "sweep.json").read_text())
    placed = {a["arm"]: (a["device"], a["gpus"], a["wave"]) for a in plan["arms"] if a["role"] == "checkpoint"}
    # 3 checkpoints on 2 GPUs: wave 0 holds two (one per GPU), wave 1 the third; a checkpoint's streams share its GPU
    assert placed == {"trl@1": ("cuda:4", "4", 0), "trl@1#r1": ("cuda:4", "4", 0),
                      "trl@2": ("cuda:6", "6", 0), "trl@2#r1": ("cuda:6", "6", 0),
                      "trl@3": ("cuda:4", "4", 1), "trl@3#r1": ("cuda:4", "4", 1)}
    assert all(a["device"] is None for a in plan["arms"] if a["role"] == "baseline")  # no curator, no GPU
    # each curator was made on the device the manifest records; one wave's checkpoints ran in their own threads
    assert {a: d for a, (d, _) in seen.items()} == {"trl@1": "cuda:4", "trl@2": "cuda:6", "trl@3": "cuda:4"}
    assert seen["trl@1"][1] != seen["trl@2"][1] and "wave0" in seen["trl@1"][1] and "wave1" in seen["trl@3"][1]
    # the GPU default dtype (curator.precision: fp32 in the smoke arm) and every arm's rows
    assert plan["curator_dtype"] == "fp32"
    assert all(o.rows == 2 for o in res.arms.values()) and len(res.arms) == 8


@pytest.mark.alfworld
@pytest.mark.slow
def test_ray_gives_each_checkpoint_task_a_gpu(tmp_path: Path, smoke_spec_path: Path, alfworld_data: Path) -> None:
    """Real Ray in local mode with two logical GPUs (Ray schedules and assigns them; nothing runs on them)."""
    pytest.importorskip("ray")
    run = tmp_path / "trl"
    for step in (1, 2):
        checkpoint_folder(run / "checkpoints" / f"step-{step:06d}", step)
    spec = load_spec(smoke_spec_path, FAST)
    log = tmp_path / "devices.jsonl"

    def factory(arm: sw.ArmPlan, spec_: object) -> sw.CuratorPolicy:  # fake, in the Ray worker: notes its device
        with open(log, "a") as f:
            f.write(json.dumps({"arm": arm.arm, "device": arm.device,
                                "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}) + "\n")
        return lambda curator_input: "(no operations)"

    out = tmp_path / "sweep"
    sw.sweep(spec, {"trl": run}, out, data_root=alfworld_data, n_games=2, workers=0, progress=False,
             ray_address="local", ray_num_cpus=3, ray_num_gpus=2, device="cuda", policy_factory=factory)
    made = [json.loads(x) for x in log.read_text().splitlines()]
    # one curator per checkpoint (its streams batched), each in a task Ray gave one GPU
    assert sorted(m["arm"] for m in made) == ["trl@1", "trl@2"]
    assert all(m["device"] == "cuda:0" and m["visible"] in ("0", "1") for m in made)
    plan = sw.load_plan(out)
    for m in made:
        for arm in (m["arm"], m["arm"] + "#r1"):
            a = plan.arm(arm)
            assert (a.device, a.gpus) == ("cuda:0", m["visible"])
    assert all(plan.arm(b).gpus is None for b in ("baseline", "baseline#r1"))


def test_the_cost_up_front_in_plan_and_design(repo_root: Path) -> None:
    from typer.testing import CliRunner

    from twinrun.app.plan import build_plan
    from twinrun.cli import app
    from twinrun.core.sweeps.placement import sweep_cost

    # the paper's protocol: 12 checkpoints x 2 frameworks, 140 games, 4 streams, 8 GPUs (hand-computed)
    assert sweep_cost(checkpoints_per_run=12, runs=2, streams=4, games=140, gpus=8) == {
        "checkpoints": 24, "streams": 4, "games": 140, "curator_turns": 24 * 4 * 140, "curator_calls": 24 * 140,
        "executor_episodes": 25 * 4 * 140, "curator_gpus_all_at_once": 24, "gpus": 8, "waves": 3}
    assert sweep_cost(checkpoints_per_run=12, runs=2, streams=4, games=140, batched=False)["curator_calls"] == 13440
    paper = load_spec(repo_root / "experiments" / "skillos-alfworld-qwen3-8b.yaml")
    cost = build_plan(paper)["sweep_cost"]
    assert (cost["checkpoints"], cost["games"], cost["curator_turns"], cost["executor_episodes"], cost["waves"]) == (
        24, 140, 24 * 140, 25 * 140, 3)
    res = CliRunner().invoke(app, ["plan", str(repo_root / "experiments" / "skillos-alfworld-qwen3-8b.yaml")])
    assert "3,360 curator turns" in " ".join(res.output.split()) and "3,500 executor episodes" in res.output
    res = CliRunner().invoke(app, ["design", "--delta", "10", "--rho", "0.02", "--checkpoints", "12", "--runs", "2",
                                   "--json"])
    out = json.loads(res.output)
    need, games = out["streams_needed"], out["games_per_stream"]
    assert out["sweep_cost"] == sweep_cost(checkpoints_per_run=12, runs=2, streams=need, games=games)
    res = CliRunner().invoke(app, ["design", "--delta", "10", "--rho", "0.02", "--checkpoints", "12", "--runs", "2"])
    text = " ".join(res.output.split())  # the console wraps long lines
    assert f"{24 * need * games:,} curator turns" in text and "24 curator GPUs" in text
