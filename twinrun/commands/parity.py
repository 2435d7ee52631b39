"""`twinrun parity SPEC [--set ...] [--rollouts FILE] [--knobs]`: the same recorded rollouts through TRL's and
verl's real update; per tensor group and in total the gradient difference ``||g_trl - g_verl|| / ||g_trl||`` of
every optimizer update (judged: exit 1 over ``--tol``) and the weight difference after AdamW (reported, B15).

The work lives in `twinrun.app.parity` (run: one comparison; knobs: the knob table); this module parses and prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from twinrun.commands._common import CacheOption, SetOption, cache_dir, spec_from_cli


def register(app: typer.Typer) -> None:
    app.command("parity")(parity)


def parity(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="experiment spec (YAML)"),
    sets: list[str] = SetOption,
    rollouts: Optional[Path] = typer.Option(
        None, "--rollouts", help="a run's rollouts.jsonl to replay (default: record one with a TRL run of SPEC)"),
    out: Path = typer.Option(Path("runs/parity"), "--out", help="where weights, logs and parity.json go"),
    tol: float = typer.Option(
        1e-4, "--tol", help="pass when the total relative gradient difference (every optimizer update) is at most this"),
    knobs: bool = typer.Option(False, "--knobs", help="also run the knob table (one comparison per knob)"),
    model: Optional[Path] = typer.Option(
        None, "--model", help="local HF checkpoint both trainers start from (default: the spec's curator)"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
    cache: Optional[Path] = CacheOption,
) -> None:
    """Replay recorded rollouts through TRL's and verl's update from the same weights; compare the updates."""
    from twinrun.app.parity import render
    from twinrun.app.parity.run import record_rollouts, run_parity

    spec = spec_from_cli(spec_path, sets)
    from twinrun.app.environment import check_environment

    check_environment("parity", spec, out=out, backends=["trl", "verl"],
                      models=[str(model)] if model is not None else ())
    cdir = cache_dir(cache)
    log = (lambda m: typer.echo(m, err=True)) if as_json else typer.echo
    path = rollouts or record_rollouts(spec, cdir, out / "recorded", log=log)
    table = None
    if knobs:  # the first knob is the spec as is: its comparison is the report
        from twinrun.app.parity.knobs import run_knob_table

        table = run_knob_table(spec_path, sets, path, out / "knobs", cache_dir=cdir, tol=tol, log=log,
                               model=model)
        report = table[0]["report"]
    else:
        report = run_parity(spec, path, out / "compare", cache_dir=cdir, tol=tol, log=log, model=model)
    if as_json:
        rows = [{k: v for k, v in r.items() if k != "report"} for r in table] if table is not None else None
        typer.echo(json.dumps({"report": report, "knobs": rows}, indent=1, default=str))
    else:
        render.print_report(report)
        if table is not None:
            render.print_knob_table(table)
    failed = not report["passed"] or (table is not None and any(r["verdict"] == "FAIL" for r in table))
    if failed:
        raise typer.Exit(1)
