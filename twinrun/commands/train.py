"""`twinrun train SPEC --backend B --out DIR [--resume]`: train the curator arm under one framework."""

from __future__ import annotations

from pathlib import Path

import typer

from twinrun.commands._common import CacheOption, SetOption, cache_dir, spec_from_cli
from twinrun.core.errors import TwinrunError


def register(app: typer.Typer) -> None:
    app.command("train")(train)


def train(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="experiment spec (YAML)"),
    backend: str = typer.Option(..., "--backend", help="trl or verl"),
    out: Path = typer.Option(..., "--out", help="run directory (never silently overwritten)"),
    resume: bool = typer.Option(False, "--resume", help="continue from the last complete checkpoint"),
    sets: list[str] = SetOption,
    cache: Path | None = CacheOption,
    launch: bool = typer.Option(False, "--launch", help="trl: start the spec's resources.processes training "
                                "processes (torchrun); 1 process trains here"),
) -> None:
    """Train SPEC's curator with one backend; refuses if the spec's backends would not run the same work."""
    from twinrun.backends import registry
    from twinrun.app.plan import build_plan

    spec = spec_from_cli(spec_path, sets)
    if backend not in spec.backends:
        raise TwinrunError(f"--backend: {backend!r} is not in the spec's backends {spec.backends} (fix: add it there)")
    plan = build_plan(spec)
    if not plan["counts_equal"]:
        raise TwinrunError(
            f"plan: per-step counts differ between backends ({', '.join(plan['mismatched_counts'])}); "
            "refusing to train an arm its twin would not match (fix: run `twinrun plan` and align the knobs)"
        )
    registry.check_runnable(backend, spec)  # e.g. a schedule verl rejects only inside its child
    if launch and backend == "trl":  # verl starts its own workers (Ray)
        import sys

        from twinrun.backends.trl.launch import launch as launch_processes

        launch_processes(spec.resources.world_size, spec.resources.nodes, sys.argv[1:])
    registry.trainer(backend)(spec, out, resume=resume, cache_dir=cache_dir(cache))
