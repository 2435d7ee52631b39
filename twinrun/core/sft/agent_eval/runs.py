"""A training run's evaluable checkpoints, labelled for the study's table (`twinrun eval-agent --run DIR`).

- an SFT run (``twinrun sft``): ``plan.json`` + ``checkpoints/step-N``, one per epoch: ``epoch N / steps_per_epoch``;
- a ROSE run (``twinrun rose``): ``rose.json`` + ``rounds/round-NN/sft/checkpoints/step-N``: the last checkpoint
  of each finished round, ``round k``.
The method is the spec's name and the backend, e.g. ``sft-sciworld-qwen3-1.7b (trl)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from twinrun.core.errors import TwinrunError


@dataclass(frozen=True)
class RunCheckpoint:
    method: str
    stage: str  # "epoch 2", "round 1"
    path: Path
    order: int  # epoch or round number


def _method(run: Path, backend: str | None) -> str:
    spec = run / "spec.yaml"
    name = (yaml.safe_load(spec.read_text(encoding="utf-8")) or {}).get("name") if spec.is_file() else None
    return f"{name or run.name} ({backend or '?'})"


def _steps(folder: Path) -> list[tuple[int, Path]]:
    out = []
    for p in folder.glob("step-*"):
        try:
            out.append((int(p.name.split("-", 1)[1]), p))
        except ValueError:
            continue
    return sorted(out)


def run_checkpoints(run: str | Path) -> list[RunCheckpoint]:
    """The checkpoints of one SFT or ROSE run folder, in training order. Refuses a folder that is neither."""
    run = Path(run)
    if (run / "rose.json").is_file():
        info = json.loads((run / "rose.json").read_text(encoding="utf-8"))
        method = _method(run, info.get("backend"))
        out = []
        for r in sorted(run.glob("rounds/round-*")):
            steps = _steps(r / "sft" / "checkpoints")
            if steps and (r / "done.json").is_file():
                k = int(r.name.split("-", 1)[1])
                out.append(RunCheckpoint(method, f"round {k}", steps[-1][1], k))
        if not out:
            raise TwinrunError(f"--run: {run} has no finished ROSE round (fix: run `twinrun rose` to the end of a "
                               "round first)")
        return out
    if (run / "plan.json").is_file():
        plan = json.loads((run / "plan.json").read_text(encoding="utf-8"))
        spe = int(plan["schedule"]["steps_per_epoch"])
        method = _method(run, plan.get("backend"))
        out = [RunCheckpoint(method, f"epoch {step // spe}", p, step // spe)
               for step, p in _steps(run / "checkpoints")]
        if not out:
            raise TwinrunError(f"--run: {run} has no checkpoint yet (fix: train it, `twinrun sft ... --out {run}`)")
        return out
    raise TwinrunError(f"--run: {str(run)!r} is not an SFT or ROSE run folder (no plan.json / rose.json; fix: the "
                       "--out folder of `twinrun sft` or `twinrun rose`)")
