"""One parity comparison: the same recorded rollouts through TRL's and verl's real update, then the weights.

Flow: recorded rollouts (a run's rollouts.jsonl; recorded here with the TRL backend when none is given) ->
core's replay batches (:mod:`twinrun.core.advantages.replay`: tokens, masks, rewards, core advantages) -> each backend's
``replay`` (registry; TRL in this process, verl in a child) from the same starting weights with a fresh optimizer
-> the gradient each optimizer update applied (after clipping) and the weights after training step 1 and the last
step -> ``||g_trl - g_verl|| / ||g_trl||`` and ``||dW_trl - dW_verl|| / ||dW_trl||`` per tensor group and in total,
with the loss, log-ratio statistics and clip fraction each trainer reported per update.

The verdict is the gradient difference of the first optimizer update that moved anything (the update math: loss, aggregation,
clipping, masks, advantages, on identical weights and data); later updates' gradient differences are reported (worst
of them beside it), as is the weight difference after AdamW, but not judged: AdamW's ``g / (|g| + eps)`` turns fp32
rounding of near-zero gradient coordinates into ~1e-3 of the update (DIVERGENCES B15), so from update 2 on the two
trainers differentiate slightly different weights (the measured differences per arm: docs/measured.md, "parity").
Later updates still fail the verdict when they differ by more than ``LATER_FACTOR * tol`` (a mini-batch or epoch
difference shows there first).

The pair is the registry's backends with a ``replay`` hook (backends/registry.py): the twin, TRL then verl, whose
names the report's fields carry (``norm_trl``, ``norm_verl``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from twinrun.core.errors import TwinrunError
from twinrun.core.records import RunPaths, atomic_write_text
from twinrun.core.advantages.replay import check_replayable, describe, load_replay
from twinrun.app.parity.weights import update_difference

DEFAULT_TOL = 1e-4  # a choice: above the fp32 floor of one update, far below a real difference (docs/measured.md)
LATER_FACTOR = 10  # updates after the first must stay within 10 x tol (they inherit the AdamW floor, B15)


def parity_pair() -> tuple[str, ...]:
    """The backends parity replays through, from the registry (those with a ``replay`` hook): exactly the twin."""
    from twinrun.backends import registry

    pair = registry.names_with("replay")
    if pair != ("trl", "verl"):
        raise TwinrunError(f"parity: the registry's replaying backends are {pair}, not the twin ('trl', 'verl') the "
                           "report compares (fix: register a replay hook for trl and verl only)")
    return pair


def comparison_steps(spec: Any, recorded: int | None = None, most: int = 3) -> list[int]:
    """The training steps after which the weights are compared: 1 and 3 (fewer when the run is shorter, or
    ``most`` asks for fewer)."""
    last = min(max(1, most), spec.steps if recorded is None else recorded)
    return sorted({1, last})


def record_rollouts(spec: Any, cache_dir: Path | None, root: Path, *, log: Callable[[str], None]) -> Path:
    """A real run of the spec's arm with the TRL backend (its rollouts.jsonl records the trained tokens), kept
    under ``root`` by spec hash and resumed when interrupted. Returns the rollouts.jsonl path."""
    from twinrun.backends import registry

    check_replayable(spec)
    out = root / f"{spec.name}-{spec.spec_hash()}"
    paths = RunPaths(out)
    done = (out / "checkpoints").is_dir() and _recorded_steps(paths.rollouts) >= min(spec.steps, 3)
    if not done:
        log(f"parity: recording rollouts with a real TRL run of {spec.name} into {out}")
        registry.trainer("trl")(spec, out, resume=out.exists(), cache_dir=cache_dir)
    return paths.rollouts


def _recorded_steps(path: Path) -> int:
    if not path.is_file():
        return 0
    from twinrun.core.records import read_jsonl

    return len({int(r["step"]) for r in read_jsonl(path) if r.get("kind") == "curation_rollout"})


def run_parity(
    spec: Any,
    rollouts: str | Path,
    out_dir: str | Path,
    *,
    cache_dir: Path | None,
    tol: float = DEFAULT_TOL,
    log: Callable[[str], None] = print,
    verl_timeout_s: float = 900,
    model: str | Path | None = None,
    steps: int = 3,
) -> dict[str, Any]:
    """Replay ``rollouts`` through both trainers under ``spec`` and compare. Writes ``out_dir/parity.json``.
    ``model``: the local HF checkpoint both start from (default: the spec's curator, warm-started if tiny);
    ``steps``: training steps replayed (at most the recorded ones)."""
    from twinrun.backends import registry
    from twinrun.models.warmstart import resolve_curator_model

    out = Path(out_dir)
    recorded = _recorded_steps(Path(rollouts))
    save_after = comparison_steps(spec, recorded or None, steps)
    batches = load_replay(rollouts, spec, steps=max(save_after))
    if model is None:
        model = resolve_curator_model(spec, cache_dir, environ=dict(os.environ), log=log)
    log(f"parity: {spec.name}: replaying {describe(batches)} from {rollouts}")
    results: dict[str, dict[str, Any]] = {}
    for name in parity_pair():
        log(f"parity: {name} update")
        results[name] = registry.replayer(name)(spec, batches, model, out / name, save_after=save_after, log=log,
                                                **({"timeout_s": verl_timeout_s} if name == "verl" else {}))
    report = compare(spec, model, results, save_after, tol=tol)
    report["rollouts"] = str(rollouts)
    report["replayed"] = describe(batches)
    atomic_write_text(out / "parity.json", json.dumps(report, indent=2, default=_json_default) + "\n")
    return report


def compare(spec: Any, model: str | Path, results: dict[str, dict[str, Any]], save_after: Sequence[int], *,
            tol: float) -> dict[str, Any]:
    """The report: per compared step the update difference (groups + total), each backend's updates."""
    from safetensors.numpy import load_file

    initial = _initial_weights(Path(model), load_file)
    tied = _tied(Path(model))
    grads = {}
    for u in sorted(results["trl"].get("grads", {}), key=int):
        if str(u) not in results["verl"].get("grads", {}):
            continue
        g_trl = load_file(results["trl"]["grads"][u])
        g_verl = load_file(results["verl"]["grads"][str(u)])
        zeros = {n: np.zeros_like(v) for n, v in g_trl.items()}
        ignore = tuple(n for n in ("lm_head.weight",) if tied and n not in g_verl)
        grads[str(u)] = update_difference(zeros, g_trl, g_verl, ignore=ignore)
    if not grads:
        raise TwinrunError("parity: no optimizer update's gradient from both trainers (fix: a replay of at least "
                           "one training step)")
    per_step = {}
    for k in save_after:
        trl = load_file(results["trl"]["weights"][str(k)] if str(k) in results["trl"]["weights"]
                        else results["trl"]["weights"][k])
        verl = load_file(results["verl"]["weights"][str(k)])
        per_step[str(k)] = update_difference(initial, trl, verl, ignore=("lm_head.weight",) if tied else ())
    # The verdict's update is the first that moved anything: an update whose advantages were all 0 (every group's
    # rewards equal) has a zero gradient on both sides, and 0 == 0 would pass a comparison that measured nothing.
    moved = [u for u in sorted(grads, key=int)
             if grads[u]["total"]["norm_trl"] > 0 or grads[u]["total"]["norm_verl"] > 0]
    judged = moved[0] if moved else None
    first = grads[judged]["total"]["rel_diff"] if judged else math.nan
    worst = max(d["total"]["rel_diff"] for d in grads.values())
    worst_weights = max(per_step[str(k)]["total"]["rel_diff"] for k in save_after)
    return {
        "spec": {"name": spec.name, "hash": spec.spec_hash()},
        "tol": tol,
        "grads": grads,
        "steps": per_step,
        "updates": {b: results[b]["updates"] for b in results},
        "frameworks": {b: results[b].get("framework") for b in results},
        "wall_s": {b: results[b].get("wall_s") for b in results},
        "rel_diff": first,
        "max_grad_rel_diff": worst,
        "max_weight_rel_diff": worst_weights,
        "later_tol": LATER_FACTOR * tol,
        "judged_update": judged,
        "no_signal": None if judged else (
            f"no replayed update moved the weights ({len(grads)} update(s), every advantage 0: each group's rewards "
            "were equal), so the comparison measured nothing (fix: record more steps, another seed or more "
            "rollouts per group)"),
        "passed": bool(judged and math.isfinite(worst) and first <= tol and worst <= LATER_FACTOR * tol),
    }


def _initial_weights(model: Path, load_file: Any) -> dict[str, Any]:
    files = sorted(model.glob("*.safetensors"))
    if not files:
        raise TwinrunError(f"parity: {model} holds no *.safetensors (fix: a local HF checkpoint folder)")
    weights: dict[str, Any] = {}
    for f in files:
        weights.update(load_file(str(f)))
    return weights


def _tied(model: Path) -> bool:
    try:
        return bool(json.loads((model / "config.json").read_text(encoding="utf-8")).get("tie_word_embeddings"))
    except (OSError, ValueError):
        return False


def _json_default(o: Any) -> Any:
    if isinstance(o, float) and not math.isfinite(o):
        return str(o)
    return str(o)
