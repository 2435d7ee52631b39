"""`twinrun sweep RUN_DIR... --spec SPEC --out DIR`: every checkpoint + a same-sweep baseline, resumable."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import typer

from twinrun.commands._common import CacheOption, SetOption, cache_dir
from twinrun.commands._options import SpecOptions

# options that override a spec field: None (the spec's value) unless given; help and the default shown from the
# field. The sweep's own knobs (--ray-retries, --device, --progress) are sweep()'s keyword defaults, imported only
# when the sweep runs: tests/test_cli_options.py holds them equal.
_SPEC_ONLY = "set in the spec or with --set"
SWEEP = SpecOptions("sweep", omit=dict.fromkeys(
    ("curator_dtype", "batch_streams", "arms_per_gpu", "curator_server", "curator_endpoints",
     "curator_server_command", "curator_server_timeout_s"), _SPEC_ONLY))
ENV = SpecOptions("environment", flags={"eval_games": "--games", "eval_split": "--split"}, omit=dict.fromkeys(
    ("name", "split", "task_types", "group_size", "share_first_position"), "training's games, not the sweep's"))


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep_cmd)


def parse_replicates(items: list[str]) -> tuple[int, dict[str, list[int] | str]]:
    """``baseline`` / ``baseline:N`` (N baseline replicates), ``RUN`` (every checkpoint of RUN once more),
    ``RUN:10,20`` (those steps) -> (baseline replicates, {run: steps | "all"})."""
    from twinrun.core.sweeps.sweep import BASELINE, SweepError

    base = 0
    runs: dict[str, list[int] | str] = {}
    for item in items:
        name, _, rest = item.partition(":")
        if name == BASELINE:
            try:
                base = max(base, int(rest) if rest else 1)
            except ValueError:
                raise SweepError(f"--replicates: {item!r}: {rest!r} is not a count (fix: baseline or baseline:2)") from None
            continue
        if not rest:
            runs[name] = "all"
            continue
        try:
            runs[name] = sorted({int(s) for s in rest.split(",") if s.strip()})
        except ValueError:
            raise SweepError(f"--replicates: {item!r} is not RUN:STEP,STEP (fix: e.g. trl:20,40)") from None
    return base, runs


def replicates_as_streams(items: list[str], run_names: list[str]) -> int | None:
    """The old ``--replicates`` as streams (docs/streams.md): every checkpoint of every run once more (each RUN
    named, no step list), with or without ``baseline`` / ``baseline:1``, is ``--streams 2``; anything else asked
    for replicates of some arms only, which a sweep no longer plays (every arm has the same streams): refused,
    pointing at --streams. None when no --replicates was given."""
    from twinrun.core.sweeps.sweep import SweepError

    if not items:
        return None
    base, runs = parse_replicates(items)
    unknown = sorted(set(runs) - set(run_names))
    if unknown:
        raise SweepError(f"--replicates: run {unknown[0]!r} is not among the RUN_DIRs (fix: one of {sorted(run_names)})")
    if base <= 1 and runs and set(runs) == set(run_names) and all(v == "all" for v in runs.values()):
        return 2
    raise SweepError(
        f"--replicates: {' '.join(items)!r} replays some arms only; a sweep now plays every arm (checkpoints and "
        "baseline) as the same number of streams (fix: --streams 2, or --streams N for N streams per arm)"
    )


def sweep_cmd(
    run_dirs: list[str] = typer.Argument(..., metavar="RUN_DIR...", help="training run folders (or NAME=PATH)"),
    spec_path: Path = typer.Option(..., "--spec", help="experiment spec (executor, environment, prompts)"),
    out: Path = typer.Option(..., "--out", help="sweep folder (sweep.json + arms/*.jsonl); rerun to resume"),
    sets: list[str] = SetOption,
    executor: str | None = typer.Option(None, "--executor", help="the executor model (sets executor.model) and the "
                                        "sweep's name for it; compare --across executor sets sweeps of several "
                                        "executors side by side"),
    ray: str | None = typer.Option(None, "--ray", help="fan arms out over Ray: an address, or 'local'"),
    ray_cpus: int | None = typer.Option(None, "--ray-cpus", help="CPUs of a --ray local cluster"),
    ray_retries: int = typer.Option(3, "--ray-retries", help="run an arm again (resuming its rows) on another node "
                                    "when its Ray node or worker is lost, up to this many times"),
    streams: int | None = SWEEP("streams", min=1, more="(a sweep folder resumes only with the streams it was "
                                "planned with)"),
    replicates: list[str] = typer.Option([], "--replicates", help="old alias: naming every run (RUN ..., optionally "
                                         "baseline) is --streams 2; a subset of runs or steps, or baseline:N, is "
                                         "refused (use --streams)"),
    until_decided: bool = SWEEP("until_decided"),
    max_streams: int | None = SWEEP("max_streams"),
    streams_per_look: int | None = SWEEP("streams_per_look"),
    games: int | None = ENV("eval_games"),
    split: str | None = ENV("eval_split"),
    workers: int | None = ENV("workers"),
    curator: str = typer.Option("hf", "--curator", help="'hf': generate with each checkpoint (in this process, or "
                                "on its server: sweep.curator_server); 'no-ops': a curator that writes nothing "
                                "(plumbing check, not a checkpoint's behaviour)"),
    cache: Path | None = CacheOption,
    device: str = typer.Option("cpu", "--device", help="torch device of the curator checkpoints (with --ray: cuda "
                               "asks Ray for one GPU per checkpoint)"),
    gpus: str | None = typer.Option(None, "--gpus", help="GPU ids for the curators, e.g. 0-7 or 0,2,5: each "
                                    "checkpoint's curator on its own GPU (sweep.arms_per_gpu: 1), the checkpoints in "
                                    "waves of that many; recorded per arm in sweep.json"),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    as_json: bool = typer.Option(False, "--json", help="print the sweep summary as JSON"),
) -> None:
    """Evaluate every checkpoint of each run on held-out games with streaming curation, plus a baseline arm."""
    from twinrun.commands._common import print_json, spec_from_cli
    from twinrun.core.sweeps import sweep as sw

    if executor is not None:
        sets = [*sets, f"executor.model={executor}"]
    spec = spec_from_cli(spec_path, sets)
    _check_inputs(spec, out, run_dirs, parse_replicates(replicates)[1])  # a step --replicates names must exist
    from twinrun.app.environment import check_environment

    check_environment("sweep", spec, out=out, ray=ray, device=device, split=split)  # before sweep.json is written
    aliased = replicates_as_streams(replicates, list(sw.parse_run_dirs(run_dirs)))
    if aliased is not None and streams is not None and streams != aliased:
        raise sw.SweepError(f"--replicates: {' '.join(replicates)!r} means --streams {aliased}, but --streams "
                            f"{streams} was given (fix: drop --replicates)")
    n_streams = streams if streams is not None else aliased  # None: the spec's sweep.streams
    sequential = until_decided or spec.sweep.until_decided
    if sequential:  # looks (issue 41): planned with max_streams; the looks checked before anything is written
        from twinrun.core.sweeps.until_decided import check_resume, plan_looks

        if n_streams is not None:
            raise sw.SweepError("--streams: given with --until-decided, which plays up to --max-streams (fix: drop "
                                "--streams, or drop --until-decided)")
        max_streams = max_streams or spec.sweep.max_streams
        streams_per_look = streams_per_look or spec.sweep.streams_per_look
        looks = plan_looks(max_streams, streams_per_look)
        n_streams = max_streams
        from twinrun.app.until_decided import sequential_rule

        check_resume(out, looks, sequential_rule(max_streams, streams_per_look).describe())
    # another number of streams than the folder was planned with: refused before the folder's lock is written
    sw.check_streams(out, spec.sweep.streams if n_streams is None else n_streams)
    from twinrun.core.sweeps.placement import parse_gpus

    gpu_ids = parse_gpus(gpus)
    if gpu_ids and ray:
        raise sw.SweepError(f"--gpus: {gpus!r} with --ray: Ray places each checkpoint on a GPU itself (fix: --device "
                            "cuda with --ray, or --gpus without --ray)")
    sw.check_curator_dtype(out, sw.eval_dtype(spec, gpu=sw.on_gpu(device, gpu_ids)))  # another dtype: the same
    sw.check_curator_server(out, spec.sweep.curator_server)  # in process vs served: the same
    factory = _policy_factory(spec, run_dirs, out, curator=curator, cache=cache, device=device)
    # --json: stdout holds the summary alone (Ray's driver prints cluster events, e.g. a lost raylet, to stdout)
    if sequential:
        from twinrun.app.until_decided import sweep_until_decided

        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext(), _one_writer(out):
            seq = sweep_until_decided(
                sw.sweep, spec, run_dirs, out, max_streams=max_streams, per_look=streams_per_look,
                log=lambda line: typer.echo(line, err=as_json), environ=dict(os.environ), split=split, n_games=games,
                policy_factory=factory, workers=workers, ray_address=ray, ray_num_cpus=ray_cpus,
                ray_retries=ray_retries, progress=progress and not as_json, device=device, gpus=gpu_ids,
                cache_dir=cache_dir(cache))
        if as_json:
            print_json({"sequential": seq})
            return
        typer.echo(f"until decided: stopped at {seq['stopped_at']} of {max_streams} streams ({seq['stop']}): "
                   + "; ".join(f"{k}: {v}" for k, v in (seq["verdicts"] or {}).items()))
        typer.echo(f"next: twinrun compare {out} --baseline {sw.BASELINE}")
        return
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext(), _one_writer(out):
        result = sw.sweep(
            spec, run_dirs, out, environ=dict(os.environ), split=split, n_games=games, streams=n_streams,
            policy_factory=factory, workers=workers, ray_address=ray,
            ray_num_cpus=ray_cpus, ray_retries=ray_retries, progress=progress and not as_json, device=device,
            gpus=gpu_ids, cache_dir=cache_dir(cache),
        )
    from twinrun.core.compare.track_results import log_sweep

    log_sweep(spec, out, log=lambda line: typer.echo(line, err=as_json))
    if as_json:
        print_json(result.summary())
        return
    _print_summary(spec, out, result)


def _policy_factory(spec: object, run_dirs: list[str], out: Path, *, curator: str, cache: Path | None,
                    device: str) -> object:
    """The checkpoint curator each arm plays with: served (sweep.curator_server; its endpoints or launcher checked
    before the folder is written), in process (``hf``) or the no-op stand-in."""
    from twinrun.core.sweeps import sweep as sw
    from twinrun.models.curator_policy import hf_policy_factory

    if spec.sweep.curator_server and curator != "hf":
        raise sw.SweepError(f"--curator: {curator!r} with sweep.curator_server: {spec.sweep.curator_server} (fix: drop "
                            "--curator, or --set sweep.curator_server=null)")
    if curator == "hf":  # every checkpoint loadable (headers, config, tokenizer) before the folder is written
        check_checkpoint_files(spec, sw.parse_run_dirs(run_dirs), cache)
    if spec.sweep.curator_server:  # served: the endpoints or the launcher checked before the folder is written
        from twinrun.core.sweeps.served import CuratorServers
        from twinrun.models.served_curator import served_policy_factory

        servers = CuratorServers(spec, sw.parse_run_dirs(run_dirs), out)  # servers inherit the environment
        servers.check()
        return served_policy_factory(servers, cache_dir=cache_dir(cache))
    if curator == "hf":
        def factory(arm: sw.ArmPlan, spec_: object) -> sw.CuratorPolicy:
            return hf_policy_factory(arm, spec_, cache_dir=cache_dir(cache), device=device)

        return factory
    if curator == "no-ops":
        return sw.no_ops_policy_factory
    raise sw.SweepError(f"--curator: {curator!r} is not a curator policy (fix: hf or no-ops)")


def _print_summary(spec: object, out: Path, result: object) -> None:
    """The sweep's console summary: its arms, what stopped, the next command."""
    from twinrun.core.sweeps import sweep as sw

    typer.echo(f"sweep {result.sweep_id} (executor {sw.executor_name(spec)}): {len(result.arms)} arms x "
               f"{result.n_games} games in {out}" + (f" ({result.streams} streams per arm)" if result.streams > 1 else "")
               + (f"; every checkpoint evaluated at {result.curator_dtype}" if result.curator_dtype else ""))
    for name, a in result.arms.items():
        typer.echo(f"  {name}: {a.successes} successes, {a.unmeasured} unmeasured"
                   + (f" ({a.unmeasured_why})" if a.unmeasured_why else "")
                   + (f" (resumed after {a.resumed_from} games)" if a.resumed_from else "")
                   + (f" ({a.attempts} Ray attempts: a node or worker was lost)" if a.attempts > 1 else "")
                   + (f" ({a.stopped}; rerun the same command to resume)" if a.stopped else ""))
    for game, why in result.excluded_games.items():
        typer.echo(f"  left out of the split: {game}: {why}")
    for game, why in result.kept_broken.items():
        typer.echo(f"  kept in this folder's game list (planned before it was left out): {game}: {why}; its "
                   "failed episodes are unmeasured (a new --out folder leaves it out)")
    stopped = [name for name, a in result.arms.items() if a.stopped]
    if stopped:
        typer.echo(f"sweep incomplete: {len(stopped)} arm(s) stopped when their curator server went away "
                   f"({', '.join(stopped)}); their remaining games are unmeasured: rerun the same command to resume")
    typer.echo(f"next: twinrun compare {out} --baseline {sw.BASELINE}")


def _check_inputs(spec: object, out: Path, run_dirs: list[str], run_reps: dict) -> None:
    """Refusals that must come before the sweep folder is created (issue 30)."""
    from twinrun.core.sweeps.preflight import check_replicate_steps, check_skills, check_sweep_out
    from twinrun.core.records.lock import check_unlocked

    check_sweep_out(out)
    check_unlocked(out)  # a folder another sweep is writing: say so first, whatever else is wrong with the command
    check_skills(spec)
    check_replicate_steps(run_dirs, run_reps)


def check_checkpoint_files(spec: object, runs: dict[str, Path], cache: Path | None) -> None:
    """Refuse, in one line, a checkpoint whose files cannot be loaded (a truncated weight file, a config.json that
    does not parse, no tokenizer): before the sweep folder is written (issue 53). The tokenizer's fallback
    (curator.model, which the curator loads when a checkpoint has none) is resolved only when one lacks it."""
    from twinrun.core.errors import TwinrunError
    from twinrun.core.sweeps.checkpoint_check import check_checkpoints
    from twinrun.models.tiny import resolve_model

    def fallback() -> str | None:
        try:
            return resolve_model(spec.curator.model, cache_dir(cache))  # type: ignore[attr-defined]
        except TwinrunError:
            return None

    check_checkpoints(runs, fallback)


def _one_writer(out: Path) -> contextlib.AbstractContextManager[int]:
    """The sweep folder's lock (core.run_lock), held while the sweep writes. The read-only refusals (a training run's
    folder as --out, a live writer) already ran in `_check_inputs`; `folder_lock` refuses a writer that started
    since, in the same one line naming its pid."""
    from twinrun.core.records.lock import folder_lock

    return folder_lock(out)
