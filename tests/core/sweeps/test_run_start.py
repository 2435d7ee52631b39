"""A run's start as the sweep records it (sweep.json arms' run_start): what compare pairs seeds across groups by."""

from __future__ import annotations

import json
from pathlib import Path

from twinrun.core.sweeps import plan


def test_run_start_reads_the_model_each_backends_resolved_config_names(tmp_path: Path) -> None:
    trl, verl, bare = tmp_path / "trl-s0", tmp_path / "verl-s0", tmp_path / "bare"
    for d in (trl, verl, bare):
        d.mkdir()
    (trl / "resolved_config.json").write_text(json.dumps({"twinrun_curator_model": "tiny-qwen3-warm-f4d6"}))
    (verl / "resolved_config.json").write_text(json.dumps(
        {"backend": "verl", "overrides": {"actor_rollout_ref.model.path": "/cache/tiny-qwen3-warm-f4d6"}}))
    assert plan.run_start(trl) == plan.run_start(verl) == "tiny-qwen3-warm-f4d6"
    assert plan.run_start(bare) is None
    (bare / "resolved_config.json").write_text(json.dumps({"overrides": {"actor_rollout_ref.model.path": "Qwen/Qwen3-8B"}}))
    assert plan.run_start(bare) == "Qwen/Qwen3-8B"
    assert "run_start" in plan.ArmPlan(arm="x", role="checkpoint").__dataclass_fields__


def _start(folder: Path, weights: bytes) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "config.json").write_text("{}")
    return folder


def test_start_weights_hash_reads_the_start_folders_weights(tmp_path: Path) -> None:
    """verl records the start's absolute folder, TRL its name (found under the warm-start cache): both are hashed by
    their safetensors, so the same name with other weights (a warm start rebuilt elsewhere) hashes differently."""
    here, there = _start(tmp_path / "cache" / "tiny-qwen3-warm-f4d6", b"w1"), _start(tmp_path / "other" / "w", b"w2")
    trl, verl, hub = tmp_path / "trl-s0", tmp_path / "verl-s0", tmp_path / "hub"
    for d in (trl, verl, hub):
        d.mkdir()
    (trl / "resolved_config.json").write_text(json.dumps({"twinrun_curator_model": "tiny-qwen3-warm-f4d6"}))
    (verl / "resolved_config.json").write_text(json.dumps({"overrides": {"actor_rollout_ref.model.path": str(here)}}))
    (hub / "resolved_config.json").write_text(json.dumps({"overrides": {"actor_rollout_ref.model.path": "Qwen/Qwen3-8B"}}))
    h = plan.start_weights_hash(verl)
    assert h is not None and len(h) == 16
    assert plan.start_weights_hash(trl, [tmp_path / "cache"]) == h
    assert plan.start_weights_hash(trl) is None  # a name with no folder to look in: not recorded by hash
    assert plan.start_weights_hash(hub, [tmp_path / "cache"]) is None
    (there / "model.safetensors").write_bytes(b"w1")  # same bytes, another name and place: the same weights
    (verl / "resolved_config.json").write_text(json.dumps({"overrides": {"actor_rollout_ref.model.path": str(there)}}))
    assert plan.start_weights_hash(verl) == h
    (there / "model.safetensors").write_bytes(b"w2")
    assert plan.start_weights_hash(verl) != h
    assert "run_start_hash" in plan.ArmPlan(arm="x", role="checkpoint").__dataclass_fields__


def test_plan_sweep_records_each_runs_start_by_name_and_weights(tmp_path: Path, smoke_spec_path: Path) -> None:
    """sweep.json's arms carry run_start and run_start_hash; the name alone where the start folder is not found."""
    from tests.core.sweeps.test_sweep import _games, checkpoint_folder
    from twinrun.core.spec import load_spec

    start = _start(tmp_path / "cache" / "tiny-qwen3-warm-f4d6", b"w1")
    runs = {}
    for name in ("trl-s0", "verl-s0"):
        run = tmp_path / name
        checkpoint_folder(run / "checkpoints" / "step-000001")
        (run / "resolved_config.json").write_text(json.dumps({"twinrun_curator_model": start.name}))
        runs[name] = run
    games = _games(2, 1)
    kw = dict(games=games, split="valid_seen", executor_settings_hash="x")
    p = plan.plan_sweep(load_spec(smoke_spec_path), runs, tmp_path / "out", start_roots=[tmp_path / "cache"], **kw)
    saved = json.loads((tmp_path / "out" / plan.MANIFEST).read_text())
    hashes = {a["arm"]: (a["run_start"], a["run_start_hash"]) for a in saved["arms"] if a["run"]}
    want = (start.name, plan.start_weights_hash(runs["trl-s0"], [tmp_path / "cache"]))
    assert want[1] is not None and hashes == {"trl-s0@1": want, "verl-s0@1": want}
    assert p.arm("trl-s0@1").run_start_hash == want[1]
    bare = plan.plan_sweep(load_spec(smoke_spec_path), runs, tmp_path / "out2", **kw)
    assert bare.arm("trl-s0@1").run_start == start.name and bare.arm("trl-s0@1").run_start_hash is None
