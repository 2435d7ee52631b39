"""`twinrun compare ARM_OR_SUMMARY... --baseline NAME`: paired statistics and the curve-shape verdicts."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)


def compare_cmd(
    inputs: list[Path] = typer.Argument(..., metavar="ARM_OR_SUMMARY...",
                                        help="sweep --out folders, arm .jsonl files, or one published-summary .csv"),
    baseline: str = typer.Option(..., "--baseline", help="the baseline arm (per-game) or the run name of the "
                                 "baseline rows (summary CSV)"),
    as_json: bool = typer.Option(False, "--json", help="print the full result as JSON"),
    out: Path | None = typer.Option(None, "--out", help="write compare.json, report.md and figures here"),
    alpha: float = typer.Option(0.05, "--alpha"),
    power: float = typer.Option(0.8, "--power", help="power for the minimum detectable effect"),
    level: float = typer.Option(0.95, "--level", help="confidence level of the intervals"),
    n_boot: int = typer.Option(10_000, "--n-boot", help="bootstrap resamples"),
    seed: int = typer.Option(0, "--seed", help="bootstrap seed"),
    family: str = typer.Option("run", "--family", help="multiplicity families: 'run' (one per run) or 'all'"),
    max_unmeasured: float = typer.Option(0.1, "--max-unmeasured", help="flag arms with a larger unmeasured share"),
    metrics: list[str] = typer.Option([], "--metrics", help="LABEL=PATH of a run's metrics.jsonl for the "
                                      "training-dynamics figure (repeatable; with --out; the runs of sweep "
                                      "folders are found on their own)"),
    track: bool = typer.Option(True, "--track/--no-track", help="upload the verdict table and (with --out) the "
                               "figures to the tracker of a tracked sweep (its tracking.json)"),
) -> None:
    """Compare checkpoint arms with the same-sweep baseline; say whether runs' curves share a shape."""
    from twinrun.cliutil import print_json
    from twinrun.core.compare import CompareSettings, compare

    settings = CompareSettings(alpha=alpha, power=power, level=level, n_boot=n_boot, seed=seed,
                               max_unmeasured_share=max_unmeasured, family=family)
    result = compare(inputs, baseline, settings)
    report_path = None
    if out is not None:
        from twinrun.core.report import metrics_for_sweeps, write_report

        # training dynamics: the runs the sweeps evaluated (their metrics.jsonl), plus any named with --metrics
        runs_metrics = {k: str(v) for k, v in metrics_for_sweeps(inputs).items()}
        runs_metrics.update(_parse_metrics(metrics))
        report_path = write_report(result, out, metrics=runs_metrics)
    if track:
        from twinrun.core.track_results import log_comparison, tracked_sweep

        sweep_dir = tracked_sweep(inputs)
        if sweep_dir is not None:  # progress lines go to stderr: --json keeps stdout for the result
            log_comparison(result, out, sweep_dir, log=lambda line: typer.echo(line, err=True))
    if as_json:
        print_json(result)
        return
    _print(result, report_path)


def _parse_metrics(items: list[str]) -> dict[str, str]:
    from twinrun.core.compare import CompareError

    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise CompareError(f"--metrics: {item!r} is not LABEL=PATH (fix: e.g. --metrics trl=runs/trl/metrics.jsonl)")
        label, path = item.split("=", 1)
        out[label] = path
    return out


def _print(result: dict, report_path: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    base = result["baseline"]
    console.print(f"[bold]baseline[/] {base['arm']}: {100 * base['success_rate']:.1f}% over {base['n_measured']} "
                  f"measured games" + (f", {base['n_unmeasured']} unmeasured" if base.get("n_unmeasured") else ""))
    t = Table(title="arms vs baseline")
    for col in ("arm", "n", "unmeas.", "lift pp [CI]", "b/c", "p", "Holm", "BH", "MDE pp"):
        t.add_column(col)

    def f(v: float | None, scale: float = 1.0, fmt: str = "{:.3f}") -> str:
        return "–" if v is None else fmt.format(scale * v)

    for a in result["arms"]:
        ci = a["lift_ci"]
        t.add_row(a["arm"] + (" [yellow]⚠[/]" if a.get("flagged") else ""), str(a["n_measured"]),
                  "–" if a["n_unmeasured"] is None else str(a["n_unmeasured"]),
                  f"{f(a['lift'], 100, '{:+.1f}')} [{f(ci[0], 100, '{:+.1f}')}, {f(ci[1], 100, '{:+.1f}')}]",
                  "–" if a["b"] is None else f"{a['b']}/{a['c']}", f(a["p_value"]), f(a["p_holm"]), f(a["p_bh"]),
                  f(a["mde"], 100, "{:.1f}"))
    console.print(t)
    r = Table(title="runs")
    for col in ("run", "peak", "peak share", "crossings", "final-peak pp", "Cochran Q p"):
        r.add_column(col)
    for name, c in sorted(result["runs"].items()):
        if not c.get("checkpoints"):
            continue
        q = c.get("cochran_q")
        r.add_row(name, str(c["peak_checkpoint"]), f"{100 * c['peak_share']:.0f}%", str(c["crossings"]),
                  f"{100 * c['final_minus_peak']:+.1f}", "–" if not q else f"{q['p_value']:.3g}")
    console.print(r)
    for p in result["pairs"]:
        console.print(f"[bold]{p['a']} vs {p['b']}: {p['verdict']}[/]\n  {p['criterion']}")
    for fl in result["flags"]:
        console.print(f"[yellow]flag:[/] {fl}")
    for s in result["skipped"]:
        console.print(f"[dim]skipped:[/] {s}")
    if report_path is not None:
        console.print(f"report: {report_path}")
