"""Trajectory SFT under verl 0.9.1 (`verl.trainer.sft_trainer`) from the shared plan.

verl's engine-based SFT trainer runs unchanged; twinrun supplies
- the data: :class:`PretokenizedSFTDataset` (``data.custom_cls``) serves the tokens and loss masks core built, so
  verl trains on exactly the sequences TRL trains on (verl's own ``MultiTurnSFTDataset`` would re-tokenize per
  message and train every assistant turn, including AgentGym's canned acknowledgement);
- the knobs: hydra overrides from :func:`twinrun.backends.sft_plan.verl_sft_overrides` (nothing left to verl's defaults
  that the plan shows as equal);
- on CPU, verl's platform is engineer F's out-of-tree ``cpu`` platform (``twinrun.backends.verl.cpu_platform``,
  registered by the ``verl.plugins`` entry point; ``VERL_PLATFORM=cpu``). The trainer's own process-group init
  builds the invalid backend string ``"cpu:gloo,cpu:gloo"``, so the worker opens the group itself with
  ``"cpu:gloo"`` (the de-duplicated string, via the platform module's helper) and then runs the trainer.

The trainer runs in a child process (``python -m twinrun.backends.verl.sft CONFIG``) with a one-process
``torch.distributed`` world, as torchrun would start it. Afterwards the parent turns verl's file log and the
dataset's fetch log into the neutral metrics.jsonl and copies each ``global_step_N/huggingface`` to
``checkpoints/step-NNNNNN``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from twinrun.core.errors import TwinrunError
from twinrun.core.records import JsonlWriter, atomic_write_json, provenance, read_jsonl
from twinrun.core.sft.data import SFTStepMetrics
from twinrun.backends.sft_plan import PreparedSFT, export_hf_checkpoint, prepare_sft, scheduled_lr, sft_run_dir

VERL_CONFIG_NAME = "sft_trainer_engine"


class PretokenizedSFTDataset:
    """verl ``data.custom_cls``: rows of ``{id, input_ids, loss_mask}`` (JSON lines) as verl's no-padding
    tensors. Each fetch is appended to ``data.twinrun_fetch_log`` so the realised order is on record."""

    def __init__(self, parquet_files: Any, tokenizer: Any, config: Any, processor: Any = None, max_samples: int = -1):
        files = parquet_files if isinstance(parquet_files, (list, tuple)) else [parquet_files]
        if not isinstance(parquet_files, (str, list, tuple)):
            files = list(parquet_files)
        self.rows = [r for f in files for r in read_jsonl(f, strict=True)]
        if max_samples and max_samples > 0:
            self.rows = self.rows[:max_samples]
        self.fetch_log = config.get("twinrun_fetch_log", None)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        row = self.rows[i]
        if self.fetch_log:
            with open(self.fetch_log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"index": int(i), "id": row["id"]}) + "\n")
        ids = torch.tensor(row["input_ids"], dtype=torch.long)
        return {
            "input_ids": ids,
            "position_ids": torch.arange(ids.shape[0], dtype=torch.long),
            "loss_mask": torch.tensor(row["loss_mask"], dtype=torch.long),
        }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _overrides(native: dict[str, Any], extra: dict[str, Any]) -> list[str]:
    out = []
    for k, v in {**native, **extra}.items():
        if isinstance(v, dict):  # hydra's dict syntax: unquoted keys
            val = "{" + ",".join(f"{a}:{json.dumps(b)}" for a, b in v.items()) + "}"
        elif isinstance(v, list):
            val = json.dumps(v)
        elif v is None:
            val = "null"
        elif isinstance(v, bool):
            val = "true" if v else "false"
        else:
            val = str(v)
        out.append(f"{k}={val}")
    return out


def train_sft(spec: Any, out: str | Path, *, resume: bool = False, cache_dir: str | Path | None = None,
              prepared: PreparedSFT | None = None, timeout_s: float | None = None,
              optimizer_from: str | Path | None = None) -> dict[str, Any]:
    """Fine-tune under verl; same outputs as the TRL backend (metrics.jsonl, checkpoints/step-NNNNNN,
    ``optimizer_state``: the last ``global_step_N`` folder). ``optimizer_from``: a previous run's
    ``optimizer_state`` whose AdamW moments and step counts this run continues (ROSE)."""
    out = Path(out).absolute()  # verl's child runs in another folder: every path it is handed must be absolute
    prepared = prepared or prepare_sft(spec, cache_dir=cache_dir)
    with sft_run_dir(out, prepared, "verl", resume=resume) as paths:  # core's run lifecycle, locked until done
        return _train_sft(spec, out, paths, prepared, timeout_s=timeout_s, optimizer_from=optimizer_from)


def _train_sft(spec: Any, out: Path, paths: Any, prepared: PreparedSFT, *, timeout_s: float | None,
               optimizer_from: str | Path | None) -> dict[str, Any]:
    work = out / "verl"
    work.mkdir(parents=True, exist_ok=True)
    plan = prepared.plan

    data_file = work / "train.jsonl"
    if not data_file.exists():
        with JsonlWriter(data_file, fsync=False) as w:
            for e in prepared.dataset.examples:
                w.write({"id": e.id, "input_ids": e.input_ids, "loss_mask": e.loss_mask})
    # one (verl log, fetch log) pair per attempt: verl's file logger truncates its file, and a resumed attempt
    # fetches from where the dataloader state left off
    attempt = len(list(work.glob("verl_log-*.jsonl")))
    fetch_log = work / f"fetch-{attempt}.jsonl"
    verl_log = work / f"verl_log-{attempt}.jsonl"
    on_cpu = spec.resources.gpus_per_node == 0
    extra = {
        "model.path": prepared.model_path,
        "data.train_files": str(data_file),
        "data.custom_cls.path": "pkg://twinrun.backends.verl.sft",
        "data.custom_cls.name": "PretokenizedSFTDataset",
        "+data.twinrun_fetch_log": str(fetch_log),
        "trainer.default_local_dir": str(work / "checkpoints"),
        "trainer.project_name": "twinrun-sft",
        "trainer.experiment_name": spec.name,
        "trainer.logger": ["console", "file"],
        "trainer.device": "cpu" if on_cpu else "cuda",
        "trainer.n_gpus_per_node": 1,
        "trainer.nnodes": 1,
        "engine.strategy": "fsdp2",
        "+model.override_config.attn_implementation": "sdpa",
    }
    overrides = _overrides(plan.native["verl"], extra)
    job = work / "job.json"
    atomic_write_json(job, {"overrides": overrides,
                            "optimizer_from": str(optimizer_from) if optimizer_from is not None else None})

    env = dict(os.environ)
    env.update({
        "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
        "VERL_FILE_LOGGER_PATH": str(verl_log),
        "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled",
    })
    if on_cpu:
        env.update({"VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cuda", "CUDA_VISIBLE_DEVICES": ""})
    out_log, err_log = work / f"stdout-{attempt}.log", work / f"stderr-{attempt}.log"
    with open(out_log, "w", encoding="utf-8") as fo, open(err_log, "w", encoding="utf-8") as fe:
        try:
            proc = subprocess.run([sys.executable, "-m", "twinrun.backends.verl.sft", str(job)], env=env, cwd=work,
                                  stdout=fo, stderr=fe, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise TwinrunError(f"verl sft: no result within {timeout_s} s (fix: a longer timeout; see {err_log})")
    # steps verl completed are recorded even when the attempt failed later (--resume continues from them)
    for a in range(attempt + 1):
        _write_metrics(spec, prepared, paths, work / f"verl_log-{a}.jsonl", work / f"fetch-{a}.jsonl")
    if proc.returncode != 0:
        text = err_log.read_text(encoding="utf-8") or out_log.read_text(encoding="utf-8")
        tail = text.strip().splitlines()[-1:] or ["no output"]
        raise TwinrunError(f"verl sft: the trainer exited {proc.returncode}: {tail[0][:300]} (see {err_log})")
    for ck in sorted((work / "checkpoints").glob("global_step_*"), key=lambda p: int(p.name.rsplit("_", 1)[1])):
        step = int(ck.name.rsplit("_", 1)[1])
        if not paths.checkpoint(step).exists():
            export_hf_checkpoint(ck / "huggingface", paths.checkpoint(step), prepared.tokenizer)
    import verl

    steps = sorted((work / "checkpoints").glob("global_step_*"), key=lambda p: int(p.name.rsplit("_", 1)[1]))
    return {
        "optimizer_state": str(steps[-1]) if steps else None,
        "backend": "verl",
        "framework_version": verl.__version__,
        "steps": plan.schedule.total_steps,
        "checkpoints": sorted(str(p) for p in paths.checkpoints.glob("step-*")),
        "metrics": str(paths.metrics),
    }


def _write_metrics(spec: Any, prepared: PreparedSFT, paths: Any, verl_log: Path, fetch_log: Path) -> None:
    """verl's per-step log + the fetch order -> neutral SFTStepMetrics rows (steps already recorded are kept)."""
    import verl

    sched = prepared.plan.schedule
    by_id = {e.id: e for e in prepared.dataset.examples}
    fetched = [r["id"] for r in read_jsonl(fetch_log)]
    logged = {int(r["step"]): r["data"] for r in read_jsonl(verl_log)}
    have = {int(r["step"]) for r in read_jsonl(paths.metrics)}
    prov = provenance(spec_hash=spec.spec_hash(), backend="verl", framework_version=verl.__version__, seed=spec.seed)
    first_logged = min(logged) if logged else 1
    with JsonlWriter(paths.metrics) as w:
        for step in sorted(logged):
            if step in have:
                continue
            data = logged[step]
            k = step - first_logged
            ids = fetched[k * sched.batch_size:(k + 1) * sched.batch_size]
            exs = [by_id[i] for i in ids if i in by_id]
            # verl logs the rate *after* the step's scheduler update; the neutral record holds the rate the step
            # used, which is the previous step's logged value (step 1: the schedule's initial value)
            prev = logged.get(step - 1, {}).get("train/lr")
            lr = prev if prev is not None else scheduled_lr(spec, sched, step)
            w.write(SFTStepMetrics(
                step=step, epoch=(step - 1) // sched.steps_per_epoch, backend="verl",
                loss=_f(data.get("train/loss")), lr=_f(lr), grad_norm=_f(data.get("train/grad_norm")),
                sequences=len(ids), tokens=int(data["train/global_tokens"]) if "train/global_tokens" in data else None,
                trained_tokens=sum(e.trained_tokens for e in exs) if len(exs) == len(ids) else None,
                example_ids=ids, provenance=prov,
            ))


def _f(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, list):
        v = v[0] if v else None
    return None if v is None else float(v)


# ------------------------------------------------------------------------------------------------------------
# The child process


def _worker(job_path: str) -> None:
    import torch
    import torch.distributed as dist
    from hydra import compose, initialize_config_dir

    import verl  # noqa: F401  (imports the verl.plugins entry point: the cpu platform and its fixes)
    from twinrun.backends.verl import cpu_platform

    cpu_platform.register_platform()
    if cpu_platform.cpu_requested():
        cpu_platform.apply_cpu_fixes()
    from verl.models.transformers import monkey_patch
    from verl.trainer import sft_trainer
    from verl.utils.device import get_device_name, get_nccl_backend

    # verl 0.9.1 patches trl's AutoModelForCausalLMWithValueHead whenever trl is importable; trl 1.16 (installed
    # alongside for the TRL backend) no longer has that class -> ImportError. The patch concerns critic models
    # only, never an SFT policy, so it is skipped here.
    monkey_patch.is_trl_available = lambda: False

    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    config_dir = str(Path(sft_trainer.__file__).parent / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name=VERL_CONFIG_NAME, overrides=job["overrides"])

    # run_sft's process-group init, with a backend string torch accepts on CPU
    backend = cpu_platform._dedupe_backend(f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}")
    dist.init_process_group(backend=backend, rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    if get_device_name() == "cuda" and torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    try:
        trainer = sft_trainer.SFTTrainer(config=config)
        if job.get("optimizer_from") and trainer.resume_global_step == 0:
            _carry_optimizer(trainer.engine, job["optimizer_from"])
        trainer.fit()
    finally:
        dist.destroy_process_group()


def _carry_optimizer(engine: Any, previous_dir: str) -> None:
    """Continue the previous run's AdamW state (moments, step counts) under this run's hyperparameters; the file
    is the one verl's FSDP checkpoint manager writes for this rank (``optim_world_size_W_rank_R.pt``)."""
    import torch

    from twinrun.backends.sft_plan import carry_optimizer_state

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    path = Path(previous_dir) / f"optim_world_size_{world}_rank_{rank}.pt"
    if not path.is_file():
        raise TwinrunError(f"optimizer_from: {path} is missing (fix: the previous round's verl checkpoint folder)")
    previous = torch.load(path, map_location="cpu", weights_only=False)
    opt = engine.optimizer
    opt.load_state_dict(carry_optimizer_state(opt.state_dict(), previous, where=f"optimizer_from {previous_dir}"))


if __name__ == "__main__":
    _worker(sys.argv[1])
