"""`twinrun train SPEC --backend B --out DIR [--resume]`: train the curator arm under one framework."""

from __future__ import annotations

import os
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
    from twinrun.app.plan import build_plan
    from twinrun.backends import registry

    spec = spec_from_cli(spec_path, sets)
    known = sorted(registry.BACKENDS)
    if backend not in known:
        raise TwinrunError(f"--backend: {backend!r} is not a backend (fix: one of {', '.join(known)})")
    if backend not in spec.backends:
        raise TwinrunError(f"--backend: {backend!r} is not in the spec's backends {spec.backends} (fix: add it there)")
    from twinrun.core.sweeps.preflight import check_skills

    check_skills(spec)  # a bad skills.human_skills folder: refused before the run folder exists
    plan = build_plan(spec)
    if not plan["counts_equal"]:
        raise TwinrunError(
            f"plan: per-step counts differ between backends ({', '.join(plan['mismatched_counts'])}); "
            "refusing to train an arm its twin would not match (fix: run `twinrun plan` and align the knobs)"
        )
    registry.check_runnable(backend, spec)  # e.g. a schedule verl rejects only inside its child
    from twinrun.app.environment import check_environment

    # the node, packages, models, data, endpoints and disk: one line now, not a framework's traceback later
    check_environment("train", spec, out=out, backends=[backend])
    from twinrun.backends.trl.launch import launched

    if launched(os.environ):  # a rank of torchrun / accelerate: it dies with its launcher (kill -9 included)
        from twinrun.core.records.parent_death import die_with_parent

        die_with_parent()
    if launch and backend == "trl":  # verl starts its own workers (Ray)
        import sys

        from twinrun.backends.trl.launch import launch as launch_processes

        keep: list[object] = []
        if not launched(os.environ) and (spec.resources.nodes > 1 or spec.resources.world_size > 1):
            from twinrun.backends.trl.train import preflight

            # the checks rank 0 would make, here: one line on a refusal, the warm start built with every core
            preflight(spec, out, resume=resume, cache_dir=cache_dir(cache), log=lambda m: typer.echo(m, err=True))
            if spec.resources.nodes == 1:  # several nodes: rank 0 takes the lock where it runs
                keep.append(_hold_for_ranks(out))  # torchrun and its ranks run under this process's lock on the folder
        launch_processes(spec.resources.world_size, spec.resources.nodes, sys.argv[1:])
    # inside a launched world whose launcher holds the folder's lock, rank 0 must not take it a second time
    held_by_launcher = os.environ.get(LOCK_HELD_ENV) == str(out.resolve())
    registry.trainer(backend)(spec, out, resume=resume, cache_dir=cache_dir(cache), hold_lock=not held_by_launcher)


LOCK_HELD_ENV = "TWINRUN_LOCK_HELD"  # set by `--launch` for the ranks it starts: the run folder whose lock it holds


def _hold_for_ranks(out: Path) -> object:
    """Take the run folder's lock in this process (refused if another writer holds it) and keep it across the
    exec into torchrun: the descriptor is made inheritable, and the ranks are told (LOCK_HELD_ENV) not to take it
    again. The lock ends when torchrun (this process, after exec) exits."""
    from twinrun.core.records.lock import folder_lock

    lock = folder_lock(out)
    fd = lock.__enter__()  # never exited: the exec replaces this process and the kernel keeps the lock
    os.set_inheritable(fd, True)
    os.environ[LOCK_HELD_ENV] = str(out.resolve())
    return lock  # the caller keeps it until the exec (a collected context would close the descriptor)
