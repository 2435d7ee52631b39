"""What a sweep and a comparison show in the tracker (issue 18).

A sweep is one tracker run of the arm's group (job type ``sweep``): per checkpoint step, each run's held-out
success rate and its lift over the same-sweep baseline (``sweep/<run>/success_rate``, ``sweep/<run>/lift``);
the baseline's rate in the summary; and a table of every arm. ``compare`` logs into that same tracker run (the
sweep folder's ``tracking.json`` names it): the report's figures and the verdict table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from twinrun.core.records import read_jsonl
from twinrun.core.records.tracking import STATE_FILE, Log, TrackedRun, open_tracker, run_tags

ARM_COLUMNS = ["arm", "run", "checkpoint", "replicate", "n_measured", "n_unmeasured", "success_rate", "lift",
               "n_paired"]


def arm_summaries(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """Per arm of a sweep: measured and unmeasured games, success rate over measured games, and the lift over
    the baseline (replicate 0) on the games measured in both (the paired lift `compare` reports)."""
    from twinrun.core.sweeps.sweep import ARMS_DIR, BASELINE, load_plan

    plan = load_plan(sweep_dir)
    if plan is None:
        return []
    outcomes: dict[str, dict[int, bool]] = {}
    for a in plan.arms:
        rows = read_jsonl(Path(sweep_dir) / ARMS_DIR / f"{a.arm}.jsonl")
        outcomes[a.arm] = {int(r["game_index"]): r["outcome"] == "success" for r in rows
                           if r.get("outcome") in ("success", "failure")}
    base = outcomes.get(BASELINE, {})
    out = []
    for a in plan.arms:
        got = outcomes[a.arm]
        done = len(list(read_jsonl(Path(sweep_dir) / ARMS_DIR / f"{a.arm}.jsonl")))
        paired = sorted(set(got) & set(base))
        lift = (sum(got[g] for g in paired) - sum(base[g] for g in paired)) / len(paired) if paired else None
        out.append({"arm": a.arm, "run": a.run, "checkpoint": a.checkpoint_step, "replicate": a.replicate,
                    "n_measured": len(got), "n_unmeasured": done - len(got),
                    "success_rate": sum(got.values()) / len(got) if got else None,
                    "lift": lift if a.arm != BASELINE else 0.0, "n_paired": len(paired)})
    return out


def log_sweep(spec: Any, sweep_dir: str | Path, *, log: Log = print) -> None:
    """Log a finished (or resumed) sweep to ``spec.tracking``; a no-op for ``tracking: none``."""
    if spec.tracking.backend == "none":
        return
    from twinrun.core.sweeps.sweep import BASELINE, load_plan

    plan = load_plan(sweep_dir)
    if plan is None:
        return
    arms = arm_summaries(sweep_dir)
    run = TrackedRun(name=f"{spec.name}-sweep-{plan.sweep_id[:8]}", group=spec.tracking.group or spec.name,
                     job_type="sweep", tags=run_tags(spec, None) + ("sweep",), folder=Path(sweep_dir),
                     config={"sweep_id": plan.sweep_id, "games_hash": plan.games_hash, "split": plan.split,
                             "n_games": len(plan.games), "spec_hash": plan.spec_hash,
                             "executor_settings_hash": plan.executor_settings_hash})
    tracker = open_tracker(spec.tracking, run, log=log)
    try:
        by_step: dict[int, dict[str, float]] = {}
        for a in arms:
            if a["checkpoint"] is None or a["replicate"] or a["success_rate"] is None:
                continue
            point = by_step.setdefault(int(a["checkpoint"]), {})
            point[f"sweep/{a['run']}/success_rate"] = a["success_rate"]
            if a["lift"] is not None:
                point[f"sweep/{a['run']}/lift"] = a["lift"]
        for step in sorted(by_step):  # one call per step: wandb's steps only go forward
            tracker.log_metrics(by_step[step], step)
        base = next((a for a in arms if a["arm"] == BASELINE), None)
        summary: dict[str, Any] = {"sweep/n_games": len(plan.games)}
        if base is not None and base["success_rate"] is not None:
            summary["sweep/baseline/success_rate"] = base["success_rate"]
        tracker.set_summary(summary)
        tracker.log_table("sweep/arms", ARM_COLUMNS, [[a[c] for c in ARM_COLUMNS] for a in arms])
    finally:
        tracker.close()


# ------------------------------------------------------------------------------------------------------------
# compare


def verdict_rows(result: Mapping[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """The verdict table of a `compare` result: one row per pair of runs (the mapping from compare's JSON lives
    here only)."""
    columns = ["a", "b", "checkpoints", "pearson", "spearman", "verdict", "explanation", "criterion"]
    rows = [[p.get("a"), p.get("b"), p.get("n_checkpoints"), p.get("pearson"), p.get("spearman"), p.get("verdict"),
             p.get("explanation"), p.get("criterion")] for p in result.get("pairs") or []]
    return columns, rows


def lift_rows(result: Mapping[str, Any]) -> tuple[list[str], list[list[Any]]]:
    columns = ["arm", "run", "checkpoint", "lift", "ci_low", "ci_high", "p", "p_holm", "family", "family_size"]
    rows = []
    for a in result.get("arms") or []:
        ci = a.get("lift_ci") or [None, None]
        rows.append([a.get("arm"), a.get("run"), a.get("checkpoint"), a.get("lift"), ci[0], ci[1], a.get("p_value"),
                     a.get("p_holm"), a.get("family"), a.get("family_size")])
    return columns, rows


def tracked_sweep(inputs: Sequence[str | Path]) -> Path | None:
    """The first compared sweep folder whose sweep was tracked (it holds tracking.json)."""
    for p in inputs:
        if (Path(p) / STATE_FILE).is_file() and (Path(p) / "sweep.json").is_file():
            return Path(p)
    return None


def log_comparison(result: Mapping[str, Any], report_dir: str | Path | None, sweep_dir: str | Path, *,
                   log: Log = print) -> bool:
    """Upload a comparison's verdict and lift tables, and its report's figures (when `report_dir` holds a
    report), into its sweep's tracker run. Returns whether a tracker was named (the sweep folder's
    tracking.json); a tracker that cannot start is one warning line."""
    from twinrun.core.spec import TrackingSpec

    state = json.loads((Path(sweep_dir) / STATE_FILE).read_text(encoding="utf-8"))
    if "spec" not in state:
        return False
    tracking = TrackingSpec.model_validate(state["spec"])
    run = TrackedRun(name=state["name"], group=state["group"], job_type=state.get("job_type", "sweep"),
                     tags=tuple(state.get("tags", ())), folder=Path(sweep_dir))
    tracker = open_tracker(tracking, run, log=log, resume_after=None)
    try:
        tracker.log_table("compare/verdicts", *verdict_rows(result))
        tracker.log_table("compare/lifts", *lift_rows(result))
        if report_dir is not None:
            for png in sorted((Path(report_dir) / "figures").glob("*.png")):
                tracker.log_image(f"compare/{png.stem}", png)
            report = Path(report_dir) / "report.md"
            if report.is_file():
                tracker.log_text("compare/report", report.read_text(encoding="utf-8"))
    finally:
        tracker.close()
    return True
