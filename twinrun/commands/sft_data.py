"""`twinrun sft-data SPEC --out FILE`: the embedded default SFT data, ScienceWorld gold-path episodes.

Samples ``sft.gold_path.variations`` variations (seed = the spec's seed) of ``sft.gold_path.split`` (training
variations by default), plays each with the simulator's gold action sequence and writes one trajectory per
episode in the AgentGym ReAct format (``teacher: "gold-path"``: the thought is a fixed template). Resumes:
episodes already in FILE are not replayed.
"""

from __future__ import annotations

from pathlib import Path

import typer

from twinrun.cliutil import SetOption, spec_from_cli


def register(app: typer.Typer) -> None:
    app.command("sft-data")(sft_data)


def sft_data(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="experiment spec (YAML) with sft.gold_path"),
    out: Path = typer.Option(..., "--out", help="trajectory file to write (JSON lines; appended on resume)"),
    include_failed: bool = typer.Option(False, "--include-failed", help="keep gold paths that end below 100"),
    sets: list[str] = SetOption,
) -> None:
    """Build gold-path SFT trajectories from the real ScienceWorld simulator."""
    from twinrun.core.agent_eval import sample_games
    from twinrun.core.envs.scienceworld import ScienceWorldCatalog, SciWorldEnv
    from twinrun.core.sft_data import build_gold_path_dataset

    spec = spec_from_cli(spec_path, sets)
    gp = spec.sft.gold_path
    catalog = ScienceWorldCatalog(gp.split, tasks=gp.tasks)
    try:
        games = sample_games(catalog.games(), gp.variations, spec.seed)
    finally:
        catalog.close()
    env = SciWorldEnv(gold_path=True)
    try:
        report = build_gold_path_dataset(env, games, out, only_successful=not include_failed, max_steps=gp.max_steps)
    finally:
        env.shutdown()
    typer.echo(
        f"{out}: {report.written} written, {report.skipped_existing} already there, "
        f"{report.dropped_unsuccessful} gold paths below 100 dropped, {len(report.unmeasured)} unmeasured"
    )
    for why in report.unmeasured:
        typer.echo(f"  unmeasured: {why}", err=True)
