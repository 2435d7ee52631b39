"""What the served-sweep tests compare against (the stand-in server's, tests/core/sweeps/test_sweep_served.py, and
real vLLM's, tests/vllm/test_vllm_served_sweep.py): one checkpoint as a run folder, and the in-process sweep's rows
of it, played one sequence at a time, with the fields that differ between two runs of the same sweep left out."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

WALL_CLOCK = {"time", "wall_s", "started_at"}  # when and how long: they differ between two runs of one sweep


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in WALL_CLOCK and k != "sweep_id"}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def arm_rows(out: Path) -> dict[str, list[dict]]:
    """arm -> its rows in a sweep folder, without wall-clock fields or the sweep id."""
    return {p.stem: [_strip(json.loads(x)) for x in p.read_text().splitlines()]
            for p in sorted((out / "arms").glob("*.jsonl"))}


def one_checkpoint_run(root: Path, checkpoint: Path) -> Path:
    """A run folder ``root`` whose only checkpoint (step 1) is a copy of ``checkpoint``."""
    shutil.copytree(checkpoint, root / "checkpoints" / "step-000001")
    return root


def inprocess_rows(spec_path: Path, overrides: Sequence[str], run: Path, out: Path, *, data_root: Path,
                   games: int) -> dict[str, list[dict]]:
    """The rows of the in-process sweep of ``run`` (transformers, ``sweep.batch_streams: false``: one sequence at a
    time, as a server answers one request), what a served sweep of the same spec must write. The run's arms are
    ``trl@...``; every checkpoint row carries its curator turn (checked)."""
    from twinrun.core.spec import load_spec
    from twinrun.core.sweeps import sweep as sw
    from twinrun.models.curator_policy import hf_policy_factory

    spec = load_spec(spec_path, [*overrides, "sweep.batch_streams=false"])
    sw.sweep(spec, {"trl": run}, out, data_root=data_root, n_games=games, workers=0, progress=False,
             policy_factory=hf_policy_factory)
    got = arm_rows(out)
    assert all(r["curator_turn"] for r in got["trl@1"]), "the sampled text is in every checkpoint row"
    return got
