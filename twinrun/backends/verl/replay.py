"""Replay recorded rollouts through verl 0.9.1's real actor update (`twinrun parity`'s verl half).

What runs is verl's own worker: ``ActorRolloutRefWorker`` (``verl.workers.engine_workers``) with role ``actor``
(and a second one with role ``ref`` when the spec has a KL loss), built by its own ``init_model`` from the same
composed and validated ``ppo_trainer`` config `train.py` launches (`compile.py`'s overrides + the CPU settings),
in a child process holding a one-process gloo world (RANK 0 of 1), as a Ray worker would. Per recorded training
step the child makes the calls verl's v1 trainer makes in ``_step_once`` (``verl/trainer/ppo/v1/trainer_base.py``):

1. ``compute_log_prob`` (old log-probs, with the trainer's extra_info) -> ``old_log_probs`` via
   ``response_from_nested``;
2. ``compute_ref_log_prob`` on the ref worker when ``use_kl_loss`` -> ``ref_log_prob``;
3. the advantages: core's, one per rollout on its response tokens (what the ``twinrun_*`` estimators return);
4. ``update_actor`` with the trainer's ``_update_actor`` extra_info (mini-batch size x rollout.n, ppo_epochs,
   data_loader_seed, shuffle, temperature): verl's ``train_mini_batch`` -> ``ppo_loss`` -> ``agg_loss`` ->
   FSDP2 backward, grad clip, AdamW, LR scheduler.

Why not ``main_ppo`` under Ray with an agent loop that returns the recorded rollouts: the update is the same
worker code either way (the trainer's role is to call these four methods), while ``main_ppo`` adds a Ray cluster,
a rollout server and a TransferQueue per run (~60 s each on 2 cores), which would put a knob table of a dozen runs
out of the test budget. The rows are laid out as verl's agent-loop worker stores them
(``AgentLoopWorkerTQ._agent_loop_postprocess``: prompts, responses, response_mask = loss_mask, input_ids,
position_ids), group-contiguous in rollout order: with one data-parallel rank verl's ``_balance_batch`` keeps that
order (its one partition is sorted). per_position: one row per (rollout, position), each rollout's positions in
order (what ``position_loop.run_per_position`` returns), the mini-batch counted in rows as ``rows_trainer`` does.

The only code of twinrun's in the child besides data feeding is observation: a wrapper around verl's policy-loss
function (it records the per-token log-ratios verl saw, then calls verl's function unchanged) and a torch
optimizer step pre-hook that saves the gradient each update applies (after verl's clipping).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from twinrun.core.errors import TwinrunError
from twinrun.core.records import atomic_write_text
from twinrun.core.advantages.replay import ReplayRow, ReplayStep

PROGRESS = "twinrun-replay: "  # child stdout lines with this prefix are progress for the console
A = "actor_rollout_ref.actor"


def replay_overrides(spec: Any, model_path: str | Path) -> dict[str, Any]:
    """The hydra overrides of the replay: compile.py's (what `twinrun plan` shows) + the CPU settings, fp32."""
    from twinrun.backends.verl import config as vconfig
    from twinrun.backends.verl.compile import compile_spec

    ov = dict(compile_spec(spec).config)
    ov.update(vconfig.cpu_overrides())
    ov.update({
        "actor_rollout_ref.model.path": str(model_path),
        f"{A}.fsdp_config.model_dtype": "fp32",
        f"+{A}.fsdp_config.mixed_precision": {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
        "actor_rollout_ref.ref.fsdp_config.model_dtype": "fp32",
        "data.train_files": "unused.parquet",
        "data.val_files": "unused.parquet",
        "trainer.logger": ["console"],
    })
    return ov


def replay(
    spec: Any,
    steps: Sequence[ReplayStep],
    model_path: str | Path,
    out_dir: str | Path,
    *,
    save_after: Sequence[int],
    log: Callable[[str], None] = print,
    timeout_s: float = 900,
) -> dict[str, Any]:
    """Train ``model_path`` on the recorded ``steps`` with verl's actor update in a child process; weights after
    each training step in ``save_after`` land in ``out_dir/weights-step-K.safetensors``. The child's progress
    lines go to ``log``; its whole output to ``out_dir/verl-replay.log``. Returns the per-update observations."""
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    from twinrun.backends.verl.compile import rows_per_rollout

    job = {
        "overrides": replay_overrides(spec, model_path),
        "rows_per_rollout": rows_per_rollout(spec),
        "steps": [[_row_json(r) for r in s.rows] for s in steps],
        "save_after": [int(k) for k in save_after],
        "out_dir": str(out),
    }
    job_path, result_path, log_path = out / "verl-job.json", out / "verl-result.json", out / "verl-replay.log"
    atomic_write_text(job_path, json.dumps(job))
    result_path.unlink(missing_ok=True)
    t0 = time.perf_counter()
    rc = _run_child(job_path, log_path, log, timeout_s)
    if rc != 0 or not result_path.is_file():
        tail = _tail(log_path)
        raise TwinrunError(f"verl replay: the child exited with code {rc} (see {log_path}; last line: {tail})")
    result = json.loads(result_path.read_text(encoding="utf-8"))
    result["wall_s"] = round(time.perf_counter() - t0, 3)
    return result


def _row_json(r: ReplayRow) -> dict[str, Any]:
    return {"group_id": r.group_id, "prompt_ids": list(r.prompt_ids), "completion_ids": list(r.completion_ids),
            "completion_mask": list(r.completion_mask), "reward": r.reward, "advantage": r.advantage}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cuda", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
        "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1",
        "RAY_AUTH_MODE": env.get("RAY_AUTH_MODE", "disabled"),
    })
    return env


def _run_child(job: Path, log_path: Path, log: Callable[[str], None], timeout_s: float) -> int:
    cmd = [sys.executable, "-m", "twinrun.backends.verl.replay", str(job)]
    deadline = time.monotonic() + timeout_s
    with open(log_path, "w", encoding="utf-8") as logf:
        proc = subprocess.Popen(cmd, env=_child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                bufsize=1)
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                logf.write(line)
                if line.startswith(PROGRESS):
                    log("  verl: " + line[len(PROGRESS):].rstrip())
                if time.monotonic() > deadline:
                    raise TimeoutError
            return proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except (TimeoutError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
            raise TwinrunError(f"verl replay: no result after {timeout_s:.0f} s (see {log_path}; fix: a larger "
                               "timeout or fewer steps)") from None


def _tail(path: Path) -> str:
    try:
        lines = [x for x in path.read_text(encoding="utf-8", errors="replace").splitlines() if x.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:300] if lines else "(empty log)"


# ------------------------------------------------------------------------------------------------------------
# The child (python -m twinrun.backends.verl.replay JOB)


def _say(msg: str) -> None:
    print(PROGRESS + msg, flush=True)


def _batch(rows: list[dict[str, Any]], temperature: float) -> Any:
    """The step's rows as verl's TransferQueue would materialize them for the worker (the fields
    ``AgentLoopWorkerTQ._agent_loop_postprocess`` stores, as nested tensors)."""
    import torch
    from verl.utils import tensordict_utils as tu
    from verl.utils.model import compute_position_id_with_mask

    fields = []
    for r in rows:
        prompts = torch.tensor(r["prompt_ids"], dtype=torch.int64)
        responses = torch.tensor(r["completion_ids"], dtype=torch.int64)
        mask = torch.tensor(r["completion_mask"], dtype=torch.int64)
        input_ids = torch.cat([prompts, responses])
        attention_mask = torch.ones_like(input_ids)
        fields.append({
            "prompts": prompts, "responses": responses, "response_mask": mask, "loss_mask": mask,
            "input_ids": input_ids, "attention_mask": attention_mask,
            "position_ids": compute_position_id_with_mask(attention_mask.unsqueeze(0)).squeeze(0),
        })
    td = tu.list_of_dict_to_tensordict(fields)
    tu.assign_non_tensor(td, temperature=temperature)
    return td


def _observe_policy_loss(seen: list[Any]) -> None:
    """Record the log-ratios verl's policy loss sees, then call verl's function unchanged."""
    import verl.workers.utils.losses as losses

    original = losses.get_policy_loss_fn

    def get_policy_loss_fn(name: str) -> Any:
        fn = original(name)

        def observed(old_log_prob: Any, log_prob: Any, advantages: Any, response_mask: Any, *a: Any, **kw: Any) -> Any:
            from twinrun.core.advantages.replay import ratio_stats

            seen.append(ratio_stats((log_prob - old_log_prob).detach()[response_mask.bool()].cpu().numpy()))
            return fn(old_log_prob, log_prob, advantages, response_mask, *a, **kw)

        return observed

    losses.get_policy_loss_fn = get_policy_loss_fn


def _metric(values: Any) -> list[float]:
    if values is None:
        return []
    if not isinstance(values, (list, tuple)):
        values = [values]
    return [float(v.value if hasattr(v, "value") else v) for v in values]


def _worker(job_path: str) -> None:
    import torch
    from safetensors.torch import save_file
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    import verl  # noqa: F401  (the verl.plugins entry point registers the CPU platform and fixes)
    from twinrun.backends.verl import config as vconfig
    from twinrun.backends.verl.plugin import register_all

    register_all()
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine_workers import ActorRolloutRefWorker
    from verl.workers.utils.padding import response_from_nested, response_to_nested

    from twinrun.core.advantages.replay import merge_ratio_stats

    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    out = Path(job["out_dir"])
    cfg = vconfig.compose(job["overrides"])
    vconfig.validate(cfg)
    arr = cfg.actor_rollout_ref
    seen: list[Any] = []
    _observe_policy_loss(seen)

    _say("building the actor (verl ActorRolloutRefWorker, role actor)")
    actor = ActorRolloutRefWorker(config=arr, role="actor")
    actor.init_model()
    ref = None
    if arr.actor.use_kl_loss:
        _say("building the reference policy (role ref)")
        ref = ActorRolloutRefWorker(config=arr, role="ref")
        ref.init_model()

    grad_files: dict[str, str] = {}

    def save_grads(optimizer: Any, args: Any, kwargs: Any) -> None:
        """Before each optimizer update: the (clipped) gradient it applies, full tensors under HF names."""
        u = len(grad_files) + 1
        path = out / f"grads-update-{u}.safetensors"
        saved = {}
        for name, p in actor.actor.engine.module.named_parameters():
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            g = g.full_tensor() if hasattr(g, "full_tensor") else g
            saved[name] = g.detach().to("cpu").contiguous().clone()
        save_file(saved, str(path))
        grad_files[str(u)] = str(path)

    register_optimizer_step_pre_hook(save_grads)
    temperature = float(arr.rollout.temperature)
    n = int(arr.rollout.n)
    updates_out: list[dict[str, Any]] = []
    weights: dict[str, str] = {}
    n_steps = len(job["steps"])
    for k, rows in enumerate(job["steps"], start=1):
        td = _batch(rows, temperature)
        # 1. old log-probs (trainer_base._compute_old_log_prob)
        tu.assign_non_tensor(td, calculate_entropy=True, compute_loss=False)
        lp = actor.compute_log_prob(td)
        td["old_log_probs"] = response_from_nested(lp["log_probs"], td["response_mask"])
        # 2. reference log-probs (trainer_base._compute_ref_log_prob)
        if ref is not None:
            tu.assign_non_tensor(td, calculate_entropy=False, compute_loss=False)
            rlp = ref.compute_ref_log_prob(td)
            td["ref_log_prob"] = response_from_nested(rlp["log_probs"], td["response_mask"])
        # 3. core's advantage on every response token (what the twinrun_* estimators return; per_position GiGPO:
        #    the row's position advantage)
        mask = td["response_mask"].to_padded_tensor(0).float()
        adv = torch.tensor([r["advantage"] for r in rows], dtype=torch.float32).unsqueeze(-1) * mask
        td["advantages"] = response_to_nested(adv, td["response_mask"])
        # 4. the update (trainer_base._update_actor's extra_info; per_position: rows_trainer.RowsTrainer counts
        #    the mini-batch in rows, ppo_mini_batch_size x rollout.n x |G|)
        mini = int(arr.actor.ppo_mini_batch_size) * n * int(job.get("rows_per_rollout", 1))
        tu.assign_non_tensor(
            td, calculate_entropy=bool(arr.actor.get("calculate_entropy", False) or arr.actor.entropy_coeff != 0.0),
            distillation_use_topk=False, distillation_only=False, global_batch_size=mini, mini_batch_size=mini,
            epochs=int(arr.actor.ppo_epochs), seed=int(arr.actor.data_loader_seed),
            dataloader_kwargs={"shuffle": bool(arr.actor.shuffle)}, temperature=temperature,
        )
        seen.clear()
        result = actor.update_actor(td)
        metrics = tu.get(result, "metrics")
        losses = _metric(metrics.get("loss"))
        grads = _metric(metrics.get("grad_norm"))
        clips = _metric(metrics.get("pg_clipfrac", metrics.get("actor/pg_clipfrac")))
        per_update = max(len(losses), 1)
        micro = len(seen) // per_update if seen else 0
        for u in range(per_update):
            g = (k - 1) * per_update + u + 1
            updates_out.append({
                "step": k, "update": g, "loss": losses[u] if u < len(losses) else None,
                "ratio": merge_ratio_stats(seen[u * micro:(u + 1) * micro]) if micro else merge_ratio_stats([]),
                "clip_fraction": _mean(clips[u * len(clips) // per_update:(u + 1) * len(clips) // per_update])
                if clips else None,
                "grad_norm": grads[u] if u < len(grads) else None,
                "kl": None,
            })
            v = updates_out[-1]
            _say(f"update {g}/{n_steps * per_update} loss {v['loss']:+.6g} grad_norm {v['grad_norm']:.4g}")
        if k in job["save_after"]:
            gen, _ = actor.actor.engine.get_per_tensor_param()
            path = out / f"weights-step-{k}.safetensors"
            save_file({name: t.detach().to("cpu").contiguous().clone() for name, t in gen}, str(path))
            weights[str(k)] = str(path)
    from twinrun.backends.verl.compile import VERL_VERSION

    result_json = {"backend": "verl", "framework": f"verl=={VERL_VERSION}", "updates": updates_out,
                   "weights": weights, "grads": grad_files, "config": {k: v for k, v in job["overrides"].items()}}
    atomic_write_text(out / "verl-result.json", json.dumps(result_json))
    _say("done")


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


if __name__ == "__main__":  # the child process
    _worker(sys.argv[1])
