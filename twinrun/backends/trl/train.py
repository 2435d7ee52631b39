"""``train(spec, out_dir, resume)``: train the curator arm with TRL 1.16's GRPOTrainer (the registry's TRL target).

Flow: compile the spec (the same ``GRPOConfig`` keyword arguments ``twinrun plan`` shows) -> resolve the curator
model (``tiny-qwen3`` = the locally built, warm-started tiny model; see :mod:`twinrun.models.warmstart`) -> build core's
curation runtime (environment pool, executor, judge, reward) -> one dataset row per task group, in the order core's
sampler draws them -> :class:`~.trainer.TwinrunGRPOTrainer` with :class:`~.environment.CuratorEnvironment` as
``environment_factory`` and core's composite reward as the one reward function -> neutral records in ``out_dir``
(:mod:`.records`). Framework imports happen inside ``train`` so importing this module stays cheap.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from twinrun.core.errors import TwinrunError


def train(
    spec: Any,
    out_dir: str | Path,
    resume: bool = False,
    cache_dir: str | Path | None = None,
    *,
    data_root: str | Path | None = None,
    log: Any = print,
    estimator: Any = None,
    keep_row_tokens: bool = False,
    hold_lock: bool = True,
    position_schedule: str = "ready",
) -> dict[str, Any]:
    """Train ``spec``'s curator under TRL; write the run folder ``out_dir`` (see :mod:`.records`).

    cache_dir: where ``tiny-qwen3`` and its warm start are built (required for that model).
    data_root: the ALFWorld data folder (default: ``$ALFWORLD_DATA``, read here at the backend boundary).
    estimator: an ``EstimatorConfig`` overriding ``spec.algorithm`` (tests use TRL's own preset).
    keep_row_tokens: write each trained row's token ids and messages into rows.jsonl (tests; large).
    hold_lock: rank 0 holds the run folder's lock (core.run_lock) for the whole run; False where the caller holds
    it (``--launch``: the launching process took it and torchrun inherited it).
    position_schedule: per_position only: ``ready`` (a rollout's next position starts when its own turn is
    generated) or ``barrier`` (one generation call per position for every rollout: the earlier schedule, which
    bench/train_concurrency.py measures as the before); the rows are the same for the same turns.
    Returns a small summary (steps trained, checkpoints, wall time)."""
    return _train(spec, out_dir, resume, cache_dir, data_root=data_root, log=log, estimator=estimator,
                  keep_row_tokens=keep_row_tokens, hold_lock=hold_lock, position_schedule=position_schedule)


def _train(spec: Any, out_dir: str | Path, resume: bool, cache_dir: str | Path | None, *, data_root: str | Path | None,
           log: Any, estimator: Any, keep_row_tokens: bool, hold_lock: bool,
           position_schedule: str = "ready") -> dict[str, Any]:
    """train()'s guards and run folder (core's run lifecycle: rank 0 holds the folder's lock until it returns)."""
    from accelerate import PartialState

    from twinrun.backends.compiled import world_size
    from twinrun.backends.trl.compile import compile_spec
    from twinrun.backends.trl.records import TRL_LOG, last_complete_checkpoint, refuse_changed_config
    from twinrun.core.records import RunPaths
    from twinrun.core.records.lifecycle import run_lifecycle
    from twinrun.models.warmstart import resolve_curator_model

    t_start = time.perf_counter()
    paths = RunPaths(Path(out_dir))
    compiled = compile_spec(spec)
    updates_per_step = int(compiled.counts["optimizer_updates"])
    # several processes (torchrun / accelerate launch): one world of the spec's size; rank 0 alone writes the run
    # folder (spec, records, checkpoints), the others wait for it and read it
    state = PartialState(cpu=spec.resources.gpus_per_node == 0)
    check_world(state.num_processes, world_size(spec))
    is_main = state.is_main_process
    # every guard (process count above, folder, backend, spec, resolved config below) runs before the first write
    # into the run folder, so a refused resume leaves it byte for byte as it was; rank 0 alone guards and writes
    with run_lifecycle(paths, spec_yaml=_spec_yaml(spec), backend="trl", resume=resume, hold_lock=hold_lock,
                       writer=is_main, log=log, compare=refuse_changed_config) as run:
        # the other ranks: a failed start has no complete checkpoint, so they find none either
        done, resume_from = (last_complete_checkpoint(paths, updates_per_step) if resume else None) or (0, None)
        environ = dict(os.environ)
        with state.main_process_first():  # rank 0 builds a missing tiny curator; the others then find it
            model_path = resolve_curator_model(spec, cache_dir, data_root=data_root, environ=environ, log=log)
        config, resolved = grpo_config(dict(compiled.config), paths, model_path)
        run.guard(resolved)  # the recorded resolved GRPOConfig, on resume (reads only)
        if run.finished(done, spec.steps):
            return {"steps": done, "checkpoints": _checkpoint_steps(paths), "wall_s": 0.0, "resumed_from": done}
        run.begin(resolved=resolved, keep_steps=done, extra=[paths.root / TRL_LOG])
        if resume and is_main and not run.restart:  # one line, not one per rank
            log(f"trl: resuming {paths.root} after step {done}" if resume_from else
                f"trl: no complete checkpoint in {paths.root}; starting at step 1")
        state.wait_for_everyone()
        _fit(spec, paths, config, model_path, state, updates_per_step=updates_per_step, done=done, resume=resume,
             resume_from=resume_from, environ=environ, data_root=data_root, log=log, estimator=estimator,
             keep_row_tokens=keep_row_tokens, position_schedule=position_schedule)
    wall = time.perf_counter() - t_start
    steps = _checkpoint_steps(paths)
    return {"steps": spec.steps, "checkpoints": steps, "wall_s": round(wall, 3),
            "resumed_from": None if resume_from is None else int(resume_from.name.split("-")[1]) // updates_per_step}


def _fit(spec: Any, paths: Any, config: Any, model_path: str, state: Any, *, updates_per_step: int, done: int,
         resume: bool, resume_from: Path | None, environ: dict[str, str], data_root: str | Path | None, log: Any,
         estimator: Any, keep_row_tokens: bool, position_schedule: str) -> None:
    """The training itself, once the folder is begun: core's runtime, TRL's trainer, the neutral records."""
    import trl
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback

    from twinrun.backends.trl.cpu_vllm import check_engine_loadable, prepare_cpu_engine
    from twinrun.backends.trl.environment import SessionBroker, check_tool_surface, dataset_row
    from twinrun.backends.trl.records import RunRecorder, export_checkpoint
    from twinrun.backends.trl.trainer import TwinrunGRPOTrainer
    from twinrun.core.advantages import estimator_config
    from twinrun.core.curation import CurationRuntime
    from twinrun.core.records import provenance
    from twinrun.core.records.tracking import step_reporter
    from twinrun.core.rewards.composite import token_counter
    from twinrun.models.warmstart import final_tool_result

    is_main = state.is_main_process
    with ExitStack() as closing:
        reporter = step_reporter(spec, "trl", paths.root, log=log, enabled=is_main,
                                 resume_after=done if resume else None)
        closing.callback(reporter.close)
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        tokenizer.padding_side = "left"  # TRL generates from left-padded prompts

        prov = provenance(spec_hash=spec.spec_hash(), run_id=paths.root.name, backend="trl",
                          framework_version=trl.__version__, seed=spec.seed)
        runtime = CurationRuntime.from_spec(spec, data_root=data_root, environ=environ,
                                            count_tokens=token_counter(tokenizer), provenance=prov)
        closing.callback(runtime.close)
        check_tool_surface()
        broker = SessionBroker(runtime, final_result=final_tool_result(spec.environment.group_size))
        prompt = [{"role": "system", "content": runtime.curator_system_prompt}, {"role": "user", "content": ""}]
        rows = [dataset_row(g, prompt) for step in range(spec.steps) for g in runtime.sampler.step_groups(step)]  # type: ignore[union-attr]
        dataset = Dataset.from_list(rows)

        core_estimator = estimator or estimator_config(spec.algorithm)
        recorder = RunRecorder(paths, updates_per_step=updates_per_step, provenance=prov.model_copy(
            update={"executor_settings_hash": runtime.executor.settings_hash}), is_main=is_main,
            estimator=core_estimator)
        closing.callback(recorder.close)
        step_logs: list[dict[str, Any]] = []  # TRL's own logs of the step being trained (its updates)

        class RunFolderCallback(TrainerCallback):
            """Neutral metrics (file, console, tracker) after each step's last update; HF checkpoint export after
            each TRL save."""

            def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
                if logs is None:
                    return
                row = recorder.on_log(state.global_step, logs)
                if "train_runtime" not in logs:
                    step_logs.append(logs)
                if row is not None:
                    if is_main:
                        reporter.step(row, native=step_logs)
                    step_logs.clear()

            def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                if not is_main or state.global_step % updates_per_step:
                    return
                src = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                export_checkpoint(src, paths.checkpoint(state.global_step // updates_per_step))

        common = dict(model=model_path, args=config, train_dataset=dataset, processing_class=tokenizer,
                      callbacks=[RunFolderCallback()], estimator=core_estimator,
                      updates_per_step=updates_per_step, on_batch=recorder.on_batch,
                      max_unmeasured_share=spec.executor.max_unmeasured_share,
                      max_missing_turn_share=spec.curator.max_missing_turn_share)
        cpu_engine = config.use_vllm and spec.resources.gpus_per_node == 0  # TRL's colocated vLLM on CPU
        if cpu_engine:
            prepare_cpu_engine(os.environ)
        if spec.curator.context == "per_position":
            from twinrun.backends.trl.per_position import PerPositionGRPOTrainer, composite_reward_function

            trainer = PerPositionGRPOTrainer(
                **common, reward_funcs=[composite_reward_function()], runtime=runtime,
                history=spec.curator.history, max_prompt_tokens=spec.curator.max_prompt_tokens,
                keep_row_tokens=keep_row_tokens, position_schedule=position_schedule,
            )
        else:
            trainer = TwinrunGRPOTrainer(
                **common, reward_funcs=[broker.reward_function()], environment_factory=broker.new_environment,
                broker=broker, keep_row_tokens=keep_row_tokens,
            )
        if cpu_engine:
            check_engine_loadable(trainer.vllm_generation)
        from twinrun.models.forced_turns import forced_turns, install_forced_turns

        forced = forced_turns(model_path, tokenizer)  # a test stand-in's scripted turns; None for every real model
        if forced is not None:
            install_forced_turns(trainer.model, forced)
            log(f"trl: the curator's tokens are forced by the test stand-in in {model_path}")
        if resume_from is not None and state.num_processes > 1 and spec.resources.gpus_per_node == 0:
            from twinrun.backends.trl.trainer import allow_indexed_cpu_locations

            allow_indexed_cpu_locations()
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)


def grpo_config(kwargs: dict[str, Any], paths: Any, model_path: str) -> tuple[Any, dict[str, Any]]:
    """(GRPOConfig, its resolved dict as recorded in resolved_config.json and compared on --resume)."""
    from trl import GRPOConfig

    from twinrun.backends.trl.records import TRL_DIR

    kwargs = dict(kwargs, output_dir=str(paths.root / TRL_DIR))
    kwargs.setdefault("save_total_limit", None)
    kwargs.setdefault("log_completions", False)
    config = GRPOConfig(**kwargs)
    resolved = config.to_dict()
    # the curator's identity (a local folder by its name: the warm start's name carries its content key)
    resolved["twinrun_curator_model"] = Path(model_path).name if Path(model_path).is_dir() else str(model_path)
    return config, resolved


def preflight(spec: Any, out_dir: str | Path, *, resume: bool, cache_dir: str | Path | None,
              data_root: str | Path | None = None, log: Any = print) -> None:
    """``--launch``: the checks rank 0 makes before its first write (another writer, the folder, backend, spec),
    made in the launching process before torchrun starts, so a refusal is one line and not a dump from every rank;
    the warm start is built here too, with every core (under torchrun, rank 0 would build it with
    OMP_NUM_THREADS=1 while the other ranks wait). Writes nothing into the run folder. The resolved GRPOConfig is
    compared by rank 0 (still before any write): GRPOConfig derives some values (generation_batch_size) from the
    world size, which this one process does not have."""
    from twinrun.core.records import RunPaths
    from twinrun.core.records.lifecycle import RunLifecycle
    from twinrun.models.warmstart import resolve_curator_model

    RunLifecycle(RunPaths(Path(out_dir)), _spec_yaml(spec), "trl", resume).guard()  # reads only
    resolve_curator_model(spec, cache_dir, data_root=data_root, environ=dict(os.environ), log=log)


def _spec_yaml(spec: Any) -> str:
    import yaml

    return yaml.safe_dump(json.loads(spec.canonical_json()), sort_keys=False)


def check_world(processes: int, planned: int) -> None:
    """The launch's process count is the one `twinrun plan` divided the batch by (resources)."""
    if processes != planned:
        raise TwinrunError(
            f"resources: the spec plans {planned} training process(es) but this launch has {processes} (fix: "
            f"`twinrun train ... --launch` starts the spec's {planned}, or set resources.processes={processes})"
        )


def _checkpoint_steps(paths: Any) -> list[int]:
    root = paths.checkpoints
    if not root.is_dir():
        return []
    return sorted(int(d.name.split("-")[1]) for d in root.glob("step-*") if (d / "config.json").is_file())


__all__ = ["train", "TwinrunError"]
