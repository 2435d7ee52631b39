"""`twinrun compare ARM_OR_SUMMARY... --baseline NAME`: paired statistics and the curve-shape verdicts."""

from __future__ import annotations

from pathlib import Path

import typer

from twinrun.commands._options import FieldOptions
from twinrun.core.compare.model import CompareSettings

# the statistics' options: default and help from CompareSettings' fields; the CLI keeps its own names for three of them
COMPARE = FieldOptions(CompareSettings, flags={"max_unmeasured_share": "--max-unmeasured", "family_map": "--family-of",
                                               "groups": "--group"})


def pp(fraction: float) -> float:
    """A success-rate fraction in the percentage points --delta takes (0.05 -> 5.0)."""
    return fraction * 100.0


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)


def compare_cmd(
    inputs: list[Path] = typer.Argument(..., metavar="ARM_OR_SUMMARY...",
                                        help="sweep --out folders, arm .jsonl files, or one published-summary .csv"),
    baseline: str | None = typer.Option(None, "--baseline", help="the baseline arm (per-game) or the run name of "
                                        "the baseline rows (summary CSV); not needed with --training or run folders"),
    training: bool = typer.Option(False, "--training", help="only the runs' training curves (metrics.jsonl): a verdict "
                                  "per step metric between frameworks, live on runs still training; inputs: sweep "
                                  "folders, run folders or metrics .jsonl files (docs/compare.md, Training curves)"),
    windows: int = typer.Option(8, "--windows", help="training curves: average the shared steps into at most this "
                                "many windows"),
    as_json: bool = typer.Option(False, "--json", help="print the full result as JSON (docs/compare-json.md)"),
    out: Path | None = typer.Option(None, "--out", help="write compare.json, report.md and figures here (with "
                                     "--looks: looks.json and report.md's per-look table)"),
    alpha: float = COMPARE("alpha"),
    power: float = COMPARE("power"),
    level: float = COMPARE("level"),
    n_boot: int = COMPARE("n_boot"),
    seed: int = COMPARE("seed"),
    rho0: float = COMPARE("rho0"),
    delta: float = COMPARE("delta", more="(percentage points)", to_cli=pp),
    family: str = COMPARE("family", more="(--family-of)"),
    family_of: list[str] = COMPARE("family_map", more="(NAME=GLOB, with --family custom; repeatable)"),
    group: list[str] = COMPARE("groups", more="(RUN=FRAMEWORK[@SEED]; repeatable)"),
    across: str | None = COMPARE("across"),
    max_unmeasured: float = COMPARE("max_unmeasured_share"),
    stream_icc: float | None = COMPARE("stream_icc"),
    stream_design: str = COMPARE("stream_design"),
    games_hash: str | None = COMPARE("games_hash"),
    seed_design: str = COMPARE("seed_design"),
    max_streams: int = COMPARE("max_streams", min=2),
    metrics: list[str] = typer.Option([], "--metrics", help="LABEL=PATH of a run's metrics.jsonl for the "
                                      "training-dynamics figure (repeatable; with --out; the runs of sweep "
                                      "folders are found on their own)"),
    looks: str | None = typer.Option(None, "--looks", help="N1,N2,...: replay the group-sequential rule of sweep "
                                     "--until-decided on the sweep's first N1, N2, ... streams and say at which look "
                                     "it would have stopped, with what verdict (docs/streams.md)"),
    spending: str = typer.Option("hsd", "--spending", help="with --looks: alpha spending, hsd (Hwang-Shih-DeCani, "
                                 "gamma -2), hsd:GAMMA, obf (O'Brien-Fleming type) or pocock"),
    futility_p: float = typer.Option(0.5, "--futility-p", help="with --looks: stop for futility when every undecided "
                                     "pair's interaction p is above this and r below rho0 (1: never)"),
    track: bool = typer.Option(True, "--track/--no-track", help="upload the verdict table and (with --out) the "
                               "figures to the tracker of a tracked sweep (its tracking.json)"),
) -> None:
    """Compare checkpoint arms with the same-sweep baseline; say whether runs' curves share a shape."""
    from twinrun.commands._common import print_json
    from twinrun.core.compare import CompareSettings, compare

    settings = CompareSettings(alpha=alpha, power=power, level=level, n_boot=n_boot, seed=seed,
                               max_unmeasured_share=max_unmeasured, family=family,
                               family_map=tuple(_pairs(family_of, "--family-of", "NAME=GLOB", "trl='trl-*'")),
                               rho0=rho0, delta=delta / 100.0, groups=tuple(parse_groups(group)), across=across,
                               stream_icc=stream_icc, stream_design=stream_design, max_streams=max_streams,
                               games_hash=games_hash, seed_design=seed_design)
    from twinrun.core.compare.training_runs import is_run_folder, training_for_inputs

    if training or (baseline is None and all(is_run_folder(p) for p in inputs)):
        _training_only(inputs, settings, windows, out, as_json)
        return
    if baseline is None:
        from twinrun.core.compare import CompareError

        raise CompareError("--baseline: needed to compare checkpoint arms (fix: --baseline NAME, e.g. --baseline "
                           "baseline; or --training for the runs' training curves alone)")
    if looks is not None:
        from twinrun.core.compare.looks import format_replay, replay_inputs
        from twinrun.core.compare.looks_report import check_out_dir, write_looks

        if out is not None:
            check_out_dir(out)  # before the replay's minutes and its first write
        res = replay_inputs(inputs, baseline, settings, parse_looks(looks), kind=spending, futility_p=futility_p)
        if out is not None:
            path = write_looks(res, out, where=", ".join(str(p) for p in inputs))
            typer.echo(f"wrote {path} and {path.parent / 'looks.json'}", err=as_json)
        if as_json:
            print_json({"sequential": res})
        else:
            for line in format_replay(res):
                typer.echo(line)
        return
    result = compare(inputs, baseline, settings)
    block = training_for_inputs(inputs, groups=settings.groups, alpha=alpha, level=level, n_windows=windows,
                                seed_design=seed_design, required=False)
    if block is not None:  # the sweep's runs' training curves beside their checkpoint curves
        result["training"] = block
    report_path = None
    if out is not None:
        from twinrun.core.compare.report import metrics_for_sweeps, sweep_notes, write_report

        # training dynamics: the runs the sweeps evaluated (their metrics.jsonl), plus any named with --metrics
        runs_metrics = {k: str(v) for k, v in metrics_for_sweeps(inputs).items()}
        runs_metrics.update(dict(_pairs(metrics, "--metrics", "LABEL=PATH", "trl=runs/trl/metrics.jsonl")))
        from twinrun.core.compare.looks_report import sequential_records

        report_path = write_report(result, out, metrics=runs_metrics, provenance=sweep_notes(inputs),
                                   sequential=sequential_records(inputs))
    if track:
        from twinrun.core.compare.track_results import log_comparison, tracked_sweep

        sweep_dir = tracked_sweep(inputs)
        if sweep_dir is not None:  # progress lines go to stderr: --json keeps stdout for the result
            log_comparison(result, out, sweep_dir, log=lambda line: typer.echo(line, err=True))
    if as_json:
        print_json(result)
        return
    from twinrun.core.compare.console import print_console

    print_console(result, report_path)


def _training_only(inputs: list[Path], settings: object, windows: int, out: Path | None, as_json: bool) -> None:
    """compare --training (or run folders with no --baseline): the runs' step metrics, nothing else."""
    from twinrun.commands._common import print_json
    from twinrun.core.compare.training_report import console_lines, write_training_report
    from twinrun.core.compare.training_runs import training_for_inputs

    block = training_for_inputs(inputs, groups=settings.groups, alpha=settings.alpha, level=settings.level,
                                n_windows=windows, seed_design=settings.seed_design)
    if out is not None:
        path = write_training_report(block, out)
        typer.echo(f"wrote {path} and {out / 'compare.json'}", err=as_json)
    if as_json:
        print_json({"kind": "training", "training": block})
        return
    for line in console_lines(block):
        typer.echo(line)


def parse_looks(text: str) -> list[int]:
    """``2,4,8`` -> [2, 4, 8] (checked by the rule: increasing, from 2 streams)."""
    from twinrun.core.compare import CompareError

    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CompareError(f"--looks: {text!r} is not a list of stream counts (fix: e.g. --looks 2,4,8)") from None


def _pairs(items: list[str], option: str, form: str, example: str) -> list[tuple[str, str]]:
    from twinrun.core.compare import CompareError

    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise CompareError(f"{option}: {item!r} is not {form} (fix: e.g. {option} {example})")
        out.append((key, value))
    return out


def parse_groups(items: list[str]) -> list[tuple[str, str, int | None]]:
    """``RUN=FRAMEWORK`` or ``RUN=FRAMEWORK@SEED`` -> (run, framework, seed or None)."""
    from twinrun.core.compare import CompareError

    out = []
    for run, value in _pairs(items, "--group", "RUN=FRAMEWORK[@SEED]", "trl-s1=trl@1"):
        framework, _, seed = value.partition("@")
        try:
            out.append((run, framework, int(seed) if seed else None))
        except ValueError:
            raise CompareError(f"--group: seed {seed!r} of {run!r} is not an integer (fix: e.g. {run}={framework}@42)") from None
    return out
