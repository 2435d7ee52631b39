"""`twinrun doctor`: what is installed, which backends can train, where the data is."""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from twinrun.commands._common import SetOption, spec_from_cli


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _alfworld_splits(t: Table, root: Path) -> None:
    """Games per split as alfworld's AlfredTWEnv selects them (full alfworld-download: train 3553, valid_seen 140,
    valid_unseen 134), and what was skipped."""
    from twinrun.core.envs import EnvError
    from twinrun.core.envs.alfworld import skipped_text, split_counts

    try:
        counts = split_counts(root)
    except EnvError as e:
        t.add_row("ALFWorld games", "-", str(e))
        return
    for split, (n, skipped) in counts.items():
        t.add_row(f"ALFWorld {split}", f"{n} games", f"{'ok' if n else 'no playable game'} (skipped: "
                  f"{skipped_text(skipped)})")


def doctor(
    gpu: Path | None = typer.Option(None, "--gpu", help="SPEC: check what its cluster job needs (GPUs against "
                                    "resources, CUDA/NCCL, versions against requirements/gpu-lock.txt, vLLM and "
                                    "flash-attn, the spec's splits, context against the model, disk, memory)"),
    out: Path = typer.Option(Path("runs"), "--out", help="with --gpu: where the run's checkpoints will be written"),
    sets: list[str] = SetOption,
) -> None:
    """Check the environment: framework versions against the pins, vLLM and its CPU workarounds, ALFWORLD_DATA,
    Java for ScienceWorld; with --gpu SPEC, what that spec's GPU job needs (exit 1 when a check fails)."""
    if gpu is not None:
        _gpu_doctor(gpu, out, sets)
        return
    from twinrun.backends.registry import BACKENDS, missing_dependencies
    from twinrun.backends.trl.compile import TRL_VERSION
    from twinrun.backends.verl.compile import VERL_VERSION

    console = Console()
    t = Table(title="twinrun doctor")
    t.add_column("check")
    t.add_column("found")
    t.add_column("status")
    pins = {"trl": TRL_VERSION, "verl": VERL_VERSION}
    for dist in ("torch", "transformers", "trl", "verl", "ray", "alfworld", "textworld", "scienceworld", "bm25s"):
        v = _version(dist)
        want = pins.get(dist)
        ok = v is not None and (want is None or v == want)
        t.add_row(dist, v or "-", "ok" if ok else (f"want {want}" if v else "missing"))
    for name, e in BACKENDS.items():
        miss = missing_dependencies(name)
        t.add_row(f"backend {name}", "ready" if not miss else f"missing {', '.join(miss)}",
                  "ok" if not miss else f"pip install 'twinrun[{e.extra}]'")
    from twinrun.app.environment.packages import vllm_cpu

    for r in vllm_cpu():  # the CPU workarounds of docs/install.md ("vLLM on CPU"), each checked
        t.add_row(r.name, r.found, r.status if r.status == "ok" else f"{r.status}: {r.why}")
    data = os.environ.get("ALFWORLD_DATA")
    has = bool(data) and Path(data, "json_2.1.1").is_dir()
    t.add_row("ALFWORLD_DATA", data or "-", "ok" if has else "set it to a folder with json_2.1.1/")
    if has:
        _alfworld_splits(t, Path(data))
    java = shutil.which("java")
    t.add_row("java (ScienceWorld)", java or "-", "ok" if java else "install a JRE 17")
    console.print(t)


def _gpu_doctor(spec_path: Path, out: Path, sets: list[str]) -> None:
    from twinrun.app.gpu_checks import gpu_checks

    spec = spec_from_cli(spec_path, sets)
    rows = gpu_checks(spec, out)
    t = Table(title=f"twinrun doctor --gpu {spec.name}")
    for col in ("check", "found", "status", "why"):
        t.add_column(col)
    for r in rows:
        t.add_row(r.name, r.found, r.status, r.why)
    Console(width=200).print(t)
    if any(r.status == "fail" for r in rows):
        raise typer.Exit(1)
