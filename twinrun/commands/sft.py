"""`twinrun sft SPEC --backend trl|verl --out DIR [--plan]`: trajectory SFT of one spec under one framework.

``--plan`` prints the knob table (neutral knob -> each framework's setting) and the per-step token counts both
frameworks will realise, and trains nothing; it exits 2 when a knob cannot be made equal. Without data,
``--plan --episodes N`` shows the schedule for N training sequences (e.g. the study's 2,059 teacher episodes:
64 steps per epoch, 192 steps over 3 epochs). ``--only-successful`` trains on verified successes only
(``sft.only_successful``; off by default: the ScienceWorld study trains on every teacher episode). Training writes
``DIR/spec.yaml``, ``DIR/plan.json``, ``DIR/metrics.jsonl`` (one neutral row per optimizer step) and
``DIR/checkpoints/step-NNNNNN/`` (HF format, one per epoch).
"""

from __future__ import annotations

from pathlib import Path

import typer

from twinrun.commands._common import CacheOption, SetOption, cache_dir, print_json, spec_from_cli
from twinrun.core.errors import TwinrunError


def register(app: typer.Typer) -> None:
    app.command("sft")(sft)


def sft(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="experiment spec (YAML) with an `sft` section"),
    backend: str | None = typer.Option(None, "--backend", help="trl or verl (not needed with --plan)"),
    out: Path | None = typer.Option(None, "--out", help="run directory (required to train)"),
    plan: bool = typer.Option(False, "--plan", help="print knobs and per-step token counts; train nothing"),
    data: Path | None = typer.Option(None, "--data", help="trajectory file (overrides sft.data)"),
    resume: bool = typer.Option(False, "--resume", help="continue a run in --out"),
    as_json: bool = typer.Option(False, "--json", help="with --plan: print the plan as JSON"),
    episodes: int | None = typer.Option(None, "--episodes", help="with --plan and no data: training sequences"),
    only_successful: bool = typer.Option(False, "--only-successful", help="train on verified successes only"),
    sets: list[str] = SetOption,
    cache: Path | None = CacheOption,
) -> None:
    """Fine-tune on trajectories (loss on assistant replies only) under TRL or verl, from one spec."""
    from twinrun.backends.registry import check_dependencies
    from twinrun.backends.sft_plan import SFT_BACKENDS, plan_without_data, prepare_sft, render_plan

    if data is not None:
        sets = [*sets, f"sft.data={data.resolve()}"]
    if only_successful:
        sets = [*sets, "sft.only_successful=true"]
    spec = spec_from_cli(spec_path, sets)
    cache_path = cache_dir(cache)
    if plan:
        if spec.sft.data is None and episodes is not None:
            the_plan = plan_without_data(spec, episodes)
        else:
            from twinrun.app.environment import check_environment

            check_dependencies("trl")  # tokenizing needs transformers
            check_environment("sft-plan", spec)  # the tokenizer's model: cached or reachable, or one line now
            the_plan = prepare_sft(spec, cache_dir=cache_path).plan
        if as_json:
            print_json(the_plan.to_json())
        else:
            typer.echo(render_plan(the_plan))
        bad = the_plan.divergent_knobs()
        if bad:
            raise TwinrunError(f"sft plan: knobs differ between trl and verl: {', '.join(bad)} (fix: see the table)")
        return
    if backend not in SFT_BACKENDS:
        raise TwinrunError(f"--backend: {backend!r} is not an SFT backend (fix: one of {', '.join(SFT_BACKENDS)})")
    if out is None:
        raise TwinrunError("--out: missing (fix: name a run directory; there is no default)")
    check_dependencies(backend)
    check_dependencies("trl")  # the shared tokenization needs transformers
    from twinrun.app.environment import check_environment

    check_environment("sft", spec, out=out, backends=[backend])
    from twinrun.backends.registry import sft_trainer

    train = sft_trainer(backend)
    prepared = prepare_sft(spec, cache_dir=cache_path)
    bad = prepared.plan.divergent_knobs()
    if bad:
        raise TwinrunError(
            f"sft plan: knobs differ between trl and verl: {', '.join(bad)} (fix: `twinrun sft SPEC --plan`)"
        )
    result = train(spec, out, resume=resume, cache_dir=cache_path, prepared=prepared)
    typer.echo(f"{backend}: {result['steps']} steps; checkpoints: {', '.join(result['checkpoints']) or 'none'}")
