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
