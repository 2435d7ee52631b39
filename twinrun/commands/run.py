"""`twinrun run SPEC --out DIR [--seeds 42,123,456]`: one arm end to end: train (each backend, each seed) -> sweep ->
compare -> report.

Layout under DIR (every stage resumable; a rerun with --resume skips what is complete):
    runs/<backend>/          training run (checkpoints/, metrics.jsonl, resolved config); with --seeds:
    runs/<backend>-s<seed>/  one run per backend and seed (the spec's seed set to it)
    sweep/                   held-out evaluation of every checkpoint of every run + one same-sweep baseline
    report/                  report.md, compare.json, figures/

With >= 2 seeds per backend, compare judges the framework difference against the seeds' own variation (each
run's backend and seed come from its records); with one, the report says framework and seed are confounded.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from twinrun.commands._common import CacheOption, SetOption, cache_dir, spec_from_cli
from twinrun.core.errors import TwinrunError


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def run(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="experiment spec (YAML)"),
    out: Path = typer.Option(..., "--out", help="folder for the arm (runs/, sweep/, report/)"),
    resume: bool = typer.Option(False, "--resume", help="continue an earlier run of this arm in --out"),
    sets: list[str] = SetOption,
    cache: Path | None = CacheOption,
    backend: list[str] = typer.Option([], "--backend", help="only these backends (default: the spec's)"),
    seeds: str | None = typer.Option(None, "--seeds", help="train each backend once per seed, e.g. 42,123,456 (the "
                                     "spec's seed set to each); compare then separates framework from seed"),
) -> None:
    """Train SPEC under each backend (and seed), sweep every checkpoint with a baseline, compare, write a report."""
    from twinrun.backends import registry
    from twinrun.core import compare as cmp
    from twinrun.core.compare import report as rep
    from twinrun.core.sweeps import sweep as sw
    from twinrun.models.curator_policy import hf_policy_factory
    from twinrun.app.plan import build_plan

    console = Console()
    seed_list = parse_seeds(seeds)
    spec = spec_from_cli(spec_path, sets)
    backends = backend or list(spec.backends)
    plan = build_plan(spec)
    if not plan["counts_equal"]:
        raise TwinrunError(
            f"plan: per-step counts differ between backends ({', '.join(plan['mismatched_counts'])}) "
            "(fix: run `twinrun plan` and align the knobs)"
        )
    for b in backends:
        registry.check_runnable(b, spec)  # e.g. a schedule verl rejects only inside its child
    if out.exists() and any(out.iterdir()) and not resume:
        raise TwinrunError(f"--out: {str(out)!r} already holds a run (fix: pass --resume to continue it, or a new folder)")
    sw.check_streams(out / "sweep", spec.sweep.streams)  # a sweep planned with other streams: refused before training
    from twinrun.app.environment import check_environment

    check_environment("run", spec, out=out, backends=backends, runs=len(backends) * max(len(seed_list), 1))
    counts = plan["backends"][backends[0]]["counts"]
    console.print(
        f"[bold]twinrun run[/] {spec.name}: backends {', '.join(backends)}; per step "
        f"{counts['curation_trajectories']} curation rollouts, {counts['executor_episodes']} executor episodes, "
        f"{counts['optimizer_updates']} update(s); {spec.steps} steps"
        + (f"; seeds {', '.join(map(str, seed_list))} ({len(seed_list) * len(backends)} runs)" if seed_list else "")
    )
    timings: dict[str, float] = {}
    run_dirs: dict[str, Path] = {}
    for name, b, run_spec in seed_runs(spec_path, sets, backends, seed_list):
        run_dir = out / "runs" / name
        t0 = time.time()
        console.rule(f"train: {name}" + (f" (seed {run_spec.seed})" if seed_list else ""))
        # a backend whose run never started (no spec.yaml yet) starts fresh even under --resume
        registry.trainer(b)(run_spec, run_dir, resume=(run_dir / "spec.yaml").exists(), cache_dir=cache_dir(cache))
        timings[f"train {name}"] = time.time() - t0
        run_dirs[name] = run_dir

    console.rule("sweep")
    t0 = time.time()
    sweep_dir = out / "sweep"
    from twinrun.commands.sweep import check_checkpoint_files

    check_checkpoint_files(spec, run_dirs, cache)  # a checkpoint that cannot load: refused before sweep/ is written
    result = sw.sweep(
        spec,
        run_dirs,
        sweep_dir,
        environ=dict(os.environ),
        policy_factory=lambda arm, s: hf_policy_factory(arm, s, cache_dir=cache_dir(cache)),
    )
    timings["sweep"] = time.time() - t0
    from twinrun.core.compare.track_results import log_comparison, log_sweep

    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False)

    log_sweep(spec, sweep_dir, log=say)

    console.rule("compare and report")
    t0 = time.time()
    comparison = cmp.compare([sweep_dir], "baseline", cmp.CompareSettings())
    line, rule = _executor_notes(spec)
    report_path = rep.write_report(comparison, out / "report", metrics={b: d / "metrics.jsonl" for b, d in run_dirs.items()},
                                   title=f"twinrun: {spec.name}", notes=line, methods=rule,
                                   provenance=rep.sweep_notes([sweep_dir]))
    if spec.tracking.backend != "none":
        log_comparison(comparison, out / "report", sweep_dir, log=say)
    timings["compare+report"] = time.time() - t0

    console.rule("summary")  # the report's first screen, then how the run went
    from twinrun.core.compare.console import print_first_screen

    print_first_screen(console, comparison, notes=tuple(line))
    console.print(f"held-out games per arm: {result.n_games}; arms: {len(result.arms)} ({result.streams} stream(s) each)")
    for name, secs in timings.items():
        console.print(f"  {name}: {secs:.0f} s")
    console.print(f"report: {report_path} (and report.html beside it)")


def parse_seeds(value: str | None) -> list[int]:
    """``42,123,456`` -> [42, 123, 456] (distinct, in the given order); None -> []."""
    if value is None:
        return []
    out: list[int] = []
    for item in value.split(","):
        try:
            seed = int(item.strip())
        except ValueError:
            raise TwinrunError(f"--seeds: {item.strip()!r} is not an integer (fix: e.g. --seeds 42,123,456)") from None
        if seed in out:
            raise TwinrunError(f"--seeds: seed {seed} is given twice (fix: distinct seeds)")
        out.append(seed)
    if not out:
        raise TwinrunError("--seeds: no seed given (fix: e.g. --seeds 42,123,456)")
    return out


def seed_runs(spec_path: Path, sets: list[str], backends: list[str], seeds: list[int]) -> list[tuple[str, str, object]]:
    """(run name, backend, spec) for every training run: one per backend, or one per backend and seed (the spec's
    seed set to it, so each run records its seed in its own provenance)."""
    if not seeds:
        spec = spec_from_cli(spec_path, sets)
        return [(b, b, spec) for b in backends]
    return [(f"{b}-s{s}", b, spec_from_cli(spec_path, [*sets, f"seed={s}"])) for s in seeds for b in backends]


def _executor_notes(spec: Any) -> tuple[list[str], list[str]]:
    """What a scripted stand-in's numbers mean (issue 17): one line for the report's first screen, and the rule
    under its own heading in Methods (issue 52)."""
    if spec.executor.kind != "scripted":
        return [], []
    from twinrun.core.executors.skill_effect import STAND_IN_HEADING, stand_in_line, stand_in_note

    return ([stand_in_line(spec.executor.skill_effect)],
            [f"### {STAND_IN_HEADING}", stand_in_note(spec.executor.expert_prob, spec.executor.skill_effect)])
