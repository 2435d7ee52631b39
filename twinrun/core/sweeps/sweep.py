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
from dataclasses import asdict, dataclass
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
)


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

    def summary(self) -> dict[str, Any]:
        return {"out_dir": str(self.out_dir), "sweep_id": self.sweep_id, "n_games": self.n_games,
                "streams": self.streams, "curator_dtype": self.curator_dtype, "arms": {k: asdict(v) for k, v in self.arms.items()}}


def sweep(spec: Any, run_dirs: Sequence[str | Path] | Mapping[str, str | Path], out_dir: str | Path, *,
          data_root: str | Path | None = None, environ: Mapping[str, str] | None = None, split: str | None = None,
          n_games: int | None = None, streams: int | None = None, policy_factory: PolicyFactory,
          workers: int | None = None, ray_address: str | None = None,
          ray_num_cpus: int | None = None, ray_retries: int = 3, progress: bool = True, arms: Sequence[str] | None = None,
          executor: Any = None, device: str = "cpu") -> SweepResult:
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
    device: the torch device of the curators ("cpu", "cuda"). Every checkpoint is loaded at one dtype
    (:func:`eval_dtype`: sweep.curator_dtype, else curator.precision's on a GPU and float32 on CPU); the policy
    factory reads it from ``spec.sweep.curator_dtype``, which is set to the resolved dtype here.
    """
    from twinrun.core.envs import make_catalog

    env = spec.environment
    n_streams = spec.sweep.streams if streams is None else streams
    check_streams(out_dir, n_streams)  # before the catalog is read: a wrong --streams fails in a second
    dtype = eval_dtype(spec, gpu=on_gpu(device))
    check_curator_dtype(out_dir, dtype)
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
    games = select_games(pool_games, n_games if n_games is not None else env.eval_games, spec.seed)
    from twinrun.core.executors import ExecutorPrompts, executor_settings_hash

    if executor is not None:
        ex_hash = executor.settings_hash
    else:
        prompts = ExecutorPrompts.from_files(spec.prompt_path("executor_system"), spec.prompt_path("executor_input"))
        ex_hash = executor_settings_hash(spec.executor, prompts)
    plan = plan_sweep(spec, runs, out_dir, games=games, split=split, executor_settings_hash=ex_hash,
                      streams=n_streams, curator_dtype=dtype)
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
                             passed, max_retries=ray_retries)
    else:
        outcomes = _sweep_local(plan, todo, spec, out_dir, factory, workers, progress, environ, executor)
    return SweepResult(Path(out_dir), plan.sweep_id, len(plan.games), outcomes, plan.streams or 1, plan.curator_dtype)


def _sweep_local(plan: SweepPlan, todo: list[ArmPlan], spec: Any, out_dir: str | Path, factory: PolicyFactory,
                 workers: int | None, progress: bool, environ: Mapping[str, str] | None, executor: Any
                 ) -> dict[str, ArmOutcome]:
    runtime = build_runtime(spec, workers=workers, environ=environ, executor=executor)
    outcomes: dict[str, ArmOutcome] = {}
    n = len(plan.games)
    try:
        with _progress(progress) as bars:
            tasks = {a.arm: bars.add_task(a.arm, total=n, completed=rows_done(out_dir, a.arm)) for a in todo}
            for a in todo:
                if rows_done(out_dir, a.arm) >= n:
                    outcomes[a.arm] = _finished(out_dir, a.arm, n)
                    continue
                policy = factory(a, spec) if a.role == "checkpoint" else None
                outcomes[a.arm] = run_arm(plan, a.arm, spec, out_dir, runtime, policy,
                                          on_row=lambda arm, k: bars.update(tasks[arm], completed=k))
                del policy  # one checkpoint in memory at a time
    finally:
        runtime.close()
    return outcomes
