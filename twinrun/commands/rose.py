"""`twinrun rose SPEC --backend trl|verl --out DIR`: online stitched SFT (ROSE) under one framework.

Each round the current student plays ``sft.rose.student_turns`` replies on training variations, the teacher
(``sft.teacher``, an OpenAI-compatible endpoint, probed first) continues from the student's own state for
``sft.rose.teacher_turns`` replies, and the student is fine-tuned on the teacher's replies only, continuing from
the previous round's weights and optimizer state (see twinrun/app/rose.py). ``--data-from RUN`` trains on another
ROSE run's per-round data instead of collecting (both frameworks then see identical data every round).
Evaluate the rounds with ``twinrun eval-agent --run DIR``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from twinrun.commands._common import CacheOption, SetOption, cache_dir, spec_from_cli
from twinrun.core.errors import TwinrunError


def register(app: typer.Typer) -> None:
    app.command("rose")(rose)


def rose(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="experiment spec with sft, sft.teacher, sft.rose"),
    backend: str = typer.Option(..., "--backend", help="trl or verl"),
    out: Path = typer.Option(..., "--out", help="run directory (no default)"),
    base_url: str | None = typer.Option(None, "--base-url", help="teacher endpoint (overrides sft.teacher.base_url)"),
    model: str | None = typer.Option(None, "--model", help="teacher model (overrides sft.teacher.model)"),
    data_from: Path | None = typer.Option(None, "--data-from", help="another ROSE run whose per-round data to train"),
    resume: bool = typer.Option(False, "--resume", help="continue the run in --out"),
    sets: list[str] = SetOption,
    cache: Path | None = CacheOption,
) -> None:
    """Online stitched SFT: student prefix, teacher continuation, SFT on the teacher's turns; round after round."""
    from twinrun.app.rose import run_rose
    from twinrun.backends.registry import check_dependencies, names_with

    if backend not in names_with("sft"):
        raise TwinrunError(f"--backend: {backend!r} is not an SFT backend (fix: one of {', '.join(names_with('sft'))})")
    check_dependencies(backend)
    check_dependencies("trl")  # the shared tokenization and the student's generation need transformers
    spec = spec_from_cli(spec_path, sets)
    from twinrun.app.environment import check_environment

    t = spec.sft.teacher
    teacher = None if data_from is not None or not (base_url or t.base_url) else \
        (base_url or t.base_url, model or t.model, t.api_key_env)
    check_environment("rose", spec, out=out, teacher=teacher)
    result = run_rose(spec, backend, out, cache_dir=cache_dir(cache), data_from=data_from, resume=resume,
                      base_url=base_url, model=model, progress=lambda m: typer.echo(m, err=True))
    for r in result["rounds"]:
        typer.echo(f"round {r['round']}: {r['episodes']} episodes, {r['steps']} step(s) -> {r['checkpoint']}")
    typer.echo(f"evaluate: twinrun eval-agent --run {out} --out {out}/eval")
