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
    """The spec, with every model field that names a local folder made absolute (as ``--set`` would): verl's
    trainer and Ray workers load models from other working directories, where a relative folder reads as a hub
    id. The spec file's own folder and prompts are absolute already (load_spec)."""
    import twinrun.backends.registry  # noqa: F401 - registers the backends a spec may name, before it is validated
    from twinrun.models.tiny import local_or_hub

    spec = load_spec(path, sets)
    fields = {"curator.model": spec.curator.model, "sft.model": spec.sft.model,
              "executor.model": spec.executor.model if spec.executor.kind == "hf" else None}
    local = [f"{k}={local_or_hub(v)}" for k, v in fields.items() if v and local_or_hub(v) != v]
    return load_spec(path, [*sets, *local]) if local else spec


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


CacheOption = typer.Option(None, "--cache", help="where tiny local models and warm starts are built (default: $TWINRUN_CACHE)")


def cache_dir(value: Path | None) -> Path | None:
    """--cache, else $TWINRUN_CACHE (docs/install.md): the one environment variable mapped for model caches."""
    # absolute: the folder is handed to verl's child and Ray workers, which run in other working directories
    # (a relative `.cache/twinrun` reached verl as a hub repo id and failed)
    if value is not None:
        return value.resolve()
    env = os.environ.get("TWINRUN_CACHE")
    return Path(env).resolve() if env else None


def teacher_endpoint(teacher: Any, base_url: str | None, model: str | None) -> tuple[str, str, str]:
    """(base URL, model, key) of the teacher: --base-url/--model over ``sft.teacher``; the key from the environment
    variable ``sft.teacher.api_key_env`` names ("EMPTY" when unset: vLLM needs none)."""
    from twinrun.core.errors import TwinrunError

    url, name = base_url or teacher.base_url, model or teacher.model
    if not url:
        raise TwinrunError("sft.teacher.base_url: null (fix: --base-url http://HOST:PORT/v1 or set it in the spec)")
    if not name:
        raise TwinrunError("sft.teacher.model: null (fix: --model NAME or set it in the spec)")
    return url, name, os.environ.get(teacher.api_key_env, "EMPTY")
