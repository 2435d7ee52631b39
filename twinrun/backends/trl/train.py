"""``train(spec, out_dir, resume)``: train the curator arm with TRL 1.16's GRPOTrainer (the registry's TRL target).

Flow: compile the spec (the same ``GRPOConfig`` keyword arguments ``twinrun plan`` shows) -> resolve the curator
model (``tiny-qwen3`` = the locally built, warm-started tiny model; see :mod:`twinrun.warmstart`) -> build core's
curation runtime (environment pool, executor, judge, reward) -> one dataset row per task group, in the order core's
sampler draws them -> :class:`~.trainer.TwinrunGRPOTrainer` with :class:`~.environment.CuratorEnvironment` as
``environment_factory`` and core's composite reward as the one reward function -> neutral records in ``out_dir``
(:mod:`.records`). Framework imports happen inside ``train`` so importing this module stays cheap.
"""

from __future__ import annotations

import json
import os
import time
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
) -> dict[str, Any]:
    """Train ``spec``'s curator under TRL; write the run folder ``out_dir`` (see :mod:`.records`).

    cache_dir: where ``tiny-qwen3`` and its warm start are built (required for that model).
    data_root: the ALFWorld data folder (default: ``$ALFWORLD_DATA``, read here at the backend boundary).
    estimator: an ``EstimatorConfig`` overriding ``spec.algorithm`` (tests use TRL's own preset).
    Returns a small summary (steps trained, checkpoints, wall time)."""
    import trl
    import yaml
    from accelerate import PartialState
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig

    from twinrun.backends.trl.compile import compile_spec
    from twinrun.backends.trl.environment import SessionBroker, check_tool_surface, dataset_row
    from twinrun.backends.trl.records import (
        TRL_DIR,
        RunRecorder,
        check_resolved_config,
        export_checkpoint,
        last_complete_checkpoint,
        open_run_dir,
        truncate_records,
    )
    from twinrun.backends.trl.trainer import TwinrunGRPOTrainer
    from twinrun.core.advantages import estimator_config
    from twinrun.core.curation import CurationRuntime
    from twinrun.core.records import RunPaths, provenance
    from twinrun.core.rewards import token_counter
    from twinrun.warmstart import final_tool_result, resolve_curator_model

    t_start = time.perf_counter()
    paths = RunPaths(Path(out_dir))
    compiled = compile_spec(spec)
    kwargs = dict(compiled.config)
    updates_per_step = int(compiled.counts["optimizer_updates"])
    spec_yaml = yaml.safe_dump(json.loads(spec.canonical_json()), sort_keys=False)
    open_run_dir(paths, spec_yaml=spec_yaml, resume=resume)

    resume_from: Path | None = None
    if resume:
        last = last_complete_checkpoint(paths, updates_per_step)
        done = last[0] if last else 0
        truncate_records(paths, done)
        resume_from = last[1] if last else None
        if done >= spec.steps:
            log(f"trl: {paths.root} already holds all {spec.steps} steps; nothing to do")
            return {"steps": done, "checkpoints": _checkpoint_steps(paths), "wall_s": 0.0, "resumed_from": done}
        log(f"trl: resuming {paths.root} after step {done}" if last else f"trl: no complete checkpoint in {paths.root}; starting at step 1")

    environ = dict(os.environ)
    model_path = resolve_curator_model(spec, cache_dir, data_root=data_root, environ=environ, log=log)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tokenizer.padding_side = "left"  # TRL generates from left-padded prompts

    kwargs["output_dir"] = str(paths.root / TRL_DIR)
    kwargs.setdefault("save_total_limit", None)
    kwargs.setdefault("log_completions", False)
    config = GRPOConfig(**kwargs)
    resolved = config.to_dict()
    # the curator's identity (a local folder by its name: the warm start's name carries its content key)
    resolved["twinrun_curator_model"] = Path(model_path).name if Path(model_path).is_dir() else str(model_path)
    check_resolved_config(paths, resolved, resume=resume)

    prov = provenance(spec_hash=spec.spec_hash(), run_id=paths.root.name, backend="trl",
                      framework_version=trl.__version__, seed=spec.seed)
    runtime = CurationRuntime.from_spec(spec, data_root=data_root, environ=environ,
                                        count_tokens=token_counter(tokenizer), provenance=prov)
    check_tool_surface()
    try:
        broker = SessionBroker(runtime, final_result=final_tool_result(spec.environment.group_size))
        prompt = [{"role": "system", "content": runtime.curator_system_prompt}, {"role": "user", "content": ""}]
        rows = [dataset_row(g, prompt) for step in range(spec.steps) for g in runtime.sampler.step_groups(step)]  # type: ignore[union-attr]
        dataset = Dataset.from_list(rows)

        is_main = PartialState().is_main_process
        recorder = RunRecorder(paths, updates_per_step=updates_per_step, provenance=prov.model_copy(
            update={"executor_settings_hash": runtime.executor.settings_hash}), is_main=is_main)

        class RunFolderCallback(TrainerCallback):
            """Neutral metrics after each step's last update; HF checkpoint export after each TRL save."""

            def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
                if logs is not None:
                    row = recorder.on_log(state.global_step, logs)
                    if row is not None and is_main:
                        log(f"trl: step {row.step}/{spec.steps} reward {_fmt(row.reward_mean)} "
                            f"r_task {_fmt(row.r_task_measured_mean)} tool calls {row.tool_calls} "
                            f"episodes {row.executor_episodes} ({row.wall_s.get('step', 0):.1f}s)")

            def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                if not is_main or state.global_step % updates_per_step:
                    return
                src = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                export_checkpoint(src, paths.checkpoint(state.global_step // updates_per_step))

        trainer = TwinrunGRPOTrainer(
            model=model_path,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            reward_funcs=[broker.reward_function()],
            environment_factory=broker.new_environment,
            callbacks=[RunFolderCallback()],
            broker=broker,
            estimator=estimator or estimator_config(spec.algorithm),
            updates_per_step=updates_per_step,
            on_batch=recorder.on_batch,
            max_unmeasured_share=spec.executor.max_unmeasured_share,
        )
        try:
            trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        finally:
            recorder.close()
    finally:
        runtime.close()
    wall = time.perf_counter() - t_start
    steps = _checkpoint_steps(paths)
    return {"steps": spec.steps, "checkpoints": steps, "wall_s": round(wall, 3),
            "resumed_from": None if resume_from is None else int(resume_from.name.split("-")[1]) // updates_per_step}


def _checkpoint_steps(paths: Any) -> list[int]:
    root = paths.checkpoints
    if not root.is_dir():
        return []
    return sorted(int(d.name.split("-")[1]) for d in root.glob("step-*") if (d / "config.json").is_file())


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


__all__ = ["train", "TwinrunError"]
