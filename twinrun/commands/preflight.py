"""`twinrun preflight SPEC --backend B --out DIR`: one step of SPEC's exact configuration with the curator cut to
2 layers (twinrun/app/preflight.py)."""

from __future__ import annotations

from pathlib import Path

import typer

from twinrun.commands._common import CacheOption, SetOption, cache_dir, print_json, spec_from_cli


def register(app: typer.Typer) -> None:
    app.command("preflight")(preflight)


def preflight(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="experiment spec (YAML)"),
    backend: str = typer.Option(..., "--backend", help="trl or verl"),
    out: Path = typer.Option(..., "--out", help="a new folder: the cut model and the one-step run"),
    sets: list[str] = SetOption,
    cache: Path | None = CacheOption,
) -> None:
    """Run one training step through SPEC's configuration with a 2-layer random curator of the same architecture:
    a config error shows in minutes (run it under the same launcher as `train`)."""
    from twinrun.app.environment import check_environment
    from twinrun.app.preflight import preflight as run_preflight

    check_environment("preflight", spec_from_cli(spec_path, sets), out=out, backends=[backend])

    print_json(run_preflight(lambda extra: spec_from_cli(spec_path, [*sets, *extra]), backend, out,
                             cache_dir=cache_dir(cache)))
