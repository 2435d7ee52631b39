"""The knob table of `twinrun parity --knobs`: one comparison per knob where DIVERGENCES says the frameworks may
differ, each judged against what `twinrun plan` declares for it.

A knob declared ``equal`` by `plan` must reach the tolerance (else `plan` or a backend is wrong: verdict FAIL);
a ``divergent`` one is measured and reported (verdict "diverges", or "equal anyway" when it happens to match).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twinrun.core.records import atomic_write_text
from twinrun.core.spec import load_spec


@dataclass(frozen=True)
class Knob:
    name: str
    sets: tuple[str, ...]  # --set overrides on top of the spec
    plan_rows: tuple[str, ...]  # `twinrun plan` rows that decide whether the knob is equal
    divergence: str = ""  # the DIVERGENCES entry that predicts a difference ("" = none expected)


KNOBS: tuple[Knob, ...] = (  # most telling first: a table cut short still answers the main questions
    Knob("baseline (spec as is)", (), ("kl_coef", "loss_aggregation", "minibatches", "epochs", "clip_low",
                                        "clip_high", "dual_clip_c", "weight_decay")),
    Knob("KL k3, coef 0.05", ("kl.coef=0.05", "kl.estimator=k3"), ("kl_coef", "kl_estimator"), "B3"),
    Knob("minibatches 2", ("batch.minibatches=2",), ("minibatches",), "B6"),
    Knob("seq_mean_token_sum", ("algorithm.loss_aggregation=seq_mean_token_sum",), ("loss_aggregation",), "B5"),
    Knob("epochs 2", ("batch.epochs=2",), ("epochs",)),
    Knob("seq_mean_token_mean", ("algorithm.loss_aggregation=seq_mean_token_mean",), ("loss_aggregation",)),
    Knob("clip 0.1 / 0.28", ("clip.low=0.1", "clip.high=0.28"), ("clip_low", "clip_high")),
    Knob("dual clip c 1.5", ("clip.dual_clip_c=1.5",), ("dual_clip_c",)),
    Knob("KL k1, coef 0.05", ("kl.coef=0.05", "kl.estimator=k1"), ("kl_coef", "kl_estimator")),
    Knob("KL k2, coef 0.05", ("kl.coef=0.05", "kl.estimator=k2"), ("kl_coef", "kl_estimator")),
)


def plan_status(spec: Any, rows: Sequence[str]) -> tuple[str, str]:
    """("equal" | "divergent", why) of `plan`'s rows ``rows`` for ``spec``."""
    from twinrun.app.plan import build_plan

    plan = build_plan(spec)
    picked = [k for k in plan["knobs"] if k["name"] in rows]
    bad = [f"{k['name']}: {k['why']}" for k in picked if k["status"] != "equal"]
    if not plan["counts_equal"]:
        bad.append("per-step counts differ: " + ", ".join(plan["mismatched_counts"]))
    return ("divergent", "; ".join(bad)) if bad else ("equal", "")


def run_knob_table(
    spec_path: str | Path,
    sets: Sequence[str],
    rollouts: str | Path,
    out_dir: str | Path,
    *,
    cache_dir: Path | None,
    tol: float,
    knobs: Sequence[Knob] = KNOBS,
    log: Callable[[str], None] = print,
    model: str | Path | None = None,
    steps: int = 3,
) -> list[dict[str, Any]]:
    """One parity comparison per knob (the spec plus the knob's overrides), on the same recorded rollouts; the
    rows so far are rewritten to ``out_dir/knobs.json`` after each knob (a cut-short table keeps its rows).
    ``steps``: training steps replayed per knob (run_parity's)."""
    from twinrun.app.parity.run import run_parity

    rows = []
    for i, knob in enumerate(knobs):
        spec = load_spec(spec_path, [*sets, *knob.sets])
        status, why = plan_status(spec, knob.plan_rows)
        log(f"parity knobs: [{i + 1}/{len(knobs)}] {knob.name} (plan: {status})")
        report = run_parity(spec, rollouts, Path(out_dir) / f"{i:02d}", cache_dir=cache_dir, tol=tol, log=log,
                            model=model, steps=steps)
        compared = sorted(report["steps"], key=int)
        first, last = report["steps"][compared[0]]["total"], report["steps"][compared[-1]]["total"]
        passed = report["passed"]
        verdict = ("pass" if passed else "FAIL") if status == "equal" else ("equal anyway" if passed else "diverges")
        if report.get("no_signal"):  # every replayed advantage 0: nothing was compared
            verdict = "no signal"
        rows.append({"knob": knob.name, "sets": list(knob.sets), "plan": status, "plan_why": why,
                     "divergence": knob.divergence, "grad_rel_diff": report["rel_diff"],
                     "grad_rel_diff_worst": report["max_grad_rel_diff"],
                     "rel_diff_step1": first["rel_diff"],
                     "rel_diff_last": last["rel_diff"], "cosine_last": last["cosine"],
                     "norm_ratio_last": (last["norm_verl"] / last["norm_trl"]) if last["norm_trl"] else None,
                     "tol": tol, "verdict": verdict,
                     "updates": report["updates"], "report": report})
        atomic_write_text(Path(out_dir) / "knobs.json", json.dumps(rows, indent=1, default=str) + "\n")
    return rows
