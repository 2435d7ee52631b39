"""spec -> TRL 1.16 `GRPOConfig` keyword arguments (pure python; `twinrun plan` shows exactly this).

Every TRL default that differs from verl's, or that twinrun relies on, is pinned here explicitly (the earlier
reproduction lost weeks to TRL's `dapo` loss and linear LR decay being left implicit, and to a floating
`steps_per_generation`). Counts are re-derived from the final keyword arguments, after `spec.overrides["trl"]`.
"""

from __future__ import annotations

from typing import Any

from twinrun.backends.compiled import (
    CompiledBackend,
    KnobSetting,
    apply_native_overrides,
    context_value,
    executor_episodes,
    world_size,
)
from twinrun.backends.trl.cpu_vllm import CPU_ENGINE, check_cpu_engine
from twinrun.core.errors import TwinrunError
from twinrun.core.spec import ExperimentSpec

TRL_VERSION = "1.16.0"
MASTER_TORCH_DTYPE = "float32"  # the master weights' dtype in both backends (verl: fsdp_config.model_dtype fp32)

# neutral loss aggregation -> TRL loss_type (docs/advantage-semantics.md §9.1, §9.2 item 5)
LOSS_TYPE = {"token_mean": "dapo", "seq_mean_token_mean": "grpo", "seq_mean_token_sum": "dr_grpo"}
SCHEDULE = {"constant": "constant", "linear": "linear", "cosine": "cosine"}
# TRL applies the advantage from core; `scale_rewards` is pinned to the same scaling so TRL's own logged
# reward statistics mean the same thing, and so the `trl` advantage preset reproduces TRL exactly.
SCALE = {"group": "group", "batch": "batch", "none": "none"}


def _schedule(spec: ExperimentSpec) -> str:
    name = SCHEDULE[spec.optimizer.schedule]
    if spec.optimizer.warmup_steps and name == "constant":
        return "constant_with_warmup"  # HF's plain "constant" ignores warmup
    return name


def rows_per_rollout(spec: ExperimentSpec) -> int:
    """Training rows one curation rollout becomes: |G| (per_position) or 1 (accumulated)."""
    return spec.environment.group_size if spec.curator.context == "per_position" else 1


def compile_spec(spec: ExperimentSpec) -> CompiledBackend:
    b = spec.batch
    w = world_size(spec)
    per_rollout = rows_per_rollout(spec)
    rows = b.trajectories * per_rollout  # training rows (sequences) per step
    per_update = rows // b.minibatches
    denom = b.micro_batch_per_device * w
    unit = "rows (one per rollout and position)" if per_rollout > 1 else "rollouts"
    if per_update % denom:
        raise TwinrunError(
            f"batch.micro_batch_per_device: {b.micro_batch_per_device} x {w} device(s) does not divide the "
            f"{per_update} {unit} of one update (fix: choose a divisor of {per_update})"
        )
    if per_rollout > 1 and (rows // w) % per_rollout:
        raise TwinrunError(
            f"resources: {w} processes split the {b.trajectories} rollouts of a step unevenly, so a process would "
            f"hold part of a rollout (fix: groups_per_step x rollouts_per_group divisible by {w})"
        )
    grad_accum = per_update // denom
    updates_per_step = b.minibatches * b.epochs
    on_cpu = spec.resources.gpus_per_node == 0

    kwargs: dict[str, Any] = {
        # --- batch: neutral units -> TRL's generation/accumulation knobs (both pinned, none left to float).
        # per_position: one dataset row per task group stands for N x |G| slots, slot r*|G|+(p-1) = (rollout r,
        # position p) (per_position.py); TRL's group statistics are replaced by core's anyway.
        "num_generations": b.rollouts_per_group * per_rollout,
        "per_device_train_batch_size": b.micro_batch_per_device,
        "gradient_accumulation_steps": grad_accum,
        "steps_per_generation": b.minibatches * grad_accum,
        "num_iterations": b.epochs,
        "max_steps": spec.steps * updates_per_step,
        "shuffle_dataset": False,  # core samples the task-group sequence; both backends see the same order
        # --- optimiser (TRL default is linear decay: pinned)
        "learning_rate": spec.optimizer.lr,
        "lr_scheduler_type": _schedule(spec),
        "warmup_steps": spec.optimizer.warmup_steps * updates_per_step,
        "weight_decay": spec.optimizer.weight_decay,
        "adam_beta1": spec.optimizer.betas[0],
        "adam_beta2": spec.optimizer.betas[1],
        "max_grad_norm": spec.optimizer.grad_clip,
        "optim": "adamw_torch",
        # --- policy loss
        "loss_type": LOSS_TYPE[spec.algorithm.loss_aggregation],  # TRL default 'dapo': pinned either way
        "scale_rewards": SCALE[spec.algorithm.scale],
        "epsilon": spec.clip.low,
        "epsilon_high": spec.clip.high,
        "delta": spec.clip.dual_clip_c,  # verl's dual clip cannot be disabled: give TRL the same bound
        "importance_sampling_level": "token",
        "beta": spec.kl.coef,
        "entropy_coef": spec.entropy_coef,
        "top_entropy_quantile": 1.0,
        "mask_truncated_completions": False,
        "off_policy_mask_threshold": None,
        "use_bias_correction_kl": False,
        "vllm_importance_sampling_correction": False,
        "multi_objective_aggregation": "sum_then_normalize",
        "reward_weights": [1.0],  # one reward function: core's composite reward
        "disable_dropout": True,
        # --- sampling of the curator
        "temperature": spec.sampling.temperature,
        "top_p": spec.sampling.top_p,
        "top_k": spec.sampling.top_k or 0,
        "min_p": None,
        "repetition_penalty": 1.0,
        # --- lengths. accumulated: one sequence per rollout, tool results (next inputs) count against the
        # completion; per_position: a row's completion is one curator turn (the per-turn cap)
        "max_completion_length": spec.curator.training_completion_tokens,
        # --- checkpoints and logging
        "save_strategy": "steps",
        "save_steps": spec.checkpoint_every * updates_per_step,
        "save_only_model": False,
        "logging_steps": 1,
        "report_to": "none",
        "seed": spec.seed,
        "data_seed": spec.seed,
        # --- precision (docs/design.md "precision is part of the arm"): fp32 master weights (the loaded model, which
        # AdamW updates; TRL 1.16's default, pinned), the spec's compute dtype as HF's bf16 mixed precision (torch
        # autocast; under DeepSpeed ZeRO-3 bf16 parameters with fp32 optimizer partitions), on CPU as on GPU so
        # the two backends compute alike. Checkpoints hold the master weights (HF save_model)
        "model_init_kwargs": {"dtype": MASTER_TORCH_DTYPE},
        "bf16": spec.curator.precision == "bf16",
        # --- device
        "use_cpu": on_cpu,
        "gradient_checkpointing": False if on_cpu else True,
        "use_vllm": False if on_cpu else True,  # on CPU: overrides.trl.use_vllm true asks for a colocated engine
    }
    if per_rollout == 1:
        kwargs["max_tool_calling_iterations"] = spec.environment.group_size
    if not on_cpu:
        kwargs["vllm_mode"] = "colocate"
    native = spec.overrides.get("trl", {})
    if on_cpu and native.get("use_vllm"):  # a CPU engine asked for (overrides.trl may still change its settings)
        kwargs.update(CPU_ENGINE)
    kwargs = apply_native_overrides(kwargs, native, "trl")
    if on_cpu and kwargs["use_vllm"]:
        check_cpu_engine(kwargs)
    counts = derive_counts(spec, kwargs, w)
    return CompiledBackend(backend="trl", framework=f"trl=={TRL_VERSION}", config=kwargs, counts=counts, knobs=_knobs(spec, kwargs))


def derive_counts(spec: ExperimentSpec, kw: dict[str, Any], world: int) -> dict[str, int]:
    """Per-step counts from TRL's own knobs (as TRL's GRPOConfig.__post_init__ derives them)."""
    gen_batch = kw["per_device_train_batch_size"] * world * kw["steps_per_generation"]  # training rows
    updates_per_gen = (kw["steps_per_generation"] // kw["gradient_accumulation_steps"]) * kw["num_iterations"]
    groups = gen_batch // kw["num_generations"]
    trajectories = gen_batch // rows_per_rollout(spec)
    return {
        "curation_trajectories": trajectories,
        "executor_episodes": executor_episodes(spec, trajectories, groups),
        "training_rows": gen_batch,
        "optimizer_updates": updates_per_gen,
        "sequences_per_update": kw["per_device_train_batch_size"] * world * kw["gradient_accumulation_steps"],
        "training_steps": kw["max_steps"] // max(updates_per_gen, 1),
    }


def _knobs(spec: ExperimentSpec, kw: dict[str, Any]) -> dict[str, KnobSetting]:
    k = KnobSetting
    agg = kw["loss_type"]
    per_rollout = rows_per_rollout(spec)
    per_position = per_rollout > 1
    return {
        "context": k(
            "rollout_func: one row per (rollout, position)" if per_position
            else "environment_factory: one tool-loop sequence per rollout",
            context_value(spec),
        ),
        "rollouts_per_group": k(
            f"num_generations={kw['num_generations']}" + (f" / |G|={per_rollout}" if per_position else ""),
            kw["num_generations"] // per_rollout,
        ),
        "groups_per_step": k(
            f"steps_per_generation={kw['steps_per_generation']} x per_device_train_batch_size="
            f"{kw['per_device_train_batch_size']} / num_generations",
            kw["per_device_train_batch_size"] * world_size(spec) * kw["steps_per_generation"] // kw["num_generations"],
        ),
        "minibatches": k(
            f"steps_per_generation/gradient_accumulation_steps={kw['steps_per_generation']}/{kw['gradient_accumulation_steps']}",
            kw["steps_per_generation"] // kw["gradient_accumulation_steps"],
            # TRL shuffles the generation batch before splitting it into updates (GRPOTrainer._prepare_inputs,
            # shuffle_sequence_dict); verl's mini-batches are contiguous: different rollouts share an update
            "TRL shuffles the rollouts of a step before splitting them into updates; verl keeps them contiguous "
            "(DIVERGENCES B6)" if kw["steps_per_generation"] // kw["gradient_accumulation_steps"] > 1 else None,
        ),
        "epochs": k(f"num_iterations={kw['num_iterations']}", kw["num_iterations"]),
        "steps": k(f"max_steps={kw['max_steps']} (optimizer steps)", derive_counts(spec, kw, world_size(spec))["training_steps"]),
        "lr": k(f"learning_rate={kw['learning_rate']}", kw["learning_rate"]),
        "schedule": k(
            f"lr_scheduler_type={kw['lr_scheduler_type']}", kw["lr_scheduler_type"].removesuffix("_with_warmup")
        ),
        "warmup_steps": k(f"warmup_steps={kw['warmup_steps']} (optimizer steps)", spec.optimizer.warmup_steps),
        "weight_decay": k(f"weight_decay={kw['weight_decay']} (every parameter, as verl)", kw["weight_decay"]),
        "betas": k(f"adam_beta1/2={kw['adam_beta1']}/{kw['adam_beta2']}", (kw["adam_beta1"], kw["adam_beta2"])),
        "grad_clip": k(f"max_grad_norm={kw['max_grad_norm']}", kw["max_grad_norm"]),
        "clip_low": k(f"epsilon={kw['epsilon']}", kw["epsilon"]),
        "clip_high": k(f"epsilon_high={kw['epsilon_high']}", kw["epsilon_high"]),
        "dual_clip_c": k(f"delta={kw['delta']}", kw["delta"]),
        "kl_coef": k(f"beta={kw['beta']}", kw["beta"]),
        "kl_estimator": k(
            "k3 (TRL's only estimator)",
            "k3",
            None if spec.kl.estimator == "k3" else "TRL computes only the k3 KL estimator",
        ),
        "entropy_coef": k(f"entropy_coef={kw['entropy_coef']}", kw["entropy_coef"]),
        "temperature": k(f"temperature={kw['temperature']}", kw["temperature"]),
        "top_p": k(f"top_p={kw['top_p']}", kw["top_p"]),
        "top_k": k(f"top_k={kw['top_k']}", kw["top_k"] or None),
        "advantage": k(
            f"core {spec.algorithm.estimator} (GRPOTrainer subclass replaces TRL's advantages)",
            spec.algorithm.estimator,
        ),
        "advantage_scale": k(f"scale_rewards={kw['scale_rewards']} (core applies it)", kw["scale_rewards"]),
        "loss_aggregation": k(f"loss_type={agg}", spec.algorithm.loss_aggregation),
        "max_prompt_tokens": k("(no prompt cap in GRPOConfig 1.16; core truncates chi_1)", spec.curator.max_prompt_tokens),
        "max_response_tokens": k(
            f"max_completion_length={kw['max_completion_length']} (one row = one turn)", kw["max_completion_length"],
        ) if per_position else k(
            "(no per-turn cap in the TRL tool loop)",
            None,
            "TRL's multi-turn loop caps only the whole completion, not each curator turn",
        ),
        "max_completion_tokens": k("(unused: a row is one turn)", None) if per_position else k(
            f"max_completion_length={kw['max_completion_length']}", kw["max_completion_length"]),
        **_precision_knobs(kw),
        "checkpoint_every": k(f"save_steps={kw['save_steps']} (optimizer steps)", spec.checkpoint_every),
        "seed": k(f"seed={kw['seed']}", kw["seed"]),
    }


TORCH_TO_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "auto": "auto (the checkpoint's)"}


def _precision_knobs(kw: dict[str, Any]) -> dict[str, KnobSetting]:
    """Master weights, compute dtype and checkpoint dtype as these GRPOConfig arguments realise them. On GPUs TRL
    runs under the accelerate launch (experiments/cluster/trl-accelerate-zero3.yaml), which GRPOConfig does not see:
    DeepSpeed ZeRO-3 exports the checkpoint with its 16-bit consolidation (bf16), not the fp32 master partitions
    (DIVERGENCES B19)."""
    k = KnobSetting
    on_gpu = not kw.get("use_cpu")
    loaded = str((kw.get("model_init_kwargs") or {}).get("dtype", MASTER_TORCH_DTYPE)).removeprefix("torch.")
    master = TORCH_TO_SHORT.get(loaded, loaded)
    compute = "fp16" if kw.get("fp16") else ("bf16" if kw.get("bf16") else master)
    return {
        "master_weights": k(f"model_init_kwargs.dtype={loaded} (the trained model, AdamW state)", master),
        "compute_dtype": k(
            f"bf16={bool(kw.get('bf16'))} (HF mixed precision: autocast; DeepSpeed: bf16 params, fp32 optimizer)",
            compute),
        "checkpoint_dtype": k(
            "save_model writes the trained model's weights (master dtype)" + (
                "; under the ZeRO-3 launch: DeepSpeed's 16-bit consolidation" if on_gpu and kw.get("bf16") else ""),
            "bf16" if on_gpu and kw.get("bf16") else master,
            "the ZeRO-3 recipe saves DeepSpeed's bf16 module weights, not its fp32 master partitions (DIVERGENCES "
            "B19)" if on_gpu and kw.get("bf16") else None),
    }


def structural_settings(spec: ExperimentSpec) -> dict[str, str]:
    """TRL's spelling of `twinrun plan`'s structural rows (app/plan.py names and explains each; registry hook)."""
    per_position = spec.curator.context == "per_position"
    return {
        "sample_unit": "rollout_func, num_generations = N x |G|" if per_position else "environment_factory tool loop",
        "completion_overflow": "drops the overflowing tool result and stops",
        "log_ratio_clamp": "none",
        "loss_normaliser": "dr_grpo: sum / (batch x max_completion_length)",
        "minibatch_composition": "shuffles the generation batch before splitting",
        "kl_placement": "beta*KL inside each token's loss",
    }
