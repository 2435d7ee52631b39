"""Training runs' step metrics (metrics.jsonl) read for `compare --training`: which runs, which group and seed
each is, whether seeds pair, and which metrics the two frameworks compute alike.

A run still training is read as far as its complete rows go (a torn last line is skipped and reported). Runs
are found from sweep folders (sweep.json's run folders, or a ``metrics/`` folder beside it holding one
``RUN.jsonl`` per run, as the committed controls keep them), run folders (``metrics.jsonl``) or metrics files.
The statistics are :mod:`.training`.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from twinrun.core.compare.model import CompareError
from twinrun.core.records import read_jsonl


@dataclass
class TrainingRun:
    name: str
    path: Path  # its metrics.jsonl
    backend: str | None
    seed: int | None
    group: str | None
    steps: np.ndarray  # [S] ascending, complete rows only (a step written twice: its last row)
    values: dict[str, np.ndarray]  # metric -> [S], NaN where not recorded
    torn: bool = False  # the file ends in a line still being written (a run still training, or a crash)
    start: str | None = None  # the model its first step trained from (resolved_config.json), None: not recorded
    context: str | None = None  # its spec's curator.context (spec.yaml), None: not recorded
    optimizer_updates: int | None = None
    notes: list[str] = field(default_factory=list)


# metric -> (family, getter path in a metrics.jsonl row): the reward, its terms, the policy's training numbers and
# the curation counts a mis-configured run moves first; the rest of a row (episode counts, timings) is bookkeeping
METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "reward_mean": ("reward", ("reward_mean",)),
    "r_task": ("reward", ("reward_terms", "r_task")),
    "r_fc": ("reward", ("reward_terms", "r_fc")),
    "r_cnt": ("reward", ("reward_terms", "r_cnt")),
    "r_comp": ("reward", ("reward_terms", "r_comp")),
    "turns_missing_share": ("curation", ("turns_missing_share",)),
    "tool_calls": ("curation", ("tool_calls",)),
    "tool_failures": ("curation", ("tool_failures",)),
    "entropy": ("policy", ("entropy",)),
    "kl": ("policy", ("kl",)),
    "clip_fraction": ("policy", ("clip_fraction",)),
    "grad_norm": ("policy", ("grad_norm",)),
    "completion_length_mean": ("policy", ("completion_length_mean",)),
}
CORE = "computed by core from the rollout records, the same function for every backend"
# what each framework's number is, where the two are compared (read from trl 1.16 grpo_trainer.py, verl 0.9.1
# core_algos.py / trainer_base.py / metric_utils.py and the backends' metric mapping)
DEFINITIONS = {
    "entropy": "mean token entropy of the pre-update policy over the response tokens (TRL: its loss pass, a global "
               "token mean; verl: its old-log-prob pass, aggregated by loss_agg_mode)",
    "clip_fraction": "share of response tokens whose ratio is clipped on the side the advantage's sign makes active "
                     "(TRL clip_ratio/region_mean, a global token mean; verl actor/pg_clipfrac, a token mean per "
                     "micro-batch averaged over micro-batches)",
    "grad_norm": "global L2 norm of the update's gradient before clipping (both; the loss normaliser is the spec's "
                 "loss_aggregation, verl's token mean is per micro-batch: DIVERGENCES)",
    "completion_length_mean": "mean generated tokens per training sequence (per_position: one curator turn each)",
}


NONE_WHY = {"kl": " (the KL loss is off: TRL beta 0, verl use_kl_loss false)"}


def metric_value(row: dict[str, Any], path: tuple[str, ...]) -> float:
    v: Any = row
    for k in path:
        v = v.get(k) if isinstance(v, dict) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return float("nan")
    return float(v)


def not_comparable(metric: str, runs: Sequence[TrainingRun]) -> str | None:
    """Why `metric` cannot be compared between these runs' backends (None: it can). Checked before any number
    is read, from what each backend writes into the field (twinrun/backends/*/records.py, metrics.py)."""
    backends = {r.backend for r in runs}
    contexts = {r.context or "per_position" for r in runs}
    if metric == "kl" and "verl" in backends and len(backends) > 1:
        return ("another definition: verl's actor/kl_loss clamps each token's k3 to [-10, 10] (and the log-ratio "
                "to +-20) and aggregates it by loss_agg_mode; TRL's kl is the unclamped k3, a global token mean")
    if metric == "tool_failures" and "verl" in backends and len(backends) > 1:
        return "not computed by verl (the verl backend writes 0; TRL counts its tool loop's failed calls)"
    if metric == "tool_calls" and "accumulated" in contexts and len(backends) > 1:
        return ("another definition under curator.context=accumulated: TRL's tool loop counts calls of unknown "
                "tools too, verl counts the calls that reached the session")
    if metric == "completion_length_mean" and "accumulated" in contexts and len(backends) > 1:
        return ("another definition under curator.context=accumulated: TRL counts the model's tokens only "
                "(tool_mask), verl the whole response including tool results (attention mask)")
    if metric == "entropy" and len(backends) > 1 and any((r.optimizer_updates or 1) > 1 for r in runs):
        return ("another definition with several optimizer updates per step: TRL averages the entropy of each "
                "update's weights, verl measures it once before the first update")
    return None


def _spec_facts(folder: Path) -> tuple[str | None, str | None]:
    """(curator.context from spec.yaml, the start model from resolved_config.json) of a run folder."""
    context = start = None
    spec = folder / "spec.yaml"
    if spec.is_file():
        import yaml

        try:
            data = yaml.safe_load(spec.read_text(encoding="utf-8")) or {}
            context = ((data.get("curator") or {}).get("context")) if isinstance(data, dict) else None
        except yaml.YAMLError:
            context = None
    rc = folder / "resolved_config.json"
    if rc.is_file():
        try:
            cfg = json.loads(rc.read_text(encoding="utf-8"))
            name = cfg.get("twinrun_curator_model") or (cfg.get("overrides") or {}).get("actor_rollout_ref.model.path")
            start = Path(name).name if isinstance(name, str) and name else None
        except (OSError, ValueError, AttributeError):
            start = None
    return context, start


def read_run(path: str | Path, name: str | None = None) -> TrainingRun:
    """One run's complete metrics rows: a run folder (its metrics.jsonl) or a metrics .jsonl file."""
    p = Path(path)
    folder = p if p.is_dir() else None
    mpath = p / "metrics.jsonl" if p.is_dir() else p
    if not mpath.is_file():
        raise CompareError(f"{p}: no metrics.jsonl (fix: pass a training run folder, a metrics .jsonl file or a "
                           "sweep folder)")
    raw = mpath.read_bytes()
    torn = bool(raw) and not raw.endswith(b"\n")
    by_step: dict[int, dict[str, Any]] = {}
    for row in read_jsonl(mpath):
        if row.get("kind", "step") == "step" and isinstance(row.get("step"), int):
            by_step[int(row["step"])] = row
    steps = np.array(sorted(by_step), dtype=np.int64)
    rows = [by_step[int(s)] for s in steps]
    first = rows[0] if rows else {}
    prov = first.get("provenance") or {}
    context, start = _spec_facts(folder) if folder is not None else (None, None)
    run = TrainingRun(
        name=name or (p.name if folder is not None else p.stem), path=mpath,
        backend=first.get("backend") or prov.get("backend"), seed=prov.get("seed"), group=None, steps=steps,
        values={m: np.array([metric_value(r, g) for r in rows]) for m, (_, g) in METRICS.items()}, torn=torn,
        start=start, context=context,
        optimizer_updates=max((int(r.get("optimizer_updates") or 1) for r in rows), default=None))
    run.group = run.backend
    if torn:
        run.notes.append(f"{run.name}: last line of {mpath.name} incomplete (still training?): read its "
                         f"{len(steps)} complete rows")
    return run


def find_runs(inputs: Sequence[str | Path]) -> list[TrainingRun]:
    """Runs named by the inputs: sweep folders (sweep.json's run folders, else a metrics/ folder beside it), run
    folders, metrics .jsonl files. A run found twice is read once."""
    found: dict[str, TrainingRun] = {}
    for raw in inputs:
        p = Path(raw)
        if (p / "sweep.json").is_file():
            runs = _sweep_runs(p)
            if not runs:
                raise CompareError(f"{p}: a sweep whose runs' metrics.jsonl are not found (fix: keep the run folders "
                                   "sweep.json names, or put RUN.jsonl files under its metrics/ folder)")
        elif (p.is_dir() and (p / "metrics.jsonl").is_file()) or p.suffix == ".jsonl":
            runs = [read_run(p)]
        else:
            raise CompareError(f"{p}: not a sweep folder (sweep.json), a run folder (metrics.jsonl) or a metrics "
                               ".jsonl file (fix: pass one of those)")
        for r in runs:
            found.setdefault(r.name, r)
    return list(found.values())


def _sweep_runs(sweep: Path) -> list[TrainingRun]:
    plan = json.loads((sweep / "sweep.json").read_text(encoding="utf-8"))
    runs: dict[str, TrainingRun] = {}
    for arm in plan.get("arms", []):
        run, run_dir = arm.get("run"), arm.get("run_dir")
        if run and run_dir and run not in runs and (Path(run_dir) / "metrics.jsonl").is_file():
            runs[run] = read_run(Path(run_dir), name=run)
    folder = sweep / "metrics"
    if folder.is_dir():
        for f in sorted(folder.glob("*.jsonl")):
            runs.setdefault(f.stem, read_run(f))
    return list(runs.values())


def apply_groups(runs: list[TrainingRun], groups: Sequence[tuple[str, str, int | None]]) -> None:
    """--group RUN=GROUP[@SEED] (RUN may be a glob, e.g. 'trlhigh-*=trlhigh'); a pattern matching no run is an
    error. In place."""
    for pattern, group, seed in groups:
        hit = [r for r in runs if fnmatch.fnmatchcase(r.name, pattern)]
        if not hit:
            raise CompareError(f"--group: {pattern!r} matches no run (fix: one of {', '.join(sorted(r.name for r in runs))})")
        for r in hit:
            r.group = group
            if seed is not None:
                r.seed = seed


def pairing(ra: list[TrainingRun], rb: list[TrainingRun], design: str) -> tuple[str, str]:
    """(design used, why). Seeds pair where every seed is once in each group and the two runs of a seed started
    from one model (where both record it): the criterion of the checkpoint verdict (docs/compare.md, "Seeds pair").
    design "paired" forces pairing (refused when the seeds do not match one to one), "independent" the split-plot."""
    sa, sb = [r.seed for r in ra], [r.seed for r in rb]
    one_to_one = None not in sa and len(set(sa)) == len(sa) and sorted(sa) == sorted(sb)
    if design == "independent":
        return "independent", "--seed-design independent"
    if design == "paired":
        if not one_to_one:
            raise CompareError(f"--seed-design paired: seeds {sorted(map(str, sa))} and {sorted(map(str, sb))} do not "
                               "match one to one (fix: the same seeds in both groups, or --seed-design auto)")
        return "paired", "--seed-design paired"
    if not one_to_one:
        return "independent", "the groups' seeds do not match one to one"
    by_a, by_b = {r.seed: r for r in ra}, {r.seed: r for r in rb}
    differ = [s for s in by_a if by_a[s].start and by_b[s].start and by_a[s].start != by_b[s].start]
    if differ:
        return "independent", f"seed {differ[0]}'s runs started from different models"
    return "paired", "the same seeds in both groups, from one start where recorded"


def training_block(runs: list[TrainingRun], *, alpha: float = 0.05, level: float = 0.95, n_windows: int = 8,
                   seed_design: str = "auto") -> dict[str, Any]:
    """compare.json's "training" block (docs/compare-json.md): every pair of groups, every metric's verdict."""
    from itertools import combinations

    groups: dict[str, list[TrainingRun]] = {}
    for r in runs:
        if r.group is not None and r.steps.size:
            groups.setdefault(r.group, []).append(r)
    out: dict[str, Any] = {
        "n_windows": n_windows, "alpha": alpha, "level": level, "seed_design": seed_design,
        "correction": "each metric's p: Fisher's combination of its level and shape parts; weighted Holm over the "
                      "compared metrics of each pair of groups (reward_mean half the weight, the others the rest)",
        "runs": [{"run": r.name, "group": r.group, "backend": r.backend, "seed": r.seed, "steps": int(r.steps.size),
                  "last_step": int(r.steps[-1]) if r.steps.size else None, "torn": r.torn, "start": r.start,
                  "context": r.context} for r in sorted(runs, key=lambda r: (str(r.group), str(r.seed), r.name))],
        "notes": [n for r in runs for n in r.notes] + [f"{r.name}: no complete metrics row yet" for r in runs
                                                        if not r.steps.size],
        "comparisons": [],
    }
    for g, rs in sorted(groups.items()):
        seeds = [r.seed for r in rs if r.seed is not None]
        dup = sorted({s for s in seeds if seeds.count(s) > 1})
        if dup:
            names = ", ".join(r.name for r in rs if r.seed == dup[0])
            out["notes"].append(f"group {g} holds several runs at seed {dup[0]} ({names}): if they are different arms, "
                                "name their groups (--group 'NAME-*=NAME')")
    if len(groups) < 2:
        out["notes"].append(f"{len(groups)} group(s) of runs ({', '.join(sorted(groups)) or 'none'}): a training "
                            "verdict needs two (fix: runs of two frameworks, or --group RUN=GROUP)")
    for ga, gb in combinations(sorted(groups), 2):
        out["comparisons"].append(_compare_groups(ga, groups[ga], gb, groups[gb], alpha=alpha, level=level,
                                                  n_windows=n_windows, seed_design=seed_design))
    return out


def _compare_groups(ga: str, ra: list[TrainingRun], gb: str, rb: list[TrainingRun], *, alpha: float, level: float,
                    n_windows: int, seed_design: str) -> dict[str, Any]:
    from twinrun.core.compare import training as tr

    design, why = pairing(ra, rb, seed_design)
    if design == "paired":  # row i of each group is seed i
        ra, rb = sorted(ra, key=lambda r: r.seed), sorted(rb, key=lambda r: r.seed)
    steps = sorted(set.intersection(*[set(r.steps.tolist()) for r in ra + rb]))
    bins = tr.windows(steps, n_windows) if steps else []
    c: dict[str, Any] = {
        "a": ga, "b": gb, "runs_a": [r.name for r in ra], "runs_b": [r.name for r in rb],
        "seeds_a": [r.seed for r in ra], "seeds_b": [r.seed for r in rb], "design": design, "design_why": why,
        "steps": [int(s) for s in steps], "windows": [[b[0], b[-1]] for b in bins],
        "metrics": {}, "constant": {}, "not_comparable": {}, "not_recorded": {}, "differ": [], "note": None,
    }
    if len(ra) < 2 or len(rb) < 2:
        c["note"] = (f"{ga}: {len(ra)} run(s), {gb}: {len(rb)}: a verdict needs >= 2 seeds per group (one run per "
                     "group confounds group with seed)")
    if not bins:
        c["note"] = "no step shared by every run of both groups yet"
    mats: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for m in METRICS:
        if all(np.isnan(r.values[m]).all() for r in ra + rb):
            c["not_recorded"][m] = "recorded by no run" + (NONE_WHY.get(m, ""))
            continue
        reason = not_comparable(m, ra + rb)
        if reason:
            c["not_comparable"][m] = reason
            continue
        if not bins:
            continue
        a = np.array([tr.window_means(r.steps, r.values[m], bins) for r in ra])
        b = np.array([tr.window_means(r.steps, r.values[m], bins) for r in rb])
        missing = sorted({r.backend or r.name for r, row in zip(ra + rb, np.vstack([a, b])) if np.isnan(row).any()})
        if missing:
            c["not_recorded"][m] = f"not recorded in every window by {', '.join(missing)}"
        elif tr.is_constant(a, b):
            c["constant"][m] = float(a[0, 0])
        else:
            mats[m] = (a, b)
    if c["note"] is None and mats:
        res = tr.verdicts(mats, design, alpha, level)
    else:
        res = {m: {"verdict": None, "p_value": None, "p_holm": None, "level": None, "shape": None, "windows": None}
               for m in mats}  # the curves are still drawn
    for m, (a, b) in mats.items():
        r = res[m]
        fw = r.get("first_window")
        c["metrics"][m] = {"family": METRICS[m][0], "definition": DEFINITIONS.get(m, CORE), **r,
                           "first_window_steps": c["windows"][fw] if fw is not None else None,
                           "curves_a": a.tolist(), "curves_b": b.tolist()}
    c["differ"] = [m for m in c["metrics"] if c["metrics"][m]["verdict"] == tr.DIFFER]
    return c


def training_for_inputs(inputs: Sequence[str | Path], *, groups: Sequence[tuple[str, str, int | None]] = (),
                        alpha: float = 0.05, level: float = 0.95, n_windows: int = 8, seed_design: str = "auto",
                        required: bool = True) -> dict[str, Any] | None:
    """The training block of the runs the inputs name. required=False (beside a checkpoint comparison): only
    sweep folders are read, and None when their runs' metrics are not found (run folders on another machine)."""
    if n_windows < 1:
        raise CompareError(f"--windows: {n_windows} (fix: 1 or more, e.g. 8)")
    if required:
        runs = find_runs(inputs)
    else:
        sweeps = [p for p in inputs if (Path(p) / "sweep.json").is_file()]
        runs = [r for s in sweeps for r in _sweep_runs(Path(s))]
        if not runs:
            return None
    apply_groups(runs, groups)
    return training_block(runs, alpha=alpha, level=level, n_windows=n_windows, seed_design=seed_design)


def block_from_metrics(metrics: dict[str, str | Path], **kw: Any) -> dict[str, Any] | None:
    """The training block of runs named label -> metrics.jsonl (as `write_report` is given them; `twinrun run`'s
    report); None when none of the files exists."""
    runs = []
    for label, path in metrics.items():
        p = Path(path)
        if p.is_file():
            runs.append(read_run(p.parent if p.name == "metrics.jsonl" else p, name=label))
    return training_block(runs, **kw) if runs else None


def is_run_folder(path: str | Path) -> bool:
    """A training run's folder (its metrics.jsonl, no sweep.json): `compare RUN_DIR...` needs no --baseline."""
    p = Path(path)
    return p.is_dir() and (p / "metrics.jsonl").is_file() and not (p / "sweep.json").is_file()
