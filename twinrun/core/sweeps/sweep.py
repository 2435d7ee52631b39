"""Checkpoint sweeps: every checkpoint of every run, plus a no-memory baseline, on one held-out game list.

One sweep (``--out DIR``) holds:
    sweep.json          the manifest: sweep id, spec hash, the ordered game list and its hash, every arm with its
                        checkpoint path and content hash (written once; later calls may add arms, never change
                        the games)
    arms/<arm>.jsonl    one :class:`EvalRecord` per game, in game order

**Streaming curation** (as at training time, one position at a time): a checkpoint arm starts with an empty
repo; for each game in order the frozen executor plays it with the skills retrieved from the repo, then the
checkpoint's curator reads the curator input chi (task, retrieved skills, trajectory, result) and its
operations update the repo that the next game retrieves from. The **baseline** arm plays the same games with no
memory (empty repo, no curator). **Streams** (``streams: R``, docs/streams.md): every arm is played R times,
stream r as arm ``<arm>#r{r}`` (r > 0) with ``replicate = r``, each from an empty repo, in the stream's own order
of the same games, with the stream's own executor and curator seeds (:mod:`twinrun.core.sweeps.plan`). Within a
stream, a game's executor seed is the same in every arm (common random numbers), so arm differences are not
executor-seed noise; other streams change it. A row's ``game_index`` is the game's index in the sweep's game
list (the pairing key, the same in every stream); its ``position`` is where the stream played it (1-based).

The per-game loop is core's curation session (:mod:`twinrun.core.curation.session`): one session per game on the arm's
repo, so executor play, retrieval, curator-input rendering and op application are exactly the training code.

**Resume**: rows are appended durably, one per game, after the game's curator ops are applied. A rerun reads an
arm's complete rows (a torn last line from kill -9 is dropped), rebuilds its repo by replaying the recorded ops
in order, and continues with the stream's next game: no row is lost or written twice.

The manifest (arms, games, checkpoint hashes) is built by :mod:`twinrun.core.sweeps.plan`; its names are
re-exported here.

**Curator policy**: a callable ``policy(curator_input: str) -> curator_turn: str``, made per checkpoint arm by the
caller's ``policy_factory`` (required: core knows no model). Generating with the checkpoint is
:func:`twinrun.models.curator_policy.hf_policy_factory` (transformers, the ``curate`` tool, core's per_position
messages tokenised as training tokenises them); any backend's generation can be plugged in the same way.

**Context shape**: a checkpoint is evaluated in the shape its run trained in. per_position with
``curator.history: k > 0`` calls ``policy(curator_input, history)`` with the arm's last k (input, turn) pairs
(:func:`eval_history`; recorded in the rows so a resumed arm restores its window); k = 0 is the paper's Markov
curator. An accumulated run is evaluated per game (DIVERGENCES D1). A run whose spec.yaml trained another shape
than the sweep's spec is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


from twinrun.core.sweeps.plan import (  # noqa: F401  (re-exported: the plan's names live in sweep_plan)
    ARMS_DIR,
    BASELINE,
    MANIFEST,
    SWEEP_SCHEMA_VERSION,
    ArmPlan,
    SweepError,
    SweepPlan,
    _check_run_shape,
    _run_identity,
    _slug,
    arm_name,
    checkpoint_fingerprint,
    StreamPlan,
    check_curator_dtype,
    check_curator_server,
    check_streams,
    checkpoint_hash,
    curator_seed,
    discover_checkpoints,
    eval_dtype,
    executor_seed,
    executor_name,
    games_hash,
    load_plan,
    on_gpu,
    parse_run_dirs,
    plan_sweep,
    record_placement,
    select_games,
    stream_plan,
    sweep_group_id,
)
from twinrun.core.sweeps.arms import (  # noqa: F401  (re-exported: an arm's names live in arms)
    CuratorOp,
    EvalRecord,
    CuratorPolicy,
    PolicyFactory,
    no_ops_policy_factory,
    ArmOutcome,
    build_runtime,
    run_arm,
    eval_history,
    rows_done,
    _finished,
    _progress,
    _completed_rows,
    _replay,
    _jsonable,
    ArmStream,
)
from twinrun.core.sweeps.lockstep import play_unit, run_streams  # noqa: F401


# ------------------------------------------------------------------------------------------------------------
# The whole sweep


@dataclass
class SweepResult:
    out_dir: Path
    sweep_id: str
    n_games: int
    arms: dict[str, ArmOutcome]
    streams: int = 1
    curator_dtype: str | None = None
    excluded_games: dict[str, str] = field(default_factory=dict)  # left out of the split: game id -> why
    # known-broken games still in the list of a manifest planned before they were excluded: game id -> why
    kept_broken: dict[str, str] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {"out_dir": str(self.out_dir), "sweep_id": self.sweep_id, "n_games": self.n_games,
                "streams": self.streams, "curator_dtype": self.curator_dtype,
                "excluded_games": self.excluded_games, "kept_broken": self.kept_broken,
                "arms": {k: asdict(v) for k, v in self.arms.items()}}


def sweep(spec: Any, run_dirs: Sequence[str | Path] | Mapping[str, str | Path], out_dir: str | Path, *,
          data_root: str | Path | None = None, environ: Mapping[str, str] | None = None, split: str | None = None,
          n_games: int | None = None, streams: int | None = None, policy_factory: PolicyFactory,
          workers: int | None = None, ray_address: str | None = None,
          ray_num_cpus: int | None = None, ray_retries: int = 3, progress: bool = True, arms: Sequence[str] | None = None,
          executor: Any = None, device: str = "cpu", gpus: Sequence[int] = (),
          ray_num_gpus: int | None = None, cache_dir: str | Path | None = None) -> SweepResult:
    """Evaluate every checkpoint of each run and a same-sweep baseline on the held-out games (resumable).

    run_dirs: training run folders (``NAME=PATH`` strings or a name -> path mapping); data_root: the ALFWorld
    data folder (else ``environ['ALFWORLD_DATA']``); split / n_games: default environment.eval_split /
    environment.eval_games; streams: replicate streams per arm (default spec.sweep.streams; a folder planned
    with another number is refused before anything is written); policy_factory(arm, spec) -> policy for a
    checkpoint arm (required; the checkpoint's own generation is twinrun.models.curator_policy.hf_policy_factory,
    a curator that writes nothing no_ops_policy_factory);
    ray_address: fan arms out as Ray tasks ("local" starts a local Ray with ray_num_cpus CPUs; an arm whose node is
    lost is run again on another node up to ray_retries times, resuming from its rows: :mod:`twinrun.core.sweeps.ray_tasks`);
    arms: only these arms of the plan (default all); executor: an Executor object (tests) instead of the spec's;
    device: the torch device of the curators ("cpu", "cuda"); gpus: GPU ids for a local sweep: each checkpoint's
    curator on its own GPU, in waves (:mod:`twinrun.core.sweeps.placement`; under Ray with a device other than cpu
    each checkpoint's task asks Ray for a GPU; ray_num_gpus: GPUs of a "local" Ray cluster). Every checkpoint is loaded at one dtype
    (:func:`eval_dtype`: sweep.curator_dtype, else curator.precision's on a GPU and float32 on CPU); the policy
    factory reads it from ``spec.sweep.curator_dtype``, which is set to the resolved dtype here. cache_dir: where
    warm starts were built (default ``environ['TWINRUN_CACHE']``): a run's start recorded by name is hashed there.
    """
    from twinrun.core.envs import make_catalog

    env = spec.environment
    n_streams = spec.sweep.streams if streams is None else streams
    existing = check_streams(out_dir, n_streams)  # before the catalog is read: a wrong --streams fails in a second
    if gpus and device == "cpu":
        device = "cuda"
    dtype = eval_dtype(spec, gpu=on_gpu(device, gpus))
    check_curator_dtype(out_dir, dtype)
    check_curator_server(out_dir, spec.sweep.curator_server)
    # the factories (here, in Ray workers) load every checkpoint at this one dtype (section not in the spec hash)
    spec = spec.model_copy(update={"sweep": spec.sweep.model_copy(update={"curator_dtype": dtype})})
    runs = parse_run_dirs(list(run_dirs)) if not isinstance(run_dirs, Mapping) else {
        k: Path(v) for k, v in run_dirs.items()}
    root = None
    if env.name == "alfworld":
        from twinrun.core.envs.alfworld import resolve_alfworld_data

        root = resolve_alfworld_data(data_root, environ)
    split = split or env.eval_split
    catalog = make_catalog(env.name, split, data_root=root, task_types=env.task_types)
    pool_games = [g for g in catalog.games() if not env.task_types or g.task_type in env.task_types]
    excluded = split_exclusions(env.name, pool_games, existing)
    pool_games = [g for g in pool_games if g.game_id not in excluded]
    games = select_games(pool_games, n_games if n_games is not None else env.eval_games, spec.seed)
    from twinrun.core.executors import ExecutorPrompts, executor_settings_hash

    if executor is not None:
        ex_hash = executor.settings_hash
    else:
        prompts = ExecutorPrompts.from_files(spec.prompt_path("executor_system"), spec.prompt_path("executor_input"))
        ex_hash = executor_settings_hash(spec.executor, prompts)
    plan = plan_sweep(spec, runs, out_dir, games=games, split=split, executor_settings_hash=ex_hash,
                      streams=n_streams, curator_dtype=dtype, curator_server=spec.sweep.curator_server,
                      excluded_games=excluded,
                      # a warm start recorded by name is hashed where it was built (the cache the backends use)
                      start_roots=[cache_dir] if cache_dir else [environ["TWINRUN_CACHE"]] if environ and environ.get(
                          "TWINRUN_CACHE") else [])
    unknown = sorted(set(arms or ()) - {a.arm for a in plan.arms})
    if unknown:
        raise SweepError(f"arms: {unknown[0]!r} is not an arm of this sweep (fix: one of {[a.arm for a in plan.arms]})")
    todo = [a for a in plan.arms if arms is None or a.arm in arms]
    factory = policy_factory
    if ray_address:
        # workers get only the variable the executor reads (its endpoint key), not the caller's whole environment
        passed = {k: environ[k] for k in (spec.executor.api_key_env,) if environ and k in environ}
        from twinrun.core.sweeps.ray_tasks import sweep_ray

        outcomes = sweep_ray(plan, todo, spec, out_dir, factory, workers, ray_address, ray_num_cpus, progress,
                             passed, max_retries=ray_retries, gpu=on_gpu(device), num_gpus=ray_num_gpus,
                             batch=spec.sweep.batch_streams)
    else:
        outcomes = _sweep_local(plan, todo, spec, out_dir, factory, workers, progress, environ, executor,
                                device=device, gpus=list(gpus), batch=spec.sweep.batch_streams)
    return SweepResult(Path(out_dir), plan.sweep_id, len(plan.games), outcomes, plan.streams or 1, plan.curator_dtype,
                       excluded_games=dict(plan.excluded_games or {}), kept_broken=_kept_broken(env.name, plan))


def split_exclusions(env_name: str, games: Sequence[Any], existing: SweepPlan | None) -> dict[str, str]:
    """The games of a split a sweep leaves out before drawing its game list: game id -> why. A new sweep leaves out
    every known-broken game (envs.alfworld.EXCLUDED_GAMES); a folder's existing manifest keeps what it left out
    then (nothing, if planned before exclusions existed), so its game list and games_hash do not change."""
    if existing is not None:
        return dict(existing.excluded_games or {})
    if env_name != "alfworld":
        return {}
    from twinrun.core.envs.alfworld import excluded_games

    return excluded_games([g.game_id for g in games])


def _kept_broken(env_name: str, plan: SweepPlan) -> dict[str, str]:
    """Known-broken games in a manifest's list (one planned before they were excluded): game id -> why."""
    if env_name != "alfworld":
        return {}
    from twinrun.core.envs.alfworld import excluded_games

    return excluded_games(plan.game_ids)


def _unit_workers(spec: Any, workers: int | None, concurrent: bool) -> int | None:
    """Env workers of one unit's runtime. Several units at once (a --gpus wave) each get their own runtime in
    a thread: the in-process host (workers 0) would run two game engines in one process, and ALFWorld's
    textworld is not thread-safe, so each gets at least one worker process (the null env needs none)."""
    w = spec.environment.workers if workers is None else workers
    return max(1, w) if concurrent and spec.environment.name != "null_env" else w


def _sweep_local(plan: SweepPlan, todo: list[ArmPlan], spec: Any, out_dir: str | Path, factory: PolicyFactory,
                 workers: int | None, progress: bool, environ: Mapping[str, str] | None, executor: Any,
                 *, device: str = "cpu", gpus: Sequence[int] = (), batch: bool = True) -> dict[str, ArmOutcome]:
    """The baseline, then the checkpoints: on CPU (no gpus) one checkpoint at a time on `device`; with gpus, in
    waves, each wave's checkpoints at once (a thread and a runtime each), each on its own GPU
    (:mod:`twinrun.core.sweeps.placement`). Placement is written into sweep.json before each wave starts."""
    import socket
    from concurrent.futures import ThreadPoolExecutor

    from twinrun.core.sweeps.placement import units, waves

    groups = units(todo)
    outcomes: dict[str, ArmOutcome] = {}
    n = len(plan.games)
    host = socket.gethostname()
    per_gpu = spec.sweep.arms_per_gpu
    with _progress(progress) as bars:
        tasks = {a.arm: bars.add_task(a.arm, total=n, completed=rows_done(out_dir, a.arm)) for a in todo}

        def on_row(arm: str, k: int) -> None:
            bars.update(tasks[arm], completed=k)

        def play(unit: Any, runtime: Any) -> dict[str, ArmOutcome]:
            return play_unit(plan, unit.arms, spec, out_dir, runtime, factory, batch=batch, on_row=on_row)

        runtime = build_runtime(spec, workers=workers, environ=environ, executor=executor)
        try:
            for u in groups:
                if not u.needs_gpu:
                    outcomes.update(play(u, runtime))
            if not gpus:
                for u in groups:
                    if u.needs_gpu:
                        record_placement(out_dir, plan, {a: {"device": device, "host": host} for a in u.arms})
                        outcomes.update(play(u, runtime))
                return outcomes
        finally:
            runtime.close()
        for w, wave in enumerate(waves([u for u in groups if u.needs_gpu], gpus, per_gpu)):
            record_placement(out_dir, plan, {a: {"device": slot.device, "gpus": str(slot.gpu), "wave": w, "host": host}
                                             for u, slot in wave for a in u.arms})

            def run_one(u: Any) -> dict[str, ArmOutcome]:
                rt = build_runtime(spec, workers=_unit_workers(spec, workers, len(wave) > 1), environ=environ,
                                   executor=executor)
                try:
                    return play(u, rt)
                finally:
                    rt.close()

            with ThreadPoolExecutor(max_workers=len(wave), thread_name_prefix=f"sweep-wave{w}") as pool:
                futures = [pool.submit(run_one, u) for u, _ in wave]
                for f in futures:
                    outcomes.update(f.result())  # the first failure is raised after its wave's others end
    return outcomes
