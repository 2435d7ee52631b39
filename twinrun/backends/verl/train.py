"""`twinrun train SPEC --backend verl`: verl 0.9.1's own PPO trainer (`verl.trainer.main_ppo`, v1 sync trainer)
on the spec's arm, writing the run directory the TRL backend writes.

What twinrun adds to verl (everything else is verl as shipped):
- the hydra overrides: `compile_spec(spec)` (what `twinrun plan` shows) + run paths + (on CPU) `cpu_overrides()`;
- the data: one parquet row per task group, in core's task-group order (``TaskGroupSampler``: the same groups,
  in the same order, as the TRL backend); verl's dataloader reads it unshuffled;
- through the `verl.plugins` entry point: core's estimators, the curator agent loop, the transformers rollout
  and the CPU platform (plugin.py); through config hooks: the agent-loop manager that tags rollouts
  (loop_manager.py) and the checkpoint callback that merges to HF (checkpoints.py).

verl runs in a child process (``python -m verl.trainer.main_ppo <overrides>``, cwd = ``<run>/verl``), so Ray, its
environment variables and any crash stay out of the caller. Run directory (`RunPaths`): ``spec.yaml``,
``resolved_config.json``, ``metrics.jsonl`` (StepMetrics), ``rollouts.jsonl``, ``episodes.jsonl``,
``checkpoints/step-NNNNNN`` (HF); verl's own files (shards, logs, data) under ``verl/``.

Resume (``resume=True``): refuses when the resolved config differs from the recorded one; otherwise verl resumes
from its latest checkpoint (``trainer.resume_mode=auto``), records written after that checkpoint are dropped
(those steps run again), and any checkpoint verl saved but did not get to merge is merged first.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from twinrun.backends.verl import compile as vcompile
from twinrun.backends.verl import config as vconfig
from twinrun.backends.verl.checkpoints import is_complete, merge_to_hf
from twinrun.backends.verl.child import POLL_S, run_child
from twinrun.backends.verl.compile import compile_spec, native_overrides
from twinrun.backends.verl.metrics import write_step_metrics
from twinrun.backends.verl.names import (
    AGENT_LOOP_CLASS,
    AGENT_LOOP_NAME,
    CHECKPOINT_CALLBACK,
    MANAGER_CLASS,
    ROW_TOKENS_KEY,
    RUN_DIR_KEY,
)
from twinrun.backends.verl.progress import VerlProgress
from twinrun.core.errors import InfrastructureError, TwinrunError
from twinrun.core.records import RunPaths, atomic_write_text, read_jsonl
from twinrun.core.sweeps.served import VLLM_CPU_ENV
from twinrun.core.records.lifecycle import RunLifecycle, run_lifecycle, truncate_records
from twinrun.core.advantages.step_health import MissingTurnsError
from twinrun.core.records.tracking import step_reporter

R = vconfig.R
CONFIG_VERSION = 1
RESOLVED_CONFIG = "resolved_config.json"  # the TRL backend's name (twinrun/backends/trl/records.py)


@dataclass(frozen=True)
class VerlRunDirs:
    """verl's own files inside a run directory."""

    root: Path

    @property
    def verl(self) -> Path:
        return self.root / "verl"

    @property
    def data(self) -> Path:
        return self.verl / "train.parquet"

    @property
    def agent_loops(self) -> Path:
        return self.verl / "agent_loops.yaml"

    @property
    def shards(self) -> Path:
        return self.verl / "ckpt"

    @property
    def logs(self) -> Path:
        return self.verl / "logs"

    def metrics_log(self, attempt: int) -> Path:
        return self.logs / f"verl-metrics.attempt-{attempt:03d}.jsonl"

    def attempt_logs(self) -> list[Path]:
        return sorted(self.logs.glob("verl-metrics.attempt-*.jsonl"))


def train(spec: Any, out_dir: str | Path, resume: bool = False, cache_dir: str | Path | None = None,
          *, log: Any = print, keep_row_tokens: bool = False, hold_lock: bool = True) -> dict[str, Any]:
    """Train the spec's curator under verl into ``out_dir`` (see the module docstring). Returns a small summary
    (steps trained, checkpoint steps, wall time, the step resumed after), as the TRL backend does.
    keep_row_tokens: rows.jsonl keeps each trained row's token ids and messages (tests; large).
    hold_lock: hold the run folder's lock (core's run lifecycle) for the whole run; False only where the caller
    holds it."""
    from twinrun.backends.registry import check_dependencies

    check_dependencies("verl")
    t0 = time.perf_counter()
    paths = RunPaths(Path(out_dir).resolve())
    dirs = VerlRunDirs(paths.root)
    spec_yaml = yaml.safe_dump(json.loads(spec.canonical_json()), sort_keys=False)  # the TRL backend's text
    # the folder, backend and spec, before the warm start is built (minutes); the resolved config below
    with run_lifecycle(paths, spec_yaml=spec_yaml, backend="verl", resume=resume, hold_lock=hold_lock, log=log,
                       compare=refuse_changed_config) as run:
        model = resolve_curator(spec, cache_dir)
        overrides = build_overrides(spec, paths, dirs, model)
        if keep_row_tokens:
            overrides[f"+trainer.{ROW_TOKENS_KEY}"] = True
        resolved = resolved_config(spec, overrides)
        run.guard(resolved)  # every guard, before the first write
        done = _latest_shard_step(dirs) if run.resuming else 0  # verl resumes after its latest checkpoint
        run.begin(resolved=resolved, keep_steps=done)  # under the lock: records past `done` dropped (run again)
        done = done if run.resuming else 0  # the guard under the lock has the last word (a restart starts at 1)
        for d in (dirs.verl, dirs.logs):
            d.mkdir(parents=True, exist_ok=True)
        if run.resuming:
            _reconcile_resume(paths, dirs)
        # the lock's descriptor is handed to verl's trainer, so the folder stays locked while any of it runs
        return _train_locked(spec, paths, dirs, overrides, done, resume=run.resuming, log=log, lock_fd=run.lock_fd,
                             t0=t0, run=run)


def _train_locked(spec: Any, paths: RunPaths, dirs: VerlRunDirs, overrides: dict[str, Any], done: int, *,
                  resume: bool, log: Any, lock_fd: int | None, t0: float, run: Any) -> dict[str, Any]:
    """The run, once every guard passed, the folder is begun and its lock is held."""
    if run.finished(done, spec.steps):
        return {"steps": done, "checkpoints": checkpoint_steps(paths), "wall_s": 0.0, "resumed_from": done}
    write_dataset(spec, dirs.data)
    write_agent_loop_config(spec, paths, dirs)

    attempt = len(dirs.attempt_logs())
    overrides["trainer.resume_mode"] = "auto" if resume else "disable"
    run_log = dirs.logs / f"verl.attempt-{attempt:03d}.log"
    compiled = compile_spec(spec)
    reporter = step_reporter(spec, "verl", paths.root, log=log, resume_after=done if resume else None)
    try:
        log(f"verl: training {spec.name} into {paths.root}" + (f" (resuming after step {done})" if resume else "")
            + f"; verl's output: {run_log}")
        progress = VerlProgress(spec, paths, dirs.metrics_log(attempt), reporter,
                                optimizer_updates=int(compiled.counts["optimizer_updates"]), keep_steps=done)
        rc = launch(overrides, cwd=dirs.verl, env=_child_env(spec, dirs.metrics_log(attempt)), log_path=run_log,
                    on_poll=progress.poll, pass_fds=() if lock_fd is None else (lock_fd,))
        progress.poll()  # the last step, if verl wrote it after the last poll
        write_step_metrics(spec, paths, dirs.attempt_logs(), compiled)
    finally:
        reporter.close()
    if rc != 0:
        _raise_failure(paths, dirs, run_log, rc)
    _merge_missing(paths, dirs)
    return {"steps": spec.steps, "checkpoints": checkpoint_steps(paths), "wall_s": round(time.perf_counter() - t0, 3),
            "resumed_from": done if resume else None}


def _raise_failure(paths: RunPaths, dirs: VerlRunDirs, run_log: Path, rc: int) -> None:
    """verl's child exited non-zero: one line saying why (core's step gate, an endpoint, or verl) and where."""
    gate = _gate_failure(run_log)
    if gate:  # core's step gates (raised in the estimator) or an endpoint aborted the step
        kind, message = gate
        error = MissingTurnsError if kind == "MissingTurnsError" else InfrastructureError
        # verl's estimator does not know the step; the step after the last one in metrics.jsonl is (as TRL says)
        trained = [int(r["step"]) for r in read_jsonl(paths.metrics)] if paths.metrics.exists() else []
        raise error(f"verl training stopped: step {max(trained, default=0) + 1}: {message} (log: {run_log}; "
                    f"--resume continues after step {_latest_shard_step(dirs)})")
    raise TwinrunError(
        f"verl training: main_ppo exited with code {rc} (fix: see {run_log}; "
        f"--resume continues after step {_latest_shard_step(dirs)})"
    )


def _gate_failure(log_path: Path) -> tuple[str, str] | None:
    """(error class, message) of the last InfrastructureError / MissingTurnsError raised inside verl's
    processes, from the tail of the run's log."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 200_000))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        for kind in ("MissingTurnsError", "InfrastructureError"):
            if f"{kind}:" in line:
                return kind, line.split(f"{kind}:", 1)[1].strip()
    return None


def checkpoint_steps(paths: RunPaths) -> list[int]:
    if not paths.checkpoints.exists():
        return []
    return sorted(int(d.name.removeprefix("step-")) for d in paths.checkpoints.glob("step-*") if is_complete(d))


# ------------------------------------------------------------------------------------------------------------
# The pieces (each small enough to test)


def resolve_curator(spec: Any, cache_dir: str | Path | None) -> str:
    """What the actor loads: for ``tiny-qwen3`` the warm-started tiny curator both backends share
    (`twinrun.models.warmstart`, cached under ``cache_dir``), else the spec's model name or path."""
    from twinrun.models.warmstart import resolve_curator_model

    return resolve_curator_model(spec, cache_dir, environ=dict(os.environ))


def build_overrides(spec: Any, paths: RunPaths, dirs: VerlRunDirs, model: str) -> dict[str, Any]:
    """compile_spec's overrides + run paths (+ CPU settings when the spec has no GPUs)."""
    compiled = compile_spec(spec).config
    if spec.resources.gpus_per_node == 0:
        if spec.resources.nodes > 1 and not spec.resources.ray_address:
            raise TwinrunError(f"resources.nodes: {spec.resources.nodes} CPU nodes need a Ray cluster (fix: "
                               "resources.ray_address, or nodes: 1 with resources.processes)")
        ov = {**compiled, **vconfig.cpu_overrides(workers=int(compiled["trainer.n_gpus_per_node"]))}
        if vcompile.cpu_vllm_rollout(spec):  # verl's own vLLM rollout, asked for by the spec
            vcompile.check_cpu_vllm_model(model)
            ov.update(vconfig.cpu_vllm_overrides(spec))
    else:
        ov = {**compiled, **vconfig.gpu_overrides(spec)}
    ov.update({
        "actor_rollout_ref.model.path": model,
        "data.train_files": str(dirs.data),
        "data.val_files": str(dirs.data),  # unused: validation is off (sweeps evaluate checkpoints)
        "data.filter_overlong_prompts": False,
        "trainer.total_epochs": 1,  # the dataset holds exactly steps x groups_per_step rows
        "trainer.project_name": "twinrun",
        "trainer.experiment_name": spec.name,
        "trainer.logger": ["console", "file"],
        "trainer.default_local_dir": str(dirs.shards),
        "trainer.checkpoint_callback_class": CHECKPOINT_CALLBACK,
        f"+trainer.{RUN_DIR_KEY}": str(paths.root),
        f"{R}.agent.agent_loop_config_path": str(dirs.agent_loops),
        f"+{R}.agent.agent_loop_manager_class": MANAGER_CLASS,
        f"{R}.agent.default_agent_loop": AGENT_LOOP_NAME,
        "+ray_kwargs.ray_init.include_dashboard": False,
    })
    if spec.resources.ray_address:
        ov["+ray_kwargs.ray_init.address"] = spec.resources.ray_address
    ov.update(native_overrides(spec))  # the spec's escape hatch wins (plan shows it in compile's output)
    return ov


# overrides that name places inside the run directory, not behaviour: not compared on --resume (a moved run resumes)
PATH_KEYS = ("data.train_files", "data.val_files", "trainer.default_local_dir", f"+trainer.{RUN_DIR_KEY}",
             f"{R}.agent.agent_loop_config_path", "trainer.resume_mode", f"+trainer.{ROW_TOKENS_KEY}")


def resolved_config(spec: Any, overrides: dict[str, Any]) -> dict[str, Any]:
    """What a resume must match: the spec hash and every override that decides behaviour (PATH_KEYS excepted;
    the curator's model path is compared: a different warm start is a different run)."""
    return {
        "config_version": CONFIG_VERSION,
        "backend": "verl",
        "framework": compile_spec(spec).framework,
        "spec_hash": spec.spec_hash(),
        "overrides": {k: v for k, v in sorted(overrides.items()) if k not in PATH_KEYS},
    }


def _prepare_run_dir(paths: RunPaths, dirs: VerlRunDirs, spec_yaml: str, resolved: dict[str, Any],
                     resume: bool, *, create: bool = True) -> str:
    """Core's run-folder guard with verl's resolved config (reads only: another backend's run, a different spec or
    resolved config are refused before anything in the folder changes); then create verl's folders."""
    state = RunLifecycle(paths, spec_yaml, "verl", resume, hold_lock=False, compare=refuse_changed_config).guard(resolved)
    if create:
        for d in (paths.root, dirs.verl, dirs.logs):
            d.mkdir(parents=True, exist_ok=True)
    return state


def refuse_changed_config(old: dict[str, Any], new: dict[str, Any]) -> None:
    """On resume (core's run lifecycle calls it), refuse a resolved config that differs from the recorded one."""
    if old != new:
        raise TwinrunError(
            f"--resume: resolved verl config changed ({_first_difference(old, new)}; fix: resume with the "
            "same spec, twinrun and verl versions, or start a new --out)"
        )


def _first_difference(old: Any, new: Any, prefix: str = "") -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            if old.get(k) != new.get(k):
                return _first_difference(old.get(k), new.get(k), f"{prefix}{k}.")
    return f"{prefix.rstrip('.')}: {old!r} -> {new!r}"


def task_group_rows(spec: Any) -> list[dict[str, Any]]:
    """The training data: core's task groups for every step, in order, as verl dataset rows."""
    from twinrun.core.curation import TaskGroupSampler
    from twinrun.core.envs import make_catalog

    env = spec.environment
    root = None
    if env.name == "alfworld":
        from twinrun.core.envs.alfworld import resolve_alfworld_data

        root = resolve_alfworld_data(None, dict(os.environ))
    catalog = make_catalog(env.name, env.split, data_root=root, task_types=env.task_types)
    sampler = TaskGroupSampler(catalog, env.group_size, groups_per_step=spec.batch.groups_per_step,
                               task_types=env.task_types, seed=spec.seed)
    rows = []
    for step in range(spec.steps):
        for group in sampler.step_groups(step):
            k = len(rows)
            rows.append({
                # verl needs a chat prompt per row; the curator's real first input is built by the agent loop
                "prompt": [{"role": "user", "content": f"task group {group.group_id}"}],
                "data_source": f"twinrun/{env.name}",
                "agent_name": AGENT_LOOP_NAME,
                "twinrun_group": json.dumps(group.to_row(), sort_keys=True),
                "extra_info": {"index": k, "group_id": group.group_id},
            })
    return rows


def write_dataset(spec: Any, path: Path) -> None:
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pd.DataFrame(task_group_rows(spec)).to_parquet(tmp, index=False)
    os.replace(tmp, path)


def write_agent_loop_config(spec: Any, paths: RunPaths, dirs: VerlRunDirs) -> None:
    """verl's agent_loop_config_path: the curator loop with the run it belongs to (hydra kwargs)."""
    entry = {
        "name": AGENT_LOOP_NAME,
        "_target_": AGENT_LOOP_CLASS,
        "spec_path": str(paths.spec),
        "spec_dir": str(spec.source_dir.resolve()),
        "run_dir": str(paths.root),
    }
    atomic_write_text(dirs.agent_loops, yaml.safe_dump([entry], sort_keys=False))


def _child_env(spec: Any, metrics_log: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "VERL_FILE_LOGGER_PATH": str(metrics_log),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "RAY_AUTH_MODE": env.get("RAY_AUTH_MODE", "disabled"),
        "RAY_DEDUP_LOGS": "0",
        "PYTHONUNBUFFERED": "1",
    })
    if vcompile.cpu_vllm_rollout(spec):
        env.update({k: env.get(k, v) for k, v in VLLM_CPU_ENV.items()})
    if spec.resources.gpus_per_node == 0:
        env.update({"VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cuda", "OMP_NUM_THREADS": "1",
                    "MKL_NUM_THREADS": "1"})
    return env


def launch(overrides: dict[str, Any], *, cwd: Path, env: dict[str, str], log_path: Path,
           on_poll: Callable[[], Any] | None = None, poll_s: float = POLL_S, pass_fds: tuple[int, ...] = ()) -> int:
    """Run verl's trainer entry point in a child process; stdout+stderr go to log_path. `on_poll` is called
    every `poll_s` seconds while the child runs (live progress). Returns the exit code; an interrupt (or any
    error here) kills the child."""
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *vconfig.override_strings(overrides),
           "hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]
    return run_child(cmd, cwd=cwd, env=env, log_path=log_path, on_poll=on_poll, poll_s=poll_s, pass_fds=pass_fds)


# ------------------------------------------------------------------------------------------------------------
# Resume


def _latest_shard_step(dirs: VerlRunDirs) -> int:
    tracker = dirs.shards / "latest_checkpointed_iteration.txt"
    try:
        return int(tracker.read_text().strip())
    except (OSError, ValueError):
        return 0


def _reconcile_resume(paths: RunPaths, dirs: VerlRunDirs) -> None:
    """After core dropped the records of steps past verl's latest checkpoint (they run again): remove
    half-written merges and merge checkpoints verl saved but did not get to merge."""
    if paths.checkpoints.exists():
        for tmp in paths.checkpoints.glob(".step-*"):
            shutil.rmtree(tmp, ignore_errors=True)
    _merge_missing(paths, dirs)


def _truncate_records(paths: RunPaths, keep_steps_below: int) -> None:
    """Core's truncation with verl's resume point: ``keep_steps_below`` = the latest checkpoint's step k (verl's
    global step k trains task-group step k-1, so rollouts of steps < k are kept)."""
    truncate_records(paths, keep_steps_below)


def _merge_missing(paths: RunPaths, dirs: VerlRunDirs) -> None:
    if not dirs.shards.exists():
        return
    for d in sorted(dirs.shards.glob("global_step_*")):
        try:
            step = int(d.name.removeprefix("global_step_"))
        except ValueError:
            continue
        target = paths.checkpoint(step)
        if (d / "actor").is_dir() and not is_complete(target):
            merge_to_hf(d / "actor", target, global_step=step)


if __name__ == "__main__":  # pragma: no cover - debugging aid: python -m twinrun.backends.verl.train SPEC OUT
    from twinrun.core.spec import load_spec

    train(load_spec(sys.argv[1]), sys.argv[2], resume="--resume" in sys.argv, cache_dir=os.environ.get("TWINRUN_CACHE"))
