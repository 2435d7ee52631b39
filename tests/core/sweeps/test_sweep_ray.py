"""`twinrun sweep --ray` on a real local multi-node Ray cluster (ray.cluster_utils.Cluster: a head without CPUs and
two worker nodes of one CPU each, all on this machine), real ALFWorld games, the scripted executor and the built-in
no-ops curator (plumbing: the sweep's distribution, not a checkpoint, is under test). One worker node is killed
(SIGKILL of its raylet and workers) while it is in the middle of an arm.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from twinrun.core.sweeps import sweep as sw
from twinrun.core.sweeps import ray_tasks as swr

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

GAMES = 20
# node death noticed within ~2 s instead of Ray's default ~30 s
FAST_HEALTH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500, "health_check_timeout_ms": 500,
               "health_check_failure_threshold": 3}


def checkpoint_folder(path: Path, seed: int) -> Path:
    """A checkpoint-shaped folder (config.json + weight bytes), never loaded (the no-ops curator does not generate):
    its discovery and content hash are what the sweep records."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 16, "seed": seed}))
    (path / "model.safetensors").write_bytes(hashlib.sha256(str(seed).encode()).digest() * 64)
    return path


def rows(out: Path, arm: str) -> list[dict]:
    return [json.loads(line) for line in (out / "arms" / f"{arm}.jsonl").read_text().splitlines()]


@pytest.mark.alfworld
@pytest.mark.slow
def test_sweep_survives_a_lost_ray_node(tmp_path: Path, smoke_spec_path: Path, alfworld_data: Path) -> None:
    run = tmp_path / "trl-s0"
    for step in (2, 4):
        checkpoint_folder(run / "checkpoints" / f"step-{step:06d}", seed=step)
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False, "_system_config": FAST_HEALTH})
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    try:
        cluster.wait_for_nodes()
        out = tmp_path / "sweep"
        cmd = [sys.executable, "-m", "twinrun.cli", "sweep", f"trl={run}", "--spec", str(smoke_spec_path), "--out", str(out),
               "--ray", cluster.address, "--curator", "no-ops", "--games", str(GAMES), "--workers", "0", "--streams", "1",
               "--set", "executor.max_turns=3", "--no-progress", "--json"]
        env = {**os.environ, "ALFWORLD_DATA": str(alfworld_data)}
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        by_id = {w.node_id: w for w in workers}
        arms = ["baseline", "trl@2", "trl@4"]
        seen_nodes: dict[str, str] = {}
        killed = None
        deadline = time.time() + 600
        while killed is None and time.time() < deadline and proc.poll() is None:
            for arm in arms:
                lease = swr.lease_path(out, arm)
                if not lease.exists():
                    continue
                node = json.loads(lease.read_text())["node_id"]
                seen_nodes[arm] = node
                # kill the node while its arm is mid-way, once both nodes have been given an arm
                if (len(set(seen_nodes.values())) == 2 and node in by_id
                        and 1 <= sw.rows_done(out, arm) <= GAMES - 5):
                    killed = (arm, node, sw.rows_done(out, arm))
                    cluster.remove_node(by_id[node], allow_graceful=False)
                    break
            time.sleep(0.05)
        assert killed is not None, (proc.poll(), seen_nodes, proc.stderr.read().decode()[-3000:] if proc.poll() else "")
        stdout, stderr = proc.communicate(timeout=600)
        wall = time.time() - t0
        assert proc.returncode == 0, stderr.decode()[-3000:]
        summary = json.loads(stdout)
        print(f"\nsweep with a lost node: {wall:.1f} s; killed {killed[0]} at row {killed[2]} of {GAMES}")
    finally:
        cluster.shutdown()

    arm, lost_node, at_row = killed
    # the arms were spread over both worker nodes (the head has no CPUs)
    first_nodes = {a: swr.attempts(out, a)[0]["node_id"] for a in arms}
    assert set(first_nodes.values()) == set(by_id)
    # the lost arm ran again on the survivor and resumed from its rows
    tries = swr.attempts(out, arm)
    assert [t["node_id"] for t in tries][0] == lost_node and tries[-1]["node_id"] != lost_node
    assert tries[-1]["rows_at_start"] >= at_row
    assert summary["arms"][arm]["attempts"] >= 2 and summary["arms"][arm]["resumed_from"] >= at_row
    plan = sw.load_plan(out)
    for a in arms:
        got = rows(out, a)
        assert [r["game_index"] for r in got] == list(range(GAMES))  # every game once, in order
        assert {r["sweep_id"] for r in got} == {plan.sweep_id}
        p = plan.arm(a)
        if p.checkpoint_path:  # rows carry the planned content hash, and the weights still hash to it
            assert {r["provenance"]["checkpoint_hash"] for r in got} == {p.checkpoint_hash}
            assert sw.checkpoint_hash(p.checkpoint_path) == p.checkpoint_hash
    # common random numbers: with no skills written, every arm replays the same executor episodes, lost node or not
    assert len({tuple(r["outcome"] for r in rows(out, a)) for a in arms}) == 1


def test_a_taken_over_attempt_stops_before_writing(tmp_path: Path) -> None:
    """The lease: an older attempt still alive after its arm was run again elsewhere may not append a row."""
    old = swr._take_lease(str(tmp_path), "trl@2", "node-a", "call-1")
    swr._check_lease(str(tmp_path), "trl@2", old)  # still the holder
    new = swr._take_lease(str(tmp_path), "trl@2", "node-b", "call-1")
    with pytest.raises(swr.ArmTakenOver, match="taken over"):
        swr._check_lease(str(tmp_path), "trl@2", old)
    swr._check_lease(str(tmp_path), "trl@2", new)
    assert [a["node_id"] for a in swr.attempts(tmp_path, "trl@2")] == ["node-a", "node-b"]
