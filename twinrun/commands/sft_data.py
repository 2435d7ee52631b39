"""`twinrun sft-data`: build ScienceWorld SFT trajectories, and print a trajectory file's statistics.

    twinrun sft-data SPEC --out FILE                                  # gold paths (the simulator's expert)
    twinrun sft-data SPEC --teacher openai --out FILE [--base-url URL] [--model NAME]
    twinrun sft-data stats FILE [--literal "open/close OBJ"] [--json]

Gold paths (``--teacher gold-path``, the default): ``sft.gold_path.variations`` variations (seed = the spec's
seed) played with the simulator's gold action sequence; the thought is a fixed template (``teacher:
"gold-path"``); gold paths ending below 100 are dropped unless ``--include-failed``.

Teacher data (``--teacher openai``): the endpoint of ``sft.teacher`` plays every training variation once (or
``sft.teacher.variations`` of them), at most ``sft.teacher.max_turns`` replies; every episode is kept, failed or
not, with its rejected actions, and every teacher reply is trained. The endpoint is probed first with exactly the
configured sampling parameters: one it rejects is a one-line error before any episode is played. Both resume:
episodes already in FILE are not replayed.

``stats`` prints episodes, teacher success, supervised turns and the literal template-copy share (the published
study's 2,059 / 41.96% / 46,035 / 29.89% line) plus the any-template and rejected-action shares.
"""

from __future__ import annotations

from pathlib import Path

import typer
from typer.core import TyperGroup

from twinrun.commands._common import SetOption, spec_from_cli
from twinrun.core.errors import TwinrunError


class _DefaultBuild(TyperGroup):
    """``sft-data SPEC ...`` means ``sft-data build SPEC ...``; ``sft-data stats FILE`` is the other command."""

    def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["build", *args]
        return super().parse_args(ctx, args)


sft_data_app = typer.Typer(cls=_DefaultBuild, no_args_is_help=True,
                           help="Build ScienceWorld SFT trajectories (gold paths or a teacher endpoint); stats.")


def register(app: typer.Typer) -> None:
    app.add_typer(sft_data_app, name="sft-data")


@sft_data_app.command("build")
def build(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="experiment spec (YAML) with an `sft` section"),
    out: Path = typer.Option(..., "--out", help="trajectory file to write (JSON lines; appended on resume)"),
    teacher: str = typer.Option("gold-path", "--teacher", help="gold-path (simulator expert) or openai (sft.teacher)"),
    base_url: str | None = typer.Option(None, "--base-url", help="teacher endpoint (overrides sft.teacher.base_url)"),
    model: str | None = typer.Option(None, "--model", help="teacher model name (overrides sft.teacher.model)"),
    include_failed: bool = typer.Option(False, "--include-failed", help="gold paths: keep those ending below 100"),
    sets: list[str] = SetOption,
) -> None:
    """Build SFT trajectories from the real ScienceWorld simulator (gold paths or a teacher endpoint)."""
    spec = spec_from_cli(spec_path, sets)
    if teacher == "gold-path":
        _gold_paths(spec, out, include_failed)
    elif teacher == "openai":
        _teacher_data(spec, out, base_url, model)
    else:
        raise TwinrunError(f"--teacher: {teacher!r} is not a teacher (fix: gold-path or openai)")


@sft_data_app.command("stats")
def stats(
    path: Path = typer.Argument(..., metavar="FILE", help="trajectory file (jsonl/json)"),
    literal: list[str] = typer.Option([], "--literal", help="actions counted as literal template copies "
                                      "(repeatable; default: the study's 'open/close OBJ')"),
    as_json: bool = typer.Option(False, "--json", help="print the numbers as JSON"),
) -> None:
    """Episodes, teacher success, supervised turns, literal and any-template copy shares of a trajectory file."""
    from twinrun.commands._common import print_json
    from twinrun.core.sft.stats import render_stats, trajectory_stats
    from twinrun.core.sft.template_copy import STUDY_LITERAL_COPIES
    from twinrun.core.sft.trajectories import load_trajectories

    if not path.is_file():
        raise TwinrunError(f"FILE: {str(path)!r} is not a file (fix: a trajectory file from `twinrun sft-data`)")
    s = trajectory_stats(load_trajectories(path), literal or STUDY_LITERAL_COPIES)
    if as_json:
        print_json(s)
    else:
        typer.echo(render_stats(s, path=str(path)))


def _gold_paths(spec, out: Path, include_failed: bool) -> None:  # type: ignore[no-untyped-def]
    from twinrun.core.sft.agent_eval import sample_games
    from twinrun.core.envs.scienceworld import ScienceWorldCatalog, SciWorldEnv
    from twinrun.core.sft.data import build_gold_path_dataset

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


def _teacher_data(spec, out: Path, base_url: str | None, model: str | None) -> None:  # type: ignore[no-untyped-def]
    import hashlib
    import json

    from twinrun.commands._common import teacher_endpoint
    from twinrun.core.sft.agent_eval import sample_games
    from twinrun.core.envs.scienceworld import ScienceWorldCatalog, SciWorldEnv
    from twinrun.core.executors import BackgroundLoop
    from twinrun.core.sft.data import sciworld_instruction
    from twinrun.core.sft.stats import render_stats, trajectory_stats
    from twinrun.core.sft.teacher import build_teacher_dataset, probe_teacher, teacher_generator
    from twinrun.core.sft.trajectories import load_trajectories

    t = spec.sft.teacher
    url, name, key = teacher_endpoint(t, base_url, model)
    typer.echo(f"probing {url} ({name}) with {', '.join(t.send) or 'no sampling parameters'}"
               f"{' + extra_body ' + ','.join(t.extra_body) if t.extra_body else ''}", err=True)
    probe_teacher(t, base_url=url, model=name, api_key=key)

    catalog = ScienceWorldCatalog(t.split, tasks=t.tasks)
    try:
        games = sorted(catalog.games(), key=lambda g: g.game_id)
    finally:
        catalog.close()
    if t.variations is not None:
        games = sample_games(games, t.variations, spec.seed)
    settings_hash = hashlib.sha256(json.dumps({**t.model_dump(mode="json"), "model": name, "base_url": url},
                                              sort_keys=True).encode()).hexdigest()[:16]
    typer.echo(f"teacher {name}: {len(games)} {t.split} variations, at most {t.max_turns} replies each, "
               f"{t.workers} worker(s); writing {out}", err=True)
    loop = BackgroundLoop(name="twinrun-teacher")
    try:
        generate = teacher_generator(t, base_url=url, model=name, api_key=key, loop=loop)
        report = build_teacher_dataset(
            lambda: SciWorldEnv(gold_path=False), games, out, generate, teacher_name=name, max_turns=t.max_turns,
            seed=spec.seed, instruction=sciworld_instruction(), literal=spec.sft.literal_copies, workers=t.workers,
            settings_hash=settings_hash, progress=lambda m: typer.echo(m, err=True),
        )
    finally:
        loop.close()
    typer.echo(f"{out}: {report.written} written, {report.skipped_existing} already there, "
               f"{len(report.unmeasured)} unmeasured (rerun to retry them)")
    for why in report.unmeasured:
        typer.echo(f"  unmeasured: {why}", err=True)
    if out.exists():
        typer.echo(render_stats(trajectory_stats(load_trajectories(out), spec.sft.literal_copies), path=str(out)))
