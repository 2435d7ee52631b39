"""`twinrun run SPEC --out DIR`: one arm end to end: train (each backend) -> sweep -> compare -> report.

Layout under DIR (every stage resumable; a rerun with --resume skips what is complete):
    runs/<backend>/      training run (checkpoints/, metrics.jsonl, resolved config)
    sweep/               held-out evaluation of every checkpoint + the same-sweep baseline
    report/              report.md, compare.json, figures/
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import typer
from rich.console import Console

from twinrun.cliutil import CacheOption, SetOption, cache_dir, spec_from_cli
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
) -> None:
    """Train SPEC under each backend, sweep every checkpoint with a baseline, compare the curves, write a report."""
    from twinrun.backends import registry
    from twinrun.core import compare as cmp
    from twinrun.core import report as rep
    from twinrun.core import sweep as sw
    from twinrun.plan import build_plan

    console = Console()
    spec = spec_from_cli(spec_path, sets)
    backends = backend or list(spec.backends)
    plan = build_plan(spec)
    if not plan["counts_equal"]:
        raise TwinrunError(
            f"plan: per-step counts differ between backends ({', '.join(plan['mismatched_counts'])}) "
            "(fix: run `twinrun plan` and align the knobs)"
        )
    if out.exists() and any(out.iterdir()) and not resume:
        raise TwinrunError(f"--out: {str(out)!r} already holds a run (fix: pass --resume to continue it, or a new folder)")
    counts = plan["backends"][backends[0]]["counts"]
    console.print(
        f"[bold]twinrun run[/] {spec.name}: backends {', '.join(backends)}; per step "
        f"{counts['curation_trajectories']} curation rollouts, {counts['executor_episodes']} executor episodes, "
        f"{counts['optimizer_updates']} update(s); {spec.steps} steps"
    )
    timings: dict[str, float] = {}
    run_dirs: dict[str, Path] = {}
    for b in backends:
        run_dir = out / "runs" / b
        t0 = time.time()
        console.rule(f"train: {b}")
        # a backend whose run never started (no spec.yaml yet) starts fresh even under --resume
        registry.trainer(b)(spec, run_dir, resume=(run_dir / "spec.yaml").exists(), cache_dir=cache_dir(cache))
        timings[f"train {b}"] = time.time() - t0
        run_dirs[b] = run_dir

    console.rule("sweep")
    t0 = time.time()
    sweep_dir = out / "sweep"
    result = sw.sweep(
        spec,
        run_dirs,
        sweep_dir,
        environ=dict(os.environ),
        policy_factory=lambda arm, s: sw.hf_policy_factory(arm, s, cache_dir=cache_dir(cache)),
    )
    timings["sweep"] = time.time() - t0
    from twinrun.core.track_results import log_comparison, log_sweep

    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False)

    log_sweep(spec, sweep_dir, log=say)

    console.rule("compare and report")
    t0 = time.time()
    comparison = cmp.compare([sweep_dir], "baseline", cmp.CompareSettings())
    report_path = rep.write_report(comparison, out / "report", metrics={b: d / "metrics.jsonl" for b, d in run_dirs.items()},
                                   title=f"twinrun: {spec.name}")
    if spec.tracking.backend != "none":
        log_comparison(comparison, out / "report", sweep_dir, log=say)
    timings["compare+report"] = time.time() - t0

    console.rule("summary")
    console.print(f"held-out games per arm: {result.n_games}; arms: {len(result.arms)}")
    for pair in comparison.get("pairs", []):
        console.print(f"  {pair['a']} vs {pair['b']}: [bold]{pair['verdict']}[/] ({pair['criterion']})")
    for name, secs in timings.items():
        console.print(f"  {name}: {secs:.0f} s")
    console.print(f"report: {report_path}")
