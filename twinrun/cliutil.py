"""Small pieces shared by the commands in twinrun/commands: spec options and JSON printing."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import typer

from twinrun.core.spec import ExperimentSpec, load_spec

SetOption = typer.Option([], "--set", help="override a spec field: --set optimizer.lr=1e-6 (repeatable)")


def spec_from_cli(path: Path, sets: list[str]) -> ExperimentSpec:
    return load_spec(path, sets)


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


CacheOption = typer.Option(None, "--cache", help="where tiny local models and warm starts are built (default: $TWINRUN_CACHE)")


def cache_dir(value: Path | None) -> Path | None:
    """--cache, else $TWINRUN_CACHE (README "Environment"): the one environment variable mapped for model caches."""
    if value is not None:
        return value
    env = os.environ.get("TWINRUN_CACHE")
    return Path(env) if env else None
