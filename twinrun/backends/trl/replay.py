"""Replay recorded rollouts through TRL 1.16's real GRPO update (`twinrun parity`'s TRL half).

TRL's own hook for bringing your own rollouts is ``GRPOTrainer(rollout_func=...)``: it receives the prompts of a
generation batch and returns their prompt ids, completion ids and (optionally) an ``env_mask`` (1 = model token,
0 = environment token), which TRL applies as its tool mask. :func:`replay` hands it the recorded tokens of each
training step (core's :mod:`twinrun.core.advantages.replay`; per_position: one row per (rollout, position) in TRL's slot
layout, ``num_generations = N x |G|`` as in training), a reward function hands back the recorded rewards, and core's
advantages replace TRL's (the production backend does the same, `trainer.TwinrunGRPOTrainer` and
`per_position.PerPositionGRPOTrainer`; under GiGPO TRL's own group statistics would differ). Everything after
that is TRL's: its batch layout and shuffling, old/reference log-probs, ``_compute_loss`` for the spec's
``loss_type``, gradient accumulation, clipping, AdamW and the LR schedule, all from the same ``GRPOConfig``
keyword arguments ``twinrun plan`` shows (forced to fp32 on CPU).

The subclass only observes: the loss each micro-batch returned (summed per optimizer update, as backpropagated),
the per-token log-ratios ``_compute_loss`` saw (from TRL's own log-prob call), TRL's logged clip fraction and
gradient norm; the gradient each optimizer update applies (after TRL's clipping, read by a torch optimizer step
pre-hook: the verdict of `twinrun parity`); and it saves the weights after the requested training steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from twinrun.core.errors import TwinrunError
from twinrun.core.advantages.replay import ReplayStep, merge_ratio_stats, ratio_stats

# GRPOConfig keys that make the replay a CPU fp32 run whatever the spec's resources say
_CPU_FP32 = {"bf16": False, "fp16": False, "use_cpu": True, "use_vllm": False, "gradient_checkpointing": False}


def replay_config(spec: Any, out_dir: Path, n_steps: int) -> tuple[dict[str, Any], int]:
    """(GRPOConfig keyword arguments, optimizer updates per training step) for replaying ``n_steps`` steps."""
    from twinrun.backends.trl.compile import compile_spec

    compiled = compile_spec(spec)
    updates = int(compiled.counts["optimizer_updates"])
    kw = dict(compiled.config)
    kw.pop("vllm_mode", None)
    kw.update(_CPU_FP32)
    kw.update({
        "output_dir": str(out_dir),
        "max_steps": n_steps * updates,
        "save_strategy": "no",
        "logging_steps": 1,
        "report_to": "none",
        "log_completions": False,
        "model_init_kwargs": {"dtype": "float32"},
    })
    return kw, updates


def replay(
    spec: Any,
    steps: Sequence[ReplayStep],
    model_path: str | Path,
    out_dir: str | Path,
    *,
    save_after: Sequence[int],
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Train ``model_path`` on the recorded ``steps`` with TRL; save the weights after each training step in
    ``save_after`` (1-based) as ``out_dir/weights-step-K.safetensors``. Returns the per-update observations and
    the weight files (JSON-able)."""
    import torch
    import trl
    from datasets import Dataset
    from safetensors.torch import save_file
    from torch.optim.optimizer import register_optimizer_step_pre_hook
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    kwargs, updates_per_step = replay_config(spec, out / "trl", len(steps))
    per_step = len(steps[0].rows)
    if kwargs["per_device_train_batch_size"] * kwargs["steps_per_generation"] != per_step:
        raise TwinrunError(f"trl replay: a generation batch of {kwargs['per_device_train_batch_size']} x "
                           f"{kwargs['steps_per_generation']} rows, but {per_step} rollouts were recorded per step")
    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    state: dict[str, Any] = {"updates": [], "micro": [], "weights": {}, "grads": {}, "model": None}

    def save_grads(optimizer: Any, args: Any, kwargs: Any) -> None:
        """Before each optimizer update: the (clipped) gradient it applies, under HF names."""
        model = state["model"]
        if model is None:
            return
        u = len(state["grads"]) + 1
        path = out / f"grads-update-{u}.safetensors"
        save_file({n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().to("cpu").contiguous().clone()
                   for n, p in model.named_parameters()}, str(path))
        state["grads"][u] = str(path)

    rollout_func, recorded_reward = _recorded_rollout(steps, updates_per_step)
    ReplayGRPOTrainer, Observer = _observing_trainer(steps, updates_per_step, state, out, save_after, log)

    # one dataset row per task group; TRL's sampler repeats it num_generations (N, or N x |G| per_position) times
    rows = [{"prompt": r.group_id} for s in steps for r in s.rows[:: kwargs["num_generations"]]]
    t0 = time.perf_counter()
    trainer = ReplayGRPOTrainer(
        model=str(model_path),
        args=GRPOConfig(**kwargs),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        reward_funcs=[recorded_reward],
        rollout_func=rollout_func,
        callbacks=[Observer()],
    )
    state["model"] = trainer.model
    hook = register_optimizer_step_pre_hook(save_grads)
    try:
        trainer.train()
    finally:
        hook.remove()
    return {"backend": "trl", "framework": f"trl=={trl.__version__}", "updates": state["updates"],
            "weights": state["weights"], "grads": state["grads"], "config": {k: v for k, v in kwargs.items() if k != "output_dir"},
            "wall_s": round(time.perf_counter() - t0, 3)}


def _recorded_rollout(steps: Sequence[ReplayStep], updates_per_step: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """TRL's rollout_func and reward over the recorded rows (no generation: the recorded tokens and rewards)."""

    def rollout_func(prompts: list[str], trainer: Any) -> dict[str, Any]:
        """TRL's rollout_func contract: the recorded rows of the step being generated, in TRL's order."""
        k = trainer.state.global_step // updates_per_step
        rows = steps[k].rows
        if list(prompts) != [r.group_id for r in rows]:
            raise TwinrunError(f"trl replay: step {k + 1} was handed groups {prompts}, recorded {steps[k].group_ids} "
                               "(fix: keep shuffle_dataset=False and TRL's RepeatSampler layout)")
        out_rows = {
            "prompt_ids": [list(r.prompt_ids) for r in rows],
            "completion_ids": [list(r.completion_ids) for r in rows],
            "logprobs": None,  # sampling log-probs are not used by the update (no vLLM correction)
            "twinrun_reward": [r.reward for r in rows],
        }
        if rows[0].position is None:  # accumulated: tool results inside the completion (per_position has none)
            out_rows["env_mask"] = [list(r.completion_mask) for r in rows]
        return out_rows

    def recorded_reward(prompts: Any, completions: Any, twinrun_reward: list[float | None], **_: Any) -> list[Any]:
        return list(twinrun_reward)

    return rollout_func, recorded_reward


def _observing_trainer(steps: Sequence[ReplayStep], updates_per_step: int, state: dict[str, Any], out: Path,
                       save_after: Sequence[int], log: Callable[[str], None]) -> tuple[type, type]:
    """(GRPOTrainer with core's recorded advantages and the log-ratio of each micro-batch noted, the callback that
    notes each update and saves the weights after the compared steps)."""
    import torch
    from safetensors.torch import save_file
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from twinrun.backends.trl.trainer import DecayEveryParameter

    class ReplayGRPOTrainer(DecayEveryParameter, GRPOTrainer):
        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            out_batch = super()._generate_and_score_completions(inputs)
            k = self.state.global_step // updates_per_step
            adv = [r.advantage for r in steps[k].rows]
            out_batch["advantages"] = torch.tensor(adv, dtype=torch.float32, device=out_batch["advantages"].device)
            return out_batch

        def _get_per_token_logps_and_entropies(self, *args: Any, **kw: Any) -> Any:
            result = super()._get_per_token_logps_and_entropies(*args, **kw)
            if kw.get("compute_entropy") and self.model.training:  # the call inside _compute_loss
                self._seen_logps = result[0].detach()
            return result

        def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
            self._seen_logps = None
            loss = super()._compute_loss(model, inputs)
            logps = self._seen_logps
            old = inputs.get("old_per_token_logps")
            mask = inputs["completion_mask"] * inputs["tool_mask"] if "tool_mask" in inputs else inputs["completion_mask"]
            log_ratio = (logps - (old if old is not None else logps))[mask.bool()]
            state["micro"].append({"loss": float(loss.detach()), "ratio": ratio_stats(log_ratio.cpu().numpy())})
            return loss

    class Observer(TrainerCallback):
        def on_log(self, args: Any, st: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
            if not logs or "train_runtime" in logs:
                return
            micro, state["micro"] = state["micro"], []
            g = st.global_step
            state["updates"].append({
                "step": -(-g // updates_per_step), "update": g,
                "loss": sum(m["loss"] for m in micro),
                "ratio": merge_ratio_stats([m["ratio"] for m in micro]),
                "clip_fraction": logs.get("clip_ratio/region_mean"),
                "grad_norm": logs.get("grad_norm"),
                "lr": logs.get("learning_rate"),
                "kl": logs.get("kl"),
            })
            u = state["updates"][-1]
            log(f"  trl: update {g}/{len(steps) * updates_per_step} loss {u['loss']:+.6g} "
                f"grad_norm {_fmt(u['grad_norm'])} clip {_fmt(u['clip_fraction'])}")

        def on_step_end(self, args: Any, st: Any, control: Any, model: Any = None, **kw: Any) -> None:
            g = st.global_step
            if g % updates_per_step == 0 and g // updates_per_step in save_after:
                path = out / f"weights-step-{g // updates_per_step}.safetensors"
                save_file({k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()},
                          str(path))
                state["weights"][g // updates_per_step] = str(path)

    return ReplayGRPOTrainer, Observer


def _fmt(v: Any) -> str:
    return "n/a" if v is None else f"{float(v):.4g}"
